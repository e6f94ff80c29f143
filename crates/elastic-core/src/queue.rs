//! The work queue: hands out CPU-time slices from the token bucket, FIFO, waking waiters through
//! plain [`Waker`]s (no runtime needed).

use std::fmt;
use std::task::{Poll, Waker};
use std::time::Duration;

use crate::bucket::Core;
use crate::clock::{duration_nanos, Clock};
use crate::fast::{FastPath, AVAIL_MAX, HOLDERS_MAX};
use crate::line::{Cancelled, WaitLine};
use crate::shared::{Claim, Lined, QueueShared};
use crate::sync::Arc;

/// The shortest slice a grant carries; shorter requests are rounded up.
pub const MIN_SLICE: Duration = Duration::from_millis(10);
/// The least a grant is cut down to for a bucket whose second of refill is less than the
/// slice asked for.
const MIN_GRANT: u64 = MIN_SLICE.as_nanos() as u64;

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

struct State {
    bucket: Core,
    /// Waiters ask for a slice; a grant is collected as its nanoseconds.
    line: WaitLine<u64>,
    /// At most this many grants outstanding (at most [`HOLDERS_MAX`]; the count itself is in the
    /// fast path's word).
    max_holders: u64,
    /// The counters only the lock side changes (the rest are in [`FastPath`] and the line).
    stats: QueueSnapshot,
}

impl State {
    /// The granting rule of docs/design.md §4: while someone waits and the balance is positive,
    /// grant the head its whole slice (the balance may dip negative).
    /// The fast path must be closed ([`FastPath::close`]).
    fn grant_waiters(&mut self, fast: &FastPath, now: u64, wake: &mut Vec<Waker>) {
        if self.line.is_paused() {
            return;
        }
        while !self.line.waiters.is_empty()
            && fast.holders() < self.max_holders
            && self.bucket.balance(now) > 0
        {
            let Some(w) = self.line.waiters.pop_front() else {
                break;
            };
            let slice = w.terms;
            self.bucket.take_unchecked(slice, now);
            fast.add_holder();
            fast.count_grant(slice);
            self.line.end(w, slice, now, wake);
        }
    }
}

/// Every critical section closes the fast path first ([`Lined::on_lock`]) and reopens it last
/// ([`Lined::on_unlock`]).
impl Lined for State {
    type Outcome = u64;
    type LockFree = FastPath;

    fn line(&mut self) -> &mut WaitLine<u64> {
        &mut self.line
    }

    /// A grant never collected goes back to the bucket, and on to the next waiters.
    fn cancelled(
        &mut self,
        fast: &FastPath,
        left: Cancelled<u64>,
        now: u64,
        wake: &mut Vec<Waker>,
    ) {
        if let Cancelled::Ended(nanos) = left {
            fast.remove_holder();
            self.bucket.give_back(nanos);
            fast.count_settle(nanos, 0);
            self.grant_waiters(fast, now, wake);
        }
    }

    /// Take back the tokens lent to the fast path: the bucket's balance is then whole.
    fn on_lock(&mut self, fast: &FastPath) {
        let lent = fast.close();
        self.bucket.give_back(lent);
    }

    /// Lend the balance to the fast path again if nothing needs the lock (nobody waits, not
    /// paused or closed, no debt, a rate the word holds). The refill is left to the next
    /// critical section: the fast path reads no clock.
    fn on_unlock(&mut self, fast: &FastPath) {
        let rate = self.bucket.rate();
        let line = &self.line;
        if line.waiters.is_empty() && !line.is_paused() && !line.is_closed() && rate <= AVAIL_MAX {
            let lent = self.bucket.lend_all();
            if lent > 0 {
                fast.open(lent, rate);
            }
        }
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
    shared: Arc<QueueShared<C, State>>,
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
        let state = State {
            bucket,
            line: WaitLine::new(),
            max_holders: HOLDERS_MAX,
            stats: QueueSnapshot::default(),
        };
        Self {
            shared: Arc::new(QueueShared::new(clock, FastPath::new(), state)),
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
        if self.shared.lock_free.try_admit(n) {
            return Admit::Granted(Grant { nanos: n });
        }
        self.admit_locked(n)
    }

    /// [`admit`](Self::admit) under the lock: out of line, so the fast path stays a
    /// compare-and-swap and a return.
    #[inline(never)]
    fn admit_locked(&self, n: u64) -> Admit<C> {
        let now = self.shared.now();
        let mut st = self.shared.lock();
        // At most a second of refill (a slow bucket asks for less than a slice): a grant past
        // that would push the balance below the debt cap, and the part forgiven would let the
        // work run over its rate. Cut at admission, so a waiter's grant is known when it queues.
        let cut = n.min(st.bucket.rate().max(MIN_GRANT));
        let id = st.line.new_id();
        if !st.line.is_closed() {
            if st.line.waiters.is_empty()
                && !st.line.is_paused()
                && self.shared.lock_free.holders() < st.max_holders
                && st.bucket.try_take(cut, now)
            {
                self.shared.lock_free.add_holder();
                self.shared.lock_free.count_grant(cut);
                self.shared.unlock(st);
                return Admit::Granted(Grant { nanos: cut });
            }
            st.line.push(id, now, cut, None);
        }
        self.shared.unlock(st);
        Admit::Queued(Ticket(Claim::new(self.shared.clone(), id)))
    }

    /// Settle a grant: `used` beyond the slice is charged (debt), the unused rest is returned;
    /// then waiters are granted.
    pub fn done(&self, grant: Grant, used: Duration) {
        let allotted = grant.nanos;
        let used = duration_nanos(used);
        // Nobody waits and the slice was not overrun: one compare-and-swap, no clock, no lock.
        if self.shared.lock_free.try_settle(allotted, used) {
            return;
        }
        self.settle_locked(allotted, used);
    }

    /// [`done`](Self::done) under the lock: out of line, as [`admit_locked`](Self::admit_locked).
    #[inline(never)]
    fn settle_locked(&self, allotted: u64, used: u64) {
        let shared = &*self.shared;
        let fast = &shared.lock_free;
        // Returning needs no clock read (see `Core::give_back`); charging and granting do.
        let mut now = (used > allotted).then(|| shared.now());
        shared.update(|st, wake| {
            fast.remove_holder();
            if used > allotted {
                let over = used - allotted;
                let t = *now.get_or_insert_with(|| shared.now());
                st.bucket.take_unchecked(over, t);
                st.stats.over_limit_nanos = st.stats.over_limit_nanos.saturating_add(over);
                fast.count_settle(0, used);
            } else {
                let back = allotted - used;
                st.bucket.give_back(back);
                fast.count_settle(back, used);
            }
            if !st.line.waiters.is_empty() {
                // Rare path (someone waits): reading the clock under the lock is fine here.
                let t = *now.get_or_insert_with(|| shared.now());
                st.grant_waiters(fast, t, wake);
            }
        });
    }

    /// Change the token rate (see [`TokenBucket::set_rate`](crate::TokenBucket::set_rate)), then grant waiters.
    pub fn set_rate(&self, rate_nanos_per_sec: u64) {
        let now = self.shared.now();
        self.shared.update(|st, wake| {
            st.bucket.set_rate(rate_nanos_per_sec, now);
            st.grant_waiters(&self.shared.lock_free, now, wake);
        });
    }

    /// Change the token rate without moving the balance (see
    /// [`TokenBucket::retune`](crate::TokenBucket::retune)), then grant waiters.
    pub fn retune(&self, rate_nanos_per_sec: u64) {
        let now = self.shared.now();
        self.shared.update(|st, wake| {
            st.bucket.retune(rate_nanos_per_sec, now);
            st.grant_waiters(&self.shared.lock_free, now, wake);
        });
    }

    /// The governor's periodic call: refill, grant waiters from what refilled, and return (and
    /// clear) whether elastic work waited since the last tick: true if an admission queued
    /// since then, or if any were still queued when this tick began.
    pub fn tick(&self) -> bool {
        let now = self.shared.now();
        self.shared.update(|st, wake| {
            // Read before granting: waiters this tick serves still waited during the last period.
            let had = st.line.take_had_waiters();
            // Refill now: the fast path reads no clock, so this bounds how long refill waits.
            st.bucket.balance(now);
            st.grant_waiters(&self.shared.lock_free, now, wake);
            had
        })
    }

    /// A driver's tick at one look: [`tick`](Self::tick), then
    /// [`take_longest_wait`](Self::take_longest_wait) and [`load`](Self::load), under one lock
    /// and one clock read.
    ///
    /// ```
    /// use elastic_cpu_core::{ManualClock, TickLoad, WorkQueue};
    ///
    /// let q = WorkQueue::new(ManualClock::new(), 1_000_000_000);
    /// let t = q.tick_load();
    /// assert!(!t.waited && t.has_tokens && t.waiters == 0);
    /// ```
    pub fn tick_load(&self) -> TickLoad {
        let now = self.shared.now();
        let mut t = self.shared.update(|st, wake| {
            let waited = st.line.take_had_waiters();
            st.bucket.balance(now);
            st.grant_waiters(&self.shared.lock_free, now, wake);
            let longest_wait = Duration::from_nanos(st.line.take_longest_wait(now));
            TickLoad {
                waited,
                longest_wait,
                waiters: st.line.waiters.len(),
                holders: 0,
                has_tokens: st.bucket.balance(now) > 0,
            }
        });
        t.holders = self.shared.lock_free.holders() as usize;
        t
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
        let now = self.shared.now();
        Duration::from_nanos(self.shared.state().line.take_longest_wait(now))
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
        if st.line.pause() {
            st.stats.pauses += 1;
        }
        self.shared.unlock(st);
    }

    /// Ends a [`pause`](Self::pause) and grants waiters, in order, as the bucket allows.
    pub fn resume(&self) {
        let now = self.shared.now();
        self.shared.update(|st, wake| {
            st.line.resume();
            st.grant_waiters(&self.shared.lock_free, now, wake);
        });
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
        let now = self.shared.now();
        let max = max.map_or(HOLDERS_MAX, |m| (m as u64).clamp(1, HOLDERS_MAX));
        self.shared.update(|st, wake| {
            st.max_holders = max;
            self.shared.lock_free.set_max_holders(max);
            st.grant_waiters(&self.shared.lock_free, now, wake);
        });
    }

    /// Shut down: every queued and future admission resolves to [`Closed`] (queued ones are
    /// woken). Grants already handed out stay valid and can still be settled.
    pub fn close(&self) {
        let now = self.shared.now();
        self.shared.update(|st, wake| st.line.close(now, wake));
    }

    /// Whether [`close`](WorkQueue::close) was called.
    pub fn is_closed(&self) -> bool {
        self.shared.state().line.is_closed()
    }

    /// Current token rate (CPU nanoseconds per second).
    pub fn rate(&self) -> u64 {
        self.shared.state().bucket.rate()
    }

    /// What a driver reads of the queue at each tick, without the snapshot's counters (which
    /// sum every thread's): work waiting, grants held, and whether the bucket holds tokens.
    ///
    /// ```
    /// use elastic_cpu_core::{ManualClock, WorkQueue};
    ///
    /// let q = WorkQueue::new(ManualClock::new(), 1_000_000_000);
    /// assert_eq!(q.load(), (0, 0, true));
    /// ```
    pub fn load(&self) -> (usize, usize, bool) {
        let now = self.shared.now();
        let mut st = self.shared.lock();
        let has_tokens = st.bucket.balance(now) > 0;
        let waiters = st.line.waiters.len();
        self.shared.unlock(st);
        let holders = self.shared.lock_free.holders() as usize;
        (waiters, holders, has_tokens)
    }

    /// Counters and gauges, read under one lock.
    pub fn snapshot(&self) -> QueueSnapshot {
        let now = self.shared.now();
        let mut st = self.shared.lock();
        let balance_nanos = st.bucket.balance(now);
        let fast = &self.shared.lock_free;
        let counted = fast.counters();
        let line = &st.line;
        let snapshot = QueueSnapshot {
            waiters: line.waiters.len(),
            head_wait_nanos: line.head_wait(now),
            waits: line.waits(),
            wait_nanos: line.wait_nanos(),
            longest_wait_nanos: line.longest_wait(),
            closed: line.is_closed(),
            paused: line.is_paused(),
            holders: fast.holders() as usize,
            grants: counted.grants,
            acquired_nanos: counted.acquired,
            returned_nanos: counted.returned,
            used_nanos: counted.used,
            balance_nanos,
            debt_forgiven_nanos: st.bucket.forgiven,
            rate_nanos_per_sec: st.bucket.rate(),
            ..st.stats.clone()
        };
        self.shared.unlock(st);
        snapshot
    }
}

/// A [`WorkQueue::tick_load`]: the queue at a driver's tick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TickLoad {
    /// Work waited for a grant since the last tick.
    pub waited: bool,
    /// The longest wait since the last tick (a waiter still queued counts).
    pub longest_wait: Duration,
    /// Work waiting for a grant after the tick's grants.
    pub waiters: usize,
    /// Grants held.
    pub holders: usize,
    /// The bucket holds tokens after the tick's grants.
    pub has_tokens: bool,
}

/// A queued admission: poll it until it yields a [`Grant`] (or [`Closed`]); drop it to cancel
/// (leave the queue, or give back a grant never collected, which goes to the next waiters).
pub struct Ticket<C: Clock>(Claim<C, State>);

impl<C: Clock> Ticket<C> {
    /// `Ready(Ok(grant))` once granted, `Ready(Err(Closed))` if the queue closed first, else
    /// `Pending` with `waker` registered (replacing the previous one unless it would wake the
    /// same task). A ticket that already returned `Ready` returns `Ready(Err(Closed))`.
    pub fn poll_grant(&mut self, waker: &Waker) -> Poll<Result<Grant, Closed>> {
        self.0.poll(waker, |_, granted| {
            granted.map(|nanos| Grant { nanos }).ok_or(Closed)
        })
    }

    /// Whether the ticket has resolved (its grant was collected, or it failed with [`Closed`]).
    pub fn is_spent(&self) -> bool {
        self.0.is_spent()
    }
}

impl<C: Clock> fmt::Debug for Ticket<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt_as("Ticket", f)
    }
}
