//! Faults: drops at every await point, no probe data for a long time, one `Elastic` across
//! runtimes of different sizes. None may lose tokens or hang.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use common::*;
use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::{Elastic, PacedExt};

/// Burns 40 ms of manual-clock CPU between each of its `awaits` await points.
async fn stages(clock: ManualClock, awaits: usize) {
    for _ in 0..awaits {
        clock.advance(Duration::from_millis(40));
        tokio::task::yield_now().await;
    }
}

#[test]
fn dropping_at_every_await_point_conserves_tokens() {
    let awaits = 8;
    for drop_after in 0..=awaits + 1 {
        let clock = ManualClock::new();
        let elastic = manual_elastic(&clock, 0.1, 1.0);
        // Another paced future competes, so some drops happen while waiting for a grant.
        let (_, waker) = CountingWaker::new();
        let mut cx = Context::from_waker(&waker);
        let mut rival = Box::pin(stages(clock.clone(), awaits).paced(&elastic));
        let mut fut = Box::pin(stages(clock.clone(), awaits).paced(&elastic));
        for i in 0..drop_after {
            let _ = rival.as_mut().poll(&mut cx);
            if let Poll::Ready(()) = fut.as_mut().poll(&mut cx) {
                break;
            }
            if i % 3 == 2 {
                clock.advance(Duration::from_millis(300));
                elastic.tick();
            }
        }
        drop(fut);
        drop(rival);
        let s = elastic.snapshot();
        assert_eq!(s.waiters, 0, "drop after {drop_after} polls: {s:#?}");
        assert_ledger_balanced(&s);
    }
}

#[test]
fn no_probe_data_for_a_long_time_never_raises_the_limit() {
    let clock = ManualClock::new();
    let elastic = Elastic::builder()
        .manual(clock.clone())
        .running_clock(clock.clone())
        .cpus(1.0)
        .build()
        .unwrap();
    let start = elastic.snapshot().share;
    // Elastic work waits the whole time, but the runtime records no polls at all.
    let (_, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    let mut hog = Box::pin(
        Burn {
            clock: clock.clone(),
            per_poll: Duration::from_millis(100),
            polls: usize::MAX,
        }
        .paced(&elastic),
    );
    for _ in 0..3_000 {
        let _ = hog.as_mut().poll(&mut cx);
        elastic.tick();
        clock.advance(Duration::from_millis(100));
    }
    let s = elastic.snapshot();
    assert_eq!(s.window.queue_latency.all.count, 0);
    assert_eq!(s.sched_p99, None);
    assert_eq!(
        s.share, start,
        "no data is not 'healthy': the limit must not grow"
    );
    drop(hog);
    assert_ledger_balanced(&elastic.snapshot());
}

#[test]
fn one_elastic_follows_the_runtime_it_is_attached_to() {
    let cores = std::thread::available_parallelism().unwrap().get() as f64;
    let elastic = Elastic::builder().build().unwrap();
    let big = elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(32))
        .build()
        .unwrap();
    assert_eq!(
        elastic.snapshot().cpus,
        cores.min(32.0),
        "min(workers, cores)"
    );
    big.block_on(async { 1 }.paced(&elastic));
    drop(big);
    let small = elastic
        .runtime(tokio::runtime::Builder::new_current_thread())
        .build()
        .unwrap();
    assert_eq!(elastic.snapshot().cpus, 1.0);
    small.block_on(async { 2 }.paced(&elastic));
    assert_ledger_balanced(&elastic.snapshot());
}

/// A future that is woken but never finishes, to keep a paced task alive.
struct Forever;
impl Future for Forever {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
}

#[test]
fn dropping_every_handle_while_tasks_are_parked_does_not_hang() {
    let elastic = Elastic::builder().build().unwrap();
    let rt = elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2))
        .build()
        .unwrap();
    for _ in 0..4 {
        rt.spawn(Forever.paced(&elastic));
    }
    drop(elastic); // the governor keeps running for the parked tasks...
    rt.shutdown_timeout(Duration::from_secs(30)); // ...until the runtime drops them.
}
