//! Settings changed on a live `Elastic`, driven by a manual clock and hand-made ticks: new share
//! bounds move the share into them at once and the controller steps within them afterwards;
//! bad bounds are an error and change nothing; a pause holds back every new grant (the holder
//! runs its grant out, waiters stay in line) and resume grants the waiters.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use common::*;
use elastic_cpu_core::{Clock, ManualClock};
use elastic_cpu_pacer::settings::Brake;
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::testing::Script;
use elastic_cpu_pacer::{Elastic, PacedExt, Snapshot};

/// The default profile's step per 100 ms tick (0.05 per second), and the step down (× 2).
const STEP: f64 = 0.005;
const STEP_DOWN: f64 = 2.0 * STEP;

/// A controller between 0.1 and 0.5 of one CPU starting at 0.3, a 1 ms target, no brake, every
/// input but the scheduling latency scripted away.
fn controlled(clock: &ManualClock) -> Elastic {
    scripted(clock, &Script::new())
        .target_p99(MS)
        .share(0.1, 0.5)
        .initial_share(0.3)
        .brake(Brake::Off)
        .cpus(1.0)
        .build()
        .expect("valid settings")
}

/// One tick over which every foreground task waited 5 ms: the share steps down.
fn tick_over_target(clock: &ManualClock, elastic: &Elastic) -> Snapshot {
    for _ in 0..200 {
        elastic.probe().record_poll(Some(5 * MS), None, false);
    }
    clock.advance(100 * MS);
    elastic.tick();
    elastic.snapshot()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn new_bounds_move_the_share_into_them_and_the_controller_steps_within_them() {
    let clock = ManualClock::new();
    let elastic = controlled(&clock);
    let s = elastic.snapshot();
    assert_eq!((s.min_share, s.max_share, s.share), (0.1, 0.5, 0.3));

    let s = tick_over_target(&clock, &elastic);
    assert!(close(s.share, 0.3 - STEP_DOWN), "stepped down: {}", s.share);

    // A floor above the share: the share is at the new floor at once, the rate with it.
    elastic.set_share(0.35, 0.6).expect("valid bounds");
    let s = elastic.snapshot();
    assert_eq!((s.min_share, s.max_share, s.share), (0.35, 0.6, 0.35));
    assert_eq!(s.queue.rate_nanos_per_sec, 350_000_000);
    // Over the target it would step down, but not under the new floor.
    for _ in 0..5 {
        let s = tick_over_target(&clock, &elastic);
        assert_eq!(s.share, 0.35);
    }

    // A ceiling below the share: the share is at the new ceiling at once ...
    elastic.set_share(0.05, 0.2).expect("valid bounds");
    let s = elastic.snapshot();
    assert_eq!((s.min_share, s.max_share, s.share), (0.05, 0.2, 0.2));
    assert_eq!(s.queue.rate_nanos_per_sec, 200_000_000);
    // ... and the controller steps from there, down to the new floor and no lower.
    let mut last = s.share;
    for _ in 0..30 {
        let s = tick_over_target(&clock, &elastic);
        assert!(
            (0.05..=0.2).contains(&s.share),
            "out of bounds: {}",
            s.share
        );
        assert!(
            close(s.share, (last - STEP_DOWN).max(0.05)),
            "{last} -> {}",
            s.share
        );
        last = s.share;
    }
    assert_eq!(last, 0.05);
}

#[test]
fn bad_bounds_are_a_typed_error_and_change_nothing() {
    let clock = ManualClock::new();
    let elastic = controlled(&clock);
    let before = elastic.snapshot();
    for (min, max, setting) in [
        (0.5, 0.2, "max_share"),
        (0.0, 0.5, "min_share"),
        (f64::NAN, 0.5, "min_share"),
        (0.1, 1.5, "max_share"),
    ] {
        let err = elastic.set_share(min, max).unwrap_err();
        assert_eq!(err.setting, setting, "{min} ..= {max}");
    }
    let s = elastic.snapshot();
    assert_eq!(
        (s.min_share, s.max_share, s.share),
        (before.min_share, before.max_share, before.share)
    );
    assert_eq!(s.queue.rate_nanos_per_sec, before.queue.rate_nanos_per_sec);

    // A fixed share has no bounds to move.
    let fixed = manual_elastic(&clock, 0.3, 1.0);
    assert_eq!(fixed.set_share(0.1, 0.5).unwrap_err().setting, "share");
    let s = fixed.snapshot();
    assert_eq!((s.min_share, s.max_share, s.share), (0.3, 0.3, 0.3));
}

/// A future that runs `per_poll` on the manual clock at each poll and never ends; counts polls.
struct Endless {
    clock: ManualClock,
    per_poll: Duration,
    polls: Arc<AtomicUsize>,
}

impl Future for Endless {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.clock.advance(self.per_poll);
        self.polls.fetch_add(1, Ordering::SeqCst);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[test]
fn a_pause_holds_back_every_grant_and_resume_grants_the_waiters() {
    let clock = ManualClock::new();
    // Half of 8 CPUs, fixed: 4 s of tokens at the start, at most 4 grants held at once, a
    // grant one 100 ms slice.
    let elastic = manual_elastic(&clock, 0.5, 8.0);
    let (counter, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    let task = |polls: &Arc<AtomicUsize>| {
        Box::pin(
            Endless {
                clock: clock.clone(),
                per_poll: 10 * MS,
                polls: polls.clone(),
            }
            .paced(&elastic),
        )
    };

    // One holder, running on its grant.
    let held = Arc::new(AtomicUsize::new(0));
    let mut holder = task(&held);
    assert!(holder.as_mut().poll(&mut cx).is_pending());
    assert_eq!(held.load(Ordering::SeqCst), 1);
    assert_eq!(elastic.snapshot().queue.holders, 1);

    elastic.pause();
    let s = elastic.snapshot();
    assert!(s.paused && !s.braked);

    // The holder runs its grant to its end (100 ms, 10 polls of 10 ms) ...
    for _ in 0..9 {
        assert!(holder.as_mut().poll(&mut cx).is_pending());
    }
    assert_eq!(held.load(Ordering::SeqCst), 10);
    // ... then waits in line like the new work: nothing more is granted, tokens or not.
    let polls: Vec<_> = (0..3).map(|_| Arc::new(AtomicUsize::new(0))).collect();
    let mut waiting: Vec<_> = polls.iter().map(task).collect();
    for _ in 0..3 {
        assert!(holder.as_mut().poll(&mut cx).is_pending());
        for w in &mut waiting {
            assert!(w.as_mut().poll(&mut cx).is_pending());
        }
    }
    for _ in 0..10 {
        clock.advance(100 * MS);
        elastic.tick();
    }
    let s = elastic.snapshot();
    assert_eq!((s.queue.holders, s.waiters), (0, 4), "{s:#?}");
    assert!(s.tokens > Duration::ZERO, "held back with tokens to spare");
    assert_eq!(held.load(Ordering::SeqCst), 10);
    assert!(polls.iter().all(|p| p.load(Ordering::SeqCst) == 0));

    // Resume: every waiter is granted (woken) and runs; none was lost.
    let woken = counter.count();
    let before = clock.now();
    elastic.resume();
    assert!(!elastic.snapshot().paused);
    assert!(counter.count() > woken, "resume woke no waiter");
    let _ = holder.as_mut().poll(&mut cx);
    for w in &mut waiting {
        let _ = w.as_mut().poll(&mut cx);
    }
    assert_eq!(held.load(Ordering::SeqCst), 11);
    assert!(polls.iter().all(|p| p.load(Ordering::SeqCst) == 1));
    assert!(clock.now() > before);
    let s = elastic.snapshot();
    assert_eq!((s.queue.holders, s.waiters), (4, 0));
}

#[test]
fn the_snapshot_says_which_probe_measures() {
    use elastic_cpu_pacer::snapshot::ProbeSource;
    let elastic = Elastic::builder().build().expect("valid settings");
    assert_eq!(elastic.snapshot().probe_source, ProbeSource::None);
    let _rt = elastic
        .runtime(tokio::runtime::Builder::new_current_thread())
        .build()
        .unwrap();
    let expected = if cfg!(tokio_unstable) {
        ProbeSource::TaskHooks
    } else {
        ProbeSource::Sampler
    };
    assert_eq!(elastic.snapshot().probe_source, expected);
}
