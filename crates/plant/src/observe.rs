//! The boundary to the steering: what the plant measured, what the steering commands.

use std::collections::VecDeque;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::config::Quota;

/// The most a latency histogram holds: 100 s, in nanoseconds (longer readings saturate).
const HIST_MAX: u64 = 100_000_000_000;

/// An empty histogram of nanoseconds, two significant digits.
pub(crate) fn histogram() -> Histogram<u64> {
    // The bounds are constants the constructor accepts; a refusal would be a bug here.
    Histogram::new_with_bounds(1, HIST_MAX, 2).expect("valid histogram bounds")
}

/// The 99th percentile of `h`, `None` when empty.
pub(crate) fn p99(h: &Histogram<u64>) -> Option<Duration> {
    (!h.is_empty()).then(|| Duration::from_nanos(h.value_at_quantile(0.99)))
}

/// One tick's readings, kept for reading back over the last n ticks.
#[derive(Debug, Clone)]
pub(crate) struct TickSamples {
    /// Foreground scheduling latencies (ns) of polls that started in the tick.
    pub(crate) sched: Histogram<u64>,
    /// The same for every poll on the runtime, elastic ones too (as the probe's hooks see).
    pub(crate) all: Histogram<u64>,
    /// Run-queue delay of the runtime's workers: total ns, and times they got a CPU.
    pub(crate) workers: (u64, u64),
    /// The same for bystander (neighbour) threads.
    pub(crate) bystanders: (u64, u64),
}

impl TickSamples {
    pub(crate) fn new() -> Self {
        Self {
            sched: histogram(),
            all: histogram(),
            workers: (0, 0),
            bystanders: (0, 0),
        }
    }

    pub(crate) fn reset(&mut self) {
        self.sched.reset();
        self.all.reset();
        self.workers = (0, 0);
        self.bystanders = (0, 0);
    }
}

/// The last ticks' readings, newest at the back.
#[derive(Debug)]
pub(crate) struct History {
    pub(crate) ticks: VecDeque<TickSamples>,
    pub(crate) cap: usize,
}

impl History {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            ticks: VecDeque::with_capacity(cap),
            cap,
        }
    }

    /// Keep `t` as the newest tick (recycling the oldest slot when full).
    pub(crate) fn push(&mut self, t: &TickSamples) {
        if self.ticks.len() == self.cap {
            if let Some(mut old) = self.ticks.pop_front() {
                old.sched.reset();
                old.all.reset();
                // Same bounds: adding cannot fail.
                let _ = old.sched.add(&t.sched);
                let _ = old.all.add(&t.all);
                old.workers = t.workers;
                old.bystanders = t.bystanders;
                self.ticks.push_back(old);
                return;
            }
        }
        self.ticks.push_back(t.clone());
    }

    fn last(&self, n: usize) -> impl Iterator<Item = &TickSamples> {
        self.ticks.iter().skip(self.ticks.len().saturating_sub(n))
    }

    fn p99(&self, n: usize, pick: fn(&TickSamples) -> &Histogram<u64>) -> Option<Duration> {
        let mut all = histogram();
        for t in self.last(n) {
            let _ = all.add(pick(t));
        }
        p99(&all)
    }

    /// All polls' p99 over the last `n` ticks without the tick whose own p99 was highest, from
    /// [`TRIM_FROM`] ticks with polls (else untrimmed).
    fn trimmed_p99(&self, n: usize) -> Option<Duration> {
        let ticks: Vec<&TickSamples> = self.last(n).collect();
        if ticks.iter().filter(|t| !t.all.is_empty()).count() < TRIM_FROM {
            return self.p99(n, |t| &t.all);
        }
        let own = |t: &&TickSamples| (!t.all.is_empty()).then(|| t.all.value_at_quantile(0.99));
        let worst = (0..ticks.len()).max_by_key(|&i| own(&ticks[i]));
        let mut all = histogram();
        for (i, t) in ticks.iter().enumerate() {
            if Some(i) != worst {
                let _ = all.add(&t.all);
            }
        }
        p99(&all)
    }

    fn mean_delay(&self, n: usize, pick: fn(&TickSamples) -> (u64, u64)) -> Option<Duration> {
        let (sum, count) = self.last(n).map(pick).fold((0u64, 0u64), |a, b| {
            (a.0.saturating_add(b.0), a.1.saturating_add(b.1))
        });
        (count > 0).then(|| Duration::from_nanos(sum / count))
    }
}

/// One class's readings at a tick.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassObservation {
    /// CPU time charged to the class since the start (its polls' CPU time).
    pub cpu: Duration,
    /// Work waited for a grant since the last tick (the queue's `tick()`).
    pub waited: bool,
    /// Admissions waiting for a grant now.
    pub waiters: usize,
    /// Grants handed out and not yet settled now.
    pub holders: usize,
    /// The bucket's balance is above zero.
    pub has_tokens: bool,
    /// Most of its CPU time over the probe's window came in long polls (at least
    /// [`LONG_POLL`]).
    pub long_polls: bool,
    /// The bucket's token rate now (CPU nanoseconds per second).
    pub rate: u64,
}

/// The fewest ticks with polls a p99 is trimmed from (as the probe's window).
const TRIM_FROM: usize = 3;

/// A poll this long or longer is a long poll: 4 × a 500 µs quantum.
pub const LONG_POLL: Duration = Duration::from_millis(2);

/// What the plant measured at a tick; the steering's input.
#[derive(Debug)]
pub struct Observation<'a> {
    /// The plant's time (the manual clock).
    pub now: Duration,
    /// The time since the last tick (the tick length).
    pub period: Duration,
    /// The CPUs the process sees.
    pub cpus: f64,
    /// The CFS quota, if any.
    pub quota: Option<Quota>,
    /// Periods throttled since the start.
    pub throttled_periods: u64,
    /// Some period was throttled since the last tick.
    pub throttled: bool,
    /// The process's CPU time since the start (workers and pool threads).
    pub process_cpu: Duration,
    /// Foreground arrivals per second over the last tick.
    pub arrivals_per_sec: f64,
    /// The foreground's scheduling-latency p99 over the probe's window (`None`: no poll).
    pub sched_p99: Option<Duration>,
    /// The mean OS run-queue delay per time a runtime worker got a CPU, over the window, as
    /// schedstat's `run_delay / pcount` (time throttled included). `None`: no worker got a
    /// CPU in the window (none woke, or they ran throughout).
    pub run_queue_delay: Option<Duration>,
    /// The same for bystander threads (the neighbour's), when there are any.
    pub bystander_delay: Option<Duration>,
    /// Per class, in the configuration's order.
    pub classes: Vec<ClassObservation>,
    pub(crate) history: &'a History,
}

impl Observation<'_> {
    /// The foreground's scheduling-latency p99 over the last `n` ticks (as many as are kept).
    pub fn sched_p99_over(&self, n: usize) -> Option<Duration> {
        self.history.p99(n, |t| &t.sched)
    }

    /// The scheduling-latency p99 of every poll on the runtime (elastic polls' waits too, as
    /// the probe's hooks record them; the pool's are not) over the last `n` ticks.
    pub fn all_polls_p99_over(&self, n: usize) -> Option<Duration> {
        self.history.p99(n, |t| &t.all)
    }

    /// [`all_polls_p99_over`](Self::all_polls_p99_over) without the tick whose own p99 was
    /// highest, from 3 ticks with polls (else untrimmed): the probe's `queue_p99_trimmed`,
    /// which a one-tick wait (a host pause) moves little.
    pub fn trimmed_p99_over(&self, n: usize) -> Option<Duration> {
        self.history.trimmed_p99(n)
    }

    /// The workers' mean run-queue delay per time on a CPU over the last `n` ticks.
    pub fn run_queue_delay_over(&self, n: usize) -> Option<Duration> {
        self.history.mean_delay(n, |t| t.workers)
    }

    /// The bystanders' mean run-queue delay per time on a CPU over the last `n` ticks.
    pub fn bystander_delay_over(&self, n: usize) -> Option<Duration> {
        self.history.mean_delay(n, |t| t.bystanders)
    }

    /// Ticks of history [`sched_p99_over`](Self::sched_p99_over) and the others can read.
    pub fn history_len(&self) -> usize {
        self.history.ticks.len()
    }

    /// The last tick's run-queue waits, as schedstat sums them: (the runtime workers' wait,
    /// their timeslices) and the same for the bystander threads.
    pub fn run_queue_waits(&self) -> ((Duration, u64), (Duration, u64)) {
        let Some(t) = self.history.ticks.back() else {
            return ((Duration::ZERO, 0), (Duration::ZERO, 0));
        };
        let pair = |(sum, count): (u64, u64)| (Duration::from_nanos(sum), count);
        (pair(t.workers), pair(t.bystanders))
    }
}

/// What the plant measured between ticks, for a brake.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FastObservation {
    /// The plant's time.
    pub now: Duration,
    /// The process's CPU time since the start.
    pub process_cpu: Duration,
    /// How long the oldest foreground task in the run queue has waited (zero: none waits).
    pub backlog_age: Duration,
}

/// One class's command: the steering's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassCommand {
    /// The bucket's token rate, CPU nanoseconds per second.
    pub rate: u64,
    /// At most this many grants at once (`None`: no cap).
    pub max_holders: Option<usize>,
    /// Hold back new grants (the queue's pause); grants out stay out, unless `braking`.
    pub held: bool,
    /// With `held`: every holder gives its grant back at the end of its poll (the pacer's
    /// brakes and quiet readings; a pause by hand lets holders run their slices out).
    pub braking: bool,
    /// Set the rate without moving the balance (the queue's `retune`), rather than `set_rate`.
    pub retune: bool,
}

impl ClassCommand {
    /// `rate` with no holder cap, not held, through `set_rate`.
    pub fn rate(rate: u64) -> Self {
        Self {
            rate,
            max_holders: None,
            held: false,
            braking: false,
            retune: false,
        }
    }
}

/// What steers the plant: the decision step behind an adapter, or a fixed share.
pub trait Steering {
    /// One tick: what the plant measured since the last; returns each class's command, in
    /// the configuration's order (a class without one keeps its last).
    fn tick(&mut self, obs: &Observation<'_>) -> Vec<ClassCommand>;

    /// A finer look between ticks (every `fast_interval`) for brakes: `Some` commands apply
    /// at once. The default does nothing.
    fn between(&mut self, _now: Duration, _obs: &FastObservation) -> Option<Vec<ClassCommand>> {
        None
    }
}

impl<S: Steering + ?Sized> Steering for &mut S {
    fn tick(&mut self, obs: &Observation<'_>) -> Vec<ClassCommand> {
        (**self).tick(obs)
    }

    fn between(&mut self, now: Duration, obs: &FastObservation) -> Option<Vec<ClassCommand>> {
        (**self).between(now, obs)
    }
}

impl<S: Steering + ?Sized> Steering for Box<S> {
    fn tick(&mut self, obs: &Observation<'_>) -> Vec<ClassCommand> {
        (**self).tick(obs)
    }

    fn between(&mut self, now: Duration, obs: &FastObservation) -> Option<Vec<ClassCommand>> {
        (**self).between(now, obs)
    }
}

/// A fixed share per class, whatever the plant measures: a baseline for the physics.
///
/// ```
/// use elastic_cpu_plant::{StaticShare, Steering};
///
/// // Half of 2 CPUs for the one class: 1 CPU-second per second.
/// let s = StaticShare::of_cpus(&[0.5], 2.0);
/// assert_eq!(s.commands()[0].rate, 1_000_000_000);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct StaticShare {
    commands: Vec<ClassCommand>,
}

impl StaticShare {
    /// These commands at every tick.
    pub fn new(commands: Vec<ClassCommand>) -> Self {
        Self { commands }
    }

    /// Each class at `share × cpus` CPUs (no holder cap); a share that is not finite or
    /// below zero is 0.
    pub fn of_cpus(shares: &[f64], cpus: f64) -> Self {
        let commands = shares
            .iter()
            .map(|&s| {
                let cpus = if (s * cpus).is_finite() {
                    (s * cpus).max(0.0)
                } else {
                    0.0
                };
                ClassCommand::rate((cpus * 1e9) as u64)
            })
            .collect();
        Self { commands }
    }

    /// The commands given at every tick.
    pub fn commands(&self) -> &[ClassCommand] {
        &self.commands
    }
}

impl Steering for StaticShare {
    fn tick(&mut self, _obs: &Observation<'_>) -> Vec<ClassCommand> {
        self.commands.clone()
    }
}
