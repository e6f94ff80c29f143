//! loom models of the work queue's races: grants from one thread while another polls, cancels,
//! admits or closes. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p elastic-cpu-core --release --test loom_queue`.
//!
//! Each model starts from a drained bucket on a frozen `ManualClock` (no refill), so every token
//! movement comes from the operations under test.
#![cfg(loom)]

mod common;

use common::{after_one_wake, assert_ledger, drained, granted, queued, ready, waker, wakes};
use elastic_cpu_core::{Admit, Closed, Grant, ManualClock, QueueSnapshot, Ticket, WorkQueue};
use loom::thread::{self, JoinHandle};
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

const MS: u64 = 1_000_000;

/// Run `op` on another handle to `q`, on another thread.
fn on_a_thread<T: Send + 'static>(
    q: &WorkQueue<ManualClock>,
    op: impl FnOnce(WorkQueue<ManualClock>) -> T + Send + 'static,
) -> JoinHandle<T> {
    let q = q.clone();
    thread::spawn(move || op(q))
}

/// A `done` on another thread grants the waiter while it registers its waker: whichever goes
/// first, the waiter ends up granted, and if it saw `Pending` it was woken (no lost wake-up).
#[test]
fn done_grants_a_concurrently_polled_waiter() {
    loom::model(|| {
        let (_clock, q, g) = drained();
        let mut t = queued(q.admit(Duration::from_millis(10)));
        let (count, w) = waker();
        let h = on_a_thread(&q, move |q| q.done(g, Duration::from_millis(50)));
        let first = t.poll_grant(&w);
        h.join().unwrap();
        let grant = granted_once(first, &mut t, &count, &w);
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
        let (_clock, q, g) = drained();
        let a = queued(q.admit(Duration::from_millis(100)));
        let mut b = queued(q.admit(Duration::from_millis(100)));
        let (count, w) = waker();
        assert!(b.poll_grant(&w).is_pending());
        // Return 1 ms: one grant (balance 1 ms > 0), and then the balance is negative.
        let h = on_a_thread(&q, move |q| q.done(g, Duration::from_millis(99)));
        drop(a);
        h.join().unwrap();
        assert_eq!(wakes(&count), 1, "b woken exactly once");
        let gb = ready(&mut b, &w);
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
        let g1 = granted(q.admit(Duration::from_millis(50)));
        let g2 = granted(q.admit(Duration::from_millis(50)));
        let mut a = queued(q.admit(Duration::from_millis(60)));
        let mut b = queued(q.admit(Duration::from_millis(60)));
        let (ca, wa) = waker();
        let (cb, wb) = waker();
        assert!(a.poll_grant(&wa).is_pending());
        assert!(b.poll_grant(&wb).is_pending());
        let h = on_a_thread(&q, move |q| q.done(g1, Duration::from_millis(20))); // returns 30
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
        let (_clock, q, g) = drained();
        let mut a = queued(q.admit(Duration::from_millis(10)));
        let (_ca, wa) = waker();
        assert!(a.poll_grant(&wa).is_pending());
        // Returns 15 ms: a (10) granted, 5 ms left.
        let h = on_a_thread(&q, move |q| q.done(g, Duration::from_millis(85)));
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
        let (_clock, q, g) = drained();
        let mut t = queued(q.admit(Duration::from_millis(10)));
        let (count, w) = waker();
        let h1 = on_a_thread(&q, |q| q.close());
        let h2 = on_a_thread(&q, move |q| q.done(g, Duration::from_millis(50)));
        let first = t.poll_grant(&w);
        h1.join().unwrap();
        h2.join().unwrap();
        let outcome = after_one_wake(first, &count, || t.poll_grant(&w));
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
        let h = on_a_thread(&q, |q| round_trip(q, 30));
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
        let (_clock, q, g) = drained();
        let mut t = queued(q.admit(Duration::from_millis(10)));
        let (count, w) = waker();
        let brake = on_a_thread(&q, |q| {
            q.pause();
            q.resume();
        });
        let ret = on_a_thread(&q, move |q| q.done(g, Duration::from_millis(50)));
        let first = t.poll_grant(&w);
        brake.join().unwrap();
        ret.join().unwrap();
        let grant = granted_once(first, &mut t, &count, &w);
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

/// The grant of a ticket whose first poll (`first`) raced what grants it: granted at that poll
/// (and never woken: no waker was registered yet), or woken exactly once and granted at the next.
fn granted_once(
    first: Poll<Result<Grant, Closed>>,
    t: &mut Ticket<ManualClock>,
    count: &common::WakeCounter,
    w: &Waker,
) -> Grant {
    if first.is_ready() {
        assert_eq!(wakes(count), 0, "woken without a registered waker");
    }
    after_one_wake(first, count, || t.poll_grant(w)).expect("woken but not granted")
}

// The lock-free fast path: admissions and settles that take no lock, racing the lock side's
// pause, rate change, close, holder cap and a queued admission.

/// Every grant settled: nothing held, the ledger balances, and the balance is `balance_nanos`.
fn assert_settled(s: &QueueSnapshot, balance_nanos: u64) {
    assert_ledger(s, 0);
    assert_eq!(s.holders, 0, "{s:?}");
    assert_eq!(s.balance_nanos, balance_nanos as i64, "{s:?}");
}

/// Poll a ticket that must already be granted.
fn collect(t: &mut Ticket<ManualClock>) -> Grant {
    ready(t, Waker::noop())
}

/// A fast admission races `pause`: it is granted (before the pause) or queued (after), and once
/// `pause` has returned no admission takes the fast path. Resume grants what queued; nothing is
/// lost.
#[test]
fn fast_admit_races_pause() {
    loom::model(|| {
        let q = WorkQueue::new(ManualClock::new(), 100 * MS);
        let brake = on_a_thread(&q, |q| {
            q.pause();
            match q.admit(Duration::from_millis(10)) {
                Admit::Queued(t) => t,
                Admit::Granted(_) => panic!("fast path taken after pause returned"),
            }
        });
        let first = q.admit(Duration::from_millis(10));
        let mut after = brake.join().unwrap();
        let s = q.snapshot();
        let held_fast = matches!(first, Admit::Granted(_)) as usize;
        assert_eq!((s.holders, s.waiters), (held_fast, 2 - held_fast));
        q.resume();
        let g1 = match first {
            Admit::Granted(g) => g,
            Admit::Queued(mut t) => collect(&mut t),
        };
        let g2 = collect(&mut after);
        q.done(g1, Duration::ZERO);
        q.done(g2, Duration::from_millis(3));
        let s = q.snapshot();
        assert_eq!(s.grants, 2);
        assert_settled(&s, 97 * MS);
    });
}

/// A settle that may take the fast path races an admission that finds the lent tokens short
/// and takes the lock: whichever goes first, the admission ends up granted (at once, or by the
/// settle), never left waiting on tokens that came back.
#[test]
fn fast_settle_races_queued_admit() {
    loom::model(|| {
        let q = WorkQueue::new(ManualClock::new(), 100 * MS);
        let g = granted(q.admit(Duration::from_millis(100))); // every token out
        let h = on_a_thread(&q, |q| q.admit(Duration::from_millis(10)));
        q.done(g, Duration::ZERO);
        let g2 = match h.join().unwrap() {
            Admit::Granted(g) => g,
            Admit::Queued(mut t) => collect(&mut t),
        };
        let s = q.snapshot();
        assert_eq!((s.holders, s.waiters), (1, 0));
        assert_eq!(s.balance_nanos, 90 * MS as i64);
        assert_ledger(&s, 10 * MS);
        q.done(g2, Duration::from_millis(10));
        assert_eq!(q.snapshot().balance_nanos, 90 * MS as i64);
    });
}

/// A settle races a rate cut that reopens the fast path under a smaller burst: the balance
/// never exceeds the new burst, and ends where a settle before or after the cut leaves it.
#[test]
fn fast_settle_races_rate_change() {
    loom::model(|| {
        let q = WorkQueue::new(ManualClock::new(), 100 * MS);
        let g = granted(q.admit(Duration::from_millis(60))); // 40 lent
        let h = on_a_thread(&q, |q| q.set_rate(80 * MS)); // 40 − 20 = 20 lent, burst 80
        q.done(g, Duration::ZERO);
        h.join().unwrap();
        let s = q.snapshot();
        assert_eq!(s.rate_nanos_per_sec, 80 * MS);
        // Before the cut: 40 + 60 = 100, then −20. After it: 20 + 60 = 80. Both 80.
        assert_settled(&s, 80 * MS);
    });
}

/// A fast round trip races `close`: admitted before the close it settles as usual (a grant
/// outlives the close); after it, it fails with `Closed`. The ledger balances either way and no
/// admission after the close is granted.
#[test]
fn fast_round_trip_races_close() {
    loom::model(|| {
        let q = WorkQueue::new(ManualClock::new(), 100 * MS);
        let h = on_a_thread(&q, |q| match q.admit(Duration::from_millis(10)) {
            Admit::Granted(g) => {
                q.done(g, Duration::from_millis(5));
                true
            }
            Admit::Queued(mut t) => {
                let (_c, w) = waker();
                assert!(matches!(t.poll_grant(&w), Poll::Ready(Err(Closed))));
                false
            }
        });
        q.close();
        let ran = h.join().unwrap();
        let mut late = queued(q.admit(Duration::from_millis(10)));
        let (_c, w) = waker();
        assert!(matches!(late.poll_grant(&w), Poll::Ready(Err(Closed))));
        let s = q.snapshot();
        let used = if ran { 5 * MS } else { 0 };
        assert_eq!(s.used_nanos, used);
        assert_settled(&s, 100 * MS - used);
    });
}

/// Two fast admissions race under a holder cap of one: at most one is granted until it
/// settles, then the other is granted from the queue.
#[test]
fn holder_cap_holds_on_the_fast_path() {
    loom::model(|| {
        let q = WorkQueue::new(ManualClock::new(), 100 * MS);
        q.set_max_holders(Some(1));
        let h = on_a_thread(&q, |q| q.admit(Duration::from_millis(10)));
        let mine = q.admit(Duration::from_millis(10));
        let theirs = h.join().unwrap();
        let (g, mut t) = match (mine, theirs) {
            (Admit::Granted(g), Admit::Queued(t)) | (Admit::Queued(t), Admit::Granted(g)) => (g, t),
            (a, b) => panic!("cap of one broken: {a:?}, {b:?}"),
        };
        assert_eq!(q.snapshot().holders, 1);
        q.done(g, Duration::from_millis(10));
        let g2 = collect(&mut t);
        q.done(g2, Duration::from_millis(10));
        let s = q.snapshot();
        assert_eq!(s.grants, 2);
        assert_settled(&s, 80 * MS);
    });
}

/// A settle that read the burst of one opening must not apply it to a later opening whose word
/// looks the same: here a rate cut (burst 100 → 80) and a refill bring `avail` and the holders
/// back to exactly what the settle read. The balance must stay within the new burst.
#[test]
fn fast_settle_never_applies_an_older_burst() {
    loom::model(|| {
        let clock = ManualClock::new();
        let q = WorkQueue::new(clock.clone(), 100 * MS);
        let g = granted(q.admit(Duration::from_millis(60))); // 40 lent under burst 100
        let h = on_a_thread(&q, move |q| {
            q.set_rate(80 * MS); // 20 lent under burst 80
            clock.advance(Duration::from_millis(250));
            q.tick(); // + 20: 40 lent again, the same word but for the epoch
        });
        q.done(g, Duration::ZERO); // returns 60
        h.join().unwrap();
        // The balance is the burst, 80, whatever the order; an ask of 90 ms is cut to a second
        // of refill (80) and takes exactly the balance: a word that lent the older burst (100)
        // would leave 20.
        let g2 = granted(q.admit(Duration::from_millis(90)));
        let s = q.snapshot();
        assert_eq!(s.balance_nanos, 0, "tokens above the burst were lent");
        assert_ledger(&s, 80 * MS);
        q.done(g2, Duration::from_millis(80));
    });
}

/// A thread's counter cell passes to another thread that starts counting after the first has
/// ended (the two run concurrently, so only the cell's claim orders them): the next owner adds to
/// what the first counted (its claim acquires what the release published), and a snapshot taken
/// meanwhile sees whole round trips, never a lost count.
#[test]
fn a_counter_cell_changes_owner_without_losing_counts() {
    loom::model(|| {
        let q = Arc::new(WorkQueue::new(ManualClock::new(), 100 * MS));
        let round_trip = |q: Arc<WorkQueue<ManualClock>>| {
            thread::spawn(move || match q.admit(Duration::from_millis(10)) {
                Admit::Granted(g) => q.done(g, Duration::from_millis(4)),
                Admit::Queued(_) => unreachable!("the bucket covers both"),
            })
        };
        let (a, b) = (round_trip(q.clone()), round_trip(q.clone()));
        let s = q.snapshot();
        assert!(s.grants <= 2 && s.used_nanos <= 8 * MS, "{s:?}");
        a.join().unwrap();
        b.join().unwrap();
        let s = q.snapshot();
        assert_eq!((s.grants, s.used_nanos), (2, 8 * MS), "{s:?}");
        assert_eq!((s.acquired_nanos, s.returned_nanos), (20 * MS, 12 * MS));
    });
}

/// The governor retunes a class's rate (its part of a split share moved) while a waiter
/// registers its waker: the retune refills at the old rate and grants; whichever goes first,
/// the waiter is granted once, woken once if it saw `Pending`, and the raise adds no tokens
/// (`set_rate` would have added the 900 ms of the larger burst).
#[test]
fn retune_grants_a_concurrently_polled_waiter_once() {
    loom::model(|| {
        let (clock, q, g) = drained();
        q.done(g, Duration::from_millis(100));
        let mut t = queued(q.admit(Duration::from_millis(10)));
        let (count, w) = waker();
        // 1 ms at 0.1 CPU: 0.1 ms of tokens, taken in by the retune's refill.
        clock.advance(Duration::from_millis(1));
        let h = on_a_thread(&q, move |q| q.retune(1_000 * MS));
        let first = t.poll_grant(&w);
        h.join().unwrap();
        let grant = after_one_wake(first, &count, || t.poll_grant(&w)).expect("granted");
        assert_eq!(grant.allotted(), Duration::from_millis(10));
        let s = q.snapshot();
        assert_eq!(s.waiters, 0);
        assert_eq!(
            s.balance_nanos,
            -(99 * MS as i64) / 10,
            "a raise added tokens"
        );
        q.done(grant, Duration::ZERO);
        assert_ledger(&q.snapshot(), 0);
    });
}
