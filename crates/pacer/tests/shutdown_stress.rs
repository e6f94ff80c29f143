//! Shutdown under load: dropping the runtime, or every `Elastic` handle, while thousands of
//! paced futures, streams and `Pacer` loops wait, hold, yield or are braked, and `pace_blocking`
//! loops run on plain threads. Nothing hangs, every thread this file started ends, no grant is
//! left held, and the ledger balances. One test in this file: it counts the process's threads.
//! Nothing here asserts on wall-clock durations.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[cfg(target_os = "linux")]
use common::threads;
use common::{assert_ledger_balanced, eventually, must_finish, spin};
use elastic_cpu_pacer::settings::Brake;
use elastic_cpu_pacer::{Elastic, PacedExt, PacedStreamExt};
use futures_util::StreamExt;

/// The hang guard of each part, and of each wait inside one.
const PART: Duration = Duration::from_secs(120);
const WAIT: Duration = Duration::from_secs(60);

/// A low limit and a hair-trigger brake: most of the load waits for grants, some holds, and
/// the foreground spinners below set the brake off now and then.
fn elastic() -> Elastic {
    Elastic::builder()
        .share(0.05, 0.2)
        .target_p99(Duration::from_micros(100))
        .brake(Brake::At(Duration::from_micros(200)))
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

/// An `Elastic`, its runtime and the load below, running until at least 20 grants went out.
struct Loaded {
    elastic: Elastic,
    rt: tokio::runtime::Runtime,
    stop: Arc<AtomicBool>,
    progress: Arc<AtomicU64>,
    blocking: Vec<std::thread::JoinHandle<()>>,
}

fn loaded() -> Loaded {
    let elastic = elastic();
    let rt = runtime(&elastic);
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicU64::new(0));
    let blocking = load(&rt, &elastic, &stop, &progress);
    eventually("grants handed out", WAIT, || {
        elastic.snapshot().queue.grants >= 20
    });
    Loaded {
        elastic,
        rt,
        stop,
        progress,
        blocking,
    }
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
    must_finish("runtime drop under load", PART, || {
        let Loaded {
            elastic,
            rt,
            stop,
            blocking,
            ..
        } = loaded();
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
    must_finish("handle drop, then runtime drop, under load", PART, || {
        let Loaded {
            elastic,
            rt,
            stop,
            progress,
            blocking,
        } = loaded();
        drop(elastic);
        let at_drop = progress.load(Ordering::Relaxed);
        eventually("paced loops go on without any handle", WAIT, || {
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
    eventually("every thread started here exits", WAIT, || {
        threads() == before
    });
}
