//! The connection gate on the manual clock: admission, deadlines, expiry, rejection, the
//! retry-after hint, the ledger, cancellation at every await, and a closed gate.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use common::*;
use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::gate::{ConnectionGate, GateSettings, RejectReason};
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::Elastic;

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

/// An admission polled once with a fresh waker: its result, and the waker's counter.
fn first_poll(
    admission: &mut elastic_cpu_pacer::gate::Admission,
) -> (
    Poll<Result<elastic_cpu_pacer::gate::SetupPermit, elastic_cpu_pacer::gate::Rejected>>,
    std::sync::Arc<CountingWaker>,
    std::task::Waker,
) {
    let (count, waker) = CountingWaker::new();
    let r = poll(admission, &mut Context::from_waker(&waker));
    (r, count, waker)
}

/// Admit one setup and run it for `cpu` (on the manual clock), driving it into debt.
fn run_setup(clock: &ManualClock, gate: &ConnectionGate, cpu: Duration) {
    let mut a = gate.admit(Duration::from_secs(10));
    let (Poll::Ready(Ok(permit)), _, _) = first_poll(&mut a) else {
        panic!("not admitted at once")
    };
    clock.advance(cpu);
    drop(permit);
}

#[test]
fn a_queued_attempt_is_granted_on_the_tick_that_refills_and_woken() {
    let clock = ManualClock::new();
    // 0.1 of one CPU: 100 ms of tokens a second, full at the start.
    let (elastic, gate) = gate(&clock, 0.1, 1.0, GateSettings::new());
    // One setup that takes 150 ms: from a full bucket (100 ms) it leaves 49 ms of debt (the
    // 1 ms estimate taken at admission was refilled while it ran, the bucket being capped).
    run_setup(&clock, &gate, 150 * MS);
    assert_eq!(gate.snapshot().stats.balance_nanos, -49_000_000);
    let mut a = gate.admit(Duration::from_secs(2));
    let (r, count, waker) = first_poll(&mut a);
    assert!(r.is_pending());
    assert_eq!(gate.snapshot().queue_len, 1);
    // 490 ms of refill needed. A tick before that grants nothing.
    clock.advance(400 * MS);
    elastic.tick();
    assert_eq!((count.count(), gate.snapshot().queue_len), (0, 1));
    clock.advance(100 * MS);
    elastic.tick();
    assert_eq!(count.count(), 1, "granted and woken");
    let Poll::Ready(Ok(permit)) = poll(&mut a, &mut Context::from_waker(&waker)) else {
        panic!("not admitted")
    };
    drop(permit);
    let s = gate.snapshot();
    assert_eq!(
        (s.admitted, s.queue_len, s.rejected, s.expired),
        (2, 0, 0, 0)
    );
    // It waited 500 ms.
    assert_eq!(s.stats.wait_nanos, 500_000_000);
    assert!(s.longest_wait >= 400 * MS, "{s:?}");
}

#[test]
fn an_attempt_that_cannot_start_in_time_is_refused_at_once_spending_nothing() {
    let clock = ManualClock::new();
    let (_elastic, gate) = gate(&clock, 0.1, 1.0, GateSettings::new());
    run_setup(&clock, &gate, 150 * MS); // 49 ms of debt: the next start is 490 ms away
    let before = gate.snapshot();
    let mut a = gate.admit(480 * MS);
    let (Poll::Ready(Err(r)), count, _) = first_poll(&mut a) else {
        panic!("not refused at once")
    };
    assert_eq!(r.reason(), RejectReason::WouldExpire);
    assert_eq!(count.count(), 0);
    let s = gate.snapshot();
    assert_eq!((s.rejected, s.queue_len, s.admitted), (1, 0, 1));
    assert_eq!(
        s.stats.acquired_nanos, before.stats.acquired_nanos,
        "no tokens taken"
    );
    assert_eq!(s.setup_cpu, before.setup_cpu, "no setup CPU spent");
    // With a deadline long enough it waits instead.
    let mut b = gate.admit(500 * MS);
    assert!(first_poll(&mut b).0.is_pending());
}

#[test]
fn an_attempt_that_waited_past_its_deadline_is_dropped_before_its_setup() {
    let clock = ManualClock::new();
    let (elastic, gate) = gate(&clock, 0.1, 1.0, GateSettings::new());
    run_setup(&clock, &gate, 150 * MS); // next start 490 ms away
    let mut a = gate.admit(500 * MS);
    let (r, count, waker) = first_poll(&mut a);
    assert!(r.is_pending());
    // No tick comes before the deadline passes (a stalled governor, say): the tick that
    // finds it expired drops it, though tokens are there by then.
    clock.advance(550 * MS);
    elastic.tick();
    assert_eq!(count.count(), 1, "woken with the news");
    let Poll::Ready(Err(r)) = poll(&mut a, &mut Context::from_waker(&waker)) else {
        panic!("not expired")
    };
    assert_eq!(r.reason(), RejectReason::Expired);
    let s = gate.snapshot();
    assert_eq!((s.expired, s.admitted, s.queue_len), (1, 1, 0));
    assert_eq!(s.stats.in_setup, 0, "never granted");
}

#[test]
fn a_full_fifo_queue_refuses_the_newcomer() {
    let clock = ManualClock::new();
    let settings = GateSettings::new()
        .max_queue(2)
        .order(elastic_cpu_pacer::gate::QueueOrder::Fifo);
    let (_elastic, gate) = gate(&clock, 0.1, 1.0, settings);
    run_setup(&clock, &gate, 150 * MS);
    let mut a = gate.admit(Duration::from_secs(10));
    let mut b = gate.admit(Duration::from_secs(10));
    let mut c = gate.admit(Duration::from_secs(10));
    assert!(first_poll(&mut a).0.is_pending());
    assert!(first_poll(&mut b).0.is_pending());
    let (Poll::Ready(Err(r)), _, _) = first_poll(&mut c) else {
        panic!("not refused")
    };
    assert_eq!(r.reason(), RejectReason::QueueFull);
    assert_eq!(gate.snapshot().queue_len, 2);
}

#[test]
fn a_full_lifo_queue_drops_its_oldest_for_the_newcomer() {
    let clock = ManualClock::new();
    let settings = GateSettings::new()
        .max_queue(2)
        .order(elastic_cpu_pacer::gate::QueueOrder::Lifo);
    let (elastic, gate) = gate(&clock, 0.1, 1.0, settings);
    run_setup(&clock, &gate, 150 * MS);
    let mut a = gate.admit(Duration::from_secs(10));
    let mut b = gate.admit(Duration::from_secs(10));
    let mut c = gate.admit(Duration::from_secs(10));
    let (ra, ca, wa) = first_poll(&mut a);
    assert!(ra.is_pending());
    assert!(first_poll(&mut b).0.is_pending());
    let (rc, cc, wc) = first_poll(&mut c);
    assert!(rc.is_pending());
    assert_eq!(ca.count(), 1, "the oldest is told at once");
    let Poll::Ready(Err(r)) = poll(&mut a, &mut Context::from_waker(&wa)) else {
        panic!("the oldest was not displaced")
    };
    assert_eq!(r.reason(), RejectReason::QueueFull);
    // The newest is granted first.
    clock.advance(Duration::from_secs(1));
    elastic.tick();
    assert_eq!(cc.count(), 1);
    assert!(matches!(
        poll(&mut c, &mut Context::from_waker(&wc)),
        Poll::Ready(Ok(_))
    ));
}

#[test]
fn the_retry_hint_follows_the_queue_and_is_bounded_and_jittered() {
    let clock = ManualClock::new();
    let settings = GateSettings::new()
        .max_queue(20)
        .order(elastic_cpu_pacer::gate::QueueOrder::Fifo);
    // 0.05 of 2 CPUs: 100 ms of setup CPU a second.
    let (_elastic, gate) = gate(&clock, 0.05, 2.0, settings);
    run_setup(&clock, &gate, 110 * MS); // 10 ms of debt; a setup now costs 110 ms
    let mut queued = Vec::new();
    for _ in 0..20 {
        let mut a = gate.admit(Duration::from_secs(100));
        assert!(first_poll(&mut a).0.is_pending());
        queued.push(a);
    }
    // Everyone queued and this one, at the current rate and cost: (21 × 110 + 10) ms of CPU
    // at 100 ms a second, 23.2 s; above the cap, so the base is RETRY_AFTER_MAX / 2.
    let base = |s: &elastic_cpu_pacer::gate::GateSnapshot| {
        let st = &s.stats;
        let need =
            (s.queue_len as f64 + 1.0) * st.cost_nanos as f64 - (st.balance_nanos.min(0) as f64);
        Duration::from_secs_f64(need / st.rate_nanos_per_sec as f64).clamp(
            elastic_cpu_pacer::gate::RETRY_AFTER_MIN,
            elastic_cpu_pacer::gate::RETRY_AFTER_MAX / 2,
        )
    };
    let expected = base(&gate.snapshot());
    assert_eq!(
        expected,
        elastic_cpu_pacer::gate::RETRY_AFTER_MAX / 2,
        "{:#?}",
        gate.snapshot()
    );
    let hints = refusals(&gate, 200);
    for &h in &hints {
        assert!(
            h >= expected && h < elastic_cpu_pacer::gate::RETRY_AFTER_MAX,
            "{h:?}"
        );
    }
    assert!(
        hints[190] - hints[10] > Duration::from_secs(5),
        "not spread: {hints:?}"
    );

    // Those 200 refusals booked retry slots one setup's time (1.1 s) apart, up to the
    // horizon 60 s ahead: 54 slots (crates/elastic-core/tests/gate_crowd.rs has them exactly).
    drop(queued);
    assert_eq!(gate.snapshot().stats.crowd, 54, "{:#?}", gate.snapshot());

    // A short queue and no crowd (a fresh gate): a shorter hint, within 1×–2× of its base.
    let (_elastic, gate) = gate_with(&clock, settings_fifo(20));
    run_setup(&clock, &gate, 110 * MS);
    let queued: Vec<_> = (0..3)
        .map(|_| {
            let mut a = gate.admit(Duration::from_secs(100));
            assert!(first_poll(&mut a).0.is_pending());
            a
        })
        .collect();
    let expected = base(&gate.snapshot());
    // (4 × 110 + 9) ms of CPU at 100 ms a second.
    assert_eq!(expected, Duration::from_millis(4490), "{expected:?}");
    let mut a = gate.admit(Duration::ZERO);
    let (Poll::Ready(Err(r)), _, _) = first_poll(&mut a) else {
        panic!("not refused")
    };
    assert_eq!(r.reason(), RejectReason::WouldExpire);
    let h = r.retry_after();
    assert!(
        h >= expected && h < 2 * expected + Duration::from_millis(1),
        "{h:?} {expected:?}"
    );
    drop(queued);
}

fn settings_fifo(max_queue: usize) -> GateSettings {
    GateSettings::new()
        .max_queue(max_queue)
        .order(elastic_cpu_pacer::gate::QueueOrder::Fifo)
}

/// 0.05 of 2 CPUs: 100 ms of setup CPU a second.
fn gate_with(clock: &ManualClock, settings: GateSettings) -> (Elastic, ConnectionGate) {
    gate(clock, 0.05, 2.0, settings)
}

/// The retry hints of `n` attempts refused because the queue is full, sorted.
fn refusals(gate: &ConnectionGate, n: usize) -> Vec<Duration> {
    let mut hints: Vec<_> = (0..n)
        .map(|_| {
            let mut a = gate.admit(Duration::from_secs(100));
            let (Poll::Ready(Err(r)), _, _) = first_poll(&mut a) else {
                panic!("not refused")
            };
            assert_eq!(r.reason(), RejectReason::QueueFull);
            r.retry_after()
        })
        .collect();
    hints.sort();
    hints
}

/// A setup future scripted on the manual clock: each poll runs `run` of CPU; it is done at its
/// `polls`-th poll. The test moves the clock between polls (the setup waiting).
struct ScriptedSetup {
    clock: ManualClock,
    run: Duration,
    polls: u32,
}

impl Future for ScriptedSetup {
    type Output = u32;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
        self.clock.advance(self.run);
        self.polls -= 1;
        if self.polls == 0 {
            return Poll::Ready(7);
        }
        // The wait happens "between polls": the clock moves after this poll has ended.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

fn admitted(gate: &ConnectionGate) -> elastic_cpu_pacer::gate::SetupPermit {
    let mut a = gate.admit(Duration::from_secs(10));
    let (Poll::Ready(Ok(permit)), _, _) = first_poll(&mut a) else {
        panic!("not admitted at once")
    };
    permit
}

#[test]
fn a_setup_future_is_charged_its_polls_and_not_its_waits() {
    let clock = ManualClock::new();
    let (_elastic, gate) = gate(&clock, 0.5, 1.0, GateSettings::new());
    let permit = admitted(&gate);
    // Time between admission and the first poll is the setup's own running time.
    clock.advance(Duration::from_millis(1));
    let mut run = permit.run(ScriptedSetup {
        clock: clock.clone(),
        run: Duration::from_millis(2),
        polls: 3,
    });
    let (_c, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    let mut run = Box::pin(&mut run);
    for _ in 0..2 {
        assert!(run.as_mut().poll(&mut cx).is_pending());
        let s = gate.snapshot();
        assert_eq!(
            (s.in_setup, s.waiting_on_peer),
            (0, 1),
            "no place while it waits"
        );
        clock.advance(Duration::from_millis(50));
    }
    assert_eq!(run.as_mut().poll(&mut cx), Poll::Ready(7));
    // Settled on completion, before the future is dropped: 1 + 3 × 2 ms, none of the waits.
    let s = gate.snapshot();
    assert_eq!((s.in_setup, s.setup_cpu), (0, 7 * MS));
}

#[test]
fn a_setup_future_dropped_midway_settles_what_it_ran() {
    let clock = ManualClock::new();
    let (_elastic, gate) = gate(&clock, 0.5, 1.0, GateSettings::new());
    let mut run = Box::pin(admitted(&gate).run(ScriptedSetup {
        clock: clock.clone(),
        run: Duration::from_millis(4),
        polls: 10,
    }));
    let (_c, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    assert!(run.as_mut().poll(&mut cx).is_pending());
    clock.advance(Duration::from_millis(30));
    drop(run);
    let s = gate.snapshot();
    assert_eq!((s.in_setup, s.setup_cpu), (0, 4 * MS));
}

#[test]
fn a_setup_future_longer_than_its_estimate_leaves_debt_at_once() {
    let clock = ManualClock::new();
    let (_elastic, gate) = gate(&clock, 0.5, 1.0, GateSettings::new());
    let estimate = gate.snapshot().setup_cost;
    let mut run = Box::pin(admitted(&gate).run(ScriptedSetup {
        clock: clock.clone(),
        run: estimate * 20,
        polls: 2,
    }));
    let (_c, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    assert!(run.as_mut().poll(&mut cx).is_pending());
    // Not ended (waiting for its next poll), and the overrun is already charged (debt the next
    // admission sees).
    let s = gate.snapshot();
    assert_eq!(s.in_setup + s.waiting_on_peer, 1);
    assert_eq!(
        s.stats.over_limit_nanos,
        (estimate * 20 - estimate).as_nanos() as u64
    );
    drop(run);
}

/// Admit at once or fail; keep the permit.
fn admit_now(gate: &ConnectionGate) -> Option<elastic_cpu_pacer::gate::SetupPermit> {
    let mut a = gate.admit(Duration::from_secs(10));
    match first_poll(&mut a).0 {
        Poll::Ready(Ok(p)) => Some(p),
        _ => None,
    }
}

#[test]
fn setups_in_long_polls_never_hold_every_worker() {
    let clock = ManualClock::new();
    // 0.9 of 2 CPUs pays for 1.8 CPUs: two setups at once, rounded up.
    let (elastic, gate) = gate(&clock, 0.9, 2.0, GateSettings::new());
    let (a, b) = (admit_now(&gate), admit_now(&gate));
    assert!(a.is_some() && b.is_some(), "two setups at once");
    drop((a, b));
    // Setups that are one 2 ms call each: the quantum cannot cut them.
    let (_c, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    for _ in 0..30 {
        clock.advance(Duration::from_millis(20));
        for _ in 0..10 {
            let permit = admit_now(&gate).expect("admitted");
            let mut run = Box::pin(permit.run(ScriptedSetup {
                clock: clock.clone(),
                run: Duration::from_millis(2),
                polls: 1,
            }));
            assert!(run.as_mut().poll(&mut cx).is_ready());
        }
        elastic.tick();
    }
    // Now at most floor(1.8) = 1 at once: the foreground keeps a worker.
    let first = admit_now(&gate).expect("admitted");
    assert!(admit_now(&gate).is_none(), "a second long setup at once");
    drop(first);
    assert!(admit_now(&gate).is_some());
}

#[test]
fn a_setup_waiting_on_its_client_holds_no_running_place() {
    let clock = ManualClock::new();
    // 0.5 of 1 CPU: one setup runs at once.
    let (elastic, gate) = gate(&clock, 0.5, 1.0, GateSettings::new());
    elastic.tick();
    assert_eq!(gate.snapshot().stats.max_in_setup, 1);
    let (_c, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    let script = |polls| ScriptedSetup {
        clock: clock.clone(),
        run: MS,
        polls,
    };
    // A client that answers once and then goes silent: its setup waits, holding no place.
    let mut silent = Box::pin(admit_now(&gate).expect("admitted").run(script(3)));
    assert!(silent.as_mut().poll(&mut cx).is_pending());
    let s = gate.snapshot();
    assert_eq!((s.in_setup, s.waiting_on_peer), (0, 1));
    // So an honest client is admitted, and its setup runs to the end.
    let mut honest = Box::pin(admit_now(&gate).expect("admitted beside it").run(script(1)));
    assert_eq!(gate.snapshot().in_setup, 1);
    assert!(admit_now(&gate).is_none(), "the running place is taken");
    assert_eq!(honest.as_mut().poll(&mut cx), Poll::Ready(7));
    // The waiting setup's client answers: it runs on to its end.
    assert!(silent.as_mut().poll(&mut cx).is_pending());
    assert_eq!(silent.as_mut().poll(&mut cx), Poll::Ready(7));
    let s = gate.snapshot();
    assert_eq!((s.in_setup, s.waiting_on_peer, s.admitted), (0, 0, 2));
    assert_eq!(s.setup_cpu, 4 * MS, "three polls and one, 1 ms each");
}

#[test]
fn setups_in_flight_are_bounded_waiting_or_not() {
    let clock = ManualClock::new();
    let (elastic, gate) = gate(&clock, 0.5, 1.0, GateSettings::new().max_in_flight(2));
    elastic.tick();
    let (_c, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    let mut waiting: Vec<_> = (0..2)
        .map(|_| {
            let permit = admit_now(&gate).expect("admitted");
            let mut run = Box::pin(permit.run(ScriptedSetup {
                clock: clock.clone(),
                run: MS,
                polls: 2,
            }));
            assert!(run.as_mut().poll(&mut cx).is_pending());
            run
        })
        .collect();
    let s = gate.snapshot();
    assert_eq!((s.in_setup, s.waiting_on_peer), (0, 2));
    assert!(admit_now(&gate).is_none(), "two in flight already");
    // One ends (its client gave up, or the timeout dropped it): room for one more.
    waiting.pop();
    assert_eq!(gate.snapshot().waiting_on_peer, 1);
    assert!(admit_now(&gate).is_some());
}
