//! The whole control loop, every input on, on the manual clock with scripted readings: the
//! scheduling probe (recorded by hand), the I/O wake-up window, the run-queue delay, the quota's
//! throttling, its headroom and the overhead correction combine into the share and the token
//! rate the test works out by hand.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use common::{attached, scripted, Burn, MS};
use elastic_cpu_pacer::snapshot::{Availability, SignalSource};
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::testing::{ManualClock, Script};
use elastic_cpu_pacer::{Elastic, PacedExt};

const US: Duration = Duration::from_micros(1);

/// The default controller's steps at a 100 ms tick: +0.005 up, −0.01 down, −0.00125 of idle
/// decay.
const DOWN: f64 = 0.01;
const DECAY: f64 = 0.00125;

struct Loop {
    clock: ManualClock,
    script: Script,
    elastic: Elastic,
    _rt: tokio::runtime::Runtime,
}

/// Every input on (the defaults), 2 CPUs, a 1.5-CPU quota, the share starting at 0.5 (floor
/// 0.05, ceiling 0.75), and the target given, 1 ms: the signal is the latency itself (a
/// measured target steps on what elastic work adds: `auto_target.rs`).
fn control_loop() -> Loop {
    let (clock, script) = (ManualClock::new(), Script::new());
    script.quota(1.5);
    let elastic = scripted(&clock, &script)
        .cpus(2.0)
        .initial_share(0.5)
        .target_p99(MS)
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
    /// One 100 ms tick: `foreground` scheduling samples of `sched` each (300 a tick is 3000 a
    /// second: a busy foreground), the process spending `cpu`.
    fn tick(&self, foreground: usize, sched: Duration, cpu: Duration) {
        for _ in 0..foreground {
            self.elastic.probe().record_poll(Some(sched), None, false);
        }
        self.script.spend(cpu);
        self.clock.advance(100 * MS);
        self.elastic.tick();
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn every_component_joins_one_signal_and_the_largest_steps_the_share() {
    let l = control_loop();
    let s = l.elastic.snapshot();
    assert_eq!(s.io_probe, Availability::On);
    assert_eq!(s.cpus, 2.0);

    // Scheduling 100 µs, I/O wake-up 600 µs (over its factor 3: 200 µs), no run-queue reading:
    // the I/O component is the largest, under the target; nothing waits, so the share decays.
    l.script.io_wakeup(600 * US, 500);
    l.tick(300, 100 * US, 100 * MS);
    let s = l.elastic.snapshot();
    assert_eq!(
        (s.signal_source, s.signal_p99),
        (SignalSource::Io, Some(200 * US))
    );
    assert!(matches!(s.run_queue, Availability::Unavailable(_)));
    assert!(close(s.share, 0.5 - DECAY), "{}", s.share);

    // Too few canaries for a p99: the I/O component is left out, the scheduling one speaks.
    l.script.io_wakeup(6 * MS, 99);
    l.tick(300, 100 * US, 100 * MS);
    let s = l.elastic.snapshot();
    // (The histogram reports a bucket's upper end: 100 µs within 1 %.)
    assert_eq!(s.signal_source, SignalSource::Sched);
    assert_eq!(s.signal_p99, s.sched_p99);
    assert!(s.sched_p99.unwrap().abs_diff(100 * US) <= US);
    assert_eq!(s.io_p99, Some(6 * MS), "in the snapshot all the same");
    assert!(close(s.share, 0.5 - 2.0 * DECAY), "{}", s.share);

    // The run queue holds the runtime's threads 2 ms per timeslice: over the target, down.
    l.script.io_wakeup(600 * US, 500);
    l.script.run_queue_delay(2 * MS);
    l.tick(300, 100 * US, 100 * MS);
    let s = l.elastic.snapshot();
    assert_eq!(
        (s.signal_source, s.signal_p99),
        (SignalSource::RunQueue, Some(2 * MS))
    );
    assert_eq!(s.run_queue, Availability::On);
    let after_rq = 0.5 - 2.0 * DECAY - DOWN;
    assert!(close(s.share, after_rq), "{}", s.share);

    // A throttled period: over the target for a whole window (ten 100 ms ticks), whatever the
    // probes read.
    l.script.run_queue_delay(50 * US);
    l.script.throttle(1);
    for i in 1..=10 {
        l.tick(300, 100 * US, 100 * MS);
        let s = l.elastic.snapshot();
        assert_eq!(s.signal_source, SignalSource::Throttled, "tick {i}");
        assert_eq!(s.signal_p99, Some(Duration::MAX));
        assert!(
            close(s.share, after_rq - DOWN * f64::from(i)),
            "{}",
            s.share
        );
    }
    assert_eq!(l.elastic.snapshot().throttled_periods, 1);
    // The window has passed: the largest probe speaks again (the run-queue window of ten ticks
    // no longer holds the 2 ms sample).
    l.tick(300, 100 * US, 100 * MS);
    let s = l.elastic.snapshot();
    assert_eq!(s.run_queue_delay, Some(50 * US));
    assert_eq!(
        (s.signal_source, s.signal_p99),
        (SignalSource::Io, Some(200 * US))
    );
    assert!(
        close(s.share, after_rq - 10.0 * DOWN - DECAY),
        "{}",
        s.share
    );
}

/// Polls `fut` once with a no-op waker.
fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    Pin::new(fut).poll(&mut Context::from_waker(std::task::Waker::noop()))
}

#[test]
fn the_quota_headroom_and_the_overhead_correction_set_the_rate() {
    let l = control_loop();
    l.script.io_wakeup(300 * US, 500);
    // Elastic work charged 40 ms a tick (each poll runs 40 ms on the manual clock) while the
    // process spends 50 ms: with no foreground (no scheduling samples) the 10 ms over what was
    // charged is elastic work's overhead, 25 %, measured over a window of 5 ticks (the first
    // tick only takes the readings the window starts from).
    let mut work = Box::pin(
        Burn {
            clock: l.clock.clone(),
            per_poll: 40 * MS,
            polls: usize::MAX,
        }
        .paced(&l.elastic),
    );
    l.tick(0, US, Duration::ZERO);
    for _ in 0..5 {
        assert!(poll_once(&mut work).is_pending());
        l.script.spend(50 * MS);
        l.clock.advance(60 * MS);
        l.elastic.tick();
    }
    let s = l.elastic.snapshot();
    assert!(close(s.overhead, 0.25), "{}", s.overhead);
    // The rest of the process spent 10 ms a tick (0.1 CPU): the headroom is 90 % of the 1.4 CPUs
    // that leaves of the quota, 1.26 CPUs, above the share's 2 × ~0.5: the share's rate, less the
    // overhead.
    let headroom = s.quota_headroom.unwrap();
    assert!(close(headroom, 0.9 * 1.4), "{headroom}");
    let expected = (s.share * 2.0 * 1e9 / 1.25).round() as u64;
    assert!(
        s.queue.rate_nanos_per_sec.abs_diff(expected) <= 1,
        "{} vs {expected}",
        s.queue.rate_nanos_per_sec
    );

    // The foreground now spends 1 CPU: the headroom takes it half way from the last 5 ticks'
    // mean (0.28 CPU) to this busiest one, 0.64 CPU, and falls to 90 % of the 0.86 CPU left,
    // 0.774 CPU, below the share's CPUs, and holds the rate: 0.774 CPU less the overhead (still
    // 25 %: the next window has not ended).
    assert!(poll_once(&mut work).is_pending());
    l.script.spend(140 * MS);
    l.clock.advance(60 * MS);
    l.elastic.tick();
    let s = l.elastic.snapshot();
    let cap = 0.9 * (1.5 - (0.28 + 0.5 * (1.0 - 0.28)));
    let headroom = s.quota_headroom.unwrap();
    assert!(close(headroom, cap), "{headroom} vs {cap}");
    assert!(close(s.overhead, 0.25));
    assert!(
        s.share * 2.0 > cap,
        "the share itself is the controller's: {}",
        s.share
    );
    let expected = (cap / 1.25 * 1e9).round() as u64;
    assert!(
        s.queue.rate_nanos_per_sec.abs_diff(expected) <= 1,
        "{} vs {expected}",
        s.queue.rate_nanos_per_sec
    );
}

#[test]
fn the_idle_pool_gets_the_headroom_the_elastic_class_left() {
    let l = control_loop();
    let pool = l.elastic.idle_runtime(1).unwrap();
    // Inside a quota the idle class starts at the elastic share; its work and the elastic
    // class's run side by side.
    let mut elastic_work = Box::pin(
        Burn {
            clock: l.clock.clone(),
            per_poll: 30 * MS,
            polls: usize::MAX,
        }
        .paced(&l.elastic),
    );
    l.tick(300, 100 * US, Duration::ZERO);
    assert!(poll_once(&mut elastic_work).is_pending());
    // The rest of the process spends 0.5 CPU: a headroom of 0.9 CPU for both classes together.
    l.script.spend(80 * MS);
    l.tick(300, 100 * US, Duration::ZERO);
    let s = l.elastic.snapshot();
    assert!(
        close(s.quota_headroom.unwrap(), 0.9),
        "{:?}",
        s.quota_headroom
    );
    // The elastic class ran 0.3 CPU in that tick: the idle class may take the other 0.6 CPU,
    // below its share's 2 × 0.5.
    let idle = s.idle_queue.expect("an idle pool");
    assert_eq!(idle.rate_nanos_per_sec, 600_000_000);
    // The elastic class is held to the whole headroom, 0.9 CPU (0.45 of 2: its share is higher).
    assert!(s.share > 0.45, "{}", s.share);
    assert_eq!(s.queue.rate_nanos_per_sec, 900_000_000);
    drop(pool);
}
