//! The brakes between ticks: the backlog brake (on the backlog alarm) and, inside a quota, the
//! quota brake (on the process's CPU time against the period's quota). Each decides when to
//! engage and release; the decision holds the classes each applies to.

use std::time::Duration;

use super::backlog_brake::{BacklogBrake, BacklogChange, BRAKE_POLL};
use super::quota_brake::{QuotaBrake, QuotaChange};
use super::readings::{Alarm, QuotaLimit};
use super::{Decider, Hold};

/// Both brakes and their counts.
#[derive(Debug)]
pub(crate) struct Brakes {
    /// `None`: off.
    backlog: Option<BacklogBrake>,
    /// Inside a quota, with the headroom cap on.
    quota: Option<QuotaBrake>,
    /// Times the backlog brake engaged.
    engaged: u64,
    /// Throttled periods seen at the last tick.
    throttled: u64,
}

impl Brakes {
    pub(crate) fn new(backlog: bool) -> Brakes {
        Brakes {
            backlog: backlog.then(BacklogBrake::default),
            quota: None,
            engaged: 0,
            throttled: 0,
        }
    }
}

/// What the brakes did at one look between ticks, and when to look again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BrakeStep {
    /// The backlog brake.
    pub backlog: BacklogChange,
    /// The quota brake.
    pub quota: QuotaChange,
    /// Look again after this long (before the next tick); `None`: at the next tick.
    pub recheck: Option<Duration>,
}

/// What the host is, as the driver last read it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostReading {
    /// CPUs the shares are of.
    pub cpus: f64,
    /// The quota in force.
    pub quota: Option<QuotaLimit>,
    /// A quota was seen (or a throttling watch set by hand).
    pub in_quota: bool,
    /// CPUs the process can run on at once (the quota brake's reading speed).
    pub parallelism: usize,
    /// The cgroup's throttling is watched (else the quota brake is armed always).
    pub throttling: bool,
}

impl Decider {
    /// One look between ticks at `now`: step the backlog brake on `alarm` and, inside a quota,
    /// the quota brake on the process's CPU time, and hold or release the classes each applies
    /// to (through [`hold_changes`](Self::hold_changes)).
    pub fn between(
        &mut self,
        now: Duration,
        process_cpu: Option<Duration>,
        alarm: &dyn Alarm,
    ) -> BrakeStep {
        let mut backlog = BacklogChange::Keep;
        if let Some(brake) = &mut self.brakes.backlog {
            backlog = brake.step(now, alarm);
            if backlog != BacklogChange::Keep {
                let on = brake.is_on();
                self.brakes.engaged += u64::from(on);
                self.set_hold(Hold::Brake, on);
            }
        }
        let mut quota = QuotaChange::Keep;
        let in_quota = self.quota.is_some();
        if let Some(brake) = self.brakes.quota.as_mut().filter(|_| in_quota) {
            quota = brake.step(now, process_cpu);
            if quota != QuotaChange::Keep {
                let on = brake.is_on();
                self.set_hold(Hold::Quota, on);
            }
        }
        BrakeStep {
            backlog,
            quota,
            recheck: self.recheck(now),
        }
    }

    /// When to look at the brakes again before the next tick, from `now`.
    pub fn recheck(&self, now: Duration) -> Option<Duration> {
        let check = self
            .brakes
            .quota
            .as_ref()
            .filter(|_| self.quota.is_some())
            .and_then(|q| q.next_check(now));
        if self.backlog_braked() {
            Some(check.map_or(BRAKE_POLL, |c| c.min(BRAKE_POLL)))
        } else {
            check
        }
    }

    /// The cgroup's throttled periods so far, at `now`: a new one arms the quota brake.
    pub(crate) fn note_throttling(&mut self, now: Duration, throttled: u64) {
        if throttled > self.brakes.throttled {
            if let Some(quota) = &mut self.brakes.quota {
                quota.arm(now);
            }
        }
        self.brakes.throttled = throttled;
    }

    /// Size the quota brake for `host` at `now` (made at the first quota, let go when it
    /// goes); returns what that did to it.
    pub(crate) fn size_quota_brake(&mut self, host: &HostReading, now: Duration) -> QuotaChange {
        match host.quota {
            Some(q) if self.headroom_on() => {
                match &mut self.brakes.quota {
                    // A quota it cannot meter leaves it as it was.
                    Some(brake) => {
                        brake.resize(q.cpus, q.period, host.parallelism);
                    }
                    None => {
                        self.brakes.quota =
                            QuotaBrake::new(q.cpus, q.period, host.parallelism, !host.throttling);
                    }
                }
                QuotaChange::Keep
            }
            Some(_) => QuotaChange::Keep,
            None => match self.brakes.quota.as_mut().and_then(|b| b.release(now)) {
                Some(lasted) => {
                    self.set_hold(Hold::Quota, false);
                    QuotaChange::Release { lasted }
                }
                None => QuotaChange::Keep,
            },
        }
    }

    /// Whether either brake holds elastic work now.
    pub fn braking(&self) -> bool {
        self.backlog_braked() || self.brakes.quota.as_ref().is_some_and(QuotaBrake::is_on)
    }

    fn backlog_braked(&self) -> bool {
        self.brakes
            .backlog
            .as_ref()
            .is_some_and(BacklogBrake::is_on)
    }

    /// Time the backlog brake held, brakes that ended; and times it engaged.
    pub fn backlog_brakes(&self) -> (Duration, u64) {
        let total = self
            .brakes
            .backlog
            .as_ref()
            .map_or(Duration::ZERO, BacklogBrake::total);
        (total, self.brakes.engaged)
    }

    /// Time the quota brake held, and times it engaged.
    pub fn quota_brakes(&self) -> (Duration, u64) {
        self.brakes
            .quota
            .as_ref()
            .map_or((Duration::ZERO, 0), |q| (q.total(), q.brakes()))
    }
}
