//! By default `Elastic::spawn` runs elastic work on the runtime while its polls are short and
//! moves it to the `Elastic`'s idle pool (the idle class, at idle priority) once its time comes
//! mostly in long polls; `spawn_blocking` goes there from the start; the pool ends with the last
//! handle. One test in this file: it counts the process's threads.

mod common;

use std::time::Duration;

use common::{eventually, manual_elastic_on_two_workers, this_thread_policy, SCHED_IDLE};
use elastic_cpu_pacer::settings::Placement;
use elastic_cpu_pacer::snapshot::PlacementReason;
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::testing::ManualClock;

#[cfg(target_os = "linux")]
#[test]
fn without_a_quota_long_polls_move_to_the_idle_pool_which_ends_with_the_elastic() {
    let before = common::threads();
    // A manual clock (polls timed on it too), 2 CPUs, no quota (scripted).
    let clock = ManualClock::new();
    let (elastic, rt) = manual_elastic_on_two_workers(&clock);
    let with_rt = common::threads();
    let _in_rt = rt.enter();
    // Short polls: the runtime.
    let short = elastic
        .spawn(async { this_thread_policy() == SCHED_IDLE })
        .unwrap();
    assert!(!rt.block_on(short).unwrap(), "ran on the runtime");
    let s = elastic.snapshot();
    match s.placement_reason {
        // The usual case: the OS lets a thread lower itself to SCHED_IDLE.
        PlacementReason::ShortPolls => {}
        PlacementReason::NoIdlePriority => {
            assert_eq!(s.placement, Placement::Runtime);
            return;
        }
        other => panic!("unexpected placement: {other}"),
    }
    assert_eq!(s.placement, Placement::Runtime);
    // The pool is made at the first spawn: a thread per CPU the rates are computed for.
    assert!(common::threads() >= with_rt + 2);
    // Long polls: 1 ms of running time each (on the manual clock), until the task finds itself
    // at idle priority; then 100 more of 5 ms there. As the quick start writes it, an adapter of
    // the same `Elastic` inside the spawned future paces it: admitted on the runtime first, its
    // grants come from the idle class once it runs on the pool.
    let step = clock.clone();
    let mut pacer = elastic.pacer();
    let long = elastic
        .spawn(async move {
            let (mut polls, mut on_pool) = (0u32, 0u32);
            while on_pool < 100 {
                pacer.pace().await;
                if this_thread_policy() == SCHED_IDLE {
                    on_pool += 1;
                    step.advance(Duration::from_millis(5));
                } else {
                    polls += 1;
                    step.advance(Duration::from_millis(1));
                }
                tokio::task::yield_now().await;
            }
            polls
        })
        .unwrap();
    // The governor's ticks see the long polls (and the clock moves for the bucket's refill).
    for _ in 0..100_000 {
        if long.is_finished() {
            break;
        }
        clock.advance(Duration::from_millis(10));
        elastic.tick();
        std::thread::sleep(Duration::from_micros(100));
    }
    assert!(long.is_finished(), "never moved: {:#?}", elastic.snapshot());
    // It ran on the runtime first (how many polls it took varies: the clock this thread moves
    // counts into some of them).
    assert!(rt.block_on(long).unwrap() >= 1);
    let s = elastic.snapshot();
    assert_eq!(
        (s.placement, s.placement_reason),
        (Placement::IdlePool, PlacementReason::LongPolls)
    );
    assert!(s.long_polls >= 1, "{}", s.long_polls);
    let idle = s.idle_queue.expect("the idle class");
    // 500 ms of running time on the pool, in slices of at most 100 ms.
    assert!(
        idle.grants >= 5,
        "paced in the idle class once moved: {idle:?}"
    );
    // The bucket refills what that work ran ahead of it (a no-burst bucket lends a whole slice).
    for _ in 0..1000 {
        clock.advance(Duration::from_millis(10));
        elastic.tick();
    }
    // From now on, new work goes to the pool at once: futures, and blocking work to the pool's
    // blocking threads, pacing in the idle class.
    let at_once = elastic
        .spawn(async { this_thread_policy() == SCHED_IDLE })
        .unwrap();
    assert!(rt.block_on(at_once).unwrap());
    let mut pacer = elastic.pacer();
    let blocking = elastic
        .spawn_blocking(move || {
            for _ in 0..1000 {
                pacer.pace_blocking();
            }
            this_thread_policy() == SCHED_IDLE
        })
        .unwrap();
    assert!(rt.block_on(blocking).unwrap());
    let idle2 = elastic.snapshot().idle_queue.unwrap();
    assert!(idle2.grants > idle.grants, "{idle2:?}");
    drop(_in_rt);
    drop(elastic);
    drop(rt);
    // The pool went with the last handle (and the governor with its pacing state).
    eventually("the pool's threads end", Duration::from_secs(30), || {
        common::threads() == before
    });
}
