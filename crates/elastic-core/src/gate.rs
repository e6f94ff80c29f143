//! The connection gate's admission queue: setups paced as their own class of CPU time, each
//! attempt admitted, rejected or expired exactly once (docs/design.md §5, "Connection gate").
//!
//! Like the [`WorkQueue`](crate::WorkQueue) it holds a token bucket of CPU nanoseconds and
//! wakes waiters through plain [`Waker`]s, but an attempt here is a connection setup: it has a
//! deadline (its client gives up), the queue is bounded, an attempt that cannot start in time
//! is refused at once, and one that waited past its deadline is dropped before it is granted.

use std::fmt;
use std::task::{Poll, Waker};
use std::time::Duration;

use crate::bucket::Core;
use crate::clock::{duration_nanos, Clock};
use crate::crowd::Crowd;
use crate::line::{Cancelled, WaitLine, Waiter};
use crate::shared::{Claim, Lined, QueueShared};
use crate::sync::Arc;

/// Which waiting attempt is granted first when tokens come.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QueueOrder {
    /// Oldest first; a full queue refuses the newcomer.
    Fifo,
    /// Newest first; a full queue drops its oldest attempt (the one most likely to have lost
    /// its client) to make room. The default: under overload it completes more setups within
    /// their deadlines (docs/design.md §5 has the experiment).
    #[default]
    Lifo,
}

/// Why an attempt did not get a setup grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectKind {
    /// The queue was full (FIFO: the newcomer; LIFO: the oldest waiter, displaced).
    QueueFull,
    /// It could not start within its deadline: refused at once, before it waited.
    WouldExpire,
    /// It waited past its deadline: dropped before its setup started.
    Expired,
    /// The gate is closed (its governor is gone).
    Closed,
}

/// A refused attempt: why, and when its client should come back (without jitter;
/// [`Duration::MAX`] when the rate is zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// Why.
    pub kind: RejectKind,
    /// When to come back: the start of this client's retry slot. Each refusal books the next
    /// slot, one setup's time (at the current rate and cost per setup) after the last one
    /// booked and no earlier than the attempts queued now have started, so refused clients
    /// come back about as fast as the gate admits ([`GateStats::crowd`]); at most 60 s.
    pub retry_base: Duration,
}

/// CPU tokens taken for one setup. Settle with [`GateQueue::done`]; one that is just dropped
/// keeps its tokens spent (and is missing from the ledger).
///
/// A grant holds one of the places setups run in ([`GateQueue::set_max_in_setup`]) while its
/// setup runs; while the setup waits on its peer it can give the place up
/// ([`GateQueue::wait_on_peer`]) and still count as in flight.
#[must_use = "settle a setup grant with GateQueue::done, or its tokens stay spent"]
#[derive(Debug, PartialEq, Eq)]
pub struct SetupGrant {
    nanos: u64,
    /// It gave up its place: it waits on its peer.
    waiting: bool,
}

impl SetupGrant {
    /// CPU time allotted so far (the estimate taken at admission plus any overrun charged).
    pub fn allotted(&self) -> Duration {
        Duration::from_nanos(self.nanos)
    }

    /// Whether the setup has given up its place to wait on its peer.
    pub fn is_waiting_on_peer(&self) -> bool {
        self.waiting
    }

    fn new(nanos: u64) -> SetupGrant {
        SetupGrant {
            nanos,
            waiting: false,
        }
    }
}

/// The outcome of [`GateQueue::admit`].
#[must_use = "an Admitted grant must be settled; a Queued ticket must be polled or dropped"]
#[derive(Debug)]
pub enum GateAdmit<C: Clock> {
    /// Tokens were there and nobody waited ahead: start now.
    Admitted(SetupGrant),
    /// Wait: poll the ticket (dropping it cancels, returning a grant it already received).
    Queued(GateTicket<C>),
    /// Refused at once.
    Rejected(Rejection),
}

/// Settings of a [`GateQueue`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateConfig {
    /// The most attempts waiting at once (at least 1).
    pub max_queue: usize,
    /// Which waiter is granted first.
    pub order: QueueOrder,
    /// CPU per setup assumed until a setup has been measured.
    pub initial_cost: Duration,
    /// The most setups in flight at once (at least 1): granted and not settled, whether they
    /// run or wait on their peers. Bounds what clients that never finish their setups can
    /// hold, where the running cap ([`GateQueue::set_max_in_setup`]) counts only setups that
    /// are not waiting.
    pub max_in_flight: usize,
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            max_queue: 1024,
            order: QueueOrder::default(),
            initial_cost: Duration::from_millis(1),
            max_in_flight: 1024,
        }
    }
}

/// Counters and gauges of a [`GateQueue`]. Counters only grow.
///
/// Every attempt ends exactly once: `attempts == admitted + rejected + expired + cancelled +
/// queue_len + pending`, where `pending` counts grants made to tickets not yet polled. Once
/// every grant is settled: `acquired_nanos − returned_nanos + over_limit_nanos == used_nanos`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GateStats {
    /// Current token rate (CPU nanoseconds per second).
    pub rate_nanos_per_sec: u64,
    /// Current balance after refill (negative = debt).
    pub balance_nanos: i64,
    /// Attempts waiting now.
    pub queue_len: usize,
    /// Grants made to tickets that have not collected them yet.
    pub pending: usize,
    /// Setups running now: grants handed out, not settled, and not waiting on their peers.
    pub in_setup: usize,
    /// Setups that gave up their places to wait on their peers ([`GateQueue::wait_on_peer`]).
    pub waiting_on_peer: usize,
    /// The most setups that may run at once ([`GateQueue::set_max_in_setup`]; `usize::MAX`:
    /// no cap).
    pub max_in_setup: usize,
    /// The most setups in flight at once, running or waiting ([`GateConfig::max_in_flight`]).
    pub max_in_flight: usize,
    /// Attempts so far.
    pub attempts: u64,
    /// Attempts that got a setup grant (and collected it).
    pub admitted: u64,
    /// Attempts refused: queue full, would expire, or closed.
    pub rejected: u64,
    /// Of `rejected`: the queue was full.
    pub rejected_full: u64,
    /// Of `rejected`: they could not have started within their deadlines.
    pub rejected_would_expire: u64,
    /// Of `rejected`: the gate was closed.
    pub rejected_closed: u64,
    /// Attempts that waited past their deadlines and were dropped before their setups.
    pub expired: u64,
    /// Attempts whose caller gave up (dropped the ticket) before they ended otherwise.
    pub cancelled: u64,
    /// Tokens taken at admission.
    pub acquired_nanos: u64,
    /// Tokens given back: unused estimates and grants of cancelled tickets.
    pub returned_nanos: u64,
    /// CPU charged beyond the admission estimate.
    pub over_limit_nanos: u64,
    /// CPU setups used, as measured: the setup class's CPU.
    pub used_nanos: u64,
    /// Setups settled.
    pub setups: u64,
    /// The CPU per setup assumed now (the measured average, or the initial estimate).
    pub cost_nanos: u64,
    /// Attempts that finished waiting (granted, expired, displaced, cancelled or closed).
    pub waits: u64,
    /// Total time they waited.
    pub wait_nanos: u64,
    /// Whether the gate is closed.
    pub closed: bool,
    /// Grants are held back ([`GateQueue::pause`]).
    pub paused: bool,
    /// Refused clients whose retry slots are still ahead (the booked time over one setup's
    /// time at the current rate): each refusal books the next slot, so hints grow with them.
    pub crowd: u64,
}

/// How a ticket's wait ended, kept until the ticket collects it.
#[derive(Clone, Copy)]
enum Ended {
    Granted(u64),
    Refused(RejectKind),
}

struct State {
    bucket: Core,
    /// Waiters carry when they expire (clock nanoseconds).
    line: WaitLine<Ended>,
    max_queue: usize,
    order: QueueOrder,
    cost: u64,
    measured: bool,
    /// At most this many setups running at once (`usize::MAX`: no cap).
    max_in_setup: usize,
    /// At most this many running or waiting on their peers.
    max_in_flight: usize,
    /// The retry slots booked by refusals.
    crowd: Crowd,
    stats: GateStats,
}

/// Expired waiters each arrival drops (two keep up with arrivals that all expire, and
/// bound the work one arrival does).
const EXPIRE_PER_ARRIVAL: usize = 2;

/// The measured cost is an exponential average over this many setups.
const COST_SMOOTHING: u64 = 8;

/// Whether `w`'s deadline has passed.
fn expired(w: &Waiter, now: u64) -> bool {
    w.terms <= now
}

impl State {
    fn refuse(&mut self, w: Waiter, kind: RejectKind, now: u64, wake: &mut Vec<Waker>) {
        match kind {
            RejectKind::Expired => self.stats.expired += 1,
            RejectKind::QueueFull => {
                self.stats.rejected += 1;
                self.stats.rejected_full += 1;
            }
            _ => {}
        }
        self.line.end(w, Ended::Refused(kind), now, wake);
    }

    /// Drop every waiter whose deadline has passed (the governor calls this each tick, so an
    /// expired attempt learns within a tick; it is never granted in any case).
    fn expire(&mut self, now: u64, wake: &mut Vec<Waker>) {
        if !self.line.waiters.iter().any(|w| expired(w, now)) {
            return;
        }
        let waiters = std::mem::take(&mut self.line.waiters);
        for w in waiters {
            if expired(&w, now) {
                self.refuse(w, RejectKind::Expired, now, wake);
            } else {
                self.line.waiters.push_back(w);
            }
        }
    }

    /// Drop up to `max` expired waiters from the front (the oldest in either order): each
    /// arrival does this, so under a flood expiries are spread over arrivals instead of
    /// waking a tick's worth of tasks at once (a burst that is itself scheduling latency).
    fn expire_oldest(&mut self, now: u64, max: usize, wake: &mut Vec<Waker>) {
        for _ in 0..max {
            match self.line.waiters.front() {
                Some(w) if expired(w, now) => {
                    let w = self.line.waiters.pop_front().expect("front exists");
                    self.refuse(w, RejectKind::Expired, now, wake);
                }
                _ => return,
            }
        }
    }

    /// Grant waiters in queue order while the balance is positive: each takes the estimated
    /// cost of one setup (the balance may dip negative, as for the work queue's head). One
    /// whose deadline has passed is dropped instead.
    fn grant_waiters(&mut self, now: u64, wake: &mut Vec<Waker>) {
        while self.may_grant() && !self.line.waiters.is_empty() && self.bucket.balance(now) > 0 {
            let next = match self.order {
                QueueOrder::Fifo => self.line.waiters.pop_front(),
                QueueOrder::Lifo => self.line.waiters.pop_back(),
            };
            let Some(w) = next else { break };
            if expired(&w, now) {
                self.refuse(w, RejectKind::Expired, now, wake);
                continue;
            }
            self.take_cost(now);
            self.line.end(w, Ended::Granted(self.cost), now, wake);
        }
    }

    fn may_grant(&self) -> bool {
        let in_flight = self.stats.in_setup + self.stats.waiting_on_peer;
        !self.line.is_paused()
            && self.stats.in_setup < self.max_in_setup
            && in_flight < self.max_in_flight
    }

    fn take_cost(&mut self, now: u64) {
        self.bucket.take_unchecked(self.cost, now);
        self.stats.in_setup += 1;
        self.stats.acquired_nanos = self.stats.acquired_nanos.saturating_add(self.cost);
    }

    /// How long an attempt with `ahead` grants before it waits for its own, at the current
    /// rate: the `k`-th waiter is granted once `balance + rate·t − k·cost > 0`.
    fn wait_estimate(&self, ahead: usize, balance: i64) -> Duration {
        let need = (ahead as i128) * (self.cost as i128) - balance as i128;
        if need < 0 {
            return Duration::ZERO;
        }
        let rate = self.bucket.rate();
        if rate == 0 {
            return Duration::MAX;
        }
        // Just past the point where the balance turns positive.
        let nanos = (need as u128 * 1_000_000_000).div_ceil(rate as u128) + 1;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Until every attempt queued now has started, and one more setup's worth.
    fn queue_ready(&mut self, now: u64) -> Duration {
        let balance = self.bucket.balance(now);
        let ahead = self.line.waiters.len() + 1;
        self.wait_estimate(ahead, balance.min(0))
    }

    /// One setup's time at the current rate (`None` at rate zero).
    fn spacing(&self) -> Option<u64> {
        let rate = self.bucket.rate();
        (rate > 0).then(|| {
            let nanos = (self.cost as u128 * 1_000_000_000).div_ceil(rate as u128);
            u64::try_from(nanos).unwrap_or(u64::MAX)
        })
    }

    /// The hint base a refusal now gets: the start of the next free retry slot, after the
    /// queue and after every slot booked before (`book`: take the slot).
    fn retry_slot(&mut self, now: u64, book: bool) -> Duration {
        let ready = self.queue_ready(now);
        let Some(spacing) = self.spacing() else {
            return Duration::MAX;
        };
        let ready = duration_nanos(ready);
        Duration::from_nanos(if book {
            self.crowd.book(now, ready, spacing)
        } else {
            self.crowd.peek(now, ready)
        })
    }

    /// A refusal and its hint; every refusal but a closed gate's books a retry slot.
    fn rejection(&mut self, kind: RejectKind, now: u64) -> Rejection {
        let retry_base = self.retry_slot(now, kind != RejectKind::Closed);
        Rejection { kind, retry_base }
    }
}

impl Lined for State {
    type Outcome = Ended;
    type LockFree = ();

    fn line(&mut self) -> &mut WaitLine<Ended> {
        &mut self.line
    }

    /// A cancelled attempt is counted; a grant it never collected goes back to the bucket, and
    /// on to the next waiters.
    fn cancelled(&mut self, _: &(), left: Cancelled<Ended>, now: u64, wake: &mut Vec<Waker>) {
        match left {
            Cancelled::Waiting => self.stats.cancelled += 1,
            Cancelled::Ended(Ended::Granted(nanos)) => {
                self.stats.cancelled += 1;
                self.stats.in_setup = self.stats.in_setup.saturating_sub(1);
                self.bucket.give_back(nanos);
                self.stats.returned_nanos = self.stats.returned_nanos.saturating_add(nanos);
                self.grant_waiters(now, wake);
            }
            Cancelled::Ended(Ended::Refused(_)) => {}
        }
    }
}

/// The thread-safe admission queue of a connection gate.
///
/// ```
/// use elastic_cpu_core::{GateAdmit, GateConfig, GateQueue, ManualClock, RejectKind};
/// use std::task::Waker;
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// // 10 ms of CPU per second for setups, estimated at 1 ms each: 10 setups a second.
/// let gate = GateQueue::new(clock.clone(), 10_000_000, GateConfig::default());
/// let GateAdmit::Admitted(setup) = gate.admit(Duration::from_millis(500), Waker::noop()) else {
///     panic!()
/// };
/// gate.done(setup, Duration::from_millis(11)); // the whole burst and more: in debt now
/// // The next one could not start within 50 ms: refused at once, no CPU spent.
/// let GateAdmit::Rejected(r) = gate.admit(Duration::from_millis(50), Waker::noop()) else {
///     panic!()
/// };
/// assert_eq!(r.kind, RejectKind::WouldExpire);
/// ```
pub struct GateQueue<C: Clock> {
    shared: Arc<QueueShared<C, State>>,
}

impl<C: Clock> Clone for GateQueue<C> {
    /// Another handle to the same queue.
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<C: Clock> fmt::Debug for GateQueue<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GateQueue")
            .field("stats", &self.snapshot())
            .finish()
    }
}

impl<C: Clock> GateQueue<C> {
    /// A gate over a full bucket refilling at `rate_nanos_per_sec`.
    pub fn new(clock: C, rate_nanos_per_sec: u64, config: GateConfig) -> Self {
        let now = duration_nanos(clock.now());
        let bucket = Core::new(rate_nanos_per_sec, now);
        let cost = duration_nanos(config.initial_cost).max(1);
        let state = State {
            bucket,
            line: WaitLine::new(),
            max_queue: config.max_queue.max(1),
            order: config.order,
            cost,
            measured: false,
            max_in_setup: usize::MAX,
            max_in_flight: config.max_in_flight.max(1),
            crowd: Crowd::default(),
            stats: GateStats {
                cost_nanos: cost,
                ..GateStats::default()
            },
        };
        Self {
            shared: Arc::new(QueueShared::new(clock, (), state)),
        }
    }

    /// One connection attempt that may wait `deadline` before its setup starts. Admitted at
    /// once when nobody waits ahead and the balance is positive; refused at once when the
    /// queue is full (FIFO) or it could not start in time; otherwise queued with `waker`.
    pub fn admit(&self, deadline: Duration, waker: &Waker) -> GateAdmit<C> {
        let now = self.shared.now();
        self.shared.update(|st, wake| {
            st.stats.attempts += 1;
            let id = st.line.new_id();
            self.admit_locked(st, id, now, deadline, waker, wake)
        })
    }

    fn admit_locked(
        &self,
        st: &mut State,
        id: u64,
        now: u64,
        deadline: Duration,
        waker: &Waker,
        wake: &mut Vec<Waker>,
    ) -> GateAdmit<C> {
        if st.line.is_closed() {
            st.stats.rejected += 1;
            st.stats.rejected_closed += 1;
            return GateAdmit::Rejected(st.rejection(RejectKind::Closed, now));
        }
        st.expire_oldest(now, EXPIRE_PER_ARRIVAL, wake);
        let balance = st.bucket.balance(now);
        // Fast path: nobody ahead, tokens there.
        if st.line.waiters.is_empty() && st.may_grant() && balance > 0 {
            st.take_cost(now);
            st.stats.admitted += 1;
            return GateAdmit::Admitted(SetupGrant::new(st.cost));
        }
        let full = st.line.waiters.len() >= st.max_queue;
        if full && st.order == QueueOrder::Fifo {
            st.stats.rejected += 1;
            st.stats.rejected_full += 1;
            return GateAdmit::Rejected(st.rejection(RejectKind::QueueFull, now));
        }
        // FIFO: everyone queued is granted first. LIFO: the newest is next.
        let ahead = match st.order {
            QueueOrder::Fifo => st.line.waiters.len(),
            QueueOrder::Lifo => 0,
        };
        if st.wait_estimate(ahead, balance) > deadline {
            st.stats.rejected += 1;
            st.stats.rejected_would_expire += 1;
            return GateAdmit::Rejected(st.rejection(RejectKind::WouldExpire, now));
        }
        if full {
            // LIFO: the oldest attempt makes room.
            if let Some(oldest) = st.line.waiters.pop_front() {
                st.refuse(oldest, RejectKind::QueueFull, now, wake);
            }
        }
        let expires = now.saturating_add(duration_nanos(deadline));
        st.line.push(id, now, expires, Some(waker.clone()));
        GateAdmit::Queued(GateTicket(Claim::new(self.shared.clone(), id)))
    }

    /// Charge `extra` CPU to a running setup beyond what it was allotted (a setup that ran
    /// past its estimate), now rather than when it settles, so later admissions see the debt.
    pub fn charge(&self, grant: &mut SetupGrant, extra: Duration) {
        let extra = duration_nanos(extra);
        if extra == 0 {
            return;
        }
        let now = self.shared.now();
        let mut st = self.shared.state();
        st.bucket.take_unchecked(extra, now);
        st.stats.over_limit_nanos = st.stats.over_limit_nanos.saturating_add(extra);
        grant.nanos = grant.nanos.saturating_add(extra);
    }

    /// Settle a setup that used `used` of CPU: beyond the allotment is charged (debt), the rest
    /// is returned; `used` feeds the cost estimate; then waiters are granted.
    pub fn done(&self, grant: SetupGrant, used: Duration) {
        let used = duration_nanos(used);
        let allotted = grant.nanos;
        let now = self.shared.now();
        self.shared.update(|st, wake| {
            if grant.waiting {
                st.stats.waiting_on_peer = st.stats.waiting_on_peer.saturating_sub(1);
            } else {
                st.stats.in_setup = st.stats.in_setup.saturating_sub(1);
            }
            st.stats.setups += 1;
            st.stats.used_nanos = st.stats.used_nanos.saturating_add(used);
            if used > allotted {
                let over = used - allotted;
                st.bucket.take_unchecked(over, now);
                st.stats.over_limit_nanos = st.stats.over_limit_nanos.saturating_add(over);
            } else {
                let back = allotted - used;
                st.bucket.give_back(back);
                st.stats.returned_nanos = st.stats.returned_nanos.saturating_add(back);
            }
            // A setup that used nothing (its client left first) says nothing about the cost.
            if used > 0 {
                st.cost = if st.measured {
                    let c =
                        st.cost as i128 + (used as i128 - st.cost as i128) / COST_SMOOTHING as i128;
                    u64::try_from(c.max(1)).unwrap_or(u64::MAX)
                } else {
                    used
                };
                st.measured = true;
                st.stats.cost_nanos = st.cost;
            }
            st.grant_waiters(now, wake);
        });
    }

    /// The setup waits on its peer (a handshake's next message): it gives up its place, so a
    /// client that stalls its setup holds no place another setup could run in, and waiters
    /// are granted into it. It stays in flight ([`GateConfig::max_in_flight`]) and keeps its
    /// tokens. Nothing happens if it waits already.
    pub fn wait_on_peer(&self, grant: &mut SetupGrant) {
        if grant.waiting {
            return;
        }
        grant.waiting = true;
        let now = self.shared.now();
        self.shared.update(|st, wake| {
            st.stats.in_setup = st.stats.in_setup.saturating_sub(1);
            st.stats.waiting_on_peer += 1;
            st.grant_waiters(now, wake);
        });
    }

    /// The setup runs again after [`wait_on_peer`](Self::wait_on_peer): it takes a place back
    /// at once, even beyond the cap (a setup that has started is never held back: its client is
    /// waiting for it); later admissions wait until running setups are under the cap again.
    /// Nothing happens if it was not waiting.
    pub fn resume_setup(&self, grant: &mut SetupGrant) {
        if !grant.waiting {
            return;
        }
        grant.waiting = false;
        let mut st = self.shared.state();
        st.stats.waiting_on_peer = st.stats.waiting_on_peer.saturating_sub(1);
        st.stats.in_setup += 1;
    }

    /// Change the token rate (as [`TokenBucket::set_rate`](crate::TokenBucket::set_rate)), then
    /// grant waiters.
    pub fn set_rate(&self, rate_nanos_per_sec: u64) {
        let now = self.shared.now();
        self.shared.update(|st, wake| {
            st.bucket.set_rate(rate_nanos_per_sec, now);
            st.grant_waiters(now, wake);
        });
    }

    /// The governor's periodic call: drop expired waiters, grant from what refilled, and
    /// return (and clear) whether attempts waited since the last tick.
    pub fn tick(&self) -> bool {
        let now = self.shared.now();
        self.shared.update(|st, wake| {
            let had = st.line.take_had_waiters();
            st.expire(now, wake);
            st.grant_waiters(now, wake);
            had
        })
    }

    /// The queue's clock now.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.shared.now())
    }

    /// The longest wait since the last call: finished waits, or the longest-waiting attempt
    /// still queued, whichever is longer.
    pub fn take_longest_wait(&self) -> Duration {
        let now = self.shared.now();
        Duration::from_nanos(self.shared.state().line.take_longest_wait(now))
    }

    /// Hold back every grant until [`resume`](Self::resume) (the backlog brake): attempts
    /// queue, tokens keep accruing.
    pub fn pause(&self) {
        self.shared.state().line.pause();
    }

    /// End a [`pause`](Self::pause) and grant waiters.
    pub fn resume(&self) {
        let now = self.shared.now();
        self.shared.update(|st, wake| {
            st.line.resume();
            st.grant_waiters(now, wake);
        });
    }

    /// Let at most `max` setups run at once (`None`: no cap, the default); beyond it attempts
    /// wait as for tokens. Then grant waiters.
    pub fn set_max_in_setup(&self, max: Option<usize>) {
        let now = self.shared.now();
        self.shared.update(|st, wake| {
            st.max_in_setup = max.unwrap_or(usize::MAX).max(1);
            st.grant_waiters(now, wake);
        });
    }

    /// Shut down: every queued and future attempt is refused with [`RejectKind::Closed`]
    /// (queued ones are woken). Grants already out can still be settled.
    pub fn close(&self) {
        let now = self.shared.now();
        self.shared.update(|st, wake| {
            let refused = st.line.close(now, wake);
            st.stats.rejected += refused;
            st.stats.rejected_closed += refused;
        });
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.shared.state().line.is_closed()
    }

    /// The current token rate.
    pub fn rate(&self) -> u64 {
        self.shared.state().bucket.rate()
    }

    /// The retry-after base a refusal now would get, without booking its slot: after the
    /// attempts queued now and the retry slots booked so far ([`Duration::MAX`] at rate zero).
    pub fn retry_base(&self) -> Duration {
        let now = self.shared.now();
        self.shared.state().retry_slot(now, false)
    }

    /// Counters and gauges, read under one lock.
    pub fn snapshot(&self) -> GateStats {
        let now = self.shared.now();
        let mut st = self.shared.state();
        let balance_nanos = st.bucket.balance(now);
        let line = &st.line;
        GateStats {
            crowd: st
                .spacing()
                .map_or(0, |spacing| st.crowd.waiting(now, spacing)),
            rate_nanos_per_sec: st.bucket.rate(),
            balance_nanos,
            queue_len: line.waiters.len(),
            pending: line
                .uncollected()
                .filter(|e| matches!(e, Ended::Granted(_)))
                .count(),
            waits: line.waits(),
            wait_nanos: line.wait_nanos(),
            closed: line.is_closed(),
            paused: line.is_paused(),
            max_in_setup: st.max_in_setup,
            max_in_flight: st.max_in_flight,
            ..st.stats.clone()
        }
    }
}

/// A queued attempt: poll it until it yields a [`SetupGrant`] or a [`Rejection`]; drop it to
/// cancel (leave the queue, or give back a grant never collected, which goes to the next).
pub struct GateTicket<C: Clock>(Claim<C, State>);

impl<C: Clock> GateTicket<C> {
    /// `Ready(Ok(grant))` once granted, `Ready(Err(rejection))` once expired, displaced or
    /// closed, else `Pending` with `waker` registered. After `Ready` it returns
    /// `Ready(Err(Closed))`.
    pub fn poll(&mut self, waker: &Waker) -> Poll<Result<SetupGrant, Rejection>> {
        let now = self.0.queue().now();
        self.0.poll(waker, |st, ended| {
            // No outcome: the gate closed on it, or it already returned `Ready`.
            match ended.unwrap_or(Ended::Refused(RejectKind::Closed)) {
                Ended::Granted(nanos) => {
                    st.stats.admitted += 1;
                    Ok(SetupGrant::new(nanos))
                }
                Ended::Refused(kind) => Err(st.rejection(kind, now)),
            }
        })
    }
}

impl<C: Clock> fmt::Debug for GateTicket<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt_as("GateTicket", f)
    }
}
