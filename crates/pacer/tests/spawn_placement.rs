//! Where `Elastic::spawn` and `spawn_blocking` run elastic work: pinned by the setting, or by
//! default, with a CPU quota or without, on the runtime or (with more workers than CPUs) the
//! idle pool (the quota scripted, the rest real); the pool shut down with the `Elastic`.

mod common;

#[cfg(target_os = "linux")]
use common::{this_thread_policy, SCHED_IDLE};

use std::time::Duration;

use elastic_cpu_pacer::settings::Placement;
use elastic_cpu_pacer::snapshot::PlacementReason;
use elastic_cpu_pacer::testing::{ManualClock, Script};
use elastic_cpu_pacer::{Elastic, ElasticBuilder};

/// A manual clock, 2 CPUs, the environment scripted (no quota unless `quota`).
fn builder(script: &Script, quota: Option<f64>) -> ElasticBuilder {
    if let Some(cpus) = quota {
        script.quota(cpus);
    }
    Elastic::builder()
        .manual(ManualClock::new())
        .script(script.clone())
        .cpus(2.0)
}

fn runtime(elastic: &Elastic) -> tokio::runtime::Runtime {
    elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2))
        .build()
        .unwrap()
}

/// Whether the calling thread runs at idle priority.
fn at_idle() -> bool {
    #[cfg(target_os = "linux")]
    return this_thread_policy() == SCHED_IDLE;
    #[cfg(not(target_os = "linux"))]
    false
}

/// Runs a task through `spawn` and says whether its thread was at idle priority.
fn spawned_at_idle(elastic: &Elastic, rt: &tokio::runtime::Runtime) -> bool {
    let _in_rt = rt.enter();
    rt.block_on(elastic.spawn(async { at_idle() }).unwrap())
        .unwrap()
}

/// Runs a closure through `spawn_blocking` and says whether its thread was at idle priority.
fn spawned_blocking_at_idle(elastic: &Elastic, rt: &tokio::runtime::Runtime) -> bool {
    let _in_rt = rt.enter();
    rt.block_on(elastic.spawn_blocking(at_idle).unwrap())
        .unwrap()
}

#[test]
fn pinned_to_the_runtime_it_needs_one() {
    let script = Script::new();
    let elastic = builder(&script, None)
        .placement(Placement::Runtime)
        .build()
        .unwrap();
    let s = elastic.snapshot();
    assert_eq!(
        (s.placement, s.placement_reason),
        (Placement::Runtime, PlacementReason::Setting),
        "pinned before anything is spawned"
    );
    assert!(
        elastic.spawn(async {}).is_err(),
        "no runtime on this thread"
    );
    let rt = runtime(&elastic);
    assert!(!spawned_at_idle(&elastic, &rt));
    assert!(!spawned_blocking_at_idle(&elastic, &rt));
    let s = elastic.snapshot();
    assert_eq!(
        (s.placement, s.placement_reason),
        (Placement::Runtime, PlacementReason::Setting)
    );
    assert!(s.used > Duration::ZERO || s.grants > 0, "paced: {s:#?}");
}

#[test]
fn inside_a_quota_short_polls_start_on_the_runtime_too() {
    let script = Script::new();
    let elastic = builder(&script, Some(1.5)).build().unwrap();
    let rt = runtime(&elastic);
    assert!(!spawned_at_idle(&elastic, &rt));
    let s = elastic.snapshot();
    assert_eq!(s.placement, Placement::Runtime);
    match s.placement_reason {
        // The pool is made, for when polls run long; inside a quota its class starts at the
        // elastic share, not at every CPU.
        PlacementReason::ShortPolls => assert_eq!(s.idle_share, Some(s.share)),
        PlacementReason::NoIdlePriority | PlacementReason::PoolFailed => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn pinned_to_the_pool_even_inside_a_quota() {
    let script = Script::new();
    let elastic = builder(&script, Some(1.5))
        .placement(Placement::IdlePool)
        .build()
        .unwrap();
    let rt = runtime(&elastic);
    // No runtime needed: the pool is its own.
    let task = elastic.spawn(async { 6 * 7 }).unwrap();
    assert_eq!(rt.block_on(task).unwrap(), 42);
    let s = elastic.snapshot();
    assert_eq!(
        (s.placement, s.placement_reason),
        (Placement::IdlePool, PlacementReason::Setting)
    );
    // Shut down: the pool's work is cancelled, later spawns fail or run unpaced, never hang.
    elastic.shutdown();
    assert!(elastic.snapshot().queue.closed);
}

#[test]
fn more_workers_than_cpus_go_to_the_pool_from_the_start() {
    let script = Script::new();
    // Rates for 2 CPUs, a runtime of 3 workers: the OS picks which worker runs.
    let elastic = builder(&script, None).build().unwrap();
    let rt = elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(3))
        .build()
        .unwrap();
    let at_idle = spawned_at_idle(&elastic, &rt);
    let s = elastic.snapshot();
    match s.placement_reason {
        PlacementReason::MoreWorkersThanCpus => {
            assert_eq!(s.placement, Placement::IdlePool);
            #[cfg(target_os = "linux")]
            assert!(at_idle, "on the pool's idle-priority threads");
        }
        // Where the OS refuses idle priority the runtime is all there is.
        PlacementReason::NoIdlePriority | PlacementReason::PoolFailed => {
            assert_eq!(s.placement, Placement::Runtime);
            assert!(!at_idle);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn as_many_workers_as_cpus_start_on_the_runtime() {
    let script = Script::new();
    let elastic = builder(&script, None).build().unwrap();
    let rt = runtime(&elastic);
    assert!(!spawned_at_idle(&elastic, &rt));
    let blocking_at_idle = spawned_blocking_at_idle(&elastic, &rt);
    let s = elastic.snapshot();
    assert_eq!(s.placement, Placement::Runtime);
    match s.placement_reason {
        // Blocking work holds no worker: it goes to the pool's idle-priority threads at once.
        PlacementReason::ShortPolls => {
            #[cfg(target_os = "linux")]
            assert!(blocking_at_idle, "on the pool's blocking threads");
        }
        PlacementReason::NoIdlePriority | PlacementReason::PoolFailed => {
            assert!(!blocking_at_idle)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn spawn_on_places_as_spawn_does() {
    let script = Script::new();
    let on_thread = || std::thread::current().name().map(str::to_owned);
    for (placement, thread) in [
        (Placement::IdlePool, "elastic-cpu-idle"),
        (Placement::Runtime, "tokio-rt-worker"),
    ] {
        let elastic = builder(&script, None).placement(placement).build().unwrap();
        let rt = runtime(&elastic);
        // From outside the runtime, with its handle.
        let task = elastic.spawn_on(async move { on_thread() }, rt.handle());
        assert_eq!(rt.block_on(task).unwrap().as_deref(), Some(thread));
        assert_eq!(elastic.snapshot().placement, placement);
    }
}
