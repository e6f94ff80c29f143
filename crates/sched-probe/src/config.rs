//! Settings of a [`Probe`](crate::Probe) and their validation.

use std::fmt;
use std::time::Duration;

use elastic_cpu_core::SettingError;

/// Settings of a [`Probe`](crate::Probe).
///
/// The defaults follow the design: 100 ms ticks, a 2.5 s window (25 intervals), histograms that
/// track 1 µs .. 10 s with 2 significant figures.
///
/// Precision: a recorded value is kept to within 1 % (2 significant figures) or to within
/// `lowest` in absolute terms, whichever is larger (below about 100 × `lowest` the buckets are a
/// fixed width just under `lowest`). Percentiles report the upper end of their bucket.
///
/// ```
/// use elastic_cpu_probe::ProbeConfig;
/// use std::time::Duration;
///
/// let config = ProbeConfig { tick: Duration::from_millis(50), ..ProbeConfig::default() };
/// assert_eq!(config.intervals(), 50);
/// config.validate().unwrap();
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeConfig {
    /// Length of one interval: how often [`Probe::rotate`](crate::Probe::rotate) is expected to
    /// be called. Must be > 0.
    pub tick: Duration,
    /// Length of the sliding window the percentiles cover. Must be ≥ `tick`; the window holds
    /// `ceil(window / tick)` intervals.
    pub window: Duration,
    /// Smallest value the histograms tell apart from 0 (values below it are recorded in the
    /// first bucket). Must be > 0.
    pub lowest: Duration,
    /// Largest value the histograms track; larger values are clamped to it. Must be at least
    /// twice `lowest` and at most `u64::MAX / 2` nanoseconds.
    pub highest: Duration,
    /// Significant decimal digits the histograms keep, 1 ..= 5 (2 = within 1 %).
    pub significant_figures: u8,
    /// With task hooks: measure poll time on one task poll in this many, per worker thread
    /// (default 8; 1 = every poll). Each measured poll costs two clock reads, about a fifth of
    /// what the probe adds to a poll (BENCHMARKS.md); sampling saves them on the other polls, at
    /// the price of a sampled poll-time distribution (its `count`s are about 1/n of the polls).
    /// Poll time is a diagnostic: the controller steers by queue latency, which is recorded on
    /// every poll regardless (tokio measures it). Must be ≥ 1. No effect on
    /// [`Probe::record_poll`].
    ///
    /// [`Probe::record_poll`]: crate::Probe::record_poll
    pub poll_time_every: u32,
    /// Raise the probe's alarm when a foreground task waited at least this long in a run queue
    /// (see [`Probe::take_alarm`](crate::Probe::take_alarm)): the sign of a backlog, seen the
    /// moment the task is polled rather than at the next window. `None` (the default) never
    /// raises it. Must be > 0.
    pub alarm_at: Option<Duration>,
    /// The outlier trap's threshold: polls that ran longer, and foreground tasks that waited
    /// longer in a run queue, are kept with their spawn site ([`Probe::outliers`]). `None` (the
    /// default) leaves the trap off; [`Probe::set_outlier_threshold`] changes it while the
    /// probe runs (the pacer keeps it at its controller's target). Must be > 0.
    ///
    /// [`Probe::outliers`]: crate::Probe::outliers
    /// [`Probe::set_outlier_threshold`]: crate::Probe::set_outlier_threshold
    pub outlier_threshold: Option<Duration>,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            tick: Duration::from_millis(100),
            window: Duration::from_millis(2500),
            lowest: Duration::from_micros(1),
            highest: Duration::from_secs(10),
            significant_figures: 2,
            poll_time_every: 8,
            alarm_at: None,
            outlier_threshold: None,
        }
    }
}

impl ProbeConfig {
    /// Checks every setting; the first bad one is returned as a [`SettingError`] naming it.
    ///
    /// ```
    /// use elastic_cpu_probe::ProbeConfig;
    /// use std::time::Duration;
    ///
    /// let bad = ProbeConfig { tick: Duration::ZERO, ..ProbeConfig::default() };
    /// assert_eq!(bad.validate().unwrap_err().setting, "tick");
    /// ```
    pub fn validate(&self) -> Result<(), SettingError> {
        let refuse = |setting, value: &dyn fmt::Debug, expected| {
            Err(SettingError::new(setting, format!("{value:?}"), expected))
        };
        if self.tick.is_zero() {
            return refuse("tick", &self.tick, "above zero");
        }
        if self.window < self.tick {
            return refuse("window", &self.window, "at least one tick");
        }
        if self.lowest.is_zero() {
            return refuse("lowest", &self.lowest, "above zero");
        }
        if self.highest.as_nanos() < 2 * self.lowest.as_nanos() {
            return refuse("highest", &self.highest, "at least twice lowest");
        }
        if self.highest.as_nanos() > u128::from(u64::MAX / 2) {
            return refuse("highest", &self.highest, "at most u64::MAX / 2 nanoseconds");
        }
        if !(1..=5).contains(&self.significant_figures) {
            return refuse("significant_figures", &self.significant_figures, "1 ..= 5");
        }
        // hdrhistogram needs `lowest`'s magnitude plus the sub-bucket magnitude within 63 bits.
        let unit_magnitude = 63 - self.lowest_ns().leading_zeros();
        let largest = 2 * 10u64.pow(u32::from(self.significant_figures));
        if unit_magnitude + (64 - (largest - 1).leading_zeros()) > 63 {
            return refuse(
                "lowest",
                &self.lowest,
                "small enough to keep significant_figures digits in a 64-bit histogram",
            );
        }
        if self.poll_time_every == 0 {
            return refuse("poll_time_every", &self.poll_time_every, "at least 1");
        }
        if self.alarm_at == Some(Duration::ZERO) {
            return refuse("alarm_at", &self.alarm_at, "above zero, or None");
        }
        if self.outlier_threshold == Some(Duration::ZERO) {
            return refuse(
                "outlier_threshold",
                &self.outlier_threshold,
                "above zero, or None",
            );
        }
        Ok(())
    }

    /// Number of intervals the window holds: `ceil(window / tick)` (at least 1).
    ///
    /// ```
    /// assert_eq!(elastic_cpu_probe::ProbeConfig::default().intervals(), 25);
    /// ```
    pub fn intervals(&self) -> usize {
        let tick = self.tick.as_nanos().max(1);
        let n = self.window.as_nanos().div_ceil(tick).max(1);
        usize::try_from(n).unwrap_or(usize::MAX)
    }

    pub(crate) fn lowest_ns(&self) -> u64 {
        u64::try_from(self.lowest.as_nanos()).unwrap_or(u64::MAX)
    }

    pub(crate) fn highest_ns(&self) -> u64 {
        u64::try_from(self.highest.as_nanos()).unwrap_or(u64::MAX)
    }
}
