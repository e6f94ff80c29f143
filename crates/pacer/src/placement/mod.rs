//! Where `Elastic::spawn` runs elastic work: on the runtime it is called from, or on the
//! `Elastic`'s own idle pool, made at the first spawn that may go there and shut down with the
//! last `Elastic` handle (the handles hold it, so its threads, which keep the `Elastic`'s pacing
//! state alive, never keep the governor alive on their own).
//!
//! [`Placement::Auto`], where the OS grants idle priority, starts elastic work on the runtime
//! (short polls are cut by the quantum there, and the runtime's workers answer the foreground's
//! clients first) and moves it to the pool once its time comes mostly in polls the quantum cannot
//! cut (`grant/long_polls.rs`): a future spawned before moves at its next poll. Blocking work goes
//! to the pool's blocking threads from the first spawn: it holds no worker, so the quantum frees
//! nothing, and at normal priority it takes cores from the foreground's other threads. Inside a CPU
//! quota too: the kernel still hands a core to a foreground thread first, and the idle class's
//! bucket, the throttling input, the quota's headroom and the quota brake hold the total. A runtime
//! with more workers than CPUs sends it to the pool from the start: there the OS picks which worker
//! runs, and only idle priority makes it pick the foreground's.
//!
//! [`Placement::Auto`]: crate::settings::Placement::Auto

use std::fmt;

cfg_idle_pool! {
    pub(crate) mod placed;
    mod placer;
    pub(crate) use self::placer::{Environment, Placer, Route, Work};
}
cfg_not_idle_pool! {
    mod no_idle_pool;
    pub(crate) use self::no_idle_pool::Placer;
}

/// Why elastic work goes where it goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PlacementReason {
    /// `Auto`, and nothing was spawned yet.
    #[default]
    Undecided,
    /// [`Placement`](crate::settings::Placement) pinned it.
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
