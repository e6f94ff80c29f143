//! The [`Placer`]: where `Elastic::spawn` sends each spawn, decided at the first spawn that may
//! go to the idle pool, and the pool once made (module `placement` says how it decides).

use std::sync::{Arc, Mutex, MutexGuard};

use super::PlacementReason;
use crate::grant::long_polls::LongPolls;
use crate::idle::{IdlePriority, IdleRuntime};
use crate::settings::Placement;

/// The decision, and the pool once made.
pub(crate) struct Placer {
    setting: Placement,
    /// The `Elastic`'s own class's long polls: whether its work runs long.
    long_polls: Arc<LongPolls>,
    state: Mutex<Decided>,
}

#[derive(Default)]
struct Decided {
    placement: Option<(Placement, PlacementReason)>,
    pool: Option<IdleRuntime>,
}

/// What deciding needs from the `Elastic`.
pub(crate) struct Environment {
    /// Threads for the pool: the CPUs the runtime's rates are computed for, rounded up.
    pub(crate) workers: usize,
    /// The worker threads of the runtime the first spawn came from.
    pub(crate) runtime_workers: usize,
}

/// What one spawn runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Work {
    /// A future: on the runtime the quantum cuts its polls, so it may start there.
    Future,
    /// A closure on a blocking thread: it holds no worker for the quantum to free, so it goes to
    /// the pool wherever there is one.
    Blocking,
}

/// Where one spawn goes.
pub(crate) enum Route<'a> {
    Runtime,
    Pool(&'a IdleRuntime),
    /// The runtime for now, the pool once elastic work runs long.
    Watch,
}

impl Placer {
    pub(crate) fn new(setting: Placement, long_polls: Arc<LongPolls>) -> Placer {
        Placer {
            setting,
            long_polls,
            state: Mutex::new(Decided::default()),
        }
    }

    /// Whether the setting is [`Placement::Auto`]: work it puts on the pool comes back to the
    /// runtime if the pool starves.
    pub(crate) fn auto(&self) -> bool {
        self.setting == Placement::Auto
    }

    /// Futures taken back from a starved pool (see `idle/watch.rs`).
    pub(crate) fn idle_returns(&self) -> u64 {
        self.lock().pool.as_ref().map_or(0, |p| p.watch().returns())
    }

    fn lock(&self) -> MutexGuard<'_, Decided> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The placement decided, and why. Before the first spawn: a pinned setting as it is
    /// (`Setting`), `Auto` and `Undecided` otherwise.
    pub(crate) fn decided(&self) -> (Placement, PlacementReason) {
        self.now(self.lock().placement)
            .unwrap_or(match self.setting {
                Placement::Auto => (Placement::Auto, PlacementReason::Undecided),
                pinned => (pinned, PlacementReason::Setting),
            })
    }

    /// Where elastic work goes now, from what the first spawn decided: a runtime watched for
    /// long polls sends it to the pool once they are most of its time.
    fn now(
        &self,
        decided: Option<(Placement, PlacementReason)>,
    ) -> Option<(Placement, PlacementReason)> {
        match decided {
            Some((_, PlacementReason::ShortPolls)) if self.long_polls.mostly() => {
                Some((Placement::IdlePool, PlacementReason::LongPolls))
            }
            other => other,
        }
    }

    /// Run `spawn` with the route the next spawn of `kind` takes, deciding (and making the pool)
    /// the first time; `environment` and `make_pool` are called only then.
    pub(crate) fn with<R>(
        &self,
        kind: Work,
        environment: impl FnOnce() -> Environment,
        make_pool: impl FnOnce(usize) -> Result<IdleRuntime, crate::BuildError>,
        spawn: impl FnOnce(Route<'_>) -> R,
    ) -> R {
        let mut d = self.lock();
        if d.placement.is_none() {
            let (placement, reason, pool) = self.decide(environment, make_pool);
            d.pool = pool;
            d.placement = Some((placement, reason));
        }
        let watching = kind == Work::Future
            && matches!(
                self.now(d.placement),
                Some((_, PlacementReason::ShortPolls))
            );
        match &d.pool {
            Some(_) if watching => spawn(Route::Watch),
            Some(pool) => spawn(Route::Pool(pool)),
            None => spawn(Route::Runtime),
        }
    }

    /// Run `spawn` on the pool, if there is one (`Err(work)` back if not: the `Elastic` was
    /// shut down).
    pub(crate) fn on_pool<W, T>(
        &self,
        spawn: impl FnOnce(&IdleRuntime, W) -> T,
        work: W,
    ) -> Result<T, W> {
        match &self.lock().pool {
            Some(pool) => Ok(spawn(pool, work)),
            None => Err(work),
        }
    }

    fn decide(
        &self,
        environment: impl FnOnce() -> Environment,
        make_pool: impl FnOnce(usize) -> Result<IdleRuntime, crate::BuildError>,
    ) -> (Placement, PlacementReason, Option<IdleRuntime>) {
        let runtime = |reason| (Placement::Runtime, reason, None);
        let env = match self.setting {
            Placement::Runtime => return runtime(PlacementReason::Setting),
            Placement::IdlePool | Placement::Auto => environment(),
        };
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
        if env.runtime_workers > env.workers {
            return (
                Placement::IdlePool,
                PlacementReason::MoreWorkersThanCpus,
                Some(pool),
            );
        }
        (Placement::Runtime, PlacementReason::ShortPolls, Some(pool))
    }

    /// Shut the pool down (`Elastic::shutdown`): waiting up to
    /// `wait` for its threads to end, or not at all inside a runtime (where blocking is not
    /// allowed). Its tasks are cancelled at their next yield.
    pub(crate) fn shutdown(&self, wait: std::time::Duration) {
        if let Some(pool) = self.lock().pool.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                pool.shutdown_background();
            } else {
                pool.shutdown_timeout(wait);
            }
        }
    }
}

impl Drop for Placer {
    /// The last `Elastic` handle is gone: the pool ends once the work spawned on it has ended
    /// (as work spawned on the runtime runs on).
    fn drop(&mut self) {
        if let Some(pool) = self.lock().pool.take() {
            pool.end_when_idle();
        }
    }
}
