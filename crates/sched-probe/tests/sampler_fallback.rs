//! The sampling fallback: a sampler on a runtime produces queue-latency samples after a while,
//! and stops when dropped or when the runtime is gone. Poll counts with generous deadlines; no
//! timing assertions. Runs with and without `tokio_unstable` (with hooks the runtime's own polls
//! add samples too, hence `>=`).

mod common;

use common::wait_until;
use std::time::Duration;

use elastic_cpu_probe::{Probe, ProbeConfig, ThreadRegistry, ThreadRole};

fn long_window() -> Probe {
    // Nothing leaves the window during the test.
    Probe::new(ProbeConfig {
        tick: Duration::from_millis(100),
        window: Duration::from_secs(1000),
        ..ProbeConfig::default()
    })
    .unwrap()
}

fn window_queue_count(probe: &Probe) -> u64 {
    probe.rotate();
    probe.window().queue_latency.foreground.count
}

fn samples_then_stops(rt: &tokio::runtime::Runtime, probe: &Probe) {
    let sampler = probe.start_sampler(rt.handle()).unwrap();
    assert!(sampler.is_running());
    wait_until(|| sampler.samples() >= 10);
    assert!(window_queue_count(probe) >= 10);
    assert!(format!("{sampler:?}").contains("Sampler"));

    drop(sampler); // stops and joins the thread, aborting the probe tasks in flight
    let after_drop = window_queue_count(probe);
    std::thread::sleep(Duration::from_millis(200));
    // A probe task mid-poll at the abort still records, at most one per worker (two here):
    // a running sampler would have added about 200.
    let late = window_queue_count(probe) - after_drop;
    assert!(late <= 2, "{late} samples after drop");
}

#[test]
fn multi_thread_runtime() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let probe = long_window();
    samples_then_stops(&rt, &probe);
}

#[test]
fn current_thread_runtime_driven_by_block_on() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let probe = long_window();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::scope(|s| {
        let rt = &rt;
        // Someone has to drive a current-thread runtime.
        s.spawn(move || rt.block_on(async { stop_rx.await.ok() }));
        samples_then_stops(rt, &probe);
        stop_tx.send(()).unwrap();
    });
}

#[test]
fn samples_are_foreground_queue_latency_only() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let probe = long_window();
    let sampler = probe.start_sampler(rt.handle()).unwrap();
    wait_until(|| sampler.samples() >= 5);
    drop(sampler);
    drop(rt);
    probe.rotate();
    let w = probe.window();
    assert!(w.queue_latency.foreground.count >= 5);
    assert!(w.queue_latency.foreground.p99.is_some());
    assert_eq!(w.queue_latency.elastic.count, 0);
    assert_eq!(w.poll_time.elastic.count, 0);
    if elastic_cpu_probe::Probe::source() == elastic_cpu_probe::Source::Sampler {
        // The sampler itself measures no poll time.
        assert_eq!(w.poll_time.all.count, 0);
    }
}

#[test]
fn sampler_thread_ends_when_the_runtime_is_gone() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let probe = long_window();
    let sampler = probe.start_sampler(rt.handle()).unwrap();
    wait_until(|| sampler.samples() >= 1);
    drop(rt);
    wait_until(|| !sampler.is_running());
    drop(sampler); // still fine after the thread ended
}

#[test]
fn a_registering_sampler_registers_the_workers_until_the_runtime_is_gone() {
    if elastic_cpu_probe::current_tid().is_err() {
        return; // thread ids come from /proc
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let worker = rt.block_on(async {
        tokio::spawn(async { elastic_cpu_probe::current_tid().unwrap() })
            .await
            .unwrap()
    });
    let registry = ThreadRegistry::new();
    let probe = long_window();
    let sampler = probe
        .start_sampler_registering(rt.handle(), &registry)
        .unwrap();
    wait_until(|| sampler.samples() >= 10);
    assert_eq!(registry.threads(), vec![(worker, ThreadRole::Worker)]);
    drop(rt);
    wait_until(|| !sampler.is_running());
    assert!(registry.is_empty(), "left registered: {registry:?}");
}

#[test]
fn a_quiet_sampler_samples_on_and_goes_back_to_the_full_rate() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let probe = long_window();
    let sampler = probe.start_sampler(rt.handle()).unwrap();
    sampler.set_quiet(true);
    assert!(sampler.is_quiet());
    assert!(format!("{sampler:?}").contains("quiet: true"));
    // Sparser, not stopped.
    let before = sampler.samples();
    wait_until(|| sampler.samples() >= before + 3);
    sampler.set_quiet(false);
    assert!(!sampler.is_quiet());
    let before = sampler.samples();
    wait_until(|| sampler.samples() >= before + 20);
    assert!(window_queue_count(&probe) >= before + 20);
}
