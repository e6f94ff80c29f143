//! The governor thread ticks on its own and ends when the last handle is gone. One test in
//! this file: it counts this process's governor threads.

use std::time::{Duration, Instant};

use elastic_cpu_pacer::{Elastic, PacedExt};

/// Threads alive in this process (Linux). Thread names are not reliable in every sandbox,
/// so the test counts threads: everything it started must be gone at the end.
#[cfg(target_os = "linux")]
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn governor_ticks_and_stops_with_the_last_handle() {
    #[cfg(target_os = "linux")]
    let before = threads();
    let elastic = Elastic::builder().build().unwrap();
    #[cfg(target_os = "linux")]
    assert_eq!(threads(), before + 1, "one governor thread");
    let rt = elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2))
        .build()
        .unwrap();
    eventually("ticks", || elastic.snapshot().ticks >= 3);

    // A paced task outliving the user's handle keeps the governor (and its grants) alive.
    let clone = elastic.clone();
    let task = rt.spawn(async { tokio::task::yield_now().await }.paced(&clone));
    drop(elastic);
    rt.block_on(task).unwrap();
    let ticks = clone.snapshot().ticks;
    eventually("ticks after the first handle is dropped", || {
        clone.snapshot().ticks > ticks
    });

    drop(clone);
    drop(rt);
    #[cfg(target_os = "linux")]
    eventually("governor and worker threads exit", || threads() == before);
}
