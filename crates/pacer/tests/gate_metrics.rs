//! A connection gate's metrics: emitted on the governor tick, labelled with the gate's number.
#![cfg(feature = "metrics")]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::gate::GateSettings;
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
    let _first = elastic.connection_gate(GateSettings::new()).unwrap();
    let second = elastic
        .connection_gate(GateSettings::new().share(0.3, 0.3))
        .unwrap();
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
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let gate = key
            .key()
            .labels()
            .find(|l| l.key() == "gate")
            .map(|l| l.value().to_string());
        if gate.as_deref() != Some("1") {
            continue;
        }
        match (key.key().name(), value) {
            ("elastic_cpu_gate_admitted_total", DebugValue::Counter(n)) => admitted = Some(n),
            ("elastic_cpu_gate_share_ratio", DebugValue::Gauge(v)) => share = Some(v.into_inner()),
            _ => {}
        }
    }
    assert_eq!(admitted, Some(3));
    assert_eq!(share, Some(0.3));
}
