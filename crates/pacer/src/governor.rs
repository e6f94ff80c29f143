//! The governor: probe → controller → bucket, once per tick, on its own OS thread.
//!
//! It runs off the runtime it measures: a saturated runtime would delay the very loop that
//! must react to it.

use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use elastic_cpu_core::{rate_for, StepController};

use crate::shared::{Queue, Shared};

/// The controller (or the fixed limit) the ticks drive.
pub(crate) struct GovernorState {
    pub(crate) controller: StepController,
    pub(crate) fixed: Option<f64>,
}

impl Shared {
    /// One governor tick: rotate the probe window, read its p99, step the controller, set the
    /// bucket's rate, grant waiters.
    pub(crate) fn tick(&self, period: Duration) {
        self.brake_step();
        self.probe.rotate();
        let window = self.probe.window();
        let p99 = window.queue_latency.all.p99;
        // Grants waiters at the old rate and clears "had waiters since the last tick".
        let had_waiters = self.queue.tick();
        let limit = {
            let mut g = self
                .governor
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match g.fixed {
                Some(fixed) => fixed,
                None => g.controller.tick(p99, period, had_waiters),
            }
        };
        self.limit.store(limit);
        self.queue.set_rate(rate_for(limit, self.cpus.load()));
        self.cap_holders(limit);
        self.ticks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        crate::metrics::emit(self, &window, limit);
    }
}

impl Shared {
    /// With the concurrency cap on: at most `ceil(limit × cpus)` grants at a time.
    pub(crate) fn cap_holders(&self, limit: f64) {
        if self.cap_concurrency {
            self.queue
                .set_max_holders(Some(holder_cap(limit, self.cpus.load())));
        }
    }
}

/// The CPUs `limit` of `cpus` pays for, rounded up: the most elastic tasks that need to run at
/// once to use the share.
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
struct CloseOnExit(Arc<Queue>);

impl Drop for CloseOnExit {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Start the governor thread for `shared`. It ends when the last strong reference to `shared`
/// is gone (every `Elastic`, `Paced` and `Pacer` dropped).
pub(crate) fn spawn(shared: &Arc<Shared>, tick: Duration) -> std::io::Result<()> {
    let weak = Arc::downgrade(shared);
    let queue = shared.queue.clone();
    let handle = thread::Builder::new()
        .name("elastic-cpu-governor".into())
        .spawn(move || run(weak, queue, tick))?;
    // A backlog seen by the probe wakes the governor at once (the brake).
    shared.probe.notify_on_alarm(handle.thread().clone());
    *shared
        .governor_thread
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = Some(handle.thread().clone());
    Ok(())
}

fn run(weak: Weak<Shared>, queue: Arc<Queue>, tick: Duration) {
    let _close = CloseOnExit(queue);
    let mut last = Instant::now();
    let mut next = last + tick;
    loop {
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let now = Instant::now();
        let braked = if now < next {
            // Woken early: by the probe's alarm, a brake re-check, or a shutdown.
            shared.brake_step()
        } else {
            // The real period (the OS may wake us late); capped so a long stall is not one
            // giant step.
            let period = (now - last).min(tick * 10);
            shared.tick(period);
            last = now;
            next += tick;
            if next <= now {
                next = now + tick;
            }
            shared.braked()
        };
        drop(shared);
        let until = if braked {
            next.min(now + crate::brake::BRAKE_POLL)
        } else {
            next
        };
        if let Some(wait) = until.checked_duration_since(Instant::now()) {
            thread::park_timeout(wait);
        }
    }
}
