//! The quota brake's tests: the line, the checks, and what it reads from the CPU clock.

use super::*;

const MS: Duration = Duration::from_millis(1);
const PERIOD: Duration = Duration::from_millis(100);

/// Half a CPU, for a process on one CPU: 50 ms per 100 ms period, checks every 2 ms at
/// least, the line at 50 less 1 + 2 ms.
fn half_a_cpu() -> QuotaBrake {
    QuotaBrake::new(0.5, PERIOD, 1, true).expect("a valid quota")
}

#[test]
fn a_quota_past_any_duration_saturates() {
    let b = QuotaBrake::new(1e30, PERIOD, 1, true).expect("a positive, finite quota");
    assert!(b.stop_at > Duration::from_secs(1 << 60), "{:?}", b.stop_at);
    assert!(QuotaBrake::new(f64::INFINITY, PERIOD, 1, true).is_none());
}

/// Steps every shortest check from `from` for `checks` checks, the process spending
/// `per_check` each; returns the changes and the time and CPU time at the end.
fn run(
    b: &mut QuotaBrake,
    from: (Duration, Duration),
    checks: u32,
    per_check: Duration,
) -> (Vec<QuotaChange>, (Duration, Duration)) {
    let (mut now, mut cpu) = from;
    let mut changes = Vec::new();
    for _ in 0..checks {
        now += b.check();
        cpu += per_check;
        changes.push(b.step(now, Some(cpu)));
    }
    (changes, (now, cpu))
}

#[test]
fn the_check_and_the_line_follow_the_quota() {
    let b = half_a_cpu();
    assert_eq!(b.check(), 2 * MS);
    assert_eq!(b.stop_at, 47 * MS);
    assert_eq!(b.resume_under, Duration::from_micros(44_500));
    // On two CPUs a check can spend twice as much.
    let two = QuotaBrake::new(0.5, PERIOD, 2, true).unwrap();
    assert_eq!(two.stop_at, 45 * MS);
    let wide = QuotaBrake::new(1.5, Duration::from_secs(1), 2, true).unwrap();
    assert_eq!(wide.check(), MAX_CHECK);
    let narrow = QuotaBrake::new(0.5, 10 * MS, 2, true).unwrap();
    assert_eq!(narrow.check(), MIN_CHECK);
    let refused = [
        (0.0, PERIOD),
        (-1.0, PERIOD),
        (f64::NAN, PERIOD),
        (0.5, Duration::ZERO),
    ];
    for (cpus, period) in refused {
        assert!(
            QuotaBrake::new(cpus, period, 2, true).is_none(),
            "{cpus} per {period:?}"
        );
    }
}

#[test]
fn it_reads_as_often_as_the_line_could_be_reached() {
    let mut b = QuotaBrake::new(0.5, PERIOD, 2, true).unwrap();
    let check = Some(b.check());
    assert_eq!(b.next_check(Duration::ZERO), check, "no reading yet");
    b.step(Duration::ZERO, Some(Duration::ZERO));
    assert_eq!(
        b.next_check(Duration::ZERO),
        check,
        "one reading: no spending yet"
    );
    // Nothing spent: 45 ms to the line at two CPUs is 22.5 ms, within a quarter period.
    b.step(10 * MS, Some(Duration::ZERO));
    assert_eq!(b.next_check(10 * MS), Some(Duration::from_micros(22_500)));
    // 40 ms spent: 5 ms left, 2.5 ms at two CPUs.
    b.step(20 * MS, Some(40 * MS));
    assert_eq!(b.next_check(20 * MS), Some(Duration::from_micros(2_500)));
    // 44 ms: 1 ms left, but never closer than the shortest check.
    b.step(22 * MS, Some(44 * MS));
    assert_eq!(b.next_check(22 * MS), check);
    // Engaged: every shortest check.
    assert_eq!(b.step(24 * MS, Some(46 * MS)), QuotaChange::Engage);
    assert_eq!(b.next_check(24 * MS), check);
    let mut idle = half_a_cpu();
    idle.step(Duration::ZERO, Some(Duration::ZERO));
    idle.step(MS, Some(Duration::ZERO));
    let longest = Some(PERIOD / LONGEST_CHECK);
    assert_eq!(idle.next_check(MS), longest, "at most a quarter period");
}

#[test]
fn a_period_of_a_few_milliseconds_is_checked_every_shortest_check() {
    // The kernel takes periods down to 1 ms; a quarter of one is below the shortest check.
    for period in [MS, 2 * MS, 3 * MS] {
        let mut b = QuotaBrake::new(2.0, period, 1, true).expect("a valid quota");
        b.step(Duration::ZERO, Some(Duration::ZERO));
        b.step(MS, Some(Duration::ZERO));
        assert_eq!(b.next_check(MS), Some(MIN_CHECK), "{period:?}");
    }
}

#[test]
fn it_engages_only_within_a_minute_of_a_throttled_period() {
    let mut b = QuotaBrake::new(0.5, PERIOD, 1, false).unwrap();
    // Disarmed: a whole CPU for a second passes the line without a brake, and the ticks
    // alone keep the window.
    let (changes, at) = run(&mut b, (Duration::ZERO, Duration::ZERO), 500, 2 * MS);
    assert!(changes.iter().all(|c| *c == QuotaChange::Keep));
    assert_eq!(b.next_check(at.0), None);
    // Throttled: armed, it engages at the next reading over the line.
    b.arm(at.0);
    assert!(b.next_check(at.0).is_some());
    let (changes, at) = run(&mut b, at, 1, 2 * MS);
    assert_eq!(changes, [QuotaChange::Engage]);
    // Engaged when the minute runs out: it still releases as the spending falls.
    let later = at.0 + ARMED_FOR;
    let (changes, at) = run(&mut b, (later, at.1), 60, Duration::ZERO);
    assert!(
        matches!(changes[0], QuotaChange::Release { .. }),
        "{changes:?}"
    );
    assert_eq!(b.next_check(at.0), None);
    let (changes, _) = run(&mut b, at, 100, 2 * MS);
    assert!(changes.iter().all(|c| *c == QuotaChange::Keep));
    assert_eq!(b.brakes(), 1);
}

#[test]
fn spending_under_the_line_never_brakes() {
    let mut b = half_a_cpu();
    // 0.45 CPUs: 45 ms a period, under the 47 ms line.
    let (changes, _) = run(&mut b, (Duration::ZERO, Duration::ZERO), 500, MS * 9 / 10);
    assert!(changes.iter().all(|c| *c == QuotaChange::Keep));
    assert_eq!(b.brakes(), 0);
}

#[test]
fn a_burst_brakes_at_the_line_and_releases_as_it_leaves_the_window() {
    let mut b = half_a_cpu();
    // A quiet period, then a whole core: 2 ms each check.
    let (_, at) = run(&mut b, (Duration::ZERO, Duration::ZERO), 60, Duration::ZERO);
    let (changes, at) = run(&mut b, at, 24, 2 * MS);
    let engaged = changes.iter().position(|c| *c == QuotaChange::Engage);
    // 47 ms of the quota spent: the 24th check (48 ms), the burst's last.
    assert_eq!(engaged, Some(23), "{changes:?}");
    assert!(b.is_on());
    // Held: nothing more is spent; the burst leaves the window a period after it began.
    let (changes, _) = run(&mut b, at, 60, Duration::ZERO);
    let released = changes
        .iter()
        .position(|c| matches!(c, QuotaChange::Release { .. }))
        .expect("released");
    let QuotaChange::Release { lasted } = changes[released] else {
        unreachable!()
    };
    // Under 44.5 ms once the burst's first 4 ms left the window: 104 ms after the burst
    // began, 56 ms after it engaged.
    assert_eq!(lasted, 56 * MS);
    assert!(!b.is_on());
    assert_eq!((b.brakes(), b.total()), (1, lasted));
}

#[test]
fn the_line_holds_every_period_in_a_steady_burst() {
    // Elastic work at a core's speed whenever the brake lets it, every period: the window
    // never passes the line by more than one check's spending.
    let mut b = half_a_cpu();
    let (mut now, mut cpu) = (Duration::ZERO, Duration::ZERO);
    b.step(now, Some(cpu));
    let mut log = vec![(now, cpu)];
    for _ in 0..2_000 {
        now += b.check();
        if !b.is_on() {
            cpu += 2 * MS;
        }
        b.step(now, Some(cpu));
        log.push((now, cpu));
    }
    // Every aligned 100 ms period, at any phase of the checks.
    for phase in 0..50 {
        for w in log.windows(51).skip(phase).step_by(50) {
            let spent = w[50].1 - w[0].1;
            assert!(spent <= b.stop_at + b.check(), "{spent:?}");
        }
    }
    // And it does not starve: about the line less half the release gap each period.
    let (from, to) = (log[50], log[log.len() - 1]);
    let mean = (to.1 - from.1).as_secs_f64() / (to.0 - from.0).as_secs_f64();
    assert!(mean >= 0.44, "{mean}");
}

#[test]
fn a_gap_in_the_readings_is_scaled_to_a_period() {
    let mut b = half_a_cpu();
    assert_eq!(
        b.step(Duration::ZERO, Some(Duration::ZERO)),
        QuotaChange::Keep
    );
    // The governor thread stalled for a second in which the process spent 0.4 CPUs: read
    // as 40 ms a period, not 400 ms.
    assert_eq!(b.step(1000 * MS, Some(400 * MS)), QuotaChange::Keep);
    assert!(!b.is_on());
    // 0.5 CPUs over a second: 50 ms a period, over the line.
    assert_eq!(b.step(2000 * MS, Some(900 * MS)), QuotaChange::Engage);
}

#[test]
fn an_unreadable_clock_or_one_that_goes_back_lets_go_and_starts_over() {
    let mut b = half_a_cpu();
    let (changes, (now, cpu)) = run(&mut b, (Duration::ZERO, Duration::ZERO), 30, 2 * MS);
    assert!(changes.contains(&QuotaChange::Engage));
    assert!(matches!(
        b.step(now + b.check(), None),
        QuotaChange::Release { .. }
    ));
    assert_eq!(b.step(now + 2 * b.check(), Some(cpu)), QuotaChange::Keep);
    // The counter went back (a new process CPU clock): no spending read from it.
    assert_eq!(b.step(now + 3 * b.check(), Some(MS)), QuotaChange::Keep);
    assert_eq!(b.step(now + 4 * b.check(), Some(2 * MS)), QuotaChange::Keep);
    assert!(!b.is_on());
    assert_eq!(b.readings.len(), 2);
}

#[test]
fn its_readings_stay_bounded() {
    let mut b = half_a_cpu();
    let cap = b.max_readings;
    let mut now = Duration::ZERO;
    for i in 0..100_000u64 {
        // Readings much closer than the shortest check (many early wake-ups).
        now += Duration::from_micros(10);
        b.step(now, Some(Duration::from_micros(i)));
    }
    assert!(b.readings.len() <= cap, "{} > {cap}", b.readings.len());
}

#[test]
fn a_new_quota_moves_the_line_and_keeps_the_counts() {
    let mut b = half_a_cpu();
    let (_, at) = run(&mut b, (Duration::ZERO, Duration::ZERO), 60, Duration::ZERO);
    let (changes, at) = run(&mut b, at, 24, 2 * MS);
    assert!(changes.contains(&QuotaChange::Engage));
    // The quota doubles while it holds: the line moves up, the spending is under it, it
    // lets go at the next reading; the brake it counted stays counted.
    assert!(b.resize(1.0, PERIOD, 1));
    assert_eq!(b.stop_at, 96 * MS);
    let (now, cpu) = at;
    let change = b.step(now + b.check(), Some(cpu));
    assert!(matches!(change, QuotaChange::Release { .. }), "{change:?}");
    assert_eq!(b.brakes(), 1);
    // A quota that cannot be metered changes nothing.
    assert!(!b.resize(f64::NAN, PERIOD, 1));
    assert!(!b.resize(1.0, Duration::ZERO, 1));
    assert_eq!(b.stop_at, 96 * MS);
    // A shorter period keeps fewer readings: they are cut to its bound.
    assert!(b.resize(0.5, 10 * MS, 1));
    assert!(b.readings.len() <= b.max_readings);
}

#[test]
fn a_quota_that_goes_lets_go_at_once() {
    let mut b = half_a_cpu();
    let (_, at) = run(&mut b, (Duration::ZERO, Duration::ZERO), 60, Duration::ZERO);
    let (_, (now, _)) = run(&mut b, at, 30, 2 * MS);
    assert!(b.is_on());
    let lasted = b.release(now + 10 * MS).expect("it was engaged");
    assert!(!b.is_on());
    assert!(b.readings.is_empty());
    assert_eq!((b.brakes(), b.total()), (1, lasted));
    assert_eq!(b.release(now + 20 * MS), None, "nothing to let go");
}
