//! The holder cap with the governor thread running: grants held by work that waits on
//! something else (I/O, another task, a `Pacer` kept past its loop) do not hold up the work in
//! line for ever. The manual-clock tests of the rule are in `paced_manual.rs`.

mod common;

use std::time::Duration;

use common::must_finish;
use elastic_cpu_pacer::{Elastic, PacedExt};

/// One worker: the cap lets one grant out at a time.
fn one_worker(elastic: &Elastic) -> tokio::runtime::Runtime {
    elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(1))
        .build()
        .unwrap()
}

#[test]
fn paced_work_waiting_on_paced_work_completes() {
    must_finish(
        "a paced task waiting on another",
        Duration::from_secs(60),
        || {
            let elastic = Elastic::builder().build().unwrap();
            let rt = one_worker(&elastic);
            let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
            // Holds its grant while it waits for the other task, which needs a grant to send.
            let waits = rt.spawn(async move { rx.await.unwrap() }.paced(&elastic));
            let sends = rt.spawn(async move { tx.send(7).unwrap() }.paced(&elastic));
            rt.block_on(async {
                sends.await.unwrap();
                assert_eq!(waits.await.unwrap(), 7);
            });
        },
    );
}

#[test]
fn a_pacer_kept_past_its_loop_does_not_hold_up_other_work() {
    must_finish(
        "paced work behind an idle pacer",
        Duration::from_secs(60),
        || {
            let elastic = Elastic::builder().build().unwrap();
            let rt = one_worker(&elastic);
            let other = elastic.clone();
            let n = rt.block_on(async move {
                let mut pacer = elastic.pacer();
                let mut acc = 0u64;
                for row in 0..1_000u64 {
                    pacer.pace().await;
                    acc = acc.wrapping_add(row);
                }
                // `pacer` is still in scope (and may still hold its grant).
                let n = async { 2 }.paced(&other).await;
                drop(pacer);
                n + (acc > 0) as u32
            });
            assert_eq!(n, 3);
        },
    );
}
