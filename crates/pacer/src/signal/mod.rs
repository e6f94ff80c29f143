//! The signal the controllers step on: tokio's scheduling p99, the I/O wake-up p99 (a canary
//! through the runtime's I/O driver), the OS run-queue delay of the runtime's threads and the
//! cgroup's throttling, read once per governor tick and combined into one figure.

pub(crate) mod readings;
mod throttle;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;

use elastic_cpu_core::decide::{window_delay, RunQueueWaits, SignalSource, Waiters};

use self::readings::{Availability, Sources};
use self::throttle::ThrottleWatch;

/// The I/O wake-up p99 is compared with this many times the target (it joins the signal
/// divided by it). Its path holds more than a task's schedule latency even on an idle runtime:
/// the canary wakes a parked worker out of the I/O driver's poll, which against the scheduling
/// target alone would hold the share at its floor.
pub const IO_TARGET_FACTOR: u32 = 3;

/// The fewest canaries in the I/O probe's window for its p99 to join the signal: the p99 of
/// fewer is their largest, one stray wait (a fresh probe's start-up wake-ups, say).
///
/// The probe's period follows the runtime's load (2 ms ÷ busy², at most 20 ms), so a window of
/// `w` holds about `w × busy² / 2 ms` canaries, and at least `w / 20 ms`: with the default
/// profile's 1 s window the I/O p99 steers from about 45 % busy up (50 canaries at the 20 ms
/// cap), with CockroachDB's 2.5 s window at any load (125 at the cap). That is intended: a
/// runtime under 45 % busy has a worker parked in the I/O driver most of the time, so readiness
/// is not held up behind elastic polls, and the scheduling and run-queue components speak for
/// the foreground. Quiet (one canary per 50 ms, while nothing is paced) a 1 s or 2.5 s window
/// never steers, and nothing steers by it then.
pub(crate) const IO_MIN_CANARIES: u64 = 100;

/// The signal at one tick: the one figure the controllers step on, which component it was, and
/// every component as read.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Signal {
    /// What the controllers compare with their targets (`Duration::MAX` while throttled;
    /// `None`: no component had data).
    pub(crate) value: Option<Duration>,
    pub(crate) source: SignalSource,
    /// With a measured target, the bystanders' component in `value`'s units, whether it is the
    /// largest or not: the idle class steps on it at the allowance, and over it is held to the
    /// own class's share.
    pub(crate) bystanders: Option<Duration>,
    /// `value` without the bystanders' component: what the classes that split the elastic share
    /// step on while the idle class answers for the bystanders' waits.
    pub(crate) others: Option<Duration>,
    /// The components.
    pub(crate) reading: Reading,
}

/// Every component of the signal as read at one tick.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Reading {
    pub(crate) sched_p99: Option<Duration>,
    pub(crate) io_p99: Option<Duration>,
    /// Canaries in the window `io_p99` is over.
    pub(crate) io_count: u64,
    pub(crate) io: Availability,
    pub(crate) io_quiet: bool,
    pub(crate) io_period: Option<Duration>,
    pub(crate) run_queue_delay: Option<Duration>,
    /// The same for the threads beside the runtime.
    pub(crate) bystander_delay: Option<Duration>,
    pub(crate) run_queue_wait: Option<f64>,
    pub(crate) elastic_run_queue_wait: Option<f64>,
    pub(crate) run_queue: Availability,
    /// The cgroup was throttled within the last window.
    pub(crate) throttled: bool,
}

/// The signal's state between ticks: the throttling watch and the run-queue window. The readers
/// themselves are the governor's [`Sources`].
pub(crate) struct SignalStage {
    /// `None`: the throttling input is off.
    throttle: Option<ThrottleWatch>,
    /// The run-queue waits per tick of the window.
    rq_window: VecDeque<RunQueueWaits>,
}

impl SignalStage {
    pub(crate) fn new(throttling: bool) -> SignalStage {
        SignalStage {
            throttle: throttling.then(ThrottleWatch::default),
            rq_window: VecDeque::new(),
        }
    }

    /// Read every component for one tick, over a window of `intervals` ticks, and combine them.
    pub(crate) fn read(
        &mut self,
        sources: &mut Sources,
        sched_p99: Option<Duration>,
        intervals: usize,
    ) -> Signal {
        let mut r = Reading {
            sched_p99,
            ..Reading::default()
        };
        if let Some(io) = sources.io.read() {
            r.io_p99 = io.p99;
            r.io_count = io.count;
        }
        r.io = sources.io.availability();
        match &mut sources.run_queue {
            None => r.run_queue = Availability::Off,
            Some(rq) => match rq.sample() {
                Ok(tick) => {
                    r.run_queue = Availability::On;
                    r.run_queue_wait = tick.foreground_fraction;
                    r.elastic_run_queue_wait = tick.elastic_fraction;
                    self.rq_window.push_back(tick.waits);
                    while self.rq_window.len() > intervals.max(1) {
                        self.rq_window.pop_front();
                    }
                    r.run_queue_delay = window_delay(&self.rq_window, Waiters::Runtime);
                    r.bystander_delay = window_delay(&self.rq_window, Waiters::Bystanders);
                }
                Err(why) => {
                    r.run_queue = Availability::Unavailable(why);
                    self.rq_window.clear();
                }
            },
        }
        if let Some(watch) = &mut self.throttle {
            let now = watch.dir().and_then(|dir| sources.cgroup.throttling(dir));
            r.throttled = watch.step(now, intervals);
        }
        // A throttled cgroup stopped the foreground too: over the target, whatever was read.
        let (value, source) = if r.throttled {
            (Some(Duration::MAX), SignalSource::Throttled)
        } else {
            combine(&r)
        };
        Signal {
            value,
            source,
            bystanders: None,
            others: value,
            reading: r,
        }
    }

    /// Quiet I/O canaries while nothing steers by the signal (else their period follows the
    /// runtime's load), and say so in `r`.
    pub(crate) fn set_io_quiet(sources: &mut Sources, quiet: bool, r: &mut Reading) {
        if let Some(period) = sources.io.set_quiet(quiet) {
            r.io_quiet = quiet;
            r.io_period = Some(period);
        }
    }

    /// Watch the cgroup in `dir` for throttling from now on (if the input is on).
    pub(crate) fn watch_throttling(&mut self, sources: &Sources, dir: PathBuf) {
        if let Some(watch) = &mut self.throttle {
            let now = sources.cgroup.throttling(&dir);
            watch.watch(dir, now);
        }
    }

    /// The run-queue samples of the last `n` ticks, oldest first.
    pub(crate) fn recent_run_queue(&self, n: usize) -> impl Iterator<Item = &RunQueueWaits> {
        let skip = self.rq_window.len().saturating_sub(n);
        self.rq_window.iter().skip(skip)
    }

    /// Whether the throttling input is on.
    pub(crate) fn watches_throttling(&self) -> bool {
        self.throttle.is_some()
    }

    /// Throttled periods seen since the watch started.
    pub(crate) fn throttled_periods(&self) -> u64 {
        self.throttle
            .as_ref()
            .map_or(0, ThrottleWatch::throttled_periods)
    }
}

/// The signal the controllers step on: the largest of the scheduling p99, the I/O wake-up p99
/// over [`IO_TARGET_FACTOR`] (from a window of at least [`IO_MIN_CANARIES`]) and the run-queue
/// delay, against the one target; and which it was. Ties name the first.
pub(crate) fn combine(r: &Reading) -> (Option<Duration>, SignalSource) {
    let io = r.io_p99.filter(|_| r.io_count >= IO_MIN_CANARIES);
    [
        (r.sched_p99, SignalSource::Sched),
        (io.map(|p| p / IO_TARGET_FACTOR), SignalSource::Io),
        (r.run_queue_delay, SignalSource::RunQueue),
    ]
    .into_iter()
    .filter_map(|(v, s)| v.map(|v| (v, s)))
    .fold((None, SignalSource::None), |best, (v, s)| match best.0 {
        Some(b) if b >= v => best,
        _ => (Some(v), s),
    })
}

#[cfg(test)]
mod tests {
    use elastic_cpu_probe::IoProbeConfig;

    use super::*;
    use crate::settings::Profile;

    fn us(n: u64) -> Option<Duration> {
        Some(Duration::from_micros(n))
    }

    fn with_sched(sched: Option<Duration>, r: &Reading) -> (Option<Duration>, SignalSource) {
        combine(&Reading {
            sched_p99: sched,
            ..r.clone()
        })
    }

    #[test]
    fn the_largest_component_wins() {
        // The I/O p99 counts over its factor: 900 µs of I/O wake-up weighs as 300 µs.
        let r = Reading {
            io_p99: us(900),
            io_count: IO_MIN_CANARIES,
            run_queue_delay: us(50),
            ..Reading::default()
        };
        assert_eq!(IO_TARGET_FACTOR, 3);
        assert_eq!(with_sched(us(200), &r), (us(300), SignalSource::Io));
        assert_eq!(with_sched(us(400), &r), (us(400), SignalSource::Sched));
        let rq = Reading {
            run_queue_delay: us(900),
            ..r
        };
        assert_eq!(with_sched(us(400), &rq), (us(900), SignalSource::RunQueue));
        // Missing components are left out; nothing at all is no data.
        assert_eq!(
            with_sched(None, &Reading::default()),
            (None, SignalSource::None)
        );
        assert_eq!(
            with_sched(us(10), &Reading::default()),
            (us(10), SignalSource::Sched)
        );
        // A tie names the scheduling latency.
        let tie = Reading {
            io_p99: us(30),
            io_count: IO_MIN_CANARIES,
            ..Reading::default()
        };
        assert_eq!(with_sched(us(10), &tie), (us(10), SignalSource::Sched));
    }

    #[test]
    fn an_io_p99_of_too_few_canaries_is_left_out() {
        let few = Reading {
            io_p99: us(900),
            io_count: IO_MIN_CANARIES - 1,
            ..Reading::default()
        };
        assert_eq!(with_sched(us(200), &few), (us(200), SignalSource::Sched));
        assert_eq!(with_sched(None, &few), (None, SignalSource::None));
        let enough = Reading {
            io_count: IO_MIN_CANARIES,
            ..few
        };
        assert_eq!(with_sched(us(200), &enough), (us(300), SignalSource::Io));
    }

    /// Canaries a full window holds at the period the I/O probe uses at `busy`.
    fn canaries(window: Duration, quiet: bool, busy: f64) -> u64 {
        let period = IoProbeConfig::default().period_for(quiet, busy);
        (window.as_nanos() / period.as_nanos()) as u64
    }

    #[test]
    fn the_io_p99_steers_from_the_load_its_window_holds_enough_canaries_at() {
        // The rule IO_MIN_CANARIES documents, against the probe's real periods.
        let default = Profile::Default.steps().window;
        assert!(canaries(default, false, 0.40) < IO_MIN_CANARIES);
        assert!(canaries(default, false, 0.46) >= IO_MIN_CANARIES);
        assert!(canaries(default, false, 1.0) >= 5 * IO_MIN_CANARIES);
        assert!(canaries(default, false, 0.0) < IO_MIN_CANARIES);
        // CockroachDB's window holds enough even at the stretch's cap.
        let cockroach = Profile::Cockroach.steps().window;
        assert!(canaries(cockroach, false, 0.0) >= IO_MIN_CANARIES);
        // Quiet, neither ever does.
        assert!(canaries(default, true, 1.0) < IO_MIN_CANARIES);
        assert!(canaries(cockroach, true, 1.0) < IO_MIN_CANARIES);
    }

    #[test]
    fn run_queue_delay_is_wait_per_timeslice_over_the_window() {
        let tick = |runtime, bystanders| RunQueueWaits {
            runtime,
            bystanders,
        };
        let mut w = VecDeque::new();
        assert_eq!(window_delay(&w, Waiters::Runtime), None);
        w.push_back(tick((Duration::ZERO, 0), (Duration::ZERO, 0)));
        assert_eq!(window_delay(&w, Waiters::Runtime), None);
        w.push_back(tick((Duration::from_micros(900), 30), (Duration::ZERO, 0)));
        w.push_back(tick(
            (Duration::from_micros(100), 70),
            (Duration::from_micros(60), 99),
        ));
        assert_eq!(window_delay(&w, Waiters::Runtime), us(10));
        // 99 timeslices: too few to read a mean from.
        assert_eq!(window_delay(&w, Waiters::Bystanders), None);
        w.push_back(tick((Duration::ZERO, 0), (Duration::from_micros(40), 1)));
        assert_eq!(
            window_delay(&w, Waiters::Bystanders),
            Some(Duration::from_nanos(1000))
        );
    }
}
