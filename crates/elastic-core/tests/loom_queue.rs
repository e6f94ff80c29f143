//! loom models of the work queue's races (issue 7): grants from one thread while another polls,
//! cancels, admits or closes. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p elastic-cpu-core --release --test loom_queue`.
//!
//! Each model starts from a drained bucket on a frozen `ManualClock` (no refill), so every token
//! movement comes from the operations under test.
#![cfg(loom)]

use elastic_cpu_core::{Admit, Closed, Grant, ManualClock, QueueSnapshot, Ticket, WorkQueue};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use std::sync::Arc;
use std::task::{Poll, Wake, Waker};
use std::time::Duration;

const MS: u64 = 1_000_000;

struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn waker() -> (Arc<CountingWaker>, Waker) {
    let c = Arc::new(CountingWaker(AtomicUsize::new(0)));
    (c.clone(), Waker::from(c))
}

fn wakes(c: &CountingWaker) -> usize {
    c.0.load(Ordering::SeqCst)
}

/// 100 ms/s, burst 100 ms, all of it handed out as the returned grant.
fn drained() -> (WorkQueue<ManualClock>, Grant) {
    let q = WorkQueue::new(ManualClock::new(), 100 * MS);
    match q.admit(Duration::from_millis(100)) {
        Admit::Granted(g) => (q, g),
        Admit::Queued(_) => unreachable!(),
    }
}

fn queued(a: Admit<ManualClock>) -> Ticket<ManualClock> {
    match a {
        Admit::Queued(t) => t,
        Admit::Granted(_) => panic!("granted while others wait or the bucket is empty"),
    }
}

/// Everything handed out and not held is accounted as used or returned.
fn assert_ledger(s: &QueueSnapshot, held: u64) {
    assert_eq!(
        s.acquired_nanos - s.returned_nanos + s.over_limit_nanos,
        s.used_nanos + held,
        "{s:?}"
    );
}

/// A `done` on another thread grants the waiter while it registers its waker: whichever goes
/// first, the waiter ends up granted, and if it saw `Pending` it was woken (no lost wake-up).
#[test]
fn done_grants_a_concurrently_polled_waiter() {
    loom::model(|| {
        let (q, g) = drained();
        let mut t = queued(q.admit(Duration::from_millis(10)));
        let (count, w) = waker();
        let q2 = q.clone();
        let h = thread::spawn(move || q2.done(g, Duration::from_millis(50)));
        let first = t.poll_grant(&w);
        h.join().unwrap();
        let grant = match first {
            Poll::Ready(r) => {
                assert_eq!(wakes(&count), 0, "woken without a registered waker");
                r.unwrap()
            }
            Poll::Pending => {
                assert_eq!(wakes(&count), 1, "lost wake-up");
                match t.poll_grant(&w) {
                    Poll::Ready(Ok(g)) => g,
                    other => panic!("woken but not granted: {other:?}"),
                }
            }
        };
        assert_eq!(grant.allotted(), Duration::from_millis(10));
        let s = q.snapshot();
        assert_eq!((s.grants, s.waiters), (2, 0));
        assert_eq!(s.balance_nanos, 40 * MS as i64);
        assert_ledger(&s, 10 * MS);
    });
}

/// Head `a` is cancelled while a `done` returns just enough for one grant. Either the done
/// grants `a` and the cancel hands that slice to `b`, or the cancel goes first and the done
/// grants `b`: `b` is granted exactly once, woken once, and no token is lost or doubled.
#[test]
fn cancel_races_with_grant() {
    loom::model(|| {
        let (q, g) = drained();
        let a = queued(q.admit(Duration::from_millis(100)));
        let mut b = queued(q.admit(Duration::from_millis(100)));
        let (count, w) = waker();
        assert!(b.poll_grant(&w).is_pending());
        let q2 = q.clone();
        // Return 1 ms: one grant (balance 1 ms > 0), and then the balance is negative.
        let h = thread::spawn(move || q2.done(g, Duration::from_millis(99)));
        drop(a);
        h.join().unwrap();
        assert_eq!(wakes(&count), 1, "b woken exactly once");
        let gb = match b.poll_grant(&w) {
            Poll::Ready(Ok(g)) => g,
            other => panic!("b not granted: {other:?}"),
        };
        let s = q.snapshot();
        assert_eq!(s.waiters, 0);
        assert_eq!(s.balance_nanos, -99 * MS as i64);
        assert_ledger(&s, gb.allotted_nanos());
        q.done(gb, Duration::ZERO);
        let s = q.snapshot();
        assert_ledger(&s, 0);
        assert_eq!(s.balance_nanos, MS as i64);
    });
}

/// Two threads settle their grants while two waiters are queued in order: grants follow FIFO
/// (never `b` without `a`), and no grant is made twice.
#[test]
fn concurrent_returns_keep_fifo() {
    loom::model(|| {
        let q = WorkQueue::new(ManualClock::new(), 100 * MS);
        let g1 = match q.admit(Duration::from_millis(50)) {
            Admit::Granted(g) => g,
            Admit::Queued(_) => unreachable!(),
        };
        let g2 = match q.admit(Duration::from_millis(50)) {
            Admit::Granted(g) => g,
            Admit::Queued(_) => unreachable!(),
        };
        let mut a = queued(q.admit(Duration::from_millis(60)));
        let mut b = queued(q.admit(Duration::from_millis(60)));
        let (ca, wa) = waker();
        let (cb, wb) = waker();
        assert!(a.poll_grant(&wa).is_pending());
        assert!(b.poll_grant(&wb).is_pending());
        let q1 = q.clone();
        let h = thread::spawn(move || q1.done(g1, Duration::from_millis(20))); // returns 30
        q.done(g2, Duration::from_millis(40)); // returns 10
                                               // Whichever return came first made the balance positive and granted the head, a, whose
                                               // 60 ms then leaves the balance at -50 or -30; the other return cannot lift it above 0,
                                               // so b waits. Checked while the other thread may still be running.
        let ga = match a.poll_grant(&wa) {
            Poll::Ready(Ok(g)) => g,
            other => panic!("a not granted after a return: {other:?}"),
        };
        assert!(
            b.poll_grant(&wb).is_pending(),
            "b granted ahead of the rule"
        );
        h.join().unwrap();
        assert_eq!((wakes(&ca), wakes(&cb)), (1, 0));
        assert!(b.poll_grant(&wb).is_pending());
        let s = q.snapshot();
        assert_eq!((s.grants, s.waiters), (3, 1));
        assert_eq!(s.balance_nanos, -20 * MS as i64);
        assert_ledger(&s, ga.allotted_nanos());
    });
}

/// A newcomer admitted concurrently with the grant of the queue's last waiter never takes the
/// fast path ahead of a waiter, and is granted after it.
#[test]
fn concurrent_admit_does_not_jump_the_queue() {
    loom::model(|| {
        let (q, g) = drained();
        let mut a = queued(q.admit(Duration::from_millis(10)));
        let (_ca, wa) = waker();
        assert!(a.poll_grant(&wa).is_pending());
        let q2 = q.clone();
        // Returns 15 ms: a (10) granted, 5 ms left.
        let h = thread::spawn(move || q2.done(g, Duration::from_millis(85)));
        let c = q.admit(Duration::from_millis(10));
        h.join().unwrap();
        match c {
            // After the done: nobody waits and want 10 > 5 → queued; or granted at the done.
            Admit::Granted(_) => panic!("fast path with 5 ms for a 10 ms slice"),
            Admit::Queued(mut c) => {
                let (_cc, wc) = waker();
                match c.poll_grant(&wc) {
                    // Queued behind a before the done: granted on the 5 ms left (into debt).
                    Poll::Ready(Ok(gc)) => {
                        let s = q.snapshot();
                        assert_eq!(s.balance_nanos, -5 * MS as i64);
                        q.done(gc, Duration::ZERO);
                    }
                    // Queued after the done: waits for the next tick or return.
                    Poll::Pending => assert_eq!(q.snapshot().balance_nanos, 5 * MS as i64),
                    Poll::Ready(Err(e)) => panic!("{e}"),
                }
            }
        }
        assert!(matches!(a.poll_grant(&wa), Poll::Ready(Ok(_))));
    });
}

/// `close` races with a waiter registering its waker and with a `done` that would grant it:
/// the waiter resolves exactly once (granted or Closed), is never left pending, and a grant it
/// got before the close is still accounted.
#[test]
fn close_races_with_poll_and_grant() {
    loom::model(|| {
        let (q, g) = drained();
        let mut t = queued(q.admit(Duration::from_millis(10)));
        let (count, w) = waker();
        let q1 = q.clone();
        let q2 = q.clone();
        let h1 = thread::spawn(move || q1.close());
        let h2 = thread::spawn(move || q2.done(g, Duration::from_millis(50)));
        let first = t.poll_grant(&w);
        h1.join().unwrap();
        h2.join().unwrap();
        let outcome = match first {
            Poll::Ready(r) => r,
            Poll::Pending => {
                assert_eq!(wakes(&count), 1, "lost wake-up on close or grant");
                match t.poll_grant(&w) {
                    Poll::Ready(r) => r,
                    Poll::Pending => panic!("still pending after close"),
                }
            }
        };
        let s = q.snapshot();
        assert!(s.closed);
        assert_eq!(s.waiters, 0);
        match outcome {
            Ok(grant) => {
                assert_ledger(&s, grant.allotted_nanos());
                q.done(grant, Duration::from_millis(10));
            }
            Err(Closed) => assert_ledger(&s, 0),
        }
        assert_ledger(&q.snapshot(), 0);
    });
}

/// Two threads each run one admit → (wait) → done round trip on a bucket that fits only one
/// slice: one takes the fast path, the other queues and is granted by the first one's return.
/// Neither hangs (the waiting one parks on its waker), and every token is accounted.
#[test]
fn two_round_trips_conserve_tokens() {
    fn round_trip(q: WorkQueue<ManualClock>, used_ms: u64) {
        let grant = match q.admit(Duration::from_millis(60)) {
            Admit::Granted(g) => g,
            Admit::Queued(mut t) => {
                let (count, w) = waker();
                loop {
                    let seen = wakes(&count);
                    match t.poll_grant(&w) {
                        Poll::Ready(r) => break r.unwrap(),
                        // Park until woken: a lost wake-up shows up as a loom deadlock.
                        Poll::Pending => {
                            while wakes(&count) == seen {
                                thread::yield_now();
                            }
                        }
                    }
                }
            }
        };
        q.done(grant, Duration::from_millis(used_ms));
    }
    loom::model(|| {
        let q = WorkQueue::new(ManualClock::new(), 100 * MS);
        let q1 = q.clone();
        let h = thread::spawn(move || round_trip(q1, 30));
        round_trip(q.clone(), 30);
        h.join().unwrap();
        let s = q.snapshot();
        assert_eq!((s.grants, s.waiters), (2, 0));
        assert_ledger(&s, 0);
        assert_eq!((s.used_nanos, s.returned_nanos), (60 * MS, 60 * MS));
        // 100 − 2 × 60 + 2 × 30, whichever way the grants went.
        assert_eq!(s.balance_nanos, 40 * MS as i64);
    });
}

/// The backlog brake pauses and resumes the queue on one thread while a `done` returns tokens
/// on another and the waiter registers its waker: whichever order, a return made while paused
/// stays in the bucket and the resume grants it, so the waiter always ends up granted and, if it
/// saw `Pending`, woken exactly once (no lost wake-up); no token is lost or doubled.
#[test]
fn pause_resume_race_with_return_and_poll() {
    loom::model(|| {
        let (q, g) = drained();
        let mut t = queued(q.admit(Duration::from_millis(10)));
        let (count, w) = waker();
        let q1 = q.clone();
        let brake = thread::spawn(move || {
            q1.pause();
            q1.resume();
        });
        let q2 = q.clone();
        let ret = thread::spawn(move || q2.done(g, Duration::from_millis(50)));
        let first = t.poll_grant(&w);
        brake.join().unwrap();
        ret.join().unwrap();
        let grant = match first {
            Poll::Ready(r) => {
                assert_eq!(wakes(&count), 0, "woken without a registered waker");
                r.unwrap()
            }
            Poll::Pending => {
                assert_eq!(wakes(&count), 1, "lost or doubled wake-up");
                match t.poll_grant(&w) {
                    Poll::Ready(Ok(g)) => g,
                    other => panic!("not granted after resume: {other:?}"),
                }
            }
        };
        assert_eq!(grant.allotted(), Duration::from_millis(10));
        let s = q.snapshot();
        assert!(!s.paused);
        assert_eq!((s.grants, s.waiters, s.waits, s.pauses), (2, 0, 1, 1));
        assert_eq!(s.balance_nanos, 40 * MS as i64);
        assert_ledger(&s, 10 * MS);
        q.done(grant, Duration::from_millis(4));
        let s = q.snapshot();
        assert_ledger(&s, 0);
        assert_eq!(s.balance_nanos, 46 * MS as i64);
    });
}
