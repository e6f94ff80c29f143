//! The step controller (docs/design.md §4): one tick per probe tick; it decides the share, the part of
//! the CPUs elastic work may use.

use std::time::Duration;

use crate::config::ControllerConfig;
use crate::error::SettingError;
use crate::recent_low::RecentLow;

/// Decides the elastic share of the CPUs (in `[min_share, max_share]`)
/// from the p99 scheduling latency.
///
/// ```
/// use elastic_cpu_core::{ControllerConfig, StepController};
/// use std::time::Duration;
///
/// let mut c = StepController::new(ControllerConfig::default()).unwrap();
/// assert_eq!(c.share(), 0.05);
/// // Below target with work waiting: step up by delta_per_sec * 0.1 s = 0.0001.
/// let l = c.tick(Some(Duration::from_micros(200)), Duration::from_millis(100), true);
/// assert!((l - 0.0501).abs() < 1e-12);
/// ```
#[derive(Clone, Debug)]
pub struct StepController {
    config: ControllerConfig,
    share: f64,
    /// Multiple of the step the next step up takes (slow start; 1 unless boosting).
    boost: u32,
    /// The lowest p99 of the last 8 windows: "far below the target" is the lower 2/3 of the
    /// way from it to the target (as HyStart's delay test measures from the lowest RTT), not
    /// of the way from zero.
    recent_low: RecentLow,
    /// The last step was down (a descent is under way).
    falling: bool,
    /// Where the last descent began; boosted steps stop at half of it (TCP's slow-start
    /// threshold). `None` before any descent and once lifted: no threshold below `max_share`.
    descent_from: Option<f64>,
    /// Time spent far below the target at or above `descent_from` since: a whole window of it
    /// (the p99 window then holds no sample from below that level) lifts the threshold.
    calm: Duration,
}

impl StepController {
    /// A controller starting at `min_share`; fails if the config is invalid.
    pub fn new(config: ControllerConfig) -> Result<Self, SettingError> {
        config.validate()?;
        let share = config.min_share;
        Ok(Self::at(config, share))
    }

    /// A controller starting at `share`, clamped into `[min_share, max_share]`;
    /// fails if the config is invalid or `share` is NaN.
    ///
    /// ```
    /// use elastic_cpu_core::{ControllerConfig, StepController};
    /// let c = StepController::with_initial_share(ControllerConfig::default(), 2.0).unwrap();
    /// assert_eq!(c.share(), 0.75);
    /// ```
    pub fn with_initial_share(config: ControllerConfig, share: f64) -> Result<Self, SettingError> {
        config.validate()?;
        if share.is_nan() {
            return Err(SettingError::new(
                "initial_share",
                share.to_string(),
                "a number",
            ));
        }
        let share = share.clamp(config.min_share, config.max_share);
        Ok(Self::at(config, share))
    }

    /// A controller at `share` (within the valid `config`'s range), with no history.
    fn at(config: ControllerConfig, share: f64) -> Self {
        Self {
            falling: false,
            descent_from: None,
            calm: Duration::ZERO,
            config,
            share,
            boost: 1,
            recent_low: RecentLow::default(),
        }
    }

    /// One controller step over `period`; returns the new share.
    ///
    /// * `p99 > target`: step down by `delta × decrease_factor`.
    /// * otherwise, if elastic work waited since the last tick: step up by `delta × boost`.
    ///   The boost is 1 unless the p99 is far below the target: in the lower 2/3 of the way from
    ///   the lowest p99 of the last 8 windows to the target (at most 2/3 of the target when that
    ///   low is zero). Then each step up in a row doubles it, up to `max_boost` (slow start: far
    ///   below the target the share climbs in seconds, not in a minute). Measuring from the
    ///   recent low, not from zero, keeps the climb fast under a tight target, one just above
    ///   what the runtime shows with no elastic work at all. Any other tick resets the boost to
    ///   1, so near the target, and on every reversal, the steps are single. As TCP's slow
    ///   start, boosting stops at a threshold: half the share where the last descent began
    ///   (`max_share` before any; a descent that begins below twice the floor sets none), so a
    ///   dip in the p99 at rest climbs back in single steps instead of overshooting again: no
    ///   dithering at rest. Back where that descent began and still far below the target for a
    ///   whole `window`, the threshold is lifted (a descent from a low level must not slow the
    ///   climb for good: its cause is gone). Steps down are never boosted: the p99 window lags
    ///   the share by up to a window, and a boosted descent would overshoot to the floor before
    ///   the window showed its effect.
    /// * otherwise (idle): decay by `delta × inactive_decrease_factor` toward the inactive point,
    ///   never below it.
    ///
    /// `p99 = None` means the window had no samples: that is not evidence the runtime is healthy,
    /// so the share never rises on it. With waiters it holds; without, only the idle decay applies.
    pub fn tick(&mut self, p99: Option<Duration>, period: Duration, had_waiters: bool) -> f64 {
        let c = &self.config;
        let (min, max) = (c.min_share, c.max_share);
        let delta = c.delta_per_sec * period.as_secs_f64();
        let old = self.share;
        // Far below: p ≤ low + 2/3 × (target − low), without division: 3p ≤ low + 2 × target.
        let far_below = p99.is_some_and(|p| {
            let low = self.recent_low.record(p, period, c.window);
            p.saturating_mul(3) <= low.saturating_add(c.target_p99.saturating_mul(2))
        });
        let boost = self.boost;
        self.boost = 1;
        let new = match p99 {
            Some(p) if p > c.target_p99 => {
                if !self.falling {
                    self.falling = true;
                    // Half of a start below twice the floor lies at or under it, where boosts
                    // could never resume: such a descent (often start-up noise in the first
                    // windows of a fresh controller) sets no threshold.
                    if old / 2.0 > min {
                        self.descent_from = Some(old);
                    }
                }
                self.calm = Duration::ZERO;
                old - delta * c.decrease_factor
            }
            Some(_) if had_waiters => {
                self.falling = false;
                let boost_until = self.descent_from.map_or(max, |from| from / 2.0);
                if far_below && old < boost_until {
                    self.boost = boost.saturating_mul(2).min(c.max_boost);
                    // A boosted step ends at the threshold (a single step may cross it).
                    (old + delta * f64::from(boost)).min(boost_until.max(old + delta))
                } else {
                    if far_below && self.descent_from.is_some_and(|from| old >= from) {
                        self.calm = self.calm.saturating_add(period);
                        if self.calm >= c.window {
                            self.descent_from = None;
                        }
                    } else {
                        self.calm = Duration::ZERO;
                    }
                    old + delta
                }
            }
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
        self.share = new.clamp(min, max);
        self.share
    }

    /// Lowers the share to at most `share`, never under the floor (a share above it is left
    /// alone). For a caller that bounds this controller by another's: the next
    /// [`tick`](Self::tick) steps from there.
    ///
    /// ```
    /// use elastic_cpu_core::{ControllerConfig, StepController};
    ///
    /// let mut c = StepController::with_initial_share(ControllerConfig::default(), 0.6).unwrap();
    /// c.lower_to(0.2);
    /// assert_eq!(c.share(), 0.2);
    /// c.lower_to(0.4);
    /// assert_eq!(c.share(), 0.2);
    /// c.lower_to(0.0);
    /// assert_eq!(c.share(), c.config().min_share);
    /// ```
    pub fn lower_to(&mut self, share: f64) {
        if share < self.share {
            self.share = share.max(self.config.min_share);
        }
    }

    /// Move the bounds to `[min_share, max_share]`, validated as [`ControllerConfig::validate`]
    /// checks them (a bad pair is an error and changes nothing), and bring the share into them.
    /// The slow-start state is kept: the next [`tick`](Self::tick) steps from there, within the
    /// new bounds.
    ///
    /// ```
    /// use elastic_cpu_core::{ControllerConfig, StepController};
    ///
    /// let mut c = StepController::with_initial_share(ControllerConfig::default(), 0.6).unwrap();
    /// c.set_bounds(0.1, 0.3).unwrap();
    /// assert_eq!(c.share(), 0.3);
    /// assert_eq!(c.set_bounds(0.5, 0.2).unwrap_err().setting, "max_share");
    /// assert_eq!((c.config().min_share, c.config().max_share), (0.1, 0.3));
    /// ```
    pub fn set_bounds(&mut self, min_share: f64, max_share: f64) -> Result<(), SettingError> {
        let config = ControllerConfig {
            min_share,
            max_share,
            ..self.config.clone()
        };
        config.validate()?;
        self.config = config;
        self.share = self.share.clamp(min_share, max_share);
        Ok(())
    }

    /// The multiple of the step the next step up will take (1 unless a run of steps far below
    /// the target is under way; at most `max_boost`).
    pub fn boost(&self) -> u32 {
        self.boost
    }

    /// The current share.
    pub fn share(&self) -> f64 {
        self.share
    }

    /// The settings in force.
    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    /// Move the target (a caller that measures what the target should be, as the pacer's
    /// automatic target does), clamped into its valid range (50 µs ..= 1 s). The share and the
    /// slow-start state are kept.
    ///
    /// ```
    /// use elastic_cpu_core::{ControllerConfig, StepController};
    /// use std::time::Duration;
    ///
    /// let mut c = StepController::new(ControllerConfig::default()).unwrap();
    /// c.set_target(Duration::from_micros(300));
    /// assert_eq!(c.config().target_p99, Duration::from_micros(300));
    /// c.set_target(Duration::ZERO);
    /// assert_eq!(c.config().target_p99, Duration::from_micros(50));
    /// ```
    pub fn set_target(&mut self, target: Duration) {
        self.config.target_p99 = target.clamp(Duration::from_micros(50), Duration::from_secs(1));
    }
}
