//! The connection gate's permits, cancellation at every await point, the ledger, the share
//! steered by the probe, the brake, and a gate whose governor is gone. Manual clock.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::*;
use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::gate::{
    Admission, ConnectionGate, GateSettings, GateSnapshot, RejectReason, Rejected, SetupPermit,
};
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::Elastic;

fn poll<F: Future + Unpin>(f: &mut F, cx: &mut Context<'_>) -> Poll<F::Output> {
    Pin::new(f).poll(cx)
}

fn noop() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

fn gate(clock: &ManualClock, share: f64, settings: GateSettings) -> (Elastic, ConnectionGate) {
    let elastic = manual_elastic(clock, 0.1, 1.0);
    let gate = elastic
        .connection_gate(settings.share(share, share).initial_share(share))
        .expect("valid settings");
    (elastic, gate)
}

fn admit_now(gate: &ConnectionGate) -> SetupPermit {
    match poll(&mut gate.admit(Duration::from_secs(10)), &mut noop()) {
        Poll::Ready(Ok(p)) => p,
        other => panic!("not admitted at once: {:?}", other.map(|r| r.map(|_| ()))),
    }
}

fn first(a: &mut Admission) -> Poll<Result<SetupPermit, Rejected>> {
    poll(a, &mut noop())
}

/// Tokens taken = CPU charged + tokens returned, once every setup is settled.
fn assert_gate_ledger(s: &GateSnapshot) {
    let st = &s.stats;
    assert_eq!(
        st.acquired_nanos as i128 - st.returned_nanos as i128 + st.over_limit_nanos as i128,
        st.used_nanos as i128,
        "gate ledger unbalanced: {s:#?}"
    );
}

/// Every attempt ended exactly once (or is still waiting / granted and uncollected).
fn assert_attempts_add_up(s: &GateSnapshot) {
    let st = &s.stats;
    assert_eq!(
        st.attempts,
        s.admitted + s.rejected + s.expired + s.cancelled + s.queue_len as u64 + st.pending as u64,
        "{s:#?}"
    );
}

/// Drive the bucket into debt with one long setup (150 ms from a full bucket of 100 ms at 0.1
/// of a CPU: 49 ms of debt).
fn into_debt(clock: &ManualClock, gate: &ConnectionGate) {
    let p = admit_now(gate);
    clock.advance(150 * MS);
    drop(p);
}

#[test]
fn pace_yields_at_the_quantum_and_charges_overruns_at_once() {
    let clock = ManualClock::new();
    let (_elastic, gate) = gate(&clock, 0.5, GateSettings::new().setup_cost(MS));
    let mut permit = admit_now(&gate);
    let (count, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    // 20 µs of work: below the 50 µs quantum, no yield.
    clock.advance(Duration::from_micros(20));
    assert!(poll(&mut Box::pin(permit.pace()), &mut cx).is_ready());
    // 40 µs more: 60 µs since the last yield: one yield (woken at once off a runtime).
    clock.advance(Duration::from_micros(40));
    {
        let mut pace = Box::pin(permit.pace());
        assert!(pace.as_mut().poll(&mut cx).is_pending());
        assert_eq!(count.count(), 1);
        // Time spent suspended is not charged.
        clock.advance(5 * MS);
        assert!(pace.as_mut().poll(&mut cx).is_ready());
    }
    assert_eq!(permit.used(), Duration::from_micros(60));
    // 2 ms more: past the 1 ms estimate; the overrun is charged at this pace, not at the drop.
    clock.advance(2 * MS);
    let _ = poll(&mut Box::pin(permit.pace()), &mut cx);
    let s = gate.snapshot();
    assert_eq!(s.stats.over_limit_nanos, 1_060_000);
    drop(permit);
    let s = gate.snapshot();
    assert_eq!(s.setup_cpu, Duration::from_micros(2060));
    assert_eq!(
        s.setup_cost,
        Duration::from_micros(2060),
        "the first measurement"
    );
    assert_gate_ledger(&s);
}

#[test]
fn the_ledger_balances_over_setups_that_under_and_over_run() {
    let clock = ManualClock::new();
    // No cap on setups at once: the permits held across ticks would otherwise hold its one
    // place (0.2 of one CPU) and everything else would wait.
    let settings = GateSettings::new().max_queue(64).cap_concurrency(false);
    let (elastic, gate) = gate(&clock, 0.2, settings);
    let mut held = Vec::new();
    for i in 0..200u64 {
        // Setups of 0.2 ..= 3 ms, some settled at once, some held across ticks.
        let mut a = gate.admit(Duration::from_secs(5));
        match first(&mut a) {
            Poll::Ready(Ok(mut p)) => {
                clock.advance(Duration::from_micros(200 + (i * 317) % 2800));
                let _ = poll(&mut Box::pin(p.pace()), &mut noop());
                if i % 3 == 0 {
                    held.push(p);
                }
            }
            Poll::Ready(Err(_)) => {}
            Poll::Pending => held_admission(&mut held, a, &clock, &elastic),
        }
        if i % 10 == 0 {
            clock.advance(100 * MS);
            elastic.tick();
            held.truncate(held.len() / 2);
        }
    }
    drop(held);
    let s = gate.snapshot();
    assert_gate_ledger(&s);
    assert_attempts_add_up(&s);
    assert!(s.admitted > 50 && s.setup_cpu > 50 * MS, "{s:#?}");
}

/// A queued admission: tick until it resolves; keep its permit if admitted.
fn held_admission(held: &mut Vec<SetupPermit>, mut a: Admission, clock: &ManualClock, e: &Elastic) {
    loop {
        match first(&mut a) {
            Poll::Ready(Ok(p)) => return held.push(p),
            Poll::Ready(Err(_)) => return,
            Poll::Pending => {
                clock.advance(100 * MS);
                e.tick();
            }
        }
    }
}

#[test]
fn dropping_an_admission_at_any_point_leaves_nothing_behind() {
    let clock = ManualClock::new();
    let (elastic, gate) = gate(&clock, 0.1, GateSettings::new());
    into_debt(&clock, &gate);
    let before = gate.snapshot();

    // 1. Never polled: nothing happened at all.
    drop(gate.admit(Duration::from_secs(5)));
    assert_eq!(gate.snapshot().stats.attempts, before.stats.attempts);

    // 2. Queued: leaves the queue, counted as cancelled.
    let mut a = gate.admit(Duration::from_secs(5));
    assert!(first(&mut a).is_pending());
    assert_eq!(gate.snapshot().queue_len, 1);
    drop(a);
    let s = gate.snapshot();
    assert_eq!((s.queue_len, s.cancelled), (0, 1));
    assert_eq!(
        s.stats.balance_nanos, before.stats.balance_nanos,
        "no tokens moved"
    );

    // 3. Granted (on a tick) but not yet polled: the grant goes back whole.
    let mut b = gate.admit(Duration::from_secs(5));
    assert!(first(&mut b).is_pending());
    clock.advance(Duration::from_secs(1)); // debt repaid: the tick grants it
    elastic.tick();
    let granted = gate.snapshot();
    assert_eq!((granted.queue_len, granted.stats.pending), (0, 1));
    drop(b);
    let s = gate.snapshot();
    assert_eq!((s.stats.pending, s.stats.in_setup, s.cancelled), (0, 0, 2));
    assert_eq!(
        s.stats.balance_nanos,
        granted.stats.balance_nanos + granted.stats.cost_nanos as i64,
        "its tokens came back"
    );

    // 4. Admitted: the permit, dropped before any pace, settles what it ran.
    let mut c = gate.admit(Duration::from_secs(5));
    let Poll::Ready(Ok(p)) = first(&mut c) else {
        panic!("not admitted")
    };
    clock.advance(MS);
    drop(p);
    // 5. A pace dropped while yielded: the permit still settles everything it ran.
    let mut p = admit_now(&gate);
    clock.advance(Duration::from_micros(80));
    {
        let mut pace = Box::pin(p.pace());
        assert!(pace.as_mut().poll(&mut noop()).is_pending());
    }
    clock.advance(Duration::from_micros(20));
    drop(p);
    // 6. Polled again after it finished: refused, nothing taken.
    let mut d = gate.admit(Duration::from_secs(5));
    let Poll::Ready(Ok(p)) = first(&mut d) else {
        panic!("not admitted")
    };
    drop(p);
    assert!(matches!(first(&mut d), Poll::Ready(Err(_))));

    let s = gate.snapshot();
    assert_eq!((s.queue_len, s.stats.pending, s.stats.in_setup), (0, 0, 0));
    assert_eq!(
        s.setup_cpu,
        before.setup_cpu + MS + Duration::from_micros(100)
    );
    assert_gate_ledger(&s);
}

#[test]
fn the_share_follows_the_scheduling_latency_on_the_governor_tick() {
    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, 0.1, 1.0);
    let gate = elastic
        .connection_gate(GateSettings::new().share(0.1, 0.9).initial_share(0.5))
        .unwrap();
    // Latency above the 1 ms target: the share steps down 0.01 a tick (−10 %/s).
    for _ in 0..10 {
        elastic.probe().record_poll(Some(5 * MS), None, false);
        clock.advance(100 * MS);
        elastic.tick();
    }
    let after_ten = gate.snapshot().share;
    assert!((after_ten - 0.4).abs() < 1e-9, "{after_ten}");
    // Healthy latency, nobody waiting: the high samples leave the 1 s window; the share holds
    // (idle decay stops at the initial share, above it).
    let healthy = |n| {
        for _ in 0..n {
            elastic
                .probe()
                .record_poll(Some(Duration::from_micros(100)), None, false);
            clock.advance(MS);
            elastic.tick();
        }
    };
    healthy(10); // the window still holds high samples for most of these: still stepping down
    let low = gate.snapshot().share;
    assert!(low < after_ten);
    healthy(5);
    assert_eq!(gate.snapshot().share, low);
    // Healthy latency with attempts waiting: it steps up (+5 %/s), 0.005 a tick.
    let p = admit_now(&gate);
    clock.advance(Duration::from_secs(1)); // debt: the next start is a second away
    drop(p);
    let mut waiting = gate.admit(Duration::from_secs(100));
    assert!(first(&mut waiting).is_pending());
    healthy(10);
    assert!(first(&mut waiting).is_pending());
    let s = gate.snapshot();
    assert!(
        (s.share - (low + 0.05)).abs() < 1e-9,
        "{} vs {low}",
        s.share
    );
    // The elastic limit is fixed here: only the gate moved.
    assert_eq!(elastic.snapshot().share, 0.1);
}

#[test]
fn a_gate_whose_governor_is_gone_does_not_hang_its_callers() {
    let clock = ManualClock::new();
    let (elastic, gate) = gate(&clock, 0.1, GateSettings::new().cap_concurrency(false));
    let mut permit = admit_now(&gate);
    into_debt(&clock, &gate);
    let (count, waker) = CountingWaker::new();
    let mut waiting = gate.admit(Duration::from_secs(100));
    assert!(poll(&mut waiting, &mut Context::from_waker(&waker)).is_pending());

    drop(elastic); // every Elastic handle gone: the governor with it
    assert_eq!(count.count(), 1, "the waiter is woken");
    let Poll::Ready(Err(r)) = poll(&mut waiting, &mut Context::from_waker(&waker)) else {
        panic!("still waiting")
    };
    assert_eq!(r.reason(), RejectReason::Closed);
    // Later attempts are refused at once.
    let Poll::Ready(Err(r)) = first(&mut gate.admit(Duration::from_secs(1))) else {
        panic!("not refused")
    };
    assert_eq!(r.reason(), RejectReason::Closed);
    // A permit's pace returns at once, even past its quantum.
    clock.advance(MS);
    assert!(poll(&mut Box::pin(permit.pace()), &mut noop()).is_ready());
    drop(permit);
    let s = gate.snapshot();
    assert_gate_ledger(&s);
    assert_attempts_add_up(&s);
}

#[test]
fn the_backlog_brake_holds_back_setups_too() {
    let clock = ManualClock::new();
    let elastic = Elastic::builder()
        .manual(clock.clone())
        .running_clock(clock.clone())
        .cpus(1.0)
        .build()
        .unwrap();
    let gate = elastic.connection_gate(GateSettings::new()).unwrap();
    // A foreground task polled after waiting 4× the target: the brake engages on the tick.
    elastic.probe().record_poll(Some(10 * MS), None, false);
    elastic.tick();
    assert!(elastic.snapshot().braked);
    let mut a = gate.admit(Duration::from_secs(1));
    assert!(first(&mut a).is_pending(), "admitted while braked");
    assert!(gate.snapshot().stats.paused);
}
