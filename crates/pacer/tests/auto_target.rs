//! The measured target (no target given), on the manual clock: the governor reads the
//! foreground's latency quiet (ticks without elastic work, or a few ticks it holds elastic work
//! back for), and steps on what elastic work adds over that. Latency that is there without
//! elastic work leaves the share up; latency that comes with elastic work brings it down.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use common::{attached, scripted, Burn, MS};
use elastic_cpu_pacer::snapshot::{SignalSource, TargetSource};
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::testing::{ManualClock, Script};
use elastic_cpu_pacer::{Elastic, PacedExt};

const US: Duration = Duration::from_micros(1);

struct Loop {
    clock: ManualClock,
    script: Script,
    elastic: Elastic,
    _rt: tokio::runtime::Runtime,
}

/// No target given; one CPU, the share starting at 0.5; every OS reading scripted and absent
/// but the scheduling probe, which the test records into.
fn measured() -> Loop {
    let clock = ManualClock::new();
    let script = Script::new();
    let elastic = scripted(&clock, &script)
        .cpus(1.0)
        .initial_share(0.5)
        .build()
        .unwrap();
    let rt = attached(&elastic);
    Loop {
        clock,
        script,
        elastic,
        _rt: rt,
    }
}

impl Loop {
    /// One 100 ms tick in which 300 foreground tasks each waited `wait`.
    fn tick(&self, wait: Duration) {
        for _ in 0..300 {
            self.elastic.probe().record_poll(Some(wait), None, false);
        }
        self.clock.advance(100 * MS);
        self.elastic.tick();
    }

    /// Elastic work that always wants more: a paced future running 20 ms a poll.
    fn work(&self) -> Pin<Box<impl Future<Output = ()>>> {
        Box::pin(
            Burn {
                clock: self.clock.clone(),
                per_poll: 20 * MS,
                polls: usize::MAX,
            }
            .paced(&self.elastic),
        )
    }
}

fn poll<F: Future>(f: &mut Pin<Box<F>>) -> Poll<F::Output> {
    f.as_mut()
        .poll(&mut Context::from_waker(std::task::Waker::noop()))
}

#[test]
fn without_elastic_work_every_tick_is_a_quiet_reading() {
    let l = measured();
    let s = l.elastic.snapshot();
    assert_eq!(s.target_source, TargetSource::Default);
    assert_eq!(s.target, Duration::from_millis(1));
    l.tick(2 * MS);
    let s = l.elastic.snapshot();
    assert_eq!(s.target_source, TargetSource::Measured);
    let quiet = s.quiet_p99.unwrap();
    assert!(quiet.abs_diff(2 * MS) <= 20 * US, "{quiet:?}");
    // Half the quiet scheduling p99 may be added.
    assert!(s.target.abs_diff(quiet / 2) <= US, "{:?}", s.target);
    assert!(!s.quiet_hold, "nothing was held");
}

#[test]
fn latency_that_is_there_without_elastic_work_leaves_the_share_up() {
    let l = measured();
    // A busy host: the foreground waits 2 ms with or without elastic work.
    for _ in 0..3 {
        l.tick(2 * MS);
    }
    let mut work = l.work();
    let mut held = 0;
    for _ in 0..60 {
        // 200 ms of work in 300 ms: more than the share pays for, so it waits, which lets the
        // share climb.
        for _ in 0..10 {
            let _ = poll(&mut work);
        }
        l.tick(2 * MS);
        held += usize::from(l.elastic.snapshot().quiet_hold);
    }
    let s = l.elastic.snapshot();
    // Against the default target (1 ms) the 2 ms would have stepped the share down every tick;
    // measured, elastic work adds nothing and waiting work steps it up.
    assert!(s.share > 0.5, "{}", s.share);
    assert!(s.signal_p99.unwrap() <= 20 * US, "{:?}", s.signal_p99);
    // Readings bought with held work, 2 ticks each. Elastic work adds nothing near its
    // allowance, so they come four times as far apart as the usual 5, 5, 10 and 20 ticks:
    // after 20 and 20 ticks of work (the next would come 40 ticks on).
    assert_eq!(held, 4, "held ticks");
}

#[test]
fn latency_that_comes_with_elastic_work_brings_the_share_down() {
    let l = measured();
    // Quiet, the foreground waits 200 µs; behind elastic polls (long library calls, say) 2 ms.
    let wait = |l: &Loop| {
        if l.elastic.snapshot().quiet_hold {
            200 * US
        } else {
            2200 * US
        }
    };
    let mut work = l.work();
    // The first tick with work holds it at once: there is no baseline yet.
    let _ = poll(&mut work);
    l.tick(200 * US);
    let s = l.elastic.snapshot();
    assert!(s.quiet_hold);
    assert_eq!(s.target_source, TargetSource::Default);
    // Held: the paced future gives its grant back and waits.
    assert!(poll(&mut work).is_pending());
    for _ in 0..2 {
        l.tick(wait(&l));
    }
    let s = l.elastic.snapshot();
    assert!(!s.quiet_hold, "released after the reading");
    assert_eq!(s.target_source, TargetSource::Measured);
    let before = s.share;
    let mut held = 0;
    for _ in 0..20 {
        let _ = poll(&mut work);
        l.tick(wait(&l));
        held += usize::from(l.elastic.snapshot().quiet_hold);
    }
    let s = l.elastic.snapshot();
    // Near (over) its target the signal keeps the readings on the usual schedule: held 2 ticks
    // after 5 ticks of work, and again 10 ticks on.
    assert_eq!(held, 4, "held ticks");
    assert_eq!(s.signal_source, SignalSource::Sched);
    // What elastic work adds: the window's p99 over the 200 µs baseline.
    assert!(s.signal_p99.unwrap() >= 1900 * US, "{:?}", s.signal_p99);
    assert!(s.share < before - 0.1, "{before} → {}", s.share);
    let quiet = s.quiet_p99.unwrap();
    assert!(
        quiet.abs_diff(200 * US) <= 5 * US,
        "the baseline stays quiet: {quiet:?}"
    );
}

#[test]
fn a_gate_steps_on_the_latency_itself() {
    let l = measured();
    let gate = l
        .elastic
        .connection_gate(elastic_cpu_pacer::gate::GateSettings::new())
        .unwrap();
    let start = gate.snapshot().share;
    // 2 ms of wait, quiet or not: nothing for elastic work to answer for, but over the gate's
    // target (the default 1 ms), so its setups get less of the CPU.
    for _ in 0..10 {
        l.tick(2 * MS);
    }
    assert_eq!(l.elastic.snapshot().target_source, TargetSource::Measured);
    assert!(
        gate.snapshot().share < start - 0.05,
        "{}",
        gate.snapshot().share
    );
}

/// Runs elastic work that always wants more for `ticks` ticks with the foreground's own
/// scheduling wait at 200 µs throughout, the bystanders' run-queue delay `quiet` while elastic
/// work is held for a reading and `running` otherwise; returns the share at the start and the
/// end.
fn bystanders_wait(l: &Loop, quiet: Duration, running: Duration, ticks: usize) -> (f64, f64) {
    let mut work = l.work();
    let mut start = None;
    for _ in 0..ticks {
        for _ in 0..10 {
            let _ = poll(&mut work);
        }
        let held = l.elastic.snapshot().quiet_hold;
        l.script.bystander_delay(if held { quiet } else { running });
        l.tick(200 * US);
        start.get_or_insert(l.elastic.snapshot().share);
    }
    (start.unwrap_or_default(), l.elastic.snapshot().share)
}

#[test]
fn threads_beside_the_runtime_waiting_longer_behind_elastic_work_bring_the_share_down() {
    let l = measured();
    // A client library's threads wait 10 µs per wake-up quiet and 40 µs while elastic work
    // runs; the runtime's own latency does not move.
    let (start, end) = bystanders_wait(&l, 10 * US, 40 * US, 40);
    let s = l.elastic.snapshot();
    assert_eq!(s.signal_source, SignalSource::Bystanders);
    assert_eq!(s.bystander_delay, Some(40 * US));
    assert_eq!(s.quiet_bystander_delay, Some(10 * US));
    assert!(end < start - 0.1, "{start} → {end}");
}

#[test]
fn threads_beside_the_runtime_that_rarely_wake_do_not_steer() {
    let l = measured();
    // The same waits as above, but from one wake-up a tick (a thread on a 100 ms timer): too
    // few to read a mean from.
    l.script.run_queue_timeslices(1);
    let (start, end) = bystanders_wait(&l, 10 * US, 40 * US, 40);
    let s = l.elastic.snapshot();
    assert_eq!(s.bystander_delay, None);
    assert_ne!(s.signal_source, SignalSource::Bystanders);
    assert!(end >= start, "{start} → {end}");
}

#[test]
fn threads_beside_the_runtime_that_wait_without_elastic_work_leave_the_share_up() {
    let l = measured();
    // The same 40 µs, but held or not: their own load, not elastic work's doing.
    let (start, end) = bystanders_wait(&l, 40 * US, 40 * US, 40);
    let s = l.elastic.snapshot();
    assert_eq!(s.quiet_bystander_delay, Some(40 * US));
    assert_ne!(s.signal_source, SignalSource::Bystanders);
    assert!(end >= start, "{start} → {end}");
}

#[test]
fn a_pause_of_one_tick_leaves_the_share_up_and_the_same_latency_every_tick_brings_it_down() {
    // `spike`: whether the tick's foreground waits 5 ms (every task), else 200 µs; returns the
    // share after 20 ticks of work, then after 12 more with the spike pattern.
    let run = |spike: &dyn Fn(usize) -> bool| {
        let l = measured();
        let mut work = l.work();
        for _ in 0..20 {
            for _ in 0..10 {
                let _ = poll(&mut work);
            }
            l.tick(200 * US);
        }
        let before = l.elastic.snapshot().share;
        for i in 0..12 {
            for _ in 0..10 {
                let _ = poll(&mut work);
            }
            l.tick(if spike(i) { 5 * MS } else { 200 * US });
        }
        (before, l.elastic.snapshot().share)
    };
    // The machine stops for one tick (a host pause): the controller does not answer it.
    let (before, after) = run(&|i| i == 1);
    assert!(after >= before, "{before} → {after}");
    // Every third tick: a latency that lasts is elastic work's to answer for.
    let (before, after) = run(&|i| i % 3 == 1);
    assert!(after < before - 0.05, "{before} → {after}");
}
