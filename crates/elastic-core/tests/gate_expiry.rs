//! Expired waiters leave with the arrivals that come after them, a couple per arrival, rather
//! than all together on the governor's tick: under a flood a tick's worth of expiries woken at
//! once is a burst of tasks the runtime must poll back to back, and that burst is itself the
//! scheduling latency the gate steers by. On the manual clock.

mod common;

use std::task::{Poll, Waker};
use std::time::Duration;

use common::{gate, gate_queued, waker, wakes};
use elastic_cpu_core::{
    GateAdmit, GateQueue, GateTicket, ManualClock, QueueOrder, RejectKind, SetupGrant,
};

const MS: Duration = Duration::from_millis(1);

/// A gate with one setup running and room for only one at a time: arrivals queue (the
/// bucket has tokens, so each expects to start at once) and nothing is granted until the
/// running setup settles.
fn busy(order: QueueOrder) -> (GateQueue<ManualClock>, ManualClock, SetupGrant) {
    let (q, clock) = gate(1_000_000_000, 64, order, MS);
    q.set_max_in_setup(Some(1));
    let GateAdmit::Admitted(g) = q.admit(Duration::from_secs(1), Waker::noop()) else {
        panic!("the full bucket did not admit")
    };
    (q, clock, g)
}

fn queue(q: &GateQueue<ManualClock>, deadline: Duration, w: &Waker) -> GateTicket<ManualClock> {
    gate_queued(q.admit(deadline, w))
}

fn expired(t: &mut GateTicket<ManualClock>) -> bool {
    matches!(t.poll(Waker::noop()), Poll::Ready(Err(r)) if r.kind == RejectKind::Expired)
}

#[test]
fn each_arrival_drops_the_oldest_expired_waiters_without_a_tick() {
    for order in [QueueOrder::Lifo, QueueOrder::Fifo] {
        let (q, clock, running) = busy(order);
        let (woken, w) = waker();
        let mut old: Vec<_> = (0..5).map(|_| queue(&q, 50 * MS, &w)).collect();
        clock.advance(60 * MS);
        // A new arrival with a deadline it can meet: the two oldest expired waiters leave now.
        let _young = queue(&q, 500 * MS, Waker::noop());
        assert_eq!(wakes(&woken), 2, "{order:?}");
        let s = q.snapshot();
        assert_eq!((s.expired, s.queue_len), (2, 4), "{order:?}");
        assert!(expired(&mut old[0]) && expired(&mut old[1]), "{order:?}");
        assert!(old[2].poll(&w).is_pending(), "{order:?}");
        // The tick sweeps what the arrivals left.
        q.tick();
        assert_eq!(wakes(&woken), 5, "{order:?}");
        assert_eq!(q.snapshot().expired, 5, "{order:?}");
        assert!(old[2..].iter_mut().all(expired), "{order:?}");
        q.done(running, MS);
    }
}

#[test]
fn an_arrival_leaves_waiters_within_their_deadline_alone() {
    let (q, clock, running) = busy(QueueOrder::Lifo);
    let (woken, w) = waker();
    let mut t = queue(&q, 50 * MS, &w);
    clock.advance(50 * MS - Duration::from_nanos(1));
    let _next = queue(&q, 50 * MS, Waker::noop());
    assert_eq!(wakes(&woken), 0);
    assert_eq!(q.snapshot().expired, 0);
    assert!(t.poll(Waker::noop()).is_pending());
    q.done(running, MS);
}
