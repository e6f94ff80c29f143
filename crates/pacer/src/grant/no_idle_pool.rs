//! Built without the idle pool (feature `idle-pool` off): the API of `thread_class` and of
//! `unstack` that the grant cycle and the gate call, doing nothing. No thread is an idle pool's,
//! so work never moves to an idle class and no worker is unstacked.

use std::sync::Arc;
use std::time::Duration;

use super::class_state::ClassState;

/// Whether the calling thread is one of an idle pool's: never.
pub(crate) fn on_idle_pool() -> bool {
    false
}

/// The idle class work paced by `shared` moves to on this thread: none.
pub(crate) fn class_for(_shared: &Arc<ClassState>) -> Option<Arc<ClassState>> {
    None
}

cfg_gate! {
    /// An idle pool thread's look at the runtime's workers: there is none.
    pub(crate) fn unstack_at_quantum(_quantum: Duration) {}
}

/// An idle class's look at the runtime's workers, of which there is none: the type has no
/// values, so a class's `Option<Unstack>` is always `None`.
#[derive(Debug)]
pub(crate) enum Unstack {}

impl Unstack {
    /// Never called: there is no `Unstack`.
    pub(crate) fn at_quantum(&self, _quantum: Duration) -> bool {
        match *self {}
    }

    /// Never called: there is no `Unstack`.
    pub(crate) fn moved(&self) -> u64 {
        match *self {}
    }
}
