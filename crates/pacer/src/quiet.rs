//! The foreground's latency without elastic work, and the target the governor measures from it
//! when the builder is given none.
//!
//! A fixed target is wrong in most places: a p99 of 1 ms lets elastic work double the latency of
//! a service whose requests wait 200 µs, and a tight one throttles elastic work for latency it
//! did not cause (a busy host, a noisy neighbour, a foreground burst). So the governor measures
//! each component of the signal *quiet*: over ticks in which no elastic work ran, or, while it
//! runs, over [`HOLD_TICKS`] ticks every [`EVERY_TICKS`] for which it holds elastic work back (a
//! perturbation: what changes is what elastic work costs). The baseline of a component is the
//! median of its last [`READINGS`] quiet readings, robust to one reading a machine pause spoiled.
//! The controller then steps on what elastic work adds over the baseline (the largest addition
//! among the components), against an allowance of [`ALLOWANCE_SHARE`] of the scheduling
//! latency's baseline, at least one poll quantum: a foreground task may wait behind about one
//! elastic poll at the p99, and longer only where the service's own waits are long.
//! Latency that is there without elastic work raises the baseline, not the signal.

use std::collections::VecDeque;
use std::time::Duration;

use crate::signal::{Reading, SignalSource};

/// Ticks between two quiet readings while elastic work runs (the first comes at once).
pub(crate) const EVERY_TICKS: u32 = 50;
/// Ticks elastic work is held back for one reading, and the intervals the reading covers.
pub(crate) const HOLD_TICKS: u32 = 2;
/// Quiet readings a baseline is the median of.
pub(crate) const READINGS: usize = 5;
/// The latency elastic work may add at the p99, as a share of the quiet baseline.
pub(crate) const ALLOWANCE_SHARE: f64 = 0.25;

/// Where the target the controllers step on comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TargetSource {
    /// [`ElasticBuilder::target_p99`](crate::ElasticBuilder::target_p99): the signal is the
    /// latency itself, against that target.
    Builder,
    /// Measured (the default): the signal is what elastic work adds over the quiet baseline,
    /// against an allowance of a quarter of the baseline, at least one poll quantum.
    Measured,
    /// No quiet reading yet: the latency itself, against
    /// [`DEFAULT_TARGET`](crate::settings::DEFAULT_TARGET).
    #[default]
    Default,
}

/// What the governor does this tick for the quiet readings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QuietStep {
    /// Nothing.
    Run,
    /// Hold elastic work back from now on.
    Hold,
    /// The last `n` intervals were quiet: read them (and release what was held).
    Read(usize),
}

/// One component's recent quiet readings, newest last.
#[derive(Clone, Debug, Default)]
struct Readings(VecDeque<Duration>);

impl Readings {
    fn push(&mut self, d: Option<Duration>) {
        if let Some(d) = d {
            self.0.push_back(d);
            while self.0.len() > READINGS {
                self.0.pop_front();
            }
        }
    }

    /// The median reading (the upper one of an even count).
    fn median(&self) -> Option<Duration> {
        let mut v: Vec<Duration> = self.0.iter().copied().collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied()
    }
}

/// The quiet readings and their schedule.
#[derive(Debug, Default)]
pub(crate) struct Quiet {
    /// Ticks since the last reading.
    since: u32,
    /// Ticks held so far (`None`: not holding).
    held: Option<u32>,
    sched: Readings,
    io: Readings,
    run_queue: Readings,
}

/// The signal's components quiet: the baselines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Baseline {
    pub(crate) sched: Option<Duration>,
    pub(crate) io: Option<Duration>,
    pub(crate) run_queue: Option<Duration>,
}

impl Quiet {
    /// One tick. `ran`: elastic work that holding would stop ran or waited in the tick just
    /// ended; `holdable`: some class can be held.
    pub(crate) fn tick(&mut self, ran: bool, holdable: bool) -> QuietStep {
        if let Some(held) = &mut self.held {
            *held += 1;
            if *held < HOLD_TICKS {
                return QuietStep::Run;
            }
            self.held = None;
            self.since = 0;
            return QuietStep::Read(HOLD_TICKS as usize);
        }
        if !ran {
            self.since = 0;
            return QuietStep::Read(1);
        }
        self.since += 1;
        let due = self.sched.0.is_empty() || self.since >= EVERY_TICKS;
        if due && holdable {
            self.held = Some(0);
            return QuietStep::Hold;
        }
        QuietStep::Run
    }

    /// Whether elastic work is held back for a reading now.
    pub(crate) fn holding(&self) -> bool {
        self.held.is_some()
    }

    /// A quiet reading of the components.
    pub(crate) fn record(&mut self, quiet: Baseline) {
        self.sched.push(quiet.sched);
        self.io.push(quiet.io);
        self.run_queue.push(quiet.run_queue);
    }

    /// Each component's baseline (`None` before its first quiet reading).
    pub(crate) fn baseline(&self) -> Baseline {
        Baseline {
            sched: self.sched.median(),
            io: self.io.median(),
            run_queue: self.run_queue.median(),
        }
    }
}

impl Baseline {
    /// Whether there is a baseline to measure from.
    pub(crate) fn is_known(&self) -> bool {
        self.sched.is_some() || self.run_queue.is_some()
    }

    /// What elastic work adds: the largest of each component over its baseline (a component
    /// without a baseline, or without a reading, is left out), and which component it was.
    /// `io_p99` counts only with `io_enough` canaries behind it.
    pub(crate) fn added(&self, r: &Reading, io_enough: bool) -> (Option<Duration>, SignalSource) {
        let over = |now: Option<Duration>, base: Option<Duration>| Some(now?.saturating_sub(base?));
        [
            (over(r.sched_p99, self.sched), SignalSource::Sched),
            (
                over(r.io_p99.filter(|_| io_enough), self.io),
                SignalSource::Io,
            ),
            (
                over(r.run_queue_delay, self.run_queue),
                SignalSource::RunQueue,
            ),
        ]
        .into_iter()
        .filter_map(|(v, s)| v.map(|v| (v, s)))
        .fold((None, SignalSource::None), |best, (v, s)| match best.0 {
            Some(b) if b >= v => best,
            _ => (Some(v), s),
        })
    }

    /// The latency elastic work may add at the p99: [`ALLOWANCE_SHARE`] of the scheduling
    /// latency's baseline (of the run-queue delay's without one), at least `quantum`. One
    /// allowance for every component: each is a wait a request pays, and what elastic work adds
    /// to any of them adds to the request.
    pub(crate) fn allowance(&self, quantum: Duration) -> Duration {
        let base = self.sched.or(self.run_queue).unwrap_or_default();
        base.mul_f64(ALLOWANCE_SHARE).max(quantum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Option<Duration> {
        Some(Duration::from_micros(n))
    }

    #[test]
    fn ticks_without_elastic_work_are_read_as_they_come() {
        let mut q = Quiet::default();
        assert_eq!(q.tick(false, true), QuietStep::Read(1));
        assert_eq!(q.tick(false, false), QuietStep::Read(1));
        assert!(!q.holding());
    }

    #[test]
    fn while_elastic_work_runs_it_is_held_at_once_then_every_so_often() {
        let mut q = Quiet::default();
        // No baseline yet: hold at the first tick with work.
        assert_eq!(q.tick(true, true), QuietStep::Hold);
        assert!(q.holding());
        assert_eq!(q.tick(true, true), QuietStep::Run);
        assert_eq!(q.tick(true, true), QuietStep::Read(HOLD_TICKS as usize));
        assert!(!q.holding());
        q.record(Baseline {
            sched: us(200),
            ..Baseline::default()
        });
        for _ in 1..EVERY_TICKS {
            assert_eq!(q.tick(true, true), QuietStep::Run);
        }
        assert_eq!(q.tick(true, true), QuietStep::Hold);
        // Nothing to hold (a gate alone): no hold, ever.
        let mut q = Quiet::default();
        for _ in 0..3 * EVERY_TICKS {
            assert_eq!(q.tick(true, false), QuietStep::Run);
        }
    }

    #[test]
    fn the_baseline_is_the_median_of_the_last_readings() {
        let mut q = Quiet::default();
        assert!(!q.baseline().is_known());
        // A machine pause spoiled one reading: the median ignores it.
        for us_ in [200, 210, 9_000, 190, 205] {
            q.record(Baseline {
                sched: us(us_),
                run_queue: None,
                io: us(us_ * 2),
            });
        }
        let b = q.baseline();
        assert_eq!(b.sched, us(205));
        assert_eq!(b.io, us(410));
        assert_eq!(b.run_queue, None);
        // Only the last READINGS count.
        for _ in 0..READINGS {
            q.record(Baseline {
                sched: us(500),
                ..Baseline::default()
            });
        }
        assert_eq!(q.baseline().sched, us(500));
        assert_eq!(q.baseline().io, us(410), "no new I/O reading: kept");
    }

    #[test]
    fn the_signal_is_the_largest_addition_over_the_baselines() {
        let b = Baseline {
            sched: us(200),
            io: us(600),
            run_queue: us(50),
        };
        let r = Reading {
            sched_p99: us(260),
            io_p99: us(700),
            run_queue_delay: us(40),
            ..Reading::default()
        };
        assert_eq!(b.added(&r, true), (us(100), SignalSource::Io));
        assert_eq!(b.added(&r, false), (us(60), SignalSource::Sched));
        // Under the baseline adds nothing; no reading, no component.
        let calm = Reading {
            sched_p99: us(150),
            ..Reading::default()
        };
        assert_eq!(b.added(&calm, true), (us(0), SignalSource::Sched));
        assert_eq!(
            Baseline::default().added(&r, true),
            (None, SignalSource::None)
        );
    }

    #[test]
    fn the_allowance_is_a_share_of_the_baseline_at_least_a_quantum() {
        let q = Duration::from_micros(50);
        let b = Baseline {
            sched: us(2000),
            io: us(6000),
            run_queue: None,
        };
        assert_eq!(b.allowance(q), Duration::from_micros(500));
        let rq_only = Baseline {
            run_queue: us(800),
            ..Baseline::default()
        };
        assert_eq!(rq_only.allowance(q), Duration::from_micros(200));
        let small = Baseline {
            sched: us(100),
            ..Baseline::default()
        };
        assert_eq!(small.allowance(q), q);
    }
}
