//! The work queue's lock-free fast path: what it reads, what it counts, and where it hands over
//! to the lock side.

mod common;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::{granted, CountingClock};
use elastic_cpu_core::{Admit, Grant, ManualClock, QueueSnapshot, WorkQueue, MAX_SLICE, MIN_SLICE};
use proptest::prelude::*;
use proptest::sample::Index;

const MS: u64 = 1_000_000;

/// `threads` threads at once, each running `round_trips` fast round trips (10 ms slices, 3 ms
/// used). With `hold`, no thread ends (and frees its counter cell) before all have counted.
fn round_trips_on_threads(
    q: &WorkQueue<ManualClock>,
    threads: usize,
    round_trips: usize,
    hold: bool,
) {
    let all_counted = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (q, all_counted) = (q.clone(), all_counted.clone());
            thread::spawn(move || {
                for _ in 0..round_trips {
                    let g = granted(q.admit(Duration::from_millis(10)));
                    q.done(g, Duration::from_millis(3));
                }
                if hold {
                    all_counted.wait();
                }
            })
        })
        .collect();
    for t in handles {
        t.join().unwrap();
    }
}

/// The snapshot counts `n` of those round trips, and nothing else.
fn assert_round_trips(s: &QueueSnapshot, n: u64) {
    assert_eq!(s.grants, n);
    assert_eq!(s.acquired_nanos, n * 10 * MS);
    assert_eq!(s.used_nanos, n * 3 * MS);
    assert_eq!(s.returned_nanos, n * 7 * MS);
}

/// While nobody waits and the tokens lent to the fast path cover the slice, an admission and a
/// settle within the slice read no clock.
#[test]
fn round_trips_within_the_lent_tokens_read_no_clock() {
    let clock = CountingClock::default();
    let q = WorkQueue::new(clock.clone(), 1_000 * MS);
    let before = clock.reads();
    for _ in 0..100 {
        let g = granted(q.admit(Duration::from_millis(10)));
        q.done(g, Duration::from_millis(4));
    }
    assert_eq!(clock.reads(), before, "a fast round trip read the clock");
    // An overrun is charged by time, under the lock: that one reads the clock.
    let g = granted(q.admit(Duration::from_millis(10)));
    q.done(g, Duration::from_millis(12));
    assert!(clock.reads() > before);
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
    round_trips_on_threads(&q, 8, 500, false);
    let s = q.snapshot();
    assert_round_trips(&s, 4_000);
    assert_eq!(s.holders, 0);
    assert_eq!(s.balance_nanos, (100_000 - 12_000) as i64 * MS as i64);
}

/// More threads than a queue has counter cells, all counting at once and then ending, then as
/// many again reusing the cells they left: the threads without a cell of their own share one,
/// and every count is there.
#[test]
fn more_threads_than_cells_still_count_exactly() {
    let q = WorkQueue::new(ManualClock::new(), 100_000 * MS);
    for _ in 0..2 {
        round_trips_on_threads(&q, 48, 100, true);
    }
    assert_round_trips(&q.snapshot(), 9_600);
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

#[derive(Debug, Clone)]
enum Op {
    /// Admit a slice of this many µs; a queued admission is cancelled at once.
    Admit(u64),
    /// Settle a running grant having used this many ‰ of its slice.
    Done(Index, u64),
    Advance(u64),
    Tick,
    SetRate(u64),
    SetMaxHolders(Option<usize>),
    Pause,
    Resume,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u64..=150_000).prop_map(Op::Admit),
        5 => (any::<Index>(), 0u64..=1500).prop_map(|(i, u)| Op::Done(i, u)),
        3 => prop_oneof![0u64..1_000, 0u64..300_000_000].prop_map(Op::Advance),
        2 => Just(Op::Tick),
        1 => (1u64..=3_000_000_000).prop_map(Op::SetRate),
        1 => proptest::option::of(1usize..=4).prop_map(Op::SetMaxHolders),
        1 => Just(Op::Pause),
        1 => Just(Op::Resume),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random sequences with no snapshot in between (so the fast path stays open and refill
    /// waits for the lock side): the holder cap is never exceeded, the counts are exact, the
    /// ledger balances, the balance stays within one burst either way, the total handed out
    /// stays within the initial burst plus what was supplied, and once everything is settled a
    /// second of refill makes the bucket whole again (no token lost).
    #[test]
    fn fast_path_sequences_keep_the_rules(
        rate in 1u64..=3_000_000_000,
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let clock = ManualClock::new();
        let q = WorkQueue::new(clock.clone(), rate);
        let mut running: Vec<Grant> = Vec::new();
        let (mut cap, mut paused, mut rate_now) = (usize::MAX, false, rate);
        let (mut grants, mut used_total, mut supply) = (0u64, 0u128, rate as u128);
        for op in ops {
            match op {
                Op::Admit(us) => match q.admit(Duration::from_micros(us)) {
                    Admit::Granted(g) => {
                        prop_assert!(!paused, "granted while paused");
                        // The slice, cut to a second of refill for a slow bucket.
                        let n = Duration::from_micros(us).clamp(MIN_SLICE, MAX_SLICE);
                        let n = n.min(Duration::from_nanos(rate_now).max(MIN_SLICE));
                        prop_assert_eq!(g.allotted(), n);
                        grants += 1;
                        running.push(g);
                        prop_assert!(running.len() <= cap, "{} held, cap {}", running.len(), cap);
                    }
                    Admit::Queued(t) => drop(t),
                },
                Op::Done(i, permille) => {
                    if !running.is_empty() {
                        let g = running.swap_remove(i.index(running.len()));
                        let used = g.allotted_nanos() * permille / 1000;
                        used_total += used as u128;
                        q.done(g, Duration::from_nanos(used));
                    }
                }
                Op::Advance(ns) => {
                    clock.advance(Duration::from_nanos(ns));
                    supply += ns as u128 * rate_now as u128 / 1_000_000_000 + 1;
                }
                Op::Tick => { q.tick(); }
                Op::SetRate(r) => {
                    supply += r.saturating_sub(rate_now) as u128;
                    rate_now = r;
                    q.set_rate(r);
                }
                Op::SetMaxHolders(m) => {
                    q.set_max_holders(m);
                    cap = m.unwrap_or(usize::MAX);
                }
                Op::Pause => { q.pause(); paused = true; }
                Op::Resume => { q.resume(); paused = false; }
            }
        }
        let s = q.snapshot();
        let held: u64 = running.iter().map(Grant::allotted_nanos).sum();
        prop_assert_eq!((s.grants, s.holders, s.waiters), (grants, running.len(), 0));
        prop_assert_eq!(s.used_nanos as u128, used_total);
        prop_assert_eq!(
            s.acquired_nanos as i128 - s.returned_nanos as i128 + s.over_limit_nanos as i128,
            s.used_nanos as i128 + held as i128,
            "ledger: {:?}", s
        );
        prop_assert!(s.balance_nanos as i128 <= rate_now as i128, "above the burst: {:?}", s);
        prop_assert!(s.balance_nanos as i128 >= -(rate_now as i128), "debt beyond a burst: {:?}", s);
        let net = s.acquired_nanos as i128 - s.returned_nanos as i128;
        prop_assert!(
            net <= supply as i128 + s.debt_forgiven_nanos as i128 + MAX_SLICE.as_nanos() as i128,
            "handed out {} > supplied {}", net, supply
        );
        for g in running.drain(..) {
            q.done(g, Duration::ZERO);
        }
        q.resume();
        clock.advance(Duration::from_secs(2));
        q.tick();
        prop_assert_eq!(q.snapshot().balance_nanos, rate_now as i64, "tokens lost");
    }
}
