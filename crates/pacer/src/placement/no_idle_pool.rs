//! Built without the idle pool (feature `idle-pool` off): the [`Placer`] API the `Elastic`
//! calls, deciding nothing. Elastic work runs on the runtime it is spawned from.

use std::sync::Arc;
use std::time::Duration;

use super::PlacementReason;
use crate::grant::long_polls::LongPolls;
use crate::settings::Placement;

/// Sends every spawn to the runtime.
pub(crate) struct Placer;

impl Placer {
    /// A placer that never places work on a pool, whatever the setting.
    pub(crate) fn new(_setting: Placement, _long_polls: Arc<LongPolls>) -> Placer {
        Placer
    }

    /// Futures taken back from a starved pool: none, there is no pool.
    pub(crate) fn idle_returns(&self) -> u64 {
        0
    }

    /// The runtime, for want of the idle pool.
    pub(crate) fn decided(&self) -> (Placement, PlacementReason) {
        (Placement::Runtime, PlacementReason::NoIdlePool)
    }

    /// Nothing to shut down.
    pub(crate) fn shutdown(&self, _wait: Duration) {}
}
