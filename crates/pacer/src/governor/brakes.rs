//! The brakes between ticks, as the decision step runs them (`elastic_cpu_core::decide`): the
//! backlog brake on the probe's alarm, the quota brake on the process's CPU time. The governor
//! thread looks each tick and each time the alarm or a re-check wakes it.

use std::time::Duration;

use elastic_cpu_core::decide::{Alarm, BacklogChange, QuotaChange};
use elastic_cpu_core::Clock;
use elastic_cpu_probe::Probe;

use super::Governor;
use crate::trace;

/// The probe's backlog alarm, as the decision step's brake reads it.
pub(super) struct ProbeAlarm<'a>(pub(super) &'a Probe);

impl Alarm for ProbeAlarm<'_> {
    fn alarms(&self) -> u64 {
        self.0.alarms()
    }

    fn take_alarm(&self) -> bool {
        self.0.take_alarm()
    }
}

impl Governor {
    /// Engage or release the backlog brake and the quota brake on every class each applies
    /// to. Returns when the governor thread should look again before its next tick: every
    /// `BRAKE_POLL` while the backlog brake is on, when the quota brake asks while it is armed.
    /// Runs on the governor thread (each tick and each wake-up), never on a worker.
    pub(crate) fn brake_step(&mut self) -> Option<Duration> {
        let now = self.clock.now();
        let cpu = self.sources.process.cpu_time();
        let step = self.decider.between(now, cpu, &ProbeAlarm(&self.probe));
        match step.backlog {
            BacklogChange::Keep => {}
            BacklogChange::Engage => trace::brake_engaged(),
            BacklogChange::Release { lasted, spent } => trace::brake_released(lasted, spent),
        }
        trace_quota(step.quota);
        self.classes.sync_holds(&mut self.decider);
        step.recheck
    }

    /// When the governor thread should look at the brakes again before its next tick.
    pub(crate) fn recheck(&self) -> Option<Duration> {
        self.decider.recheck(self.clock.now())
    }

    /// Whether either brake holds elastic work now.
    pub(crate) fn holding(&self) -> bool {
        self.decider.braking()
    }
}

/// A `tracing` event for what the quota brake did.
pub(super) fn trace_quota(change: QuotaChange) {
    match change {
        QuotaChange::Keep => {}
        QuotaChange::Engage => trace::quota_brake_engaged(),
        QuotaChange::Release { lasted } => trace::quota_brake_released(lasted),
    }
}
