//! The step controller (docs/design.md §4): one tick per probe tick, limit as a share of the CPUs.

use std::time::Duration;

use crate::config::ControllerConfig;
use crate::error::SettingError;

/// Decides the elastic CPU limit (a share of the CPUs, in `[min_limit, max_limit]`)
/// from the p99 scheduling latency.
///
/// ```
/// use elastic_cpu_core::{ControllerConfig, StepController};
/// use std::time::Duration;
///
/// let mut c = StepController::new(ControllerConfig::default()).unwrap();
/// assert_eq!(c.limit(), 0.05);
/// // Below target with work waiting: step up by delta_per_sec * 0.1 s = 0.0001.
/// let l = c.tick(Some(Duration::from_micros(200)), Duration::from_millis(100), true);
/// assert!((l - 0.0501).abs() < 1e-12);
/// ```
#[derive(Clone, Debug)]
pub struct StepController {
    config: ControllerConfig,
    limit: f64,
}

impl StepController {
    /// A controller starting at `min_limit`; fails if the config is invalid.
    pub fn new(config: ControllerConfig) -> Result<Self, SettingError> {
        config.validate()?;
        let limit = config.min_limit;
        Ok(Self { config, limit })
    }

    /// A controller starting at `limit`, clamped into `[min_limit, max_limit]`;
    /// fails if the config is invalid or `limit` is NaN.
    ///
    /// ```
    /// use elastic_cpu_core::{ControllerConfig, StepController};
    /// let c = StepController::with_initial_limit(ControllerConfig::default(), 2.0).unwrap();
    /// assert_eq!(c.limit(), 0.75);
    /// ```
    pub fn with_initial_limit(config: ControllerConfig, limit: f64) -> Result<Self, SettingError> {
        config.validate()?;
        if limit.is_nan() {
            return Err(SettingError::new(
                "initial_limit",
                limit.to_string(),
                "a number",
            ));
        }
        let limit = limit.clamp(config.min_limit, config.max_limit);
        Ok(Self { config, limit })
    }

    /// One controller step over `period`; returns the new limit.
    ///
    /// * `p99 > target`: step down by `delta × decrease_factor`.
    /// * otherwise, if elastic work waited since the last tick: step up by `delta`.
    /// * otherwise (idle): decay by `delta × inactive_decrease_factor` toward the inactive point,
    ///   never below it.
    ///
    /// `p99 = None` means the window had no samples: that is not evidence the runtime is healthy,
    /// so the limit never rises on it. With waiters it holds; without, only the idle decay applies.
    pub fn tick(&mut self, p99: Option<Duration>, period: Duration, had_waiters: bool) -> f64 {
        let c = &self.config;
        let (min, max) = (c.min_limit, c.max_limit);
        let delta = c.delta_per_sec * period.as_secs_f64();
        let old = self.limit;
        let new = match p99 {
            Some(p) if p > c.target_p99 => old - delta * c.decrease_factor,
            Some(_) if had_waiters => old + delta,
            None if had_waiters => old,
            _ => {
                let inactive = min + c.inactive_point * (max - min);
                if old > inactive {
                    (old - delta * c.inactive_decrease_factor).clamp(inactive, max)
                } else {
                    old
                }
            }
        };
        // Every branch ends in [min, max]: the inactive point lies inside it.
        self.limit = new.clamp(min, max);
        self.limit
    }

    /// The current limit.
    pub fn limit(&self) -> f64 {
        self.limit
    }

    /// The settings in force.
    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }
}
