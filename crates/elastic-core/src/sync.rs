//! The synchronisation primitives the work queue uses, swapped for loom's under `cfg(loom)` so the
//! loom tests explore every interleaving of the real code (the same trick as tokio's loom shim).

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{fence, AtomicU64, Ordering},
    Arc, Mutex, MutexGuard,
};

#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{fence, AtomicU64, Ordering},
    Arc, Mutex, MutexGuard,
};

/// Lock, ignoring poisoning: every critical section leaves the state consistent before anything
/// that could panic (waking happens outside the lock), so a poisoned lock still holds valid data
/// and refusing it would turn one panicking elastic task into a hang for all of them.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
