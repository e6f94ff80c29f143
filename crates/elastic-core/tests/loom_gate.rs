//! loom models of the connection gate's races: admission racing expiry, a permit's settle
//! racing a cancel, admission racing close, a setup giving up its place racing a waiter. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p elastic-cpu-core --release --test loom_gate`.
//!
//! Each model starts from a drained bucket on a `ManualClock` that only the model moves, so
//! every token movement comes from the operations under test; and each checks that every
//! attempt ends exactly once and that no token is lost or doubled.
#![cfg(loom)]

mod common;

use common::{after_one_wake, gate, gate_queued, grant_of, waker, wakes, WakeCounter};
use elastic_cpu_core::{
    GateAdmit, GateQueue, GateStats, GateTicket, ManualClock, QueueOrder, RejectKind, SetupGrant,
};
use loom::thread::{self, JoinHandle};
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

const MS: u64 = 1_000_000;

/// 100 ms/s, setups estimated at 100 ms: the one grant returned takes the whole burst.
fn drained(order: QueueOrder) -> (GateQueue<ManualClock>, ManualClock, SetupGrant) {
    let (q, clock) = gate(100 * MS, 4, order, Duration::from_millis(100));
    match q.admit(Duration::from_secs(1), Waker::noop()) {
        GateAdmit::Admitted(g) => (q, clock, g),
        other => panic!("{other:?}"),
    }
}

/// An attempt that may wait 10 s, queued, and polled once (`Pending`) with a counting waker.
fn waiting(q: &GateQueue<ManualClock>) -> (GateTicket<ManualClock>, Arc<WakeCounter>, Waker) {
    let mut t = gate_queued(q.admit(Duration::from_secs(10), Waker::noop()));
    let (count, w) = waker();
    assert!(t.poll(&w).is_pending());
    (t, count, w)
}

/// Settle `g` having used `used`, on another thread.
fn settle_on_a_thread(q: &GateQueue<ManualClock>, g: SetupGrant, used: Duration) -> JoinHandle<()> {
    let q = q.clone();
    thread::spawn(move || q.done(g, used))
}

/// Every attempt ended exactly once, and every token taken is charged or returned.
fn assert_books(s: &GateStats, held_nanos: u64) {
    assert_eq!(
        s.attempts,
        s.admitted + s.rejected + s.expired + s.cancelled + s.queue_len as u64 + s.pending as u64,
        "{s:?}"
    );
    assert_eq!(
        s.acquired_nanos as i128 - s.returned_nanos as i128 + s.over_limit_nanos as i128,
        (s.used_nanos + held_nanos) as i128,
        "{s:?}"
    );
}

/// Nobody waits, no setup runs, and the books balance with nothing held.
fn assert_idle(s: &GateStats) {
    assert_eq!((s.queue_len, s.in_setup), (0, 0), "{s:?}");
    assert_books(s, 0);
}

/// A waiter whose deadline has passed is polled while the governor's tick expires it and a
/// settle returns tokens that could grant it: it ends expired (never granted late), is woken
/// at most once, and if it saw `Pending` it was woken (no lost wake-up).
#[test]
fn expiry_races_with_a_grant_and_a_poll() {
    loom::model(|| {
        let (q, clock, g) = drained(QueueOrder::Lifo);
        let mut t = gate_queued(q.admit(Duration::from_millis(50), Waker::noop()));
        let (count, w) = waker();
        clock.advance(Duration::from_millis(60)); // past its deadline
        let q1 = q.clone();
        let tick = thread::spawn(move || {
            q1.tick();
        });
        let settle = settle_on_a_thread(&q, g, Duration::ZERO);
        let first = t.poll(&w);
        tick.join().unwrap();
        settle.join().unwrap();
        let r = after_one_wake(first, &count, || t.poll(&w));
        assert_eq!(r.unwrap_err().kind, RejectKind::Expired);
        assert!(wakes(&count) <= 1);
        let s = q.snapshot();
        assert_eq!(s.expired, 1);
        assert_idle(&s);
    });
}

/// A new attempt arrives while a settle returns one setup's worth of tokens with one attempt
/// queued (newest first): the tokens go to exactly one of the two, the other waits, and the
/// books balance whichever way it goes.
#[test]
fn admit_races_with_a_settle() {
    loom::model(|| {
        let (q, _clock, g) = drained(QueueOrder::Lifo);
        let (mut a, count_a, wa) = waiting(&q);
        // Give back 1 ms: one grant (balance 1 ms > 0).
        let settle = settle_on_a_thread(&q, g, Duration::from_millis(99));
        let b = q.admit(Duration::from_secs(10), Waker::noop());
        settle.join().unwrap();
        // Before anything else settles: exactly one of them holds the tokens.
        let s = q.snapshot();
        let b_admitted = matches!(b, GateAdmit::Admitted(_));
        assert_eq!(b_admitted as usize + s.pending, 1, "{s:?}");
        // Newest first: if `b` queued before the settle, the grant is `b`'s and `a` waits.
        assert!(wakes(&count_a) <= s.pending, "a woken without a grant");
        let mut b_ticket = match b {
            GateAdmit::Admitted(g) => {
                q.done(g, Duration::ZERO);
                None
            }
            GateAdmit::Queued(t) => Some(t),
            GateAdmit::Rejected(r) => panic!("{r:?}"),
        };
        if let Poll::Ready(Ok(g)) = a.poll(&wa) {
            q.done(g, Duration::ZERO);
        }
        if let Some(t) = &mut b_ticket {
            if let Poll::Ready(Ok(g)) = t.poll(Waker::noop()) {
                q.done(g, Duration::ZERO);
            }
        }
        drop(b_ticket);
        drop(a);
        let s = q.snapshot();
        assert_eq!(s.pending, 0);
        assert_idle(&s);
    });
}

/// A granted ticket is cancelled (its admission future dropped) while a permit settles and
/// the governor ticks: the cancelled grant's tokens come back whole and go to the next waiter
/// at most once.
#[test]
fn cancel_of_a_granted_ticket_races_with_a_settle() {
    loom::model(|| {
        let (q, _clock, g) = drained(QueueOrder::Fifo);
        let a = gate_queued(q.admit(Duration::from_secs(10), Waker::noop()));
        let (mut b, count_b, wb) = waiting(&q);
        let settle = settle_on_a_thread(&q, g, Duration::from_millis(99));
        drop(a);
        settle.join().unwrap();
        assert_eq!(wakes(&count_b), 1, "b woken exactly once");
        let gb = grant_of(b.poll(&wb));
        let s = q.snapshot();
        assert_eq!((s.queue_len, s.cancelled, s.admitted), (0, 1, 2));
        assert_books(&s, gb.allotted().as_nanos() as u64);
        q.done(gb, Duration::ZERO);
        assert_books(&q.snapshot(), 0);
    });
}

/// The governor goes (close) while an attempt is admitted and another polls: nobody hangs:
/// each attempt is refused `Closed` at once or woken with it.
#[test]
fn close_races_with_admit_and_poll() {
    loom::model(|| {
        let (q, _clock, g) = drained(QueueOrder::Lifo);
        let mut a = gate_queued(q.admit(Duration::from_secs(10), Waker::noop()));
        let (count, w) = waker();
        let q2 = q.clone();
        let closer = thread::spawn(move || q2.close());
        let first = a.poll(&w);
        let b = q.admit(Duration::from_secs(10), Waker::noop());
        closer.join().unwrap();
        let ra = after_one_wake(first, &count, || a.poll(&w));
        assert_eq!(ra.unwrap_err().kind, RejectKind::Closed);
        match b {
            GateAdmit::Rejected(r) => assert_eq!(r.kind, RejectKind::Closed),
            GateAdmit::Queued(mut t) => match t.poll(Waker::noop()) {
                Poll::Ready(Err(r)) => assert_eq!(r.kind, RejectKind::Closed),
                other => panic!("{other:?}"),
            },
            GateAdmit::Admitted(_) => panic!("admitted from a drained bucket"),
        }
        q.done(g, Duration::from_millis(100));
        assert_idle(&q.snapshot());
    });
}

/// One setup runs at the cap of one and an attempt waits for its place; the setup gives the
/// place up to wait on its peer (on another thread), resumes over the cap and settles, while
/// the waiter polls: the waiter is granted the freed place exactly once and woken if it saw
/// `Pending`, and the books balance.
#[test]
fn a_setup_waiting_on_its_peer_races_with_a_waiter() {
    loom::model(|| {
        // 100 ms/s, setups estimated at 1 ms: tokens for both; the cap is what holds one back.
        let (q, _clock) = gate(100 * MS, 4, QueueOrder::Lifo, Duration::from_millis(1));
        q.set_max_in_setup(Some(1));
        let GateAdmit::Admitted(mut g) = q.admit(Duration::from_secs(1), Waker::noop()) else {
            panic!("the first setup starts at once")
        };
        let (mut t, count, w) = waiting(&q);
        let q1 = q.clone();
        let setup = thread::spawn(move || {
            q1.wait_on_peer(&mut g);
            q1.resume_setup(&mut g);
            q1.done(g, Duration::from_micros(500));
        });
        let first = t.poll(&w);
        setup.join().unwrap();
        let g = after_one_wake(first, &count, || t.poll(&w)).expect("granted the freed place");
        assert!(wakes(&count) <= 1);
        let s = q.snapshot();
        assert_eq!(
            (s.in_setup, s.waiting_on_peer, s.admitted),
            (1, 0, 2),
            "{s:?}"
        );
        q.done(g, Duration::ZERO);
        drop(t);
        assert_idle(&q.snapshot());
    });
}
