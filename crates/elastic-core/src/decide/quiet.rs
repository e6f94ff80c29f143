//! The foreground's latency without elastic work, and the target the governor measures from it
//! when the builder is given none.
//!
//! A fixed target is wrong in most places: a p99 of 1 ms lets elastic work double the latency of
//! a service whose requests wait 200 µs, and a tight one throttles elastic work for latency it
//! did not cause (a busy host, a noisy neighbour, a foreground burst). So the governor reads the
//! signal *quiet*: over ticks in which no elastic work ran, or, while it runs, over
//! [`HOLD_TICKS`] ticks at a time for which it holds elastic work back (a perturbation: what
//! changes is what elastic work costs). The holds come at once, then [`FIRST_GAP_TICKS`] apart,
//! the gap doubling up to [`EVERY_TICKS`]: the quiet window fills with readings taken beside the
//! elastic work within seconds (rather than keeping, say, a service's start-up), then a reading
//! every few seconds keeps it current at a small cost. While the signal stays at most
//! [`FAR_SHARE`] of its target, a reading decides nothing: the gaps are [`FAR_FACTOR`] times as
//! long, up to [`FAR_EVERY_TICKS`]. A hold costs elastic work its CPU and, on a host whose idle
//! cores wake slowly, the foreground the latency of idle cores; a baseline gone stale there only
//! lets the foreground wait as long as it did quiet before (plus half the allowance). Once the
//! signal nears its target, the next hold comes on the usual schedule.
//!
//! Quiet ticks are pooled into a quiet window as long as the running one (the probe keeps it for
//! the scheduling latency, this module for the run-queue delay), so the baseline's p99 is read from
//! as many samples as the p99 it is compared with: a p99 of a few short readings runs low, and the
//! difference would read as latency elastic work added. The controller steps on what elastic work
//! adds over the baseline (the larger addition of the scheduling p99 and the run-queue delay),
//! against an allowance of [`ALLOWANCE_SHARE`] of the scheduling latency's baseline, at least one
//! poll quantum: a foreground task may wait behind about one elastic poll at the p99, and longer
//! only where the service's own waits are long. Latency that is there without elastic work raises
//! the baseline, not the signal.

use std::collections::VecDeque;
use std::time::Duration;

use super::signal::{window_delay, RunQueueWaits, SignalReading, SignalSource, Waiters};

/// Ticks between the first two holds while elastic work runs (the first comes at once); the
/// gap doubles from hold to hold up to [`EVERY_TICKS`].
pub(crate) const FIRST_GAP_TICKS: u32 = 5;
/// Ticks between two holds at the most.
pub(crate) const EVERY_TICKS: u32 = 50;
/// The signal's share of its target at most which a reading decides nothing.
pub(crate) const FAR_SHARE: f64 = 0.5;
/// How much longer the gaps are while the signal stays at most [`FAR_SHARE`] of its target.
pub(crate) const FAR_FACTOR: u32 = 4;
/// Ticks between two holds at the most while the signal stays at most [`FAR_SHARE`] of its
/// target.
pub(crate) const FAR_EVERY_TICKS: u32 = 200;
/// Ticks elastic work is held back for one reading, and the intervals the reading covers.
pub(crate) const HOLD_TICKS: u32 = 2;
/// The latency elastic work may add to a component, as a share of its quiet baseline.
pub(crate) const ALLOWANCE_SHARE: f64 = 0.5;
/// The least the run-queue delay's allowance is: below it the mean per wake-up moves with
/// noise alone.
pub(crate) const RUN_QUEUE_FLOOR: Duration = Duration::from_micros(5);

/// Where the target the controllers step on comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TargetSource {
    /// Set by the builder: the signal is the latency itself, against that target.
    Builder,
    /// Measured (the default): the signal is what elastic work adds over the quiet baseline,
    /// against an allowance of half the baseline, at least one poll quantum.
    Measured,
    /// No quiet reading yet: the latency itself, against the default target.
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

/// The quiet readings and their schedule.
#[derive(Debug)]
pub(crate) struct Quiet {
    /// Ticks since the last reading.
    since: u32,
    /// Ticks held so far (`None`: not holding).
    held: Option<u32>,
    /// Holds so far.
    holds: u32,
    /// The signal stayed at most [`FAR_SHARE`] of its target since the last reading.
    far: bool,
    /// Readings so far.
    readings: u64,
    /// The scheduling p99 of the probe's quiet window at the last reading.
    sched: Option<Duration>,
    /// The quiet ticks' run-queue samples, newest last.
    run_queue: VecDeque<RunQueueWaits>,
    /// The window's length in ticks: the quiet samples kept.
    intervals: usize,
}

/// The signal's components quiet: the baselines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Baseline {
    /// tokio's scheduling p99, quiet.
    pub sched: Option<Duration>,
    /// The OS run-queue delay of the runtime's threads, quiet.
    pub run_queue: Option<Duration>,
    /// The same for the threads beside the runtime.
    pub bystanders: Option<Duration>,
}

/// What [`Baseline::steer`] read: the signal over the allowance and its source, the target
/// (the scheduling allowance) both are in units of, the bystanders' component alone, and the
/// largest of the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Steered {
    /// What the controllers compare with their targets (`None`: no component had data).
    pub value: Option<Duration>,
    /// Which component `value` is.
    pub source: SignalSource,
    /// The target `value` is compared with.
    pub target: Duration,
    /// The bystanders' component alone, in `value`'s units.
    pub bystanders: Option<Duration>,
    /// `value` without the bystanders' component.
    pub others: Option<Duration>,
}

impl Quiet {
    /// Quiet readings pooled over `intervals` ticks, the running window's length.
    pub(crate) fn new(intervals: usize) -> Quiet {
        Quiet {
            since: 0,
            held: None,
            holds: 0,
            far: false,
            readings: 0,
            sched: None,
            run_queue: VecDeque::new(),
            intervals: intervals.max(1),
        }
    }

    /// One tick. `ran`: elastic work that holding would stop ran or waited in the tick just
    /// ended; `holdable`: some class can be held; `far`: the last signal was at most
    /// [`FAR_SHARE`] of its target.
    pub(crate) fn tick(&mut self, ran: bool, holdable: bool, far: bool) -> QuietStep {
        if let Some(held) = &mut self.held {
            *held += 1;
            if *held < HOLD_TICKS {
                return QuietStep::Run;
            }
            self.held = None;
            self.since = 0;
            self.far = true;
            return QuietStep::Read(HOLD_TICKS as usize);
        }
        if !ran {
            self.since = 0;
            self.far = true;
            return QuietStep::Read(1);
        }
        self.far &= far;
        self.since += 1;
        let due = self.readings == 0 || self.since >= self.gap();
        if due && holdable {
            self.held = Some(0);
            self.holds = self.holds.saturating_add(1);
            return QuietStep::Hold;
        }
        QuietStep::Run
    }

    /// Ticks from the last reading to the next hold.
    fn gap(&self) -> u32 {
        let doublings = self.holds.saturating_sub(1).min(u32::BITS - 1);
        let (factor, most) = if self.far {
            (FAR_FACTOR, FAR_EVERY_TICKS)
        } else {
            (1, EVERY_TICKS)
        };
        FIRST_GAP_TICKS
            .saturating_mul(factor)
            .saturating_mul(1 << doublings)
            .min(most)
    }

    /// Whether elastic work is held back for a reading now.
    pub(crate) fn holding(&self) -> bool {
        self.held.is_some()
    }

    /// A quiet reading: the scheduling p99 of the probe's quiet window (the new ticks in it),
    /// and the new ticks' run-queue samples.
    pub(crate) fn record<'a>(
        &mut self,
        sched: Option<Duration>,
        run_queue: impl IntoIterator<Item = &'a RunQueueWaits>,
    ) {
        self.readings += 1;
        self.sched = sched;
        self.run_queue.extend(run_queue);
        while self.run_queue.len() > self.intervals {
            self.run_queue.pop_front();
        }
    }

    /// Each component's baseline (`None` before a quiet reading of it).
    pub(crate) fn baseline(&self) -> Baseline {
        Baseline {
            sched: self.sched,
            run_queue: window_delay(&self.run_queue, Waiters::Runtime),
            bystanders: window_delay(&self.run_queue, Waiters::Bystanders),
        }
    }
}

impl Baseline {
    /// Whether there is a baseline to measure from.
    pub fn is_known(&self) -> bool {
        self.sched.is_some() || self.run_queue.is_some() || self.bystanders.is_some()
    }

    /// What the controllers step on: what elastic work adds to each component over its
    /// baseline, against that component's allowance (`ALLOWANCE_SHARE` of its baseline, at
    /// least its floor: `quantum` for the scheduling p99, `RUN_QUEUE_FLOOR` for the run-queue
    /// delays of the runtime's threads and of the threads beside it), as the component furthest
    /// over its allowance. Returned in units of the
    /// scheduling allowance, which is the target returned beside it, with the bystanders'
    /// component on its own (over the target it holds the idle class to the own class's share).
    /// A component without a baseline, or without a reading, is left out.
    ///
    /// Each component has its own allowance because they differ in kind: the scheduling
    /// latency is a p99 of tokio's queue, the run-queue delay a mean of the OS's per wake-up,
    /// and a few microseconds more in that mean is a lot more at its tail.
    ///
    /// The threads beside the runtime (a client library's, another runtime's) are read apart:
    /// their requests wait behind the same cores, elastic work can lengthen their waits where
    /// the runtime's own stay short, and only what it adds over their quiet wait counts, so a
    /// busy thread of their own does not throttle it.
    ///
    /// The I/O wake-up p99 does not steer here: its canaries come at a period that follows the
    /// runtime's load, so a quiet window (the runtime less busy, the canaries sparser) and a
    /// running one do not sample alike, and with long elastic polls inside a CPU quota it rose
    /// where the foreground's own p99 did not (docs/results.md).
    pub fn steer(&self, r: &SignalReading, quantum: Duration) -> Steered {
        let target = Self::allowance(self.sched, quantum);
        let components = [
            (r.sched_p99, self.sched, quantum, SignalSource::Sched),
            (
                r.run_queue_delay,
                self.run_queue,
                RUN_QUEUE_FLOOR,
                SignalSource::RunQueue,
            ),
            (
                r.bystander_delay,
                self.bystanders,
                RUN_QUEUE_FLOOR,
                SignalSource::Bystanders,
            ),
        ];
        let mut steered = Steered {
            value: None,
            source: SignalSource::None,
            target,
            bystanders: None,
            others: None,
        };
        for (now, base, floor, source) in components {
            let (Some(now), Some(base)) = (now, base) else {
                continue;
            };
            let added = now.saturating_sub(base);
            let allowance = Self::allowance(Some(base), floor);
            // In units of the scheduling allowance; saturating (a reading of the OS's can be
            // anything, and `mul_f64` panics past `Duration::MAX`).
            let ratio = target.as_secs_f64() / allowance.as_secs_f64();
            let scaled =
                Duration::try_from_secs_f64(added.as_secs_f64() * ratio).unwrap_or(Duration::MAX);
            if source == SignalSource::Bystanders {
                steered.bystanders = Some(scaled);
            } else if steered.others.is_none_or(|o| scaled > o) {
                steered.others = Some(scaled);
            }
            if steered.value.is_none_or(|b| scaled > b) {
                steered.value = Some(scaled);
                steered.source = source;
            }
        }
        steered
    }

    /// The latency elastic work may add to a component whose baseline is `base`:
    /// [`ALLOWANCE_SHARE`] of it, at least `floor` (never zero).
    fn allowance(base: Option<Duration>, floor: Duration) -> Duration {
        base.unwrap_or_default()
            .mul_f64(ALLOWANCE_SHARE)
            .max(floor)
            .max(Duration::from_nanos(1))
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
        let mut q = Quiet::new(10);
        assert_eq!(q.tick(false, true, false), QuietStep::Read(1));
        assert_eq!(q.tick(false, false, false), QuietStep::Read(1));
        assert!(!q.holding());
    }

    #[test]
    fn while_elastic_work_runs_it_is_held_at_once_then_every_so_often() {
        let mut q = Quiet::new(10);
        // No reading yet: hold at the first tick with work.
        assert_eq!(q.tick(true, true, false), QuietStep::Hold);
        assert!(q.holding());
        assert_eq!(q.tick(true, true, false), QuietStep::Run);
        assert_eq!(
            q.tick(true, true, false),
            QuietStep::Read(HOLD_TICKS as usize)
        );
        assert!(!q.holding());
        q.record(us(200), &[]);
        // Then ever further apart: 5, 10, 20, 40 ticks, then every 50.
        for gap in [5, 10, 20, 40, 50, 50] {
            for _ in 1..gap {
                assert_eq!(q.tick(true, true, false), QuietStep::Run);
            }
            assert_eq!(
                q.tick(true, true, false),
                QuietStep::Hold,
                "after {gap} ticks"
            );
            assert_eq!(q.tick(true, true, false), QuietStep::Run);
            assert_eq!(
                q.tick(true, true, false),
                QuietStep::Read(HOLD_TICKS as usize)
            );
            q.record(us(200), &[]);
        }
        // Nothing to hold (a gate alone): no hold, ever.
        let mut q = Quiet::new(10);
        for _ in 0..3 * EVERY_TICKS {
            assert_eq!(q.tick(true, false, false), QuietStep::Run);
        }
    }

    #[test]
    fn while_the_signal_stays_far_under_its_target_the_holds_come_further_apart() {
        let mut q = Quiet::new(10);
        let hold_after = |q: &mut Quiet, far: &dyn Fn(u32) -> bool| {
            let mut n = 0;
            while q.tick(true, true, far(n)) != QuietStep::Hold {
                n += 1;
                assert!(n <= 10 * FAR_EVERY_TICKS, "no hold");
            }
            assert_eq!(q.tick(true, true, true), QuietStep::Run);
            assert_eq!(
                q.tick(true, true, true),
                QuietStep::Read(HOLD_TICKS as usize)
            );
            q.record(us(200), &[]);
            n + 1
        };
        assert_eq!(hold_after(&mut q, &|_| true), 1, "the first at once");
        // Far all along: 20, 40, 80, 160 ticks, then every 200.
        for gap in [20, 40, 80, 160, 200, 200] {
            assert_eq!(hold_after(&mut q, &|_| true), gap);
        }
        // The signal nears its target 30 ticks on: the usual gap (50) has not passed, so the
        // hold comes when it has.
        assert_eq!(hold_after(&mut q, &|n| n < 30), EVERY_TICKS);
        // Near it at the 120th tick, past the usual gap: the hold comes at once.
        assert_eq!(hold_after(&mut q, &|n| n < 119), 120);
    }

    #[test]
    fn the_run_queue_baseline_pools_the_quiet_ticks_of_one_window() {
        let mut q = Quiet::new(4);
        assert!(!q.baseline().is_known());
        let ms = Duration::from_millis;
        // The runtime's threads and the bystanders, whose waits are a tenth.
        let t = |wait: u64| RunQueueWaits {
            runtime: (ms(wait) * 10, 200),
            bystanders: (ms(wait), 200),
        };
        // Two readings of two ticks: 40 ms over 400 slices, then 120 ms over 400.
        q.record(us(300), &[t(1), t(3)]);
        assert_eq!(q.baseline().run_queue, us(100));
        assert_eq!(q.baseline().bystanders, us(10));
        q.record(us(250), &[t(5), t(7)]);
        let b = q.baseline();
        assert_eq!(b.run_queue, us(200), "pooled: 160 ms over 800 slices");
        assert_eq!(b.bystanders, us(20));
        assert_eq!(b.sched, us(250), "the probe's quiet window, as last read");
        // A window's worth only: the oldest ticks fall out.
        q.record(us(250), &[t(9), t(11)]);
        assert_eq!(q.baseline().run_queue, us(400), "320 ms over 800 slices");
        assert_eq!(q.baseline().bystanders, us(40));
        // A reading without run-queue samples keeps the pool.
        q.record(None, &[]);
        assert_eq!(q.baseline().run_queue, us(400));
        assert_eq!(q.baseline().sched, None);
        assert!(q.baseline().is_known());
    }

    #[test]
    fn each_component_is_judged_by_its_own_allowance_in_units_of_the_scheduling_one() {
        let q = Duration::from_micros(50);
        let b = Baseline {
            sched: us(400),
            run_queue: us(40),
            bystanders: us(20),
        };
        let sched_allowance = Duration::from_micros(400).mul_f64(ALLOWANCE_SHARE);
        let rq_allowance = Duration::from_micros(40)
            .mul_f64(ALLOWANCE_SHARE)
            .max(RUN_QUEUE_FLOOR);
        let r = SignalReading {
            sched_p99: us(460),
            run_queue_delay: us(30),
            ..SignalReading::default()
        };
        // The run-queue delay under its baseline adds nothing.
        assert_eq!(
            b.steer(&r, q),
            Steered {
                value: us(60),
                source: SignalSource::Sched,
                target: sched_allowance,
                bystanders: None,
                others: us(60),
            }
        );
        // The run-queue delay as far over its allowance as the scheduling p99 would be at 1.5
        // of its own: it steers, scaled.
        let rq = SignalReading {
            run_queue_delay: Some(Duration::from_micros(40) + rq_allowance.mul_f64(1.5)),
            ..r
        };
        let Steered {
            value,
            source,
            target,
            ..
        } = b.steer(&rq, q);
        assert_eq!((source, target), (SignalSource::RunQueue, sched_allowance));
        let want = sched_allowance.mul_f64(1.5);
        assert!(
            value.unwrap().abs_diff(want) <= Duration::from_nanos(10),
            "{value:?}"
        );
        // The bystanders' delay twice its allowance (half of their 20 µs) over their
        // baseline: they steer.
        let by = SignalReading {
            bystander_delay: Some(Duration::from_micros(20 + 2 * 10)),
            ..rq
        };
        let steered = b.steer(&by, q);
        assert_eq!(steered.source, SignalSource::Bystanders);
        assert!(steered.value.unwrap().abs_diff(sched_allowance * 2) <= Duration::from_nanos(10));
        assert_eq!(steered.bystanders, steered.value);
        // The others, without them: the run-queue delay's 1.5 allowances.
        assert!(steered.others.unwrap().abs_diff(want) <= Duration::from_nanos(10));
        // Under the run-queue delay they no longer steer, but are still read apart.
        let under = SignalReading {
            bystander_delay: Some(Duration::from_micros(20 + 10)),
            ..by
        };
        let steered = b.steer(&under, q);
        assert_eq!(steered.source, SignalSource::RunQueue);
        assert!(steered.bystanders.unwrap().abs_diff(sched_allowance) <= Duration::from_nanos(10));
        // No reading, no component; no baseline, nothing to steer by.
        let sched_only = SignalReading {
            sched_p99: us(300),
            ..SignalReading::default()
        };
        assert_eq!(b.steer(&sched_only, q).value, us(0));
        assert_eq!(b.steer(&sched_only, q).bystanders, None);
        assert_eq!(
            Baseline::default().steer(&r, q),
            Steered {
                value: None,
                source: SignalSource::None,
                target: q,
                bystanders: None,
                others: None,
            }
        );
    }

    #[test]
    fn a_reading_past_any_duration_saturates() {
        let b = Baseline {
            sched: us(400),
            run_queue: us(1),
            bystanders: None,
        };
        // What the OS said the run queue waited: scaled up past `Duration::MAX`.
        let r = SignalReading {
            sched_p99: us(400),
            run_queue_delay: Some(Duration::MAX),
            ..SignalReading::default()
        };
        let steered = b.steer(&r, Duration::from_micros(50));
        assert_eq!(
            (steered.value, steered.source),
            (Some(Duration::MAX), SignalSource::RunQueue)
        );
    }

    #[test]
    fn an_allowance_is_a_share_of_the_baseline_at_least_its_floor() {
        let q = Duration::from_micros(50);
        assert_eq!(
            Baseline::allowance(us(2000), q),
            Duration::from_micros(2000).mul_f64(ALLOWANCE_SHARE)
        );
        assert_eq!(Baseline::allowance(us(40), q), q);
        assert_eq!(Baseline::allowance(None, q), q);
        assert_eq!(
            Baseline::allowance(us(2), Duration::ZERO),
            Duration::from_micros(1)
        );
        assert_eq!(
            Baseline::allowance(Some(Duration::ZERO), Duration::ZERO),
            Duration::from_nanos(1)
        );
    }
}
