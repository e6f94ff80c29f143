//! What one tick's decision is taken from: plain values read by whoever drives the step (the
//! pacer's governor from the probe and the OS, the plant from its simulation).

use std::time::Duration;

use super::signal::{RunQueueWaits, SignalReading};

/// A CPU quota in force.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuotaLimit {
    /// CPUs it allows, fractional.
    pub cpus: f64,
    /// Its enforcement period.
    pub period: Duration,
}

/// One tick's readings.
#[derive(Clone, Copy, Debug)]
pub struct TickReadings<'a> {
    /// When the tick is, on the driver's clock (the brakes' clock).
    pub now: Duration,
    /// The tick's length.
    pub period: Duration,
    /// The probe's window, in ticks (the quiet window is as long).
    pub intervals: usize,
    /// The signal's components.
    pub signal: SignalReading,
    /// This tick's OS run-queue waits (`None`: not measured; the quiet run-queue baseline
    /// starts afresh).
    pub run_queue: Option<RunQueueWaits>,
    /// The cgroup's throttled periods so far (a new one arms the quota brake).
    pub throttled_periods: u64,
    /// The process's CPU time now (`None`: unreadable).
    pub process_cpu: Option<Duration>,
    /// Foreground scheduling samples per second over the probe's window.
    pub foreground_per_sec: f64,
    /// Each class, in the step's class order (see [`Decider`](super::Decider)).
    pub classes: &'a [ClassReading],
}

/// One class at a tick, read after its queue granted waiters at the rate in force.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassReading {
    /// Running time charged to it so far.
    pub charged: Duration,
    /// Work waited for a grant since the last tick.
    pub waited: bool,
    /// Work holds or waits for a grant now.
    pub busy: bool,
    /// Its bucket holds tokens now (work that waits then is held by something else).
    pub has_tokens: bool,
    /// Grants held now.
    pub holders: usize,
    /// Something steers by the signal through it now (work running or waiting; a gate or an
    /// idle pool whenever it exists).
    pub steering: bool,
    /// Its time came mostly in polls too long to cut.
    pub long_polls: bool,
}

/// The backlog alarm: a foreground task waited in a run queue past the brake's threshold
/// (the probe raises it on the worker that saw it; the plant from its queues).
pub trait Alarm {
    /// Alarms raised so far.
    fn alarms(&self) -> u64;
    /// Whether the alarm is raised; lowers it.
    fn take_alarm(&self) -> bool;
}

/// The scheduling p99 of a quiet window: the step asks for one when the last `ticks` ticks
/// were quiet (held, or without elastic work), and the driver pools them into the quiet
/// window and reads it.
pub trait QuietWindow {
    /// Pool the last `ticks` ticks into the quiet window; its scheduling p99.
    fn quiet_p99(&mut self, ticks: usize) -> Option<Duration>;
}
