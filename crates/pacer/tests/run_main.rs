//! `ElasticBuilder::run`, the `#[tokio::main]` of the library: the runtime it builds is measured
//! by the task hooks where `tokio_unstable` is on (a runtime given to `attach` never is), it
//! returns what `main` returns, and it fails with a typed error, never a panic.

use elastic_cpu_pacer::snapshot::ProbeSource;
use elastic_cpu_pacer::{BuildError, Elastic};

/// What measures a runtime built by the library: the hooks need `tokio_unstable`.
const BUILT: ProbeSource = if cfg!(tokio_unstable) {
    ProbeSource::TaskHooks
} else {
    ProbeSource::Sampler
};

#[test]
fn run_measures_its_runtime_with_the_hooks_where_tokio_unstable_is_on() {
    let (source, io_probe_on, elastic) = Elastic::builder()
        .run(|elastic| async move {
            let sum = elastic.spawn(async { (0..1_000u64).sum::<u64>() }).unwrap();
            assert_eq!(sum.await.unwrap(), 499_500);
            let s = elastic.snapshot();
            (s.probe_source, s.io_probe.is_on(), elastic)
        })
        .unwrap();
    assert_eq!(source, BUILT);
    assert!(io_probe_on, "the I/O wake-up probe runs");
    let after = elastic.snapshot();
    assert!(after.queue.closed, "shut down once main returned");
    assert!(!after.governor.is_running());
}

#[test]
fn a_runtime_given_to_attach_is_sampled_even_with_tokio_unstable() {
    let elastic = Elastic::builder().build().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    elastic.attach(rt.handle()).unwrap();
    assert_eq!(elastic.snapshot().probe_source, ProbeSource::Sampler);
}

#[test]
fn run_refuses_a_bad_setting_without_running_main() {
    let mut ran = false;
    let err = Elastic::builder()
        .share(0.5, 0.2)
        .run(|_| async { ran = true })
        .unwrap_err();
    let BuildError::Setting(e) = err else {
        panic!("{err}")
    };
    assert_eq!(e.setting, "max_share");
    assert!(!ran);
}

/// Without the hooks the runtime needs the sampler's thread: where the OS refuses it, `run`
/// says so.
#[cfg(not(tokio_unstable))]
#[test]
fn run_fails_where_the_os_refuses_the_sampler_thread() {
    elastic_cpu_probe::testing::fail_sampler_spawns(1);
    let err = Elastic::builder().run(|_| async {}).unwrap_err();
    let BuildError::Runtime(e) = &err else {
        panic!("{err}")
    };
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
}
