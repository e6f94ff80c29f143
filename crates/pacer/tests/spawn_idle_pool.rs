//! By default, on a host without a CPU quota, `Elastic::spawn` and `spawn_blocking` run
//! elastic work on the `Elastic`'s idle pool, in the idle class at idle priority, and the pool
//! ends with the last handle. One test in this file: it counts the process's threads.

mod common;

use std::time::Duration;

use common::eventually;
use elastic_cpu_pacer::settings::Placement;
use elastic_cpu_pacer::snapshot::PlacementReason;
use elastic_cpu_pacer::testing::{ManualClock, Script};
use elastic_cpu_pacer::Elastic;

/// The scheduling policy of the calling thread (field 41 of `/proc/thread-self/stat`; 5 is
/// `SCHED_IDLE`).
#[cfg(target_os = "linux")]
fn this_thread_policy() -> u32 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split_whitespace()
        .nth(41 - 3)
        .unwrap()
        .parse()
        .unwrap()
}

#[cfg(target_os = "linux")]
#[test]
fn without_a_quota_the_default_is_the_idle_pool_and_it_ends_with_the_elastic() {
    let before = common::threads();
    // A manual clock, 2 CPUs, no quota (scripted).
    let elastic = Elastic::builder()
        .manual(ManualClock::new())
        .script(Script::new())
        .cpus(2.0)
        .build()
        .unwrap();
    let rt = elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2))
        .build()
        .unwrap();
    let with_rt = common::threads();
    let at_idle = {
        let _in_rt = rt.enter();
        let task = elastic.spawn(async { this_thread_policy() == 5 }).unwrap();
        rt.block_on(task).unwrap()
    };
    let s = elastic.snapshot();
    match s.placement_reason {
        // The usual case: the OS lets a thread lower itself to SCHED_IDLE.
        PlacementReason::NoQuota => {
            assert_eq!(s.placement, Placement::IdlePool);
            assert!(at_idle, "the task ran at SCHED_IDLE");
            // A thread per CPU the rates are computed for.
            assert!(common::threads() >= with_rt + 2);
            let idle = s.idle_queue.expect("the idle class");
            assert!(idle.grants >= 1, "paced in the idle class: {idle:?}");
            // Blocking work goes to the pool's blocking threads, at idle priority too, and
            // paces in the idle class.
            let mut pacer = elastic.pacer();
            let blocking = {
                let _in_rt = rt.enter();
                elastic
                    .spawn_blocking(move || {
                        for _ in 0..1000 {
                            pacer.pace_blocking();
                        }
                        this_thread_policy() == 5
                    })
                    .unwrap()
            };
            assert!(rt.block_on(blocking).unwrap());
            let idle = elastic.snapshot().idle_queue.unwrap();
            assert!(idle.grants >= 2, "{idle:?}");
        }
        PlacementReason::NoIdlePriority => {
            assert_eq!(s.placement, Placement::Runtime);
            assert!(!at_idle);
        }
        other => panic!("unexpected placement: {other}"),
    }
    drop(elastic);
    drop(rt);
    // The pool went with the last handle (and the governor with its pacing state).
    eventually("the pool's threads end", Duration::from_secs(30), || {
        common::threads() == before
    });
}
