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
pub const ARMED_FOR: Duration = Duration::from_secs(60);

/// What the quota brake asks of the classes at one look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaChange {
    /// Nothing changes.
    Keep,
    /// The last period's spending reached the line: hold elastic work back.
    Engage,
    /// It fell under the line again after `lasted`: let elastic work go.
    Release {
        /// How long it held.
        lasted: Duration,
    },
}

/// The quota brake's state: the last period's readings and whether it holds elastic work.
#[derive(Debug)]
pub struct QuotaBrake {
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
    pub fn new(
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
    pub fn resize(&mut self, cpus: f64, period: Duration, parallelism: usize) -> bool {
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
    pub fn release(&mut self, now: Duration) -> Option<Duration> {
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
    pub fn arm(&mut self, now: Duration) {
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
    pub fn next_check(&self, now: Duration) -> Option<Duration> {
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
    pub fn step(&mut self, now: Duration, cpu: Option<Duration>) -> QuotaChange {
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
    pub fn is_on(&self) -> bool {
        self.engaged_at.is_some()
    }

    /// Times it engaged.
    pub fn brakes(&self) -> u64 {
        self.brakes
    }

    /// Time it held elastic work back, brakes that ended.
    pub fn total(&self) -> Duration {
        self.total
    }
}

#[cfg(test)]
mod tests;
