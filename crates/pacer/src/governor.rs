//! The governor: the control loop in one place. Once per tick: probe → controller → bucket
//! rate → holder cap → grants; in between, the backlog brake. It runs on its own OS thread, off
//! the runtime it measures: a saturated runtime would delay the very loop that must react to it.

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread;
use std::time::{Duration, Instant};

use elastic_cpu_core::{rate_for, Clock, StepController};
use elastic_cpu_probe::Window;

use crate::brake::{Brake, Change, BRAKE_POLL};
use crate::shared::{Queue, QueueClock, Shared};
use crate::snapshot::{Governed, Snapshot};

/// What decides the limit and applies it: the controller (or the fixed limit), the backlog
/// brake, the holder cap, and the values they published last. It acts on the [`Shared`] state
/// it is handed, and is shared by the governor thread and the `Elastic` handles (snapshots,
/// `attach`, manual ticks) behind one lock.
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
        window
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
    pub(crate) fn cap_holders(&self, shared: &Shared) {
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
    pub(crate) fn attach_cpus(&mut self, shared: &Shared, cpus: f64) {
        if !self.cpus_fixed {
            self.cpus = cpus;
            shared.queue.set_rate(self.rate());
        }
    }

    pub(crate) fn limit(&self) -> f64 {
        self.limit
    }

    pub(crate) fn cpus(&self) -> f64 {
        self.cpus
    }

    /// Everything at once: what the governor published, the probe `window` and the queue's
    /// ledger.
    pub(crate) fn snapshot(&self, shared: &Shared, window: Window) -> Snapshot {
        let governed = Governed {
            limit: self.limit,
            cpus: self.cpus,
            ticks: self.ticks,
            braked: shared.braked(),
            braked_time: self.brake.as_ref().map_or(Duration::ZERO, Brake::total),
        };
        Snapshot::new(governed, window, shared.queue.snapshot())
    }
}

/// Lock the governor; a panic in an earlier tick leaves its state usable.
pub(crate) fn lock(governor: &Mutex<Governor>) -> MutexGuard<'_, Governor> {
    governor.lock().unwrap_or_else(|p| p.into_inner())
}

/// One tick of `governor` over `shared`, then the metrics export (outside the lock: an exporter
/// may call back into the handle).
pub(crate) fn tick(governor: &Mutex<Governor>, shared: &Shared, period: Duration) {
    let mut g = lock(governor);
    let window = g.tick(shared, period);
    #[cfg(feature = "metrics")]
    {
        let snapshot = g.snapshot(shared, window);
        drop(g);
        crate::metrics::emit(&snapshot);
    }
    #[cfg(not(feature = "metrics"))]
    drop((g, window));
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
    governor: Arc<Mutex<Governor>>,
    tick: Duration,
) -> std::io::Result<()> {
    let weak = Arc::downgrade(shared);
    let queue = shared.queue.clone();
    let handle = thread::Builder::new()
        .name("elastic-cpu-governor".into())
        .spawn(move || run(weak, governor, queue, tick))?;
    // A backlog seen by the probe wakes the governor at once (the brake).
    shared.probe.notify_on_alarm(handle.thread().clone());
    shared.set_governor_thread(handle.thread().clone());
    Ok(())
}

fn run(weak: Weak<Shared>, governor: Arc<Mutex<Governor>>, queue: Queue, period: Duration) {
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
            lock(&governor).brake_step(&shared)
        } else {
            // The real period (the OS may wake us late); capped so a long stall is not one
            // giant step.
            tick(&governor, &shared, (now - last).min(period * 10));
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
