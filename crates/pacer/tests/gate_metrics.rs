//! A connection gate's metrics: emitted on the governor tick, labelled with the gate's name.
#![cfg(feature = "metrics")]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::gate::GateSettings;
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::Elastic;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

#[test]
fn a_tick_emits_each_gates_counts_under_its_label() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let elastic = Elastic::builder()
        .manual(clock.clone())
        .running_clock(clock.clone())
        .fixed_share(0.25)
        .cpus(2.0)
        .build()
        .unwrap();
    let first = elastic.connection_gate(GateSettings::new()).unwrap();
    let second = elastic
        .connection_gate(GateSettings::new().share(0.3, 0.3).name("tls"))
        .unwrap();
    let third = elastic.connection_gate(GateSettings::new()).unwrap();
    // By default a gate is named by its place in the order gates were made.
    assert_eq!(
        (first.name(), second.name(), third.name()),
        ("gate0", "tls", "gate2")
    );
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..3 {
        let mut a = second.admit(Duration::from_secs(1));
        let Poll::Ready(Ok(p)) = Pin::new(&mut a).poll(&mut cx) else {
            panic!("not admitted")
        };
        clock.advance(Duration::from_millis(2));
        drop(p);
    }
    metrics::with_local_recorder(&recorder, || elastic.tick());
    let mut admitted = None;
    let mut share = None;
    let mut setup_cpu = None;
    let mut labels = Vec::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let gate = key
            .key()
            .labels()
            .find(|l| l.key() == "gate")
            .map(|l| l.value().to_string());
        if key.key().name() == "elastic_cpu_gate_admitted_total" {
            labels.extend(gate.clone());
        }
        if gate.as_deref() != Some("tls") {
            continue;
        }
        match (key.key().name(), value) {
            ("elastic_cpu_gate_admitted_total", DebugValue::Counter(n)) => admitted = Some(n),
            ("elastic_cpu_gate_share_ratio", DebugValue::Gauge(v)) => share = Some(v.into_inner()),
            ("elastic_cpu_gate_setup_cpu_microseconds_total", DebugValue::Counter(n)) => {
                setup_cpu = Some(n)
            }
            _ => {}
        }
    }
    assert_eq!(admitted, Some(3));
    assert_eq!(share, Some(0.3));
    // Three setups of 2 ms each on the running clock, counted in microseconds.
    assert_eq!(setup_cpu, Some(6_000));
    labels.sort();
    assert_eq!(labels, ["gate0", "gate2", "tls"]);
}

#[test]
fn a_gate_name_is_a_label_or_an_error_naming_it() {
    let elastic = Elastic::builder().fixed_share(0.25).build().unwrap();
    for bad in [String::new(), "x".repeat(65), "a\nb".to_string()] {
        let err = elastic
            .connection_gate(GateSettings::new().name(bad.clone()))
            .err()
            .unwrap_or_else(|| panic!("{bad:?} accepted"));
        assert_eq!(err.setting, "name", "{bad:?}");
    }
    let longest = "x".repeat(64);
    let gate = elastic
        .connection_gate(GateSettings::new().name(longest.clone()))
        .unwrap();
    assert_eq!(gate.name(), longest);
}
