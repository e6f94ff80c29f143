//! The governor thread: ticks the governor every period, wakes early for the backlog brake,
//! and ends when the `Elastic` it serves is gone or shut down.

use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use super::Control;
use crate::shared::{Queue, Shared};

/// The thread's name.
pub(crate) const NAME: &str = "elastic-cpu-governor";

/// Closes the queue when the governor thread ends for any reason (including a panic), so no
/// waiter waits for a grant that can no longer come.
struct CloseOnExit(Queue);

impl Drop for CloseOnExit {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Start the governor thread for `shared`. It ends when the last strong reference to `shared`
/// is gone (every `Elastic`, `Paced`, `PacedStream` and `Pacer` dropped), or at
/// [`Control::shutdown`], which joins it.
pub(crate) fn spawn(
    shared: &Arc<Shared>,
    control: &Arc<Control>,
    tick: Duration,
) -> std::io::Result<()> {
    let weak = Arc::downgrade(shared);
    let queue = shared.queue.clone();
    let ctl = control.clone();
    let handle = thread::Builder::new()
        .name(NAME.into())
        .spawn(move || run(weak, ctl, queue, tick))?;
    // A backlog seen by the probe wakes the governor at once (the brake).
    shared.probe.notify_on_alarm(handle.thread().clone());
    shared.set_governor_thread(handle.thread().clone());
    *control.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
    Ok(())
}

fn run(weak: Weak<Shared>, control: Arc<Control>, queue: Queue, period: Duration) {
    let _close = CloseOnExit(queue);
    let mut last = Instant::now();
    let mut next = last + period;
    loop {
        if control.stopped() {
            return;
        }
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let now = Instant::now();
        let recheck = if now < next {
            // Woken early: by the probe's alarm, a brake's re-check, or a shutdown.
            control.brake_step()
        } else {
            // The real period (the OS may wake us late); capped so a long stall is not one
            // giant step.
            control.tick(&shared, (now - last).min(period * 10));
            last = now;
            next += period;
            if next <= now {
                next = now + period;
            }
            control.recheck()
        };
        drop(shared);
        let until = recheck.map_or(next, |r| next.min(now + r));
        if let Some(wait) = until.checked_duration_since(Instant::now()) {
            thread::park_timeout(wait);
        }
    }
}
