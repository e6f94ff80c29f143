//! The idle class (work on the idle pool, paced by its own bucket), on the manual clock: it
//! starts at every CPU on a bare host and at the elastic limit inside a quota, steps down only
//! on a foreground p99 above its looser target or on the cgroup's throttling, is held to the
//! elastic limit while the threads beside the runtime wait over their allowance and the
//! elastic class has work (else it steps down on their waits alone; with work in both it
//! answers for those waits first, the elastic limit holding until the idle class is at its
//! floor), holds a fixed
//! limit, and takes the backlog brake only inside a quota. Its target is four times the
//! `Elastic`'s, given or measured.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use common::{attached, scripted, Burn, FakeCgroup, MS};
use elastic_cpu_pacer::idle::IdleRuntime;
use elastic_cpu_pacer::settings::Brake;
use elastic_cpu_pacer::snapshot::{SignalSource, TargetSource};
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::testing::{ManualClock, Script};
use elastic_cpu_pacer::{Elastic, ElasticBuilder, PacedExt};

/// Manual clock, 2 CPUs, target 1 ms (the idle class's: 4 ms), elastic limit 0.5.
fn builder(clock: &ManualClock) -> ElasticBuilder {
    Elastic::builder()
        .manual(clock.clone())
        .cpus(2.0)
        .target_p99(MS)
        .initial_share(0.5)
}

/// One tick with the foreground's scheduling latency at `latency`.
fn tick(elastic: &Elastic, clock: &ManualClock, latency: Duration) {
    elastic.probe().record_poll(Some(latency), None, false);
    clock.advance(100 * MS);
    elastic.tick();
}

fn idle_limit(elastic: &Elastic) -> f64 {
    elastic
        .snapshot()
        .idle_share
        .expect("an idle pool was made")
}

#[test]
fn no_pool_no_idle_class() {
    let clock = ManualClock::new();
    let elastic = builder(&clock).brake(Brake::Off).build().unwrap();
    tick(&elastic, &clock, 100 * Duration::from_micros(1));
    let s = elastic.snapshot();
    assert_eq!(s.idle_share, None);
    assert_eq!(s.idle_queue, None);
}

#[test]
fn on_a_bare_host_it_starts_at_every_cpu_and_ignores_what_only_the_elastic_target_sees() {
    let clock = ManualClock::new();
    let elastic = builder(&clock).brake(Brake::Off).build().unwrap();
    let pool = elastic.idle_runtime(1).unwrap();
    assert_eq!(idle_limit(&elastic), 1.0);
    // Its bucket pays for every CPU.
    let rate = elastic.snapshot().idle_queue.unwrap().rate_nanos_per_sec;
    assert_eq!(rate, 2_000_000_000);
    // 2 ms: over the elastic target (1 ms), under the idle class's (4 ms).
    for _ in 0..10 {
        tick(&elastic, &clock, 2 * MS);
    }
    assert!(
        elastic.snapshot().share < 0.5,
        "the elastic limit steps down"
    );
    assert_eq!(idle_limit(&elastic), 1.0, "the idle class holds");
    // 5 ms: over both. The window (1 s) still holds the 2 ms samples; its p99 is 5 ms once
    // enough 5 ms samples are in.
    for _ in 0..10 {
        tick(&elastic, &clock, 5 * MS);
    }
    assert!(idle_limit(&elastic) < 1.0);
    // Healthy again (a window later, once the 5 ms samples are out of it) with no idle work
    // waiting: on a bare host it does not decay.
    for _ in 0..10 {
        tick(&elastic, &clock, Duration::from_micros(100));
    }
    let down = idle_limit(&elastic);
    assert!(down < 1.0, "{down}");
    for _ in 0..20 {
        tick(&elastic, &clock, Duration::from_micros(100));
    }
    assert_eq!(idle_limit(&elastic), down);
    // A second pool shares the class.
    let second = elastic.idle_runtime(1).unwrap();
    assert_eq!(idle_limit(&elastic), down);
    drop(second);
    drop(pool);
}

#[test]
fn inside_a_quota_it_starts_at_the_elastic_limit_and_throttling_steps_it_down() {
    let clock = ManualClock::new();
    let cg = FakeCgroup::new("idle-class-quota");
    let elastic = builder(&clock).brake(Brake::Off).build().unwrap();
    elastic.watch_throttling(&cg.0);
    let _pool = elastic.idle_runtime(1).unwrap();
    assert_eq!(idle_limit(&elastic), 0.5);
    for _ in 0..5 {
        tick(&elastic, &clock, Duration::from_micros(100));
    }
    let before = idle_limit(&elastic);
    assert!(
        before <= 0.5,
        "no idle work waiting: it decays, never rises"
    );
    cg.set(1);
    tick(&elastic, &clock, Duration::from_micros(100));
    let after = idle_limit(&elastic);
    assert!(after < before, "{after} < {before}");
    // Held for the window (10 ticks), then it stops stepping down.
    let mut last = after;
    for _ in 0..9 {
        tick(&elastic, &clock, Duration::from_micros(100));
        let now = idle_limit(&elastic);
        assert!(now < last, "{now} < {last}");
        last = now;
    }
}

#[test]
fn a_fixed_limit_holds_for_the_idle_class_too() {
    let clock = ManualClock::new();
    let elastic = Elastic::builder()
        .manual(clock.clone())
        .cpus(2.0)
        .fixed_share(0.3)
        .build()
        .unwrap();
    let _pool = elastic.idle_runtime(1).unwrap();
    assert_eq!(idle_limit(&elastic), 0.3);
    for _ in 0..10 {
        tick(&elastic, &clock, 50 * MS);
    }
    assert_eq!(idle_limit(&elastic), 0.3);
    let rate = elastic.snapshot().idle_queue.unwrap().rate_nanos_per_sec;
    assert_eq!(rate, 600_000_000);
}

/// Raise the probe's backlog alarm and let the governor see it; returns the idle class's
/// queue pauses.
fn alarm_and_brake(elastic: &Elastic) -> u64 {
    elastic.probe().record_poll(Some(20 * MS), None, false);
    elastic.tick();
    let s = elastic.snapshot();
    assert!(s.braked, "the brake engaged: {s:#?}");
    s.idle_queue.unwrap().pauses
}

#[test]
fn the_backlog_brake_stops_idle_work_only_inside_a_quota() {
    let clock = ManualClock::new();
    let host = builder(&clock).brake(Brake::At(10 * MS)).build().unwrap();
    let _host_pool = host.idle_runtime(1).unwrap();
    assert_eq!(
        alarm_and_brake(&host),
        0,
        "a bare host: the kernel already yields"
    );

    let cg = FakeCgroup::new("idle-class-brake");
    let quota = builder(&clock).brake(Brake::At(10 * MS)).build().unwrap();
    quota.watch_throttling(&cg.0);
    let _quota_pool = quota.idle_runtime(1).unwrap();
    assert_eq!(
        alarm_and_brake(&quota),
        1,
        "inside a quota idle work spends it too"
    );
    // Quiet for the brake's hold: released, the idle queue resumes.
    clock.advance(50 * MS);
    quota.tick();
    assert!(!quota.snapshot().braked);
}

/// Paced work of the `Elastic`'s own class that always wants more: it keeps the ticks from
/// being quiet readings, unless they hold it.
fn busy_work(
    clock: &ManualClock,
    elastic: &Elastic,
) -> Pin<Box<impl Future<Output = ()> + Send + 'static>> {
    Box::pin(
        Burn {
            clock: clock.clone(),
            per_poll: 20 * MS,
            polls: usize::MAX,
        }
        .paced(elastic),
    )
}

/// Which class the busy work is in.
#[derive(Clone, Copy)]
enum Work {
    /// The `Elastic`'s own: paced on the runtime.
    Own,
    /// The idle class: admitted once on an idle pool's thread, it stays there.
    Idle,
}

/// `work` polled once on one of `pool`'s threads, handed back.
fn admitted_on<F: Future + Unpin + Send + 'static>(pool: &IdleRuntime, mut work: F) -> F {
    let (tx, rx) = std::sync::mpsc::channel();
    pool.spawn(async move {
        std::future::poll_fn(|cx| {
            let _ = Pin::new(&mut work).poll(cx);
            Poll::Ready(())
        })
        .await;
        tx.send(work).ok();
    });
    rx.recv().expect("the pool polled the work")
}

/// `ticks` ticks of busy elastic work in each of `classes` with a measured target (2 CPUs,
/// elastic limit 0.5, no brake, an attached runtime, an idle pool): before each, `readings(script,
/// held)` scripts the tick's readings (`held`: a quiet hold, elastic work held back). Returns
/// the `Elastic` and the (elastic, idle) limits after each tick.
fn run_ticks(
    ticks: usize,
    classes: &[Work],
    readings: impl Fn(&Elastic, &Script, bool),
) -> (Elastic, Vec<(f64, f64)>) {
    let clock = ManualClock::new();
    let script = Script::new();
    let elastic = scripted(&clock, &script)
        .cpus(2.0)
        .initial_share(0.5)
        .brake(Brake::Off)
        .build()
        .unwrap();
    let _rt = attached(&elastic);
    let pool = elastic.idle_runtime(1).unwrap();
    assert_eq!(idle_limit(&elastic), 1.0);
    let mut works: Vec<_> = classes
        .iter()
        .map(|class| {
            let work = busy_work(&clock, &elastic);
            match class {
                Work::Own => work,
                Work::Idle => admitted_on(&pool, work),
            }
        })
        .collect();
    let waker = std::task::Waker::noop();
    let mut limits = Vec::new();
    for _ in 0..ticks {
        for work in &mut works {
            for _ in 0..10 {
                let _ = work.as_mut().poll(&mut Context::from_waker(waker));
            }
        }
        readings(&elastic, &script, elastic.snapshot().quiet_hold);
        clock.advance(100 * MS);
        elastic.tick();
        limits.push((elastic.snapshot().share, idle_limit(&elastic)));
    }
    (elastic, limits)
}

/// The idle class's lowest limit after any tick.
fn lowest_idle(limits: &[(f64, f64)]) -> f64 {
    limits.iter().map(|&(_, idle)| idle).fold(1.0, f64::min)
}

/// 300 foreground polls that waited `wait`.
fn polls(elastic: &Elastic, wait: Duration) {
    for _ in 0..300 {
        elastic.probe().record_poll(Some(wait), None, false);
    }
}

#[test]
fn with_a_measured_target_it_steps_on_four_times_the_allowance() {
    // Quiet, the foreground waits 2 ms: the allowance is half of that, 1 ms. With elastic
    // work, 2 ms more: twice the allowance, half the idle class's.
    let (elastic, limits) = run_ticks(40, &[Work::Own], |e, _, held| {
        polls(e, if held { 2 * MS } else { 4 * MS })
    });
    let s = elastic.snapshot();
    assert_eq!(s.target_source, TargetSource::Measured);
    assert!(
        s.target.abs_diff(MS) <= Duration::from_micros(20),
        "{:?}",
        s.target
    );
    assert!(s.share < 0.5, "the elastic limit steps down: {}", s.share);
    assert_eq!(lowest_idle(&limits), 1.0, "the idle class holds");
}

/// The threads beside the runtime wait `quiet` per wake-up while elastic work (in each of
/// `classes`) is held and `running` while it runs; the runtime's own latency is 2 ms in both.
fn bystanders_wait(
    ticks: usize,
    classes: &[Work],
    quiet: Duration,
    running: Duration,
) -> (Elastic, Vec<(f64, f64)>) {
    run_ticks(ticks, classes, |e, script, held| {
        script.bystander_delay(if held { quiet } else { running });
        polls(e, 2 * MS);
    })
}

#[test]
fn threads_beside_the_runtime_over_their_allowance_hold_it_to_the_elastic_share() {
    let us = Duration::from_micros;
    // A client's threads wait 10 µs per wake-up quiet and 20 µs while elastic work runs:
    // twice their allowance (5 µs), so twice the target in its units.
    let (elastic, _) = bystanders_wait(40, &[Work::Own], us(10), us(20));
    let s = elastic.snapshot();
    assert_eq!(s.target_source, TargetSource::Measured);
    assert_eq!(s.signal_source, SignalSource::Bystanders);
    let signal = s.signal_p99.unwrap();
    assert!(
        signal.abs_diff(s.target * 2) <= Duration::from_micros(20),
        "{signal:?}"
    );
    assert!(s.share < 0.5, "the elastic limit steps down: {}", s.share);
    let idle = idle_limit(&elastic);
    assert!(
        idle <= s.share,
        "idle {idle} over the elastic share {}",
        s.share
    );
    // 4 µs more: under the allowance. The idle class holds every CPU all along.
    let (elastic, limits) = bystanders_wait(40, &[Work::Own], us(10), us(14));
    assert_eq!(elastic.snapshot().target_source, TargetSource::Measured);
    assert_eq!(lowest_idle(&limits), 1.0, "the idle class holds");
}

#[test]
fn with_no_work_of_the_elastic_class_the_waits_step_the_idle_class_down_but_do_not_cut_it() {
    let us = Duration::from_micros;
    // All the work on the pool, the waits at twice their allowance: the elastic share (no work
    // of its own, decaying from 0.5) is no reading of what the client's threads bear. The idle
    // class steps down on the waits itself, a step a tick.
    let (elastic, limits) = bystanders_wait(40, &[Work::Idle], us(10), us(20));
    let lowest = lowest_idle(&limits);
    let s = elastic.snapshot();
    assert_eq!(s.target_source, TargetSource::Measured);
    assert_eq!(s.signal_source, SignalSource::Bystanders);
    let idle = idle_limit(&elastic);
    assert!(idle < 0.9, "it stepped down: {idle}");
    assert!(
        lowest > s.share,
        "never cut to the elastic share: lowest {lowest}, elastic {}",
        s.share
    );
}

#[test]
fn with_work_in_both_classes_the_idle_class_answers_for_the_bystanders_first() {
    let us = Duration::from_micros;
    // Work in both classes, the client's threads at twice their allowance while it runs.
    let (elastic, limits) = bystanders_wait(100, &[Work::Own, Work::Idle], us(10), us(20));
    let s = elastic.snapshot();
    assert_eq!(s.signal_source, SignalSource::Bystanders);
    // The idle class steps down on their waits to its floor (a step a tick); until it is
    // there the elastic share does not step on them (it only decays, a fraction of a step),
    // since lowering it would hand the cores to the pool whose wake-ups they wait behind.
    let floor = lowest_idle(&limits);
    let reached = limits
        .iter()
        .position(|&(_, idle)| idle <= floor)
        .expect("the lowest is in the list");
    assert!(floor < 0.1, "the idle class at its floor: {limits:?}");
    assert!(reached > 10, "stepped down, not cut: {limits:?}");
    let steps = |ticks: &[(f64, f64)]| {
        ticks
            .windows(2)
            .map(|w| w[0].0 - w[1].0)
            .fold(0.0f64, f64::max)
    };
    assert!(
        steps(&limits[..=reached]) < 0.005,
        "the elastic share held: {limits:?}"
    );
    // From there the elastic share steps on them too, down to its own floor.
    assert!(
        steps(&limits[reached..]) >= 0.005,
        "then it steps: {limits:?}"
    );
    assert!(s.share < 0.1, "then it steps down: {limits:?}");
}
