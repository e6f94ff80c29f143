//! Controller settings (DESIGN.md §4) and their validation.

use std::fmt;
use std::time::Duration;

/// Settings of the [`StepController`](crate::StepController); the defaults are CockroachDB's.
///
/// ```
/// use elastic_cpu_core::ControllerConfig;
/// use std::time::Duration;
///
/// let config = ControllerConfig {
///     target_p99: Duration::from_micros(500),
///     ..ControllerConfig::default()
/// };
/// assert!(config.validate().is_ok());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ControllerConfig {
    /// p99 scheduling latency above which the limit steps down. Valid: 50 µs ..= 1 s.
    pub target_p99: Duration,
    /// Floor of the limit, and the initial limit. Valid: 0.01 ..= 1.0.
    pub min_utilization: f64,
    /// Ceiling of the limit. Valid: 0.05 ..= 1.0 and ≥ `min_utilization`.
    pub max_utilization: f64,
    /// Where idle decay stops, as a fraction of the way from min to max. Valid: 0 ..= 1.
    pub inactive_point: f64,
    /// Step size per second of tick period. Valid: 0.0001 ..= 1.0.
    pub delta_per_sec: f64,
    /// Multiplier on the step when latency is above target. Valid: > 0.
    pub decrease_factor: f64,
    /// Multiplier on the step of the idle decay. Valid: > 0.
    pub inactive_decrease_factor: f64,
    /// Controller tick period. Valid: > 0.
    pub tick: Duration,
    /// Window of the p99 measurement. Valid: ≥ `tick`.
    pub window: Duration,
}

impl Default for ControllerConfig {
    /// [`ControllerConfig::cockroach`].
    fn default() -> Self {
        Self::cockroach()
    }
}

impl ControllerConfig {
    /// CockroachDB's defaults: 1 ms target, limit 0.05 ..= 0.75, inactive point 0.10, delta
    /// 0.001/s, decrease factor 2, inactive factor 0.25, 100 ms ticks, 2.5 s window.
    ///
    /// ```
    /// use elastic_cpu_core::ControllerConfig;
    /// assert_eq!(ControllerConfig::cockroach().max_utilization, 0.75);
    /// ```
    pub fn cockroach() -> Self {
        Self {
            target_p99: Duration::from_millis(1),
            min_utilization: 0.05,
            max_utilization: 0.75,
            inactive_point: 0.10,
            delta_per_sec: 0.001,
            decrease_factor: 2.0,
            inactive_decrease_factor: 0.25,
            tick: Duration::from_millis(100),
            window: Duration::from_millis(2500),
        }
    }

    /// Check every setting against its valid range; the error names the first bad setting.
    ///
    /// ```
    /// use elastic_cpu_core::ControllerConfig;
    ///
    /// let bad = ControllerConfig { min_utilization: f64::NAN, ..Default::default() };
    /// assert_eq!(bad.validate().unwrap_err().setting(), "min_utilization");
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        let dur = |setting, d: Duration, ok: bool, reason| {
            if ok {
                Ok(())
            } else {
                Err(ConfigError::invalid(setting, format!("{d:?}"), reason))
            }
        };
        dur(
            "target_p99",
            self.target_p99,
            (Duration::from_micros(50)..=Duration::from_secs(1)).contains(&self.target_p99),
            "must be between 50µs and 1s",
        )?;
        range(
            "min_utilization",
            self.min_utilization,
            0.01,
            1.0,
            "must be between 0.01 and 1.0",
        )?;
        range(
            "max_utilization",
            self.max_utilization,
            0.05,
            1.0,
            "must be between 0.05 and 1.0",
        )?;
        if self.max_utilization < self.min_utilization {
            return Err(ConfigError::invalid(
                "max_utilization",
                self.max_utilization.to_string(),
                "must not be below min_utilization",
            ));
        }
        range(
            "inactive_point",
            self.inactive_point,
            0.0,
            1.0,
            "must be between 0 and 1",
        )?;
        range(
            "delta_per_sec",
            self.delta_per_sec,
            0.0001,
            1.0,
            "must be between 0.0001 and 1.0",
        )?;
        positive("decrease_factor", self.decrease_factor)?;
        positive("inactive_decrease_factor", self.inactive_decrease_factor)?;
        dur(
            "tick",
            self.tick,
            !self.tick.is_zero(),
            "must be above zero",
        )?;
        dur(
            "window",
            self.window,
            self.window >= self.tick,
            "must not be shorter than tick",
        )?;
        Ok(())
    }
}

fn range(
    setting: &'static str,
    v: f64,
    lo: f64,
    hi: f64,
    reason: &'static str,
) -> Result<(), ConfigError> {
    if v.is_finite() && (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(ConfigError::invalid(setting, v.to_string(), reason))
    }
}

fn positive(setting: &'static str, v: f64) -> Result<(), ConfigError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            setting,
            v.to_string(),
            "must be a finite number above zero",
        ))
    }
}

/// An invalid setting, named.
///
/// ```
/// use elastic_cpu_core::{ConfigError, ControllerConfig};
/// use std::time::Duration;
///
/// let bad = ControllerConfig { tick: Duration::ZERO, ..Default::default() };
/// let err = bad.validate().unwrap_err();
/// assert_eq!(err.setting(), "tick");
/// assert!(err.to_string().contains("tick"));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `setting` has `value`, which breaks the rule in `reason`.
    Invalid {
        /// The field name, as spelled in the config struct.
        setting: &'static str,
        /// The rejected value, formatted.
        value: String,
        /// The rule it breaks.
        reason: &'static str,
    },
}

impl ConfigError {
    /// An invalid-setting error (for layers that validate their own settings the same way).
    pub fn invalid(setting: &'static str, value: impl Into<String>, reason: &'static str) -> Self {
        Self::Invalid {
            setting,
            value: value.into(),
            reason,
        }
    }

    /// The name of the offending setting.
    pub fn setting(&self) -> &'static str {
        match self {
            Self::Invalid { setting, .. } => setting,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid {
                setting,
                value,
                reason,
            } => write!(
                f,
                "invalid elastic CPU setting `{setting}` = {value}: {reason}"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}
