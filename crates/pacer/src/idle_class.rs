//! The governor's side of the idle class: elastic work on an `Elastic`'s idle pool, paced by its
//! own bucket and its own limit, steered on the same tick by the same probe with a looser
//! target (docs/design.md §5, "The idle pool").
//!
//! Why a class of its own: on the idle pool's `SCHED_IDLE` threads the kernel already keeps
//! elastic work off a core the moment a foreground thread wants it, so holding that work to the
//! same-runtime limit buys the foreground nothing and costs the elastic work most of its CPU.
//! Measured on the demo's 2-vCPU VM it costs the foreground too: with the cores idle more, a
//! foreground wake-up more often has to wake a halted vCPU, and the scheduling p99 went *up* as
//! the limit went down (docs/design.md §5). What the kernel does not do is keep the total
//! within a CPU quota: idle threads spend it like any other. So the idle class takes what the
//! kernel lets it (up to all the CPUs) while the foreground's p99 stays under
//! [`IDLE_TARGET_FACTOR`] × the target, and the cgroup's throttling steps it down as it steps the
//! elastic limit.

use std::sync::{Arc, Weak};
use std::time::Duration;

use elastic_cpu_core::{ControllerConfig, SettingError, StepController};

use crate::shared::{Queue, Shared};

/// The idle class's p99 target, as a multiple of the elastic target: the level at which the
/// backlog brake acts (`BRAKE_FACTOR`), a foreground that really waits, not noise the kernel
/// absorbs anyway.
pub(crate) const IDLE_TARGET_FACTOR: u32 = 4;

/// The idle class's ceiling: every CPU the bucket is sized for.
const IDLE_MAX_LIMIT: f64 = 1.0;

/// Where the idle class starts and what it is steered by.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IdleStart {
    /// The elastic limit now.
    pub(crate) elastic_limit: f64,
    /// The elastic limit is fixed: the idle class holds it too.
    pub(crate) fixed: Option<f64>,
    /// A CPU quota was seen: start from the elastic limit, not the ceiling, and decay when
    /// idle work stops (a quota is shared; the bare host's idle cores are not).
    pub(crate) quota: bool,
}

impl IdleStart {
    /// The limit the idle class starts at.
    pub(crate) fn initial_share(&self) -> f64 {
        match (self.fixed, self.quota) {
            (Some(fixed), _) => fixed,
            (None, true) => self.elastic_limit,
            (None, false) => IDLE_MAX_LIMIT,
        }
    }
}

/// The idle class as the governor holds it.
pub(crate) struct IdleClass {
    shared: Weak<Shared>,
    controller: StepController,
    fixed: Option<f64>,
}

impl IdleClass {
    /// The controller settings of the idle class, from the elastic ones.
    pub(crate) fn config(elastic: &ControllerConfig, quota: bool) -> ControllerConfig {
        ControllerConfig {
            target_p99: elastic
                .target_p99
                .saturating_mul(IDLE_TARGET_FACTOR)
                .min(Duration::from_secs(1)),
            max_share: IDLE_MAX_LIMIT,
            // On a bare host idle work that comes back after a pause starts where it was.
            inactive_point: if quota { elastic.inactive_point } else { 1.0 },
            ..elastic.clone()
        }
    }

    /// A new idle class of `parent` over `queue`, with its link for the governor.
    pub(crate) fn create(
        parent: &Arc<Shared>,
        queue: Queue,
        elastic: &ControllerConfig,
        start: IdleStart,
    ) -> Result<(Arc<Shared>, IdleClass), SettingError> {
        let config = IdleClass::config(elastic, start.quota);
        let controller = StepController::with_initial_share(config, start.initial_share())?;
        // The quantum is the slice: no yield on an idle thread lets a foreground task in (the
        // kernel does that), it would only cost the scheduler.
        let shared = Arc::new(Shared::idle_class(parent, queue, parent.slice));
        let class = IdleClass {
            shared: Arc::downgrade(&shared),
            controller,
            fixed: start.fixed,
        };
        Ok((shared, class))
    }

    /// The class's pacing state, while any pool or work holds it.
    pub(crate) fn shared(&self) -> Option<Arc<Shared>> {
        self.shared.upgrade()
    }

    /// The limit now.
    pub(crate) fn limit(&self) -> f64 {
        self.fixed.unwrap_or(self.controller.share())
    }

    /// One controller step on the foreground's `p99` (`Duration::MAX` while throttled).
    pub(crate) fn step(
        &mut self,
        p99: Option<Duration>,
        period: Duration,
        had_waiters: bool,
    ) -> f64 {
        match self.fixed {
            Some(fixed) => fixed,
            None => self.controller.tick(p99, period, had_waiters),
        }
    }
}

impl Drop for IdleClass {
    fn drop(&mut self) {
        // The governor is gone: nobody waits for a grant that cannot come.
        if let Some(shared) = self.shared.upgrade() {
            shared.queue.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_target_is_looser_and_its_ceiling_all_cpus() {
        let elastic = ControllerConfig {
            target_p99: Duration::from_micros(250),
            ..ControllerConfig::default()
        };
        let host = IdleClass::config(&elastic, false);
        assert_eq!(host.target_p99, Duration::from_millis(1));
        assert_eq!(host.max_share, 1.0);
        assert_eq!(host.inactive_point, 1.0);
        assert_eq!(host.min_share, elastic.min_share);
        assert!(host.validate().is_ok());
        let quota = IdleClass::config(&elastic, true);
        assert_eq!(quota.inactive_point, elastic.inactive_point);
        // A target near the top stays valid.
        let slow = ControllerConfig {
            target_p99: Duration::from_millis(900),
            ..ControllerConfig::default()
        };
        assert_eq!(
            IdleClass::config(&slow, false).target_p99,
            Duration::from_secs(1)
        );
    }
}
