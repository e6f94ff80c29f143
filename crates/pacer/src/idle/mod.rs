//! The idle-priority pool: elastic work on a companion runtime whose threads run at the lowest
//! OS priority, paced as a class of its own (its bucket, its share), steered on the same tick
//! by the same signal with a looser target.
//!
//! Why a class of its own: on the pool's `SCHED_IDLE` threads the kernel already keeps elastic
//! work off a core the moment a foreground thread wants it, so holding that work to the
//! same-runtime share buys the foreground little and costs the elastic work most of its CPU
//! (and, with the cores idle more, a foreground wake-up more often has to wake a halted CPU).
//! What the kernel does not do is keep the total within a CPU quota: idle threads spend it like
//! any other. So the idle class takes what the kernel lets it (up to every CPU) while the
//! signal stays under 4 × the target, and the cgroup's throttling and the quota's headroom hold
//! it as they hold the `Elastic`'s own class. Nor does idle priority keep the wake-ups of a
//! normal-priority thread beside the runtime (a client library's) short: on a busy core they
//! queue and preempt. So while those threads wait over their allowance the idle class takes no
//! more than the own class's share.

mod pool;
pub(crate) mod watch;

use std::sync::Arc;
use std::time::Duration;

use elastic_cpu_core::{ControllerConfig, SettingError, StepController};

pub use self::pool::{IdlePriority, IdleRuntime};
use crate::grant::class_state::{Queue, ClassState};
use elastic_cpu_core::decide::Limit;

/// The idle class's target, as a multiple of the elastic target: the level at which the
/// backlog brake acts ([`BRAKE_FACTOR`](crate::settings::BRAKE_FACTOR)), a foreground that
/// really waits, not noise the kernel absorbs anyway.
pub(crate) use elastic_cpu_core::decide::IDLE_TARGET_FACTOR;

/// The idle class's ceiling: every CPU the bucket is sized for.
const IDLE_MAX_SHARE: f64 = 1.0;

/// Where the idle class starts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IdleStart {
    /// The `Elastic`'s own share now.
    pub(crate) elastic_share: f64,
    /// The `Elastic`'s share is fixed: the idle class holds it too.
    pub(crate) fixed: Option<f64>,
    /// A CPU quota was seen: start from the elastic share, not the ceiling, and decay when
    /// idle work stops (a quota is shared; a bare host's idle cores are not).
    pub(crate) quota: bool,
}

impl IdleStart {
    /// The share the idle class starts at.
    pub(crate) fn initial_share(&self) -> f64 {
        match (self.fixed, self.quota) {
            (Some(fixed), _) => fixed,
            (None, true) => self.elastic_share,
            (None, false) => IDLE_MAX_SHARE,
        }
    }
}

/// The idle class's controller settings, from the `Elastic`'s own.
pub(crate) fn controller(elastic: &ControllerConfig, quota: bool) -> ControllerConfig {
    ControllerConfig {
        target_p99: elastic
            .target_p99
            .saturating_mul(IDLE_TARGET_FACTOR)
            .min(Duration::from_secs(1)),
        max_share: IDLE_MAX_SHARE,
        // On a bare host idle work that comes back after a pause starts where it was.
        inactive_point: if quota { elastic.inactive_point } else { 1.0 },
        ..elastic.clone()
    }
}

/// A new idle class of `parent` over `queue`, and the limit that decides its share.
pub(crate) fn create(
    parent: &Arc<ClassState>,
    queue: Queue,
    elastic: &ControllerConfig,
    start: IdleStart,
) -> Result<(Arc<ClassState>, Limit), SettingError> {
    let limit = match start.fixed {
        Some(share) => Limit::Fixed(share),
        None => Limit::Controller(Box::new(StepController::with_initial_share(
            controller(elastic, start.quota),
            start.initial_share(),
        )?)),
    };
    // A yield on an idle thread lets no foreground task in (the kernel does that), it only
    // costs the scheduler: the quantum is the slice, unless the pool unstacks workers, which it
    // considers once a quantum (a pool task mostly runs on past it: `quantum::may_run_on`).
    let quantum = if parent.unstack_on {
        parent.quantum
    } else {
        parent.slice
    };
    let shared = Arc::new(ClassState::idle_class(parent, queue, quantum));
    Ok((shared, limit))
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
        let host = controller(&elastic, false);
        assert_eq!(host.target_p99, Duration::from_millis(1));
        assert_eq!(host.max_share, 1.0);
        assert_eq!(host.inactive_point, 1.0);
        assert_eq!(host.min_share, elastic.min_share);
        assert!(host.validate().is_ok());
        let quota = controller(&elastic, true);
        assert_eq!(quota.inactive_point, elastic.inactive_point);
        // A target near the top stays valid.
        let slow = ControllerConfig {
            target_p99: Duration::from_millis(900),
            ..ControllerConfig::default()
        };
        assert_eq!(controller(&slow, false).target_p99, Duration::from_secs(1));
    }
}
