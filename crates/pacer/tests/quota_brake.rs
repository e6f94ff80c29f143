//! The quota brake, on the manual clock with the process's CPU time scripted: inside a quota
//! of half a CPU (50 ms per 100 ms period), once a throttled period has armed it, elastic work
//! stops when the process has spent all but the reserve over the last period, a paced holder
//! gives its grant back at its next poll, and elastic work resumes once the spending has left
//! the window. Unarmed, or with the headroom input off, nothing brakes.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use common::{assert_ledger_balanced, attached, eventually, scripted, Burn, MS};
use elastic_cpu_pacer::settings::{Brake, Inputs};
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::testing::{ManualClock, Script};
use elastic_cpu_pacer::{Elastic, PacedExt, Profile};

/// The brake's check at a 100 ms period: a fiftieth of it.
const CHECK: Duration = Duration::from_millis(2);

struct Node {
    clock: ManualClock,
    script: Script,
    elastic: Elastic,
    _rt: tokio::runtime::Runtime,
}

/// Half a CPU of quota, a fixed share of all of it, no backlog brake: only the quota brake
/// can hold elastic work. Not yet throttled.
fn unarmed(inputs: Inputs) -> Node {
    let (clock, script) = (ManualClock::new(), Script::new());
    script.quota(0.5);
    script.spend(Duration::ZERO);
    let elastic = scripted(&clock, &script)
        .fixed_share(1.0)
        .brake(Brake::Off)
        .inputs(inputs)
        .build()
        .unwrap();
    let rt = attached(&elastic);
    Node {
        clock,
        script,
        elastic,
        _rt: rt,
    }
}

/// As [`unarmed`], after a tick that saw a throttled period: the brake is armed.
fn node(inputs: Inputs) -> Node {
    let n = unarmed(inputs);
    n.script.throttle(1);
    n.elastic.tick();
    assert_eq!(n.elastic.snapshot().throttled_periods, 1);
    n
}

impl Node {
    /// `checks` brake checks, the process spending `each` before every one.
    fn spend(&self, checks: u32, each: Duration) {
        for _ in 0..checks {
            self.script.spend(each);
            self.clock.advance(CHECK);
            self.elastic.check_brakes();
        }
    }
}

fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(std::task::Waker::noop()))
}

#[test]
fn a_period_spent_to_the_line_stops_elastic_work_until_it_leaves_the_window() {
    let n = node(Inputs::default());
    n.elastic.check_brakes();
    // A whole CPU (2 ms a check) for 23 checks: 46 ms, under the line (50 ms less 2 % of it and
    // one check at the process's one CPU: 47 ms).
    n.spend(23, CHECK);
    let s = n.elastic.snapshot();
    assert!(!s.braked && !s.queue.paused, "{s:#?}");
    // A paced holder takes a grant (its poll runs 100 µs on the manual clock).
    let mut work = Box::pin(
        Burn {
            clock: n.clock.clone(),
            per_poll: MS / 10,
            polls: usize::MAX,
        }
        .paced(&n.elastic),
    );
    assert!(poll_once(&mut work).is_pending());
    assert!(n.elastic.snapshot().acquired > Duration::ZERO);
    // The next check (the holder's poll moved the clock 0.1 ms) reads 48 ms over the period:
    // the line is passed.
    n.spend(1, CHECK);
    let s = n.elastic.snapshot();
    assert!(s.braked && s.queue.paused, "{s:#?}");
    assert_eq!((s.quota_brakes, s.brakes), (1, 0));
    // The holder gives its grant back at its next poll and waits; a new one gets nothing.
    assert!(poll_once(&mut work).is_pending());
    let held = n.elastic.snapshot();
    assert_eq!(held.acquired, held.returned + held.used - held.over_limit);
    let mut late = Box::pin(async {}.paced(&n.elastic));
    assert!(poll_once(&mut late).is_pending(), "granted while braked");
    assert_eq!(n.elastic.snapshot().grants, held.grants);
    // Nothing spent from here: the burst leaves the window a period after it began, and the
    // brake lets go once the last period's spending is under the line less 5 % of the quota,
    // 44.5 ms.
    let mut released = None;
    for check in 1..=60 {
        n.spend(1, Duration::ZERO);
        if !n.elastic.snapshot().braked {
            released = Some(check);
            break;
        }
    }
    let released = released.expect("released within 120 ms");
    // 48 ms spent from 0 to 48.1 ms, 2 ms a check; under 44.5 ms once the window starts past
    // the 4 ms reading: the first check at or after 104 ms, 104.1 ms (the holder's second poll
    // gave its grant back without running), 28 checks after it engaged.
    assert_eq!(released, 28);
    let s = n.elastic.snapshot();
    assert!(!s.queue.paused);
    assert_eq!(s.quota_braked_time, CHECK * 28);
    // The holder first, in order: it runs on a new grant.
    assert_eq!(s.grants, held.grants + 1);
    assert!(poll_once(&mut work).is_pending());
    drop((work, late));
    let s = n.elastic.snapshot();
    assert_eq!(s.used, held.used + MS / 10, "settled as the holder goes");
    assert_ledger_balanced(&s);
}

#[test]
fn spending_under_the_line_no_throttled_period_or_the_headroom_input_off_never_brakes() {
    let under = node(Inputs::default());
    let off = node(Inputs::default().quota_headroom(false));
    under.elastic.check_brakes();
    off.elastic.check_brakes();
    // 0.4 CPUs, steady, for two seconds: 40 ms a period.
    under.spend(1_000, MS * 4 / 5);
    // A whole CPU: every period spent twice over.
    off.spend(1_000, CHECK);
    // Never throttled: the brake is not armed.
    let unthrottled = unarmed(Inputs::default());
    unthrottled.elastic.check_brakes();
    unthrottled.spend(1_000, CHECK);
    for s in [
        under.elastic.snapshot(),
        off.elastic.snapshot(),
        unthrottled.elastic.snapshot(),
    ] {
        assert!(!s.braked, "{s:#?}");
        assert_eq!((s.quota_brakes, s.quota_braked_time), (0, Duration::ZERO));
    }
}

#[test]
fn without_the_throttling_input_it_is_armed_from_the_start() {
    let n = unarmed(Inputs::default().throttling(false));
    n.elastic.check_brakes();
    n.spend(24, CHECK);
    let s = n.elastic.snapshot();
    assert!(s.braked, "{s:#?}");
    assert_eq!((s.quota_brakes, s.throttled_periods), (1, 0));
}

#[test]
fn the_tick_checks_the_brake_too() {
    // Without the governor thread's early wake-ups a tick still reads the spending: a tick of
    // 100 ms at a whole CPU passes the line.
    let n = node(Inputs::default());
    n.elastic.tick();
    n.script.spend(60 * MS);
    n.clock.advance(100 * MS);
    n.elastic.tick();
    let s = n.elastic.snapshot();
    assert!(s.braked && s.queue.paused, "{s:#?}");
    assert_eq!(s.quota_brakes, 1);
}

#[cfg(feature = "metrics")]
#[test]
fn the_brakes_are_counted_in_the_metrics() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let n = node(Inputs::default());
    n.elastic.check_brakes();
    n.spend(30, CHECK);
    metrics::with_local_recorder(&recorder, || n.elastic.tick());
    let brakes = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .find(|(key, _, _, _)| key.key().name() == "elastic_cpu_quota_brakes_total")
        .map(|(_, _, _, value)| value);
    assert_eq!(brakes, Some(DebugValue::Counter(1)));
}

#[test]
fn the_governor_thread_brakes_between_its_ticks() {
    // A real governor thread with a tick of a minute: only its quota checks can brake. Armed
    // from the start (no throttling input); the process's CPU time is scripted, the clock is
    // real. The deadline is a hang guard, not a timing assertion.
    let script = Script::new();
    script.quota(0.5);
    script.cpus(1);
    script.spend(Duration::ZERO);
    let tick = Duration::from_secs(60);
    let elastic = Elastic::builder()
        .script(script.clone())
        .profile(Profile::Custom(
            Profile::Cockroach.steps().tick(tick).window(tick),
        ))
        .fixed_share(1.0)
        .brake(Brake::Off)
        .inputs(Inputs::default().throttling(false))
        .build()
        .unwrap();
    let _rt = attached(&elastic);
    // Spending five times faster than real time (25 ms per 5 ms wait) passes the line within
    // a period.
    eventually("a quota brake", Duration::from_secs(30), || {
        script.spend(25 * MS);
        elastic.snapshot().quota_brakes > 0
    });
    let s = elastic.snapshot();
    assert!(s.queue.paused, "{s:#?}");
    assert_eq!(s.ticks, 0, "braked by a tick, not by a quota check");
    // Nothing more spent: it lets go as the spending leaves the window.
    eventually("its release", Duration::from_secs(30), || {
        !elastic.snapshot().queue.paused
    });
    elastic.shutdown();
}
