//! A future `Elastic::spawn` started on the runtime and moved to the idle pool (its polls ran
//! long) keeps its handle's meaning: aborting the handle ends the work on the pool, a panic on
//! the pool is the handle's panic, and a pool shut down ends the task cancelled, not hung.

#![cfg(target_os = "linux")]

mod common;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::{eventually, manual_elastic_on_two_workers, must_finish};
use elastic_cpu_pacer::snapshot::PlacementReason;
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::testing::ManualClock;
use elastic_cpu_pacer::Elastic;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

/// `SCHED_IDLE` is policy 5 (field 41 of `/proc/thread-self/stat`).
fn at_idle() -> bool {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split_whitespace().nth(41 - 3).unwrap() == "5"
}

struct Setup {
    clock: ManualClock,
    elastic: Elastic,
    rt: Runtime,
}

/// An `Elastic` on a manual clock without a quota, and its runtime; `None` where the OS does
/// not grant idle priority (nothing moves there).
fn setup() -> Option<Setup> {
    let clock = ManualClock::new();
    let (elastic, rt) = manual_elastic_on_two_workers(&clock);
    let probe = {
        let _in_rt = rt.enter();
        elastic.spawn(async {}).unwrap()
    };
    rt.block_on(probe).unwrap();
    match elastic.snapshot().placement_reason {
        PlacementReason::ShortPolls => Some(Setup { clock, elastic, rt }),
        PlacementReason::NoIdlePriority => None,
        other => panic!("unexpected placement: {other}"),
    }
}

impl Setup {
    /// Spawn work whose polls run 1 ms each (on the manual clock) until it runs at idle
    /// priority, then `then`; returns once it moved.
    fn spawn_moving<T, F>(&self, then: F) -> JoinHandle<T>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let (moved_tx, moved) = mpsc::channel();
        let step = self.clock.clone();
        let task = {
            let _in_rt = self.rt.enter();
            self.elastic
                .spawn(async move {
                    while !at_idle() {
                        step.advance(Duration::from_millis(1));
                        tokio::task::yield_now().await;
                    }
                    let _ = moved_tx.send(());
                    then.await
                })
                .unwrap()
        };
        for _ in 0..100_000 {
            if moved.try_recv().is_ok() {
                return task;
            }
            self.clock.advance(Duration::from_millis(10));
            self.elastic.tick();
            std::thread::sleep(Duration::from_micros(100));
        }
        panic!("never moved: {:#?}", self.elastic.snapshot());
    }
}

/// Sets its flag when dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn aborting_a_moved_task_ends_its_work_on_the_pool() {
    let Some(s) = setup() else { return };
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(dropped.clone());
    let task = s.spawn_moving(async move {
        let _flag = flag;
        std::future::pending::<()>().await
    });
    task.abort();
    let err = s.rt.block_on(task).unwrap_err();
    assert!(err.is_cancelled(), "{err}");
    eventually(
        "the pool's task is dropped",
        Duration::from_secs(30),
        || dropped.load(Ordering::SeqCst),
    );
}

#[test]
fn a_panic_on_the_pool_is_the_handles_panic() {
    let Some(s) = setup() else { return };
    let task = s.spawn_moving(async { panic!("boom on the pool") });
    let err = s.rt.block_on(task).unwrap_err();
    assert!(err.is_panic(), "{err}");
    let payload = err.into_panic();
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom on the pool"));
}

#[test]
fn a_moved_task_ends_cancelled_when_the_elastic_shuts_down() {
    let Some(s) = setup() else { return };
    let task = s.spawn_moving(std::future::pending::<()>());
    s.elastic.shutdown();
    let Setup { rt, elastic, .. } = s;
    let err = must_finish("the moved task's end", Duration::from_secs(30), move || {
        let out = rt.block_on(task);
        drop(elastic);
        out
    })
    .unwrap_err();
    assert!(err.is_cancelled(), "{err}");
}

#[test]
fn the_output_comes_back_from_the_pool() {
    let Some(s) = setup() else { return };
    let task = s.spawn_moving(async { at_idle().then_some(42) });
    assert_eq!(s.rt.block_on(task).unwrap(), Some(42));
}
