//! The backlog brake, driven by a manual clock and hand-made ticks: a foreground alarm pauses
//! the queue at the next tick, holders give their grants back at their next poll, nothing is
//! granted until the hold has passed without alarms (or the brake hits `BRAKE_MAX`, then a
//! cooldown), and every token is still accounted for. One test runs the real governor thread,
//! with generous deadlines only.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use common::*;
use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::settings::{Brake, BRAKE_MAX, DEFAULT_BRAKE_HOLD};
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::{BuildError, Elastic, ElasticBuilder, PacedExt, PacedStreamExt, Profile};
use futures_core::Stream;

const AT: Duration = Duration::from_millis(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// 10 % of one CPU (100 ms of tokens a second, burst 100 ms = one slice), polls timed on the
/// manual clock, brake at 1 ms of foreground queue wait.
fn builder(clock: &ManualClock) -> ElasticBuilder {
    Elastic::builder()
        .manual(clock.clone())
        .running_clock(clock.clone())
        .fixed_share(0.1)
        .cpus(1.0)
}

fn braking(clock: &ManualClock) -> Elastic {
    builder(clock)
        .brake(Brake::At(AT))
        .build()
        .expect("valid settings")
}

/// A foreground poll that waited 2 ms: over the 1 ms threshold.
fn alarm(elastic: &Elastic) {
    elastic.probe().record_poll(Some(ms(2)), None, false);
}

fn poll<F: Future + Unpin>(f: &mut F, cx: &mut Context<'_>) -> Poll<F::Output> {
    Pin::new(f).poll(cx)
}

fn poll_next<S: Stream + Unpin>(s: &mut S, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
    Pin::new(s).poll_next(cx)
}

fn burn(clock: &ManualClock, per_poll: Duration, polls: usize) -> Burn {
    Burn {
        clock: clock.clone(),
        per_poll,
        polls,
    }
}

#[test]
fn alarm_brakes_at_the_next_tick_and_the_hold_releases_it() {
    let clock = ManualClock::new();
    let elastic = braking(&clock);
    assert_eq!(elastic.probe().config().alarm_at, Some(AT));

    // Under the threshold: no brake.
    elastic
        .probe()
        .record_poll(Some(AT - Duration::from_nanos(1)), None, false);
    elastic.tick();
    let s = elastic.snapshot();
    assert_eq!((s.braked, s.brakes, s.queue.pauses), (false, 0, 0));

    // An alarm brakes at the next tick, not before.
    alarm(&elastic);
    assert!(!elastic.snapshot().braked);
    elastic.tick();
    let s = elastic.snapshot();
    assert!(s.braked && s.queue.paused, "{s:#?}");
    assert_eq!((s.brakes, s.queue.pauses), (1, 1));
    assert_eq!(s.braked_time, Duration::ZERO, "only ended brakes count");

    // Ticks inside the hold keep it on.
    clock.advance(DEFAULT_BRAKE_HOLD - Duration::from_nanos(1));
    elastic.tick();
    assert!(elastic.snapshot().braked);

    // A hold without alarms releases it.
    clock.advance(Duration::from_nanos(1));
    elastic.tick();
    let s = elastic.snapshot();
    assert!(!s.braked && !s.queue.paused, "{s:#?}");
    assert_eq!((s.brakes, s.braked_time), (1, DEFAULT_BRAKE_HOLD));

    // A brake released by its hold leaves no cooldown: the next alarm brakes again.
    clock.advance(ms(1));
    alarm(&elastic);
    elastic.tick();
    let s = elastic.snapshot();
    assert!(s.braked);
    assert_eq!((s.brakes, s.queue.pauses), (2, 2));
    assert_eq!(s.ticks, 5);
}

#[test]
fn paced_holder_gives_back_its_grant_and_waits_out_the_brake() {
    let clock = ManualClock::new();
    let elastic = braking(&clock);
    let (counter, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    let mut a = Box::pin(burn(&clock, ms(10), 5).paced(&elastic));

    // First poll: the whole bucket as one 100 ms grant, 10 ms of it used.
    assert!(poll(&mut a, &mut cx).is_pending());
    let s = elastic.snapshot();
    assert_eq!((s.acquired, s.returned), (100 * MS, Duration::ZERO));

    alarm(&elastic);
    elastic.tick(); // t = 10 ms
    assert!(elastic.snapshot().braked);

    // Next poll: the grant goes back (90 ms unused), the future queues and does not run.
    let wakes = counter.count();
    assert!(poll(&mut a, &mut cx).is_pending());
    let s = elastic.snapshot();
    assert_eq!(s.returned, 90 * MS);
    assert_eq!(s.used, 10 * MS, "must not run while braked");
    assert_eq!((s.waiters, s.queue.grants), (1, 1));
    assert_ledger_balanced(&s);
    // 1 ms refilled + 90 ms returned: tokens enough, and still nothing is granted ...
    assert_eq!((s.tokens, s.debt), (91 * MS, Duration::ZERO));
    assert!(poll(&mut a, &mut cx).is_pending());
    clock.advance(ms(1));
    elastic.tick();
    // ... not even to a newcomer: no fast path while braked.
    let (counter_b, waker_b) = CountingWaker::new();
    let mut b = Box::pin(burn(&clock, ms(10), 2).paced(&elastic));
    assert!(poll(&mut b, &mut Context::from_waker(&waker_b)).is_pending());
    let s = elastic.snapshot();
    assert!(s.braked);
    assert_eq!((s.waiters, s.queue.grants, s.used), (2, 1, 10 * MS));
    assert_eq!(counter.count(), wakes, "woken while braked");

    // The hold passes without alarms: the tick releases the brake and grants in order, `a`
    // first (91.5 ms of tokens cover its slice, into debt), then nothing is left for `b`.
    clock.advance(DEFAULT_BRAKE_HOLD - ms(1));
    elastic.tick();
    let s = elastic.snapshot();
    assert!(!s.braked);
    assert_eq!(s.braked_time, DEFAULT_BRAKE_HOLD);
    assert_eq!(counter.count(), wakes + 1, "the waiter is woken on release");
    assert_eq!(counter_b.count(), 0);
    assert_eq!((s.waiters, s.queue.grants), (1, 2));
    assert_eq!((s.tokens, s.debt), (Duration::ZERO, 85 * MS / 10));

    // `a` runs again on its new grant (settled when it is dropped).
    assert!(poll(&mut a, &mut cx).is_pending());
    drop((a, b));
    let s = elastic.snapshot();
    assert_eq!((s.waiters, s.used), (0, 20 * MS));
    assert_ledger_balanced(&s);
}

#[test]
fn grant_collected_during_the_brake_goes_straight_back() {
    let clock = ManualClock::new();
    let elastic = braking(&clock);
    let (counter, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    // `a` spends the whole slice in one poll; `b` queues behind it and is granted by a tick.
    let mut a = Box::pin(burn(&clock, ms(100), 2).paced(&elastic));
    let mut b = Box::pin(burn(&clock, ms(10), 2).paced(&elastic));
    assert!(poll(&mut a, &mut cx).is_pending());
    assert!(poll(&mut b, &mut cx).is_pending());
    elastic.tick();
    let s = elastic.snapshot();
    assert_eq!((s.queue.grants, s.waiters), (2, 0));

    // Braked before `b` collected its grant: it collects it and gives it all back.
    alarm(&elastic);
    elastic.tick();
    assert!(poll(&mut b, &mut cx).is_pending());
    let s = elastic.snapshot();
    assert_eq!((s.returned, s.used), (100 * MS, 100 * MS));
    assert_eq!((s.queue.grants, s.waiters), (2, 1));
    let wakes = counter.count();

    clock.advance(DEFAULT_BRAKE_HOLD);
    elastic.tick();
    assert_eq!(counter.count(), wakes + 1);
    assert!(poll(&mut b, &mut cx).is_pending());
    drop((a, b));
    let s = elastic.snapshot();
    assert_eq!((s.queue.grants, s.used), (3, 110 * MS));
    assert_ledger_balanced(&s);
}

#[test]
fn paced_stream_gives_back_its_grant_at_its_next_poll() {
    let clock = ManualClock::new();
    let elastic = braking(&clock);
    let (counter, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    let c = clock.clone();
    // Each item takes 10 ms: more than the poll quantum, so the stream yields between items.
    let mut items =
        Box::pin(futures_util::stream::repeat_with(move || c.advance(ms(10))).paced(&elastic));

    assert_eq!(poll_next(&mut items, &mut cx), Poll::Ready(Some(())));
    alarm(&elastic);
    elastic.tick();
    // The quantum is spent: it yields first, still holding the grant ...
    assert!(poll_next(&mut items, &mut cx).is_pending());
    assert_eq!(elastic.snapshot().returned, Duration::ZERO);
    // ... and gives it back at the poll after that, queueing without producing an item.
    assert!(poll_next(&mut items, &mut cx).is_pending());
    let s = elastic.snapshot();
    assert_eq!((s.returned, s.used, s.waiters), (90 * MS, 10 * MS, 1));
    let wakes = counter.count();

    clock.advance(DEFAULT_BRAKE_HOLD);
    elastic.tick();
    assert_eq!(counter.count(), wakes + 1);
    assert_eq!(poll_next(&mut items, &mut cx), Poll::Ready(Some(())));
    let s = elastic.snapshot();
    assert_eq!((s.queue.grants, s.waiters), (2, 0));
    drop(items);
    let s = elastic.snapshot();
    assert_eq!(s.used, 20 * MS);
    assert_ledger_balanced(&s);
}

#[test]
fn pacer_gives_back_a_grant_paused_at_the_quantum() {
    let clock = ManualClock::new();
    let elastic = braking(&clock);
    let mut pacer = elastic.pacer();
    let (counter, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);

    // Iterations of 10 µs until the quantum is spent: the grant is paused, not settled.
    let mut iterations = 0u32;
    while poll(&mut pacer.pace(), &mut cx).is_ready() {
        clock.advance(Duration::from_micros(10));
        iterations += 1;
        assert!(iterations < 10_000, "never reached the quantum");
    }
    let s = elastic.snapshot();
    assert_eq!(
        (s.acquired, s.used, s.queue.grants),
        (100 * MS, Duration::ZERO, 1)
    );

    alarm(&elastic);
    elastic.tick();
    // The paused grant goes back with what the loop ran; the pacer queues.
    assert!(poll(&mut pacer.pace(), &mut cx).is_pending());
    let s = elastic.snapshot();
    assert_eq!(s.used, Duration::from_micros(10) * iterations);
    assert_eq!(s.returned, 100 * MS - s.used);
    assert_eq!(s.waiters, 1);
    assert_ledger_balanced(&s);
    let wakes = counter.count();
    assert!(poll(&mut pacer.pace(), &mut cx).is_pending());
    assert_eq!(elastic.snapshot().queue.grants, 1);

    clock.advance(DEFAULT_BRAKE_HOLD);
    elastic.tick();
    let s = elastic.snapshot();
    assert!(!s.braked);
    assert_eq!(s.braked_time, DEFAULT_BRAKE_HOLD);
    assert_eq!(counter.count(), wakes + 1, "woken when the brake releases");
    assert!(poll(&mut pacer.pace(), &mut cx).is_ready());
    assert_eq!(elastic.snapshot().queue.grants, 2);
    drop(pacer);
    assert_ledger_balanced(&elastic.snapshot());
}

#[test]
fn a_new_alarm_during_the_brake_extends_it() {
    let clock = ManualClock::new();
    let elastic = braking(&clock);
    alarm(&elastic);
    elastic.tick(); // braked at t = 0
    clock.advance(ms(4));
    alarm(&elastic);
    elastic.tick(); // t = 4 ms: the hold starts over
    clock.advance(ms(4));
    elastic.tick(); // t = 8 ms: 5 ms after the start, but only 4 ms quiet
    assert!(elastic.snapshot().braked);
    clock.advance(ms(1));
    elastic.tick(); // t = 9 ms: 5 ms quiet
    let s = elastic.snapshot();
    assert!(!s.braked);
    assert_eq!((s.brakes, s.braked_time), (1, ms(9)));
}

#[test]
fn a_brake_stops_at_brake_max_and_cools_down() {
    let clock = ManualClock::new();
    let elastic = braking(&clock);
    let (_, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    alarm(&elastic);
    elastic.tick(); // braked at t = 0
                    // Alarms keep coming: the brake holds until it has lasted BRAKE_MAX ...
    let step = DEFAULT_BRAKE_HOLD - ms(1);
    let mut t = Duration::ZERO;
    while t + step < BRAKE_MAX {
        clock.advance(step);
        t += step;
        alarm(&elastic);
        elastic.tick();
        assert!(elastic.snapshot().braked, "released at {t:?}");
    }
    clock.advance(BRAKE_MAX - t);
    alarm(&elastic);
    elastic.tick();
    let s = elastic.snapshot();
    assert!(!s.braked, "still braked after BRAKE_MAX");
    assert_eq!((s.brakes, s.braked_time), (1, BRAKE_MAX));

    // ... then alarms do not brake during the cooldown (4 × BRAKE_MAX from the release) ...
    let cooldown_end = BRAKE_MAX + BRAKE_MAX * 4;
    clock.advance(ms(1));
    alarm(&elastic);
    elastic.tick();
    assert!(!elastic.snapshot().braked, "braked during the cooldown");
    // ... and elastic work is granted meanwhile.
    let mut a = Box::pin(burn(&clock, ms(1), 1).paced(&elastic));
    assert!(poll(&mut a, &mut cx).is_ready());
    clock.set(cooldown_end - Duration::from_nanos(1));
    alarm(&elastic);
    elastic.tick();
    assert!(!elastic.snapshot().braked, "braked during the cooldown");

    // After it, an alarm raised during the cooldown is stale: it does not brake ...
    clock.set(cooldown_end);
    elastic.tick();
    let s = elastic.snapshot();
    assert!(!s.braked, "braked on an alarm from the cooldown");
    assert_eq!(s.brakes, 1);
    // ... a new one does.
    alarm(&elastic);
    elastic.tick();
    let s = elastic.snapshot();
    assert!(s.braked);
    assert_eq!(s.brakes, 2);
    assert_ledger_balanced(&s);
}

#[test]
fn fixed_limit_has_no_brake_unless_asked() {
    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, 0.1, 1.0);
    assert_eq!(elastic.probe().config().alarm_at, None);
    alarm(&elastic);
    elastic
        .probe()
        .record_poll(Some(Duration::from_secs(5)), None, false);
    assert_eq!(elastic.probe().alarms(), 0);
    elastic.tick();
    let s = elastic.snapshot();
    assert_eq!((s.braked, s.brakes, s.queue.pauses), (false, 0, 0));
    // Grants flow as usual.
    let (_, waker) = CountingWaker::new();
    let mut a = Box::pin(burn(&clock, ms(1), 1).paced(&elastic));
    assert!(poll(&mut a, &mut Context::from_waker(&waker)).is_ready());
    assert_eq!(elastic.snapshot().queue.grants, 1);

    // With `Brake::At` it brakes (`braking` is a fixed-limit build too).
    let braked = braking(&clock);
    alarm(&braked);
    braked.tick();
    assert!(braked.snapshot().braked);
}

#[test]
fn the_controller_brakes_at_four_times_its_target_by_default() {
    let clock = ManualClock::new();
    let target = ms(2);
    let elastic = Elastic::builder()
        .manual(clock.clone())
        .running_clock(clock.clone())
        .cpus(1.0)
        .target_p99(target)
        .build()
        .unwrap();
    let at = target * 4;
    assert_eq!(elastic.probe().config().alarm_at, Some(at));
    elastic
        .probe()
        .record_poll(Some(at - Duration::from_nanos(1)), None, false);
    elastic.tick();
    assert!(!elastic.snapshot().braked);
    elastic.probe().record_poll(Some(at), None, false);
    elastic.tick();
    let s = elastic.snapshot();
    assert!(s.braked);
    assert_eq!(s.brakes, 1);
    // `Brake::At` overrides the default threshold.
    let e = Elastic::builder()
        .manual(clock.clone())
        .cpus(1.0)
        .brake(Brake::At(ms(3)))
        .build()
        .unwrap();
    assert_eq!(e.probe().config().alarm_at, Some(ms(3)));
}

#[test]
fn no_brake_never_brakes() {
    let clock = ManualClock::new();
    for elastic in [
        Elastic::builder()
            .manual(clock.clone())
            .cpus(1.0)
            .brake(Brake::Off)
            .build()
            .unwrap(),
        builder(&clock)
            .brake(Brake::At(AT))
            .brake(Brake::Off)
            .build()
            .unwrap(),
    ] {
        assert_eq!(elastic.probe().config().alarm_at, None);
        elastic
            .probe()
            .record_poll(Some(Duration::from_secs(5)), None, false);
        assert_eq!(elastic.probe().alarms(), 0);
        elastic.tick();
        clock.advance(ms(1));
        elastic.tick();
        let s = elastic.snapshot();
        assert_eq!((s.braked, s.brakes, s.queue.pauses), (false, 0, 0));
    }
}

#[test]
fn a_brake_below_10_us_is_refused() {
    let clock = ManualClock::new();
    match builder(&clock)
        .brake(Brake::At(Duration::from_micros(5)))
        .build()
    {
        Err(BuildError::Setting(e)) => {
            assert_eq!(e.setting, "brake");
            assert_eq!(e.value, "5µs");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("5 µs accepted"),
    }
    assert!(builder(&clock)
        .brake(Brake::At(Duration::from_micros(10)))
        .build()
        .is_ok());
}

/// The real governor thread: the probe's alarm wakes it at once (long before its first tick),
/// it brakes, and it releases the brake on its own once no alarm comes for the hold.
#[test]
fn governor_thread_brakes_on_the_alarm_without_waiting_for_a_tick() {
    let tick = Duration::from_secs(60);
    let elastic = Elastic::builder()
        .profile(Profile::Custom(
            Profile::Cockroach.steps().tick(tick).window(tick),
        ))
        .cpus(1.0)
        .brake(Brake::At(AT))
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    alarm(&elastic);
    while elastic.snapshot().brakes == 0 {
        assert!(Instant::now() < deadline, "the alarm did not brake");
        std::thread::sleep(ms(1));
    }
    assert_eq!(
        elastic.snapshot().ticks,
        0,
        "braked by a tick, not by the alarm"
    );
    while elastic.snapshot().braked {
        assert!(Instant::now() < deadline, "the brake was not released");
        std::thread::sleep(ms(1));
    }
    let s = elastic.snapshot();
    assert_eq!((s.brakes, s.queue.pauses), (1, 1));
    assert!(!s.queue.paused);
}

#[test]
fn no_place_is_lent_in_the_tick_a_brake_ends() {
    // Nothing ran during the brake because the brake held it: that is no reason to lend a
    // place past the holder cap (one grant at a time here) once it ends.
    let clock = ManualClock::new();
    let elastic = braking(&clock);
    let (_counter, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    let mut a = Box::pin(burn(&clock, ms(1), 1_000).paced(&elastic));
    let mut b = Box::pin(burn(&clock, ms(1), 1_000).paced(&elastic));
    assert!(poll(&mut a, &mut cx).is_pending());
    assert!(poll(&mut b, &mut cx).is_pending());
    let s = elastic.snapshot();
    assert_eq!((s.queue.holders, s.waiters), (1, 1));

    alarm(&elastic);
    elastic.tick();
    assert!(poll(&mut a, &mut cx).is_pending()); // gives its grant back and queues
    let s = elastic.snapshot();
    assert!(s.braked, "{s:#?}");
    assert_eq!((s.queue.holders, s.waiters), (0, 2));
    while elastic.snapshot().braked {
        clock.advance(ms(10));
        elastic.tick();
    }
    let s = elastic.snapshot();
    assert_eq!(
        (s.queue.holders, s.waiters),
        (1, 1),
        "one place, as before the brake: {s:#?}"
    );
    // The holder (the one that waited longest) runs; the next tick keeps the cap.
    for _ in 0..3 {
        assert!(poll(&mut b, &mut cx).is_pending());
    }
    clock.advance(ms(10));
    elastic.tick();
    let s = elastic.snapshot();
    assert_eq!((s.queue.holders, s.waiters), (1, 1), "{s:#?}");
    drop((a, b));
    assert_ledger_balanced(&elastic.snapshot());
}
