//! Arbitrary values through every builder setter and every gate setting: the build is `Ok` (and
//! the governor ticks on it) or a typed error naming a setting, never a panic. The same inputs
//! have cargo-fuzz targets in `fuzz/` (`builder`, `gate_settings`).

use std::time::Duration;

use elastic_cpu_pacer::gate::{GateSettings, QueueOrder};
use elastic_cpu_pacer::settings::{
    Brake, Enforcement, Inputs, OutlierThreshold, Placement, Steps, Timing,
};
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::testing::ManualClock;
use elastic_cpu_pacer::{BuildError, Elastic, ElasticBuilder, Profile};
use proptest::prelude::*;

/// Any float, the ones a range check forgets among them.
fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        0.0f64..=1.2,
        prop::sample::select(vec![
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            f64::MIN_POSITIVE,
            1.0,
            65536.0,
        ]),
    ]
}

/// Any duration, the extremes among them.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        any::<u64>().prop_map(Duration::from_nanos),
        (0u64..=2_000_000).prop_map(Duration::from_micros),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        prop::sample::select(vec![Duration::ZERO, Duration::MAX]),
    ]
}

fn profile() -> impl Strategy<Value = Profile> {
    prop_oneof![
        Just(Profile::Default),
        Just(Profile::Cockroach),
        (
            (float(), float(), float(), float()),
            (duration(), duration(), any::<u32>()),
        )
            .prop_map(
                |((delta, decrease, inactive, point), (tick, window, boost))| {
                    Profile::Custom(
                        Steps::default()
                            .delta_per_sec(delta)
                            .decrease_factor(decrease)
                            .inactive_decrease_factor(inactive)
                            .inactive_point(point)
                            .tick(tick)
                            .window(window)
                            .max_boost(boost),
                    )
                }
            ),
    ]
}

fn enforcement() -> impl Strategy<Value = Enforcement> {
    (
        duration(),
        duration(),
        any::<(bool, bool, bool)>(),
        prop::sample::select(vec![Timing::Adaptive, Timing::ThreadCpu, Timing::Wall]),
    )
        .prop_map(|(slice, quantum, (os_yield, unstack, cap), timing)| {
            Enforcement::default()
                .slice(slice)
                .quantum(quantum)
                .os_yield(os_yield)
                .unstack_workers(unstack)
                .cap_concurrency(cap)
                .timing(timing)
        })
}

/// Each setter called with an arbitrary value, or not at all.
#[allow(clippy::type_complexity)]
fn builder() -> impl Strategy<Value = ElasticBuilder> {
    (
        (
            prop::option::of(profile()),
            prop::option::of(duration()),
            prop::option::of((float(), float())),
            prop::option::of(float()),
            prop::option::of(float()),
            prop::option::of(float()),
        ),
        (
            prop::option::of(prop::option::of(prop::option::of(duration()))),
            prop::option::of(any::<(bool, bool, bool, bool)>()),
            prop::option::of(enforcement()),
            prop::option::of(prop::sample::select(vec![
                Placement::Auto,
                Placement::Runtime,
                Placement::IdlePool,
            ])),
            prop::option::of(prop::option::of(prop::option::of(duration()))),
        ),
    )
        .prop_map(
            |(
                (profile, target, share, initial, fixed, cpus),
                (brake, inputs, enforcement, placement, outliers),
            )| {
                let mut b = Elastic::builder();
                if let Some(p) = profile {
                    b = b.profile(p);
                }
                if let Some(t) = target {
                    b = b.target_p99(t);
                }
                if let Some((min, max)) = share {
                    b = b.share(min, max);
                }
                if let Some(s) = initial {
                    b = b.initial_share(s);
                }
                if let Some(s) = fixed {
                    b = b.fixed_share(s);
                }
                if let Some(c) = cpus {
                    b = b.cpus(c);
                }
                if let Some(brake) = brake {
                    b = b.brake(match brake {
                        None => Brake::Default,
                        Some(None) => Brake::Off,
                        Some(Some(at)) => Brake::At(at),
                    });
                }
                if let Some((io_wakeup, run_queue, throttling, quota_headroom)) = inputs {
                    b = b.inputs(
                        Inputs::default()
                            .io_wakeup(io_wakeup)
                            .run_queue(run_queue)
                            .throttling(throttling)
                            .quota_headroom(quota_headroom),
                    );
                }
                if let Some(e) = enforcement {
                    b = b.enforcement(e);
                }
                if let Some(p) = placement {
                    b = b.placement(p);
                }
                if let Some(o) = outliers {
                    b = b.outlier_threshold(match o {
                        None => OutlierThreshold::Target,
                        Some(None) => OutlierThreshold::Off,
                        Some(Some(at)) => OutlierThreshold::At(at),
                    });
                }
                b
            },
        )
}

/// Each gate setting given an arbitrary value, or left at its default.
fn gate_settings() -> impl Strategy<Value = GateSettings> {
    (
        prop::option::of(duration()),
        prop::option::of(prop_oneof![any::<usize>(), 0usize..2_000_000]),
        prop::option::of(duration()),
        prop::option::of((float(), float())),
        prop::option::of(float()),
        prop::option::of(prop::sample::select(vec![
            QueueOrder::Lifo,
            QueueOrder::Fifo,
        ])),
        prop::option::of(any::<bool>()),
    )
        .prop_map(|(deadline, queue, cost, share, initial, order, cap)| {
            let mut s = GateSettings::new();
            if let Some(d) = deadline {
                s = s.deadline(d);
            }
            if let Some(n) = queue {
                s = s.max_queue(n);
            }
            if let Some(c) = cost {
                s = s.setup_cost(c);
            }
            if let Some((min, max)) = share {
                s = s.share(min, max);
            }
            if let Some(i) = initial {
                s = s.initial_share(i);
            }
            if let Some(o) = order {
                s = s.order(o);
            }
            if let Some(on) = cap {
                s = s.cap_concurrency(on);
            }
            s
        })
}

proptest! {
    #[test]
    fn any_builder_settings_build_or_name_the_setting(b in builder()) {
        let clock = ManualClock::new();
        match b.manual(clock.clone()).build() {
            Ok(elastic) => {
                for _ in 0..3 {
                    clock.advance(Duration::from_millis(100));
                    elastic.tick();
                }
                let s = elastic.snapshot();
                prop_assert!((0.0..=1.0).contains(&s.share), "{:?}", s.share);
                prop_assert!(s.cpus.is_finite() && s.cpus > 0.0, "{:?}", s.cpus);
            }
            Err(BuildError::Setting(e)) => {
                prop_assert!(!e.setting.is_empty() && !e.expected.is_empty(), "{}", e);
            }
            Err(e) => prop_assert!(false, "not a setting error: {}", e),
        }
    }

    #[test]
    fn any_gate_settings_make_a_gate_or_name_the_setting(settings in gate_settings()) {
        let clock = ManualClock::new();
        let elastic = Elastic::builder().manual(clock.clone()).build().unwrap();
        match elastic.connection_gate(settings) {
            Ok(gate) => {
                let _waiting = gate.admit(gate.default_deadline());
                clock.advance(Duration::from_millis(100));
                elastic.tick();
                let s = gate.snapshot();
                prop_assert!(s.share.is_finite() && s.share > 0.0 && s.share <= 1.0, "{:?}", s);
            }
            Err(e) => prop_assert!(!e.setting.is_empty() && !e.expected.is_empty(), "{}", e),
        }
    }
}

proptest! {
    // A real governor thread per case: fewer cases.
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn any_builder_settings_start_a_governor_or_name_the_setting(b in builder()) {
        match b.build() {
            Ok(elastic) => elastic.shutdown(),
            Err(BuildError::Setting(e)) => prop_assert!(!e.setting.is_empty(), "{}", e),
            Err(e) => prop_assert!(false, "not a setting error: {}", e),
        }
    }
}
