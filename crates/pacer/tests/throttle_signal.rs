//! The cgroup's throttling as a second signal: a throttled period steps the limit down for a
//! probe window, on the manual clock, with a fake `cpu.stat`.

mod common;

use std::time::Duration;

use common::{FakeCgroup, MS};
use elastic_cpu_pacer::settings::{Brake, Inputs};
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::testing::ManualClock;
use elastic_cpu_pacer::Elastic;

/// A controlled `Elastic` at 0.5 on the manual clock (1 s window of 100 ms ticks, 1 ms target).
fn elastic(clock: &ManualClock, throttle_signal: bool) -> Elastic {
    Elastic::builder()
        .manual(clock.clone())
        .cpus(2.0)
        .target_p99(MS)
        .initial_share(0.5)
        .brake(Brake::Off)
        .inputs(Inputs::default().throttling(throttle_signal))
        .build()
        .unwrap()
}

/// One tick of a healthy foreground (latency far below the target).
fn healthy_tick(elastic: &Elastic, clock: &ManualClock) {
    elastic
        .probe()
        .record_poll(Some(Duration::from_micros(100)), None, false);
    clock.advance(100 * MS);
    elastic.tick();
}

/// Tick both, return `off`'s limit minus `on`'s.
fn gap_after_tick(on: &Elastic, off: &Elastic, clock: &ManualClock) -> f64 {
    healthy_tick(on, clock);
    healthy_tick(off, clock);
    off.snapshot().share - on.snapshot().share
}

#[test]
fn a_throttled_period_steps_the_limit_down_for_exactly_a_window() {
    let clock = ManualClock::new();
    let cg = FakeCgroup::new("throttle-steps");
    // Two identical governors on the same latency, one of them deaf to throttling: the gap
    // between their limits is what the throttling did.
    let on = elastic(&clock, true);
    let off = elastic(&clock, false);
    on.watch_throttling(&cg.0);
    off.watch_throttling(&cg.0);
    for _ in 0..5 {
        assert_eq!(gap_after_tick(&on, &off, &clock), 0.0);
    }
    assert_eq!(on.snapshot().throttled_periods, 0);
    // One throttled period: each tick of the next 1 s window (10 ticks) steps down, healthy
    // latency notwithstanding.
    cg.set(1);
    let gaps: Vec<f64> = (0..10).map(|_| gap_after_tick(&on, &off, &clock)).collect();
    assert!(gaps[0] > 0.0, "{gaps:?}");
    assert!(
        gaps.windows(2).all(|w| w[1] > w[0]),
        "every tick of the window steps down: {gaps:?}"
    );
    assert_eq!(on.snapshot().throttled_periods, 1);
    assert_eq!(off.snapshot().throttled_periods, 0);
    // The window has passed: both follow the latency alike again.
    let last = gaps[9];
    for _ in 0..5 {
        assert!((gap_after_tick(&on, &off, &clock) - last).abs() < 1e-9);
    }
    // Throttled again: down again.
    cg.set(4);
    assert!(gap_after_tick(&on, &off, &clock) > last);
    assert_eq!(on.snapshot().throttled_periods, 4);
}

#[test]
fn a_missing_cpu_stat_is_no_signal() {
    let clock = ManualClock::new();
    let on = elastic(&clock, true);
    let off = elastic(&clock, false);
    on.watch_throttling(std::env::temp_dir().join("elastic-cpu-no-such-cgroup"));
    for _ in 0..12 {
        assert_eq!(gap_after_tick(&on, &off, &clock), 0.0);
    }
    assert_eq!(on.snapshot().throttled_periods, 0);
}
