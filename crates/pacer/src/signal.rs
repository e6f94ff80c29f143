//! What the controller steers by beyond tokio's schedule latency (docs/design.md §5): the I/O
//! wake-up probe (a canary through the runtime's I/O driver) and the OS run-queue delay of the
//! runtime's threads, read once per governor tick and combined with the scheduling p99.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use elastic_cpu_probe::{
    IoProbe, IoProbeConfig, IoProbeError, ProbeConfig, RunQueueStats, ThreadRegistry, ThreadRole,
};
use tokio::runtime::Handle;

use crate::config::ElasticBuilder;

/// The I/O wake-up p99 is compared with this many times the target (it joins the signal
/// divided by it). Its path holds more than a task's schedule latency even on an idle runtime:
/// the canary wakes a parked worker out of the I/O driver's poll. Measured on the demo's 2-CPU
/// VM with no elastic work, one second at a time: I/O p99 213–295 µs against a scheduling p99
/// of 92–138 µs (2.1–2.8×); against the scheduling target itself the limit never left its
/// floor.
pub const IO_TARGET_FACTOR: u32 = 3;

/// The fewest canaries in the I/O probe's window for its p99 to join the signal: the p99 of
/// fewer is their largest, one stray wait. Measured: a fresh probe (each demo phase starts one)
/// with its period stretched to 5–10 ms on a lightly loaded runtime held one start-up canary of
/// 430–800 µs as its "p99" for the first second, which kept the limit at its floor that long.
/// Quiet (one canary per 50 ms) the default 2.5 s window holds 50: the I/O p99 is then in the
/// snapshot but not in the signal, which nothing steers by while quiet.
pub(crate) const IO_MIN_CANARIES: u64 = 100;

/// Whether a component of the signal is measured, and if not, why.
///
/// ```
/// use elastic_cpu_pacer::Availability;
/// assert!(Availability::On.is_on());
/// assert_eq!(Availability::Off.to_string(), "off (builder setting)");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Availability {
    /// Measured and in the signal.
    On,
    /// Turned off by a builder setting (or a manual clock: tests steer by hand).
    #[default]
    Off,
    /// Not started yet: no runtime attached.
    NotStarted,
    /// Not available here; why.
    Unavailable(String),
}

impl Availability {
    /// Whether it is measured.
    pub fn is_on(&self) -> bool {
        *self == Availability::On
    }
}

impl fmt::Display for Availability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Availability::On => f.write_str("on"),
            Availability::Off => f.write_str("off (builder setting)"),
            Availability::NotStarted => f.write_str("not started (no runtime attached)"),
            Availability::Unavailable(why) => write!(f, "unavailable: {why}"),
        }
    }
}

/// Which component of the signal was the largest at the last tick (what the controller stepped
/// on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SignalSource {
    /// No component had data.
    #[default]
    None,
    /// tokio's scheduling latency (the probe window's p99).
    Sched,
    /// The I/O wake-up probe's p99.
    Io,
    /// The OS run-queue delay of the runtime's threads.
    RunQueue,
    /// The cgroup was throttled: over the target whatever the probes saw.
    Throttled,
}

impl fmt::Display for SignalSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SignalSource::None => "none",
            SignalSource::Sched => "sched",
            SignalSource::Io => "io",
            SignalSource::RunQueue => "run-queue",
            SignalSource::Throttled => "throttled",
        })
    }
}

/// What the signal's extra components read at the last tick.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Reading {
    pub(crate) io_p99: Option<Duration>,
    /// Canaries in the window `io_p99` is over.
    pub(crate) io_count: u64,
    pub(crate) io: Availability,
    pub(crate) io_quiet: bool,
    pub(crate) io_period: Option<Duration>,
    pub(crate) run_queue_delay: Option<Duration>,
    pub(crate) run_queue_wait: Option<f64>,
    pub(crate) elastic_run_queue_wait: Option<f64>,
    pub(crate) run_queue: Availability,
}

/// The components and their windows; owned by the governor, ticked on its thread.
pub(crate) struct Signals {
    io_on: bool,
    io: Option<IoProbe>,
    io_state: Availability,
    run_queue: Option<RunQueueStats>,
    /// Foreground-serving threads' (run-queue wait, timeslices) per tick of the window.
    rq_window: VecDeque<(Duration, u64)>,
    reading: Reading,
}

impl Signals {
    /// `io` / `run_queue`: the builder's settings; both off on a manual clock.
    pub(crate) fn new(threads: &ThreadRegistry, io: bool, run_queue: bool) -> Signals {
        let rq_state = if run_queue {
            Availability::NotStarted
        } else {
            Availability::Off
        };
        Signals {
            io_on: io,
            io: None,
            io_state: if io {
                Availability::NotStarted
            } else {
                Availability::Off
            },
            run_queue: run_queue.then(|| RunQueueStats::new(threads)),
            rq_window: VecDeque::new(),
            reading: Reading {
                io: if io {
                    Availability::NotStarted
                } else {
                    Availability::Off
                },
                run_queue: rq_state,
                ..Reading::default()
            },
        }
    }

    /// No component: a manual clock (the tests' signal is the probe they drive).
    pub(crate) fn off() -> Signals {
        Signals::new(&ThreadRegistry::new(), false, false)
    }

    /// Start the I/O probe on `handle`'s runtime (replacing one started before), with the
    /// scheduling probe's tick and window. Off by setting: nothing.
    pub(crate) fn start_io(
        &mut self,
        handle: &Handle,
        probe: &ProbeConfig,
    ) -> Result<(), IoProbeError> {
        if !self.io_on {
            return Ok(());
        }
        self.io = None;
        let config = IoProbeConfig {
            probe: probe.clone(),
            ..IoProbeConfig::default()
        };
        match IoProbe::start(handle, config) {
            Ok(p) => {
                self.io = Some(p);
                self.io_state = Availability::On;
                Ok(())
            }
            Err(e) => {
                self.io_state = Availability::Unavailable(e.to_string());
                Err(e)
            }
        }
    }

    /// One tick: rotate the I/O probe's window, read the run-queue counters.
    pub(crate) fn tick(&mut self, intervals: usize) {
        let mut r = Reading {
            io: self.io_state.clone(),
            ..Reading::default()
        };
        if let Some(io) = &self.io {
            if io.is_running() {
                io.rotate();
                let window = io.window();
                r.io_p99 = window.p99;
                r.io_count = window.count;
            } else {
                r.io = Availability::Unavailable("the runtime has shut down".into());
            }
        }
        match &mut self.run_queue {
            None => r.run_queue = Availability::Off,
            Some(stats) => match stats.sample() {
                Ok(tick) => {
                    r.run_queue = Availability::On;
                    let fg = ThreadRole::serves_foreground;
                    r.run_queue_wait = tick.wait_fraction(fg);
                    r.elastic_run_queue_wait = tick.wait_fraction(|role| !fg(role));
                    let slices = tick
                        .threads
                        .iter()
                        .filter(|t| fg(t.role))
                        .map(|t| t.timeslices)
                        .sum();
                    self.rq_window.push_back((tick.total_wait(fg), slices));
                    while self.rq_window.len() > intervals.max(1) {
                        self.rq_window.pop_front();
                    }
                    r.run_queue_delay = window_delay(&self.rq_window);
                }
                Err(why) => {
                    r.run_queue = Availability::Unavailable(why.to_string());
                    self.rq_window.clear();
                }
            },
        }
        self.reading = r;
    }

    /// Quiet I/O canaries ([`IoProbe::set_quiet`]) while nothing steers by them (else their
    /// period follows the runtime's load, which the probe measures as it rotates).
    pub(crate) fn set_io_quiet(&mut self, quiet: bool) {
        if let Some(io) = &self.io {
            io.set_quiet(quiet);
            self.reading.io_quiet = quiet;
            self.reading.io_period = Some(io.period());
        }
    }

    /// Whether the I/O signal is on.
    pub(crate) fn io_on(&self) -> bool {
        self.io_on
    }

    /// The I/O probe's state into the reading, before the next tick (after a start).
    pub(crate) fn refresh_state(&mut self) {
        self.reading.io = self.io_state.clone();
    }

    /// What the last tick read.
    pub(crate) fn reading(&self) -> &Reading {
        &self.reading
    }
}

/// Mean run-queue wait per timeslice over the window: how long, on average, a runtime thread
/// that became runnable waited for a CPU. `None` with no timeslice in the window.
fn window_delay(window: &VecDeque<(Duration, u64)>) -> Option<Duration> {
    let (wait, slices) = window
        .iter()
        .fold((Duration::ZERO, 0u64), |(w, s), &(dw, ds)| (w + dw, s + ds));
    let slices = u32::try_from(slices).unwrap_or(u32::MAX);
    (slices > 0).then(|| wait / slices)
}

/// The signal the controller steps on: the largest of the scheduling p99, the I/O wake-up p99
/// over [`IO_TARGET_FACTOR`] (from a window of at least [`IO_MIN_CANARIES`]) and the run-queue
/// delay, against the one target; and which it was. Ties name the first.
pub(crate) fn combine(sched: Option<Duration>, r: &Reading) -> (Option<Duration>, SignalSource) {
    let io = r.io_p99.filter(|_| r.io_count >= IO_MIN_CANARIES);
    [
        (sched, SignalSource::Sched),
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

impl ElasticBuilder {
    /// Whether the I/O wake-up probe steers the limit too (default: on). A canary becomes
    /// readable through the runtime's I/O driver every 2 ms while the runtime is busy (a
    /// `timerfd` expiry on Linux, a datagram from a writer thread elsewhere; less often while it
    /// is not, see [`Snapshot::io_period`](crate::Snapshot::io_period)); a task on the runtime
    /// reads it; *due → read* goes into a window like the scheduling probe's, and its p99 over
    /// [`IO_TARGET_FACTOR`] joins the signal (the largest of the components, against the one
    /// target: the I/O p99 against 3 × the target). It sees what tokio's task clock cannot: a
    /// readable socket waiting for a worker to poll the I/O driver. Started when a runtime is
    /// attached through [`Elastic::runtime`](crate::Elastic::runtime) (which enables the
    /// runtime's I/O driver) or [`Elastic::start_io_probe`](crate::Elastic::start_io_probe). A
    /// manual clock turns it off. [`Snapshot::io_p99`](crate::Snapshot::io_p99) shows it.
    ///
    /// ```
    /// let elastic = elastic_cpu_pacer::Elastic::builder().io_signal(false).build().unwrap();
    /// assert!(!elastic.snapshot().io_probe.is_on());
    /// ```
    pub fn io_signal(mut self, on: bool) -> Self {
        self.io_signal = on;
        self
    }

    /// Whether the OS run-queue delay of the runtime's threads steers the limit too (default:
    /// on). Once per tick the governor reads the kernel's per-thread scheduler statistics
    /// (`/proc/self/task/<tid>/schedstat`, Linux) of the runtime's threads (registered by
    /// [`Elastic::instrument`](crate::Elastic::instrument)) and of threads in
    /// [`Pacer::pace_blocking`](crate::Pacer::pace_blocking); the mean wait for a CPU per
    /// timeslice of the threads serving the foreground, over the probe window, joins the
    /// signal. Unavailable off Linux (said in
    /// [`Snapshot::run_queue`](crate::Snapshot::run_queue)). A manual clock turns it off.
    ///
    /// ```
    /// let elastic = elastic_cpu_pacer::Elastic::builder().run_queue_signal(false).build().unwrap();
    /// assert!(!elastic.snapshot().run_queue.is_on());
    /// ```
    pub fn run_queue_signal(mut self, on: bool) -> Self {
        self.run_queue_signal = on;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Option<Duration> {
        Some(Duration::from_micros(n))
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
        assert_eq!(combine(us(200), &r), (us(300), SignalSource::Io));
        assert_eq!(combine(us(400), &r), (us(400), SignalSource::Sched));
        let rq = Reading {
            run_queue_delay: us(900),
            ..r
        };
        assert_eq!(combine(us(400), &rq), (us(900), SignalSource::RunQueue));
        // Missing components are left out; nothing at all is no data.
        assert_eq!(
            combine(None, &Reading::default()),
            (None, SignalSource::None)
        );
        assert_eq!(
            combine(us(10), &Reading::default()),
            (us(10), SignalSource::Sched)
        );
        // A tie names the scheduling latency.
        let tie = Reading {
            io_p99: us(30),
            io_count: IO_MIN_CANARIES,
            ..Reading::default()
        };
        assert_eq!(combine(us(10), &tie), (us(10), SignalSource::Sched));
    }

    #[test]
    fn an_io_p99_of_too_few_canaries_is_left_out() {
        let few = Reading {
            io_p99: us(900),
            io_count: IO_MIN_CANARIES - 1,
            ..Reading::default()
        };
        assert_eq!(combine(us(200), &few), (us(200), SignalSource::Sched));
        assert_eq!(combine(None, &few), (None, SignalSource::None));
        let enough = Reading {
            io_count: IO_MIN_CANARIES,
            ..few
        };
        assert_eq!(combine(us(200), &enough), (us(300), SignalSource::Io));
    }

    #[test]
    fn run_queue_delay_is_wait_per_timeslice_over_the_window() {
        let mut w = VecDeque::new();
        assert_eq!(window_delay(&w), None);
        w.push_back((Duration::ZERO, 0));
        assert_eq!(window_delay(&w), None);
        w.push_back((Duration::from_micros(900), 3));
        w.push_back((Duration::from_micros(100), 7));
        assert_eq!(window_delay(&w), us(100));
    }

    #[test]
    fn off_components_say_so() {
        let mut s = Signals::off();
        s.tick(10);
        assert_eq!(s.reading().io, Availability::Off);
        assert_eq!(s.reading().run_queue, Availability::Off);
        assert_eq!(s.reading().io_p99, None);
        let on = Signals::new(&ThreadRegistry::new(), true, true);
        assert_eq!(on.reading().io, Availability::NotStarted);
    }

    #[test]
    fn an_empty_registry_is_unavailable_not_zero() {
        let mut s = Signals::new(&ThreadRegistry::new(), false, true);
        s.tick(10);
        assert!(matches!(
            s.reading().run_queue,
            Availability::Unavailable(_)
        ));
        assert_eq!(s.reading().run_queue_delay, None);
    }
}
