//! A `metrics` recorder that panics on one call costs that tick's metrics, not the governor: it
//! keeps ticking and granting, the snapshot counts the panic, and `elastic_cpu_governor_up`
//! goes from 1 to 0 only when the governor ends. One test in this file: it installs the
//! process's global recorder (the governor thread exports through that one).
#![cfg(feature = "metrics")]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::eventually;
use elastic_cpu_pacer::snapshot::GovernorState;
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::testing::GovernorEnd;
use elastic_cpu_pacer::{Elastic, PacedExt, Profile};
use metrics::{
    Counter, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

/// A hang guard, not a timing assertion.
const WITHIN: Duration = Duration::from_secs(30);

type Gauges = Arc<Mutex<HashMap<String, f64>>>;

/// Keeps the gauges' last values; panics on its `panic_at`-th registration.
struct Panicky {
    calls: AtomicUsize,
    panic_at: usize,
    gauges: Gauges,
}

impl Panicky {
    fn call(&self) {
        if self.calls.fetch_add(1, Ordering::Relaxed) + 1 == self.panic_at {
            panic!("the recorder's injected panic");
        }
    }
}

struct Kept(String, Gauges);

impl GaugeFn for Kept {
    fn increment(&self, value: f64) {
        *self.1.lock().unwrap().entry(self.0.clone()).or_default() += value;
    }
    fn decrement(&self, value: f64) {
        self.increment(-value);
    }
    fn set(&self, value: f64) {
        self.1.lock().unwrap().insert(self.0.clone(), value);
    }
}

impl Recorder for Panicky {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        self.call();
        Counter::noop()
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.call();
        Gauge::from_arc(Arc::new(Kept(key.name().to_string(), self.gauges.clone())))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        self.call();
        Histogram::noop()
    }
}

#[test]
fn a_panicking_recorder_costs_one_tick_of_metrics_not_the_governor() {
    let gauges = Gauges::default();
    // Well inside the second tick's export (a tick registers some 40 metrics).
    let recorder = Panicky {
        calls: AtomicUsize::new(0),
        panic_at: 60,
        gauges: gauges.clone(),
    };
    metrics::set_global_recorder(recorder).expect("the only recorder in this process");
    let tick = Duration::from_millis(10);
    let elastic = Elastic::builder()
        .profile(Profile::Custom(
            Profile::Cockroach.steps().tick(tick).window(tick * 10),
        ))
        .build()
        .unwrap();
    let rt = elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(1))
        .build()
        .unwrap();

    eventually("the recorder panicked", WITHIN, || {
        elastic.snapshot().recorder_panics == 1
    });
    let ticks = elastic.snapshot().ticks;
    eventually("ticks after the panic", WITHIN, || {
        elastic.snapshot().ticks >= ticks + 5
    });
    let s = elastic.snapshot();
    assert_eq!(s.governor, GovernorState::Running);
    assert_eq!(s.recorder_panics, 1, "one panic, one tick's metrics");
    assert!(!s.queue.closed);
    // Elastic work is still granted, on a queue that is still open.
    let grants = s.grants;
    let sum = rt.block_on(rt.spawn(async { (0..1000u64).sum::<u64>() }.paced(&elastic)));
    assert_eq!(sum.unwrap(), 499_500);
    let s = elastic.snapshot();
    assert!(s.grants > grants && !s.queue.closed, "{s:#?}");
    let up = || {
        gauges
            .lock()
            .unwrap()
            .get("elastic_cpu_governor_up")
            .copied()
    };
    eventually("the governor's up gauge is exported", WITHIN, || {
        up() == Some(1.0)
    });

    // It ends at its next tick: the gauge says so.
    elastic.end_governor(GovernorEnd::Exit);
    eventually("the governor ended", WITHIN, || {
        !elastic.snapshot().governor.is_running()
    });
    assert_eq!(elastic.snapshot().governor, GovernorState::Exited);
    eventually("the up gauge at 0", WITHIN, || up() == Some(0.0));
}
