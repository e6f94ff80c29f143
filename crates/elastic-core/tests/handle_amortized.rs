//! The amortized over-limit check (DESIGN.md §4): clock reads get rarer while checks come fast,
//! the interval never shrinks, the cached answer holds between reads, backwards clocks clamp.

use elastic_cpu_core::{
    Admit, Clock, ElasticHandle, Grant, ManualClock, MonotonicClock, ThreadCpuClock, WorkQueue,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const MS: i64 = 1_000_000;

/// A manual clock that counts its reads.
#[derive(Clone, Default)]
struct Counting {
    clock: ManualClock,
    reads: Arc<AtomicU64>,
}

impl Clock for Counting {
    fn now(&self) -> Duration {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.clock.now()
    }
}

impl Counting {
    fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }
}

fn grant(slice_ms: u64) -> Grant {
    let q = WorkQueue::new(ManualClock::new(), 1_000_000_000);
    match q.admit(Duration::from_millis(slice_ms)) {
        Admit::Granted(g) => g,
        Admit::Queued(_) => unreachable!(),
    }
}

/// Calls (1-based) at which `over_limit` read the clock, over `calls` calls, advancing the clock
/// by `step` after every call.
fn read_positions(
    h: &mut ElasticHandle<Counting>,
    clock: &Counting,
    calls: u64,
    step: Duration,
) -> Vec<u64> {
    let mut at = Vec::new();
    for i in 1..=calls {
        let before = clock.reads();
        h.over_limit();
        if clock.reads() != before {
            at.push(i);
        }
        clock.clock.advance(step);
    }
    at
}

#[test]
fn reads_double_apart_while_checks_are_fast() {
    let clock = Counting::default();
    let mut h = ElasticHandle::new(grant(100), clock.clone());
    assert_eq!(clock.reads(), 1, "start time");
    assert_eq!(h.check_interval(), 0);
    let at = read_positions(&mut h, &clock, 200, Duration::ZERO);
    // Interval 0 (check now), then 1, 2, 4, ...: reads at 1, 3, 6, 11, 20, 37, 70, 135.
    assert_eq!(at, vec![1, 3, 6, 11, 20, 37, 70, 135]);
    assert_eq!(h.check_interval(), 128);
    assert_eq!(clock.reads(), 1 + 8);
}

#[test]
fn interval_stops_growing_when_checks_are_far_apart_and_never_shrinks() {
    let clock = Counting::default();
    let mut h = ElasticHandle::new(grant(100), clock.clone());
    // Fast start: reads at 1, 3, 6, 11 leave the interval at 8.
    read_positions(&mut h, &clock, 11, Duration::ZERO);
    assert_eq!(h.check_interval(), 8);
    // Now every call takes 200 µs: 9 calls between reads = 1.8 ms apart: the interval holds.
    let at = read_positions(&mut h, &clock, 45, Duration::from_micros(200));
    assert_eq!(at, vec![9, 18, 27, 36, 45]);
    assert_eq!(h.check_interval(), 8);
    // Slower still (checks 45 ms apart): never shrinks.
    read_positions(&mut h, &clock, 20, Duration::from_millis(5));
    assert_eq!(h.check_interval(), 8);
    // Fast again: the first read still sees the slow gap, the second one doubles.
    read_positions(&mut h, &clock, 18, Duration::ZERO);
    assert_eq!(h.check_interval(), 16);
}

#[test]
fn slow_first_checks_keep_the_interval_at_one() {
    let clock = Counting::default();
    let mut h = ElasticHandle::new(grant(100), clock.clone());
    let at = read_positions(&mut h, &clock, 10, Duration::from_millis(1));
    // Interval 0 -> 1 on the first check; 2 ms apart after that: stays 1.
    assert_eq!(at, vec![1, 3, 5, 7, 9]);
    assert_eq!(h.check_interval(), 1);
}

#[test]
fn answer_is_cached_between_reads() {
    let clock = Counting::default();
    let mut h = ElasticHandle::new(grant(10), clock.clone());
    assert_eq!(h.over_limit(), (false, -10 * MS)); // read, interval 1
    clock.clock.advance(Duration::from_millis(4));
    assert_eq!(h.over_limit(), (false, -10 * MS)); // cached: the 4 ms are not seen
    assert_eq!(h.over_limit(), (false, -6 * MS)); // read (4 ms apart: interval stays 1)
    clock.clock.advance(Duration::from_millis(20));
    assert_eq!(h.over_limit(), (false, -6 * MS)); // cached
    assert_eq!(h.over_limit(), (true, 14 * MS)); // read: spent, 14 ms over
    assert_eq!(h.over_limit(), (true, 14 * MS)); // cached
    assert_eq!(h.used(), Duration::from_millis(24));
    assert_eq!(h.allotted(), Duration::from_millis(10));
    // Exactly the allotted time counts as over.
    let clock = ManualClock::new();
    let mut h = ElasticHandle::new(grant(10), clock.clone());
    clock.advance(Duration::from_millis(10));
    assert_eq!(h.over_limit(), (true, 0));
}

#[test]
fn clock_going_backwards_clamps() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(100));
    let mut h = ElasticHandle::new(grant(10), clock.clone());
    clock.set(Duration::from_secs(1));
    assert_eq!(h.used(), Duration::ZERO);
    assert_eq!(h.over_limit(), (false, -10 * MS));
    clock.set(Duration::ZERO);
    for _ in 0..100 {
        assert_eq!(h.over_limit(), (false, -10 * MS));
    }
    // A jump to the end of time does not overflow.
    clock.set(Duration::MAX);
    let interval = h.check_interval();
    let mut calls = 0;
    let diff = loop {
        calls += 1;
        match h.over_limit() {
            (true, diff) => break diff,
            cached => assert_eq!(cached, (false, -10 * MS)),
        }
    };
    assert!(
        calls <= interval + 1,
        "{calls} calls at interval {interval}"
    );
    assert_eq!(diff, i64::MAX, "the difference saturates");
    let (_, used) = h.into_grant();
    assert_eq!(
        used,
        Duration::from_nanos(u64::MAX) - Duration::from_secs(100)
    );
}

#[test]
fn settles_through_the_queue() {
    let clock = ManualClock::new();
    let q = WorkQueue::new(clock.clone(), 1_000_000_000);
    let Admit::Granted(g) = q.admit(Duration::from_millis(20)) else {
        unreachable!()
    };
    let h = ElasticHandle::new(g, clock.clone());
    clock.advance(Duration::from_millis(7));
    let (g, used) = h.into_grant();
    assert_eq!(used, Duration::from_millis(7));
    q.done(g, used);
    let s = q.snapshot();
    assert_eq!((s.used_nanos, s.returned_nanos), (7_000_000, 13_000_000));
}

#[test]
fn real_clocks_work() {
    let mut h = ElasticHandle::new(grant(10), MonotonicClock::new());
    let mut n = 0u64;
    while !h.over_limit().0 {
        n += 1;
    }
    assert!(h.used() >= Duration::from_millis(10));
    assert!(h.check_interval() >= 1, "{n}");
    let mut h = ElasticHandle::new(grant(10), ThreadCpuClock);
    while !h.over_limit().0 {}
    assert!(h.used() >= Duration::from_millis(10));
    assert!(format!("{h:?}").contains("ElasticHandle"));
}

#[test]
fn deadline_cuts_the_slice_short_but_diff_stays_against_the_slice() {
    let clock = ManualClock::new();
    let mut h = ElasticHandle::with_deadline(grant(10), clock.clone(), Duration::from_millis(2));
    assert_eq!(h.over_limit(), (false, -10 * MS));
    clock.advance(Duration::from_millis(2));
    h.over_limit(); // cached
    assert_eq!(h.over_limit(), (true, -8 * MS));
    // A deadline past the slice is the slice.
    let clock = ManualClock::new();
    let mut h = ElasticHandle::with_deadline(grant(10), clock.clone(), Duration::from_secs(1));
    clock.advance(Duration::from_millis(10));
    assert_eq!(h.over_limit(), (true, 0));
}

#[test]
fn a_short_deadline_is_overrun_by_at_most_about_an_eighth() {
    // 1 µs of running time per call: with the 1 ms spacing alone, checks would land at calls
    // 1, 3, 7, 15, ... 255, 511 and a 250 µs deadline would run to ~511 µs.
    for deadline_us in [50u64, 250, 900] {
        let clock = ManualClock::new();
        let deadline = Duration::from_micros(deadline_us);
        let mut h = ElasticHandle::with_deadline(grant(100), clock.clone(), deadline);
        let mut calls = 0u64;
        while !h.over_limit().0 {
            clock.advance(Duration::from_micros(1));
            calls += 1;
            assert!(calls < 10_000, "never over");
        }
        let used = h.used();
        assert!(used >= deadline);
        assert!(
            used <= deadline + deadline / 4,
            "deadline {deadline:?} overrun to {used:?}"
        );
    }
}
