//! The waiting line both admission queues keep (the [`WorkQueue`](crate::WorkQueue) and the
//! [`GateQueue`](crate::GateQueue)): who waits, oldest first, with the waker its ticket
//! registered; how each wait ended, until its ticket collects the outcome; how long the waits
//! were; and whether the line is held back (paused) or closed. Whom to grant, and when, is each
//! queue's own rule: ending a wait here counts it, records its outcome and collects its waker.
//!
//! The wakers are woken once the queue's lock is released
//! ([`QueueShared::update`](crate::shared::QueueShared::update)).

use std::collections::VecDeque;
use std::task::{Poll, Waker};

/// One admission waiting: its ticket's id, when it queued (clock nanoseconds), the waker its
/// ticket registered, and what the queue's own rule needs of it.
pub(crate) struct Waiter {
    pub(crate) id: u64,
    pub(crate) since: u64,
    pub(crate) waker: Option<Waker>,
    /// In nanoseconds: the work queue's slice; when the gate's attempt expires.
    pub(crate) terms: u64,
}

/// Where a cancelled ticket was.
pub(crate) enum Cancelled<O> {
    /// Still waiting: it left the line (its wait is counted).
    Waiting,
    /// Its wait had ended in `O`, which it never collected.
    Ended(O),
}

/// The waiters of one queue and the outcomes their tickets have not collected (`O`: what a
/// ticket collects, e.g. the nanoseconds of its grant).
pub(crate) struct WaitLine<O> {
    /// Oldest first, so in the order of their ids: a ticket finds its waiter by binary search
    /// (a flood of waiters must not make each poll or cancel walk all of them). A waiter taken
    /// out is ended ([`end`](Self::end)) or put back in its place.
    pub(crate) waiters: VecDeque<Waiter>,
    /// Ended waits whose tickets have not collected them: (ticket id, outcome).
    ended: Vec<(u64, O)>,
    next_id: u64,
    /// Someone queued since the last [`take_had_waiters`](Self::take_had_waiters).
    queued: bool,
    closed: bool,
    paused: bool,
    waits: u64,
    wait_nanos: u64,
    longest_wait: u64,
    /// The longest wait ended since the last [`take_longest_wait`](Self::take_longest_wait).
    interval_longest_wait: u64,
}

impl<O> WaitLine<O> {
    /// Empty, open, not paused.
    pub(crate) fn new() -> Self {
        Self {
            waiters: VecDeque::new(),
            ended: Vec::new(),
            next_id: 0,
            queued: false,
            closed: false,
            paused: false,
            waits: 0,
            wait_nanos: 0,
            longest_wait: 0,
            interval_longest_wait: 0,
        }
    }

    /// The id for the next ticket.
    pub(crate) fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Queue `id` at the back, waiting since `now`.
    pub(crate) fn push(&mut self, id: u64, now: u64, terms: u64, waker: Option<Waker>) {
        debug_assert!(
            self.waiters.back().is_none_or(|w| w.id < id),
            "ids in order"
        );
        self.waiters.push_back(Waiter {
            id,
            since: now,
            waker,
            terms,
        });
        self.queued = true;
    }

    /// End `w`'s wait in `outcome`, kept for its ticket to collect, and collect its waker.
    pub(crate) fn end(&mut self, w: Waiter, outcome: O, now: u64, wake: &mut Vec<Waker>) {
        self.count_wait(w.since, now);
        self.ended.push((w.id, outcome));
        wake.extend(w.waker);
    }

    /// Count a wait that ended (for any reason).
    fn count_wait(&mut self, since: u64, now: u64) {
        let waited = now.saturating_sub(since);
        self.waits += 1;
        self.wait_nanos = self.wait_nanos.saturating_add(waited);
        self.longest_wait = self.longest_wait.max(waited);
        self.interval_longest_wait = self.interval_longest_wait.max(waited);
    }

    /// A ticket's poll: `Ready(Some(outcome))` once its wait ended, `Ready(None)` if it is
    /// neither waiting nor ended (the line closed on it, or it came after the close), else
    /// `Pending` with `waker` registered (replacing the previous one unless it would wake the
    /// same task).
    pub(crate) fn poll(&mut self, id: u64, waker: &Waker) -> Poll<Option<O>> {
        if let Some(pos) = self.ended.iter().position(|e| e.0 == id) {
            return Poll::Ready(Some(self.ended.swap_remove(pos).1));
        }
        let Some(w) = self.find(id).map(|pos| &mut self.waiters[pos]) else {
            return Poll::Ready(None);
        };
        match &mut w.waker {
            Some(old) if old.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
        Poll::Pending
    }

    /// A ticket dropped before it collected anything: it leaves the line, or gives up the
    /// outcome it never collected. `None`: nothing was left of it.
    pub(crate) fn cancel(&mut self, id: u64, now: u64) -> Option<Cancelled<O>> {
        if let Some(pos) = self.find(id) {
            let w = self.waiters.remove(pos)?;
            self.count_wait(w.since, now);
            Some(Cancelled::Waiting)
        } else {
            let pos = self.ended.iter().position(|e| e.0 == id)?;
            Some(Cancelled::Ended(self.ended.swap_remove(pos).1))
        }
    }

    /// Where waiter `id` is in the line, if it waits.
    fn find(&self, id: u64) -> Option<usize> {
        self.waiters.binary_search_by_key(&id, |w| w.id).ok()
    }

    /// Close: every waiter leaves (its ticket then polls `Ready(None)`), woken. Returns how many.
    pub(crate) fn close(&mut self, now: u64, wake: &mut Vec<Waker>) -> u64 {
        self.closed = true;
        let waiters = std::mem::take(&mut self.waiters);
        let left = waiters.len() as u64;
        for w in waiters {
            self.count_wait(w.since, now);
            wake.extend(w.waker);
        }
        left
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed
    }

    /// Hold back grants; false if already held.
    pub(crate) fn pause(&mut self) -> bool {
        !std::mem::replace(&mut self.paused, true)
    }

    pub(crate) fn resume(&mut self) {
        self.paused = false;
    }

    pub(crate) fn is_paused(&self) -> bool {
        self.paused
    }

    /// Whether anyone waited since the last call: queued since then, or waiting now.
    pub(crate) fn take_had_waiters(&mut self) -> bool {
        std::mem::take(&mut self.queued) || !self.waiters.is_empty()
    }

    /// How long the oldest waiter has waited so far (0 when nobody waits).
    pub(crate) fn head_wait(&self, now: u64) -> u64 {
        self.waiters
            .front()
            .map_or(0, |w| now.saturating_sub(w.since))
    }

    /// The longest wait since the last call: ended since then, or the oldest waiter's so far,
    /// whichever is longer (so a waiter that is starving shows before it leaves).
    pub(crate) fn take_longest_wait(&mut self, now: u64) -> u64 {
        std::mem::take(&mut self.interval_longest_wait).max(self.head_wait(now))
    }

    /// Waits ended so far (granted, refused, cancelled or closed).
    pub(crate) fn waits(&self) -> u64 {
        self.waits
    }

    /// Their total time.
    pub(crate) fn wait_nanos(&self) -> u64 {
        self.wait_nanos
    }

    /// The longest of them.
    pub(crate) fn longest_wait(&self) -> u64 {
        self.longest_wait
    }

    /// The outcomes not collected yet.
    pub(crate) fn uncollected(&self) -> impl Iterator<Item = &O> {
        self.ended.iter().map(|e| &e.1)
    }
}
