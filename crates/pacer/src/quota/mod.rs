//! Inside a CPU quota, elastic work stops before a period's quota runs out.
//!
//! The kernel meters a quota per period (100 ms by default): once the cgroup has spent a
//! period's quota, every thread of it, the foreground's included, stops until the next period.
//! The headroom cap holds elastic work's *mean* rate to what the foreground leaves, but below
//! about a CPU a grant run at a core's speed can spend what a period leaves in the period's
//! first part. So the governor thread reads the process's CPU time and holds elastic work back
//! while what the process spent over the last period is within a reserve of the period's quota
//! (the line: 2 % of the quota, plus what the process's CPUs can spend in one check), until it
//! falls a further 5 % of the quota below the line. It reads as often as the line could be
//! reached: after the time the process's CPUs, all busy, would take to spend what is left
//! under the line, at least a fiftieth of the period (1 to 10 ms), at most a quarter of it.
//!
//! The kernel's periods are not aligned with the readings. The window slides over the last
//! period, and what it reads is at least what any aligned period has spent so far, so holding
//! the window under the line holds every period under it (up to one check's spending). That
//! caution costs elastic CPU where the quota has room, so the brake is armed only for
//! [`ARMED_FOR`] after the cgroup was throttled (always, when throttling is not watched);
//! disarmed, the governor's ticks keep the window.

pub(crate) mod cpus;

use std::collections::VecDeque;
use std::time::Duration;

/// The share of a period's quota kept under it, beside one check's spending.
const RESERVE: f64 = 0.02;
/// How far under the line the spending must fall before elastic work resumes (a share of the
/// quota): without it the brake would flip at every check.
const RESUME_BELOW: f64 = 0.05;
/// Checks per period.
const CHECKS_PER_PERIOD: u32 = 50;
const MIN_CHECK: Duration = Duration::from_millis(1);
const MAX_CHECK: Duration = Duration::from_millis(10);
/// The longest time between readings, as a share of the period.
const LONGEST_CHECK: u32 = 4;
/// How long a throttled period arms the brake.
pub(crate) const ARMED_FOR: Duration = Duration::from_secs(60);

/// What a [`QuotaBrake::step`] asks of the classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QuotaChange {
    Keep,
    /// The last period's spending reached the line: hold elastic work back.
    Engage,
    /// It fell under the line again after `lasted`: let elastic work go.
    Release {
        lasted: Duration,
    },
}

/// The quota brake's state: the last period's readings and whether it holds elastic work.
#[derive(Debug)]
pub(crate) struct QuotaBrake {
    period: Duration,
    /// The shortest time between readings.
    check: Duration,
    /// CPUs the process can run on at once: how fast the spending can grow.
    parallelism: f64,
    /// The spending the last reading saw (`None`: none yet).
    last_spent: Option<Duration>,
    /// Spending over the last period at which it engages, and under which it releases.
    stop_at: Duration,
    resume_under: Duration,
    /// (when, the process's CPU time then), oldest first, spanning a little over a period.
    readings: VecDeque<(Duration, Duration)>,
    max_readings: usize,
    engaged_at: Option<Duration>,
    /// It may engage until then (queue clock; `Duration::MAX`: always).
    armed_until: Duration,
    brakes: u64,
    /// Time held, brakes that ended.
    total: Duration,
}

/// What a quota of some CPUs per period sets in the brake.
struct Sizing {
    period: Duration,
    check: Duration,
    parallelism: f64,
    stop_at: Duration,
    resume_under: Duration,
    max_readings: usize,
}

impl Sizing {
    /// `None` for a quota that cannot be metered: not positive, not finite, or a zero period.
    fn new(cpus: f64, period: Duration, parallelism: usize) -> Option<Sizing> {
        if !(cpus.is_finite() && cpus > 0.0) || period.is_zero() {
            return None;
        }
        let parallelism = parallelism.max(1) as f64;
        let check = (period / CHECKS_PER_PERIOD).clamp(MIN_CHECK, MAX_CHECK);
        // Saturating: the quota is the cgroup's to say (`mul_f64` panics past `Duration::MAX`).
        let quota =
            Duration::try_from_secs_f64(period.as_secs_f64() * cpus).unwrap_or(Duration::MAX);
        let reserve = quota.mul_f64(RESERVE) + check.mul_f64(parallelism);
        let stop_at = quota.saturating_sub(reserve);
        let resume_under = stop_at.saturating_sub(quota.mul_f64(RESUME_BELOW));
        // A period of readings at least half a check apart, and the one before it.
        let max_readings = (2 * period.as_nanos() / check.as_nanos()) as usize + 2;
        Some(Sizing {
            period,
            check,
            parallelism,
            stop_at,
            resume_under,
            max_readings,
        })
    }
}

impl QuotaBrake {
    /// The brake for a quota of `cpus` per `period`, for a process that can run on
    /// `parallelism` CPUs at once, armed from the start if `always_armed` (`None` for a quota
    /// that cannot be metered: not positive, not finite, or a zero period).
    pub(crate) fn new(
        cpus: f64,
        period: Duration,
        parallelism: usize,
        always_armed: bool,
    ) -> Option<QuotaBrake> {
        let sizing = Sizing::new(cpus, period, parallelism)?;
        Some(QuotaBrake {
            period: sizing.period,
            check: sizing.check,
            parallelism: sizing.parallelism,
            last_spent: None,
            stop_at: sizing.stop_at,
            resume_under: sizing.resume_under,
            readings: VecDeque::with_capacity(sizing.max_readings),
            max_readings: sizing.max_readings,
            engaged_at: None,
            armed_until: if always_armed {
                Duration::MAX
            } else {
                Duration::ZERO
            },
            brakes: 0,
            total: Duration::ZERO,
        })
    }

    /// Size the brake for a new quota of `cpus` per `period` (the quota changed at run time),
    /// keeping its readings, whether it is engaged or armed, and its counts. Returns false, and
    /// changes nothing, for a quota that cannot be metered.
    pub(crate) fn resize(&mut self, cpus: f64, period: Duration, parallelism: usize) -> bool {
        let Some(sizing) = Sizing::new(cpus, period, parallelism) else {
            return false;
        };
        self.period = sizing.period;
        self.check = sizing.check;
        self.parallelism = sizing.parallelism;
        self.stop_at = sizing.stop_at;
        self.resume_under = sizing.resume_under;
        self.max_readings = sizing.max_readings;
        while self.readings.len() > self.max_readings {
            self.readings.pop_front();
        }
        true
    }

    /// Let go at `now` and forget the readings: the quota is gone. Returns how long it had held
    /// elastic work back, if it was engaged.
    pub(crate) fn release(&mut self, now: Duration) -> Option<Duration> {
        self.readings.clear();
        self.last_spent = None;
        let at = self.engaged_at.take()?;
        let lasted = now.saturating_sub(at);
        self.total += lasted;
        Some(lasted)
    }

    /// The shortest time between readings.
    #[cfg(test)]
    fn check(&self) -> Duration {
        self.check
    }

    /// The cgroup was throttled at `now`: the brake may engage for [`ARMED_FOR`].
    pub(crate) fn arm(&mut self, now: Duration) {
        self.armed_until = self.armed_until.max(now.saturating_add(ARMED_FOR));
    }

    /// Whether it may engage at `now`.
    fn armed(&self, now: Duration) -> bool {
        now < self.armed_until
    }

    /// When the governor thread should read the process's CPU time next (`None`: disarmed at
    /// `now`, the ticks are enough): after the time the process's CPUs would take to spend what
    /// is left under the line, within the shortest and the longest check; every shortest check
    /// while engaged or without a reading.
    pub(crate) fn next_check(&self, now: Duration) -> Option<Duration> {
        if self.engaged_at.is_none() && !self.armed(now) {
            return None;
        }
        Some(match (self.engaged_at, self.last_spent) {
            (None, Some(spent)) => self
                .stop_at
                .saturating_sub(spent)
                .div_f64(self.parallelism)
                // A period under four shortest checks (the kernel takes 1 ms) has no room
                // between them: every shortest check.
                .clamp(self.check, (self.period / LONGEST_CHECK).max(self.check)),
            _ => self.check,
        })
    }

    /// One reading at `now` (the queue's clock) of the process's CPU time (`None`: unreadable;
    /// the brake lets go and starts over).
    pub(crate) fn step(&mut self, now: Duration, cpu: Option<Duration>) -> QuotaChange {
        let spent = match cpu {
            Some(cpu) => self.read(now, cpu),
            None => {
                self.readings.clear();
                None
            }
        };
        self.last_spent = spent;
        match (self.engaged_at, spent) {
            (None, Some(spent)) if spent >= self.stop_at && self.armed(now) => {
                self.engaged_at = Some(now);
                self.brakes += 1;
                QuotaChange::Engage
            }
            (Some(at), spent) if spent.is_none_or(|s| s < self.resume_under) => {
                self.engaged_at = None;
                let lasted = now.saturating_sub(at);
                self.total += lasted;
                QuotaChange::Release { lasted }
            }
            _ => QuotaChange::Keep,
        }
    }

    /// Note `cpu` at `now`; what the process spent over the last period, scaled to a period when
    /// the readings left a gap (`None`: no earlier reading).
    fn read(&mut self, now: Duration, cpu: Duration) -> Option<Duration> {
        if self
            .readings
            .back()
            .is_some_and(|&(at, was)| now < at || cpu < was)
        {
            // A clock or counter that went back: start over.
            self.readings.clear();
        }
        // Keep one reading at or before the window's start.
        let start = now.saturating_sub(self.period);
        while self.readings.len() > 1 && self.readings[1].0 <= start {
            self.readings.pop_front();
        }
        let spent = self.readings.front().and_then(|&(at, was)| {
            let span = now.saturating_sub(at);
            let spent = cpu.saturating_sub(was);
            if span.is_zero() {
                None
            } else if span > self.period {
                Some(spent.mul_f64(self.period.as_secs_f64() / span.as_secs_f64()))
            } else {
                Some(spent)
            }
        });
        // Readings closer than half a check (early wake-ups) add nothing to the window.
        let spaced = self
            .readings
            .back()
            .is_none_or(|&(at, _)| now.saturating_sub(at) >= self.check / 2);
        if spaced {
            if self.readings.len() >= self.max_readings {
                self.readings.pop_front();
            }
            self.readings.push_back((now, cpu));
        }
        spent
    }

    /// Whether it holds elastic work back now.
    pub(crate) fn is_on(&self) -> bool {
        self.engaged_at.is_some()
    }

    /// Times it engaged.
    pub(crate) fn brakes(&self) -> u64 {
        self.brakes
    }

    /// Time it held elastic work back, brakes that ended.
    pub(crate) fn total(&self) -> Duration {
        self.total
    }
}

#[cfg(test)]
mod tests {
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
}
