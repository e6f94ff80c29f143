//! The backlog brake: elastic work stops taking CPU the moment a foreground task is seen
//! waiting too long in a run queue, and resumes once the backlog has drained.
//!
//! The controller steers the *average* share by a p99 over a window of a second or more; it
//! cannot see a backlog that builds in milliseconds (a burst of requests, the OS or the
//! hypervisor stalling the process). While a backlog drains, every CPU-second elastic work
//! takes is one the backlog waits longer: the brake hands that CPU to the foreground and defers
//! the elastic work instead (its tokens keep accruing, so its share is not lost).
//!
//! Detection is the probe's alarm (a foreground poll whose queue latency reached `at`); the
//! probe unparks the governor thread, which pauses the work queue at once. Holders give their
//! grants back at their next poll; waiters stay queued. Release: no alarm for `hold`, or the
//! brake has been on for `max` (then it stays off for `COOLDOWN_FACTOR × max`, so a sustained
//! overload, which is the controller's job, cannot starve elastic work below its floor).

use std::sync::atomic::Ordering;
use std::time::Duration;

use elastic_cpu_core::Clock;

use crate::shared::Shared;

/// Quiet time (no alarm) after which the brake releases, by default.
pub const DEFAULT_BRAKE_HOLD: Duration = Duration::from_millis(5);
/// Longest one brake lasts.
pub const BRAKE_MAX: Duration = Duration::from_millis(100);
/// After a brake that hit [`BRAKE_MAX`], the brake stays off this many times as long.
const COOLDOWN_FACTOR: u32 = 4;
/// How often the governor re-checks while the brake is on.
pub(crate) const BRAKE_POLL: Duration = Duration::from_millis(1);

/// Brake state (behind its own lock, taken by the governor and the snapshot).
#[derive(Default)]
pub(crate) struct Brake {
    /// When the current brake started (queue clock).
    engaged_at: Option<Duration>,
    /// Last time the alarm count moved while braked.
    quiet_since: Duration,
    /// Alarm count last seen.
    seen: u64,
    /// No new brake before this time.
    disarmed_until: Duration,
    /// Time spent braked, completed brakes only.
    pub(crate) total: Duration,
}

impl Shared {
    /// Engage or release the brake. Returns whether it is on (the governor then re-checks
    /// every [`BRAKE_POLL`]). Runs on the governor thread (each tick and each wake-up), never
    /// on a worker: a lock, a clock read and an atomic swap.
    pub(crate) fn brake_step(&self) -> bool {
        let Some(lock) = &self.brake else {
            return false;
        };
        let mut b = lock.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.clock.now();
        match b.engaged_at {
            None => {
                // During a cooldown the alarm is left raised: no wake-ups until we look again.
                // Its alarms are noted as seen, so that a flag still raised by them when the
                // cooldown ends does not brake: only an alarm after the last look does.
                if now < b.disarmed_until {
                    b.seen = self.probe.alarms();
                    return false;
                }
                if !self.probe.take_alarm() {
                    return false;
                }
                let alarms = self.probe.alarms();
                if alarms == b.seen {
                    return false;
                }
                b.engaged_at = Some(now);
                b.quiet_since = now;
                b.seen = alarms;
                self.queue.pause();
                self.braked.store(true, Ordering::Relaxed);
                true
            }
            Some(at) => {
                let alarms = self.probe.alarms();
                if alarms != b.seen {
                    b.seen = alarms;
                    b.quiet_since = now;
                }
                let quiet = now.saturating_sub(b.quiet_since) >= DEFAULT_BRAKE_HOLD;
                let spent = now.saturating_sub(at) >= BRAKE_MAX;
                if !quiet && !spent {
                    return true;
                }
                if !quiet {
                    b.disarmed_until = now + BRAKE_MAX * COOLDOWN_FACTOR;
                }
                b.engaged_at = None;
                b.total += now.saturating_sub(at);
                // Alarms seen while braked are accounted for; only a new one brakes again.
                let _ = self.probe.take_alarm();
                self.braked.store(false, Ordering::Relaxed);
                self.queue.resume();
                false
            }
        }
    }

    /// Whether elastic work should give back what it holds at its next poll.
    #[inline]
    pub(crate) fn braked(&self) -> bool {
        self.braked.load(Ordering::Relaxed)
    }
}
