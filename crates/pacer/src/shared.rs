//! What the paced adapters read on their hot path, shared by the handle, the adapters and the
//! governor: one per [`Elastic`](crate::Elastic).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::Duration;

#[cfg(feature = "test-util")]
use elastic_cpu_core::ManualClock;
use elastic_cpu_core::{Clock, MonotonicClock, WorkQueue};
use elastic_cpu_probe::{Probe, Sampler, ThreadRegistry};

use crate::running::RunningTime;
use crate::share::Charged;

/// The clock the queue and bucket run on: the monotonic clock in production, a
/// [`ManualClock`] in deterministic tests (feature `test-util`).
#[derive(Clone)]
pub(crate) enum QueueClock {
    Monotonic(MonotonicClock),
    #[cfg(feature = "test-util")]
    Manual(ManualClock),
}

impl QueueClock {
    /// Driven by hand: no governor thread ticks it.
    pub(crate) fn is_manual(&self) -> bool {
        match self {
            QueueClock::Monotonic(_) => false,
            #[cfg(feature = "test-util")]
            QueueClock::Manual(_) => true,
        }
    }
}

impl Clock for QueueClock {
    #[inline]
    fn now(&self) -> Duration {
        match self {
            QueueClock::Monotonic(c) => c.now(),
            #[cfg(feature = "test-util")]
            QueueClock::Manual(c) => c.now(),
        }
    }
}

pub(crate) type Queue = WorkQueue<QueueClock>;

/// Everything a paced adapter needs. The governor holds only a weak reference: it stops once
/// the last handle and adapter holding this is gone.
pub(crate) struct Shared {
    /// Where grants come from and go back to.
    pub(crate) queue: Queue,
    /// CPU time one grant asks for.
    pub(crate) slice: Duration,
    /// Running time after which an adapter yields to the scheduler.
    pub(crate) quantum: Duration,
    /// At the quantum's yield, also yield the thread's CPU to the OS.
    pub(crate) os_yield: bool,
    /// Those OS yields so far.
    pub(crate) os_yields: AtomicU64,
    /// How running time is measured.
    pub(crate) running: RunningTime,
    /// The probe (adapters feed it elastic poll times when it has no hooks).
    pub(crate) probe: Probe,
    /// Running time charged so far, for the governor's overhead correction (one counter for
    /// both classes of an `Elastic`: the correction compares it with the process's CPU time).
    pub(crate) charged: Arc<Charged>,
    /// The runtime's threads and the `pace_blocking` threads, for the run-queue signal.
    pub(crate) threads: ThreadRegistry,
    /// The backlog brake is on: holders give back their grants at their next poll. Written by
    /// the governor only.
    braked: AtomicBool,
    // Not read by the adapters: kept as long as they are.
    /// The governor thread, woken when this is dropped so that it ends at once.
    governor_thread: OnceLock<Thread>,
    /// Fallback probes started by `attach` (without `tokio_unstable`); stop on drop.
    samplers: Mutex<Vec<Sampler>>,
    /// The idle class's link to the `Elastic` it belongs to: its governor runs as long as idle
    /// work does (`None` for the `Elastic`'s own class).
    _parent: Option<Arc<Shared>>,
}

impl Shared {
    /// What a quantum's yield passes to [`yield_to_scheduler`](crate::quantum::yield_to_scheduler):
    /// the OS-yield counter when elastic work yields the CPU too.
    #[inline]
    pub(crate) fn os_yield(&self) -> Option<&AtomicU64> {
        self.os_yield.then_some(&self.os_yields)
    }

    pub(crate) fn new(
        queue: Queue,
        slice: Duration,
        quantum: Duration,
        os_yield: bool,
        running: RunningTime,
        probe: Probe,
    ) -> Shared {
        Shared {
            queue,
            slice,
            quantum,
            os_yield,
            os_yields: AtomicU64::new(0),
            running,
            probe,
            charged: Arc::default(),
            threads: ThreadRegistry::new(),
            braked: AtomicBool::new(false),
            governor_thread: OnceLock::new(),
            samplers: Mutex::new(Vec::new()),
            _parent: None,
        }
    }

    /// The idle class of `parent` (work on its idle pool): its own `queue` and poll quantum,
    /// the rest as `parent`'s.
    pub(crate) fn idle_class(parent: &Arc<Shared>, queue: Queue, quantum: Duration) -> Shared {
        Shared {
            queue,
            slice: parent.slice,
            quantum,
            // At idle priority the kernel hands the core to any other thread at once.
            os_yield: false,
            os_yields: AtomicU64::new(0),
            running: parent.running.clone(),
            probe: parent.probe.clone(),
            charged: parent.charged.clone(),
            // The idle pool's threads are not the foreground's: the run-queue signal reads the
            // parent's registry only.
            threads: ThreadRegistry::new(),
            braked: AtomicBool::new(false),
            governor_thread: OnceLock::new(),
            samplers: Mutex::new(Vec::new()),
            _parent: Some(parent.clone()),
        }
    }

    /// Whether elastic work should give back what it holds at its next poll.
    #[inline]
    pub(crate) fn braked(&self) -> bool {
        self.braked.load(Ordering::Relaxed)
    }

    /// The governor turns the brake on or off.
    pub(crate) fn set_braked(&self, on: bool) {
        self.braked.store(on, Ordering::Relaxed);
    }

    /// The governor thread to wake when the last reference is dropped.
    pub(crate) fn set_governor_thread(&self, thread: Thread) {
        let _ = self.governor_thread.set(thread);
    }

    /// Keep a sampling probe running as long as this lives.
    pub(crate) fn keep_sampler(&self, sampler: Sampler) {
        self.samplers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(sampler);
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Wake the governor so it notices at once that nobody needs it any more.
        if let Some(t) = self.governor_thread.take() {
            t.unpark();
        }
    }
}
