//! Work `Elastic::spawn` placed runs to its end after the last `Elastic` handle is dropped,
//! wherever it was placed: on the runtime, or on the idle pool, which ends once that work has.

mod common;

use std::time::Duration;

use common::*;
use elastic_cpu_pacer::settings::Placement;
use elastic_cpu_pacer::Elastic;

#[test]
fn spawned_work_outlives_the_last_handle_wherever_it_was_placed() {
    #[cfg(target_os = "linux")]
    let before = threads();
    for placement in [Placement::Runtime, Placement::IdlePool] {
        let elastic = Elastic::builder()
            .placement(placement)
            .build()
            .expect("valid settings");
        let rt = elastic
            .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(1))
            .build()
            .unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let task = {
            let _in_rt = rt.enter();
            elastic
                .spawn(async move { rx.await.map(|v| v + 1) })
                .expect("a runtime to spawn from")
        };
        drop(elastic);
        tx.send(41).unwrap();
        let out = must_finish("the spawned work", Duration::from_secs(30), move || {
            let out = rt.block_on(task);
            drop(rt);
            out
        });
        assert_eq!(out.expect("not cancelled"), Ok(42), "{placement:?}");
    }
    // The pool, the governor and the samplers ended once the work had.
    #[cfg(target_os = "linux")]
    eventually(
        "every thread started here exits",
        Duration::from_secs(30),
        || threads() == before,
    );
}
