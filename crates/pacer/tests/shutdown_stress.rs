//! Shutdown under load: dropping the runtime, or every `Elastic` handle, while thousands of
//! paced futures, streams and `Pacer` loops wait, hold, yield or are braked, and `pace_blocking`
//! loops run on plain threads. Nothing hangs, every thread this file started ends, no grant is
//! left held, and the ledger balances. One test in this file: it counts the process's threads.
//! Nothing here asserts on wall-clock durations.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::assert_ledger_balanced;
use elastic_cpu_pacer::{Elastic, PacedExt, PacedStreamExt};
use futures_util::StreamExt;

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Threads alive in this process (Linux).
#[cfg(target_os = "linux")]
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Run `f` on a thread; fail (instead of hanging the suite) if it has not finished in 120 s.
fn must_finish<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what} hung"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what} failed (see above)"),
    }
}

fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A low limit and a hair-trigger brake: most of the load waits for grants, some holds, and
/// the foreground spinners below set the brake off now and then.
fn elastic() -> Elastic {
    Elastic::builder()
        .min_limit(0.05)
        .max_limit(0.2)
        .target_p99(Duration::from_micros(100))
        .brake_at(Duration::from_micros(200))
        .build()
        .unwrap()
}

fn runtime(elastic: &Elastic) -> tokio::runtime::Runtime {
    elastic
        .runtime(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all(),
        )
        .build()
        .unwrap()
}

/// Thousands of paced tasks of every kind, a few foreground spinners, and `pace_blocking`
/// loops on plain threads (stopped through `stop`). `progress` counts `Pacer` iterations.
fn load(
    rt: &tokio::runtime::Runtime,
    elastic: &Elastic,
    stop: &Arc<AtomicBool>,
    progress: &Arc<AtomicU64>,
) -> Vec<std::thread::JoinHandle<()>> {
    for i in 0..3_000u32 {
        match i % 3 {
            0 => {
                let mut pacer = elastic.pacer();
                let progress = progress.clone();
                rt.spawn(async move {
                    loop {
                        pacer.pace().await;
                        progress.fetch_add(1, Ordering::Relaxed);
                        spin(Duration::from_micros(2));
                    }
                });
            }
            1 => {
                rt.spawn(
                    futures_util::stream::repeat(())
                        .map(|()| spin(Duration::from_micros(5)))
                        .paced(elastic)
                        .for_each(|()| async {}),
                );
            }
            _ => {
                rt.spawn(
                    async {
                        loop {
                            spin(Duration::from_micros(5));
                            tokio::task::yield_now().await;
                        }
                    }
                    .paced(elastic),
                );
            }
        }
    }
    for _ in 0..4 {
        rt.spawn(async {
            loop {
                spin(Duration::from_micros(300));
                tokio::task::yield_now().await;
            }
        });
    }
    (0..4)
        .map(|_| {
            let mut pacer = elastic.pacer();
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    pacer.pace_blocking();
                    spin(Duration::from_micros(20));
                }
            })
        })
        .collect()
}

#[test]
fn dropping_the_runtime_or_every_handle_under_load_hangs_nothing_and_leaks_nothing() {
    #[cfg(target_os = "linux")]
    let before = threads();

    // 1. Drop the runtime while everything waits, holds, yields or is braked.
    must_finish("runtime drop under load", || {
        let elastic = elastic();
        let rt = runtime(&elastic);
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(AtomicU64::new(0));
        let blocking = load(&rt, &elastic, &stop, &progress);
        eventually("grants handed out", || {
            elastic.snapshot().queue.grants >= 20
        });
        drop(rt);
        stop.store(true, Ordering::Relaxed);
        for t in blocking {
            t.join().unwrap();
        }
        let s = elastic.snapshot();
        assert_eq!(s.queue.holders, 0, "a grant outlived the runtime: {s:#?}");
        assert_eq!(s.queue.waiters, 0, "a waiter outlived the runtime: {s:#?}");
        assert_ledger_balanced(&s);
    });

    // 2. Drop every `Elastic` handle first: the paced work keeps the governor alive and goes on
    //    being granted; then the runtime goes, and with it the last reference.
    must_finish("handle drop, then runtime drop, under load", || {
        let elastic = elastic();
        let rt = runtime(&elastic);
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(AtomicU64::new(0));
        let blocking = load(&rt, &elastic, &stop, &progress);
        eventually("grants handed out", || {
            elastic.snapshot().queue.grants >= 20
        });
        drop(elastic);
        let at_drop = progress.load(Ordering::Relaxed);
        eventually("paced loops go on without any handle", || {
            progress.load(Ordering::Relaxed) > at_drop + 1_000
        });
        // The runtime goes first: its thousands of queued tasks are ahead of the blocking
        // loops in the FIFO, and dropping them hands the loops their grants.
        drop(rt);
        stop.store(true, Ordering::Relaxed);
        for t in blocking {
            t.join().unwrap();
        }
    });

    // Every thread this test started (workers, governors, samplers, blocking loops) is gone.
    #[cfg(target_os = "linux")]
    eventually("every thread started here exits", || threads() == before);
}
