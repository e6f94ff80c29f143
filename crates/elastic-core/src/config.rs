//! Controller settings (docs/design.md §4) and their validation.

use crate::error::SettingError;
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
    /// p99 scheduling latency above which the share steps down. Valid: 50 µs ..= 1 s.
    pub target_p99: Duration,
    /// Floor of the share, and its initial value. Valid: 0.01 ..= 1.0.
    pub min_share: f64,
    /// Ceiling of the share. Valid: 0.05 ..= 1.0 and ≥ `min_share`.
    pub max_share: f64,
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
    /// Largest multiple of the step an upward run may grow to (slow start): while the p99 stays
    /// far below the target (in the lower 2/3 of the way from the lowest p99 of the last 8
    /// windows to the target), each further step up in a row doubles, up to this; any other
    /// tick takes single steps again. 1: fixed steps (CockroachDB). Valid: 1 ..= 64.
    pub max_boost: u32,
}

impl Default for ControllerConfig {
    /// [`ControllerConfig::cockroach`].
    fn default() -> Self {
        Self::cockroach()
    }
}

impl ControllerConfig {
    /// The library's defaults (the pacer's `Profile::Default`): CockroachDB's target and
    /// bounds, with steps of 0.05 a second over a 1 s window, boosted up to 8 × while the
    /// signal stays far under its target: minutes to cover the range become seconds.
    ///
    /// ```
    /// use elastic_cpu_core::ControllerConfig;
    /// assert_eq!(ControllerConfig::library().delta_per_sec, 0.05);
    /// assert!(ControllerConfig::library().validate().is_ok());
    /// ```
    pub fn library() -> Self {
        Self {
            delta_per_sec: 0.05,
            window: Duration::from_secs(1),
            max_boost: 8,
            ..Self::cockroach()
        }
    }

    /// CockroachDB's defaults: 1 ms target, share 0.05 ..= 0.75, inactive point 0.10, delta
    /// 0.001/s, decrease factor 2, inactive factor 0.25, 100 ms ticks, 2.5 s window, fixed steps
    /// (`max_boost` 1).
    ///
    /// ```
    /// use elastic_cpu_core::ControllerConfig;
    /// assert_eq!(ControllerConfig::cockroach().max_share, 0.75);
    /// ```
    pub fn cockroach() -> Self {
        Self {
            target_p99: Duration::from_millis(1),
            min_share: 0.05,
            max_share: 0.75,
            inactive_point: 0.10,
            delta_per_sec: 0.001,
            decrease_factor: 2.0,
            inactive_decrease_factor: 0.25,
            tick: Duration::from_millis(100),
            window: Duration::from_millis(2500),
            max_boost: 1,
        }
    }

    /// Check every setting against its valid range; the error names the first bad setting.
    ///
    /// ```
    /// use elastic_cpu_core::ControllerConfig;
    ///
    /// let bad = ControllerConfig { min_share: f64::NAN, ..Default::default() };
    /// assert_eq!(bad.validate().unwrap_err().setting, "min_share");
    /// ```
    pub fn validate(&self) -> Result<(), SettingError> {
        let dur = |setting, d: Duration, ok: bool, reason| {
            if ok {
                Ok(())
            } else {
                Err(SettingError::new(setting, format!("{d:?}"), reason))
            }
        };
        dur(
            "target_p99",
            self.target_p99,
            (Duration::from_micros(50)..=Duration::from_secs(1)).contains(&self.target_p99),
            "50 µs ..= 1 s",
        )?;
        range("min_share", self.min_share, 0.01, 1.0, "0.01 ..= 1.0")?;
        range("max_share", self.max_share, 0.05, 1.0, "0.05 ..= 1.0")?;
        if self.max_share < self.min_share {
            return Err(SettingError::new(
                "max_share",
                self.max_share.to_string(),
                "at least min_share",
            ));
        }
        range(
            "inactive_point",
            self.inactive_point,
            0.0,
            1.0,
            "0.0 ..= 1.0",
        )?;
        range(
            "delta_per_sec",
            self.delta_per_sec,
            0.0001,
            1.0,
            "0.0001 ..= 1.0",
        )?;
        positive("decrease_factor", self.decrease_factor)?;
        positive("inactive_decrease_factor", self.inactive_decrease_factor)?;
        dur("tick", self.tick, !self.tick.is_zero(), "above zero")?;
        dur(
            "window",
            self.window,
            self.window >= self.tick,
            "at least tick",
        )?;
        if !(1..=64).contains(&self.max_boost) {
            return Err(SettingError::new(
                "max_boost",
                self.max_boost.to_string(),
                "1 ..= 64",
            ));
        }
        Ok(())
    }
}

fn range(
    setting: &'static str,
    v: f64,
    lo: f64,
    hi: f64,
    reason: &'static str,
) -> Result<(), SettingError> {
    if v.is_finite() && (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(SettingError::new(setting, v.to_string(), reason))
    }
}

fn positive(setting: &'static str, v: f64) -> Result<(), SettingError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(SettingError::new(
            setting,
            v.to_string(),
            "a finite number above zero",
        ))
    }
}
