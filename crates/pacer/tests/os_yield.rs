//! At each poll quantum's yield, elastic work also yields its thread's CPU to the OS
//! (`ElasticBuilder::os_yield`, on by default): a `Pacer` loop, a paced stream, a
//! `pace_blocking` loop and a gate's setup permit. Counted in the snapshots; off, none.
//! Running time is the manual clock.

mod common;

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use common::*;
use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::gate::GateSettings;
use elastic_cpu_pacer::settings::Enforcement;
use elastic_cpu_pacer::settings::DEFAULT_QUANTUM;
use elastic_cpu_pacer::{Elastic, PacedStreamExt};
use futures_core::Stream;
use tokio::runtime::{Builder, Runtime};

/// Running time per iteration: one quantum, so every iteration ends at a quantum check.
const STEP: Duration = DEFAULT_QUANTUM;
/// Running time of each loop (within one 100 ms slice).
const RUN: Duration = Duration::from_millis(20);

fn steps() -> u32 {
    (RUN.as_nanos() / STEP.as_nanos()) as u32
}

/// As `manual_elastic`, with the OS yield on or off.
fn elastic(clock: &ManualClock, os_yield: bool) -> Elastic {
    Elastic::builder()
        .manual(clock.clone())
        .running_clock(clock.clone())
        .fixed_share(1.0)
        .cpus(1.0)
        .enforcement(Enforcement::default().os_yield(os_yield))
        .build()
        .expect("valid settings")
}

/// A current-thread runtime: no other worker, so every spent quantum yields.
fn runtime() -> Runtime {
    Builder::new_current_thread().build().expect("runtime")
}

fn yields_of_u64<F: Future<Output = ()> + Send + 'static>(rt: &Runtime, fut: F) -> u64 {
    yields_of(rt, fut) as u64
}

#[test]
fn a_pacer_and_a_paced_stream_yield_the_cpu_at_every_quantum_yield() {
    for os_yield in [true, false] {
        let clock = ManualClock::new();
        let elastic = elastic(&clock, os_yield);
        let rt = runtime();
        let (mut pacer, c) = (elastic.pacer(), clock.clone());
        let pacer_yields = yields_of_u64(&rt, async move {
            for _ in 0..steps() {
                pacer.pace().await;
                c.advance(STEP);
            }
        });
        let after_pacer = elastic.snapshot().os_yields;
        let mut stream = Box::pin(
            TimedItems {
                clock: clock.clone(),
                step: STEP,
                left: u128::from(steps()),
            }
            .paced(&elastic),
        );
        let stream_yields = yields_of_u64(&rt, async move {
            while poll_fn(|cx| stream.as_mut().poll_next(cx)).await.is_some() {}
        });
        let s = elastic.snapshot();
        // Every yield was a spent quantum (the grant covers the whole run: no waits).
        assert!(pacer_yields >= u64::from(steps()) / 2, "{pacer_yields}");
        assert!(stream_yields >= u64::from(steps()) / 2, "{stream_yields}");
        if os_yield {
            assert_eq!(after_pacer, pacer_yields);
            assert_eq!(s.os_yields, pacer_yields + stream_yields);
        } else {
            assert_eq!(s.os_yields, 0);
        }
        drop(rt);
        assert_ledger_balanced(&elastic.snapshot());
    }
}

#[test]
fn pace_blocking_runs_in_quantum_stretches_that_end_in_an_os_yield() {
    let clock = ManualClock::new();
    let on = elastic(&clock, true);
    let mut pacer = on.pacer();
    for _ in 0..steps() {
        pacer.pace_blocking();
        clock.advance(STEP);
    }
    drop(pacer);
    // The amortized check may let a stretch run up to twice the quantum.
    let n = on.snapshot().os_yields;
    assert!(
        (u64::from(steps()) / 2..=u64::from(steps())).contains(&n),
        "{n} OS yields in {} quanta",
        steps()
    );
    assert_ledger_balanced(&on.snapshot());

    // Off: one stretch is the whole slice, and nothing yields.
    let off = elastic(&clock, false);
    let mut pacer = off.pacer();
    for _ in 0..steps() {
        pacer.pace_blocking();
        clock.advance(STEP);
    }
    drop(pacer);
    let s = off.snapshot();
    assert_eq!((s.os_yields, s.grants), (0, 1));
    assert_ledger_balanced(&s);
}

#[test]
fn a_setup_permit_yields_the_cpu_at_its_quantum_yield() {
    for os_yield in [true, false] {
        let clock = ManualClock::new();
        let elastic = elastic(&clock, os_yield);
        let gate = elastic
            .connection_gate(GateSettings::new().share(0.5, 0.5).initial_share(0.5))
            .expect("valid settings");
        let mut admission = gate.admit(Duration::from_secs(10));
        let Poll::Ready(Ok(mut permit)) =
            Pin::new(&mut admission).poll(&mut Context::from_waker(std::task::Waker::noop()))
        else {
            panic!("not admitted at once")
        };
        let (woken, waker) = CountingWaker::new();
        let mut cx = Context::from_waker(&waker);
        clock.advance(2 * STEP);
        let mut pace = Box::pin(permit.pace());
        assert!(pace.as_mut().poll(&mut cx).is_pending());
        assert_eq!(woken.count(), 1);
        assert!(pace.as_mut().poll(&mut cx).is_ready());
        drop(pace);
        drop(permit);
        assert_eq!(gate.snapshot().os_yields, u64::from(os_yield));
    }
}
