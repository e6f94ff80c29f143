//! Every bad setting is a typed error naming the setting, never a panic.

use elastic_cpu_probe::{Probe, ProbeConfig, SettingError};
use std::time::Duration;

fn err(config: ProbeConfig) -> SettingError {
    let via_validate = config.validate().unwrap_err();
    let via_new = Probe::new(config).unwrap_err();
    assert_eq!(via_validate, via_new);
    via_new
}

/// The error names `setting` and shows `value` as given.
fn refuses(e: &SettingError, setting: &str, value: &str) {
    assert_eq!((e.setting, e.value.as_str()), (setting, value), "{e}");
    assert!(!e.expected.is_empty(), "{e}");
}

fn base() -> ProbeConfig {
    ProbeConfig::default()
}

#[test]
fn default_is_valid() {
    let c = ProbeConfig::default();
    assert_eq!(c.tick, Duration::from_millis(100));
    assert_eq!(c.window, Duration::from_millis(2500));
    assert_eq!(c.lowest, Duration::from_micros(1));
    assert_eq!(c.highest, Duration::from_secs(10));
    assert_eq!(c.significant_figures, 2);
    assert_eq!(c.poll_time_every, 8);
    assert_eq!(c.alarm_at, None);
    assert_eq!(c.intervals(), 25);
    let probe = Probe::new(c.clone()).unwrap();
    assert_eq!(probe.config(), &c);
}

#[test]
fn zero_tick() {
    let e = err(ProbeConfig {
        tick: Duration::ZERO,
        ..base()
    });
    refuses(&e, "tick", "0ns");
    assert!(e.to_string().contains("`tick`"), "{e}");
}

#[test]
fn window_shorter_than_tick() {
    let e = err(ProbeConfig {
        window: Duration::from_millis(99),
        ..base()
    });
    refuses(&e, "window", "99ms");
    assert!(e.to_string().contains("`window`"), "{e}");
    // window == tick is the smallest valid window: one interval.
    let one = ProbeConfig {
        window: Duration::from_millis(100),
        ..base()
    };
    assert_eq!(one.intervals(), 1);
    assert!(Probe::new(one).is_ok());
}

#[test]
fn window_not_a_multiple_of_tick_rounds_up() {
    let c = ProbeConfig {
        window: Duration::from_millis(250),
        ..base()
    };
    assert_eq!(c.intervals(), 3);
}

#[test]
fn zero_lowest() {
    let e = err(ProbeConfig {
        lowest: Duration::ZERO,
        ..base()
    });
    refuses(&e, "lowest", "0ns");
    assert!(e.to_string().contains("`lowest`"), "{e}");
}

#[test]
fn bounds_out_of_order() {
    for (lowest, highest) in [
        (Duration::from_secs(10), Duration::from_secs(1)), // reversed
        (Duration::from_secs(1), Duration::from_secs(1)),  // equal
        (Duration::from_micros(10), Duration::from_micros(19)), // less than 2x
    ] {
        let e = err(ProbeConfig {
            lowest,
            highest,
            ..base()
        });
        refuses(&e, "highest", &format!("{highest:?}"));
        assert!(e.to_string().contains("`highest`"), "{e}");
    }
    // Exactly 2x is the smallest valid range.
    assert!(Probe::new(ProbeConfig {
        lowest: Duration::from_micros(10),
        highest: Duration::from_micros(20),
        ..base()
    })
    .is_ok());
}

#[test]
fn highest_too_large() {
    let e = err(ProbeConfig {
        highest: Duration::MAX,
        ..base()
    });
    refuses(&e, "highest", &format!("{:?}", Duration::MAX));
    assert!(e.to_string().contains("`highest`"), "{e}");
}

#[test]
fn significant_figures_out_of_range() {
    for n in [0u8, 6, 255] {
        let e = err(ProbeConfig {
            significant_figures: n,
            ..base()
        });
        refuses(&e, "significant_figures", &n.to_string());
        assert!(e.to_string().contains("`significant_figures`"), "{e}");
    }
    for n in 1..=5u8 {
        assert!(Probe::new(ProbeConfig {
            significant_figures: n,
            ..base()
        })
        .is_ok());
    }
}

#[test]
fn lowest_too_large_for_the_significant_figures() {
    let lowest = Duration::from_secs(3600 * 24 * 30); // ~2^51 ns
    let e = err(ProbeConfig {
        lowest,
        highest: lowest * 4,
        significant_figures: 5,
        ..base()
    });
    refuses(&e, "lowest", &format!("{lowest:?}"));
    assert!(e.to_string().contains("`lowest`"), "{e}");
    // The same bounds with fewer digits fit.
    assert!(Probe::new(ProbeConfig {
        lowest,
        highest: lowest * 4,
        significant_figures: 1,
        ..base()
    })
    .is_ok());
}

#[test]
fn zero_poll_time_every() {
    let e = err(ProbeConfig {
        poll_time_every: 0,
        ..base()
    });
    refuses(&e, "poll_time_every", "0");
    assert!(e.to_string().contains("`poll_time_every`"), "{e}");
}

#[test]
fn zero_alarm() {
    let e = err(ProbeConfig {
        alarm_at: Some(Duration::ZERO),
        ..base()
    });
    refuses(&e, "alarm_at", "Some(0ns)");
    assert!(e.to_string().contains("`alarm_at`"), "{e}");
    // The smallest positive threshold is valid.
    assert!(Probe::new(ProbeConfig {
        alarm_at: Some(Duration::from_nanos(1)),
        ..base()
    })
    .is_ok());
}

#[test]
fn zero_outlier_threshold() {
    let e = err(ProbeConfig {
        outlier_threshold: Some(Duration::ZERO),
        ..base()
    });
    refuses(&e, "outlier_threshold", "Some(0ns)");
    assert_eq!(base().outlier_threshold, None, "off by default");
}

#[test]
fn is_a_std_error() {
    let e: Box<dyn std::error::Error + Send + Sync> = Box::new(err(ProbeConfig {
        tick: Duration::ZERO,
        ..base()
    }));
    assert_eq!(e.to_string(), "invalid `tick` = 0ns: expected above zero");
}

#[test]
fn every_valid_config_builds_and_records() {
    // Validation and histogram construction agree over the whole range of bounds.
    for exp in (0..62u32).step_by(3) {
        for sf in [1u8, 2, 4, 5] {
            let lowest = Duration::from_nanos(1u64 << exp);
            let highest = Duration::from_nanos((1u64 << exp).saturating_mul(4).min(u64::MAX / 2));
            let config = ProbeConfig {
                lowest,
                highest,
                significant_figures: sf,
                ..base()
            };
            match config.validate() {
                Ok(()) => {
                    let p = Probe::new(config).unwrap();
                    p.record_poll(Some(lowest * 3), Some(Duration::MAX), false);
                    p.rotate();
                    assert_eq!(p.window().queue_latency.all.count, 1);
                }
                Err(e) => assert_eq!(Probe::new(config).unwrap_err(), e),
            }
        }
    }
}
