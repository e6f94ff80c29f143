//! Where `Snapshot::cpus` comes from: the builder, or the least of the runtime's workers, the
//! cgroup CPU quota and the affinity mask, read at attach (and again every `quota_reread`: see
//! `quota_change.rs`).

use elastic_cpu_pacer::snapshot::CpusSource;
use elastic_cpu_pacer::Elastic;
use elastic_cpu_probe::{cpu_affinity, cpu_quota};

fn two_workers(elastic: &Elastic) -> tokio::runtime::Runtime {
    elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2))
        .build()
        .unwrap()
}

#[test]
fn before_attach_it_is_available_parallelism() {
    let elastic = Elastic::builder().build().unwrap();
    let s = elastic.snapshot();
    let available = std::thread::available_parallelism().unwrap().get() as f64;
    assert_eq!(
        (s.cpus, s.cpus_source),
        (available, CpusSource::AvailableParallelism)
    );
}

#[test]
fn the_builder_value_wins() {
    let elastic = Elastic::builder().cpus(3.5).build().unwrap();
    assert_eq!(elastic.snapshot().cpus_source, CpusSource::Builder);
    let _rt = two_workers(&elastic);
    let s = elastic.snapshot();
    assert_eq!((s.cpus, s.cpus_source), (3.5, CpusSource::Builder));
}

/// Also the manual check inside a cgroup: with a 1.5-CPU quota this prints `cpus = 1.5 from
/// the cgroup v1 CPU quota`.
#[test]
fn attach_takes_the_least_of_workers_quota_and_affinity() {
    let elastic = Elastic::builder().build().unwrap();
    let _rt = two_workers(&elastic);
    let s = elastic.snapshot();
    println!(
        "cpus = {} from {} ({:?}); {}; affinity {:?}",
        s.cpus,
        s.cpus_source,
        s.cpus_source,
        cpu_quota(),
        cpu_affinity()
    );
    assert!(s.cpus > 0.0 && s.cpus <= 2.0, "{s:?}");
    match s.cpus_source {
        CpusSource::Workers => assert_eq!(s.cpus, 2.0),
        CpusSource::Quota(version) => {
            let quota = cpu_quota();
            assert_eq!(Some(s.cpus), quota.cpus());
            assert_eq!(quota.source(), version.into());
        }
        CpusSource::Affinity => assert_eq!(Some(s.cpus as usize), cpu_affinity()),
        CpusSource::AvailableParallelism => assert_eq!(cpu_affinity(), None),
        other => panic!("unexpected source {other:?}"),
    }
    // Nothing is larger than the figure taken.
    if let Some(quota) = cpu_quota().cpus() {
        assert!(s.cpus <= quota);
    }
    if let Some(affinity) = cpu_affinity() {
        assert!(s.cpus <= affinity as f64);
    }
    // The `Debug` of the handle shows it too.
    assert!(format!("{elastic:?}").contains("cpus_source"));
}
