//! The amortized over-limit check (docs/design.md §4): clock reads get rarer while checks come
//! fast, the interval never shrinks, the cached answer holds between reads, backwards clocks
//! clamp.

mod common;

use common::{granted, CountingClock};
use elastic_cpu_core::{
    Admit, ElasticHandle, Grant, ManualClock, MonotonicClock, ThreadCpuClock, WorkQueue,
};
use std::time::Duration;

const MS: i64 = 1_000_000;

fn grant(slice_ms: u64) -> Grant {
    let q = WorkQueue::new(ManualClock::new(), 1_000_000_000);
    granted(q.admit(Duration::from_millis(slice_ms)))
}

/// Calls (1-based) at which `over_limit` read the clock, over `calls` calls, advancing the clock
/// by `step` after every call.
fn read_positions(
    h: &mut ElasticHandle<CountingClock>,
    clock: &CountingClock,
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
        clock.time.advance(step);
    }
    at
}

#[test]
fn reads_double_apart_while_checks_are_fast() {
    let clock = CountingClock::default();
    let mut h = ElasticHandle::new(grant(100), clock.clone());
    assert_eq!(clock.reads(), 1, "start time");
    assert_eq!(h.check_interval(), 0);
    let at = read_positions(&mut h, &clock, 200, Duration::ZERO);
    // Interval 0 (check now), then 1, 2, 4, ...: each read on the interval-th call after the
    // previous one, at 1, 2, 4, 8, 16, 32, 64, 128.
    assert_eq!(at, vec![1, 2, 4, 8, 16, 32, 64, 128]);
    assert_eq!(h.check_interval(), 128);
    assert_eq!(clock.reads(), 1 + 8);
}

/// Calls (1-based) at which `over_limit` read the clock over `calls` calls, with the running time
/// a script of the call number: `step(n)` elapses after call `n`.
fn scripted_reads(
    h: &mut ElasticHandle<CountingClock>,
    clock: &CountingClock,
    calls: u64,
    step: impl Fn(u64) -> Duration,
) -> Vec<u64> {
    let mut at = Vec::new();
    for n in 1..=calls {
        let before = clock.reads();
        h.over_limit();
        match clock.reads() - before {
            0 => {}
            1 => at.push(n),
            r => panic!("call {n} read the clock {r} times"),
        }
        clock.time.advance(step(n));
    }
    at
}

/// The golden read sequence (CockroachDB's rule): with interval N the clock is read on exactly
/// every N-th call; N starts at 1 and doubles while reads are less than 1 ms of running time
/// apart, and never shrinks.
#[test]
fn golden_reads_fall_on_every_nth_call() {
    let clock = CountingClock::default();
    let mut h = ElasticHandle::new(grant(10_000), clock.clone());
    let us = Duration::from_micros;
    let at = scripted_reads(&mut h, &clock, 1_600, |n| match n {
        // 20 µs per call: reads 20, 40, ... 640 µs apart double the interval; 64 calls apart
        // (1.28 ms) they no longer do: a steady 64.
        1..=512 => us(20),
        // Fast: doubles again at each read (the first gap still holds the 20 µs of call 512).
        513..=704 => Duration::ZERO,
        // Slow: 1 ms per call, the interval holds at 256 and never shrinks.
        _ => us(1_000),
    });
    let mut want = vec![1, 2, 4, 8, 16, 32, 64];
    want.extend((128..=512).step_by(64)); // 128, 192, ... 512: every 64th call
    want.extend([576, 704]); // intervals 128, 256
    want.extend((960..=1600).step_by(256)); // 960, 1216, 1472: every 256th call
    assert_eq!(at, want);
    assert_eq!(h.check_interval(), 256);
    assert_eq!(clock.reads(), 1 + want.len() as u64, "plus the start time");

    // A 400 µs deadline makes the spacing 50 µs: at 20 µs per call the interval stops at 4
    // (reads 80 µs apart), and the read on call 24 sees 460 µs: over.
    let clock = CountingClock::default();
    let mut h = ElasticHandle::with_deadline(grant(10), clock.clone(), us(400));
    let mut over_at = None;
    let mut at = Vec::new();
    for n in 1..=40u64 {
        let before = clock.reads();
        if h.over_limit().0 && over_at.is_none() {
            over_at = Some(n);
        }
        if clock.reads() != before {
            at.push(n);
        }
        clock.time.advance(us(20));
    }
    assert_eq!(at, vec![1, 2, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40]);
    assert_eq!(over_at, Some(24));
    assert_eq!(h.check_interval(), 4);
}

#[test]
fn interval_stops_growing_when_checks_are_far_apart_and_never_shrinks() {
    let clock = CountingClock::default();
    let mut h = ElasticHandle::new(grant(100), clock.clone());
    // Fast start: reads at 1, 2, 4, 8 leave the interval at 8.
    read_positions(&mut h, &clock, 8, Duration::ZERO);
    assert_eq!(h.check_interval(), 8);
    // Now every call takes 200 µs: 8 calls between reads = 1.6 ms apart (the first gap 1.4 ms):
    // the interval holds.
    let at = read_positions(&mut h, &clock, 40, Duration::from_micros(200));
    assert_eq!(at, vec![8, 16, 24, 32, 40]);
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
    let clock = CountingClock::default();
    let mut h = ElasticHandle::new(grant(100), clock.clone());
    let at = read_positions(&mut h, &clock, 10, Duration::from_millis(1));
    // Interval 0 -> 1 on the first check: every call reads, 1 ms apart, which is not closer
    // than the spacing: stays 1.
    assert_eq!(at, (1..=10).collect::<Vec<_>>());
    assert_eq!(h.check_interval(), 1);
}

#[test]
fn answer_is_cached_between_reads() {
    let clock = CountingClock::default();
    let mut h = ElasticHandle::new(grant(10), clock.clone());
    assert_eq!(h.over_limit(), (false, -10 * MS)); // read, interval 1
    assert_eq!(h.over_limit(), (false, -10 * MS)); // read at once: interval 2
    clock.time.advance(Duration::from_millis(4));
    assert_eq!(h.over_limit(), (false, -10 * MS)); // cached: the 4 ms are not seen
    assert_eq!(h.over_limit(), (false, -6 * MS)); // read (4 ms apart: interval stays 2)
    clock.time.advance(Duration::from_millis(20));
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
    assert!(calls <= interval, "{calls} calls at interval {interval}");
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
    assert_eq!(h.over_limit(), (true, -8 * MS)); // interval 1: this call reads
                                                 // A deadline past the slice is the slice.
    let clock = ManualClock::new();
    let mut h = ElasticHandle::with_deadline(grant(10), clock.clone(), Duration::from_secs(1));
    clock.advance(Duration::from_millis(10));
    assert_eq!(h.over_limit(), (true, 0));
}

#[test]
fn a_short_deadline_is_overrun_by_at_most_about_an_eighth() {
    // 1 µs of running time per call: with the 1 ms spacing alone, reads would land at calls
    // 1, 2, 4, ... 256, 512 and a 300 µs deadline would run to 511 µs.
    for deadline_us in [50u64, 250, 300, 900] {
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

#[test]
fn a_deadline_moved_on_keeps_the_interval_and_each_step_is_overrun_by_little() {
    // A caller that runs on past its 50 µs deadline three times, 1 µs per call: each new
    // deadline is reached within about an eighth of a step, and the interval learned before
    // the first move is kept (no burst of reads from 1 again).
    let clock = CountingClock::default();
    let step = Duration::from_micros(50);
    let mut h = ElasticHandle::with_deadline(grant(100), clock.clone(), step);
    for n in 1..=4u32 {
        let mut calls = 0u64;
        while !h.over_limit().0 {
            clock.time.advance(Duration::from_micros(1));
            calls += 1;
            assert!(calls < 10_000, "never over");
        }
        let used = h.used();
        assert!(
            used >= step * n && used <= step * n + step / 4,
            "step {n}: {used:?}"
        );
        let (interval, reads) = (h.check_interval(), clock.reads());
        h.set_deadline(h.deadline() + step);
        assert_eq!(h.check_interval(), interval, "the interval started over");
        assert_eq!(clock.reads(), reads, "moving the deadline read the clock");
        if n < 4 {
            assert!(
                !h.over_limit().0,
                "the cached answer ignored the new deadline"
            );
        }
    }
    // Never past the slice; the answer is against the deadline of the last read.
    h.set_deadline(Duration::from_secs(5));
    assert_eq!(h.deadline(), Duration::from_millis(100));
    clock.time.advance(Duration::from_millis(100));
    while !h.over_limit().0 {}
    h.set_deadline(Duration::from_millis(1));
    assert!(
        h.over_limit().0,
        "a deadline moved back below the used time is over"
    );
}
