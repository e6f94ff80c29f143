//! The I/O probe's period for a quiet flag and a load (`IoProbeConfig::period_for`): always
//! within `period ..= idle_period`, whatever the load reads (NaN, negative, over 1), never
//! longer on a busier runtime, the full rate at full load, the quiet period when quiet.

use std::time::Duration;

use elastic_cpu_probe::IoProbeConfig;
use proptest::prelude::*;

fn config(period_us: u64, idle_factor: u64, quiet_factor: u64) -> IoProbeConfig {
    IoProbeConfig {
        period: Duration::from_micros(period_us),
        idle_period: Duration::from_micros(period_us * idle_factor),
        quiet_period: Duration::from_micros(period_us * idle_factor * quiet_factor),
        ..IoProbeConfig::default()
    }
}

proptest! {
    #[test]
    fn within_bounds_and_never_longer_when_busier(
        period_us in 1u64..10_000,
        idle_factor in 1u64..100,
        quiet_factor in 1u64..10,
        a in prop::num::f64::ANY,
        b in prop::num::f64::ANY,
    ) {
        let c = config(period_us, idle_factor, quiet_factor);
        prop_assert!(c.validate().is_ok());
        for busy in [a, b] {
            let p = c.period_for(false, busy);
            prop_assert!(p >= c.period && p <= c.idle_period, "{busy}: {p:?}");
        }
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        if !lo.is_nan() && !hi.is_nan() {
            prop_assert!(c.period_for(false, hi) <= c.period_for(false, lo));
        }
        prop_assert_eq!(c.period_for(true, a), c.quiet_period);
        prop_assert_eq!(c.period_for(false, 1.0), c.period);
    }
}

#[test]
fn an_idle_runtime_gets_the_idle_period_and_a_busy_one_the_period() {
    let c = IoProbeConfig::default();
    assert_eq!(c.period_for(false, 0.0), c.idle_period);
    assert_eq!(c.period_for(false, -1.0), c.idle_period);
    assert_eq!(
        c.period_for(false, f64::NAN),
        c.period,
        "no reading: the full rate"
    );
    assert_eq!(c.period_for(false, 2.0), c.period);
    // busy²: half busy is a quarter of the rate.
    assert_eq!(c.period_for(false, 0.5), c.period * 4);
}

#[test]
fn the_idle_period_lies_between_the_period_and_the_quiet_period() {
    let short = IoProbeConfig {
        idle_period: Duration::from_micros(500),
        ..IoProbeConfig::default()
    };
    assert_eq!(short.validate().unwrap_err().setting, "idle_period");
    let long = IoProbeConfig {
        idle_period: Duration::from_millis(60),
        ..IoProbeConfig::default()
    };
    assert_eq!(long.validate().unwrap_err().setting, "quiet_period");
}

/// An unchecked `idle_period` near `Duration::MAX` (it rounds past it as an `f64`): the period
/// is still within bounds, not a panic.
#[test]
fn an_idle_period_near_the_largest_duration_is_no_panic() {
    let c = IoProbeConfig {
        idle_period: Duration::MAX,
        ..IoProbeConfig::default()
    };
    assert_eq!(c.period_for(false, 0.0), Duration::MAX);
    assert_eq!(c.period_for(false, 1.0), c.period);
}
