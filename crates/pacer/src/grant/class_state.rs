//! What the paced adapters read on their hot path, shared by the handle, the adapters and the
//! governor: one per [`Elastic`](crate::Elastic).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::Duration;

#[cfg(feature = "test-util")]
use elastic_cpu_core::ManualClock;
use elastic_cpu_core::{Clock, MonotonicClock, WorkQueue, MIN_SLICE};
use elastic_cpu_probe::{Probe, Sampler, ThreadRegistry};

use super::charged::Charged;
use super::class_queue::{ClassQueue, QueueState};
use super::long_polls::LongPolls;
use super::quantum::CoreYield;
use super::running::RunningTime;
use super::slots::Slots;
use super::Unstack;
use crate::settings::Enforcement;

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

/// `d` in nanoseconds, saturating.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Everything a paced adapter needs. The governor holds only a weak reference: it stops once
/// the last handle and adapter holding this is gone.
pub(crate) struct ClassState {
    /// Where grants come from and go back to.
    pub(crate) queue: Queue,
    /// CPU time one grant asks for (the setting).
    pub(crate) slice: Duration,
    /// What an admission asks for now, in nanoseconds: `slice`, inside a CPU quota cut to what
    /// the class's rate refills in one of the quota's periods.
    asks: AtomicU64,
    /// Running time after which an adapter yields to the scheduler.
    pub(crate) quantum: Duration,
    /// At the quantum's yield, also yield the thread's CPU to the OS.
    pub(crate) os_yield: bool,
    /// Those OS yields so far.
    pub(crate) os_yields: AtomicU64,
    /// The setting: an idle class's threads take over a foreground worker queued behind another
    /// on one CPU.
    pub(crate) unstack_on: bool,
    /// An idle class's, where the setting is on (`None` elsewhere).
    pub(crate) unstack: Option<Unstack>,
    /// Elastic polls (or `Pacer` stretches) that ran past four quanta: one poll holds a worker
    /// that long whatever the share.
    pub(crate) long_polls: Arc<LongPolls>,
    /// How running time is measured.
    pub(crate) running: RunningTime,
    /// The probe (adapters feed it elastic poll times when it has no hooks).
    pub(crate) probe: Probe,
    /// Running time charged so far, as it is charged (the queue's ledger learns it only when a
    /// grant settles): the governor's overhead correction and quota headroom read it.
    pub(crate) charged: Charged,
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
    /// The link of an idle class or a class made with `Elastic::class` to the `Elastic` it
    /// belongs to: its governor runs as long as their work does (`None` for the `Elastic`'s
    /// own class).
    parent: Option<Arc<ClassState>>,
    /// An idle pool's class: it steers by the signal as long as it exists.
    idle: bool,
    /// The grants the `Elastic`'s classes on its runtime hold together (shared by the own
    /// class and those made with `Elastic::class`; `None` on an idle pool).
    pub(crate) slots: Option<Arc<Slots>>,
}

impl ClassState {
    /// The governor's reading of the queue from its load (waiters, holders, tokens left).
    fn state_of(&self, (waiters, holders, has_tokens): (usize, usize, bool)) -> QueueState {
        QueueState {
            busy: holders > 0 || waiters > 0,
            has_tokens,
            holders,
            waiters,
            steering: self.idle || holders > 0,
        }
    }

    /// The slice an admission asks for now (see [`ClassQueue::fit_slice`]).
    #[inline]
    pub(crate) fn asks(&self) -> Duration {
        Duration::from_nanos(self.asks.load(Ordering::Relaxed))
    }

    /// What a quantum's yield does with the thread's CPU
    /// ([`yield_to_scheduler`](super::quantum::yield_to_scheduler)).
    #[inline]
    pub(crate) fn core_yield(&self) -> CoreYield<'_> {
        match (&self.unstack, self.os_yield) {
            (Some(unstack), _) => CoreYield::Unstack(unstack, self.quantum),
            (None, true) => CoreYield::Os(&self.os_yields),
            (None, false) => CoreYield::Keep,
        }
    }

    /// An `Elastic`'s own class: `threads` is the registry the run-queue delay reads.
    pub(crate) fn new(
        queue: Queue,
        enforcement: Enforcement,
        running: RunningTime,
        probe: Probe,
        threads: ThreadRegistry,
    ) -> ClassState {
        ClassState {
            queue,
            slice: enforcement.slice,
            asks: AtomicU64::new(nanos(enforcement.slice)),
            quantum: enforcement.quantum,
            os_yield: enforcement.os_yield,
            os_yields: AtomicU64::new(0),
            unstack_on: enforcement.unstack_workers,
            unstack: None,
            long_polls: Arc::default(),
            running,
            probe,
            charged: Charged::default(),
            threads,
            braked: AtomicBool::new(false),
            governor_thread: OnceLock::new(),
            samplers: Mutex::new(Vec::new()),
            parent: None,
            idle: false,
            slots: Some(Arc::default()),
        }
    }

    cfg_idle_pool! {
        /// The idle class of `parent` (work on its idle pool): its own `queue`, poll quantum,
        /// long-poll count and (empty) thread registry, the rest as `parent`'s.
        pub(crate) fn idle_class(
            parent: &Arc<ClassState>,
            queue: Queue,
            quantum: Duration,
        ) -> ClassState {
            let mut class = ClassState::member_class(parent, queue);
            class.quantum = quantum;
            // At idle priority the kernel hands the core to any thread placed on it at once;
            // what it does not always do is place a waiting worker on it (see `Unstack`).
            class.os_yield = false;
            class.unstack = parent.unstack_on.then(|| Unstack::new(&parent.threads));
            class.long_polls = Arc::default();
            // The idle pool's threads are not the foreground's: the run-queue signal reads the
            // parent's registry only.
            class.threads = ThreadRegistry::new();
            class.idle = true;
            class.slots = None;
            class
        }
    }

    /// A class of `root`'s elastic work made with `Elastic::class` (and the start of every class
    /// of `root` but its own): its own `queue`, ledger and counters, the rest as `root`'s. It
    /// shares `root`'s long-poll count: where elastic work goes (`Elastic::spawn`) is decided for
    /// all of it.
    pub(crate) fn member_class(root: &Arc<ClassState>, queue: Queue) -> ClassState {
        ClassState {
            queue,
            slice: root.slice,
            asks: AtomicU64::new(nanos(root.slice)),
            quantum: root.quantum,
            os_yield: root.os_yield,
            os_yields: AtomicU64::new(0),
            unstack_on: root.unstack_on,
            unstack: None,
            long_polls: root.long_polls.clone(),
            running: root.running.clone(),
            probe: root.probe.clone(),
            charged: Charged::default(),
            threads: root.threads.clone(),
            braked: AtomicBool::new(false),
            governor_thread: OnceLock::new(),
            samplers: Mutex::new(Vec::new()),
            parent: Some(root.clone()),
            idle: false,
            slots: root.slots.clone(),
        }
    }

    /// The `Elastic`'s own class this one belongs to (itself, for the own class).
    pub(crate) fn root_class(self: &Arc<Self>) -> &Arc<ClassState> {
        self.parent.as_ref().unwrap_or(self)
    }

    /// Whether this is an idle pool's class.
    #[inline]
    pub(crate) fn is_idle(&self) -> bool {
        self.idle
    }

    /// The `Elastic` this class belongs to, as a number: the address of its own class (an idle
    /// class's parent). Compared, never dereferenced.
    #[inline]
    pub(crate) fn root(&self) -> usize {
        match &self.parent {
            Some(parent) => Arc::as_ptr(parent) as usize,
            None => self as *const ClassState as usize,
        }
    }

    /// Count a poll (or stretch) that ran `wall`, if it was a long one (`cpu`: its running
    /// time, where it was measured exactly).
    #[inline]
    pub(crate) fn note_run(&self, wall: Duration, cpu: Option<Duration>) {
        self.long_polls.note(wall, cpu, self.quantum, self.slice);
    }

    /// Whether elastic work should give back what it holds at its next poll.
    #[inline]
    pub(crate) fn braked(&self) -> bool {
        self.braked.load(Ordering::Relaxed)
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

    /// Let the sampling probes sample at their quiet period (nothing steers) or at the full
    /// rate.
    pub(crate) fn set_samplers_quiet(&self, quiet: bool) {
        for sampler in self
            .samplers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            sampler.set_quiet(quiet);
        }
    }

    /// Stop the sampling probes and join their threads.
    /// Whether a sampling probe measures the runtime.
    pub(crate) fn has_sampler(&self) -> bool {
        !self
            .samplers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    pub(crate) fn stop_samplers(&self) {
        let samplers =
            std::mem::take(&mut *self.samplers.lock().unwrap_or_else(|p| p.into_inner()));
        drop(samplers);
    }
}

impl ClassQueue for ClassState {
    fn tick(&self) -> bool {
        self.queue.tick()
    }

    fn long_polls(&self) -> Option<&LongPolls> {
        Some(&self.long_polls)
    }

    fn set_rate(&self, rate: u64) {
        self.queue.set_rate(rate);
    }

    fn retune(&self, rate: u64) {
        self.queue.retune(rate);
    }

    fn fit_slice(&self, rate: u64, quota_period: Option<Duration>) {
        // Inside a quota, at most what the rate refills in one of its periods (at least the
        // shortest slice): a slow class's work runs in pieces spread over the periods, not in
        // one burst that its debt pays for over seconds. One burst past the period's quota
        // throttles the whole group, foreground and all.
        let asks = match quota_period {
            Some(period) => {
                let refill = rate.saturating_mul(nanos(period)) / 1_000_000_000;
                self.slice.min(Duration::from_nanos(refill).max(MIN_SLICE))
            }
            None => self.slice,
        };
        self.asks.store(nanos(asks), Ordering::Relaxed);
    }

    fn waiters(&self) -> usize {
        self.queue.snapshot().waiters
    }

    fn has_tokens(&self) -> bool {
        self.queue.snapshot().balance_nanos > 0
    }

    fn holders(&self) -> usize {
        self.queue.snapshot().holders
    }

    fn set_holder_cap(&self, cap: usize) {
        self.queue.set_max_holders(Some(cap));
    }

    fn set_slots(&self, count: Option<usize>) {
        if let Some(slots) = &self.slots {
            slots.set(count);
        }
    }

    fn take_longest_wait(&self) -> Duration {
        self.queue.take_longest_wait()
    }

    fn set_held(&self, held: bool, braked: bool) {
        // Pause before holders are told, resume after: no grant slips out in between.
        if held {
            self.queue.pause();
        }
        self.braked.store(held && braked, Ordering::Relaxed);
        if !held {
            self.queue.resume();
        }
    }

    fn steering(&self) -> bool {
        // An idle pool steers by the signal as long as it exists; the `Elastic`'s own work
        // while it holds grants.
        self.idle || self.queue.snapshot().holders > 0
    }

    fn charged(&self) -> Duration {
        self.charged.total()
    }

    fn busy(&self) -> bool {
        let s = self.queue.snapshot();
        s.holders > 0 || s.waiters > 0
    }

    fn state(&self) -> QueueState {
        self.state_of(self.queue.load())
    }

    fn tick_state(&self) -> (bool, Duration, QueueState) {
        let t = self.queue.tick_load();
        let state = self.state_of((t.waiters, t.holders, t.has_tokens));
        (t.waited, t.longest_wait, state)
    }

    fn close(&self) {
        self.queue.close();
        if let Some(slots) = &self.slots {
            slots.close();
        }
    }
}

impl Drop for ClassState {
    fn drop(&mut self) {
        // Wake the governor so it notices at once that nobody needs it any more.
        if let Some(t) = self.governor_thread.take() {
            t.unpark();
        }
    }
}
