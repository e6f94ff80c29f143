//! The work queue: hands out CPU-time slices from the token bucket, FIFO, waking waiters through
//! plain [`Waker`]s (no runtime needed).

use std::collections::VecDeque;
use std::fmt;
use std::task::{Poll, Waker};
use std::time::Duration;

use crate::bucket::Core;
use crate::clock::{duration_nanos, Clock};
use crate::fast::{FastPath, AVAIL_MAX, HOLDERS_MAX};
use crate::sync::{lock, Arc, Mutex};

/// The shortest slice a grant carries; shorter requests are rounded up.
pub const MIN_SLICE: Duration = Duration::from_millis(10);
/// The longest slice a grant carries; longer requests are cut down.
pub const MAX_SLICE: Duration = Duration::from_millis(100);

/// A slice of CPU time granted by a [`WorkQueue`]. Settle it with [`WorkQueue::done`]: a grant
/// that is just dropped keeps its tokens spent (and is missing from the ledger).
#[must_use = "settle a grant with WorkQueue::done, or its tokens stay spent"]
#[derive(Debug, PartialEq, Eq)]
pub struct Grant {
    nanos: u64,
}

impl Grant {
    /// The CPU time this grant allots.
    pub fn allotted(&self) -> Duration {
        Duration::from_nanos(self.nanos)
    }

    /// The CPU time this grant allots, in nanoseconds.
    pub fn allotted_nanos(&self) -> u64 {
        self.nanos
    }
}

/// The governor (and its queue) has shut down: no grant will come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("elastic CPU governor has shut down")
    }
}

impl std::error::Error for Closed {}

/// The outcome of [`WorkQueue::admit`].
#[must_use = "a Granted slice must be settled; a Queued ticket must be polled or dropped"]
#[derive(Debug)]
pub enum Admit<C: Clock> {
    /// Tokens were available and nobody was waiting: run now.
    Granted(Grant),
    /// Wait for a grant: poll the ticket (dropping it cancels, returning any grant it received).
    Queued(Ticket<C>),
}

/// Counters and gauges of a [`WorkQueue`], for metrics. All counters only grow.
///
/// Once every grant is settled (done or cancelled):
/// `acquired_nanos − returned_nanos + over_limit_nanos == used_nanos`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueSnapshot {
    /// Current token rate (CPU nanoseconds per second).
    pub rate_nanos_per_sec: u64,
    /// Current balance after refill (negative = debt).
    pub balance_nanos: i64,
    /// Admissions waiting for a grant now.
    pub waiters: usize,
    /// Grants handed out (fast path and queued).
    pub grants: u64,
    /// Sum of the slices granted.
    pub acquired_nanos: u64,
    /// Tokens given back: unused parts of slices, and whole slices of tickets dropped after
    /// their grant.
    pub returned_nanos: u64,
    /// Overshoot charged: use beyond the slice.
    pub over_limit_nanos: u64,
    /// CPU time reported used through [`WorkQueue::done`].
    pub used_nanos: u64,
    /// Queued admissions that finished waiting (granted, cancelled, or failed by close).
    pub waits: u64,
    /// Total time those admissions spent queued, by the queue's clock.
    pub wait_nanos: u64,
    /// Whether [`WorkQueue::close`] was called.
    pub closed: bool,
    /// Grants are held back ([`WorkQueue::pause`]).
    pub paused: bool,
    /// Grants handed out and not yet settled.
    pub holders: usize,
    /// Times the queue was paused.
    pub pauses: u64,
    /// The longest any admission has waited (granted, cancelled or closed), since the start.
    pub longest_wait_nanos: u64,
    /// How long the head of the queue has waited so far (0 when nobody waits).
    pub head_wait_nanos: u64,
    /// Debt forgiven by the bucket's cap of one second of refill (see
    /// [`TokenBucket`](crate::TokenBucket)).
    pub debt_forgiven_nanos: u64,
}

struct Waiter {
    id: u64,
    slice: u64,
    since: Duration,
    waker: Option<Waker>,
}

struct State {
    bucket: Core,
    waiters: VecDeque<Waiter>,
    /// Granted to a ticket that has not collected it yet: (ticket id, nanos).
    granted: Vec<(u64, u64)>,
    next_id: u64,
    had_waiters: bool,
    /// The longest wait finished since the last [`WorkQueue::take_longest_wait`].
    interval_longest_wait: u64,
    closed: bool,
    paused: bool,
    /// At most this many grants outstanding (at most [`HOLDERS_MAX`]; the count itself is in the
    /// fast path's word).
    max_holders: u64,
    /// The counters only the lock side changes (the rest are in [`FastPath`]).
    stats: QueueSnapshot,
}

impl State {
    /// Count a waiter leaving the queue (for any reason).
    fn finish_wait(&mut self, since: Duration, now: Duration) {
        let waited = duration_nanos(now.saturating_sub(since));
        self.stats.waits += 1;
        self.stats.wait_nanos = self.stats.wait_nanos.saturating_add(waited);
        self.stats.longest_wait_nanos = self.stats.longest_wait_nanos.max(waited);
        self.interval_longest_wait = self.interval_longest_wait.max(waited);
    }

    /// The granting rule of docs/design.md §4: while someone waits and the balance is positive,
    /// grant the head its whole slice (the balance may dip negative). Wakers are collected, not
    /// called: the caller wakes them after releasing the lock, so a waker that re-enters the queue
    /// (or is slow) never runs under it.
    /// The fast path must be closed ([`FastPath::close`]).
    fn grant_waiters(&mut self, fast: &FastPath, now: Duration, wake: &mut Vec<Waker>) {
        if self.waiters.is_empty() || self.paused {
            return;
        }
        let t = duration_nanos(now);
        while !self.waiters.is_empty()
            && fast.holders() < self.max_holders
            && self.bucket.balance(t) > 0
        {
            let Some(w) = self.waiters.pop_front() else {
                break;
            };
            self.bucket.take_unchecked(w.slice, t);
            fast.add_holder();
            fast.count_grant(w.slice);
            self.granted.push((w.id, w.slice));
            self.finish_wait(w.since, now);
            if let Some(k) = w.waker {
                wake.push(k);
            }
        }
    }
}

/// The clock sits outside the mutex: it is read before locking, so a slow clock read (tens of
/// ns on some VMs) never lengthens the critical section. A reading that is older than one
/// another thread already applied is harmless: refill ignores time that went backwards.
struct Inner<C> {
    /// The lock-free path (see `fast.rs`); every critical section below closes it first
    /// ([`Inner::lock`]) and reopens it last ([`Inner::unlock`]).
    fast: FastPath,
    clock: C,
    state: Mutex<State>,
}

impl<C> Inner<C> {
    /// Take the lock and the tokens lent to the fast path: the bucket's balance is then whole.
    fn lock(&self) -> crate::sync::MutexGuard<'_, State> {
        let mut st = lock(&self.state);
        let lent = self.fast.close();
        st.bucket.give_back(lent);
        st
    }

    /// Lend the balance to the fast path again if nothing needs the lock (nobody waits, not
    /// paused or closed, no debt, a rate the word holds), then release the lock. The refill is
    /// left to the next critical section: the fast path reads no clock.
    fn unlock(&self, mut st: crate::sync::MutexGuard<'_, State>) {
        let rate = st.bucket.rate();
        if st.waiters.is_empty() && !st.paused && !st.closed && rate <= AVAIL_MAX {
            let lent = st.bucket.lend_all();
            if lent > 0 {
                self.fast.open(lent, rate);
            }
        }
        drop(st);
    }
}

type Shared<C> = Arc<Inner<C>>;

fn wake_all(wake: Vec<Waker>) {
    for w in wake {
        w.wake();
    }
}

/// The thread-safe granter: admits elastic work against a [`TokenBucket`](crate::TokenBucket), FIFO.
///
/// While nobody waits, an admission the bucket covers and a settle within the slice are one
/// compare-and-swap each, with no lock and no clock read: the bucket's balance is lent to a
/// lock-free word, and the lock is taken only when it runs short, someone waits, a slice was
/// overrun, or [`tick`](Self::tick), [`set_rate`](Self::set_rate), a pause or a snapshot
/// needs the whole state. Refill waits for the next of those, so the bucket may give out up
/// to what the fast path used since the last refill beyond the exact rule; a tick refills, so
/// with the governor ticking that is at most one tick of refill. Rates above ~1,100 CPUs
/// (2^40 ns per second) are not lent: every admission then takes the lock.
///
/// ```
/// use elastic_cpu_core::{Admit, ManualClock, WorkQueue};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let queue = WorkQueue::new(clock.clone(), 200_000_000); // 0.2 CPU
/// let Admit::Granted(grant) = queue.admit(Duration::from_millis(50)) else { panic!() };
/// assert_eq!(grant.allotted(), Duration::from_millis(50));
/// queue.done(grant, Duration::from_millis(30)); // 20 ms come back
/// assert_eq!(queue.snapshot().returned_nanos, 20_000_000);
/// ```
pub struct WorkQueue<C: Clock> {
    shared: Shared<C>,
}

impl<C: Clock> Clone for WorkQueue<C> {
    /// Another handle to the same queue.
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<C: Clock> fmt::Debug for WorkQueue<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueue")
            .field("snapshot", &self.snapshot())
            .finish()
    }
}

impl<C: Clock> WorkQueue<C> {
    /// A queue over a full bucket refilling at `rate_nanos_per_sec`.
    pub fn new(clock: C, rate_nanos_per_sec: u64) -> Self {
        let bucket = Core::new(rate_nanos_per_sec, duration_nanos(clock.now()));
        let inner = Inner {
            fast: FastPath::new(),
            clock,
            state: Mutex::new(State {
                bucket,
                waiters: VecDeque::new(),
                granted: Vec::new(),
                next_id: 0,
                had_waiters: false,
                interval_longest_wait: 0,
                closed: false,
                paused: false,
                max_holders: HOLDERS_MAX,
                stats: QueueSnapshot::default(),
            }),
        };
        let st = inner.lock();
        inner.unlock(st);
        Self {
            shared: Arc::new(inner),
        }
    }

    /// Ask for a slice of CPU time (clamped to [`MIN_SLICE`] ..= [`MAX_SLICE`]). Granted at once
    /// when nobody waits and the bucket covers it; otherwise queued FIFO. After [`close`], the
    /// ticket resolves to [`Closed`].
    ///
    /// [`close`]: WorkQueue::close
    pub fn admit(&self, slice: Duration) -> Admit<C> {
        let n = duration_nanos(slice.clamp(MIN_SLICE, MAX_SLICE));
        // Nobody waits and the lent tokens cover it: one compare-and-swap, no clock, no lock.
        if self.shared.fast.try_admit(n) {
            return Admit::Granted(Grant { nanos: n });
        }
        let now = self.shared.clock.now();
        let mut st = self.shared.lock();
        let id = st.next_id;
        st.next_id += 1;
        if !st.closed {
            if st.waiters.is_empty()
                && !st.paused
                && self.shared.fast.holders() < st.max_holders
                && st.bucket.try_take(n, duration_nanos(now))
            {
                self.shared.fast.add_holder();
                self.shared.fast.count_grant(n);
                self.shared.unlock(st);
                return Admit::Granted(Grant { nanos: n });
            }
            st.waiters.push_back(Waiter {
                id,
                slice: n,
                since: now,
                waker: None,
            });
            st.had_waiters = true;
        }
        self.shared.unlock(st);
        Admit::Queued(Ticket {
            shared: self.shared.clone(),
            id,
            spent: false,
        })
    }

    /// Settle a grant: `used` beyond the slice is charged (debt), the unused rest is returned;
    /// then waiters are granted.
    pub fn done(&self, grant: Grant, used: Duration) {
        let allotted = grant.nanos;
        let used = duration_nanos(used);
        // Nobody waits and the slice was not overrun: one compare-and-swap, no clock, no lock.
        if self.shared.fast.try_settle(allotted, used) {
            return;
        }
        let mut wake = Vec::new();
        // Returning needs no clock read (see `Core::give_back`); charging and granting do.
        let mut now = (used > allotted).then(|| self.shared.clock.now());
        let mut st = self.shared.lock();
        let fast = &self.shared.fast;
        fast.remove_holder();
        if used > allotted {
            let over = used - allotted;
            let t = *now.get_or_insert_with(|| self.shared.clock.now());
            st.bucket.take_unchecked(over, duration_nanos(t));
            st.stats.over_limit_nanos = st.stats.over_limit_nanos.saturating_add(over);
            fast.count_settle(0, used);
        } else {
            let back = allotted - used;
            st.bucket.give_back(back);
            fast.count_settle(back, used);
        }
        if !st.waiters.is_empty() {
            // Rare path (someone waits): reading the clock under the lock is fine here.
            let t = *now.get_or_insert_with(|| self.shared.clock.now());
            st.grant_waiters(fast, t, &mut wake);
        }
        self.shared.unlock(st);
        wake_all(wake);
    }

    /// Change the token rate (see [`TokenBucket::set_rate`](crate::TokenBucket::set_rate)), then grant waiters.
    pub fn set_rate(&self, rate_nanos_per_sec: u64) {
        let mut wake = Vec::new();
        let now = self.shared.clock.now();
        let mut st = self.shared.lock();
        st.bucket.set_rate(rate_nanos_per_sec, duration_nanos(now));
        st.grant_waiters(&self.shared.fast, now, &mut wake);
        self.shared.unlock(st);
        wake_all(wake);
    }

    /// The governor's periodic call: refill, grant waiters from what refilled, and return (and
    /// clear) whether elastic work waited since the last tick: true if an admission queued
    /// since then, or if any were still queued when this tick began.
    pub fn tick(&self) -> bool {
        let mut wake = Vec::new();
        let now = self.shared.clock.now();
        let mut st = self.shared.lock();
        // Read before granting: waiters this tick serves still waited during the last period.
        let had = st.had_waiters || !st.waiters.is_empty();
        st.had_waiters = false;
        // Refill now: the fast path reads no clock, so this bounds how long refill waits.
        st.bucket.balance(duration_nanos(now));
        st.grant_waiters(&self.shared.fast, now, &mut wake);
        self.shared.unlock(st);
        wake_all(wake);
        had
    }

    /// The longest any admission waited since the last call (the governor calls it once a
    /// tick): the longest finished wait, or the head's wait so far if that is longer, so a
    /// waiter that is starving shows before it is granted.
    ///
    /// ```
    /// use elastic_cpu_core::{Admit, ManualClock, WorkQueue};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let q = WorkQueue::new(clock.clone(), 1_000_000_000);
    /// q.pause(); // nothing is granted: everything waits
    /// let Admit::Queued(t) = q.admit(Duration::from_millis(10)) else { panic!() };
    /// clock.advance(Duration::from_millis(300));
    /// assert_eq!(q.take_longest_wait(), Duration::from_millis(300)); // the head, still waiting
    /// drop(t); // cancelled: a finished wait of 300 ms
    /// assert_eq!(q.take_longest_wait(), Duration::from_millis(300));
    /// assert_eq!(q.take_longest_wait(), Duration::ZERO); // nothing waited since
    /// ```
    pub fn take_longest_wait(&self) -> Duration {
        let now = duration_nanos(self.shared.clock.now());
        let mut st = lock(&self.shared.state);
        let head = st
            .waiters
            .front()
            .map_or(0, |w| now.saturating_sub(duration_nanos(w.since)));
        let longest = std::mem::take(&mut st.interval_longest_wait).max(head);
        Duration::from_nanos(longest)
    }

    /// Holds back every grant until [`resume`](Self::resume): admissions queue (in order) even
    /// with tokens in the bucket, and ticks and returns grant nothing. Tokens keep accruing and
    /// returns still refund, so a pause defers elastic work without losing its share.
    /// Grants already handed out are unaffected; their holders decide when to give them back.
    ///
    /// ```
    /// use elastic_cpu_core::{Admit, ManualClock, WorkQueue};
    /// use std::time::Duration;
    ///
    /// let q = WorkQueue::new(ManualClock::new(), 1_000_000_000);
    /// q.pause();
    /// let Admit::Queued(ticket) = q.admit(Duration::from_millis(10)) else { panic!() };
    /// q.tick();
    /// assert_eq!(q.snapshot().waiters, 1); // still waiting: paused
    /// q.resume();
    /// assert_eq!(q.snapshot().waiters, 0); // granted on resume
    /// # drop(ticket);
    /// ```
    pub fn pause(&self) {
        let mut st = self.shared.lock();
        if !st.paused {
            st.paused = true;
            st.stats.pauses += 1;
        }
        self.shared.unlock(st);
    }

    /// Ends a [`pause`](Self::pause) and grants waiters, in order, as the bucket allows.
    pub fn resume(&self) {
        let mut wake = Vec::new();
        let now = self.shared.clock.now();
        let mut st = self.shared.lock();
        st.paused = false;
        st.grant_waiters(&self.shared.fast, now, &mut wake);
        self.shared.unlock(st);
        wake_all(wake);
    }

    /// Hand out at most `max` grants at a time (`None`: no cap, the default). Grants beyond it
    /// wait in line, as for tokens, until a holder settles. A cap at the CPUs the rate pays
    /// for keeps elastic work from occupying more workers at once than its share needs.
    ///
    /// ```
    /// use elastic_cpu_core::{Admit, ManualClock, WorkQueue};
    /// use std::time::Duration;
    ///
    /// let q = WorkQueue::new(ManualClock::new(), 4_000_000_000); // 4 CPUs' worth
    /// q.set_max_holders(Some(1));
    /// let Admit::Granted(g) = q.admit(Duration::from_millis(10)) else { panic!() };
    /// let Admit::Queued(t) = q.admit(Duration::from_millis(10)) else { panic!() };
    /// q.done(g, Duration::from_millis(10)); // the holder settles: the next one is granted
    /// assert_eq!(q.snapshot().waiters, 0);
    /// # drop(t);
    /// ```
    pub fn set_max_holders(&self, max: Option<usize>) {
        let mut wake = Vec::new();
        let now = self.shared.clock.now();
        let mut st = self.shared.lock();
        let max = max.map_or(HOLDERS_MAX, |m| (m as u64).clamp(1, HOLDERS_MAX));
        st.max_holders = max;
        self.shared.fast.set_max_holders(max);
        st.grant_waiters(&self.shared.fast, now, &mut wake);
        self.shared.unlock(st);
        wake_all(wake);
    }

    /// Shut down: every queued and future admission resolves to [`Closed`] (queued ones are
    /// woken). Grants already handed out stay valid and can still be settled.
    pub fn close(&self) {
        let now = self.shared.clock.now();
        let mut st = self.shared.lock();
        st.closed = true;
        let waiters = std::mem::take(&mut st.waiters);
        let mut wake = Vec::with_capacity(waiters.len());
        for w in waiters {
            st.finish_wait(w.since, now);
            wake.extend(w.waker);
        }
        self.shared.unlock(st);
        wake_all(wake);
    }

    /// Whether [`close`](WorkQueue::close) was called.
    pub fn is_closed(&self) -> bool {
        lock(&self.shared.state).closed
    }

    /// Current token rate (CPU nanoseconds per second).
    pub fn rate(&self) -> u64 {
        lock(&self.shared.state).bucket.rate()
    }

    /// Counters and gauges, read under one lock.
    pub fn snapshot(&self) -> QueueSnapshot {
        let now = duration_nanos(self.shared.clock.now());
        let mut st = self.shared.lock();
        let balance = st.bucket.balance(now);
        let head_wait_nanos = st
            .waiters
            .front()
            .map_or(0, |w| now.saturating_sub(duration_nanos(w.since)));
        let fast = &self.shared.fast;
        let counted = fast.counters();
        let snapshot = QueueSnapshot {
            head_wait_nanos,
            debt_forgiven_nanos: st.bucket.forgiven,
            rate_nanos_per_sec: st.bucket.rate(),
            balance_nanos: balance,
            waiters: st.waiters.len(),
            closed: st.closed,
            paused: st.paused,
            holders: fast.holders() as usize,
            grants: counted.grants,
            acquired_nanos: counted.acquired,
            returned_nanos: counted.returned,
            used_nanos: counted.used,
            ..st.stats.clone()
        };
        self.shared.unlock(st);
        snapshot
    }
}

/// A queued admission: poll it until it yields a [`Grant`] (or [`Closed`]); drop it to cancel.
pub struct Ticket<C: Clock> {
    shared: Shared<C>,
    id: u64,
    /// Resolved (grant collected or closed): nothing left to cancel.
    spent: bool,
}

impl<C: Clock> fmt::Debug for Ticket<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("id", &self.id)
            .field("spent", &self.spent)
            .finish()
    }
}

impl<C: Clock> Ticket<C> {
    /// `Ready(Ok(grant))` once granted, `Ready(Err(Closed))` if the queue closed first, else
    /// `Pending` with `waker` registered (replacing the previous one unless it would wake the
    /// same task). A ticket that already returned `Ready` returns `Ready(Err(Closed))`.
    pub fn poll_grant(&mut self, waker: &Waker) -> Poll<Result<Grant, Closed>> {
        if self.spent {
            return Poll::Ready(Err(Closed));
        }
        let mut st = lock(&self.shared.state);
        if let Some(pos) = st.granted.iter().position(|g| g.0 == self.id) {
            let (_, nanos) = st.granted.swap_remove(pos);
            self.spent = true;
            return Poll::Ready(Ok(Grant { nanos }));
        }
        if let Some(w) = st.waiters.iter_mut().find(|w| w.id == self.id) {
            match &mut w.waker {
                Some(old) if old.will_wake(waker) => {}
                slot => *slot = Some(waker.clone()),
            }
            return Poll::Pending;
        }
        // Neither waiting nor granted: close removed it (or it was admitted after close).
        self.spent = true;
        Poll::Ready(Err(Closed))
    }

    /// Whether the ticket has resolved (its grant was collected, or it failed with [`Closed`]).
    pub fn is_spent(&self) -> bool {
        self.spent
    }
}

impl<C: Clock> Drop for Ticket<C> {
    /// Cancel: leave the queue, or give back a grant that was never collected (then grant the
    /// next waiters with it).
    fn drop(&mut self) {
        if self.spent {
            return;
        }
        let mut wake = Vec::new();
        let now = self.shared.clock.now();
        let mut st = self.shared.lock();
        if let Some(pos) = st.waiters.iter().position(|w| w.id == self.id) {
            if let Some(w) = st.waiters.remove(pos) {
                st.finish_wait(w.since, now);
            }
        } else if let Some(pos) = st.granted.iter().position(|g| g.0 == self.id) {
            let (_, nanos) = st.granted.swap_remove(pos);
            let fast = &self.shared.fast;
            fast.remove_holder();
            st.bucket.give_back(nanos);
            fast.count_settle(nanos, 0);
            st.grant_waiters(fast, now, &mut wake);
        }
        // With the last waiter gone the fast path may reopen.
        self.shared.unlock(st);
        wake_all(wake);
    }
}
