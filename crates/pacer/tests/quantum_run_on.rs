//! The poll quantum's yield is skipped while another worker of the runtime is parked (it holds
//! the I/O driver and takes any task pushed where it can steal it), up to 400 µs of running time
//! between yields; with every worker busy, on a current-thread runtime, off a runtime, or with
//! the backlog brake on, a `Pacer` and a `PacedStream` yield at every quantum as before.
//! Running time is the manual clock; the other worker's state is tokio's own (stable) metrics,
//! waited for before each iteration (a hang guard, not a timing assertion).

mod common;

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use common::*;
use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::settings::Brake;
use elastic_cpu_pacer::settings::DEFAULT_QUANTUM;
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::{Elastic, PacedStreamExt};
use futures_core::Stream;
use tokio::runtime::{Builder, Handle, Runtime};

/// Running time per loop iteration or stream item: one quantum, so that every iteration ends
/// at a quantum check.
const STEP: Duration = DEFAULT_QUANTUM;
/// Running time of each loop (within one 100 ms slice).
const RUN: Duration = Duration::from_millis(40);
/// The longest run between yields while they are skipped (the crate's `RUN_ON_LIMIT`).
const RUN_ON_LIMIT: Duration = Duration::from_micros(400);

/// Yields the loop would make at one per quantum.
fn per_quantum() -> usize {
    (RUN.as_nanos() / DEFAULT_QUANTUM.as_nanos()) as usize
}

/// Yields the loop makes at one per `RUN_ON_LIMIT`.
fn per_limit() -> usize {
    (RUN.as_nanos() / RUN_ON_LIMIT.as_nanos()) as usize
}

/// Whether a worker of the current runtime other than the caller's is parked.
fn other_worker_parked() -> bool {
    let metrics = Handle::current().metrics();
    let me = tokio::runtime::worker_index();
    (0..metrics.num_workers())
        .any(|w| Some(w) != me && metrics.worker_park_unpark_count(w) % 2 == 1)
}

/// Spin until another worker has stayed parked for 1 ms (real time): a worker woken by the
/// last yield but not yet running still reads as parked, and would wake during the next check.
fn wait_for_a_parked_worker() {
    let metrics = Handle::current().metrics();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            Instant::now() < deadline,
            "the other worker never stayed parked (hang guard)"
        );
        if !other_worker_parked() {
            std::hint::spin_loop();
            continue;
        }
        let counts: Vec<u64> = (0..metrics.num_workers())
            .map(|w| metrics.worker_park_unpark_count(w))
            .collect();
        spin(Duration::from_millis(1));
        let still =
            (0..metrics.num_workers()).all(|w| metrics.worker_park_unpark_count(w) == counts[w]);
        if still && other_worker_parked() {
            return;
        }
    }
}

/// Quantum yields of `fut`, run as a task on `rt`, as the OS-yield counter counts them: without
/// `tokio_unstable` a multi-thread worker takes the yield's second step at each (one more
/// `Pending` than yields).
fn quantum_yields<F>(rt: &Runtime, elastic: &Elastic, fut: F) -> usize
where
    F: Future<Output = ()> + Send + 'static,
{
    let before = elastic.snapshot().os_yields;
    let pendings = yields_of(rt, fut);
    let yields = (elastic.snapshot().os_yields - before) as usize;
    assert!(pendings >= yields, "{pendings} Pending for {yields} yields");
    yields
}

fn multi_thread(workers: usize) -> Runtime {
    Builder::new_multi_thread()
        .worker_threads(workers)
        .build()
        .expect("runtime")
}

/// A `Pacer` loop of `RUN` running time; `wait` runs before each iteration.
fn pacer_loop(
    elastic: &Elastic,
    clock: &ManualClock,
    wait: fn(),
) -> impl Future<Output = ()> + Send + 'static {
    let (mut pacer, clock) = (elastic.pacer(), clock.clone());
    async move {
        for _ in 0..RUN.as_nanos() / STEP.as_nanos() {
            wait();
            pacer.pace().await;
            clock.advance(STEP);
        }
    }
}

/// A paced stream of `RUN` running time, drained by one task; `wait` runs before each item.
fn stream_loop(
    elastic: &Elastic,
    clock: &ManualClock,
    wait: fn(),
) -> impl Future<Output = ()> + Send + 'static {
    let items = TimedItems {
        clock: clock.clone(),
        step: STEP,
        left: RUN.as_nanos() / STEP.as_nanos(),
    };
    let mut stream = Box::pin(items.paced(elastic));
    async move {
        loop {
            wait();
            if poll_fn(|cx| stream.as_mut().poll_next(cx)).await.is_none() {
                break;
            }
        }
    }
}

#[test]
fn a_pacer_runs_on_while_another_worker_is_parked_but_yields_within_the_limit() {
    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, 1.0, 1.0);
    let rt = multi_thread(2);
    let yields = yields_of(&rt, pacer_loop(&elastic, &clock, wait_for_a_parked_worker));
    // One yield per 400 µs, not one per 50 µs quantum.
    assert!(
        (per_limit() * 3 / 4..=per_limit() * 2).contains(&yields),
        "{yields} yields; {} at one per {RUN_ON_LIMIT:?}, {} at one per quantum",
        per_limit(),
        per_quantum()
    );
    drop(rt);
    assert_ledger_balanced(&elastic.snapshot());
}

#[test]
fn a_paced_stream_runs_on_while_another_worker_is_parked_but_yields_within_the_limit() {
    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, 1.0, 1.0);
    let rt = multi_thread(2);
    let yields = yields_of(&rt, stream_loop(&elastic, &clock, wait_for_a_parked_worker));
    assert!(
        (per_limit() * 3 / 4..=per_limit() * 2).contains(&yields),
        "{yields} yields; {} at one per {RUN_ON_LIMIT:?}, {} at one per quantum",
        per_limit(),
        per_quantum()
    );
}

#[test]
fn with_every_worker_busy_the_quantum_yields_every_time() {
    // One worker, held by the loop: no other worker to hand foreground work or I/O to.
    let no_wait: fn() = || {};
    for (name, current_thread) in [("multi-thread, 1 worker", false), ("current-thread", true)] {
        let clock = ManualClock::new();
        let elastic = manual_elastic(&clock, 1.0, 1.0);
        let rt = if current_thread {
            Builder::new_current_thread().build().expect("runtime")
        } else {
            multi_thread(1)
        };
        for (what, yields) in [
            (
                "pacer",
                quantum_yields(&rt, &elastic, pacer_loop(&elastic, &clock, no_wait)),
            ),
            (
                "stream",
                quantum_yields(&rt, &elastic, stream_loop(&elastic, &clock, no_wait)),
            ),
        ] {
            // The amortized check may let a stretch run up to twice the quantum.
            assert!(
                (per_quantum() / 2..=per_quantum() + 8).contains(&yields),
                "{name}, {what}: {yields} yields, {} at one per quantum",
                per_quantum()
            );
        }
    }
}

/// Iterations a `Pacer` on a 2-worker runtime (the other worker parked) runs, in `STEP`s of
/// running time, before its first yield; `None` if it ran 40 without one (it should not: the
/// limit is 8 steps). With `brake`, the
/// backlog brake goes on once the pacer holds a grant.
fn iterations_before_a_yield(brake: bool) -> Option<u32> {
    let clock = ManualClock::new();
    let elastic = Elastic::builder()
        .manual(clock.clone())
        .running_clock(clock.clone())
        .fixed_share(1.0)
        .cpus(1.0)
        .brake(Brake::At(Duration::from_millis(1)))
        .build()
        .expect("valid settings");
    let rt = multi_thread(2);
    let mut pacer = elastic.pacer();
    rt.block_on(rt.spawn(async move {
        pacer.pace().await; // holds a grant now
        if brake {
            // A foreground poll that waited 2 ms, over the 1 ms threshold.
            let late = Some(Duration::from_millis(2));
            elastic.probe().record_poll(late, None, false);
            elastic.tick();
            assert!(elastic.snapshot().braked, "the alarm did not brake");
        }
        for i in 0..40 {
            wait_for_a_parked_worker();
            clock.advance(STEP);
            let mut pace = pacer.pace();
            // Poll once by hand: a braked pacer would wait for the brake's end.
            if poll_fn(|cx| Poll::Ready(Pin::new(&mut pace).poll(cx).is_pending())).await {
                return Some(i);
            }
        }
        None
    }))
    .expect("the loop task")
}

#[test]
fn a_braked_pacer_yields_at_the_quantum_even_with_a_parked_worker() {
    // Unbraked, it runs on to 400 µs (8 steps); braked, it yields at the first stretch's end
    // (the first step: one quantum).
    let free = iterations_before_a_yield(false);
    assert!(
        free.is_some_and(|i| i >= 4),
        "unbraked: yielded after {free:?}"
    );
    let braked = iterations_before_a_yield(true);
    assert!(
        braked.is_some_and(|i| i < 2),
        "braked: yielded after {braked:?}"
    );
}
