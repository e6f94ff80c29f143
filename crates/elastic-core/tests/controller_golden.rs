//! Controller trajectories from docs/design.md §4 on exact numbers (defaults: delta = 0.001/s, so
//! 0.0001 per 100 ms tick; down ×2; idle decay ×0.25 toward 0.05 + 0.10 × 0.70 = 0.12).

use elastic_cpu_core::{ControllerConfig, StepController};
use std::time::Duration;

const TICK: Duration = Duration::from_millis(100);
const HIGH: Option<Duration> = Some(Duration::from_millis(3)); // above the 1 ms target
const LOW: Option<Duration> = Some(Duration::from_micros(200)); // below it

fn close(a: f64, b: f64) {
    assert!((a - b).abs() < 1e-9, "{a} != {b}");
}

fn at(limit: f64) -> StepController {
    StepController::with_initial_share(ControllerConfig::default(), limit).unwrap()
}

#[test]
fn starts_at_min() {
    let c = StepController::new(ControllerConfig::default()).unwrap();
    assert_eq!(c.share(), 0.05);
    assert_eq!(c.config(), &ControllerConfig::cockroach());
}

#[test]
fn above_target_steps_down_by_delta_times_factor() {
    let mut c = at(0.5);
    let l = c.tick(HIGH, TICK, true); // waiters do not matter above target
    close(l, 0.5 - 0.0002);
    for _ in 0..9 {
        c.tick(HIGH, TICK, false);
    }
    close(c.share(), 0.498); // -0.2 %/s
}

#[test]
fn above_target_stops_at_min() {
    let mut c = at(0.0502);
    close(c.tick(HIGH, TICK, true), 0.05);
    assert_eq!(c.tick(HIGH, TICK, true), 0.05);
    assert_eq!(c.tick(HIGH, TICK, false), 0.05);
}

#[test]
fn below_target_with_waiters_steps_up_by_delta() {
    let mut c = StepController::new(ControllerConfig::default()).unwrap();
    for _ in 0..100 {
        c.tick(LOW, TICK, true);
    }
    close(c.share(), 0.06); // +0.1 %/s for 10 s
}

#[test]
fn at_target_is_not_above_target() {
    let mut c = at(0.3);
    close(c.tick(Some(Duration::from_millis(1)), TICK, true), 0.3001);
}

#[test]
fn increase_stops_at_max() {
    let mut c = at(0.74995);
    assert_eq!(c.tick(LOW, TICK, true), 0.75);
    assert_eq!(c.tick(LOW, TICK, true), 0.75);
}

#[test]
fn idle_decays_toward_inactive_point_and_stops_there() {
    let mut c = at(0.2);
    close(c.tick(LOW, TICK, false), 0.2 - 0.000025);
    for _ in 0..999 {
        c.tick(LOW, TICK, false);
    }
    close(c.share(), 0.175);
    // 0.175 - 0.12 = 0.055 = 2200 more ticks; run past that: clamps at exactly the inactive point.
    for _ in 0..3000 {
        c.tick(LOW, TICK, false);
    }
    close(c.share(), 0.12);
    assert!(c.share() >= 0.12);
}

#[test]
fn idle_below_inactive_point_holds() {
    let mut c = at(0.08);
    for _ in 0..100 {
        assert_eq!(c.tick(LOW, TICK, false), 0.08);
    }
}

#[test]
fn no_data_never_increases() {
    // With waiters: hold.
    let mut c = at(0.3);
    for _ in 0..50 {
        assert_eq!(c.tick(None, TICK, true), 0.3);
    }
    // At the floor with waiters: still hold.
    let mut c = StepController::new(ControllerConfig::default()).unwrap();
    assert_eq!(c.tick(None, TICK, true), 0.05);
    // Without waiters: only the idle decay.
    let mut c = at(0.3);
    close(c.tick(None, TICK, false), 0.3 - 0.000025);
    let mut c = at(0.1);
    assert_eq!(c.tick(None, TICK, false), 0.1);
}

#[test]
fn delta_scales_with_period() {
    let mut c = at(0.3);
    close(c.tick(LOW, Duration::from_secs(1), true), 0.301);
    close(c.tick(HIGH, Duration::from_secs(2), true), 0.297);
    assert_eq!(c.tick(LOW, Duration::ZERO, true), c.share());
    // A huge period clamps instead of overshooting.
    assert_eq!(c.tick(HIGH, Duration::from_secs(1_000_000), true), 0.05);
    assert_eq!(c.tick(LOW, Duration::from_secs(1_000_000), true), 0.75);
}

#[test]
fn mixed_trajectory() {
    let mut c = StepController::new(ControllerConfig::default()).unwrap();
    let seq = [
        (LOW, true),   // 0.0501
        (LOW, true),   // 0.0502
        (LOW, true),   // 0.0503
        (HIGH, true),  // 0.0501
        (LOW, false),  // below inactive point 0.12: hold 0.0501
        (None, true),  // hold
        (LOW, true),   // 0.0502
        (HIGH, false), // 0.0500
        (HIGH, false), // floor
    ];
    let want = [
        0.0501, 0.0502, 0.0503, 0.0501, 0.0501, 0.0501, 0.0502, 0.05, 0.05,
    ];
    for ((p99, waiters), want) in seq.into_iter().zip(want) {
        close(c.tick(p99, TICK, waiters), want);
    }
}

#[test]
fn custom_profile() {
    // A faster profile: delta 0.01/s, min 0.1, max 0.5, inactive point 0.5 -> 0.3.
    let config = ControllerConfig {
        min_share: 0.1,
        max_share: 0.5,
        inactive_point: 0.5,
        delta_per_sec: 0.01,
        decrease_factor: 4.0,
        inactive_decrease_factor: 1.0,
        ..ControllerConfig::default()
    };
    let mut c = StepController::new(config).unwrap();
    assert_eq!(c.share(), 0.1);
    close(c.tick(LOW, TICK, true), 0.101);
    let mut c = StepController::with_initial_share(c.config().clone(), 0.4).unwrap();
    close(c.tick(HIGH, TICK, true), 0.396);
    close(c.tick(LOW, TICK, false), 0.395);
    for _ in 0..1000 {
        c.tick(LOW, TICK, false);
    }
    close(c.share(), 0.3);
}

#[test]
fn initial_limit_is_clamped_or_rejected() {
    assert_eq!(at(0.0).share(), 0.05);
    assert_eq!(at(-1.0).share(), 0.05);
    assert_eq!(at(f64::INFINITY).share(), 0.75);
    assert_eq!(at(0.4).share(), 0.4);
    let err =
        StepController::with_initial_share(ControllerConfig::default(), f64::NAN).unwrap_err();
    assert_eq!(err.setting, "initial_share");
}
