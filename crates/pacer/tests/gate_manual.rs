//! The connection gate on the manual clock: admission, deadlines, expiry, rejection, the
//! retry-after hint, the ledger, cancellation at every await, and a closed gate.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use common::*;
use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::{ConnectionGate, Elastic, GateSettings};

fn poll<F: Future + Unpin>(f: &mut F, cx: &mut Context<'_>) -> Poll<F::Output> {
    Pin::new(f).poll(cx)
}

/// A gate on `clock` with its share fixed at `share` of `cpus` CPUs.
fn gate(
    clock: &ManualClock,
    share: f64,
    cpus: f64,
    settings: GateSettings,
) -> (Elastic, ConnectionGate) {
    let elastic = manual_elastic(clock, 0.1, cpus);
    let gate = elastic
        .connection_gate(settings.share(share, share).initial_share(share))
        .expect("valid settings");
    (elastic, gate)
}

#[test]
fn admits_at_once_when_tokens_are_there() {
    let clock = ManualClock::new();
    let (_elastic, gate) = gate(&clock, 0.5, 1.0, GateSettings::new());
    let (_c, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    let mut admission = gate.admit(Duration::from_millis(500));
    let Poll::Ready(Ok(permit)) = poll(&mut admission, &mut cx) else {
        panic!("not admitted at once")
    };
    clock.advance(Duration::from_millis(3));
    drop(permit);
    let s = gate.snapshot();
    assert_eq!(
        (s.admitted, s.rejected, s.expired, s.queue_len),
        (1, 0, 0, 0)
    );
    assert_eq!(s.setup_cpu, 3 * MS);
    assert_eq!(s.share, 0.5);
}
