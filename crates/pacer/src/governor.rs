//! The governor: the control loop in one place. Once per tick: probe → controller → bucket
//! rate → holder cap → grants; in between, the backlog brake. It runs on its own OS thread, off
//! the runtime it measures: a saturated runtime would delay the very loop that must react to it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread;
use std::time::{Duration, Instant};

use elastic_cpu_core::{rate_for, Clock, StepController};
use elastic_cpu_probe::Window;

use crate::brake::{Brake, Change, BRAKE_POLL};
use crate::shared::{Queue, QueueClock, Shared};
use crate::snapshot::{Governed, Snapshot};

/// What decides the limit and applies it: the controller (or the fixed limit), the backlog
/// brake and the holder cap. It acts on the [`Shared`] state it is handed; the governor thread
/// and the `Elastic` handles (`attach`, manual ticks) share it through [`Control`].
pub(crate) struct Governor {
    controller: StepController,
    /// A fixed limit turns the controller off.
    fixed: Option<f64>,
    /// The backlog brake (`None`: off).
    brake: Option<Brake>,
    /// The brake times itself on the queue's clock.
    clock: QueueClock,
    /// Grants at a time are capped at the CPUs the limit pays for.
    cap_concurrency: bool,
    /// The limit (the elastic share of the CPUs) now.
    limit: f64,
    /// CPUs the rate is computed for.
    cpus: f64,
    /// `cpus` was given to the builder: `attach` leaves it alone.
    cpus_fixed: bool,
    ticks: u64,
    /// The longest wait for a grant in each tick of the probe window, newest last.
    waits: VecDeque<Duration>,
}

impl Governor {
    /// `cpus` is `Some` when the builder fixed it.
    pub(crate) fn new(
        controller: StepController,
        fixed: Option<f64>,
        brake: bool,
        clock: QueueClock,
        cap_concurrency: bool,
        cpus: Option<f64>,
        default_cpus: f64,
    ) -> Governor {
        Governor {
            limit: fixed.unwrap_or(controller.limit()),
            controller,
            fixed,
            brake: brake.then(Brake::default),
            clock,
            cap_concurrency,
            cpus: cpus.unwrap_or(default_cpus),
            cpus_fixed: cpus.is_some(),
            ticks: 0,
            waits: VecDeque::new(),
        }
    }

    /// One tick: the brake, then rotate the probe window and read its p99, step the controller,
    /// set the bucket's rate and the holder cap, grant waiters. Returns the window it read.
    pub(crate) fn tick(&mut self, shared: &Shared, period: Duration) -> Window {
        self.brake_step(shared);
        shared.probe.rotate();
        let window = shared.probe.window();
        let p99 = window.queue_latency.all.p99;
        // Grants waiters at the old rate and clears "had waiters since the last tick".
        let had_waiters = shared.queue.tick();
        self.limit = match self.fixed {
            Some(fixed) => fixed,
            None => self.controller.tick(p99, period, had_waiters),
        };
        shared.queue.set_rate(self.rate());
        self.cap_holders(shared);
        self.ticks += 1;
        self.waits.push_back(shared.queue.take_longest_wait());
        while self.waits.len() > shared.probe.config().intervals() {
            self.waits.pop_front();
        }
        window
    }

    /// The longest wait for a grant over the probe window (a waiter still queued counts with
    /// its wait so far).
    fn longest_wait(&self) -> Duration {
        self.waits.iter().copied().max().unwrap_or_default()
    }

    /// Engage or release the backlog brake. Returns whether it is on (the governor then
    /// re-checks every [`BRAKE_POLL`]). Runs on the governor thread (each tick and each
    /// wake-up), never on a worker: a lock, a clock read and an atomic store.
    pub(crate) fn brake_step(&mut self, shared: &Shared) -> bool {
        let Some(brake) = &mut self.brake else {
            return false;
        };
        match brake.step(self.clock.now(), &shared.probe) {
            Change::Keep => {}
            Change::Engage => {
                shared.queue.pause();
                shared.set_braked(true);
            }
            Change::Release => {
                shared.set_braked(false);
                shared.queue.resume();
            }
        }
        brake.is_on()
    }

    /// With the concurrency cap on: at most `ceil(limit × cpus)` grants at a time.
    fn cap_holders(&self, shared: &Shared) {
        if self.cap_concurrency {
            shared
                .queue
                .set_max_holders(Some(holder_cap(self.limit, self.cpus)));
        }
    }

    /// The token rate for the limit on the CPUs.
    pub(crate) fn rate(&self) -> u64 {
        rate_for(self.limit, self.cpus)
    }

    /// Size the bucket for `cpus` (unless the builder fixed it).
    fn attach_cpus(&mut self, shared: &Shared, cpus: f64) {
        if !self.cpus_fixed {
            self.cpus = cpus;
            shared.queue.set_rate(self.rate());
        }
    }

    /// Time spent braked (brakes that ended).
    fn braked_time(&self) -> Duration {
        self.brake.as_ref().map_or(Duration::ZERO, Brake::total)
    }
}

/// The governor as its thread and the `Elastic` handles share it: behind a lock, with what it
/// published last readable without the lock, so a snapshot never waits for a tick.
pub(crate) struct Control {
    governor: Mutex<Governor>,
    limit: AtomicF64,
    cpus: AtomicF64,
    ticks: AtomicU64,
    braked_nanos: AtomicU64,
    longest_wait_nanos: AtomicU64,
}

impl Control {
    /// Apply `governor`'s holder cap to `shared` and share it.
    pub(crate) fn new(governor: Governor, shared: &Shared) -> Control {
        governor.cap_holders(shared);
        let control = Control {
            limit: AtomicF64::default(),
            cpus: AtomicF64::default(),
            ticks: AtomicU64::new(0),
            braked_nanos: AtomicU64::new(0),
            longest_wait_nanos: AtomicU64::new(0),
            governor: Mutex::new(governor),
        };
        control.publish(&control.lock());
        control
    }

    /// Lock the governor; a panic in an earlier tick leaves its state usable. Queue operations
    /// run under this lock and wake the tasks they grant.
    fn lock(&self) -> MutexGuard<'_, Governor> {
        self.governor.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, g: &Governor) {
        self.limit.store(g.limit);
        self.cpus.store(g.cpus);
        self.ticks.store(g.ticks, Ordering::Relaxed);
        let braked = u64::try_from(g.braked_time().as_nanos()).unwrap_or(u64::MAX);
        self.braked_nanos.store(braked, Ordering::Relaxed);
        let longest = u64::try_from(g.longest_wait().as_nanos()).unwrap_or(u64::MAX);
        self.longest_wait_nanos.store(longest, Ordering::Relaxed);
    }

    /// One governor tick over `shared`, then the metrics export (outside the lock: an exporter
    /// may call back into the handle).
    pub(crate) fn tick(&self, shared: &Shared, period: Duration) {
        let mut g = self.lock();
        let _window = g.tick(shared, period);
        self.publish(&g);
        drop(g);
        #[cfg(feature = "metrics")]
        crate::metrics::emit(&self.snapshot(shared, _window));
    }

    /// [`Governor::brake_step`]; returns whether the brake is on.
    pub(crate) fn brake_step(&self, shared: &Shared) -> bool {
        let mut g = self.lock();
        let on = g.brake_step(shared);
        self.publish(&g);
        on
    }

    /// [`Governor::attach_cpus`].
    pub(crate) fn attach_cpus(&self, shared: &Shared, cpus: f64) {
        let mut g = self.lock();
        g.attach_cpus(shared, cpus);
        self.publish(&g);
    }

    /// The limit now.
    pub(crate) fn limit(&self) -> f64 {
        self.limit.load()
    }

    /// CPUs the rate is computed for.
    pub(crate) fn cpus(&self) -> f64 {
        self.cpus.load()
    }

    /// Everything at once: what the governor published, the probe `window` and the queue's
    /// ledger.
    pub(crate) fn snapshot(&self, shared: &Shared, window: Window) -> Snapshot {
        let governed = Governed {
            limit: self.limit(),
            cpus: self.cpus(),
            ticks: self.ticks.load(Ordering::Relaxed),
            braked: shared.braked(),
            braked_time: Duration::from_nanos(self.braked_nanos.load(Ordering::Relaxed)),
            longest_wait: Duration::from_nanos(self.longest_wait_nanos.load(Ordering::Relaxed)),
        };
        Snapshot::new(governed, window, shared.queue.snapshot())
    }
}

/// An `f64` in an `AtomicU64`, for values the governor publishes.
#[derive(Default)]
struct AtomicF64(AtomicU64);

impl AtomicF64 {
    fn load(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
    fn store(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed)
    }
}

/// The CPUs `limit` of `cpus` pays for, rounded up: the most elastic tasks that need to run at
/// once to use the limit.
pub(crate) fn holder_cap(limit: f64, cpus: f64) -> usize {
    let c = (limit * cpus).ceil();
    if c.is_finite() && c >= 1.0 {
        c.min(usize::MAX as f64) as usize
    } else {
        1
    }
}

/// Closes the queue when the governor thread ends for any reason (including a panic), so no
/// waiter waits for a grant that can no longer come.
struct CloseOnExit(Queue);

impl Drop for CloseOnExit {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Start the governor thread for `shared`. It ends when the last strong reference to `shared`
/// is gone (every `Elastic`, `Paced`, `PacedStream` and `Pacer` dropped).
pub(crate) fn spawn(
    shared: &Arc<Shared>,
    control: Arc<Control>,
    tick: Duration,
) -> std::io::Result<()> {
    let weak = Arc::downgrade(shared);
    let queue = shared.queue.clone();
    let handle = thread::Builder::new()
        .name("elastic-cpu-governor".into())
        .spawn(move || run(weak, control, queue, tick))?;
    // A backlog seen by the probe wakes the governor at once (the brake).
    shared.probe.notify_on_alarm(handle.thread().clone());
    shared.set_governor_thread(handle.thread().clone());
    Ok(())
}

fn run(weak: Weak<Shared>, control: Arc<Control>, queue: Queue, period: Duration) {
    let _close = CloseOnExit(queue);
    let mut last = Instant::now();
    let mut next = last + period;
    loop {
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let now = Instant::now();
        let braked = if now < next {
            // Woken early: by the probe's alarm, a brake re-check, or a shutdown.
            control.brake_step(&shared)
        } else {
            // The real period (the OS may wake us late); capped so a long stall is not one
            // giant step.
            control.tick(&shared, (now - last).min(period * 10));
            last = now;
            next += period;
            if next <= now {
                next = now + period;
            }
            shared.braked()
        };
        drop(shared);
        let until = if braked {
            next.min(now + BRAKE_POLL)
        } else {
            next
        };
        if let Some(wait) = until.checked_duration_since(Instant::now()) {
            thread::park_timeout(wait);
        }
    }
}
