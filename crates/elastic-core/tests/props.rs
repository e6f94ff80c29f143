//! Property tests: random operation sequences over queue + bucket + controller against a small
//! reference model (docs/design.md §6). Invariants after every step:
//!
//! * the limit stays in `[min, max]` and moves in the direction the rule says;
//! * the ledger balances: `acquired − returned + over_limit == used + outstanding grants`;
//! * FIFO: the queued admissions that are still waiting are always the newest ones, and the fast
//!   path is never taken while anyone waits;
//! * no burst: over any interval, `acquired − returned ≤ burst + refill + rate increases +
//!   debt forgiven + one slice` (the one grant that may dip into debt);
//! * wake-ups: a ticket found granted after registering a waker was woken, exactly once;
//! * bounded debt: the balance never goes below one burst of debt (`−rate`);
//! * liveness: once tokens keep arriving, every waiter is granted within the time the debt and
//!   the slices ahead of it need.
//!
//! The clock may step backwards (a clock source that is set back): the bucket then refills
//! nothing until the clock is past the latest time it has seen, so a step back and forth mints
//! no tokens; every invariant above holds through it.

mod common;

use common::{waker, wakes, WakeCounter};
use elastic_cpu_core::{
    rate_for, Admit, Clock, Closed, ControllerConfig, Grant, ManualClock, StepController, Ticket,
    WorkQueue, MAX_SLICE, MIN_SLICE,
};
use proptest::prelude::*;
use proptest::sample::Index;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

const NS: i128 = 1_000_000_000;

#[derive(Debug, Clone)]
enum Op {
    /// Admit a slice of this many µs (clamped by the queue to 10..=100 ms).
    Admit(u64),
    PollAll,
    Poll(Index),
    /// Settle a running grant having used this many ‰ of its slice.
    Done(Index, u64),
    Cancel(Index),
    /// Advance the clock by this many ns.
    Advance(u64),
    /// Set the clock back by this many ns (not below zero).
    StepBack(u64),
    /// Governor tick with p99 = this many ‰ of the target (None = no data).
    Tick(Option<u64>),
    SetRate(u64),
    /// Bound the controller by another's share: this many ‰ of a CPU share (up to 1.2).
    Lower(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u64..=150_000).prop_map(Op::Admit),
        3 => Just(Op::PollAll),
        2 => any::<Index>().prop_map(Op::Poll),
        4 => (any::<Index>(), 0u64..=2000).prop_map(|(i, u)| Op::Done(i, u)),
        2 => any::<Index>().prop_map(Op::Cancel),
        4 => prop_oneof![0u64..1_000, 0u64..300_000_000].prop_map(Op::Advance),
        1 => prop_oneof![0u64..1_000, 0u64..300_000_000, 0u64..3_000_000_000].prop_map(Op::StepBack),
        3 => proptest::option::of(0u64..=2000).prop_map(Op::Tick),
        1 => (0u64..2_000_000_000).prop_map(Op::SetRate),
        1 => (0u64..=1200).prop_map(Op::Lower),
    ]
}

fn config() -> impl Strategy<Value = ControllerConfig> {
    (0.01f64..=1.0)
        .prop_flat_map(|min| (Just(min), min.max(0.05)..=1.0))
        .prop_flat_map(|(min, max)| {
            (
                Just(min),
                Just(max),
                50u64..=1_000_000, // target µs
                0.0f64..=1.0,      // inactive point
                0.0001f64..=1.0,   // delta
                0.01f64..=10.0,    // decrease factor
                0.01f64..=10.0,    // inactive factor
                1u64..=1000,       // tick ms
            )
        })
        .prop_map(
            |(min, max, target, ip, delta, df, idf, tick)| ControllerConfig {
                target_p99: Duration::from_micros(target),
                min_share: min,
                max_share: max,
                inactive_point: ip,
                delta_per_sec: delta,
                decrease_factor: df,
                inactive_decrease_factor: idf,
                tick: Duration::from_millis(tick),
                window: Duration::from_millis(tick * 25),
                max_boost: 1 + (tick % 8) as u32,
            },
        )
}

struct Live {
    ticket: Ticket<ManualClock>,
    slice: u64,
    /// Resolves to Closed (admitted after, or waiting at, the close).
    failed: bool,
    wakes: Arc<WakeCounter>,
    waker: Waker,
    /// Wake count when it last returned Pending (its waker was registered).
    pending_at: Option<usize>,
}

struct Sim {
    clock: ManualClock,
    queue: WorkQueue<ManualClock>,
    ctrl: StepController,
    cpus: f64,
    live: Vec<Live>,
    running: Vec<Grant>,
    rate: u64,
    closed: bool,
    queued_since_tick: bool,
    /// Σ dt × rate + Σ max(0, Δrate) × 1e9: the token supply, scaled by 1e9 to stay exact. Only
    /// time past `latest` counts: after a step back the bucket refills nothing until then.
    supply: i128,
    /// The latest time the clock has shown.
    latest: Duration,
    /// (acquired − returned, supply, burst, debt forgiven) after every step.
    checkpoints: Vec<(i128, i128, i128, i128)>,
}

fn slice_nanos(us: u64) -> u64 {
    Duration::from_micros(us)
        .clamp(MIN_SLICE, MAX_SLICE)
        .as_nanos() as u64
}

impl Sim {
    fn new(config: ControllerConfig, cpus: f64, initial: f64) -> Self {
        let ctrl = StepController::with_initial_share(config, initial).unwrap();
        let clock = ManualClock::new();
        let rate = rate_for(ctrl.share(), cpus);
        let queue = WorkQueue::new(clock.clone(), rate);
        let mut sim = Sim {
            clock,
            queue,
            ctrl,
            cpus,
            live: Vec::new(),
            running: Vec::new(),
            rate,
            closed: false,
            queued_since_tick: false,
            supply: 0,
            latest: Duration::ZERO,
            checkpoints: Vec::new(),
        };
        sim.check();
        sim
    }

    /// Which live tickets are granted (`Some(true)`), waiting (`Some(false)`), or failed (`None`),
    /// by FIFO: of the tickets not failed, the newest `waiters` wait, all older ones are granted.
    fn expected(&self) -> Vec<Option<bool>> {
        let waiters = self.queue.snapshot().waiters;
        let mut waiting_left = waiters;
        let mut out = vec![None; self.live.len()];
        for (i, l) in self.live.iter().enumerate().rev() {
            if l.failed {
                continue;
            }
            if waiting_left > 0 {
                waiting_left -= 1;
                out[i] = Some(false);
            } else {
                out[i] = Some(true);
            }
        }
        assert_eq!(waiting_left, 0, "more waiters than live tickets");
        out
    }

    fn poll(&mut self, i: usize, expect: Option<bool>) -> bool {
        let l = &mut self.live[i];
        let wakes = wakes(&l.wakes);
        assert!(wakes <= 1, "woken {wakes} times");
        match (l.ticket.poll_grant(&l.waker), expect) {
            (Poll::Ready(Err(Closed)), None) => true,
            (Poll::Ready(Ok(g)), Some(true)) => {
                assert_eq!(g.allotted_nanos(), l.slice);
                if let Some(at) = l.pending_at {
                    assert_eq!(
                        wakes,
                        at + 1,
                        "granted after registering a waker: woken once"
                    );
                }
                self.running.push(g);
                true
            }
            (Poll::Pending, Some(false)) => {
                assert_eq!(wakes, 0, "a waiting ticket was woken");
                l.pending_at = Some(wakes);
                false
            }
            (got, want) => panic!("ticket {i}: got {got:?}, FIFO model says {want:?}"),
        }
    }

    fn poll_all(&mut self) {
        let expect = self.expected();
        let mut keep = Vec::new();
        for (i, e) in expect.into_iter().enumerate() {
            keep.push(!self.poll(i, e));
        }
        let mut it = keep.into_iter();
        self.live.retain(|_| it.next().unwrap());
    }

    fn set_rate(&mut self, new: u64) {
        self.supply += (new as i128 - self.rate as i128).max(0) * NS;
        self.rate = new;
        self.queue.set_rate(new);
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Admit(us) => {
                // The slice, cut to a second of refill at the rate now (at least 10 ms).
                let n = slice_nanos(us).min(self.rate.max(MIN_SLICE.as_nanos() as u64));
                let before = self.queue.snapshot();
                let fast = !self.closed
                    && before.waiters == 0
                    && (n.min(self.rate) as i128) <= before.balance_nanos as i128;
                match self.queue.admit(Duration::from_micros(us)) {
                    Admit::Granted(g) => {
                        assert!(fast, "fast path taken against the rule: {before:?}");
                        assert_eq!(g.allotted_nanos(), n);
                        self.running.push(g);
                    }
                    Admit::Queued(ticket) => {
                        assert!(!fast, "queued although the fast path applied: {before:?}");
                        self.queued_since_tick |= !self.closed;
                        let (wakes, waker) = waker();
                        self.live.push(Live {
                            ticket,
                            slice: n,
                            failed: self.closed,
                            waker,
                            wakes,
                            pending_at: None,
                        });
                    }
                }
            }
            Op::PollAll => self.poll_all(),
            Op::Poll(i) => {
                if !self.live.is_empty() {
                    let i = i.index(self.live.len());
                    let e = self.expected()[i];
                    if self.poll(i, e) {
                        self.live.remove(i);
                    }
                }
            }
            Op::Done(i, permille) => {
                if !self.running.is_empty() {
                    let g = self.running.swap_remove(i.index(self.running.len()));
                    let used = g.allotted_nanos() * permille / 1000;
                    self.queue.done(g, Duration::from_nanos(used));
                }
            }
            Op::Cancel(i) => {
                if !self.live.is_empty() {
                    self.live.remove(i.index(self.live.len()));
                }
            }
            Op::Advance(ns) => self.advance(Duration::from_nanos(ns)),
            Op::StepBack(ns) => {
                let back = self.clock.now().saturating_sub(Duration::from_nanos(ns));
                self.clock.set(back);
            }
            Op::Tick(p99) => {
                let waiting = self.queue.snapshot().waiters > 0;
                let had = self.queue.tick();
                assert_eq!(
                    had,
                    self.queued_since_tick || waiting,
                    "sticky had-waiters bit"
                );
                self.queued_since_tick = false;
                let c = self.ctrl.config().clone();
                let p99 = p99.map(|pm| c.target_p99 * pm as u32 / 1000);
                let old = self.ctrl.share();
                let new = self.ctrl.tick(p99, c.tick, had);
                assert!(
                    (c.min_share..=c.max_share).contains(&new),
                    "limit {new} outside [{}, {}]",
                    c.min_share,
                    c.max_share
                );
                let inactive = c.min_share + c.inactive_point * (c.max_share - c.min_share);
                match p99 {
                    Some(p) if p > c.target_p99 => assert!(new <= old),
                    Some(_) if had => assert!(new >= old),
                    None if had => assert_eq!(new, old, "no data: hold"),
                    _ => assert!(new <= old && new >= old.min(inactive) - 1e-12),
                }
                self.set_rate(rate_for(new, self.cpus));
            }
            Op::SetRate(r) => self.set_rate(r),
            Op::Lower(pm) => {
                let c = self.ctrl.config().clone();
                let (old, to) = (self.ctrl.share(), pm as f64 / 1000.0);
                self.ctrl.lower_to(to);
                let new = self.ctrl.share();
                assert!(
                    (c.min_share..=c.max_share).contains(&new),
                    "limit {new} outside [{}, {}]",
                    c.min_share,
                    c.max_share
                );
                assert_eq!(new, old.min(to.max(c.min_share)), "lowered to {to}");
                self.set_rate(rate_for(new, self.cpus));
            }
        }
        self.check();
    }

    /// Move the clock forward; the time past the latest it has shown brings tokens.
    fn advance(&mut self, by: Duration) {
        self.clock.advance(by);
        let now = self.clock.now();
        if now > self.latest {
            self.supply += (now - self.latest).as_nanos() as i128 * self.rate as i128;
            self.latest = now;
        }
    }

    fn close(&mut self) {
        let expect = self.expected();
        for (l, e) in self.live.iter_mut().zip(expect) {
            if e == Some(false) {
                l.failed = true;
            }
        }
        self.queue.close();
        self.closed = true;
        self.check();
    }

    fn check(&mut self) {
        let s = self.queue.snapshot();
        assert_eq!(s.rate_nanos_per_sec, self.rate);
        assert!(
            s.balance_nanos as i128 <= self.rate as i128,
            "balance above burst"
        );
        assert!(
            s.balance_nanos as i128 >= -(self.rate as i128),
            "debt beyond one burst: the head's wait would be unbounded"
        );
        if self.closed {
            assert_eq!(s.waiters, 0);
        }
        // Ledger: what went out and did not come back is either used, or still held.
        let held: u64 = self.running.iter().map(Grant::allotted_nanos).sum::<u64>()
            + self
                .expected()
                .iter()
                .zip(&self.live)
                .filter(|(e, _)| **e == Some(true))
                .map(|(_, l)| l.slice)
                .sum::<u64>();
        assert_eq!(
            s.acquired_nanos as i128 - s.returned_nanos as i128 + s.over_limit_nanos as i128,
            s.used_nanos as i128 + held as i128,
            "ledger: {s:?}"
        );
        // No burst beyond the supply, over every interval ending now.
        let net = s.acquired_nanos as i128 - s.returned_nanos as i128;
        // Debt the bucket forgave (beyond its one-burst cap) was never paid back: it counts as
        // supply, and is counted by the queue.
        let forgiven = s.debt_forgiven_nanos as i128;
        for &(net_a, supply_a, burst_a, forgiven_a) in &self.checkpoints {
            let granted = (net - net_a) * NS;
            let bound = burst_a * NS
                + (self.supply - supply_a)
                + (forgiven - forgiven_a) * NS
                + MAX_SLICE.as_nanos() as i128 * NS;
            assert!(granted <= bound, "granted {granted} > bound {bound}");
        }
        self.checkpoints
            .push((net, self.supply, self.rate as i128, forgiven));
    }

    /// Stop admitting, settle everything, keep tokens arriving: every waiter must be granted in
    /// the time its debt and the slices ahead of it need.
    fn drain(&mut self) {
        for g in std::mem::take(&mut self.running) {
            let n = g.allotted_nanos();
            self.queue.done(g, Duration::from_nanos(n));
        }
        self.set_rate(rate_for(self.ctrl.share(), self.cpus));
        let s = self.queue.snapshot();
        let debt = (-s.balance_nanos).max(0) as u128;
        let ahead: u128 = self.live.iter().map(|l| l.slice as u128).sum();
        let per_step = self.rate as u128; // one second per step
                                          // A clock set back first catches up with the latest time it showed, refilling nothing.
        let behind = (self.latest - self.clock.now()).as_secs() as u128 + 1;
        let bound =
            ((debt + ahead) / per_step.max(1) + self.live.len() as u128 + 2 + behind) as usize;
        let mut steps = 0;
        self.poll_all();
        while !self.live.is_empty() {
            assert!(
                steps <= bound,
                "waiters starve: {} left after {steps} s",
                self.live.len()
            );
            self.advance(Duration::from_secs(1));
            self.queue.tick();
            self.poll_all();
            self.check();
            steps += 1;
        }
        for g in std::mem::take(&mut self.running) {
            self.queue.done(g, Duration::ZERO);
        }
        let s = self.queue.snapshot();
        assert_eq!(s.waiters, 0);
        assert_eq!(
            s.acquired_nanos - s.returned_nanos + s.over_limit_nanos,
            s.used_nanos,
            "all settled: the ledger balances exactly"
        );
    }
}

proptest! {
    #[test]
    fn queue_bucket_controller_invariants(
        config in config(),
        cpus in 1u32..=4,
        initial in 0.0f64..=1.0,
        ops in proptest::collection::vec(op(), 1..120),
        close_at in proptest::option::weighted(0.15, any::<Index>()),
    ) {
        let mut sim = Sim::new(config, cpus as f64, initial);
        let close_at = close_at.map(|i| i.index(ops.len()));
        for (i, op) in ops.into_iter().enumerate() {
            if close_at == Some(i) {
                sim.close();
            }
            sim.apply(op);
        }
        sim.drain();
    }
}
