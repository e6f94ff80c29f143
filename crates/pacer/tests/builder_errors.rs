//! Every bad setting is a typed error naming the setting, never a panic.

use std::time::Duration;

use elastic_cpu_pacer::settings::{Brake, Enforcement, OutlierThreshold, Steps};
use elastic_cpu_pacer::{BuildError, Elastic, ElasticBuilder, Profile};

fn err(b: ElasticBuilder) -> BuildError {
    b.build().expect_err("must be refused")
}

/// The default profile's steps with one field changed.
fn steps(f: impl FnOnce(&mut Steps)) -> Profile {
    let mut s = Profile::Default.steps();
    f(&mut s);
    Profile::Custom(s)
}

/// The default enforcement with one field changed.
fn enforcement(f: impl FnOnce(&mut Enforcement)) -> Enforcement {
    let mut e = Enforcement::default();
    f(&mut e);
    e
}

#[test]
fn every_bad_setting_is_refused_by_name() {
    let nan = f64::NAN;
    let cases: Vec<(&str, ElasticBuilder)> = vec![
        ("target_p99", Elastic::builder().target_p99(Duration::ZERO)),
        (
            "target_p99",
            Elastic::builder().target_p99(Duration::from_secs(5)),
        ),
        (
            "delta_per_sec",
            Elastic::builder().profile(steps(|s| s.delta_per_sec = nan)),
        ),
        (
            "delta_per_sec",
            Elastic::builder().profile(steps(|s| s.delta_per_sec = 0.0)),
        ),
        ("min_share", Elastic::builder().share(nan, 0.75)),
        ("min_share", Elastic::builder().share(0.0, 0.75)),
        ("max_share", Elastic::builder().share(0.05, 1.5)),
        ("max_share", Elastic::builder().share(0.6, 0.5)),
        ("initial_share", Elastic::builder().initial_share(0.9)),
        ("initial_share", Elastic::builder().initial_share(nan)),
        ("fixed_share", Elastic::builder().fixed_share(0.0)),
        ("fixed_share", Elastic::builder().fixed_share(nan)),
        ("fixed_share", Elastic::builder().fixed_share(1.01)),
        (
            "slice",
            Elastic::builder().enforcement(enforcement(|e| e.slice = Duration::ZERO)),
        ),
        (
            "slice",
            Elastic::builder().enforcement(enforcement(|e| e.slice = Duration::from_secs(1))),
        ),
        (
            "quantum",
            Elastic::builder().enforcement(enforcement(|e| e.quantum = Duration::ZERO)),
        ),
        (
            "quantum",
            Elastic::builder().enforcement(enforcement(|e| {
                e.slice = Duration::from_millis(10);
                e.quantum = Duration::from_millis(20);
            })),
        ),
        (
            "brake",
            Elastic::builder().brake(Brake::At(Duration::from_micros(5))),
        ),
        (
            "outlier_threshold",
            Elastic::builder().outlier_threshold(OutlierThreshold::At(Duration::from_nanos(999))),
        ),
        ("cpus", Elastic::builder().cpus(0.0)),
        ("cpus", Elastic::builder().cpus(nan)),
        (
            "tick",
            Elastic::builder().profile(steps(|s| s.tick = Duration::ZERO)),
        ),
        (
            "tick",
            Elastic::builder().profile(steps(|s| s.tick = Duration::from_micros(999))),
        ),
        (
            "tick",
            Elastic::builder().profile(steps(|s| {
                s.tick = Duration::MAX;
                s.window = Duration::MAX;
            })),
        ),
        (
            "window",
            Elastic::builder().profile(steps(|s| s.window = Duration::from_millis(50))),
        ),
        (
            "window",
            Elastic::builder().profile(steps(|s| s.window = Duration::from_millis(100_001))),
        ),
        (
            "max_boost",
            Elastic::builder().profile(steps(|s| s.max_boost = 0)),
        ),
    ];
    for (setting, builder) in cases {
        let BuildError::Setting(e) = err(builder) else {
            panic!("{setting}: not a setting error")
        };
        // The setting's own name, the value, and what it accepts.
        assert_eq!(e.setting, setting, "{e}");
        assert!(!e.value.is_empty() && !e.expected.is_empty(), "{e}");
        assert_eq!(
            e.to_string(),
            format!("invalid `{setting}` = {}: expected {}", e.value, e.expected)
        );
    }
}

#[test]
fn errors_say_the_valid_range() {
    let BuildError::Setting(e) = err(Elastic::builder().share(0.0, 0.75)) else {
        panic!()
    };
    assert_eq!((e.value.as_str(), e.expected), ("0", "0.01 ..= 1.0"));
    let BuildError::Setting(e) = err(Elastic::builder().share(0.05, 1.5)) else {
        panic!()
    };
    assert_eq!((e.value.as_str(), e.expected), ("1.5", "0.05 ..= 1.0"));
    let BuildError::Setting(e) =
        err(Elastic::builder().enforcement(enforcement(|e| e.slice = Duration::from_secs(1))))
    else {
        panic!()
    };
    assert_eq!((e.value.as_str(), e.expected), ("1s", "10 ms ..= 100 ms"));
}

#[test]
fn the_defaults_build() {
    let e = Elastic::builder().build().unwrap();
    let s = e.snapshot();
    assert!(s.share > 0.0 && s.share <= 1.0);
}

#[test]
fn the_tick_and_window_bounds_build() {
    for (tick, window) in [
        (Duration::from_millis(1), Duration::from_millis(1)),
        (Duration::from_millis(1), Duration::from_secs(1)),
        (Duration::from_secs(3600), Duration::from_secs(3600)),
    ] {
        let built = Elastic::builder()
            .profile(steps(|s| {
                s.tick = tick;
                s.window = window;
            }))
            .build();
        assert!(built.is_ok(), "{tick:?}, {window:?}: {:?}", built.err());
    }
}
