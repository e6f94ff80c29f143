//! The governor thread: ticks the governor every period, wakes early for the backlog brake,
//! and ends when the `Elastic` it serves is gone or shut down. However it ends (a panic
//! included), everything it steered is closed: it is never restarted.

use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use super::Control;
use crate::grant::class_state::ClassState;
use crate::snapshot::GovernorState;

/// The thread's name.
pub(crate) const NAME: &str = "elastic-cpu-governor";

/// Ends the governor when its thread ends for any reason, a panic included: every class and
/// gate closes, no brake stays on, and the snapshot and the metrics say why.
struct EndOnExit(Arc<Control>);

impl Drop for EndOnExit {
    fn drop(&mut self) {
        let why = if thread::panicking() {
            GovernorState::Panicked
        } else if self.0.stopped() {
            GovernorState::ShutDown
        } else {
            GovernorState::Exited
        };
        // Nothing in it should panic; were it to, during a panic's unwinding that would abort.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.0.end(why)));
    }
}

/// Start the governor thread for `shared`. It ends when the last strong reference to `shared`
/// is gone (every `Elastic`, `Paced`, `PacedStream` and `Pacer` dropped), or at
/// [`Control::shutdown`], which joins it.
pub(crate) fn spawn(
    shared: &Arc<ClassState>,
    control: &Arc<Control>,
    tick: Duration,
) -> std::io::Result<()> {
    let weak = Arc::downgrade(shared);
    let ctl = control.clone();
    let handle = thread::Builder::new()
        .name(NAME.into())
        .spawn(move || run(weak, ctl, tick))?;
    // A backlog seen by the probe wakes the governor at once (the brake).
    shared.probe.notify_on_alarm(handle.thread().clone());
    shared.set_governor_thread(handle.thread().clone());
    *control.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
    Ok(())
}

fn run(weak: Weak<ClassState>, control: Arc<Control>, period: Duration) {
    let _end = EndOnExit(control.clone());
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
        #[cfg(feature = "test-util")]
        match control.fault() {
            Some(super::GovernorEnd::Exit) => return,
            Some(super::GovernorEnd::Panic) => {
                panic!("a governor panic injected by testing::Drive::end_governor")
            }
            None => {}
        }
        let until = recheck.map_or(next, |r| next.min(now + r));
        if let Some(wait) = until.checked_duration_since(Instant::now()) {
            thread::park_timeout(wait);
        }
    }
}
