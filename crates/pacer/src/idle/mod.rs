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
mod spread;
pub(crate) mod watch;

use std::sync::Arc;

use elastic_cpu_core::{ControllerConfig, SettingError};

pub use self::pool::{IdlePriority, IdleRuntime};
use crate::grant::class_state::{Queue, ClassState};
pub(crate) use elastic_cpu_core::decide::IdleStart;
use elastic_cpu_core::decide::{idle_limit, Limit};

/// A new idle class of `parent` over `queue`, and the limit that decides its share.
pub(crate) fn create(
    parent: &Arc<ClassState>,
    queue: Queue,
    elastic: &ControllerConfig,
    start: IdleStart,
) -> Result<(Arc<ClassState>, Limit), SettingError> {
    let limit = idle_limit(elastic, start)?;
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
