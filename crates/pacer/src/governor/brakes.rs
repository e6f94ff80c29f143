//! The brakes between ticks: the backlog brake (on the probe's alarm) and, inside a quota, the
//! quota brake (on the process's CPU time against the period's quota). Their state machines
//! decide when to engage and release; the decision step holds the classes each applies to.

use std::time::Duration;

use elastic_cpu_core::decide::Hold;
use elastic_cpu_core::Clock;

use super::Governor;
use crate::quota::{QuotaBrake, QuotaChange};
use crate::signal::brake::{BacklogBrake, Change, BRAKE_POLL};
use crate::trace;

/// Both brakes and their counts.
pub(super) struct Brakes {
    /// `None`: off.
    brake: Option<BacklogBrake>,
    /// Inside a quota, with the headroom cap on: stops elastic work before a period's quota
    /// runs out.
    quota: Option<QuotaBrake>,
    /// Times the backlog brake engaged.
    brakes: u64,
}

impl Brakes {
    pub(super) fn new(brake: bool) -> Brakes {
        Brakes {
            brake: brake.then(BacklogBrake::default),
            quota: None,
            brakes: 0,
        }
    }

    /// The cgroup was throttled: the quota brake watches the next periods closely.
    pub(super) fn arm_quota(&mut self, now: Duration) {
        if let Some(quota) = &mut self.quota {
            quota.arm(now);
        }
    }

    /// A quota of `cpus` per `period` on `parallelism` CPUs applies: size the quota brake for
    /// it (made at the first; `always_armed` without a throttling reading to arm it).
    pub(super) fn size_quota(
        &mut self,
        cpus: f64,
        period: Duration,
        parallelism: usize,
        always_armed: bool,
    ) {
        match &mut self.quota {
            // The readings only give quotas it can meter; one given by hand that it cannot
            // leaves it as it was.
            Some(brake) => {
                brake.resize(cpus, period, parallelism);
            }
            None => self.quota = QuotaBrake::new(cpus, period, parallelism, always_armed),
        }
    }

    /// The quota is gone: the quota brake lets go (it keeps its counts); whether it was on.
    pub(super) fn leave_quota(&mut self, now: Duration) -> bool {
        match self.quota.as_mut().and_then(|b| b.release(now)) {
            Some(lasted) => {
                trace::quota_brake_released(lasted);
                true
            }
            None => false,
        }
    }

    /// Whether the backlog brake is on.
    pub(super) fn braked(&self) -> bool {
        self.brake.as_ref().is_some_and(BacklogBrake::is_on)
    }

    /// Whether the quota brake is on.
    pub(super) fn quota_braked(&self) -> bool {
        self.quota.as_ref().is_some_and(QuotaBrake::is_on)
    }

    pub(super) fn braked_time(&self) -> Duration {
        self.brake
            .as_ref()
            .map_or(Duration::ZERO, BacklogBrake::total)
    }

    pub(super) fn brakes(&self) -> u64 {
        self.brakes
    }

    pub(super) fn quota_braked_time(&self) -> Duration {
        self.quota
            .as_ref()
            .map_or(Duration::ZERO, QuotaBrake::total)
    }

    pub(super) fn quota_brakes(&self) -> u64 {
        self.quota.as_ref().map_or(0, QuotaBrake::brakes)
    }
}

impl Governor {
    /// Engage or release the backlog brake and the quota brake on every class each applies
    /// to. Returns when the governor thread should look again before its next tick: every
    /// `BRAKE_POLL` while the backlog brake is on, when the quota brake asks while it is armed.
    /// Runs on the governor thread (each tick and each wake-up), never on a worker.
    pub(crate) fn brake_step(&mut self) -> Option<Duration> {
        let now = self.clock.now();
        if let Some(brake) = &mut self.brakes.brake {
            let change = brake.step(now, &self.probe);
            let on = brake.is_on();
            match change {
                Change::Keep => {}
                Change::Engage => trace::brake_engaged(),
                Change::Release { lasted, spent } => trace::brake_released(lasted, spent),
            }
            if change != Change::Keep {
                self.brakes.brakes += u64::from(on);
                self.decider.set_hold(Hold::Brake, on);
            }
        }
        let in_quota = self.host.quota_cpus().is_some();
        if let Some(quota) = self.brakes.quota.as_mut().filter(|_| in_quota) {
            let change = quota.step(now, self.sources.process.cpu_time());
            match change {
                QuotaChange::Keep => {}
                QuotaChange::Engage => trace::quota_brake_engaged(),
                QuotaChange::Release { lasted } => trace::quota_brake_released(lasted),
            }
            if change != QuotaChange::Keep {
                self.decider.set_hold(Hold::Quota, quota.is_on());
            }
        }
        self.classes.sync_holds(&mut self.decider);
        self.recheck()
    }

    /// When the governor thread should look at the brakes again before its next tick.
    pub(crate) fn recheck(&self) -> Option<Duration> {
        let now = self.clock.now();
        let in_quota = self.host.quota_cpus().is_some();
        let check = self
            .brakes
            .quota
            .as_ref()
            .filter(|_| in_quota)
            .and_then(|q| q.next_check(now));
        if self.brakes.braked() {
            Some(check.map_or(BRAKE_POLL, |c| c.min(BRAKE_POLL)))
        } else {
            check
        }
    }

    /// Whether either brake holds elastic work now.
    pub(crate) fn holding(&self) -> bool {
        self.brakes.braked() || self.brakes.quota_braked()
    }
}
