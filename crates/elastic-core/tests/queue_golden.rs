//! Work queue scenarios from docs/design.md §4 on a manual clock, with counting wakers.

mod common;

use common::{assert_ledger, drained, granted, pending, queued, ready, waker, wakes, Waiting};
use elastic_cpu_core::{
    Admit, Closed, Grant, ManualClock, QueueSnapshot, Ticket, WorkQueue, MAX_SLICE, MIN_SLICE,
};
use std::task::Poll;
use std::time::Duration;

const MS: u64 = 1_000_000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn wait(q: &WorkQueue<ManualClock>, slice: u64) -> Waiting<ManualClock> {
    Waiting::admit(q, ms(slice))
}

/// Admissions of these slices (ms), in order, each queued and waiting.
fn waits<const N: usize>(
    q: &WorkQueue<ManualClock>,
    slices: [u64; N],
) -> [Waiting<ManualClock>; N] {
    slices.map(|slice| wait(q, slice))
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
    let [mut a, mut b, mut c] = waits(&q, [100, 20, 10]);
    assert_eq!(q.snapshot().waiters, 3);

    // No tokens: a tick grants nothing.
    assert!(q.tick());
    assert_eq!(a.wakes() + b.wakes() + c.wakes(), 0);

    // 10 ms of wall time = 1 ms of tokens > 0: the head gets its whole 100 ms, into debt.
    clock.advance(ms(10));
    // Tokens refilled, but others wait: a newcomer queues behind them, no fast path.
    let mut d = queued(q.admit(ms(10)));
    assert!(q.tick());
    assert_eq!((a.wakes(), b.wakes(), c.wakes()), (1, 0, 0));
    assert_eq!(q.snapshot().balance_nanos, -99 * MS as i64);
    assert_eq!(a.ready().allotted(), ms(100));
    b.pending();

    // 990 ms pays the debt back to exactly 0: still not > 0, no grant.
    clock.advance(ms(990));
    assert!(q.tick());
    assert_eq!(b.wakes(), 0);
    // 10 ns more is one token: b, 20 ms.
    clock.advance(Duration::from_nanos(10));
    assert!(q.tick());
    assert_eq!((b.wakes(), c.wakes()), (1, 0));
    assert_eq!(b.ready().allotted(), ms(20));
    // 300 ms = 30 ms of tokens: c (10 ms) leaves 1 ns > 0, so d is granted in the same pass.
    clock.advance(ms(300));
    assert!(q.tick());
    assert_eq!(c.wakes(), 1);
    assert_eq!(c.ready().allotted(), ms(10));
    // d never registered a waker: granted all the same, collected on its first poll.
    assert_eq!(ready(&mut d, &c.waker).allotted(), ms(10));
    let s = q.snapshot();
    assert_eq!((s.grants, s.waits, s.waiters), (5, 4, 0));
    assert_eq!(s.acquired_nanos, 240 * MS);
}

#[test]
fn returned_tokens_grant_waiters_at_once() {
    let (_clock, q, g) = drained();
    let [mut a, mut b] = waits(&q, [50, 50]);
    // 100 ms allotted, 40 used: 60 come back; a (50) is granted, 10 left > 0 so b too (-40).
    q.done(g, ms(40));
    assert_eq!((a.wakes(), b.wakes()), (1, 1));
    let s = q.snapshot();
    assert_eq!(s.balance_nanos, -40 * MS as i64);
    assert_eq!(s.returned_nanos, 60 * MS);
    assert_eq!(s.used_nanos, 40 * MS);
    q.done(a.ready(), ms(50));
    q.done(b.ready(), ms(50));
    assert_ledger(&q.snapshot(), 0);
}

#[test]
fn set_rate_grants_waiters() {
    let (_clock, q, _g) = drained();
    let mut a = wait(&q, 10);
    q.set_rate(200 * MS); // burst +100 ms
    assert_eq!(a.wakes(), 1);
    assert_eq!(q.snapshot().balance_nanos, 90 * MS as i64);
    assert_eq!(q.rate(), 200 * MS);
    let _ = a.ready();
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
    assert_ledger(&s, 0);
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
    let [a, mut b] = waits(&q, [10, 10]);
    clock.advance(ms(5));
    let a_woken = a.woken.clone();
    drop(a);
    let s = q.snapshot();
    assert_eq!((s.waiters, s.waits, s.wait_nanos), (1, 1, 5 * MS));
    clock.advance(ms(5));
    assert!(q.tick());
    assert_eq!((wakes(&a_woken), b.wakes()), (0, 1));
    let _ = b.ready();
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
    let [a, mut b] = waits(&q, [100, 30]);
    clock.advance(ms(10)); // +1 ms
    assert!(q.tick());
    assert_eq!(q.snapshot().balance_nanos, -99 * MS as i64);
    // a was granted but never collected: cancelling returns its whole slice, which grants b.
    drop(a);
    assert_eq!(b.wakes(), 1);
    let s = q.snapshot();
    assert_eq!(s.balance_nanos, -29 * MS as i64);
    assert_eq!(s.returned_nanos, 100 * MS);
    q.done(b.ready(), ms(30));
    // The first grant is still out (100 ms); everything else is settled.
    assert_ledger(&q.snapshot(), 100 * MS);
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
    let [mut a, mut b] = waits(&q, [10, 10]);
    clock.advance(ms(1));
    q.tick(); // a granted before the close: still collectable after it
    clock.advance(ms(3));
    q.close();
    assert!(q.is_closed());
    assert_eq!((a.wakes(), b.wakes()), (1, 1));
    assert_eq!(b.ticket.poll_grant(&b.waker), Poll::Ready(Err(Closed)));
    let ga = a.ready();
    // Admissions after close fail at once, even with tokens.
    clock.advance(Duration::from_secs(10));
    let mut c = queued(q.admit(ms(10)));
    assert_eq!(c.poll_grant(&b.waker), Poll::Ready(Err(Closed)));
    // Grants out before the close still settle.
    q.done(g, ms(100));
    q.done(ga, ms(10));
    let s = q.snapshot();
    assert!(s.closed);
    assert_eq!(s.waiters, 0);
    assert_eq!((s.waits, s.wait_nanos), (2, MS + 4 * MS));
    assert_ledger(&s, 0);
    assert!(!q.tick());
    assert_eq!(Closed.to_string(), "elastic CPU governor has shut down");
}

#[test]
fn waker_is_replaced_only_when_it_changes() {
    let (clock, q, _g) = drained();
    let mut a = wait(&q, 10);
    let (c2, w2) = waker();
    pending(&mut a.ticket, &a.waker.clone()); // same task: kept
    pending(&mut a.ticket, &w2); // moved to another task: replaced
    clock.advance(ms(1));
    q.tick();
    assert_eq!((a.wakes(), wakes(&c2)), (0, 1));
    let _ = ready(&mut a.ticket, &w2);
}

#[test]
fn tick_reports_waiting_since_the_last_tick() {
    let (_clock, q, g) = drained();
    assert!(!q.tick());
    let mut a = wait(&q, 10);
    q.done(g, ms(50)); // a is granted between ticks
    let _ = a.ready();
    assert_eq!(q.snapshot().waiters, 0);
    assert!(q.tick(), "the waiter came and went between ticks");
    assert!(!q.tick(), "cleared by the tick");
}

#[test]
fn wait_time_is_measured_by_the_queue_clock() {
    let (clock, q, _g) = drained();
    let mut a = wait(&q, 10);
    clock.advance(ms(250)); // 25 ms of tokens
    q.tick();
    let _ = a.ready();
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
    let [mut a, mut b] = waits(&q, [10, 20]);
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
    assert_eq!((a.wakes(), b.wakes()), (0, 0));
    a.pending();
    b.pending();
    let s = q.snapshot();
    assert_eq!((s.grants, s.acquired_nanos, s.waiters), (0, 0, 2));
    assert_eq!(s.balance_nanos, 2_000 * MS as i64);

    // Resume grants both, in order, and wakes each once.
    q.resume();
    assert!(!q.snapshot().paused);
    assert_eq!((a.wakes(), b.wakes()), (1, 1));
    let ga = a.ready();
    let gb = b.ready();
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
    assert_ledger(&q.snapshot(), 0);
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
    let mut a = wait(&q, 50);

    // 100 allotted, 40 used: 60 come back to the bucket, and stay there.
    q.done(g, ms(40));
    assert_eq!(a.wakes(), 0);
    a.pending();
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
    assert_eq!(a.wakes(), 0);

    // Resume: the refund grants the waiter.
    clock.advance(ms(2));
    q.resume();
    assert_eq!(a.wakes(), 1);
    let ga = a.ready();
    let s = q.snapshot();
    assert_eq!(
        s.balance_nanos,
        (55 * MS as i64) + (200_000) - 50 * MS as i64
    );
    assert_eq!((s.waits, s.wait_nanos), (1, 2 * MS));
    q.done(ga, ms(50));
    assert_ledger(&q.snapshot(), 0);
}

#[test]
fn ticket_cancelled_while_paused_refunds_but_grants_nothing() {
    let (clock, q, _g) = drained();
    let [a, mut b] = waits(&q, [30, 30]);
    clock.advance(ms(10)); // +1 ms: a is granted (-29 ms), not collected
    q.tick();
    q.pause();
    // a's uncollected grant goes back to the bucket (+1 ms): b stays queued while paused.
    drop(a);
    let s = q.snapshot();
    assert_eq!((s.returned_nanos, s.balance_nanos), (30 * MS, MS as i64));
    assert_eq!((s.waiters, b.wakes()), (1, 0));
    q.resume();
    assert_eq!(b.wakes(), 1);
    q.done(b.ready(), ms(30));
    // The first (drained) grant is still out.
    assert_ledger(&q.snapshot(), 100 * MS);
}

#[test]
fn resume_grants_fifo_as_the_balance_allows_and_no_more() {
    let (clock, q, _g) = drained();
    q.pause();
    let [mut a, mut b, mut c] = waits(&q, [100, 20, 10]);

    // Balance exactly 0: resuming grants nothing.
    q.resume();
    assert_eq!(a.wakes() + b.wakes() + c.wakes(), 0);
    assert_eq!(q.snapshot().waiters, 3);

    // Paused again for 10 ms: 1 ms of tokens, held back on the tick.
    q.pause();
    clock.advance(ms(10));
    assert!(q.tick());
    assert_eq!(a.wakes(), 0);
    // Resume: 1 ms > 0 grants the head its whole slice, into debt; b and c wait.
    q.resume();
    assert_eq!((a.wakes(), b.wakes(), c.wakes()), (1, 0, 0));
    assert_eq!(q.snapshot().balance_nanos, -99 * MS as i64);
    let ga = a.ready();
    b.pending();

    // A long pause refills no more than the burst (100 ms): on resume b (20) and c (10) fit,
    // and a newcomer queued behind them while paused (80) takes the rest, to exactly -10 ms.
    q.pause();
    clock.advance(Duration::from_secs(10));
    let [mut d, mut e] = waits(&q, [80, 10]);
    assert!(q.tick());
    assert_eq!(q.snapshot().balance_nanos, 100 * MS as i64);
    q.resume();
    assert_eq!(
        (b.wakes(), c.wakes(), d.wakes(), e.wakes()),
        (1, 1, 1, 0),
        "granted in order while the balance is positive, then no more"
    );
    let s = q.snapshot();
    assert_eq!((s.balance_nanos, s.waiters), (-10 * MS as i64, 1));
    assert_eq!(s.pauses, 3);
    let gb = b.ready();
    let gc = c.ready();
    let gd = d.ready();
    e.pending();
    for g in [ga, gb, gc, gd] {
        let allotted = g.allotted();
        q.done(g, allotted);
    }
    drop(e);
    // Only the drained grant is still out.
    assert_ledger(&q.snapshot(), 100 * MS);
}

#[test]
fn close_while_paused_fails_the_waiters() {
    let (clock, q, g) = drained();
    q.pause();
    let [mut a, mut b] = waits(&q, [10, 10]);
    clock.advance(ms(3));
    q.close();
    assert_eq!((a.wakes(), b.wakes()), (1, 1));
    assert_eq!(a.ticket.poll_grant(&a.waker), Poll::Ready(Err(Closed)));
    assert_eq!(b.ticket.poll_grant(&b.waker), Poll::Ready(Err(Closed)));
    let s = q.snapshot();
    assert!(s.closed && s.paused);
    assert_eq!((s.waiters, s.waits, s.wait_nanos), (0, 2, 6 * MS));
    // Resuming a closed queue grants nothing and admissions still fail.
    q.resume();
    let mut c = queued(q.admit(ms(10)));
    assert_eq!(c.poll_grant(&a.waker), Poll::Ready(Err(Closed)));
    q.done(g, ms(100));
    let s = q.snapshot();
    assert_eq!((s.grants, s.acquired_nanos), (1, 100 * MS));
    assert_ledger(&s, 0);
}

/// 4 CPUs' worth of tokens, at most `max` grants out at once.
fn capped(max: usize) -> WorkQueue<ManualClock> {
    let q = WorkQueue::new(ManualClock::new(), 4_000 * MS);
    q.set_max_holders(Some(max));
    q
}

/// No grant is out, and the ledger balances.
fn assert_settled(q: &WorkQueue<ManualClock>) {
    let s = q.snapshot();
    assert_eq!(s.holders, 0);
    assert_ledger(&s, 0);
}

#[test]
fn holder_cap_queues_admissions_beyond_it_even_with_tokens() {
    let q = capped(2);
    let a = granted(q.admit(ms(10)));
    let b = granted(q.admit(ms(10)));
    let mut c = wait(&q, 10);
    assert_eq!(q.snapshot().holders, 2);
    assert!(q.tick(), "c waits");
    c.pending();
    // A settle frees a place: the next in line is granted and woken.
    q.done(a, ms(10));
    assert_eq!(c.wakes(), 1);
    let c = c.ready();
    assert_eq!(q.snapshot().holders, 2);
    q.done(b, ms(10));
    q.done(c, ms(10));
    assert_settled(&q);
}

#[test]
fn raising_the_holder_cap_grants_waiters_at_once() {
    let q = capped(1);
    let a = granted(q.admit(ms(10)));
    let mut b = wait(&q, 10);
    q.set_max_holders(Some(2));
    assert_eq!(b.wakes(), 1);
    let b = b.ready();
    // No cap at all (None) and a zero cap (treated as 1) are both accepted.
    q.set_max_holders(None);
    q.set_max_holders(Some(0));
    q.done(a, ms(10));
    q.done(b, ms(10));
    assert_eq!(q.snapshot().holders, 0);
}

#[test]
fn an_uncollected_grant_holds_a_place_until_its_ticket_drops() {
    let q = capped(1);
    let a = granted(q.admit(ms(10)));
    let [b, mut c] = waits(&q, [10, 10]);
    q.done(a, ms(10)); // b is granted but never collects it
    assert_eq!(q.snapshot().holders, 1);
    c.pending();
    drop(b); // its grant goes back, and its place to c
    let c = c.ready();
    q.done(c, ms(10));
    assert_settled(&q);
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
