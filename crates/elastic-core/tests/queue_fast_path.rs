//! The work queue's lock-free fast path (issue 17): what it reads, what it counts, and where
//! it hands over to the lock side.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use elastic_cpu_core::{Admit, Clock, Grant, ManualClock, WorkQueue};

const MS: u64 = 1_000_000;

/// A manual clock that counts its reads.
#[derive(Clone, Default)]
struct CountingClock {
    time: ManualClock,
    reads: Arc<AtomicU64>,
}

impl Clock for CountingClock {
    fn now(&self) -> Duration {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.time.now()
    }
}

fn granted<C: Clock>(a: Admit<C>) -> Grant {
    match a {
        Admit::Granted(g) => g,
        Admit::Queued(_) => panic!("queued"),
    }
}

/// While nobody waits and the tokens lent to the fast path cover the slice, an admission and a
/// settle within the slice read no clock.
#[test]
fn round_trips_within_the_lent_tokens_read_no_clock() {
    let clock = CountingClock::default();
    let q = WorkQueue::new(clock.clone(), 1_000 * MS);
    let before = clock.reads.load(Ordering::Relaxed);
    for _ in 0..100 {
        let g = granted(q.admit(Duration::from_millis(10)));
        q.done(g, Duration::from_millis(4));
    }
    assert_eq!(
        clock.reads.load(Ordering::Relaxed),
        before,
        "a fast round trip read the clock"
    );
    // An overrun is charged by time, under the lock: that one reads the clock.
    let g = granted(q.admit(Duration::from_millis(10)));
    q.done(g, Duration::from_millis(12));
    assert!(clock.reads.load(Ordering::Relaxed) > before);
    let s = q.snapshot();
    assert_eq!((s.grants, s.holders, s.waiters), (101, 0, 0));
    assert_eq!(s.used_nanos, 100 * 4 * MS + 12 * MS);
    assert_eq!(s.returned_nanos, 100 * 6 * MS);
    assert_eq!(s.over_limit_nanos, 2 * MS);
    assert_eq!(s.balance_nanos, (1_000 - 400 - 12) as i64 * MS as i64);
}

/// Counts made on threads that have since ended stay in the snapshot, and counts from many
/// threads at once add up exactly.
#[test]
fn counts_outlive_the_threads_that_made_them() {
    let q = WorkQueue::new(ManualClock::new(), 100_000 * MS);
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let q = q.clone();
            thread::spawn(move || {
                for _ in 0..500 {
                    let g = granted(q.admit(Duration::from_millis(10)));
                    q.done(g, Duration::from_millis(3));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = q.snapshot();
    assert_eq!(s.grants, 4_000);
    assert_eq!(s.acquired_nanos, 4_000 * 10 * MS);
    assert_eq!(s.used_nanos, 4_000 * 3 * MS);
    assert_eq!(s.returned_nanos, 4_000 * 7 * MS);
    assert_eq!(s.holders, 0);
    assert_eq!(s.balance_nanos, (100_000 - 12_000) as i64 * MS as i64);
}

/// The fast path reads no clock, so refill waits for the next critical section (a tick, a
/// snapshot, an admission the lent tokens do not cover). Refilling a full bucket late counts
/// the time it spent full after tokens left it: the bucket may then give out up to what was
/// used since the last refill beyond the exact rule. The governor's tick refills, which bounds
/// that to one tick of refill.
#[test]
fn refill_comes_from_the_lock_side_and_the_tick_keeps_it_close() {
    let clock = ManualClock::new();
    let exact = WorkQueue::new(clock.clone(), 100 * MS); // 0.1 CPU, full: 100 ms
    let late = WorkQueue::new(clock.clone(), 100 * MS);
    clock.advance(Duration::from_secs(1)); // both stay full
    exact.tick(); // refills at the end of the second (the governor's tick)
    for q in [&exact, &late] {
        let g = granted(q.admit(Duration::from_millis(10)));
        q.done(g, Duration::from_millis(10));
    }
    assert_eq!(exact.snapshot().balance_nanos, 90 * MS as i64);
    // Refilled only now, over a second in which 10 ms were used: as if used before the second.
    assert_eq!(late.snapshot().balance_nanos, 100 * MS as i64);

    // An admission the lent tokens do not cover refills under the lock.
    let g = granted(exact.admit(Duration::from_millis(90)));
    exact.done(g, Duration::from_millis(90)); // all used: nothing left to lend
    clock.advance(Duration::from_millis(500)); // 50 ms accrue
    let g = granted(exact.admit(Duration::from_millis(50)));
    exact.done(g, Duration::ZERO);
    assert_eq!(exact.snapshot().balance_nanos, 50 * MS as i64);
}

/// A queue whose rate the fast path's word cannot hold (above ~1,100 CPUs) works the same,
/// every admission under the lock.
#[test]
fn rates_beyond_the_word_take_the_lock_and_still_count() {
    let q = WorkQueue::new(ManualClock::new(), elastic_cpu_core::MAX_RATE);
    for _ in 0..10 {
        let g = granted(q.admit(Duration::from_millis(100)));
        q.done(g, Duration::from_millis(1));
    }
    let s = q.snapshot();
    assert_eq!(
        (s.grants, s.used_nanos, s.returned_nanos),
        (10, 10 * MS, 990 * MS)
    );
    assert_eq!(s.balance_nanos as u64, elastic_cpu_core::MAX_RATE - 10 * MS);
}
