//! Inside a CPU quota the governor holds elastic work to 90 % of what the rest of the process
//! leaves of it (`ElasticBuilder::quota_headroom`). The process's CPU time is real here, so the
//! tests check bounds that hold whatever it is: the cap never exceeds 90 % of the quota, and the
//! rate never exceeds the cap (or the controller's floor).

mod common;

use common::FakeCgroup;
use elastic_cpu_pacer::settings::{Brake, Inputs};
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::Elastic;

/// A fixed limit of every CPU on 2 CPUs: 2 CPUs of tokens a second unless something caps it.
fn elastic(headroom: bool) -> Elastic {
    Elastic::builder()
        .fixed_share(1.0)
        .cpus(2.0)
        .brake(Brake::Off)
        .inputs(Inputs::default().quota_headroom(headroom))
        .build()
        .unwrap()
}

#[test]
fn the_rate_stays_within_the_quota_the_foreground_leaves() {
    let cg = FakeCgroup::new("headroom-caps");
    let elastic = elastic(true);
    assert_eq!(elastic.snapshot().quota_headroom, None, "no quota seen yet");
    elastic.watch_quota(&cg.0, 0.5);
    for _ in 0..3 {
        elastic.tick();
    }
    let s = elastic.snapshot();
    let cap = s
        .quota_headroom
        .expect("two readings of the process's CPU time");
    assert!((0.0..=0.9 * 0.5).contains(&cap), "{cap}");
    // The floor (min_share 0.05 of 2 CPUs) is 0.1 CPUs; the quota's cap is at most 0.45.
    assert!(
        s.queue.rate_nanos_per_sec <= 450_000_000,
        "rate {} above the quota's cap",
        s.queue.rate_nanos_per_sec
    );
    assert_eq!(s.share, 1.0, "the cap leaves the limit alone");
}

#[test]
fn without_a_quota_or_with_the_cap_off_the_rate_is_the_limits() {
    let cg = FakeCgroup::new("headroom-off");
    let free = elastic(true);
    let off = elastic(false);
    off.watch_quota(&cg.0, 0.5);
    for _ in 0..3 {
        free.tick();
        off.tick();
    }
    for e in [&free, &off] {
        let s = e.snapshot();
        assert_eq!(s.quota_headroom, None);
        // 2 CPUs, less at most the largest overhead correction (1 / 1.5).
        assert!(s.queue.rate_nanos_per_sec >= 1_333_000_000, "{s:#?}");
    }
}

#[cfg(feature = "metrics")]
#[test]
fn the_headroom_is_exported_inside_a_quota() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let cg = FakeCgroup::new("headroom-metric");
    let elastic = elastic(true);
    elastic.watch_quota(&cg.0, 0.5);
    elastic.tick();
    elastic.tick();
    metrics::with_local_recorder(&recorder, || elastic.tick());
    let headroom = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .find(|(key, _, _, _)| key.key().name() == "elastic_cpu_quota_headroom_cpus")
        .map(|(_, _, _, value)| value);
    let Some(DebugValue::Gauge(cpus)) = headroom else {
        panic!("not exported: {headroom:?}");
    };
    assert!((0.0..=0.45).contains(&cpus.into_inner()));
}
