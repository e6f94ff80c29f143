//! The governor thread ticks on its own and ends when the last handle is gone. One test in
//! this file: it counts this process's governor threads.

mod common;

use std::time::Duration;

use common::eventually;
#[cfg(target_os = "linux")]
use common::threads;
use elastic_cpu_pacer::{Elastic, PacedExt};

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
    eventually("ticks", Duration::from_secs(30), || {
        elastic.snapshot().ticks >= 3
    });

    // A paced task outliving the user's handle keeps the governor (and its grants) alive.
    let clone = elastic.clone();
    let task = rt.spawn(async { tokio::task::yield_now().await }.paced(&clone));
    drop(elastic);
    rt.block_on(task).unwrap();
    let ticks = clone.snapshot().ticks;
    eventually(
        "ticks after the first handle is dropped",
        Duration::from_secs(30),
        || clone.snapshot().ticks > ticks,
    );

    drop(clone);
    drop(rt);
    #[cfg(target_os = "linux")]
    eventually(
        "governor and worker threads exit",
        Duration::from_secs(30),
        || threads() == before,
    );
}
