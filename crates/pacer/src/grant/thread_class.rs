//! Which idle class, if any, the current thread belongs to: an idle pool's threads note their
//! `Elastic`'s idle class as they start, and paced work admitted there moves to that class for
//! good (work moves from the runtime to the pool, never back). Without the feature `idle-pool`
//! no thread is one (`no_idle_pool.rs` stands in).

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::Weak;

use super::class_state::ClassState;

/// The idle class of the `Elastic` whose pool this thread belongs to.
struct IdleThread {
    /// The `Elastic`'s own class, by address (compared, never dereferenced).
    parent: *const ClassState,
    /// Its idle class (weak: a thread-local must not keep a pool's pacing state alive).
    idle: Weak<ClassState>,
}

thread_local! {
    static IDLE: RefCell<Option<IdleThread>> = const { RefCell::new(None) };
}

/// Mark the calling thread as one of `parent`'s idle pool, whose class is `idle`.
pub(crate) fn enter(parent: &Arc<ClassState>, idle: &Arc<ClassState>) {
    IDLE.with(|t| {
        *t.borrow_mut() = Some(IdleThread {
            parent: Arc::as_ptr(parent),
            idle: Arc::downgrade(idle),
        })
    });
}

/// Whether the calling thread is one of an idle pool's: a long poll here holds no runtime
/// worker, since the OS cuts it whenever another thread wants the core.
pub(crate) fn on_idle_pool() -> bool {
    IDLE.with(|t| t.borrow().is_some())
}

/// The idle class work paced by `shared` moves to on this thread: `Some` on a thread of
/// `shared`'s idle pool, else `None` (work stays in its class).
pub(crate) fn class_for(shared: &Arc<ClassState>) -> Option<Arc<ClassState>> {
    IDLE.with(|t| {
        let t = t.borrow();
        let t = t.as_ref()?;
        if std::ptr::eq(t.parent, Arc::as_ptr(shared)) {
            t.idle.upgrade()
        } else {
            None
        }
    })
}

cfg_gate! {
    /// On an idle pool's thread: its class's look at the runtime's workers, if one is due
    /// ([`Unstack`](super::unstack::Unstack)), for work that reaches no class quantum there (a
    /// connection gate's setups). Elsewhere nothing.
    pub(crate) fn unstack_at_quantum(quantum: std::time::Duration) {
        let idle = IDLE.with(|t| t.borrow().as_ref().and_then(|t| t.idle.upgrade()));
        if let Some(unstack) = idle.as_ref().and_then(|class| class.unstack.as_ref()) {
            unstack.at_quantum(quantum);
        }
    }
}
