//! Each refusal books the next retry slot: hints grow with the refused crowd, one setup's time
//! apart at the current rate, and run out once refusals stop; on the manual clock, to the
//! nanosecond.

mod common;

use std::task::Waker;
use std::time::Duration;

use common::{gate, gate_queued};
use elastic_cpu_core::{GateAdmit, GateQueue, ManualClock, QueueOrder, RejectKind};

const MS: Duration = Duration::from_millis(1);
const NS: Duration = Duration::from_nanos(1);

/// 100 ms of setup CPU a second; one setup measured at 101 ms leaves the bucket 1 ms in debt.
fn in_debt() -> (GateQueue<ManualClock>, ManualClock) {
    let (q, clock) = gate(100_000_000, 4, QueueOrder::Fifo, MS);
    let GateAdmit::Admitted(g) = q.admit(Duration::from_secs(1), Waker::noop()) else {
        panic!("the full bucket did not admit")
    };
    q.done(g, 101 * MS);
    let s = q.snapshot();
    assert_eq!((s.balance_nanos, s.cost_nanos), (-1_000_000, 101_000_000));
    (q, clock)
}

/// An attempt that cannot wait: refused at once; its hint base.
fn refuse(q: &GateQueue<ManualClock>) -> Duration {
    match q.admit(Duration::ZERO, Waker::noop()) {
        GateAdmit::Rejected(r) => {
            assert_eq!(r.kind, RejectKind::WouldExpire);
            r.retry_base
        }
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn each_refusal_books_the_next_retry_slot() {
    let (q, clock) = in_debt();
    // One setup's time at the current rate: 101 ms of CPU at 100 ms a second.
    let slot = Duration::from_millis(1010);
    // The first could start after its own setup and the 1 ms debt: 1.02 s; each next one a
    // slot later, so the refused crowd comes back one setup's time apart.
    for k in 0..50u32 {
        assert_eq!(refuse(&q), Duration::from_millis(1020) + NS + k * slot);
    }
    let booked = Duration::from_millis(1020) + NS + 50 * slot;
    assert_eq!(q.retry_base(), booked, "peeking books nothing");
    assert_eq!(q.snapshot().crowd, 51);
    // A second later the slots are a second nearer.
    clock.advance(Duration::from_secs(1));
    assert!(!q.tick());
    assert_eq!(q.snapshot().crowd, 50);
    assert_eq!(q.retry_base(), booked - Duration::from_secs(1));
    // Once every slot has passed, the hint is the queue's own again (the bucket is full).
    clock.advance(Duration::from_secs(60));
    assert_eq!(q.snapshot().crowd, 0);
    assert_eq!(q.retry_base(), slot + NS);
}

#[test]
fn a_queue_that_clears_later_goes_first() {
    let (q, _clock) = in_debt();
    let first = refuse(&q);
    // Three wait (the would-expire check lets a 1 h deadline in).
    let tickets: Vec<_> = (0..3)
        .map(|_| gate_queued(q.admit(Duration::from_secs(3600), Waker::noop())))
        .collect();
    // Ready after the three queued and itself: (4 × 101 + 1) ms at 100 ms a second = 4.05 s,
    // later than the one booked slot (1.02 .. 2.03 s).
    assert_eq!(first, Duration::from_millis(1020) + NS);
    assert_eq!(refuse(&q), Duration::from_millis(4050) + NS);
    // The next books after that one.
    assert_eq!(refuse(&q), Duration::from_millis(5060) + NS);
    drop(tickets);
}

#[test]
fn a_closed_gate_books_no_slots() {
    let (q, _clock) = in_debt();
    q.close();
    for _ in 0..100 {
        let GateAdmit::Rejected(r) = q.admit(Duration::from_secs(1), Waker::noop()) else {
            panic!("a closed gate admitted")
        };
        assert_eq!(r.kind, RejectKind::Closed);
    }
    assert_eq!(q.snapshot().crowd, 0);
    assert_eq!(q.retry_base(), Duration::from_millis(1020) + NS);
}

#[test]
fn at_rate_zero_the_hint_is_endless_and_books_nothing() {
    let (q, _clock) = in_debt();
    q.set_rate(0);
    for _ in 0..100 {
        assert_eq!(refuse(&q), Duration::MAX);
    }
    // Back at a rate, nothing was booked: the next hint is the queue's own (1 slot).
    q.set_rate(100_000_000);
    assert_eq!(q.snapshot().crowd, 0);
    assert_eq!(q.retry_base(), Duration::from_millis(1010) + NS);
}

#[test]
fn no_slot_is_more_than_a_minute_ahead() {
    let (q, _clock) = in_debt();
    let hints: Vec<_> = (0..100).map(|_| refuse(&q)).collect();
    assert_eq!(hints[58], Duration::from_millis(1020 + 58 * 1010) + NS);
    assert!(hints[60..].iter().all(|&h| h == Duration::from_secs(60)));
}
