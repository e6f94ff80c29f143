//! Where `Elastic::spawn` runs elastic work: on the runtime it is called from, or on the
//! `Elastic`'s own idle pool, made at the first spawn that may go there and shut down with the
//! last `Elastic` handle (the handles hold it, so its threads, which keep the `Elastic`'s pacing
//! state alive, never keep the governor alive on their own).
//!
//! [`Placement::Auto`], where the OS grants idle priority, starts elastic work on the runtime
//! (short polls are cut by the quantum there, and the runtime's workers answer the foreground's
//! clients first) and moves it to the pool once its time comes mostly in polls the quantum
//! cannot cut (`long_polls.rs`): a future spawned before moves at its next poll. Blocking work
//! goes to the pool's blocking threads from the first spawn: it holds no worker, so the quantum
//! frees nothing, and at normal priority it takes cores from the foreground's other threads.
//! Inside a CPU quota too: the kernel still hands a core to a foreground thread first, and the
//! idle class's bucket, the throttling input, the quota's headroom and the quota brake hold the
//! total. A runtime with more workers than CPUs sends it to the pool from the start: there the
//! OS picks which worker runs, and only idle priority makes it pick the foreground's.

#[cfg(feature = "idle-pool")]
pub(crate) mod placed;

use std::fmt;
use std::sync::Arc;
#[cfg(feature = "idle-pool")]
use std::sync::{Mutex, MutexGuard};

use crate::grant::long_polls::LongPolls;
#[cfg(feature = "idle-pool")]
use crate::idle::{IdlePriority, IdleRuntime};
use crate::settings::Placement;

/// Why elastic work goes where it goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PlacementReason {
    /// `Auto`, and nothing was spawned yet.
    #[default]
    Undecided,
    /// [`Placement`] pinned it.
    Setting,
    /// The OS grants idle priority, but elastic polls are short: the runtime, where the poll
    /// quantum cuts them, until they run long. Blocking work goes to the pool's blocking threads
    /// all the same (it holds no worker for the quantum to free).
    ShortPolls,
    /// The OS grants idle priority, and elastic work's time came mostly in polls over four
    /// quanta, which the quantum cannot cut: the idle pool, where the kernel does.
    LongPolls,
    /// The OS grants idle priority, and the runtime has more workers than CPUs: the OS, not the
    /// runtime, chooses which worker runs, and only idle priority makes it choose the
    /// foreground's. The idle pool from the start.
    MoreWorkersThanCpus,
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
            PlacementReason::ShortPolls => "short elastic polls",
            PlacementReason::LongPolls => "long elastic polls",
            PlacementReason::MoreWorkersThanCpus => "more workers than CPUs",
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
    /// The `Elastic`'s own class's long polls: whether its work runs long.
    #[cfg_attr(not(feature = "idle-pool"), allow(dead_code))]
    long_polls: Arc<LongPolls>,
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
    /// Threads for the pool: the CPUs the runtime's rates are computed for, rounded up.
    pub(crate) workers: usize,
    /// The worker threads of the runtime the first spawn came from.
    pub(crate) runtime_workers: usize,
}

/// What one spawn runs.
#[cfg(feature = "idle-pool")]
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Work {
    /// A future: on the runtime the quantum cuts its polls, so it may start there.
    Future,
    /// A closure on a blocking thread: it holds no worker for the quantum to free, so it goes to
    /// the pool wherever there is one.
    Blocking,
}

/// Where one spawn goes.
#[cfg(feature = "idle-pool")]
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
            #[cfg(feature = "idle-pool")]
            state: Mutex::new(Decided::default()),
        }
    }

    /// Whether the setting is [`Placement::Auto`]: work it puts on the pool comes back to the
    /// runtime if the pool starves.
    #[cfg(feature = "idle-pool")]
    pub(crate) fn auto(&self) -> bool {
        self.setting == Placement::Auto
    }

    /// Futures taken back from a starved pool (see `idle/watch.rs`).
    pub(crate) fn idle_returns(&self) -> u64 {
        #[cfg(feature = "idle-pool")]
        return self.lock().pool.as_ref().map_or(0, |p| p.watch().returns());
        #[cfg(not(feature = "idle-pool"))]
        0
    }

    #[cfg(feature = "idle-pool")]
    fn lock(&self) -> MutexGuard<'_, Decided> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The placement decided, and why. Before the first spawn: a pinned setting as it is
    /// (`Setting`), `Auto` and `Undecided` otherwise.
    pub(crate) fn decided(&self) -> (Placement, PlacementReason) {
        #[cfg(not(feature = "idle-pool"))]
        return (Placement::Runtime, PlacementReason::NoIdlePool);
        #[cfg(feature = "idle-pool")]
        self.now(self.lock().placement)
            .unwrap_or(match self.setting {
                Placement::Auto => (Placement::Auto, PlacementReason::Undecided),
                pinned => (pinned, PlacementReason::Setting),
            })
    }

    /// Where elastic work goes now, from what the first spawn decided: a runtime watched for
    /// long polls sends it to the pool once they are most of its time.
    #[cfg(feature = "idle-pool")]
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
    #[cfg(feature = "idle-pool")]
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
    #[cfg(feature = "idle-pool")]
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

    #[cfg(feature = "idle-pool")]
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
    /// The last `Elastic` handle is gone: the pool ends once the work spawned on it has ended
    /// (as work spawned on the runtime runs on).
    fn drop(&mut self) {
        #[cfg(feature = "idle-pool")]
        if let Some(pool) = self.lock().pool.take() {
            pool.end_when_idle();
        }
    }
}
