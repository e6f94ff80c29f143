//! Aborting paced tasks at random points (waiting, holding, yielding) never leaks a grant:
//! once every aborted task is gone, no grant is held and the ledger balances. Nothing here
//! asserts on wall-clock durations; the random abort points come from a seeded RNG.

mod common;

use std::time::Duration;

use common::{assert_ledger_balanced, must_finish, spin};
use elastic_cpu_pacer::settings::Brake;
use elastic_cpu_pacer::{Elastic, PacedExt, PacedStreamExt};
use futures_util::StreamExt;

/// xorshift64*: a deterministic source of abort points.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// One kind of paced task, looping until aborted.
fn spawn_task(
    rt: &tokio::runtime::Runtime,
    elastic: &Elastic,
    kind: u64,
) -> tokio::task::JoinHandle<()> {
    match kind {
        0 => {
            let mut pacer = elastic.pacer();
            rt.spawn(async move {
                loop {
                    pacer.pace().await;
                    spin(Duration::from_micros(3));
                }
            })
        }
        1 => rt.spawn(
            futures_util::stream::repeat(())
                .map(|()| spin(Duration::from_micros(20)))
                .paced(elastic)
                .for_each(|()| async {}),
        ),
        _ => rt.spawn(
            async {
                loop {
                    spin(Duration::from_micros(30));
                    tokio::task::yield_now().await;
                }
            }
            .paced(elastic),
        ),
    }
}

fn abort_cycles(elastic: Elastic, cycles: usize, seed: u64) {
    let rt = elastic
        .runtime(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all(),
        )
        .build()
        .unwrap();
    let mut rng = Rng(seed | 1);
    for cycle in 0..cycles {
        let tasks: Vec<_> = (0..4)
            .map(|_| spawn_task(&rt, &elastic, rng.below(3)))
            .collect();
        // Let them run into every state: holding, yielding, waiting for a grant.
        std::thread::sleep(Duration::from_micros(200 + rng.below(3_000)));
        for t in &tasks {
            t.abort();
        }
        rt.block_on(async {
            for t in tasks {
                let _ = t.await;
            }
        });
        let s = elastic.snapshot();
        assert_eq!(
            s.queue.holders, 0,
            "cycle {cycle}: a grant outlived its task: {s:#?}"
        );
        assert_eq!(
            s.queue.waiters, 0,
            "cycle {cycle}: a waiter outlived its task: {s:#?}"
        );
        assert_ledger_balanced(&s);
    }
}

#[test]
fn aborted_paced_tasks_leave_no_grant_behind() {
    must_finish("abort stress", Duration::from_secs(120), || {
        let elastic = Elastic::builder().fixed_share(0.5).build().unwrap();
        abort_cycles(elastic, 1_000, 0x9e37_79b9);
    });
}

#[test]
fn aborted_paced_tasks_leave_no_grant_behind_with_the_controller_and_brake() {
    must_finish(
        "abort stress (controller)",
        Duration::from_secs(120),
        || {
            let elastic = Elastic::builder()
                .target_p99(Duration::from_micros(100))
                .brake(Brake::At(Duration::from_micros(50)))
                .build()
                .unwrap();
            abort_cycles(elastic, 1_000, 0x51_7cc1);
        },
    );
}
