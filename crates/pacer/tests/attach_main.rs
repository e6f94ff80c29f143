//! A runtime the library did not build (`#[tokio::main]`, a framework's runtime): `attach`
//! alone must give the governor a scheduling-latency signal, with or without `tokio_unstable`,
//! and the run-queue delay of the runtime's workers.

mod common;

use std::time::Duration;

use common::eventually;
use elastic_cpu_pacer::snapshot::Availability;
use elastic_cpu_pacer::Elastic;

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn an_attached_runtime_built_elsewhere_is_measured() {
    let elastic = Elastic::builder().build().unwrap();
    elastic.attach(&tokio::runtime::Handle::current()).unwrap();
    // Foreground tasks the probe can see waiting for the worker.
    let load = tokio::spawn(async {
        loop {
            tokio::spawn(async {}).await.unwrap();
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    });
    let seen = {
        let elastic = elastic.clone();
        tokio::task::spawn_blocking(move || {
            eventually("queue latency recorded", Duration::from_secs(30), || {
                elastic.snapshot().window.queue_latency.all.count > 0
            });
        })
    };
    seen.await.unwrap();
    load.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_runtimes_workers_are_read_for_the_run_queue_delay() {
    if !cfg!(target_os = "linux") {
        return; // the run-queue delay is read from /proc
    }
    let elastic = Elastic::builder().build().unwrap();
    elastic.attach(&tokio::runtime::Handle::current()).unwrap();
    // No thread hooks on this runtime: the sampler's tasks register the workers they run on.
    let seen = {
        let elastic = elastic.clone();
        tokio::task::spawn_blocking(move || {
            eventually("run-queue delay read", Duration::from_secs(30), || {
                elastic.snapshot().run_queue == Availability::On
            });
        })
    };
    seen.await.unwrap();
}

/// A pids limit makes the OS refuse the sampler's thread: `attach` says so and changes nothing,
/// and a runtime built through the `Elastic` that needs the sampler is an error, not a panic.
#[test]
fn attach_fails_where_the_os_refuses_the_sampler_thread() {
    use elastic_cpu_pacer::snapshot::CpusSource;
    use elastic_cpu_probe::{testing::fail_sampler_spawns, Probe, Source};

    let elastic = Elastic::builder().build().unwrap();
    // Not built through the `Elastic`: no task hooks, so `attach` starts the sampler.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let before = elastic.snapshot().cpus_source;
    fail_sampler_spawns(1);
    let err = elastic.attach(rt.handle()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "{err}");
    assert_eq!(elastic.snapshot().cpus_source, before, "nothing changed");
    assert_eq!(before, CpusSource::AvailableParallelism);
    elastic.attach(rt.handle()).unwrap();
    assert_ne!(
        elastic.snapshot().cpus_source,
        before,
        "sized for the runtime"
    );

    // Built through it: only without `tokio_unstable` does it need the sampler.
    fail_sampler_spawns(1);
    let built = elastic
        .runtime(tokio::runtime::Builder::new_current_thread())
        .build();
    match Probe::source() {
        Source::Sampler => assert!(built.is_err()),
        Source::Hooks => assert!(built.is_ok()),
    }
    fail_sampler_spawns(0);
}
