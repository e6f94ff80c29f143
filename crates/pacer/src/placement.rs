//! Where `Elastic::spawn` runs elastic work: on the runtime it is called from, or on the
//! `Elastic`'s own idle pool, made at the first spawn that goes there and shut down with the last
//! `Elastic` handle (the handles hold it, so its threads, which keep the `Elastic`'s pacing
//! state alive, never keep the governor alive on their own).

use std::fmt;
#[cfg(feature = "idle-pool")]
use std::sync::{Mutex, MutexGuard};

#[cfg(feature = "idle-pool")]
use crate::idle::{IdlePriority, IdleRuntime};
use crate::settings::Placement;

/// Why elastic work goes where it goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PlacementReason {
    /// Nothing was spawned yet.
    #[default]
    Undecided,
    /// [`Placement`] pinned it.
    Setting,
    /// No CPU quota, and the OS grants idle priority: the idle pool.
    NoQuota,
    /// A CPU quota applies: the runtime, where the bucket holds the total.
    Quota,
    /// The OS did not lower the pool's threads to idle priority: the runtime.
    NoIdlePriority,
    /// The idle pool could not be made (the OS refused its threads): the runtime.
    PoolFailed,
    /// Built without the idle pool (feature `idle-pool`): the runtime.
    NoIdlePool,
}

impl fmt::Display for PlacementReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PlacementReason::Undecided => "nothing spawned yet",
            PlacementReason::Setting => "the placement setting",
            PlacementReason::NoQuota => "no CPU quota, idle priority granted",
            PlacementReason::Quota => "a CPU quota applies",
            PlacementReason::NoIdlePriority => "the OS refused idle priority",
            PlacementReason::PoolFailed => "the idle pool could not start",
            PlacementReason::NoIdlePool => "built without the idle pool",
        })
    }
}

/// The decision, and the pool once made.
pub(crate) struct Placer {
    #[cfg_attr(not(feature = "idle-pool"), allow(dead_code))]
    setting: Placement,
    #[cfg(feature = "idle-pool")]
    state: Mutex<Decided>,
}

#[cfg(feature = "idle-pool")]
#[derive(Default)]
struct Decided {
    placement: Option<(Placement, PlacementReason)>,
    pool: Option<IdleRuntime>,
}

/// What deciding needs from the `Elastic`.
#[cfg(feature = "idle-pool")]
pub(crate) struct Environment {
    /// A CPU quota applies to the process.
    pub(crate) quota: bool,
    /// Threads for the pool: the CPUs the runtime's rates are computed for, rounded up.
    pub(crate) workers: usize,
}

impl Placer {
    pub(crate) fn new(setting: Placement) -> Placer {
        Placer {
            setting,
            #[cfg(feature = "idle-pool")]
            state: Mutex::new(Decided::default()),
        }
    }

    #[cfg(feature = "idle-pool")]
    fn lock(&self) -> MutexGuard<'_, Decided> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The placement decided, and why (`Auto` and `Undecided` before the first spawn).
    pub(crate) fn decided(&self) -> (Placement, PlacementReason) {
        #[cfg(not(feature = "idle-pool"))]
        return (Placement::Runtime, PlacementReason::NoIdlePool);
        #[cfg(feature = "idle-pool")]
        self.lock()
            .placement
            .unwrap_or((Placement::Auto, PlacementReason::Undecided))
    }

    /// Run `spawn` with the pool the next spawn goes to (`None`: the runtime), deciding (and
    /// making the pool) the first time; `environment` and `make_pool` are called only then.
    #[cfg(feature = "idle-pool")]
    pub(crate) fn with<R>(
        &self,
        environment: impl FnOnce() -> Environment,
        make_pool: impl FnOnce(usize) -> std::io::Result<IdleRuntime>,
        spawn: impl FnOnce(Option<&IdleRuntime>) -> R,
    ) -> R {
        let mut d = self.lock();
        if d.placement.is_none() {
            let (placement, reason, pool) = self.decide(environment, make_pool);
            d.pool = pool;
            d.placement = Some((placement, reason));
        }
        spawn(d.pool.as_ref())
    }

    #[cfg(feature = "idle-pool")]
    fn decide(
        &self,
        environment: impl FnOnce() -> Environment,
        make_pool: impl FnOnce(usize) -> std::io::Result<IdleRuntime>,
    ) -> (Placement, PlacementReason, Option<IdleRuntime>) {
        let runtime = |reason| (Placement::Runtime, reason, None);
        let env = match self.setting {
            Placement::Runtime => return runtime(PlacementReason::Setting),
            Placement::IdlePool | Placement::Auto => environment(),
        };
        if self.setting == Placement::Auto && env.quota {
            return runtime(PlacementReason::Quota);
        }
        let Ok(pool) = make_pool(env.workers.max(1)) else {
            return runtime(PlacementReason::PoolFailed);
        };
        if self.setting == Placement::IdlePool {
            return (Placement::IdlePool, PlacementReason::Setting, Some(pool));
        }
        if pool.priority() != IdlePriority::SchedIdle {
            pool.shutdown_background();
            return runtime(PlacementReason::NoIdlePriority);
        }
        (Placement::IdlePool, PlacementReason::NoQuota, Some(pool))
    }

    /// Shut the pool down (`Elastic::shutdown`, or the last handle gone): waiting up to
    /// `wait` for its threads to end, or not at all inside a runtime (where blocking is not
    /// allowed). Its tasks are cancelled at their next yield.
    pub(crate) fn shutdown(&self, wait: std::time::Duration) {
        #[cfg(feature = "idle-pool")]
        if let Some(pool) = self.lock().pool.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                pool.shutdown_background();
            } else {
                pool.shutdown_timeout(wait);
            }
        }
        #[cfg(not(feature = "idle-pool"))]
        let _ = wait;
    }
}

impl Drop for Placer {
    fn drop(&mut self) {
        self.shutdown(std::time::Duration::ZERO);
    }
}
