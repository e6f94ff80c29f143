//! The adaptive step: far below the target (risen at most 2/3 of the way from
//! the climb's lowest p99 to the target) the steps up double (slow start), near it and on every
//! reversal they are single, steps down are never boosted. On a plant whose p99 lags the limit
//! by a whole window, on the manual clock.

use std::collections::VecDeque;
use std::time::Duration;

use elastic_cpu_core::{Clock, ControllerConfig, ManualClock, StepController};

const TICK: Duration = Duration::from_millis(100);
const TARGET: Duration = Duration::from_millis(1);

/// The library's default profile (elastic-cpu-pacer `Profile::Default`).
fn fast(max_boost: u32) -> ControllerConfig {
    ControllerConfig {
        delta_per_sec: 0.05,
        window: Duration::from_secs(1),
        max_boost,
        ..ControllerConfig::cockroach()
    }
}

/// A runtime whose tick latency grows steeply past a 0.4 limit (1 ms at ~0.46), seen through a
/// window of the last 10 ticks (its p99 taken as its worst tick: one bad tick of ten is 10 %
/// of the samples).
struct Plant {
    window: VecDeque<Duration>,
}

impl Plant {
    fn new() -> Plant {
        Plant {
            window: VecDeque::new(),
        }
    }

    fn latency(limit: f64) -> Duration {
        Duration::from_secs_f64(300e-6 * ((limit - 0.4) / 0.05).exp())
    }

    /// The window p99 after a tick run at `limit`.
    fn observe(&mut self, limit: f64) -> Duration {
        self.window.push_back(Plant::latency(limit));
        if self.window.len() > 10 {
            self.window.pop_front();
        }
        self.window.iter().copied().max().unwrap()
    }
}

/// The limit where the plant's latency meets the target.
fn rest() -> f64 {
    0.4 + 0.05 * (1e-3f64 / 300e-6).ln()
}

/// Runs `secs` of ticks from `start` with work always waiting; the limit after each tick.
fn run(config: ControllerConfig, start: f64, secs: u64) -> (Vec<f64>, Vec<u32>) {
    let clock = ManualClock::new();
    let mut c = StepController::with_initial_share(config, start).unwrap();
    let mut plant = Plant::new();
    let (mut limits, mut boosts) = (Vec::new(), Vec::new());
    while clock.now() < Duration::from_secs(secs) {
        let p99 = plant.observe(c.share());
        boosts.push(c.boost());
        limits.push(c.tick(Some(p99), TICK, true));
        clock.advance(TICK);
    }
    (limits, boosts)
}

/// Ticks until the limit is first within 20 % of `level`.
fn settle_ticks(limits: &[f64], level: f64) -> usize {
    limits
        .iter()
        .position(|&l| (l - level).abs() <= 0.2 * level)
        .expect("never within 20 %")
}

#[test]
fn from_the_floor_within_three_seconds() {
    let rest = rest();
    let (limits, _) = run(fast(8), 0.05, 20);
    let boosted = settle_ticks(&limits, rest);
    assert!(boosted <= 30, "took {boosted} ticks");
    // Fixed steps take the whole ramp at 0.005 a tick.
    let (fixed, _) = run(fast(1), 0.05, 20);
    let slow = settle_ticks(&fixed, rest);
    assert!(slow > 50, "fixed steps took {slow} ticks");
}

#[test]
fn no_boost_at_rest() {
    let rest = rest();
    let (limits, boosts) = run(fast(8), 0.05, 30);
    let after = settle_ticks(&limits, rest) + 20;
    // Once settled: single steps only, and the limit stays near its level.
    assert!(
        boosts[after..].iter().all(|&b| b <= 2),
        "{:?}",
        &boosts[after..]
    );
    for w in limits[after..].windows(2) {
        assert!(
            (w[1] - w[0]).abs() <= 0.01 + 1e-12,
            "step {} -> {}",
            w[0],
            w[1]
        );
    }
    // The lag alone makes the limit swing around its level (with fixed steps too); boosting
    // adds nothing to the swing once settled.
    let swing = |l: &[f64]| {
        l.iter().copied().fold(f64::MIN, f64::max) - l.iter().copied().fold(f64::MAX, f64::min)
    };
    let (fixed, _) = run(fast(1), rest, 30);
    let (boosted, fixed) = (swing(&limits[after..]), swing(&fixed[after..]));
    assert!(
        boosted <= fixed + 1e-9,
        "swing {boosted} with boosts, {fixed} without"
    );
    assert!(boosted <= 0.3 * rest, "swing {boosted}");
}

#[test]
fn boost_doubles_up_to_the_cap_and_resets() {
    let mut c = StepController::new(fast(8)).unwrap();
    let far = Some(Duration::from_micros(400));
    // Above 400 + 2/3 × (1000 − 400) = 800 µs: near.
    let near = Some(Duration::from_micros(900));
    let mut steps = Vec::new();
    for _ in 0..6 {
        let before = c.share();
        steps.push(((c.tick(far, TICK, true) - before) / 0.005).round() as u32);
    }
    assert_eq!(steps, [1, 2, 4, 8, 8, 8]);
    // Near the target: one single step, and the run starts over.
    let before = c.share();
    let l = c.tick(near, TICK, true);
    assert!((l - before - 0.005).abs() < 1e-12);
    assert_eq!(c.boost(), 1);
    // Far again: it doubles from 1.
    c.tick(far, TICK, true);
    assert_eq!(c.boost(), 2);
    // No waiters (idle) or no data: the run ends.
    c.tick(far, TICK, false);
    assert_eq!(c.boost(), 1);
    c.tick(far, TICK, true);
    c.tick(None, TICK, true);
    assert_eq!(c.boost(), 1);
}

#[test]
fn steps_down_are_never_boosted() {
    let mut c = StepController::with_initial_share(fast(8), 0.6).unwrap();
    let far = Some(Duration::from_micros(100));
    for _ in 0..4 {
        c.tick(far, TICK, true);
    }
    assert_eq!(c.boost(), 8);
    let high = Some(Duration::from_millis(50));
    for _ in 0..5 {
        let before = c.share();
        let after = c.tick(high, TICK, true);
        // delta × decrease factor, whatever the boost was.
        assert!((before - after - 0.01).abs() < 1e-12, "{before} -> {after}");
        assert_eq!(c.boost(), 1);
    }
}

#[test]
fn fixed_steps_without_boost() {
    let mut c = StepController::new(ControllerConfig::cockroach()).unwrap();
    for _ in 0..10 {
        c.tick(Some(Duration::from_micros(10)), TICK, true);
        assert_eq!(c.boost(), 1);
    }
    assert!((c.share() - 0.051).abs() < 1e-12);
}

#[test]
fn the_plant_rests_where_latency_meets_the_target() {
    assert!(Plant::latency(rest()) <= TARGET + Duration::from_nanos(1));
    assert!(Plant::latency(rest() + 0.01) > TARGET);
}

#[test]
fn after_a_descent_boosts_stop_at_half_its_start() {
    let far = Some(Duration::from_micros(100));
    let high = Some(Duration::from_millis(5));
    let step = |c: &mut StepController, p99| {
        let before = c.share();
        ((c.tick(p99, TICK, true) - before) / 0.005).round() as i64
    };
    // A descent from 0.6: the threshold is 0.3, wherever the descent ends.
    let mut c = StepController::with_initial_share(fast(8), 0.6).unwrap();
    assert_eq!(step(&mut c, high), -2);
    // A dip at rest (far below the target right after): single steps, above the threshold.
    for _ in 0..10 {
        assert_eq!(step(&mut c, far), 1);
    }
    // Back at 0.6, where the descent began, and still far below the target for a whole window
    // (10 ticks): the threshold is lifted and the boost runs again (the descent's cause is gone).
    let steps: Vec<i64> = (0..6).map(|_| step(&mut c, far)).collect();
    assert_eq!(
        steps,
        [1, 1, 1, 2, 4, 8],
        "boosting again after a calm window"
    );
    // Near the target there it lifts nothing: single steps.
    let near = Some(Duration::from_micros(800));
    let mut c = StepController::with_initial_share(fast(8), 0.6).unwrap();
    assert_eq!(step(&mut c, high), -2);
    for i in 0..30 {
        let p99 = if i >= 2 { near } else { far };
        assert_eq!(step(&mut c, p99), 1, "tick {i}");
    }
    // Down to 0.2 in one long descent: the threshold stays 0.3 (set where it began).
    let mut c = StepController::with_initial_share(fast(8), 0.6).unwrap();
    for _ in 0..40 {
        step(&mut c, high);
    }
    assert!((c.share() - 0.2).abs() < 1e-9, "{}", c.share());
    // Below the threshold the boost runs again, and its steps end at the threshold.
    let steps: Vec<i64> = (0..8).map(|_| step(&mut c, far)).collect();
    assert_eq!(
        steps,
        [1, 2, 4, 8, 5, 1, 1, 1],
        "0.2 -> 0.3, then single steps"
    );
    // Before any descent boosts run up to max_share.
    let mut fresh = StepController::with_initial_share(fast(8), 0.05).unwrap();
    for _ in 0..20 {
        fresh.tick(far, TICK, true);
    }
    assert_eq!(fresh.share(), 0.75);
}

/// A tight target: the runtime's p99 with no elastic work is already 0.62–0.75 of it (the
/// demo's auto target with its load generator on the same cores: baseline + one quantum), and
/// elastic work adds little (the resting level is the ceiling). Measured from zero, half of
/// these ticks were "near" the target and the climb took mostly single and double steps.
#[test]
fn a_tight_target_climbs_from_the_floor_within_three_seconds() {
    let mut c = StepController::new(fast(8)).unwrap();
    let mut limits = Vec::new();
    for i in 0..100 {
        let p99 = Duration::from_micros(if i % 2 == 0 { 620 } else { 750 });
        limits.push(c.tick(Some(p99), TICK, true));
    }
    let ticks = settle_ticks(&limits, 0.75);
    assert!(ticks <= 30, "took {ticks} ticks");
}

#[test]
fn far_below_is_measured_from_the_lowest_p99_of_the_last_eight_windows() {
    let mut c = StepController::new(fast(8)).unwrap();
    let boost_after = |c: &mut StepController, us: u64| {
        c.tick(Some(Duration::from_micros(us)), TICK, true);
        c.boost()
    };
    // The low is 600 µs: far below up to 600 + 2/3 × 400 ≈ 867 µs.
    let boosts: Vec<u32> = [600, 700, 800, 860]
        .iter()
        .map(|&us| boost_after(&mut c, us))
        .collect();
    assert_eq!(boosts, [2, 4, 8, 8]);
    // Past that line: a single step, and the run starts over.
    assert_eq!(boost_after(&mut c, 880), 1);
    assert_eq!(boost_after(&mut c, 860), 2);
    // 8 windows (80 ticks) on, the 600 µs low is forgotten: from a 900 µs low, 930 µs is far
    // below (line 967 µs), 980 µs is not.
    for _ in 0..80 {
        c.tick(Some(Duration::from_micros(900)), TICK, true);
    }
    assert_eq!(boost_after(&mut c, 980), 1);
    assert_eq!(boost_after(&mut c, 930), 2);
}

#[test]
fn a_descent_below_twice_the_floor_sets_no_threshold() {
    let steps_after = |start: f64| {
        let mut c = StepController::with_initial_share(fast(8), start).unwrap();
        // One window over the target (start-up noise in a fresh controller's first windows).
        c.tick(Some(Duration::from_micros(1500)), TICK, true);
        (0..5)
            .map(|_| {
                let before = c.share();
                let after = c.tick(Some(Duration::from_micros(600)), TICK, true);
                ((after - before) / 0.005).round() as i64
            })
            .collect::<Vec<_>>()
    };
    // From the floor and from 0.08: half of either lies under the floor, so the climb boosts.
    assert_eq!(steps_after(0.05), [1, 2, 4, 8, 8]);
    assert_eq!(steps_after(0.08), [1, 2, 4, 8, 8]);
    // From 0.12 the threshold is 0.06 and the limit is above it: single steps.
    assert_eq!(steps_after(0.12), [1, 1, 1, 1, 1]);
}

#[test]
fn a_tight_target_lifts_the_threshold_once_back_where_the_descent_began() {
    // One window over the target at 0.25 (noise early in a climb): threshold 0.125.
    let mut c = StepController::with_initial_share(fast(8), 0.25).unwrap();
    c.tick(Some(Duration::from_micros(1500)), TICK, true);
    // Then the runtime's usual 0.62–0.75 of the target: far below, measured from its low.
    let boosts: Vec<u32> = (0..20)
        .map(|i| {
            let us = if i % 2 == 0 { 620 } else { 750 };
            c.tick(Some(Duration::from_micros(us)), TICK, true);
            c.boost()
        })
        .collect();
    // Single steps back to 0.25, a whole window there, then the boost runs again.
    assert!(boosts[..11].iter().all(|&b| b == 1), "{boosts:?}");
    assert_eq!(boosts.iter().max(), Some(&8), "{boosts:?}");
}

/// `tick`'s period is the caller's (a stalled governor, a clock that jumped): any length is
/// one step, never an overflow of the slow-start state it accumulates.
#[test]
fn a_huge_period_is_one_step_not_an_overflow() {
    let config = ControllerConfig::cockroach();
    let mut c = StepController::with_initial_share(config.clone(), config.max_share).unwrap();
    let above = Some(2 * TARGET);
    let far_below = Some(Duration::from_micros(10));
    // A descent from the ceiling, then back at it, far below the target: the calm is counted.
    c.tick(above, TICK, true);
    c.tick(far_below, Duration::from_secs(1000), true);
    assert_eq!(c.share(), config.max_share);
    c.tick(far_below, Duration::from_secs(1), true);
    for _ in 0..3 {
        let share = c.tick(far_below, Duration::MAX, true);
        assert_eq!(share, config.max_share);
    }
    let share = c.tick(above, Duration::MAX, true);
    assert_eq!(share, config.min_share);
}
