//! What a gate's handles, admissions and permits share, and what the governor steers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use elastic_cpu_core::GateQueue;

use crate::running::RunningTime;
use crate::shared::QueueClock;

/// One gate: its admission queue (the setup class's bucket), how setups are timed, and what
/// the governor publishes for it. The governor holds it weakly.
pub(crate) struct GateShared {
    pub(crate) queue: GateQueue<QueueClock>,
    /// How a permit's running time is measured (as for elastic work).
    pub(crate) running: RunningTime,
    /// A permit yields once it has run this long since it last returned `Pending`.
    pub(crate) quantum: Duration,
    /// At the quantum's yield, also yield the thread's CPU to the OS (as elastic work does).
    pub(crate) os_yield: bool,
    /// Those OS yields so far.
    pub(crate) os_yields: AtomicU64,
    /// The listener's deadline.
    pub(crate) deadline: Duration,
    /// The gate's number among this `Elastic`'s gates (the metrics label).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) id: usize,
    /// The setup class's share now, as `f64` bits.
    share: AtomicU64,
    /// The longest admission wait over the probe window, in nanoseconds.
    longest_wait: AtomicU64,
    /// The governor is gone: permits no longer yield, admissions are refused.
    closed: AtomicBool,
}

impl GateShared {
    pub(crate) fn new(
        queue: GateQueue<QueueClock>,
        running: RunningTime,
        quantum: Duration,
        os_yield: bool,
        deadline: Duration,
        id: usize,
        share: f64,
    ) -> GateShared {
        GateShared {
            queue,
            running,
            quantum,
            os_yield,
            os_yields: AtomicU64::new(0),
            deadline,
            id,
            share: AtomicU64::new(share.to_bits()),
            longest_wait: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        }
    }

    pub(crate) fn share(&self) -> f64 {
        f64::from_bits(self.share.load(Ordering::Relaxed))
    }

    pub(crate) fn longest_wait(&self) -> Duration {
        Duration::from_nanos(self.longest_wait.load(Ordering::Relaxed))
    }

    /// The governor publishes what it decided this tick.
    pub(crate) fn publish(&self, share: f64, longest_wait: Duration) {
        self.share.store(share.to_bits(), Ordering::Relaxed);
        let nanos = u64::try_from(longest_wait.as_nanos()).unwrap_or(u64::MAX);
        self.longest_wait.store(nanos, Ordering::Relaxed);
    }

    /// The governor is gone: refuse everything waiting and to come.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.queue.close();
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}
