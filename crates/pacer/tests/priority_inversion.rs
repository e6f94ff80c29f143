//! Priority inversion under `Placement::Auto`: elastic work that `Auto` put on the idle pool
//! takes a `tokio::sync::Mutex` the foreground needs and holds it across long polls while
//! normal-priority threads keep every CPU busy. The pool's `SCHED_IDLE` threads then get next
//! to no CPU; the future comes back to the runtime (`snapshot().idle_returns`), finishes there,
//! and the foreground gets the lock. Where the OS refuses idle priority, `Auto` keeps work on
//! the runtime and there is nothing to test.

#![cfg(target_os = "linux")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use elastic_cpu_pacer::settings::Placement;
use elastic_cpu_pacer::snapshot::PlacementReason;
use elastic_cpu_pacer::Elastic;

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Busy for `d` of this thread's CPU time: a poll too long for the quantum to cut, which takes
/// as long as the OS lets the thread run.
fn spin(d: Duration) {
    let start = thread_cpu();
    while thread_cpu() - start < d {
        std::hint::spin_loop();
    }
}

/// Busy for `d` of wall time.
fn spin_wall(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Polls of 2 ms of CPU the elastic work holds the lock across.
const HOLD_POLLS: u32 = 100;

fn on_idle_pool() -> bool {
    std::thread::current().name() == Some("elastic-cpu-idle")
}

#[test]
fn a_lock_held_on_a_starved_idle_pool_is_let_go() {
    let elastic = Elastic::builder().build().unwrap();
    let rt = elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2))
        .build()
        .unwrap();
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    rt.block_on(async {
        // Elastic work whose polls are long, over a few governor ticks: `Auto` sends what
        // comes next to the pool (a bound against a hang: at most 500 rounds).
        for _ in 0..500 {
            let warm = elastic
                .spawn(async {
                    for _ in 0..10 {
                        spin(Duration::from_millis(2));
                        tokio::task::yield_now().await;
                    }
                })
                .unwrap();
            warm.await.unwrap();
            let s = elastic.snapshot();
            if s.placement_reason != PlacementReason::ShortPolls {
                break;
            }
        }
        let s = elastic.snapshot();
        if s.placement_reason != PlacementReason::LongPolls {
            // The OS refused idle priority (no pool), or polls were not seen as long.
            assert_ne!(s.placement, Placement::IdlePool, "{:?}", s.placement_reason);
            eprintln!(
                "skipped: placement {:?} ({})",
                s.placement, s.placement_reason
            );
            return;
        }
        let lock = Arc::new(tokio::sync::Mutex::new(0u32));
        let (locked_tx, locked_rx) = tokio::sync::oneshot::channel();
        let holder = {
            let lock = lock.clone();
            elastic
                .spawn(async move {
                    let mut guard = lock.lock().await;
                    let started_on_pool = on_idle_pool();
                    let _ = locked_tx.send(());
                    // Long polls with the lock held: 200 ms of CPU, a minute or more at idle
                    // priority on saturated cores.
                    for _ in 0..HOLD_POLLS {
                        spin(Duration::from_millis(2));
                        *guard += 1;
                        tokio::task::yield_now().await;
                    }
                    (started_on_pool, on_idle_pool())
                })
                .unwrap()
        };
        locked_rx.await.unwrap();
        // Two normal-priority threads on every CPU.
        let stop = Arc::new(AtomicBool::new(false));
        let spinners: Vec<_> = (0..2 * cpus)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        spin_wall(Duration::from_millis(1));
                    }
                })
            })
            .collect();
        // The foreground waits for the lock (a bound against a hang, not a timing assertion).
        let got = tokio::time::timeout(Duration::from_secs(120), lock.lock()).await;
        let held_count = got.as_ref().map(|g| **g).ok();
        stop.store(true, Ordering::Relaxed);
        for s in spinners {
            s.join().unwrap();
        }
        drop(got);
        let (started_on_pool, ended_on_pool) = holder.await.unwrap();
        assert!(started_on_pool, "Auto put the holder on the pool");
        assert_eq!(
            held_count,
            Some(HOLD_POLLS),
            "the foreground got the lock once it was let go"
        );
        assert!(
            !ended_on_pool,
            "the holder came back to the runtime and finished there"
        );
        assert!(elastic.snapshot().idle_returns >= 1);
    });
}
