//! State shared by the handle, the paced adapters and the governor.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use elastic_cpu_core::{Clock, ManualClock, MonotonicClock, WorkQueue};
use elastic_cpu_probe::Probe;

use crate::running::RunningTime;

/// The clock the queue and bucket run on: the monotonic clock in production, a
/// [`ManualClock`] in deterministic tests.
#[derive(Clone)]
pub(crate) enum QueueClock {
    Monotonic(MonotonicClock),
    Manual(ManualClock),
}

impl Clock for QueueClock {
    #[inline]
    fn now(&self) -> Duration {
        match self {
            QueueClock::Monotonic(c) => c.now(),
            QueueClock::Manual(c) => c.now(),
        }
    }
}

pub(crate) type Queue = WorkQueue<QueueClock>;

/// An `f64` in an `AtomicU64`, for values the governor publishes.
#[derive(Default)]
pub(crate) struct AtomicF64(AtomicU64);

impl AtomicF64 {
    pub(crate) fn new(v: f64) -> Self {
        AtomicF64(AtomicU64::new(v.to_bits()))
    }
    pub(crate) fn load(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
    pub(crate) fn store(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed)
    }
}

/// Everything a paced adapter needs; one per [`crate::Elastic`].
pub(crate) struct Shared {
    pub(crate) queue: Arc<Queue>,
    /// The queue's clock (the brake times itself on it).
    pub(crate) clock: QueueClock,
    /// The backlog brake (`None`: off).
    pub(crate) brake: Option<Mutex<crate::brake::Brake>>,
    /// The brake is on: holders give back their grants at their next poll.
    pub(crate) braked: AtomicBool,
    /// Grants at a time are capped at the CPUs the limit pays for.
    pub(crate) cap_concurrency: bool,
    pub(crate) probe: Probe,
    pub(crate) slice: Duration,
    pub(crate) quantum: Duration,
    pub(crate) running: RunningTime,
    /// Current elastic share (published by the governor).
    pub(crate) limit: AtomicF64,
    /// CPUs the rate is computed for.
    pub(crate) cpus: AtomicF64,
    /// Set once a runtime built through us told its worker count (or `cpus` was given).
    pub(crate) cpus_fixed: AtomicBool,
    pub(crate) ticks: AtomicU64,
    pub(crate) governor: Mutex<crate::governor::GovernorState>,
    pub(crate) governor_thread: Mutex<Option<std::thread::Thread>>,
    /// Fallback probes started by `attach` (without `tokio_unstable`); stop on drop.
    pub(crate) samplers: Mutex<Vec<elastic_cpu_probe::Sampler>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Wake the governor so it notices at once that nobody needs it any more.
        if let Ok(mut t) = self.governor_thread.lock() {
            if let Some(t) = t.take() {
                t.unpark();
            }
        }
    }
}
