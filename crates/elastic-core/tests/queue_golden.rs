//! Work queue scenarios from docs/design.md §4 on a manual clock, with counting wakers.

use elastic_cpu_core::{
    Admit, Closed, Grant, ManualClock, QueueSnapshot, Ticket, WorkQueue, MAX_SLICE, MIN_SLICE,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Poll, Wake, Waker};
use std::time::Duration;

const MS: u64 = 1_000_000;

#[derive(Default)]
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn waker() -> (Arc<CountingWaker>, Waker) {
    let c = Arc::new(CountingWaker::default());
    (c.clone(), Waker::from(c))
}

fn wakes(c: &CountingWaker) -> usize {
    c.0.load(Ordering::SeqCst)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn granted(a: Admit<ManualClock>) -> Grant {
    match a {
        Admit::Granted(g) => g,
        Admit::Queued(_) => panic!("expected a grant"),
    }
}

fn queued(a: Admit<ManualClock>) -> Ticket<ManualClock> {
    match a {
        Admit::Queued(t) => t,
        Admit::Granted(g) => panic!("expected to queue, got {g:?}"),
    }
}

fn ready(t: &mut Ticket<ManualClock>, w: &Waker) -> Grant {
    match t.poll_grant(w) {
        Poll::Ready(Ok(g)) => g,
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn pending(t: &mut Ticket<ManualClock>, w: &Waker) {
    assert!(t.poll_grant(w).is_pending(), "expected pending");
}

/// 0.1 CPU: 100 ms of CPU per second, burst 100 ms, drained by one 100 ms grant.
fn drained() -> (ManualClock, WorkQueue<ManualClock>, Grant) {
    let clock = ManualClock::new();
    let q = WorkQueue::new(clock.clone(), 100 * MS);
    let g = granted(q.admit(ms(100)));
    assert_eq!(q.snapshot().balance_nanos, 0);
    (clock, q, g)
}

#[test]
fn fast_path_when_nobody_waits() {
    let clock = ManualClock::new();
    let q = WorkQueue::new(clock, 1_000 * MS);
    let g = granted(q.admit(ms(50)));
    assert_eq!(g.allotted(), ms(50));
    assert_eq!(g.allotted_nanos(), 50 * MS);
    let s = q.snapshot();
    assert_eq!(
        s,
        QueueSnapshot {
            rate_nanos_per_sec: 1_000 * MS,
            balance_nanos: 950 * MS as i64,
            grants: 1,
            acquired_nanos: 50 * MS,
            holders: 1,
            ..QueueSnapshot::default()
        }
    );
    assert!(!q.tick(), "nobody waited");
    assert_eq!(q.rate(), 1_000 * MS);
}

#[test]
fn slice_is_clamped() {
    let q = WorkQueue::new(ManualClock::new(), 1_000 * MS);
    assert_eq!(granted(q.admit(Duration::ZERO)).allotted(), MIN_SLICE);
    assert_eq!(granted(q.admit(ms(1))).allotted(), ms(10));
    assert_eq!(granted(q.admit(ms(20))).allotted(), ms(20));
    assert_eq!(
        granted(q.admit(Duration::from_secs(1))).allotted(),
        MAX_SLICE
    );
    assert_eq!(granted(q.admit(Duration::MAX)).allotted(), ms(100));
}

#[test]
fn waiters_are_granted_in_fifo_order_on_ticks() {
    let (clock, q, _g) = drained();
    let (ca, wa) = waker();
    let (cb, wb) = waker();
    let (cc, wc) = waker();
    let mut a = queued(q.admit(ms(100)));
    let mut b = queued(q.admit(ms(20)));
    let mut c = queued(q.admit(ms(10)));
    pending(&mut c, &wc);
    pending(&mut b, &wb);
    pending(&mut a, &wa);
    assert_eq!(q.snapshot().waiters, 3);

    // No tokens: a tick grants nothing.
    assert!(q.tick());
    assert_eq!(wakes(&ca) + wakes(&cb) + wakes(&cc), 0);

    // 10 ms of wall time = 1 ms of tokens > 0: the head gets its whole 100 ms, into debt.
    clock.advance(ms(10));
    // Tokens refilled, but others wait: a newcomer queues behind them, no fast path.
    let mut d = queued(q.admit(ms(10)));
    assert!(q.tick());
    assert_eq!((wakes(&ca), wakes(&cb), wakes(&cc)), (1, 0, 0));
    assert_eq!(q.snapshot().balance_nanos, -99 * MS as i64);
    assert_eq!(ready(&mut a, &wa).allotted(), ms(100));
    pending(&mut b, &wb);

    // 990 ms pays the debt back to exactly 0: still not > 0, no grant.
    clock.advance(ms(990));
    assert!(q.tick());
    assert_eq!(wakes(&cb), 0);
    // 10 ns more is one token: b, 20 ms.
    clock.advance(Duration::from_nanos(10));
    assert!(q.tick());
    assert_eq!((wakes(&cb), wakes(&cc)), (1, 0));
    assert_eq!(ready(&mut b, &wb).allotted(), ms(20));
    // 300 ms = 30 ms of tokens: c (10 ms) leaves 1 ns > 0, so d is granted in the same pass.
    clock.advance(ms(300));
    assert!(q.tick());
    assert_eq!(wakes(&cc), 1);
    assert_eq!(ready(&mut c, &wc).allotted(), ms(10));
    // d never registered a waker: granted all the same, collected on its first poll.
    assert_eq!(ready(&mut d, &wc).allotted(), ms(10));
    let s = q.snapshot();
    assert_eq!((s.grants, s.waits, s.waiters), (5, 4, 0));
    assert_eq!(s.acquired_nanos, 240 * MS);
}

#[test]
fn returned_tokens_grant_waiters_at_once() {
    let (_clock, q, g) = drained();
    let (ca, wa) = waker();
    let (cb, wb) = waker();
    let mut a = queued(q.admit(ms(50)));
    let mut b = queued(q.admit(ms(50)));
    pending(&mut a, &wa);
    pending(&mut b, &wb);
    // 100 ms allotted, 40 used: 60 come back; a (50) is granted, 10 left > 0 so b too (-40).
    q.done(g, ms(40));
    assert_eq!((wakes(&ca), wakes(&cb)), (1, 1));
    let s = q.snapshot();
    assert_eq!(s.balance_nanos, -40 * MS as i64);
    assert_eq!(s.returned_nanos, 60 * MS);
    assert_eq!(s.used_nanos, 40 * MS);
    let ga = ready(&mut a, &wa);
    let gb = ready(&mut b, &wb);
    q.done(ga, ms(50));
    q.done(gb, ms(50));
    let s = q.snapshot();
    assert_eq!(
        s.acquired_nanos - s.returned_nanos + s.over_limit_nanos,
        s.used_nanos
    );
}

#[test]
fn set_rate_grants_waiters() {
    let (_clock, q, _g) = drained();
    let (ca, wa) = waker();
    let mut a = queued(q.admit(ms(10)));
    pending(&mut a, &wa);
    q.set_rate(200 * MS); // burst +100 ms
    assert_eq!(wakes(&ca), 1);
    assert_eq!(q.snapshot().balance_nanos, 90 * MS as i64);
    assert_eq!(q.rate(), 200 * MS);
    let _ = ready(&mut a, &wa);
}

#[test]
fn done_with_undershoot_returns_and_overshoot_charges() {
    let clock = ManualClock::new();
    let q = WorkQueue::new(clock, 100 * MS);
    let g = granted(q.admit(ms(10)));
    q.done(g, ms(10)); // exact: nothing either way
    let s = q.snapshot();
    assert_eq!(s.balance_nanos, 90 * MS as i64);
    assert_eq!((s.returned_nanos, s.over_limit_nanos), (0, 0));

    let g = granted(q.admit(ms(50)));
    q.done(g, ms(20));
    let s = q.snapshot();
    assert_eq!(
        (s.balance_nanos, s.returned_nanos),
        (70 * MS as i64, 30 * MS)
    );

    let g = granted(q.admit(ms(50)));
    q.done(g, ms(75));
    let s = q.snapshot();
    assert_eq!(
        (s.balance_nanos, s.over_limit_nanos),
        (-5 * MS as i64, 25 * MS)
    );
    assert_eq!(s.used_nanos, 105 * MS);
    assert_eq!(s.acquired_nanos, 110 * MS);
    assert_eq!(
        s.acquired_nanos - s.returned_nanos + s.over_limit_nanos,
        s.used_nanos
    );
    // Returns never push the balance past the burst.
    let q = WorkQueue::new(ManualClock::new(), 100 * MS);
    let g = granted(q.admit(ms(10)));
    q.set_rate(50 * MS);
    q.done(g, Duration::ZERO);
    assert_eq!(q.snapshot().balance_nanos, 50 * MS as i64);
}

#[test]
fn ticket_dropped_while_waiting_leaves_the_queue() {
    let (clock, q, _g) = drained();
    let (ca, wa) = waker();
    let (cb, wb) = waker();
    let mut a = queued(q.admit(ms(10)));
    let mut b = queued(q.admit(ms(10)));
    pending(&mut a, &wa);
    pending(&mut b, &wb);
    clock.advance(ms(5));
    drop(a);
    let s = q.snapshot();
    assert_eq!((s.waiters, s.waits, s.wait_nanos), (1, 1, 5 * MS));
    clock.advance(ms(5));
    assert!(q.tick());
    assert_eq!((wakes(&ca), wakes(&cb)), (0, 1));
    let _ = ready(&mut b, &wb);
    let s = q.snapshot();
    assert_eq!(
        (s.grants, s.acquired_nanos, s.returned_nanos),
        (2, 110 * MS, 0)
    );
    assert_eq!((s.waits, s.wait_nanos), (2, 15 * MS));
}

#[test]
fn ticket_dropped_after_grant_gives_the_slice_back() {
    let (clock, q, _g) = drained();
    let (_ca, wa) = waker();
    let (cb, wb) = waker();
    let mut a = queued(q.admit(ms(100)));
    let mut b = queued(q.admit(ms(30)));
    pending(&mut a, &wa);
    pending(&mut b, &wb);
    clock.advance(ms(10)); // +1 ms
    assert!(q.tick());
    assert_eq!(q.snapshot().balance_nanos, -99 * MS as i64);
    // a was granted but never collected: cancelling returns its whole slice, which grants b.
    drop(a);
    assert_eq!(wakes(&cb), 1);
    let s = q.snapshot();
    assert_eq!(s.balance_nanos, -29 * MS as i64);
    assert_eq!(s.returned_nanos, 100 * MS);
    let gb = ready(&mut b, &wb);
    q.done(gb, ms(30));
    let s = q.snapshot();
    // The first grant is still out (100 ms); everything else is settled.
    assert_eq!(
        s.acquired_nanos - s.returned_nanos + s.over_limit_nanos,
        s.used_nanos + 100 * MS
    );
}

#[test]
fn collected_ticket_drop_is_a_no_op() {
    let (clock, q, _g) = drained();
    let (_c, w) = waker();
    let mut a = queued(q.admit(ms(10)));
    clock.advance(ms(1));
    q.tick();
    let g = ready(&mut a, &w);
    assert!(a.is_spent());
    // A spent ticket reports Closed rather than a second grant.
    assert_eq!(a.poll_grant(&w), Poll::Ready(Err(Closed)));
    drop(a);
    assert_eq!(q.snapshot().returned_nanos, 0);
    q.done(g, ms(10));
}

#[test]
fn close_wakes_and_fails_waiters() {
    let (clock, q, g) = drained();
    let (ca, wa) = waker();
    let (cb, wb) = waker();
    let mut a = queued(q.admit(ms(10)));
    let mut b = queued(q.admit(ms(10)));
    pending(&mut a, &wa);
    pending(&mut b, &wb);
    clock.advance(ms(1));
    q.tick(); // a granted before the close: still collectable after it
    clock.advance(ms(3));
    q.close();
    assert!(q.is_closed());
    assert_eq!((wakes(&ca), wakes(&cb)), (1, 1));
    assert_eq!(b.poll_grant(&wb), Poll::Ready(Err(Closed)));
    let ga = ready(&mut a, &wa);
    // Admissions after close fail at once, even with tokens.
    clock.advance(Duration::from_secs(10));
    let mut c = queued(q.admit(ms(10)));
    assert_eq!(c.poll_grant(&wb), Poll::Ready(Err(Closed)));
    // Grants out before the close still settle.
    q.done(g, ms(100));
    q.done(ga, ms(10));
    let s = q.snapshot();
    assert!(s.closed);
    assert_eq!(s.waiters, 0);
    assert_eq!((s.waits, s.wait_nanos), (2, MS + 4 * MS));
    assert_eq!(
        s.acquired_nanos - s.returned_nanos + s.over_limit_nanos,
        s.used_nanos
    );
    assert!(!q.tick());
    assert_eq!(Closed.to_string(), "elastic CPU governor has shut down");
}

#[test]
fn waker_is_replaced_only_when_it_changes() {
    let (clock, q, _g) = drained();
    let (c1, w1) = waker();
    let (c2, w2) = waker();
    let mut a = queued(q.admit(ms(10)));
    pending(&mut a, &w1);
    pending(&mut a, &w1.clone()); // same task: kept
    pending(&mut a, &w2); // moved to another task: replaced
    clock.advance(ms(1));
    q.tick();
    assert_eq!((wakes(&c1), wakes(&c2)), (0, 1));
    let _ = ready(&mut a, &w2);
}

#[test]
fn tick_reports_waiting_since_the_last_tick() {
    let (_clock, q, g) = drained();
    assert!(!q.tick());
    let (_c, w) = waker();
    let mut a = queued(q.admit(ms(10)));
    pending(&mut a, &w);
    q.done(g, ms(50)); // a is granted between ticks
    let _ = ready(&mut a, &w);
    assert_eq!(q.snapshot().waiters, 0);
    assert!(q.tick(), "the waiter came and went between ticks");
    assert!(!q.tick(), "cleared by the tick");
}

#[test]
fn wait_time_is_measured_by_the_queue_clock() {
    let (clock, q, _g) = drained();
    let (_c, w) = waker();
    let mut a = queued(q.admit(ms(10)));
    pending(&mut a, &w);
    clock.advance(ms(250)); // 25 ms of tokens
    q.tick();
    let _ = ready(&mut a, &w);
    let s = q.snapshot();
    assert_eq!((s.waits, s.wait_nanos), (1, 250 * MS));
    assert_eq!(s.balance_nanos, 15 * MS as i64);
}

#[test]
fn queue_is_shareable() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<WorkQueue<ManualClock>>();
    assert_send_sync::<Ticket<ManualClock>>();
    assert_send_sync::<Grant>();
    let q = WorkQueue::new(ManualClock::new(), 1_000 * MS);
    let q2 = q.clone();
    let g = granted(q2.admit(ms(10)));
    q.done(g, ms(10));
    assert_eq!(q.snapshot().used_nanos, 10 * MS);
    assert!(format!("{q:?}").contains("WorkQueue"));
}

// ---- pause / resume (the backlog brake) ----

#[test]
fn paused_queue_queues_admissions_even_with_tokens() {
    let clock = ManualClock::new();
    let q = WorkQueue::new(clock.clone(), 1_000 * MS); // a full second of tokens
    assert!(!q.snapshot().paused);
    q.pause();
    q.pause(); // already paused: not a second pause
    assert!(q.snapshot().paused);
    let (ca, wa) = waker();
    let (cb, wb) = waker();
    let mut a = queued(q.admit(ms(10)));
    let mut b = queued(q.admit(ms(20)));
    pending(&mut a, &wa);
    pending(&mut b, &wb);
    let s = q.snapshot();
    assert_eq!(
        s,
        QueueSnapshot {
            rate_nanos_per_sec: 1_000 * MS,
            balance_nanos: 1_000 * MS as i64,
            waiters: 2,
            paused: true,
            pauses: 1,
            ..QueueSnapshot::default()
        }
    );

    // Ticks grant nothing while paused, full bucket or not, and report the waiting.
    assert!(q.tick());
    clock.advance(Duration::from_secs(1));
    assert!(q.tick());
    // Neither does a rate change.
    q.set_rate(2_000 * MS);
    assert_eq!((wakes(&ca), wakes(&cb)), (0, 0));
    pending(&mut a, &wa);
    pending(&mut b, &wb);
    let s = q.snapshot();
    assert_eq!((s.grants, s.acquired_nanos, s.waiters), (0, 0, 2));
    assert_eq!(s.balance_nanos, 2_000 * MS as i64);

    // Resume grants both, in order, and wakes each once.
    q.resume();
    assert!(!q.snapshot().paused);
    assert_eq!((wakes(&ca), wakes(&cb)), (1, 1));
    let ga = ready(&mut a, &wa);
    let gb = ready(&mut b, &wb);
    assert_eq!((ga.allotted(), gb.allotted()), (ms(10), ms(20)));
    let s = q.snapshot();
    assert!(!s.paused);
    assert_eq!(s.pauses, 1, "resume does not count a pause");
    assert_eq!((s.grants, s.waits, s.wait_nanos), (2, 2, 2_000 * MS));
    assert_eq!(s.balance_nanos, 1_970 * MS as i64);

    // Not paused: the fast path is back.
    let gc = granted(q.admit(ms(10)));
    // A second pause counts.
    q.pause();
    q.resume();
    assert_eq!(q.snapshot().pauses, 2);
    q.done(ga, ms(10));
    q.done(gb, ms(5));
    q.done(gc, ms(12));
    let s = q.snapshot();
    assert_eq!(
        s.acquired_nanos - s.returned_nanos + s.over_limit_nanos,
        s.used_nanos
    );
}

#[test]
fn done_while_paused_refunds_the_bucket_but_grants_nothing() {
    let (clock, q, g) = drained();
    let g2 = {
        // A second grant out before the pause, from a refill.
        clock.advance(ms(100)); // +10 ms
        granted(q.admit(ms(10)))
    };
    assert_eq!(q.snapshot().balance_nanos, 0);
    q.pause();
    let (ca, wa) = waker();
    let mut a = queued(q.admit(ms(50)));
    pending(&mut a, &wa);

    // 100 allotted, 40 used: 60 come back to the bucket, and stay there.
    q.done(g, ms(40));
    assert_eq!(wakes(&ca), 0);
    pending(&mut a, &wa);
    let s = q.snapshot();
    assert_eq!((s.returned_nanos, s.used_nanos), (60 * MS, 40 * MS));
    assert_eq!(
        (s.balance_nanos, s.waiters, s.grants),
        (60 * MS as i64, 1, 2)
    );

    // An overrun while paused is still charged (and grants nothing either).
    q.done(g2, ms(15));
    let s = q.snapshot();
    assert_eq!(
        (s.over_limit_nanos, s.balance_nanos),
        (5 * MS, 55 * MS as i64)
    );
    assert_eq!(wakes(&ca), 0);

    // Resume: the refund grants the waiter.
    clock.advance(ms(2));
    q.resume();
    assert_eq!(wakes(&ca), 1);
    let ga = ready(&mut a, &wa);
    let s = q.snapshot();
    assert_eq!(
        s.balance_nanos,
        (55 * MS as i64) + (200_000) - 50 * MS as i64
    );
    assert_eq!((s.waits, s.wait_nanos), (1, 2 * MS));
    q.done(ga, ms(50));
    let s = q.snapshot();
    assert_eq!(
        s.acquired_nanos - s.returned_nanos + s.over_limit_nanos,
        s.used_nanos
    );
}

#[test]
fn ticket_cancelled_while_paused_refunds_but_grants_nothing() {
    let (clock, q, _g) = drained();
    let (_ca, wa) = waker();
    let (cb, wb) = waker();
    let mut a = queued(q.admit(ms(30)));
    let mut b = queued(q.admit(ms(30)));
    pending(&mut a, &wa);
    pending(&mut b, &wb);
    clock.advance(ms(10)); // +1 ms: a is granted (-29 ms), not collected
    q.tick();
    q.pause();
    // a's uncollected grant goes back to the bucket (+1 ms): b stays queued while paused.
    drop(a);
    let s = q.snapshot();
    assert_eq!((s.returned_nanos, s.balance_nanos), (30 * MS, MS as i64));
    assert_eq!((s.waiters, wakes(&cb)), (1, 0));
    q.resume();
    assert_eq!(wakes(&cb), 1);
    let gb = ready(&mut b, &wb);
    q.done(gb, ms(30));
    let s = q.snapshot();
    // The first (drained) grant is still out.
    assert_eq!(
        s.acquired_nanos - s.returned_nanos + s.over_limit_nanos,
        s.used_nanos + 100 * MS
    );
}

#[test]
fn resume_grants_fifo_as_the_balance_allows_and_no_more() {
    let (clock, q, _g) = drained();
    q.pause();
    let (ca, wa) = waker();
    let (cb, wb) = waker();
    let (cc, wc) = waker();
    let mut a = queued(q.admit(ms(100)));
    let mut b = queued(q.admit(ms(20)));
    let mut c = queued(q.admit(ms(10)));
    pending(&mut a, &wa);
    pending(&mut b, &wb);
    pending(&mut c, &wc);

    // Balance exactly 0: resuming grants nothing.
    q.resume();
    assert_eq!(wakes(&ca) + wakes(&cb) + wakes(&cc), 0);
    assert_eq!(q.snapshot().waiters, 3);

    // Paused again for 10 ms: 1 ms of tokens, held back on the tick.
    q.pause();
    clock.advance(ms(10));
    assert!(q.tick());
    assert_eq!(wakes(&ca), 0);
    // Resume: 1 ms > 0 grants the head its whole slice, into debt; b and c wait.
    q.resume();
    assert_eq!((wakes(&ca), wakes(&cb), wakes(&cc)), (1, 0, 0));
    assert_eq!(q.snapshot().balance_nanos, -99 * MS as i64);
    let ga = ready(&mut a, &wa);
    pending(&mut b, &wb);

    // A long pause refills no more than the burst (100 ms): on resume b (20) and c (10) fit,
    // and a newcomer queued behind them while paused (80) takes the rest, to exactly -10 ms.
    q.pause();
    clock.advance(Duration::from_secs(10));
    let (cd, wd) = waker();
    let (ce, we) = waker();
    let mut d = queued(q.admit(ms(80)));
    let mut e = queued(q.admit(ms(10)));
    pending(&mut d, &wd);
    pending(&mut e, &we);
    assert!(q.tick());
    assert_eq!(q.snapshot().balance_nanos, 100 * MS as i64);
    q.resume();
    assert_eq!(
        (wakes(&cb), wakes(&cc), wakes(&cd), wakes(&ce)),
        (1, 1, 1, 0),
        "granted in order while the balance is positive, then no more"
    );
    let s = q.snapshot();
    assert_eq!((s.balance_nanos, s.waiters), (-10 * MS as i64, 1));
    assert_eq!(s.pauses, 3);
    let gb = ready(&mut b, &wb);
    let gc = ready(&mut c, &wc);
    let gd = ready(&mut d, &wd);
    pending(&mut e, &we);
    for g in [ga, gb, gc, gd] {
        let allotted = g.allotted();
        q.done(g, allotted);
    }
    drop(e);
    let s = q.snapshot();
    // Only the drained grant is still out.
    assert_eq!(
        s.acquired_nanos - s.returned_nanos + s.over_limit_nanos,
        s.used_nanos + 100 * MS
    );
}

#[test]
fn close_while_paused_fails_the_waiters() {
    let (clock, q, g) = drained();
    q.pause();
    let (ca, wa) = waker();
    let (cb, wb) = waker();
    let mut a = queued(q.admit(ms(10)));
    let mut b = queued(q.admit(ms(10)));
    pending(&mut a, &wa);
    pending(&mut b, &wb);
    clock.advance(ms(3));
    q.close();
    assert_eq!((wakes(&ca), wakes(&cb)), (1, 1));
    assert_eq!(a.poll_grant(&wa), Poll::Ready(Err(Closed)));
    assert_eq!(b.poll_grant(&wb), Poll::Ready(Err(Closed)));
    let s = q.snapshot();
    assert!(s.closed && s.paused);
    assert_eq!((s.waiters, s.waits, s.wait_nanos), (0, 2, 6 * MS));
    // Resuming a closed queue grants nothing and admissions still fail.
    q.resume();
    let mut c = queued(q.admit(ms(10)));
    assert_eq!(c.poll_grant(&wa), Poll::Ready(Err(Closed)));
    q.done(g, ms(100));
    let s = q.snapshot();
    assert_eq!((s.grants, s.acquired_nanos), (1, 100 * MS));
    assert_eq!(
        s.acquired_nanos - s.returned_nanos + s.over_limit_nanos,
        s.used_nanos
    );
}

#[test]
fn holder_cap_queues_admissions_beyond_it_even_with_tokens() {
    let q = WorkQueue::new(ManualClock::new(), 4_000 * MS); // 4 CPUs' worth
    q.set_max_holders(Some(2));
    let a = granted(q.admit(ms(10)));
    let b = granted(q.admit(ms(10)));
    let mut c = queued(q.admit(ms(10)));
    let (woken, w) = waker();
    pending(&mut c, &w);
    assert_eq!(q.snapshot().holders, 2);
    assert!(q.tick(), "c waits");
    pending(&mut c, &w);
    // A settle frees a place: the next in line is granted and woken.
    q.done(a, ms(10));
    assert_eq!(wakes(&woken), 1);
    let c = ready(&mut c, &w);
    assert_eq!(q.snapshot().holders, 2);
    q.done(b, ms(10));
    q.done(c, ms(10));
    let s = q.snapshot();
    assert_eq!(s.holders, 0);
    assert_eq!(
        s.acquired_nanos - s.returned_nanos + s.over_limit_nanos,
        s.used_nanos
    );
}

#[test]
fn raising_the_holder_cap_grants_waiters_at_once() {
    let q = WorkQueue::new(ManualClock::new(), 4_000 * MS);
    q.set_max_holders(Some(1));
    let a = granted(q.admit(ms(10)));
    let mut b = queued(q.admit(ms(10)));
    let (woken, w) = waker();
    pending(&mut b, &w);
    q.set_max_holders(Some(2));
    assert_eq!(wakes(&woken), 1);
    let b = ready(&mut b, &w);
    // No cap at all (None) and a zero cap (treated as 1) are both accepted.
    q.set_max_holders(None);
    q.set_max_holders(Some(0));
    q.done(a, ms(10));
    q.done(b, ms(10));
    assert_eq!(q.snapshot().holders, 0);
}

#[test]
fn an_uncollected_grant_holds_a_place_until_its_ticket_drops() {
    let q = WorkQueue::new(ManualClock::new(), 4_000 * MS);
    q.set_max_holders(Some(1));
    let a = granted(q.admit(ms(10)));
    let mut b = queued(q.admit(ms(10)));
    let mut c = queued(q.admit(ms(10)));
    let (_woken, w) = waker();
    pending(&mut b, &w);
    pending(&mut c, &w);
    q.done(a, ms(10)); // b is granted but never collects it
    assert_eq!(q.snapshot().holders, 1);
    pending(&mut c, &w);
    drop(b); // its grant goes back, and its place to c
    let c = ready(&mut c, &w);
    q.done(c, ms(10));
    let s = q.snapshot();
    assert_eq!(s.holders, 0);
    assert_eq!(
        s.acquired_nanos - s.returned_nanos + s.over_limit_nanos,
        s.used_nanos
    );
}

/// The starvation bound: however deep a holder overran, the head of the queue is granted within
/// one second of refill plus one tick (debt is capped at one burst), and the snapshot shows how
/// long it has waited and the longest wait so far.
#[test]
fn the_head_waits_at_most_one_second_of_refill_plus_a_tick_after_any_overrun() {
    let clock = ManualClock::new();
    let q = WorkQueue::new(clock.clone(), 100 * MS); // 0.05 of 2 CPUs: the default floor
    let g = granted(q.admit(ms(100)));
    // The holder ran 10 s past its 100 ms grant (one poll that never yielded).
    clock.advance(Duration::from_secs(10));
    q.done(g, Duration::from_millis(10_100));
    let s = q.snapshot();
    assert_eq!(s.balance_nanos, -100 * MS as i64, "debt stops at one burst");
    assert_eq!(
        s.over_limit_nanos,
        10_000 * MS,
        "the ledger still charges it all"
    );
    // The 10 s refilled the bucket (100 ms): 100 − 10 000 = −9 900 ms, capped at −100.
    assert_eq!(s.debt_forgiven_nanos, 9_800 * MS);
    let Admit::Queued(mut t) = q.admit(ms(100)) else {
        panic!("queued")
    };
    let (_c, w) = waker();
    let mut ticks = 0;
    loop {
        assert!(t.poll_grant(&w).is_pending());
        clock.advance(ms(100));
        ticks += 1;
        assert_eq!(q.snapshot().head_wait_nanos, ticks * 100 * MS);
        q.tick();
        if let Poll::Ready(r) = t.poll_grant(&w) {
            q.done(r.unwrap(), ms(100));
            break;
        }
        assert!(ticks < 11, "still waiting after {ticks} ticks");
    }
    // One second pays the debt back to zero; the next tick finds a positive balance.
    assert_eq!(ticks, 11);
    let s = q.snapshot();
    assert_eq!(s.longest_wait_nanos, 1_100 * MS);
    assert_eq!(s.head_wait_nanos, 0);
}
