//! Waiting, wake-up and settlement of `Paced`, driven by a manual clock and hand-made ticks.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use common::*;
use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::settings::Enforcement;
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::{PacedExt, PacedStreamExt};
use futures_core::Stream;

fn poll<F: Future + Unpin>(f: &mut F, cx: &mut Context<'_>) -> Poll<F::Output> {
    Pin::new(f).poll(cx)
}

#[test]
fn waits_when_spent_and_wakes_on_the_tick_that_refills() {
    let clock = ManualClock::new();
    // 10% of one CPU: 100 ms of tokens per second, burst 100 ms = one slice.
    let elastic = manual_elastic(&clock, 0.1, 1.0);
    let burn = Burn {
        clock: clock.clone(),
        per_poll: Duration::from_millis(30),
        polls: 10,
    };
    let mut fut = Box::pin(burn.paced(&elastic));
    let (counter, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);

    // Four polls of 30 ms: the fourth overruns the 100 ms slice by 20 ms and settles.
    for _ in 0..4 {
        assert!(poll(&mut fut, &mut cx).is_pending());
    }
    let s = elastic.snapshot();
    assert_eq!(s.acquired, 100 * MS);
    assert_eq!(s.over_limit, 20 * MS);
    assert_eq!(s.used, 120 * MS);
    // 120 ms refilled 12 ms; the overrun's 20 ms is debt: 0 + 12 − 20.
    assert_eq!((s.tokens, s.debt), (Duration::ZERO, 8 * MS));

    // Fifth poll: no tokens, so it queues and returns Pending without running the future.
    let wakes = counter.count();
    assert!(poll(&mut fut, &mut cx).is_pending());
    assert_eq!(elastic.snapshot().waiters, 1);
    assert_eq!(
        elastic.snapshot().used,
        120 * MS,
        "must not run while waiting"
    );

    // A tick before the debt is paid grants nothing (50 ms refill 5 ms at 10% of one CPU).
    clock.advance(Duration::from_millis(50)); // balance −3 ms
    elastic.tick();
    assert_eq!(elastic.snapshot().waiters, 1);
    assert_eq!(counter.count(), wakes);

    // Once the balance is positive the tick grants the head its whole slice and wakes it.
    clock.advance(Duration::from_millis(100)); // balance +7 ms
    elastic.tick();
    assert_eq!(counter.count(), wakes + 1, "granted waiter is woken");
    let s = elastic.snapshot();
    assert_eq!(s.waiters, 0);
    assert_eq!(s.acquired, 200 * MS);
    assert_eq!(
        (s.tokens, s.debt),
        (Duration::ZERO, 93 * MS),
        "the grant may dip into debt"
    );

    // The woken future runs to completion, then everything is settled.
    while poll(&mut fut, &mut cx).is_pending() {
        clock.advance(Duration::from_secs(1));
        elastic.tick();
    }
    drop(fut);
    let s = elastic.snapshot();
    assert_eq!(s.used, 300 * MS);
    assert_ledger_balanced(&s);
}

#[test]
fn fifo_between_paced_futures() {
    let clock = ManualClock::new();
    // Grants here are never used up by polls, so they would hold the single place the
    // concurrency cap leaves at this limit: this test is about order alone.
    let elastic = elastic_cpu_pacer::Elastic::builder()
        .manual(clock.clone())
        .running_clock(clock.clone())
        .fixed_share(0.1)
        .cpus(1.0)
        .enforcement(Enforcement::default().cap_concurrency(false))
        .build()
        .unwrap();
    let mk = |polls| {
        Box::pin(
            Burn {
                clock: clock.clone(),
                per_poll: Duration::from_millis(100),
                polls,
            }
            .paced(&elastic),
        )
    };
    let (mut a, mut b, mut c) = (mk(3), mk(3), mk(3));
    let (wa, wa_w) = CountingWaker::new();
    let (wb, wb_w) = CountingWaker::new();
    let (wc, wc_w) = CountingWaker::new();
    // `a` takes the only slice and spends it; b then c queue.
    assert!(poll(&mut a, &mut Context::from_waker(&wa_w)).is_pending());
    assert!(poll(&mut b, &mut Context::from_waker(&wb_w)).is_pending());
    assert!(poll(&mut c, &mut Context::from_waker(&wc_w)).is_pending());
    assert_eq!(elastic.snapshot().waiters, 2);
    let (b0, c0) = (wb.count(), wc.count());
    // One second refills one slice: b is granted first, c keeps waiting.
    clock.advance(Duration::from_secs(1));
    elastic.tick();
    assert_eq!((wb.count(), wc.count()), (b0 + 1, c0));
    // `a` spent its slice, so it re-admits behind c.
    assert!(poll(&mut a, &mut Context::from_waker(&wa_w)).is_pending());
    assert_eq!(elastic.snapshot().waiters, 2);
    let a0 = wa.count();
    clock.advance(Duration::from_secs(1));
    elastic.tick();
    assert_eq!(
        (wc.count(), wa.count()),
        (c0 + 1, a0),
        "c is granted before a"
    );
    clock.advance(Duration::from_secs(1));
    elastic.tick();
    assert_eq!(wa.count(), a0 + 1, "then a");
    drop((a, b, c));
    let s = elastic.snapshot();
    assert_eq!(s.waiters, 0);
    assert_ledger_balanced(&s);
}

#[test]
fn dropped_while_waiting_leaves_the_queue() {
    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, 0.1, 1.0);
    let (_, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    let burn = |polls| Burn {
        clock: clock.clone(),
        per_poll: Duration::from_millis(100),
        polls,
    };
    let mut a = Box::pin(burn(5).paced(&elastic));
    let mut b = Box::pin(burn(5).paced(&elastic));
    assert!(poll(&mut a, &mut cx).is_pending());
    assert!(poll(&mut b, &mut cx).is_pending());
    assert_eq!(elastic.snapshot().waiters, 1);
    drop(b);
    let s = elastic.snapshot();
    assert_eq!(s.waiters, 0);
    assert_eq!(s.acquired, 100 * MS, "the dropped waiter was never granted");
    drop(a);
    assert_ledger_balanced(&elastic.snapshot());
}

#[test]
fn dropped_while_holding_gives_back_the_unused_slice() {
    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, 0.1, 1.0);
    let (_, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    let mut a = Box::pin(
        Burn {
            clock: clock.clone(),
            per_poll: Duration::from_millis(30),
            polls: 5,
        }
        .paced(&elastic),
    );
    assert!(poll(&mut a, &mut cx).is_pending());
    drop(a);
    let s = elastic.snapshot();
    assert_eq!(s.used, 30 * MS);
    assert_eq!(s.returned, 70 * MS);
    assert_ledger_balanced(&s);
}

#[test]
fn dropped_after_grant_before_pickup_returns_the_whole_slice() {
    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, 0.1, 1.0);
    let (_, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    let burn = |polls| Burn {
        clock: clock.clone(),
        per_poll: Duration::from_millis(100),
        polls,
    };
    let mut a = Box::pin(burn(5).paced(&elastic));
    let mut b = Box::pin(burn(5).paced(&elastic));
    assert!(poll(&mut a, &mut cx).is_pending()); // spends the slice
    assert!(poll(&mut b, &mut cx).is_pending()); // queued
    clock.advance(Duration::from_secs(1));
    elastic.tick(); // b granted, not yet polled
    assert_eq!(elastic.snapshot().acquired, 200 * MS);
    drop(b);
    let s = elastic.snapshot();
    assert_eq!(s.returned, 100 * MS);
    drop(a);
    assert_ledger_balanced(&elastic.snapshot());
}

#[test]
fn panic_mid_poll_is_charged_and_settled() {
    struct Boom(ManualClock);
    impl Future for Boom {
        type Output = ();
        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            self.0.advance(Duration::from_millis(7));
            panic!("elastic work failed");
        }
    }
    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, 0.1, 1.0);
    let mut fut = Box::pin(Boom(clock.clone()).paced(&elastic));
    let (_, waker) = CountingWaker::new();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = fut.as_mut().poll(&mut Context::from_waker(&waker));
    }));
    assert!(caught.is_err());
    drop(fut);
    let s = elastic.snapshot();
    assert_eq!(
        s.used,
        7 * MS,
        "the panicking poll's running time is charged"
    );
    assert_eq!(s.returned, 93 * MS);
    assert_ledger_balanced(&s);
}

#[test]
fn pacer_yields_every_quantum_and_settles_once_per_slice() {
    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, 0.5, 1.0); // default quantum, slice 100 ms
    let mut pacer = elastic.pacer();
    let (counter, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    let (mut ready, mut yields) = (0, 0);
    // 150 ms of loop at 10 µs an iteration.
    for _ in 0..15_000 {
        loop {
            match Pin::new(&mut pacer.pace()).poll(&mut cx) {
                Poll::Ready(()) => break,
                Poll::Pending => yields += 1,
            }
        }
        ready += 1;
        clock.advance(Duration::from_micros(10));
    }
    assert_eq!(ready, 15_000);
    // The amortized check may let a stretch run up to twice the quantum: 150 ms of running
    // makes between 150 ms / 2q and 150 ms / q yields; each yield woke the task (outside a
    // runtime).
    let per_quantum =
        ((150 * MS).as_nanos() / elastic_cpu_pacer::settings::DEFAULT_QUANTUM.as_nanos()) as usize;
    assert!(
        (per_quantum / 2..=per_quantum).contains(&yields),
        "{yields} yields, quantum {:?}",
        elastic_cpu_pacer::settings::DEFAULT_QUANTUM
    );
    assert_eq!(counter.count(), yields);
    let s = elastic.snapshot();
    assert_eq!(
        s.queue.grants, 2,
        "yields pause the grant, they do not re-admit"
    );
    // The first slice was settled in full, overrun by at most the stretch that crossed it.
    assert!((100 * MS..=100 * MS + MS / 2).contains(&s.used), "{s:#?}");
    assert_eq!(s.over_limit, s.used - 100 * MS);
    drop(pacer);
    let s = elastic.snapshot();
    assert_eq!(s.used, 150 * MS);
    assert_ledger_balanced(&s);
}

#[test]
fn at_most_the_cpus_the_limit_pays_for_hold_grants_at_once() {
    let burn = |clock: &ManualClock| Burn {
        clock: clock.clone(),
        per_poll: Duration::from_millis(1),
        polls: 1000,
    };
    for (cap, limit, expect_holding) in [(true, 0.4, 1), (true, 0.6, 2), (false, 0.4, 3)] {
        let clock = ManualClock::new();
        let elastic = elastic_cpu_pacer::Elastic::builder()
            .manual(clock.clone())
            .fixed_share(limit)
            .cpus(2.0)
            .enforcement(Enforcement::default().cap_concurrency(cap))
            .build()
            .unwrap();
        // The bucket holds a second of tokens (0.8 s or more): enough for three slices.
        let mut futs: Vec<_> = (0..3)
            .map(|_| Box::pin(burn(&clock).paced(&elastic)))
            .collect();
        let (_counter, waker) = CountingWaker::new();
        let mut cx = Context::from_waker(&waker);
        for f in &mut futs {
            assert!(poll(f, &mut cx).is_pending());
        }
        let s = elastic.snapshot();
        assert_eq!(
            (s.queue.holders, s.waiters),
            (expect_holding, 3 - expect_holding),
            "cap {cap}, limit {limit}"
        );
        drop(futs);
        assert_ledger_balanced(&elastic.snapshot());
    }
}

#[test]
fn holders_that_run_nothing_for_a_tick_lend_a_place_to_work_in_line() {
    let clock = ManualClock::new();
    // 0.4 of 2 CPUs: one grant at a time.
    let elastic = manual_elastic(&clock, 0.4, 2.0);
    let (counter, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    let io = Arc::new(AtomicBool::new(false));
    // Runs 2 ms, then waits on I/O holding its grant.
    let mut waits = Box::pin(
        WaitsOn {
            clock: clock.clone(),
            work: Duration::from_millis(2),
            open: io.clone(),
        }
        .paced(&elastic),
    );
    assert!(poll(&mut waits, &mut cx).is_pending());
    let mut other = Box::pin(
        Burn {
            clock: clock.clone(),
            per_poll: Duration::from_millis(1),
            polls: 2,
        }
        .paced(&elastic),
    );
    assert!(poll(&mut other, &mut cx).is_pending());
    assert_eq!(elastic.snapshot().waiters, 1, "behind the holder cap");

    // The holder ran in this tick: the cap holds.
    let wakes = counter.count();
    clock.advance(Duration::from_millis(100));
    elastic.tick();
    assert_eq!(elastic.snapshot().waiters, 1);
    // A whole tick in which no holder ran while work waited: one more place.
    clock.advance(Duration::from_millis(100));
    elastic.tick();
    let s = elastic.snapshot();
    assert_eq!((s.waiters, s.queue.holders), (0, 2));
    assert_eq!(counter.count(), wakes + 1, "the waiter is woken");
    while poll(&mut other, &mut cx).is_pending() {}

    io.store(true, Ordering::Relaxed);
    assert!(poll(&mut waits, &mut cx).is_ready());
    let s = elastic.snapshot();
    assert_eq!((s.used, s.queue.holders), (4 * MS, 0));
    assert_ledger_balanced(&s);
}

#[test]
fn a_holder_that_runs_keeps_its_place_under_the_cap() {
    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, 0.4, 2.0);
    let (_counter, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    // A stream of ready items holds its grant between items.
    let mut runs = Box::pin(
        Items {
            clock: clock.clone(),
            per_item: Duration::from_millis(1),
        }
        .paced(&elastic),
    );
    assert!(runs.as_mut().poll_next(&mut cx).is_ready());
    let mut other = Box::pin(
        Burn {
            clock: clock.clone(),
            per_poll: Duration::from_millis(1),
            polls: 2,
        }
        .paced(&elastic),
    );
    assert!(poll(&mut other, &mut cx).is_pending());
    for _ in 0..5 {
        // The holder runs a little in every tick (far from spending its 100 ms slice); it
        // yields at the quantum between items, keeping its grant.
        let mut polls = 0;
        while runs.as_mut().poll_next(&mut cx).is_pending() {
            polls += 1;
            assert!(polls < 10, "a ready stream yields, then goes on");
        }
        clock.advance(Duration::from_millis(100));
        elastic.tick();
        let s = elastic.snapshot();
        assert_eq!((s.waiters, s.queue.holders), (1, 1), "no place lent");
    }
    drop(runs);
    assert_eq!(elastic.snapshot().waiters, 0, "the place passes on");
    drop(other);
    assert_ledger_balanced(&elastic.snapshot());
}

/// A stream of items that are always ready, each `per_item` on `clock`.
struct Items {
    clock: ManualClock,
    per_item: Duration,
}

impl Stream for Items {
    type Item = ();
    fn poll_next(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<()>> {
        self.clock.advance(self.per_item);
        Poll::Ready(Some(()))
    }
}

/// Runs `work` on `clock` at its first poll, then waits (woken by nobody here) until `open`.
struct WaitsOn {
    clock: ManualClock,
    work: Duration,
    open: Arc<AtomicBool>,
}

impl Future for WaitsOn {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        let work = std::mem::take(&mut self.work);
        self.clock.advance(work);
        if self.open.load(Ordering::Relaxed) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

#[test]
fn pacer_dropped_while_paused_at_the_quantum_gives_its_grant_back() {
    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, 0.5, 1.0);
    let mut pacer = elastic.pacer();
    let (_counter, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    // Run until the first yield at the quantum: the grant is paused, not settled.
    while let Poll::Ready(()) = Pin::new(&mut pacer.pace()).poll(&mut cx) {
        clock.advance(Duration::from_micros(10));
    }
    assert_eq!(format!("{pacer:?}"), r#"Pacer { state: "paused" }"#);
    let used = elastic.snapshot().used;
    assert_eq!(used, Duration::ZERO, "a pause settles nothing");
    assert_eq!(elastic.snapshot().queue.holders, 1);
    // An aborted task drops its pacer exactly here.
    drop(pacer);
    let s = elastic.snapshot();
    assert_eq!(s.queue.holders, 0, "the paused grant leaked: {s:#?}");
    assert!(s.used > Duration::ZERO && s.used < 100 * MS, "{s:#?}");
    assert_eq!(s.returned, 100 * MS - s.used);
    assert_ledger_balanced(&s);
}

#[test]
fn the_snapshot_shows_the_longest_wait_over_the_window() {
    let clock = ManualClock::new();
    // 10 % of one CPU: 100 ms of tokens a second, one 100 ms slice of burst.
    let elastic = manual_elastic(&clock, 0.1, 1.0);
    let (_counter, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    // One poll overruns its 100 ms grant by 400 ms: debt, capped at one second of tokens.
    let mut hog = Box::pin(
        Burn {
            clock: clock.clone(),
            per_poll: Duration::from_millis(500),
            polls: 2,
        }
        .paced(&elastic),
    );
    assert!(poll(&mut hog, &mut cx).is_pending());
    assert_eq!(elastic.snapshot().debt, Duration::from_millis(100));
    drop(hog);
    let mut next = Box::pin(
        Burn {
            clock: clock.clone(),
            per_poll: Duration::from_millis(1),
            polls: 1,
        }
        .paced(&elastic),
    );
    let mut ticks = 0;
    while poll(&mut next, &mut cx).is_pending() {
        clock.advance(Duration::from_millis(100));
        elastic.tick();
        ticks += 1;
        assert!(
            ticks <= 11,
            "the head waited past one second of refill plus a tick"
        );
        if ticks == 5 {
            // Still queued: its wait so far shows.
            assert_eq!(elastic.snapshot().longest_wait, Duration::from_millis(500));
        }
    }
    assert_eq!(ticks, 11);
    assert_eq!(
        elastic.snapshot().longest_wait,
        Duration::from_millis(1_100)
    );
    // A window (1 s, 10 ticks) with nobody waiting forgets it.
    for _ in 0..10 {
        clock.advance(Duration::from_millis(100));
        elastic.tick();
    }
    assert_eq!(elastic.snapshot().longest_wait, Duration::ZERO);
    assert_ledger_balanced(&elastic.snapshot());
}

#[test]
fn inside_a_quota_a_grant_is_what_the_rate_refills_in_one_period() {
    use elastic_cpu_pacer::settings::Inputs;
    use elastic_cpu_pacer::Elastic;

    let clock = ManualClock::new();
    // 0.8 of a 0.5-CPU quota: 400 ms of tokens a second, 40 ms per 100 ms period.
    let elastic = Elastic::builder()
        .manual(clock.clone())
        .running_clock(clock.clone())
        .fixed_share(0.8)
        .cpus(0.5)
        .inputs(Inputs::default().quota_headroom(false))
        .build()
        .unwrap();
    let first_grant = |elastic: &elastic_cpu_pacer::Elastic| {
        let burn = Burn {
            clock: clock.clone(),
            per_poll: Duration::from_millis(1),
            polls: 1,
        };
        let before = elastic.snapshot().acquired;
        let mut fut = Box::pin(burn.paced(elastic));
        let (_counter, waker) = CountingWaker::new();
        assert!(poll(&mut fut, &mut Context::from_waker(&waker)).is_ready());
        elastic.snapshot().acquired - before
    };
    // No quota: the whole slice.
    assert_eq!(first_grant(&elastic), 100 * MS);
    let cg = FakeCgroup::new("slice-in-quota");
    elastic.watch_quota(&cg.0, 0.5);
    elastic.tick();
    let rate = elastic.snapshot().queue.rate_nanos_per_sec;
    let period_refill = Duration::from_nanos(rate / 10);
    assert!(
        period_refill > 10 * MS && period_refill < 100 * MS,
        "{period_refill:?}"
    );
    assert_eq!(first_grant(&elastic), period_refill);
}
