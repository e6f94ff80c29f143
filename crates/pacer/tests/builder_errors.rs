//! Every bad setting is a typed error naming the setting, never a panic.

use std::time::Duration;

use elastic_cpu_pacer::{BuildError, Elastic, ElasticBuilder};

fn err(b: ElasticBuilder) -> BuildError {
    b.build().expect_err("must be refused")
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
        ("delta_per_sec", Elastic::builder().delta_per_sec(nan)),
        ("delta_per_sec", Elastic::builder().delta_per_sec(0.0)),
        ("min_share", Elastic::builder().min_share(nan)),
        ("min_share", Elastic::builder().min_share(0.0)),
        ("max_share", Elastic::builder().max_share(1.5)),
        (
            "max_share",
            Elastic::builder().min_share(0.6).max_share(0.5),
        ),
        ("initial_share", Elastic::builder().initial_share(0.9)),
        ("initial_share", Elastic::builder().initial_share(nan)),
        ("fixed_limit", Elastic::builder().fixed_limit(0.0)),
        ("fixed_limit", Elastic::builder().fixed_limit(nan)),
        ("fixed_limit", Elastic::builder().fixed_limit(1.01)),
        ("slice", Elastic::builder().slice(Duration::ZERO)),
        ("slice", Elastic::builder().slice(Duration::from_secs(1))),
        ("quantum", Elastic::builder().quantum(Duration::ZERO)),
        (
            "quantum",
            Elastic::builder()
                .slice(Duration::from_millis(10))
                .quantum(Duration::from_millis(20)),
        ),
        (
            "brake_at",
            Elastic::builder().brake_at(Duration::from_micros(5)),
        ),
        ("cpus", Elastic::builder().cpus(0.0)),
        ("cpus", Elastic::builder().cpus(nan)),
        (
            "tick",
            Elastic::builder().controller(elastic_cpu_core::ControllerConfig {
                tick: Duration::ZERO,
                ..Default::default()
            }),
        ),
        (
            "window",
            Elastic::builder().controller(elastic_cpu_core::ControllerConfig {
                window: Duration::from_millis(50),
                ..Default::default()
            }),
        ),
    ];
    for (setting, builder) in cases {
        let BuildError::Setting(e) = err(builder) else {
            panic!("{setting}: not a setting error")
        };
        // The builder method's own name, the value, and what it accepts.
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
    let BuildError::Setting(e) = err(Elastic::builder().min_share(0.0)) else {
        panic!()
    };
    assert_eq!((e.value.as_str(), e.expected), ("0", "0.01 ..= 1.0"));
    let BuildError::Setting(e) = err(Elastic::builder().max_share(1.5)) else {
        panic!()
    };
    assert_eq!((e.value.as_str(), e.expected), ("1.5", "0.05 ..= 1.0"));
    let BuildError::Setting(e) = err(Elastic::builder().slice(Duration::from_secs(1))) else {
        panic!()
    };
    assert_eq!((e.value.as_str(), e.expected), ("1s", "10 ms ..= 100 ms"));
}

#[test]
fn the_defaults_build() {
    let e = Elastic::builder().build().unwrap();
    let s = e.snapshot();
    assert!(s.limit > 0.0 && s.limit <= 1.0);
}
