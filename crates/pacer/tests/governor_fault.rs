//! The governor thread made to end (it returns, or it panics) while work waits on every kind of
//! class: the `Elastic`'s own, a class made with `Elastic::class`, the idle class and a
//! connection gate, with the backlog brake on. Every waiter ends (granted or closed), no brake
//! stays on, and the snapshot says the governor is gone. A real governor thread on a minute's
//! tick: nothing but its end lets those waiters go. Generous hang guards only.

mod common;

use std::time::Duration;

use common::{eventually, spin};
use elastic_cpu_pacer::gate::{GateSettings, RejectReason};
use elastic_cpu_pacer::settings::{Brake, ClassSettings, Steps};
use elastic_cpu_pacer::snapshot::GovernorState;
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
        .profile(Profile::Custom(Steps {
            tick: TICK,
            window: TICK,
            ..Profile::Cockroach.steps()
        }))
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

    // The own class and the idle class: one task runs its 10 ms of tokens into debt, the next
    // waits for a refill only a tick would bring.
    let burn = || async { spin(Duration::from_millis(50)) };
    rt.block_on(rt.spawn(burn().paced(&elastic))).unwrap();
    let own_waiter = rt.spawn(async {}.paced(&elastic));
    rt.block_on(pool.spawn(burn())).unwrap();
    let idle_waiter = pool.spawn(async {});
    // A class made with `Elastic::class` has no tokens before a tick gives it its part.
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
    assert!(!member_waiter.is_finished(), "no part before a tick");
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
    drop(permit);
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
