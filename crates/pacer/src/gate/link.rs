//! The governor's side of a gate: the setup class's own controller, steered by the same probe
//! on the same tick as the elastic limit.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;

use elastic_cpu_core::{
    rate_for, ControllerConfig, GateConfig, GateQueue, SettingError, StepController,
};

use super::settings::GateSettings;
use super::shared::GateShared;
use crate::running::RunningTime;
use crate::shared::QueueClock;

/// One gate as the governor holds it. Dropping it (the governor is gone) closes the gate, so
/// nobody waits for an admission that cannot come.
pub(crate) struct GateLink {
    gate: Weak<GateShared>,
    controller: StepController,
    cap_concurrency: bool,
    /// The longest admission wait in each tick of the probe window, newest last.
    waits: VecDeque<Duration>,
}

impl GateLink {
    pub(crate) fn new(
        gate: &Arc<GateShared>,
        controller: StepController,
        cap_concurrency: bool,
    ) -> GateLink {
        GateLink {
            gate: Arc::downgrade(gate),
            controller,
            cap_concurrency,
            waits: VecDeque::new(),
        }
    }

    /// The gate, while any handle, admission or permit holds it.
    pub(crate) fn gate(&self) -> Option<Arc<GateShared>> {
        self.gate.upgrade()
    }

    /// Apply the share to the gate's bucket for `cpus` CPUs.
    pub(crate) fn apply(&self, gate: &GateShared, cpus: f64) {
        let share = self.controller.share();
        gate.queue.set_rate(rate_for(share, cpus));
        if self.cap_concurrency {
            gate.queue
                .set_max_in_setup(Some(setups_at_once(share, cpus)));
        }
    }

    /// One tick: expire and grant at the old rate, step the controller on the probe's `p99`,
    /// apply the new share, publish. Returns false once the gate is gone (drop the link).
    pub(crate) fn tick(
        &mut self,
        p99: Option<Duration>,
        period: Duration,
        cpus: f64,
        intervals: usize,
    ) -> bool {
        let Some(gate) = self.gate() else {
            return false;
        };
        let had_waiters = gate.queue.tick();
        let share = self.controller.tick(p99, period, had_waiters);
        self.apply(&gate, cpus);
        self.waits.push_back(gate.queue.take_longest_wait());
        while self.waits.len() > intervals.max(1) {
            self.waits.pop_front();
        }
        let longest = self.waits.iter().copied().max().unwrap_or_default();
        gate.publish(share, longest);
        true
    }
}

/// The CPUs `share` of `cpus` pays for, rounded up, at least 1 (as the elastic holder cap).
fn setups_at_once(share: f64, cpus: f64) -> usize {
    let c = (share * cpus).ceil();
    if c.is_finite() && c >= 1.0 {
        c.min(usize::MAX as f64) as usize
    } else {
        1
    }
}

impl Drop for GateLink {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.upgrade() {
            gate.close();
        }
    }
}

/// Everything a new gate needs from the governor and the `Elastic` it belongs to.
pub(crate) struct GateParts<'a> {
    /// The elastic controller's constants: the gate's controller takes its target, steps and
    /// window, with the gate's own bounds.
    pub(crate) controller: &'a ControllerConfig,
    pub(crate) clock: QueueClock,
    pub(crate) running: RunningTime,
    pub(crate) quantum: Duration,
    pub(crate) os_yield: bool,
    pub(crate) cpus: f64,
    pub(crate) id: usize,
}

impl GateLink {
    /// A new gate from `settings` and its link for the governor.
    pub(crate) fn create(
        settings: &GateSettings,
        parts: GateParts<'_>,
    ) -> Result<(Arc<GateShared>, GateLink), SettingError> {
        let s = settings.resolve()?;
        // Idle decay stops at the initial share: a storm that comes after a calm spell starts
        // where the gate was set to start, not at the floor.
        let span = s.max_share - s.min_share;
        let inactive_point = if span > 0.0 {
            ((s.initial_share - s.min_share) / span).clamp(0.0, 1.0)
        } else {
            0.0
        };
        let config = ControllerConfig {
            min_share: s.min_share,
            max_share: s.max_share,
            inactive_point,
            ..parts.controller.clone()
        };
        let controller = StepController::with_initial_share(config, s.initial_share)?;
        let queue = GateQueue::new(
            parts.clock,
            rate_for(s.initial_share, parts.cpus),
            GateConfig {
                max_queue: s.max_queue,
                order: s.order,
                initial_cost: s.setup_cost,
            },
        );
        let gate = Arc::new(GateShared::new(
            queue,
            parts.running,
            parts.quantum,
            parts.os_yield,
            s.deadline,
            parts.id,
            s.initial_share,
        ));
        let link = GateLink::new(&gate, controller, s.cap_concurrency);
        link.apply(&gate, parts.cpus);
        Ok((gate, link))
    }

    /// Pause or resume the gate's grants (the backlog brake).
    pub(crate) fn brake(&self, on: bool) {
        if let Some(gate) = self.gate() {
            if on {
                gate.queue.pause();
            } else {
                gate.queue.resume();
            }
        }
    }
}
