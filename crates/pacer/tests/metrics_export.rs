//! Every governor tick emits the documented metrics through the `metrics` facade.
#![cfg(feature = "metrics")]

use std::time::Duration;

use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::{Elastic, METRICS};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

#[test]
fn a_tick_emits_every_documented_metric_with_a_description() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let elastic = Elastic::builder()
        .manual(clock.clone())
        .fixed_limit(0.25)
        .cpus(2.0)
        .build()
        .unwrap();
    // A connection gate, so its metrics are emitted too.
    let _gate = elastic.connection_gate(Default::default()).unwrap();
    // Samples in the window so the latency gauges are set too.
    elastic.probe().record_poll(
        Some(Duration::from_micros(300)),
        Some(Duration::from_micros(50)),
        false,
    );
    elastic
        .probe()
        .record_poll(None, Some(Duration::from_micros(80)), true);
    metrics::with_local_recorder(&recorder, || elastic.tick());

    let snapshot = snapshotter.snapshot().into_vec();
    let mut seen = Vec::new();
    for (key, unit, description, value) in &snapshot {
        let name = key.key().name().to_string();
        assert!(name.starts_with("elastic_cpu_"), "{name}");
        assert!(description.is_some(), "{name} has no description");
        assert!(unit.is_some(), "{name} has no unit");
        if name == "elastic_cpu_limit_ratio" {
            assert_eq!(value, &DebugValue::Gauge(0.25.into()));
        }
        if name == "elastic_cpu_sched_latency_p99_seconds" {
            let DebugValue::Gauge(v) = value else {
                panic!()
            };
            assert!((v.into_inner() - 300e-6).abs() < 10e-6, "{v}");
        }
        seen.push(name);
    }
    for (name, _, _) in METRICS {
        assert!(
            seen.iter().any(|s| s == name),
            "{name} not emitted: {seen:?}"
        );
    }
}
