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

use std::time::Duration;

use super::readings::Alarm;

/// The backlog brake's default threshold, in multiples of the controller's target.
pub const BRAKE_FACTOR: u32 = 4;

/// The longest a backlog brake holds elastic work back; then it stays off for
/// `COOLDOWN_FACTOR` times as long, so a sustained overload (the controller's job) cannot
/// starve elastic work below its floor.
pub const BRAKE_MAX: Duration = Duration::from_millis(100);

/// A backlog brake releases once no alarm (a foreground task over the threshold) came for
/// this long.
pub const DEFAULT_BRAKE_HOLD: Duration = Duration::from_millis(5);

/// After a brake that hit [`BRAKE_MAX`], the brake stays off this many times as long.
const COOLDOWN_FACTOR: u32 = 4;
/// How often the governor re-checks while the brake is on.
pub const BRAKE_POLL: Duration = Duration::from_millis(1);

/// What the backlog brake asks of the work queue at one look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BacklogChange {
    /// Nothing changes.
    Keep,
    /// The brake engages: pause the queue, tell holders to give back their grants.
    Engage,
    /// The brake releases after it `lasted`, because the backlog drained or, `spent`, it
    /// reached its longest: resume the queue.
    Release {
        /// How long it held.
        lasted: Duration,
        /// It reached its longest.
        spent: bool,
    },
}

/// The brake's state machine. It decides; the governor applies the [`Change`] to the queue.
#[derive(Debug, Default)]
pub struct BacklogBrake {
    /// When the current brake started (queue clock).
    engaged_at: Option<Duration>,
    /// Last time the alarm count moved while braked.
    quiet_since: Duration,
    /// Alarm count last seen.
    seen: u64,
    /// No new brake before this time.
    disarmed_until: Duration,
    /// Time spent braked, completed brakes only.
    total: Duration,
}

impl BacklogBrake {
    /// Look at the probe's alarm at `now` (the queue's clock): engage, release or keep.
    pub fn step(&mut self, now: Duration, probe: &dyn Alarm) -> BacklogChange {
        match self.engaged_at {
            None => {
                // During a cooldown the alarm is left raised: no wake-ups until we look again.
                // Its alarms are noted as seen, so that a flag still raised by them when the
                // cooldown ends does not brake: only an alarm after the last look does.
                if now < self.disarmed_until {
                    self.seen = probe.alarms();
                    return BacklogChange::Keep;
                }
                if !probe.take_alarm() {
                    return BacklogChange::Keep;
                }
                let alarms = probe.alarms();
                if alarms == self.seen {
                    return BacklogChange::Keep;
                }
                self.engaged_at = Some(now);
                self.quiet_since = now;
                self.seen = alarms;
                BacklogChange::Engage
            }
            Some(at) => {
                let alarms = probe.alarms();
                if alarms != self.seen {
                    self.seen = alarms;
                    self.quiet_since = now;
                }
                let quiet = now.saturating_sub(self.quiet_since) >= DEFAULT_BRAKE_HOLD;
                let spent = now.saturating_sub(at) >= BRAKE_MAX;
                if !quiet && !spent {
                    return BacklogChange::Keep;
                }
                if !quiet {
                    self.disarmed_until = now + BRAKE_MAX * COOLDOWN_FACTOR;
                }
                self.engaged_at = None;
                let lasted = now.saturating_sub(at);
                self.total += lasted;
                // Alarms seen while braked are accounted for; only a new one brakes again.
                let _ = probe.take_alarm();
                BacklogChange::Release {
                    lasted,
                    spent: !quiet,
                }
            }
        }
    }

    /// Whether the brake is on.
    pub fn is_on(&self) -> bool {
        self.engaged_at.is_some()
    }

    /// Time spent braked, brakes that ended.
    pub fn total(&self) -> Duration {
        self.total
    }
}
