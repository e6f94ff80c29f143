//! The governor thread made to end (it returns, or it panics) while work waits on every kind of
//! class: the `Elastic`'s own, a class made with `Elastic::class`, the idle class and a
//! connection gate, with the backlog brake on. Every waiter ends (granted or closed), no brake
//! stays on, and the snapshot says the governor is gone. A real governor thread on a minute's
//! tick: nothing but its end lets those waiters go. Generous hang guards only. Last, on a
//! manual clock, a grant waiting for a slot the classes share.

mod common;

use std::time::Duration;

use common::eventually;
use elastic_cpu_pacer::gate::{GateSettings, RejectReason};
use elastic_cpu_pacer::settings::{Brake, ClassSettings};
use elastic_cpu_pacer::snapshot::GovernorState;
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::testing::{GovernorEnd, Script};
use elastic_cpu_pacer::{Elastic, PacedExt, Profile};

/// Far past anything the test does: no tick grants or releases anything meanwhile.
const TICK: Duration = Duration::from_secs(60);
/// The brake's threshold: a foreground poll that waited 5 ms raises the alarm.
const AT: Duration = Duration::from_millis(1);
/// A hang guard, not a timing assertion.
const WITHIN: Duration = Duration::from_secs(10);

fn elastic(script: &Script) -> Elastic {
    Elastic::builder()
        .profile(Profile::Custom(
            Profile::Cockroach.steps().tick(TICK).window(TICK),
        ))
        .script(script.clone())
        .cpus(1.0)
        .fixed_share(0.01)
        .brake(Brake::At(AT))
        .build()
        .expect("valid settings")
}

fn governor_ends_and_every_waiter_with_it(how: GovernorEnd, expect: GovernorState) {
    let script = Script::new();
    script.cpus(1);
    // A quota, so the brake holds the idle class too.
    script.quota(1.0);
    let elastic = elastic(&script);
    let rt = elastic
        .runtime(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_time(),
        )
        .build()
        .unwrap();
    let member = elastic.class(ClassSettings::new("batch")).unwrap();
    let gate = elastic
        .connection_gate(GateSettings::new().share(0.05, 0.05).initial_share(0.05))
        .unwrap();
    let pool = elastic.idle_runtime(1).unwrap();

    // In each class of elastic work one task holds a grant and waits (for `release`): with
    // the class's one place taken (a share of 0.01 pays for one holder), the next task waits
    // for it. A class made with `Elastic::class` also shares the own class's one slot.
    let (release, released) = tokio::sync::watch::channel(false);
    let hold = || {
        let mut released = released.clone();
        async move {
            let _ = released.wait_for(|r| *r).await;
        }
    };
    let own_holder = rt.spawn(hold().paced(&elastic));
    let idle_holder = pool.spawn(hold());
    let member_holder = rt.spawn(hold().paced(&member));
    eventually("the holders hold", WITHIN, || {
        let s = elastic.snapshot();
        s.queue.holders == 1 && s.idle_queue.as_ref().is_some_and(|q| q.holders == 1)
    });
    let own_waiter = rt.spawn(async {}.paced(&elastic));
    let idle_waiter = pool.spawn(async {});
    let member_waiter = rt.spawn(async {}.paced(&member));
    // The gate: one setup holds its one place, the next attempt waits for it.
    let permit = rt
        .block_on(gate.admit(Duration::from_secs(100)))
        .expect("admitted");
    let gate_waiter = {
        let gate = gate.clone();
        rt.spawn(async move { gate.admit(Duration::from_secs(100)).await.map(drop) })
    };
    eventually("every class has a waiter", WITHIN, || {
        let s = elastic.snapshot();
        s.waiters == 1
            && s.idle_queue.as_ref().is_some_and(|q| q.waiters == 1)
            && gate.snapshot().queue_len == 1
    });
    assert!(!member_waiter.is_finished() && !member_holder.is_finished());
    assert_eq!(elastic.snapshot().ticks, 0);

    // The next wake-up is the end: the alarm wakes the governor, which brakes, then ends.
    elastic.end_governor(how);
    elastic
        .probe()
        .record_poll(Some(Duration::from_millis(5)), None, false);

    let outcomes = rt.block_on(async {
        tokio::time::timeout(WITHIN, async {
            (
                own_waiter.await,
                idle_waiter.await,
                member_waiter.await,
                gate_waiter.await,
            )
        })
        .await
    });
    let (own, idle, member_done, gated) = outcomes.expect("every waiter ended");
    own.unwrap();
    idle.unwrap();
    member_done.unwrap();
    // The gate's waiter was refused: the gate closed on it.
    let refused = gated.unwrap().expect_err("no place came free");
    assert_eq!(refused.reason(), RejectReason::Closed);

    // Once the snapshot says the governor has stopped, everything is closed and released.
    eventually("the snapshot says so", WITHIN, || {
        !elastic.snapshot().governor.is_running()
    });
    let s = elastic.snapshot();
    assert_eq!(s.governor, expect);
    assert!(s.brakes >= 1, "it ended braked: {s:#?}");
    assert!(!s.braked && !s.queue.paused, "no brake stays on: {s:#?}");
    assert!(s.queue.closed);
    let idle_queue = s.idle_queue.as_ref().expect("the pool lives");
    assert!(idle_queue.closed && !idle_queue.paused, "{idle_queue:?}");
    let g = gate.snapshot();
    assert!(g.stats.closed && !g.stats.paused, "{g:#?}");
    // Later work runs unpaced, later attempts are refused, later classes are closed.
    rt.block_on(rt.spawn(async {}.paced(&elastic))).unwrap();
    let later = rt.block_on(gate.admit(Duration::from_secs(1)));
    assert_eq!(later.map(drop).unwrap_err().reason(), RejectReason::Closed);
    let late = elastic.class(ClassSettings::new("late")).unwrap();
    rt.block_on(rt.spawn(async {}.paced(&late))).unwrap();
    let late_gate = elastic.connection_gate(GateSettings::new()).unwrap();
    let refused = rt.block_on(late_gate.admit(Duration::from_secs(1)));
    assert_eq!(
        refused.map(drop).unwrap_err().reason(),
        RejectReason::Closed
    );
    drop(permit);
    release.send_replace(true);
    for holder in [own_holder, idle_holder, member_holder] {
        rt.block_on(holder).unwrap();
    }
    pool.shutdown_background();
}

#[test]
fn a_governor_thread_that_returns_closes_every_class_and_gate() {
    governor_ends_and_every_waiter_with_it(GovernorEnd::Exit, GovernorState::Exited);
}

#[test]
fn a_governor_thread_that_panics_closes_every_class_and_gate() {
    governor_ends_and_every_waiter_with_it(GovernorEnd::Panic, GovernorState::Panicked);
}

#[test]
fn shutdown_says_so() {
    let elastic = elastic(&Script::new());
    assert_eq!(elastic.snapshot().governor, GovernorState::Running);
    elastic.shutdown();
    let s = elastic.snapshot();
    assert_eq!(s.governor, GovernorState::ShutDown);
    assert!(s.queue.closed);
}

/// A grant waiting for one of the slots the classes share (module `slots`) ends too: once the
/// governor has stopped it runs without one. Manual clock, polled by hand.
#[test]
fn a_grant_waiting_for_a_slot_runs_once_the_governor_stops() {
    use std::future::{poll_fn, Future};
    use std::pin::pin;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll, Waker};

    let clock = elastic_cpu_pacer::testing::ManualClock::new();
    // Half of one CPU: one grant at a time, the classes together.
    let elastic = common::manual_elastic(&clock, 0.5, 1.0);
    let (a, b, c) = (
        elastic.class(ClassSettings::new("a")).unwrap(),
        elastic.class(ClassSettings::new("b")).unwrap(),
        elastic.class(ClassSettings::new("c")).unwrap(),
    );
    let done = Arc::new(AtomicBool::new(false));
    let hold = || {
        let done = done.clone();
        poll_fn(move |_| {
            if done.load(Ordering::Relaxed) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    };
    let mut cx = Context::from_waker(Waker::noop());
    // Grants out before the first tick take no slot; the tick turns them on (one slot, for
    // what half a CPU pays).
    let mut a_holds = pin!(hold().paced(&a));
    let mut b_holds = pin!(hold().paced(&b));
    assert!(a_holds.as_mut().poll(&mut cx).is_pending());
    assert!(b_holds.as_mut().poll(&mut cx).is_pending());
    clock.advance(Duration::from_millis(100));
    elastic.tick();
    // `c`'s first grant takes the slot; `a`'s grant, polled again, waits for it.
    let mut c_holds = pin!(hold().paced(&c));
    assert!(c_holds.as_mut().poll(&mut cx).is_pending());
    done.store(true, Ordering::Relaxed);
    assert!(
        a_holds.as_mut().poll(&mut cx).is_pending(),
        "waits for the slot"
    );

    elastic.shutdown();
    assert_eq!(elastic.snapshot().governor, GovernorState::ShutDown);
    assert!(
        a_holds.as_mut().poll(&mut cx).is_ready(),
        "runs without a slot"
    );
    assert!(b_holds.as_mut().poll(&mut cx).is_ready());
    assert!(c_holds.as_mut().poll(&mut cx).is_ready());
}
