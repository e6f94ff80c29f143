//! Settings of a [`Probe`](crate::Probe) and their validation.

use std::fmt;
use std::time::Duration;

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
    /// (1, the default, = every poll). Each measured poll costs two clock reads; values above 1
    /// save them on the other polls, at the price of a sampled poll-time distribution (its
    /// `count`s are then about 1/n of the polls). Queue latency is recorded on every poll
    /// regardless (tokio measures it). Must be ≥ 1. No effect on [`Probe::record_poll`].
    ///
    /// [`Probe::record_poll`]: crate::Probe::record_poll
    pub poll_time_every: u32,
    /// Raise the probe's alarm when a foreground task waited at least this long in a run queue
    /// (see [`Probe::take_alarm`](crate::Probe::take_alarm)): the sign of a backlog, seen the
    /// moment the task is polled rather than at the next window. `None` (the default) never
    /// raises it. Must be > 0.
    pub alarm_at: Option<Duration>,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            tick: Duration::from_millis(100),
            window: Duration::from_millis(2500),
            lowest: Duration::from_micros(1),
            highest: Duration::from_secs(10),
            significant_figures: 2,
            poll_time_every: 1,
            alarm_at: None,
        }
    }
}

impl ProbeConfig {
    /// Checks every setting; the first bad one is returned as its [`ProbeError`].
    ///
    /// ```
    /// use elastic_cpu_probe::{ProbeConfig, ProbeError};
    /// use std::time::Duration;
    ///
    /// let bad = ProbeConfig { tick: Duration::ZERO, ..ProbeConfig::default() };
    /// assert_eq!(bad.validate(), Err(ProbeError::ZeroTick));
    /// ```
    pub fn validate(&self) -> Result<(), ProbeError> {
        if self.tick.is_zero() {
            return Err(ProbeError::ZeroTick);
        }
        if self.window < self.tick {
            return Err(ProbeError::WindowShorterThanTick {
                window: self.window,
                tick: self.tick,
            });
        }
        if self.lowest.is_zero() {
            return Err(ProbeError::ZeroLowest);
        }
        if self.highest.as_nanos() < 2 * self.lowest.as_nanos() {
            return Err(ProbeError::BoundsOutOfOrder {
                lowest: self.lowest,
                highest: self.highest,
            });
        }
        if self.highest.as_nanos() > u128::from(u64::MAX / 2) {
            return Err(ProbeError::HighestTooLarge {
                highest: self.highest,
            });
        }
        if !(1..=5).contains(&self.significant_figures) {
            return Err(ProbeError::SignificantFigures(self.significant_figures));
        }
        // hdrhistogram needs `lowest`'s magnitude plus the sub-bucket magnitude within 63 bits.
        let unit_magnitude = 63 - self.lowest_ns().leading_zeros();
        let largest = 2 * 10u64.pow(u32::from(self.significant_figures));
        if unit_magnitude + (64 - (largest - 1).leading_zeros()) > 63 {
            return Err(ProbeError::LowestTooLarge {
                lowest: self.lowest,
                significant_figures: self.significant_figures,
            });
        }
        if self.poll_time_every == 0 {
            return Err(ProbeError::ZeroPollTimeEvery);
        }
        if self.alarm_at == Some(Duration::ZERO) {
            return Err(ProbeError::ZeroAlarm);
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

/// A bad [`ProbeConfig`] setting, returned by [`Probe::new`](crate::Probe::new) and
/// [`ProbeConfig::validate`].
///
/// ```
/// use elastic_cpu_probe::{Probe, ProbeConfig, ProbeError};
/// use std::time::Duration;
///
/// let err = Probe::new(ProbeConfig { significant_figures: 9, ..ProbeConfig::default() })
///     .unwrap_err();
/// assert_eq!(err, ProbeError::SignificantFigures(9));
/// assert!(err.to_string().contains("significant_figures"));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ProbeError {
    /// `tick` is zero.
    ZeroTick,
    /// `window` is shorter than one `tick`.
    WindowShorterThanTick {
        /// The configured window.
        window: Duration,
        /// The configured tick.
        tick: Duration,
    },
    /// `lowest` is zero.
    ZeroLowest,
    /// `highest` is not at least twice `lowest`.
    BoundsOutOfOrder {
        /// The configured lowest value.
        lowest: Duration,
        /// The configured highest value.
        highest: Duration,
    },
    /// `highest` exceeds `u64::MAX / 2` nanoseconds (about 292 years).
    HighestTooLarge {
        /// The configured highest value.
        highest: Duration,
    },
    /// `significant_figures` is outside 1 ..= 5.
    SignificantFigures(u8),
    /// `lowest` is too large to keep `significant_figures` digits in a 64-bit histogram
    /// (only for `lowest` of hours or more).
    LowestTooLarge {
        /// The configured lowest value.
        lowest: Duration,
        /// The configured significant figures.
        significant_figures: u8,
    },
    /// `poll_time_every` is zero.
    ZeroPollTimeEvery,
    /// `alarm_at` is `Some(0)`.
    ZeroAlarm,
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::ZeroTick => write!(f, "probe setting `tick` must be greater than zero"),
            ProbeError::WindowShorterThanTick { window, tick } => write!(
                f,
                "probe setting `window` ({window:?}) must be at least one `tick` ({tick:?})"
            ),
            ProbeError::ZeroLowest => {
                write!(f, "probe setting `lowest` must be greater than zero")
            }
            ProbeError::BoundsOutOfOrder { lowest, highest } => write!(
                f,
                "probe setting `highest` ({highest:?}) must be at least twice `lowest` ({lowest:?})"
            ),
            ProbeError::HighestTooLarge { highest } => write!(
                f,
                "probe setting `highest` ({highest:?}) must be at most u64::MAX / 2 nanoseconds"
            ),
            ProbeError::SignificantFigures(n) => write!(
                f,
                "probe setting `significant_figures` ({n}) must be within 1..=5"
            ),
            ProbeError::LowestTooLarge {
                lowest,
                significant_figures,
            } => write!(
                f,
                "probe setting `lowest` ({lowest:?}) is too large to keep \
                 {significant_figures} significant figures"
            ),
            ProbeError::ZeroPollTimeEvery => {
                write!(f, "probe setting `poll_time_every` must be at least 1")
            }
            ProbeError::ZeroAlarm => {
                write!(
                    f,
                    "probe setting `alarm_at` must be greater than zero (or None)"
                )
            }
        }
    }
}

impl std::error::Error for ProbeError {}
