//! Elastic work inside elastic work, on the manual clock: a paced future whose poll drives a
//! paced stream or a `Pacer` of the same `Elastic` hands pacing to them, so the CPU is charged
//! once and the inner adapter never waits for the holder slot the outer one holds; and long
//! elastic polls are counted.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use common::{assert_ledger_balanced, Burn, CountPending, TimedItems, MS};
use elastic_cpu_pacer::testing::ManualClock;
use elastic_cpu_pacer::{Elastic, PacedExt, PacedStreamExt};
use futures_util::StreamExt;

/// A fixed share of 0.1 of one CPU: one grant at a time (the holder cap), polls timed on the
/// manual clock.
fn one_holder(clock: &ManualClock) -> Elastic {
    Elastic::builder()
        .manual(clock.clone())
        .running_clock(clock.clone())
        .fixed_share(0.1)
        .cpus(1.0)
        .build()
        .unwrap()
}

/// Polls `fut` with a waker that does nothing, `n` times or until it is ready.
fn poll_until_ready<F: Future + Unpin>(fut: &mut F, n: usize) -> Option<F::Output> {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    for _ in 0..n {
        if let Poll::Ready(out) = Pin::new(&mut *fut).poll(&mut cx) {
            return Some(out);
        }
    }
    None
}

#[test]
fn a_paced_stream_inside_a_paced_future_paces_once() {
    let clock = ManualClock::new();
    let elastic = one_holder(&clock);
    // 40 items of 1 ms: 40 ms of CPU, within the bucket's first slice (100 ms of 0.1 CPU-s).
    let items = TimedItems {
        clock: clock.clone(),
        step: MS,
        left: 40,
    };
    let stream = items.paced(&elastic).count();
    let mut outer = Box::pin(stream.paced(&elastic));
    // With one holder slot, an inner stream that also wanted a grant would wait for the slot
    // the outer future holds, for ever: it completes.
    let n = poll_until_ready(&mut outer, 1000).expect("the nested stream completes");
    assert_eq!(n, 40);
    drop(outer);
    let s = elastic.snapshot();
    // Charged once: the items' 40 ms, not twice that.
    assert_eq!(s.used, 40 * MS, "{s:#?}");
    assert_ledger_balanced(&s);
    assert_eq!(s.waiters, 0);
}

#[test]
fn a_pacer_inside_a_paced_future_paces_and_yields_at_the_quantum() {
    let clock = ManualClock::new();
    let elastic = one_holder(&clock);
    let mut pacer = elastic.pacer();
    let step = clock.clone();
    // 100 iterations of 10 µs: 1 ms of CPU, 20 quanta of 50 µs.
    let fut = async move {
        for _ in 0..100 {
            pacer.pace().await;
            step.advance(Duration::from_micros(10));
        }
    };
    let pending = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut outer = Box::pin(
        CountPending {
            inner: Box::pin(fut),
            pending: pending.clone(),
        }
        .paced(&elastic),
    );
    poll_until_ready(&mut outer, 10_000).expect("the nested loop completes");
    drop(outer);
    // The inner loop yielded at its quantum (not once at the end).
    assert!(pending.load(std::sync::atomic::Ordering::SeqCst) >= 10);
    let s = elastic.snapshot();
    assert_eq!(s.used, MS, "charged once: {s:#?}");
    assert_ledger_balanced(&s);
}

#[test]
fn polls_past_four_quanta_are_counted() {
    let clock = ManualClock::new();
    // A whole CPU: a second of tokens, no waiting for refill between the runs.
    let elastic = common::manual_elastic(&clock, 1.0, 1.0);
    let polls = |per_poll: Duration| {
        let mut f = Box::pin(
            Burn {
                clock: clock.clone(),
                per_poll,
                polls: 5,
            }
            .paced(&elastic),
        );
        let done = poll_until_ready(&mut f, 100);
        assert!(done.is_some(), "{per_poll:?}: {:#?}", elastic.snapshot());
    };
    // 4 quanta of 50 µs: not long.
    polls(Duration::from_micros(200));
    assert_eq!(elastic.snapshot().long_polls, 0);
    polls(Duration::from_micros(201));
    assert_eq!(elastic.snapshot().long_polls, 5);
    // A `Pacer` iteration that overran its stretch by more than 4 quanta.
    let mut pacer = elastic.pacer();
    let step = clock.clone();
    let mut fut = Box::pin(async move {
        for i in 0..3 {
            pacer.pace().await;
            step.advance(if i == 1 { MS } else { Duration::from_micros(5) });
        }
    });
    poll_until_ready(&mut fut, 100).expect("done");
    drop(fut);
    assert_eq!(elastic.snapshot().long_polls, 6);
}
