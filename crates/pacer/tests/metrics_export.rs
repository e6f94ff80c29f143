//! Every governor tick emits the documented metrics through the `metrics` facade.
#![cfg(feature = "metrics")]

use std::time::Duration;

use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::metrics::METRICS;
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::Elastic;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

#[test]
fn a_tick_emits_every_documented_metric_with_a_description() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let elastic = Elastic::builder()
        .manual(clock.clone())
        .fixed_share(0.25)
        .cpus(2.0)
        .build()
        .unwrap();
    // A connection gate, so its metrics are emitted too.
    let _gate = elastic.connection_gate(Default::default()).unwrap();
    // An idle pool, so the idle class's metrics are emitted too.
    #[cfg(feature = "idle-pool")]
    let _pool = elastic.idle_runtime(1).unwrap();
    // Samples in the window so the latency gauges are set too.
    elastic.probe().record_poll(
        Some(Duration::from_micros(300)),
        Some(Duration::from_micros(50)),
        false,
    );
    elastic
        .probe()
        .record_poll(None, Some(Duration::from_micros(80)), true);
    // A poll over the outlier threshold (the 1 ms target), for the counter by spawn site.
    let probe = elastic.probe();
    let site = format!("{}:{}", file!(), line!() + 1);
    probe.record_poll(None, Some(Duration::from_millis(3)), false);
    metrics::with_local_recorder(&recorder, || elastic.tick());

    let target = elastic.snapshot().target;
    let snapshot = snapshotter.snapshot().into_vec();
    let mut seen = Vec::new();
    for (key, unit, description, value) in &snapshot {
        let name = key.key().name().to_string();
        assert!(name.starts_with("elastic_cpu_"), "{name}");
        assert!(description.is_some(), "{name} has no description");
        assert!(unit.is_some(), "{name} has no unit");
        // Whatever only grows is a counter, named `_total`; everything else is a gauge.
        assert_eq!(
            name.ends_with("_total"),
            matches!(value, DebugValue::Counter(_)),
            "{name}: {value:?}"
        );
        if name == "elastic_cpu_share_ratio" {
            assert_eq!(value, &DebugValue::Gauge(0.25.into()));
        }
        if name == "elastic_cpu_target_seconds" {
            assert_eq!(value, &DebugValue::Gauge(target.as_secs_f64().into()));
        }
        if name == "elastic_cpu_outlier_polls_total" {
            let labels: Vec<_> = key.key().labels().map(|l| (l.key(), l.value())).collect();
            assert_eq!(labels, vec![("site", site.as_str())]);
            assert_eq!(value, &DebugValue::Counter(1));
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
        if MEASURED_FOR_REAL.contains(name) || *name == "elastic_cpu_quota_headroom_cpus" {
            continue; // a manual clock turns those off: the tests below
        }
        if cfg!(not(feature = "idle-pool")) && name.starts_with("elastic_cpu_idle_") {
            continue; // no pool to report on
        }
        assert!(
            seen.iter().any(|s| s == name),
            "{name} not emitted: {seen:?}"
        );
    }
}

/// The gauges of one tick's export, by name (labels left out).
fn gauges(recorder: &DebuggingRecorder, elastic: &Elastic) -> Vec<(String, f64)> {
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(recorder, || elastic.tick());
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Gauge(v) => Some((key.key().name().to_string(), v.into_inner())),
            _ => None,
        })
        .collect()
}

#[test]
fn the_share_bounds_and_the_pause_are_gauges_that_follow_the_handle() {
    let recorder = DebuggingRecorder::new();
    let elastic = Elastic::builder()
        .manual(ManualClock::new())
        .share(0.1, 0.6)
        .build()
        .unwrap();
    let read = |gauges: &[(String, f64)], name: &str| {
        gauges
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("{name} not emitted: {gauges:?}"))
    };
    let before = gauges(&recorder, &elastic);
    assert_eq!(read(&before, "elastic_cpu_min_share_ratio"), 0.1);
    assert_eq!(read(&before, "elastic_cpu_max_share_ratio"), 0.6);
    assert_eq!(read(&before, "elastic_cpu_paused"), 0.0);

    elastic.set_share(0.2, 0.5).unwrap();
    elastic.pause();
    let after = gauges(&recorder, &elastic);
    assert_eq!(read(&after, "elastic_cpu_min_share_ratio"), 0.2);
    assert_eq!(read(&after, "elastic_cpu_max_share_ratio"), 0.5);
    assert_eq!(read(&after, "elastic_cpu_paused"), 1.0);
}

/// The signal's I/O and run-queue components: measured on a real runtime only.
const MEASURED_FOR_REAL: [&str; 3] = [
    "elastic_cpu_io_latency_p99_seconds",
    "elastic_cpu_run_queue_delay_seconds",
    "elastic_cpu_run_queue_wait_ratio",
];

#[test]
fn the_signal_components_are_emitted_once_measured() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let elastic = Elastic::builder().build().unwrap();
    let rt = elastic
        .runtime(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_time(),
        )
        .build()
        .unwrap();
    let linux = cfg!(target_os = "linux") && std::path::Path::new("/proc/thread-self").exists();
    // Workers that wake often: a run-queue delay is read from 100 timeslices in the window.
    let ticker = rt.spawn(async {
        loop {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    // A hang guard, not a timing assertion.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let s = elastic.snapshot();
        if s.io_p99.is_some()
            && (!linux || (s.run_queue_delay.is_some() && s.run_queue_wait.is_some()))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never measured: {s:#?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    metrics::with_local_recorder(&recorder, || elastic.tick());
    let seen: Vec<String> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, _)| key.key().name().to_string())
        .collect();
    for name in MEASURED_FOR_REAL {
        if name.contains("run_queue") && !linux {
            continue;
        }
        assert!(
            seen.iter().any(|s| s == name),
            "{name} not emitted: {seen:?}"
        );
    }
    assert!(seen.iter().any(|s| s == "elastic_cpu_signal_p99_seconds"));
    ticker.abort();
    drop(rt);
}
