//! A queue's shared half, what its handles and tickets hold: the clock, read before locking so
//! a slow clock read (tens of ns on some VMs) never lengthens a critical section; the state
//! behind the lock, with its [`WaitLine`]; and what the queue keeps outside the lock (the work
//! queue's lock-free fast path). A reading that is older than one another thread already
//! applied is harmless: refill ignores time that went backwards.
//!
//! Both queues change their state through [`QueueShared::update`], which wakes the wakers a change
//! collected only after the lock is released, so a waker that re-enters the queue (or is slow)
//! never runs under it; and both queues' tickets are a [`Claim`] on their place in the line.

use std::fmt;
use std::task::{Poll, Waker};

use crate::clock::{duration_nanos, Clock};
use crate::line::{Cancelled, WaitLine};
use crate::sync::{lock, Arc, Mutex, MutexGuard};

/// What a queue keeps behind its lock, as the shared half needs it.
pub(crate) trait Lined {
    /// What a ticket collects when its wait ends.
    type Outcome;
    /// What the queue keeps outside its lock.
    type LockFree;

    fn line(&mut self) -> &mut WaitLine<Self::Outcome>;

    /// A ticket was dropped before it collected anything: it `left` the line, or an outcome
    /// to give back (a grant's tokens, which go on to the next waiters).
    fn cancelled(
        &mut self,
        lock_free: &Self::LockFree,
        left: Cancelled<Self::Outcome>,
        now: u64,
        wake: &mut Vec<Waker>,
    );

    /// Just after the lock is taken for a change.
    fn on_lock(&mut self, _lock_free: &Self::LockFree) {}

    /// Just before the lock taken for a change is released.
    fn on_unlock(&mut self, _lock_free: &Self::LockFree) {}
}

/// A queue's shared half (see the module docs).
pub(crate) struct QueueShared<C, S: Lined> {
    pub(crate) lock_free: S::LockFree,
    clock: C,
    state: Mutex<S>,
}

impl<C: Clock, S: Lined> QueueShared<C, S> {
    /// The shared half of a new queue, settled as after any change.
    pub(crate) fn new(clock: C, lock_free: S::LockFree, state: S) -> Self {
        let shared = Self {
            lock_free,
            clock,
            state: Mutex::new(state),
        };
        let st = shared.lock();
        shared.unlock(st);
        shared
    }

    /// The queue's clock, in nanoseconds.
    pub(crate) fn now(&self) -> u64 {
        duration_nanos(self.clock.now())
    }

    /// The state, for what needs neither the lock-free side nor waking (reads, polls).
    pub(crate) fn state(&self) -> MutexGuard<'_, S> {
        lock(&self.state)
    }

    /// The state, for a change ([`Lined::on_lock`] has run).
    pub(crate) fn lock(&self) -> MutexGuard<'_, S> {
        let mut st = lock(&self.state);
        st.on_lock(&self.lock_free);
        st
    }

    /// Release the state taken with [`lock`](Self::lock) ([`Lined::on_unlock`] runs first).
    pub(crate) fn unlock(&self, mut st: MutexGuard<'_, S>) {
        st.on_unlock(&self.lock_free);
        drop(st);
    }

    /// Change the state under the lock, then wake the wakers the change collected, once the
    /// lock is released.
    pub(crate) fn update<R>(&self, change: impl FnOnce(&mut S, &mut Vec<Waker>) -> R) -> R {
        let mut wake = Vec::new();
        let mut st = self.lock();
        let out = change(&mut st, &mut wake);
        self.unlock(st);
        for w in wake {
            w.wake();
        }
        out
    }
}

/// A ticket's hold on its place in a queue's line: polled until its wait ends, then spent;
/// dropped before that, it cancels (leaves the line, or gives back what it never collected).
pub(crate) struct Claim<C: Clock, S: Lined> {
    queue: Arc<QueueShared<C, S>>,
    id: u64,
    /// Resolved (outcome collected, or closed): nothing left to cancel.
    spent: bool,
}

impl<C: Clock, S: Lined> Claim<C, S> {
    /// The claim of ticket `id`, queued in `queue`'s line.
    pub(crate) fn new(queue: Arc<QueueShared<C, S>>, id: u64) -> Self {
        Self {
            queue,
            id,
            spent: false,
        }
    }

    /// `Ready` with what `resolve` makes of the outcome once the wait ended (`None`: the line
    /// closed on it, or the ticket is already spent), else `Pending` with `waker` registered.
    pub(crate) fn poll<R>(
        &mut self,
        waker: &Waker,
        resolve: impl FnOnce(&mut S, Option<S::Outcome>) -> R,
    ) -> Poll<R> {
        let mut st = self.queue.state();
        let ended = if self.spent {
            None
        } else {
            match st.line().poll(self.id, waker) {
                Poll::Ready(ended) => ended,
                Poll::Pending => return Poll::Pending,
            }
        };
        self.spent = true;
        Poll::Ready(resolve(&mut st, ended))
    }

    pub(crate) fn is_spent(&self) -> bool {
        self.spent
    }

    pub(crate) fn queue(&self) -> &QueueShared<C, S> {
        &self.queue
    }

    /// The ticket's `Debug`, under its public name.
    pub(crate) fn fmt_as(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
            .field("id", &self.id)
            .field("spent", &self.spent)
            .finish()
    }
}

impl<C: Clock, S: Lined> Drop for Claim<C, S> {
    fn drop(&mut self) {
        if self.spent {
            return;
        }
        let queue = &*self.queue;
        let now = queue.now();
        queue.update(|st, wake| {
            if let Some(left) = st.line().cancel(self.id, now) {
                st.cancelled(&queue.lock_free, left, now, wake);
            }
        });
    }
}
