//! The signal as the decision step reads it: which component steers, the components themselves
//! and the OS run-queue waits the quiet baselines are pooled from.

use std::fmt;
use std::time::Duration;

/// The fewest timeslices a run-queue delay is read from over the window: a mean of a few
/// waits (a thread that wakes ten times a second, say) moves with whichever core it happened
/// to wait for, and scaled to the scheduling allowance it would steer by noise alone.
pub const RUN_QUEUE_MIN_TIMESLICES: u64 = 100;

/// Which component of the signal was the largest at the last tick (what the controller stepped
/// on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SignalSource {
    /// No component had data.
    #[default]
    None,
    /// tokio's scheduling latency (the probe window's p99).
    Sched,
    /// The I/O wake-up probe's p99.
    Io,
    /// The OS run-queue delay of the runtime's threads.
    RunQueue,
    /// The OS run-queue delay of the process's threads beside the runtime (with a measured
    /// target only: what elastic work adds over their quiet wait).
    Bystanders,
    /// The cgroup was throttled: over the target whatever the probes saw.
    Throttled,
}

impl SignalSource {
    /// The component's short name, as `Display` writes it (`"run-queue"`).
    pub fn name(self) -> &'static str {
        match self {
            SignalSource::None => "none",
            SignalSource::Sched => "sched",
            SignalSource::Io => "io",
            SignalSource::RunQueue => "run-queue",
            SignalSource::Bystanders => "bystanders",
            SignalSource::Throttled => "throttled",
        }
    }
}

impl fmt::Display for SignalSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The signal's components at one tick, as the decision step takes them: the combined figure and
/// its source (the latency itself, what a builder-set target is compared with) and the components
/// a measured target is read from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SignalReading {
    /// The largest component against the one target (`Duration::MAX` while throttled; `None`:
    /// no component had data).
    pub value: Option<Duration>,
    /// Which component `value` is.
    pub source: SignalSource,
    /// tokio's scheduling p99 over the probe's window.
    pub sched_p99: Option<Duration>,
    /// The mean OS run-queue wait per timeslice of the runtime's threads over the window.
    pub run_queue_delay: Option<Duration>,
    /// The same for the process's threads beside the runtime.
    pub bystander_delay: Option<Duration>,
    /// The cgroup was throttled within the last window.
    pub throttled: bool,
}

/// Whose run-queue waits a reading is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiters {
    /// The runtime's threads that serve the foreground.
    Runtime,
    /// The process's threads the runtime does not know, elastic work's aside.
    Bystanders,
}

/// One tick's run-queue waits, summed per [`Waiters`]: (wait, timeslices).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunQueueWaits {
    /// The runtime's threads: (wait, timeslices).
    pub runtime: (Duration, u64),
    /// The threads beside the runtime: (wait, timeslices).
    pub bystanders: (Duration, u64),
}

impl RunQueueWaits {
    /// The (wait, timeslices) of `who`.
    pub fn of(&self, who: Waiters) -> (Duration, u64) {
        match who {
            Waiters::Runtime => self.runtime,
            Waiters::Bystanders => self.bystanders,
        }
    }
}

/// Mean run-queue wait per timeslice of `who` over the window: how long, on average, one of
/// those threads that became runnable waited for a CPU. `None` with fewer than
/// [`RUN_QUEUE_MIN_TIMESLICES`] timeslices in the window.
pub fn window_delay<'a>(
    window: impl IntoIterator<Item = &'a RunQueueWaits>,
    who: Waiters,
) -> Option<Duration> {
    let (wait, slices) = window
        .into_iter()
        .fold((Duration::ZERO, 0u64), |(w, s), t| {
            let (dw, ds) = t.of(who);
            (w + dw, s + ds)
        });
    if slices < RUN_QUEUE_MIN_TIMESLICES {
        return None;
    }
    Some(wait / u32::try_from(slices).unwrap_or(u32::MAX))
}
