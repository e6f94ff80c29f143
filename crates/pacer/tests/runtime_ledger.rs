//! Paced work on real runtimes: tokens are conserved, panics settle, the cap holds on the
//! ledger, shutdown never hangs. Nothing here asserts on wall-clock durations.

mod common;

use std::time::{Duration, Instant};

use common::{assert_ledger_balanced, must_finish, spin};
use elastic_cpu_pacer::settings::{Enforcement, Timing};
use elastic_cpu_pacer::{Elastic, PacedExt, PacedStreamExt};
use futures_util::StreamExt;

fn runtime(elastic: &Elastic, workers: usize) -> tokio::runtime::Runtime {
    elastic
        .runtime(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .enable_all(),
        )
        .build()
        .unwrap()
}

#[test]
fn tokens_are_conserved_across_futures_streams_and_pacers() {
    let elastic = Elastic::builder().fixed_share(0.5).build().unwrap();
    let rt = runtime(&elastic, 4);
    let mut tasks = Vec::new();
    for _ in 0..3 {
        tasks.push(
            rt.spawn(
                async {
                    for _ in 0..20 {
                        spin(Duration::from_micros(200));
                        tokio::task::yield_now().await;
                    }
                }
                .paced(&elastic),
            ),
        );
        tasks.push(
            rt.spawn(
                futures_util::stream::iter(0..50)
                    .map(|_| spin(Duration::from_micros(100)))
                    .paced(&elastic)
                    .for_each(|_| async {}),
            ),
        );
        let mut pacer = elastic.pacer();
        tasks.push(rt.spawn(async move {
            for _ in 0..2_000 {
                pacer.pace().await;
                spin(Duration::from_micros(2));
            }
        }));
    }
    rt.block_on(async {
        for t in tasks {
            t.await.unwrap();
        }
    });
    let s = elastic.snapshot();
    assert!(s.used > Duration::ZERO && s.queue.grants > 0, "{s:#?}");
    assert_eq!(s.waiters, 0);
    assert_ledger_balanced(&s);
}

#[test]
fn a_panicking_elastic_task_settles_its_grant() {
    // Wall-clock timing: each poll is then charged at least the time it spun.
    let elastic = Elastic::builder()
        .fixed_share(0.5)
        .enforcement(Enforcement::default().timing(Timing::Wall))
        .build()
        .unwrap();
    let rt = runtime(&elastic, 2);
    let task = rt.spawn(
        async {
            spin(Duration::from_micros(300));
            tokio::task::yield_now().await;
            spin(Duration::from_micros(300));
            panic!("scan failed");
        }
        .paced(&elastic),
    );
    assert!(rt.block_on(task).unwrap_err().is_panic());
    let s = elastic.snapshot();
    assert!(
        s.used >= Duration::from_micros(600),
        "both polls charged: {s:#?}"
    );
    assert_ledger_balanced(&s);
}

#[test]
fn a_fixed_limit_grants_no_more_than_rate_times_time_plus_burst() {
    // Low enough that the tasks hit the cap even when other processes hold the cores.
    let limit = 0.05;
    let tasks = 6u64;
    let elastic = Elastic::builder()
        .fixed_share(limit)
        .enforcement(Enforcement::default().slice(Duration::from_millis(10)))
        .build()
        .unwrap();
    let rt = runtime(&elastic, 2);
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            rt.spawn(
                futures_util::stream::iter(0..400)
                    .map(|_| spin(Duration::from_micros(500)))
                    .paced(&elastic)
                    .count(),
            )
        })
        .collect();
    // Let them compete for a while, then stop them wherever they are.
    std::thread::sleep(Duration::from_millis(1500));
    for h in &handles {
        h.abort();
    }
    rt.block_on(async {
        for h in handles {
            let _ = h.await;
        }
    });
    let elapsed = start.elapsed();
    let s = elastic.snapshot();
    let rate = limit * s.cpus; // CPU-seconds per second
    let burst = rate; // one second of refill
                      // Each holder may take its whole slice while the balance is barely positive (debt).
    let debt_allowance = tasks as f64 * 0.010;
    let net_granted = (s.acquired - s.returned).as_secs_f64();
    let bound = rate * elapsed.as_secs_f64() + burst + debt_allowance;
    assert!(
        net_granted <= bound,
        "granted {net_granted:.3} CPU-s > bound {bound:.3} ({s:#?})"
    );
    assert!(
        s.queue.waits > 0,
        "the cap was never reached: the test tested nothing"
    );
    assert_ledger_balanced(&s);
}

#[test]
fn runtime_shutdown_with_waiters_does_not_hang() {
    let elastic = Elastic::builder()
        .fixed_share(0.01)
        .enforcement(Enforcement::default().slice(Duration::from_millis(10)))
        .build()
        .unwrap();
    let rt = runtime(&elastic, 2);
    for _ in 0..16 {
        rt.spawn(
            async {
                loop {
                    spin(Duration::from_micros(500));
                    tokio::task::yield_now().await;
                }
            }
            .paced(&elastic),
        );
    }
    // Wait (bounded) until some are queued for tokens.
    let deadline = Instant::now() + Duration::from_secs(30);
    while elastic.snapshot().waiters == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(elastic.snapshot().waiters > 0);
    must_finish("runtime shutdown", Duration::from_secs(60), move || {
        drop(rt)
    });
    let s = elastic.snapshot();
    assert_eq!(s.waiters, 0, "dropped tasks leave the queue");
    assert_ledger_balanced(&s);
}

#[test]
fn pace_blocking_on_plain_threads_is_settled() {
    let elastic = Elastic::builder()
        .fixed_share(0.3)
        .cpus(1.0)
        .enforcement(Enforcement::default().slice(Duration::from_millis(10)))
        .build()
        .unwrap();
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let mut pacer = elastic.pacer();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    pacer.pace_blocking();
                    spin(Duration::from_micros(100));
                }
            })
        })
        .collect();
    must_finish("blocking pacers", Duration::from_secs(60), move || {
        for t in threads {
            t.join().unwrap();
        }
    });
    let s = elastic.snapshot();
    // Charged by thread CPU time: at most the wall time spun (less when the OS preempts us).
    assert!(s.used > Duration::ZERO && s.queue.grants >= 3, "{s:#?}");
    assert_eq!(s.waiters, 0);
    assert_ledger_balanced(&s);
}

#[test]
fn current_thread_runtime_is_one_cpu() {
    let elastic = Elastic::builder().build().unwrap();
    let rt = elastic
        .runtime(tokio::runtime::Builder::new_current_thread())
        .build()
        .unwrap();
    assert_eq!(elastic.snapshot().cpus, 1.0);
    rt.block_on(async { 1 }.paced(&elastic));
}

#[test]
fn long_polls_are_charged_cpu_time_not_wall_time() {
    // A poll that blocks its thread for 50 ms uses almost no CPU. The first poll is timed on
    // the wall clock (nothing says yet that polls are long); after that the CPU clock is used.
    // The bounds are relative to the sleeps as they really lasted (they overshoot under load);
    // half the later sleeps (~100 ms) is the slack for the OS preempting the first poll
    // outside its sleep, which the wall clock charges too.
    let elastic = Elastic::builder().fixed_share(0.5).build().unwrap();
    let rt = runtime(&elastic, 2);
    let slept = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = slept.clone();
    let task = rt.spawn(
        async move {
            for _ in 0..5 {
                let t = Instant::now();
                std::thread::sleep(Duration::from_millis(50));
                log.lock().unwrap().push(t.elapsed());
                tokio::task::yield_now().await;
            }
        }
        .paced(&elastic),
    );
    rt.block_on(task).unwrap();
    let s = elastic.snapshot();
    let slept = slept.lock().unwrap();
    let first = slept[0];
    let rest: Duration = slept[1..].iter().sum();
    // Wall-clock timing would charge at least first + rest.
    assert!(s.used >= first, "the first poll is wall-timed: {s:#?}");
    assert!(
        s.used < first + rest / 2,
        "later polls must be charged CPU time, not their {rest:?} of sleep: {s:#?}"
    );
    assert_ledger_balanced(&s);
}
