//! Every invalid setting is a typed error naming the setting (docs/design.md §4 table, §6).

use elastic_cpu_core::{ControllerConfig, SettingError, StepController};
use std::time::Duration;

type Edit = fn(&mut ControllerConfig);

#[test]
fn every_invalid_setting_names_itself() {
    let table: &[(&str, Edit)] = &[
        ("target_p99", |c| c.target_p99 = Duration::ZERO),
        ("target_p99", |c| c.target_p99 = Duration::from_micros(49)),
        ("target_p99", |c| c.target_p99 = Duration::from_millis(1001)),
        ("min_share", |c| c.min_share = f64::NAN),
        ("min_share", |c| c.min_share = f64::INFINITY),
        ("min_share", |c| c.min_share = 0.0),
        ("min_share", |c| c.min_share = 0.009),
        ("min_share", |c| c.min_share = 1.01),
        ("min_share", |c| c.min_share = -0.5),
        ("max_share", |c| c.max_share = f64::NAN),
        ("max_share", |c| c.max_share = f64::NEG_INFINITY),
        ("max_share", |c| c.max_share = 0.04),
        ("max_share", |c| c.max_share = 1.5),
        ("max_share", |c| {
            c.min_share = 0.5;
            c.max_share = 0.4;
        }),
        ("inactive_point", |c| c.inactive_point = f64::NAN),
        ("inactive_point", |c| c.inactive_point = -0.1),
        ("inactive_point", |c| c.inactive_point = 1.1),
        ("inactive_point", |c| c.inactive_point = f64::INFINITY),
        ("delta_per_sec", |c| c.delta_per_sec = f64::NAN),
        ("delta_per_sec", |c| c.delta_per_sec = 0.0),
        ("delta_per_sec", |c| c.delta_per_sec = 0.00009),
        ("delta_per_sec", |c| c.delta_per_sec = 1.1),
        ("decrease_factor", |c| c.decrease_factor = f64::NAN),
        ("decrease_factor", |c| c.decrease_factor = 0.0),
        ("decrease_factor", |c| c.decrease_factor = -2.0),
        ("decrease_factor", |c| c.decrease_factor = f64::INFINITY),
        ("inactive_decrease_factor", |c| {
            c.inactive_decrease_factor = f64::NAN
        }),
        ("inactive_decrease_factor", |c| {
            c.inactive_decrease_factor = 0.0
        }),
        ("inactive_decrease_factor", |c| {
            c.inactive_decrease_factor = -1.0
        }),
        ("inactive_decrease_factor", |c| {
            c.inactive_decrease_factor = f64::INFINITY
        }),
        ("tick", |c| c.tick = Duration::ZERO),
        ("max_boost", |c| c.max_boost = 0),
        ("max_boost", |c| c.max_boost = 65),
        ("window", |c| c.window = Duration::from_millis(99)),
        ("window", |c| {
            c.tick = Duration::from_secs(3);
            c.window = Duration::from_millis(2500);
        }),
    ];
    for (i, (setting, edit)) in table.iter().enumerate() {
        let mut config = ControllerConfig::default();
        edit(&mut config);
        let err = config
            .validate()
            .expect_err(&format!("row {i} ({setting}) accepted"));
        assert_eq!(err.setting, *setting, "row {i}: {err}");
        assert!(!err.expected.is_empty(), "row {i}: {err}");
        let shown = err.to_string();
        assert!(shown.contains(setting), "row {i}: {shown}");
        // The constructors refuse it too, with the same error.
        assert_eq!(StepController::new(config.clone()).unwrap_err(), err);
        assert_eq!(
            StepController::with_initial_share(config, 0.5).unwrap_err(),
            err
        );
    }
}

#[test]
fn boundaries_are_valid() {
    let table: &[Edit] = &[
        |c| c.target_p99 = Duration::from_micros(50),
        |c| c.target_p99 = Duration::from_secs(1),
        |c| c.min_share = 0.01,
        |c| {
            c.min_share = 1.0;
            c.max_share = 1.0;
        },
        |c| {
            c.min_share = 0.05;
            c.max_share = 0.05;
        },
        |c| c.inactive_point = 0.0,
        |c| c.inactive_point = 1.0,
        |c| c.delta_per_sec = 0.0001,
        |c| c.delta_per_sec = 1.0,
        |c| c.decrease_factor = 1e-9,
        |c| c.inactive_decrease_factor = 100.0,
        |c| c.tick = Duration::from_nanos(1),
        |c| c.window = c.tick,
    ];
    for (i, edit) in table.iter().enumerate() {
        let mut config = ControllerConfig::default();
        edit(&mut config);
        assert_eq!(config.validate(), Ok(()), "row {i}");
    }
    assert_eq!(ControllerConfig::default().validate(), Ok(()));
}

#[test]
fn error_is_a_std_error() {
    let err: SettingError = ControllerConfig {
        tick: Duration::ZERO,
        ..ControllerConfig::default()
    }
    .validate()
    .unwrap_err();
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(err);
    assert_eq!(
        boxed.to_string(),
        "invalid `tick` = 0ns: expected above zero"
    );
}
