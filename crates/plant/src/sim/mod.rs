//! The physics, as discrete events on the manual clock: the OS shares the CPUs among threads,
//! the runtime's workers poll tasks from their queues as tokio's do, elastic tasks loop on
//! real grants.
//!
//! The OS: threads in three classes (the idle-priority pool, normal threads, the real-time
//! client). A ready thread takes a free CPU, the highest class first, or the CPU of a running
//! thread of a lower class; threads of one class share CPUs by timeslices (real-time ones run
//! until they block). A CPU idle for at least [`wake_up`](PlantConfig::wake_up) has halted and
//! takes that long to start a thread.
//!
//! The runtime, as tokio's multi-thread scheduler: each worker has a LIFO slot, a local queue
//! and its deferred tasks, and there is one inject queue. Without the I/O driver a request
//! lands on a worker on a CPU (picked at random, as the one that polled the driver), or in the
//! inject queue when none is; with it, requests wait in the socket until a worker polls the
//! driver (the one parked in it, woken by the OS; a busy one when it runs dry or at its
//! maintenance tick) and land on that worker. A request goes to the worker's LIFO slot (the
//! one it displaces to the back of the local queue), so it runs after the poll on the worker
//! ends. An elastic task's next poll is deferred on its worker as `yield_now` defers it, woken
//! to the back of the local queue when the worker finds no other work or at its maintenance
//! tick; a new grant goes to the inject queue. A worker takes its LIFO slot first (at most 3
//! times in a row, as tokio), then its local queue (every 61st poll: the driver, its deferred
//! tasks and the inject queue first), then the inject queue, then steals half of another
//! worker's local queue, else polls the driver and wakes its deferred tasks, else parks (in the
//! driver, if no worker is). A parked worker is woken when work is queued and no awake worker
//! is looking for work. So a worker the OS preempts strands its local queue and its deferred
//! tasks until it runs again or another worker runs dry and steals: the run-queue delay of
//! more workers than CPUs.
//!
//! Between two events nothing changes but the work left on each running thread, so the loop
//! jumps from one event to the next: an arrival, a poll's end, a timeslice's end, a quota
//! running out or a period ending, a neighbour waking, a pause, a look between ticks, a tick.

mod elastic;
mod events;
mod os;

use std::collections::VecDeque;
use std::task::{Poll, Waker};
use std::time::Duration;

use elastic_cpu_core::{Admit, Grant, ManualClock, SettingError, Ticket, WorkQueue};
use hdrhistogram::Histogram;

use crate::config::{ClassConfig, Neighbour, PlantConfig, Quota, RunsOn, Service};
use crate::observe::{
    histogram, p99, ClassCommand, ClassObservation, FastObservation, History, Observation,
    Steering, TickSamples, LONG_POLL,
};
use crate::report::{PhaseSummary, PlantTick};

const NEVER: u64 = u64::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Worker,
    Pool,
    Neighbour,
    /// The process's load generator, at real-time priority.
    Client,
}

/// Scheduling classes, lowest first: a ready thread takes the CPU of a running one of a lower
/// class.
const IDLE: usize = 0;
const NORMAL: usize = 1;
const REALTIME: usize = 2;

impl Kind {
    /// Charged to the process.
    fn process(self) -> bool {
        matches!(self, Kind::Worker | Kind::Pool | Kind::Client)
    }

    /// Under the process's CFS quota (real-time threads are not).
    fn under_quota(self) -> bool {
        matches!(self, Kind::Worker | Kind::Pool)
    }

    /// Its scheduling class: [`IDLE`], [`NORMAL`] or [`REALTIME`].
    fn class(self) -> usize {
        match self {
            Kind::Pool => IDLE,
            Kind::Worker | Kind::Neighbour => NORMAL,
            Kind::Client => REALTIME,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not runnable: parked, sleeping, or retired.
    Blocked,
    /// Runnable, waiting for a CPU (or for the quota's next period).
    Ready,
    /// On this CPU.
    Running(usize),
}

/// A unit of work a thread runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Task {
    /// A foreground request: one poll of `service`, sent at `arrived`, runnable on the
    /// runtime since `woken` (its I/O driver's poll; `arrived` without a driver).
    Foreground {
        arrived: u64,
        woken: u64,
        service: u64,
    },
    /// One poll of task `task` of class `class`, runnable since `since`.
    Elastic {
        class: usize,
        task: usize,
        since: u64,
    },
    /// A neighbour's burst.
    Burst,
    /// The client's CPU for one request.
    Send,
}

#[derive(Debug, Clone, Copy)]
struct Job {
    task: Task,
    /// CPU time still to run.
    remaining: u64,
    /// CPU time of the whole poll.
    len: u64,
}

#[derive(Debug)]
struct Thread {
    kind: Kind,
    state: State,
    job: Option<Job>,
    /// When it last got its CPU (its timeslice runs from here).
    slice_start: u64,
    /// When it last became runnable.
    ready_since: u64,
    /// A sleeping neighbour thread's wake-up.
    wake_at: u64,
    /// A neighbour thread of a neighbour turned off: never runs again.
    retired: bool,
}

impl Thread {
    fn new(kind: Kind) -> Self {
        Self {
            kind,
            state: State::Blocked,
            job: None,
            slice_start: 0,
            ready_since: 0,
            wake_at: NEVER,
            retired: false,
        }
    }
}

/// Where one elastic task is in its loop.
#[derive(Debug)]
enum Loop {
    /// Waiting in the queue for a grant.
    Waiting(Ticket<ManualClock>),
    /// Running polls against a grant, `used` of it so far.
    Holding { grant: Grant, used: u64 },
    /// The queue closed (never, unless a steering closes it).
    Done,
}

#[derive(Debug)]
struct Class {
    cfg: ClassConfig,
    queue: WorkQueue<ManualClock>,
    tasks: Vec<Loop>,
    cpu: u64,
    tick_cpu: u64,
    tick_long_cpu: u64,
    /// The last ticks' (CPU, CPU in long polls), over the probe's window.
    recent: VecDeque<(u64, u64)>,
    phase_cpu: u64,
    held: bool,
    /// Holders give their grants back at the end of each poll.
    braking: bool,
}

#[derive(Debug)]
struct QuotaState {
    quota: Quota,
    /// CPU nanoseconds per period.
    budget: u64,
    used: u64,
    period_end: u64,
    throttled: bool,
}

/// Counters over a phase (reset by [`Plant::summarize`]).
#[derive(Debug)]
struct PhaseAcc {
    start: u64,
    sched: Histogram<u64>,
    response: Histogram<u64>,
    arrivals: u64,
    foreground: u64,
    process: u64,
    neighbour: u64,
    throttled: u64,
}

impl PhaseAcc {
    fn new(start: u64) -> Self {
        Self {
            start,
            sched: histogram(),
            response: histogram(),
            arrivals: 0,
            foreground: 0,
            process: 0,
            neighbour: 0,
            throttled: 0,
        }
    }
}

/// Counters over a tick.
#[derive(Debug, Default)]
struct TickAcc {
    arrivals: u64,
    foreground: u64,
    process: u64,
    neighbour: u64,
    throttled: bool,
}

/// One simulated host and process: build it from a [`PlantConfig`], run it with a
/// [`Steering`]. Deterministic: the same configuration (seed included) and steering give the
/// same run.
#[derive(Debug)]
pub struct Plant {
    cfg: PlantConfig,
    clock: ManualClock,
    now: u64,
    rng: fastrand::Rng,
    threads: Vec<Thread>,
    cpus: Vec<Option<usize>>,
    /// Ready threads per scheduling class.
    ready: [VecDeque<usize>; 3],
    /// The client's work not yet taken by one of its threads (CPU nanoseconds each).
    sends: VecDeque<u64>,
    /// The runtime's inject queue.
    inject: VecDeque<Task>,
    /// Each worker's local queue (workers are threads `0..workers`).
    locals: Vec<VecDeque<Task>>,
    /// Each worker's LIFO slot, and the polls taken from it in a row.
    lifo: Vec<(Option<Task>, u8)>,
    /// Each worker's polls so far (every 61st looks at the inject queue first).
    polls: Vec<u64>,
    /// Requests sent that no worker's driver poll has seen yet (with the I/O driver).
    socket: VecDeque<Task>,
    /// The worker parked in the I/O driver: the OS wakes it when a request comes.
    driver: Option<usize>,
    /// Per CPU, a thread woken onto it while it was idle, and when it starts running there.
    waking: Vec<Option<(usize, u64)>>,
    /// Per CPU, when it last became free.
    idle_since: Vec<u64>,
    /// Each worker's deferred tasks: elastic polls that yielded as `yield_now` does, woken
    /// into its local queue only when it finds no other work.
    deferred: Vec<VecDeque<Task>>,
    pool_queue: VecDeque<Task>,
    classes: Vec<Class>,
    arrivals_per_sec: f64,
    next_arrival: u64,
    neighbour: Option<Neighbour>,
    quota: Option<QuotaState>,
    paused_until: Option<u64>,
    pauses: Vec<(u64, u64)>,
    next_tick: u64,
    next_fast: u64,
    // Totals since the start.
    process_cpu: u64,
    neighbour_cpu: u64,
    foreground_cpu: u64,
    arrivals: u64,
    throttled_periods: u64,
    periods: Vec<Duration>,
    // The current tick and phase.
    tick: TickAcc,
    readings: TickSamples,
    history: History,
    phase: PhaseAcc,
    trace: Vec<PlantTick>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(NEVER)
}

impl Plant {
    /// A plant at time zero: threads parked, every elastic task asking for its first grant.
    ///
    /// # Errors
    /// The first setting [`PlantConfig::validate`] refuses.
    pub fn new(cfg: PlantConfig) -> Result<Self, SettingError> {
        cfg.validate()?;
        let clock = ManualClock::new();
        let mut threads = Vec::new();
        threads.extend((0..cfg.workers).map(|_| Thread::new(Kind::Worker)));
        threads.extend((0..cfg.pool_threads).map(|_| Thread::new(Kind::Pool)));
        let clients = cfg.client.map_or(0, |c| c.threads);
        threads.extend((0..clients).map(|_| Thread::new(Kind::Client)));
        let classes = cfg
            .classes
            .iter()
            .map(|c| Class {
                cfg: c.clone(),
                queue: WorkQueue::new(clock.clone(), c.initial_rate),
                tasks: Vec::with_capacity(c.tasks),
                cpu: 0,
                tick_cpu: 0,
                tick_long_cpu: 0,
                recent: VecDeque::with_capacity(cfg.probe_window),
                phase_cpu: 0,
                held: false,
                braking: false,
            })
            .collect();
        let quota = cfg.quota.map(|q| QuotaState {
            quota: q,
            budget: (q.cpus * q.period.as_nanos() as f64) as u64,
            used: 0,
            period_end: nanos(q.period),
            throttled: false,
        });
        let mut plant = Self {
            clock,
            now: 0,
            rng: fastrand::Rng::with_seed(cfg.seed),
            threads,
            cpus: vec![None; cfg.cpus],
            ready: Default::default(),
            sends: VecDeque::new(),
            inject: VecDeque::new(),
            locals: vec![VecDeque::new(); cfg.workers],
            lifo: vec![(None, 0); cfg.workers],
            polls: vec![0; cfg.workers],
            deferred: vec![VecDeque::new(); cfg.workers],
            socket: VecDeque::new(),
            driver: cfg.io_driver.then_some(0),
            waking: vec![None; cfg.cpus],
            idle_since: vec![0; cfg.cpus],
            pool_queue: VecDeque::new(),
            classes,
            arrivals_per_sec: 0.0,
            next_arrival: NEVER,
            neighbour: None,
            quota,
            paused_until: None,
            pauses: Vec::new(),
            next_tick: nanos(cfg.tick),
            next_fast: nanos(cfg.fast_interval),
            process_cpu: 0,
            neighbour_cpu: 0,
            foreground_cpu: 0,
            arrivals: 0,
            throttled_periods: 0,
            periods: Vec::new(),
            tick: TickAcc::default(),
            readings: TickSamples::new(),
            history: History::new(cfg.history),
            phase: PhaseAcc::new(0),
            trace: Vec::new(),
            cfg,
        };
        plant.set_arrivals(plant.cfg.foreground.arrivals_per_sec)?;
        plant.set_neighbour(plant.cfg.neighbour)?;
        for class in 0..plant.classes.len() {
            for task in 0..plant.classes[class].cfg.tasks {
                plant.classes[class].tasks.push(Loop::Done);
                plant.admit(class, task, None);
            }
        }
        Ok(plant)
    }

    /// Run for `length` of simulated time, `steering` called at every tick and between.
    pub fn run_for<S: Steering + ?Sized>(&mut self, length: Duration, steering: &mut S) {
        let end = self.now.saturating_add(nanos(length));
        while self.now < end {
            self.dispatch();
            let t = self.next_event(end);
            self.advance_to(t);
            self.handle_events(steering);
        }
        self.dispatch();
    }

    /// Change the foreground's mean arrival rate from now on.
    ///
    /// # Errors
    /// A rate that is not finite or below zero.
    pub fn set_arrivals(&mut self, per_sec: f64) -> Result<(), SettingError> {
        if !per_sec.is_finite() || per_sec < 0.0 {
            return Err(SettingError::new(
                "foreground.arrivals_per_sec",
                per_sec,
                "a finite number, 0 or more",
            ));
        }
        self.arrivals_per_sec = per_sec;
        self.next_arrival = self.now.saturating_add(self.gap());
        Ok(())
    }

    /// The foreground's mean arrival rate now.
    pub fn arrivals_per_sec(&self) -> f64 {
        self.arrivals_per_sec
    }

    /// Turn the neighbour on (replacing the one there is) or off (`None`).
    ///
    /// # Errors
    /// A neighbour [`Neighbour::validate`] refuses.
    pub fn set_neighbour(&mut self, neighbour: Option<Neighbour>) -> Result<(), SettingError> {
        if let Some(n) = &neighbour {
            n.validate()?;
        }
        for t in 0..self.threads.len() {
            if self.threads[t].kind == Kind::Neighbour && !self.threads[t].retired {
                self.unschedule(t);
                let th = &mut self.threads[t];
                th.retired = true;
                th.job = None;
                th.wake_at = NEVER;
            }
        }
        self.neighbour = neighbour;
        if let Some(n) = neighbour {
            for _ in 0..n.threads {
                self.threads.push(Thread::new(Kind::Neighbour));
                let t = self.threads.len() - 1;
                self.start_burst(t);
                self.make_ready(t);
            }
        }
        Ok(())
    }

    /// Stop every CPU from `at` (plant time; now if already past) for `span`: time passes,
    /// nothing runs, work queues up.
    pub fn pause_at(&mut self, at: Duration, span: Duration) {
        let start = nanos(at).max(self.now);
        self.pauses.push((start, start.saturating_add(nanos(span))));
        self.pauses.sort_unstable();
    }

    /// The plant's time.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.now)
    }

    /// The manual clock the work queues read (the plant moves it).
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &PlantConfig {
        &self.cfg
    }

    /// The process's CPU time since the start.
    pub fn process_cpu(&self) -> Duration {
        Duration::from_nanos(self.process_cpu)
    }

    /// The foreground's CPU time since the start.
    pub fn foreground_cpu(&self) -> Duration {
        Duration::from_nanos(self.foreground_cpu)
    }

    /// The neighbour's CPU time since the start.
    pub fn neighbour_cpu(&self) -> Duration {
        Duration::from_nanos(self.neighbour_cpu)
    }

    /// Each class's CPU time since the start.
    pub fn class_cpu(&self) -> Vec<Duration> {
        self.classes
            .iter()
            .map(|c| Duration::from_nanos(c.cpu))
            .collect()
    }

    /// Foreground arrivals since the start.
    pub fn arrivals(&self) -> u64 {
        self.arrivals
    }

    /// Quota periods throttled since the start.
    pub fn throttled_periods(&self) -> u64 {
        self.throttled_periods
    }

    /// The process's CPU time in each quota period that has ended (empty without a quota).
    pub fn period_usage(&self) -> &[Duration] {
        &self.periods
    }

    /// One record per tick so far.
    pub fn trace(&self) -> &[PlantTick] {
        &self.trace
    }

    /// The work queue of class `class` (its counters, for assertions).
    pub fn queue(&self, class: usize) -> Option<&WorkQueue<ManualClock>> {
        self.classes.get(class).map(|c| &c.queue)
    }

    /// Sum up the time since the last summary (or the start) as a phase called `name`, and
    /// start the next one.
    pub fn summarize(&mut self, name: &str) -> PhaseSummary {
        let acc = std::mem::replace(&mut self.phase, PhaseAcc::new(self.now));
        let length = self.now - acc.start;
        let secs = (length as f64 / 1e9).max(f64::MIN_POSITIVE);
        let cpus = |n: u64| n as f64 / 1e9 / secs;
        let class_cpu: Vec<f64> = self.classes.iter().map(|c| cpus(c.phase_cpu)).collect();
        for c in &mut self.classes {
            c.phase_cpu = 0;
        }
        let elastic_cpu = class_cpu.iter().sum();
        let capacity = self.cfg.capacity();
        let foreground_cpu = cpus(acc.foreground);
        let spare = capacity - foreground_cpu;
        PhaseSummary {
            name: name.to_owned(),
            length: Duration::from_nanos(length),
            arrivals: acc.arrivals,
            sched_p99: p99(&acc.sched),
            response_p99: p99(&acc.response),
            foreground_cpu,
            class_cpu,
            elastic_cpu,
            capacity,
            spare,
            harvest: if spare > 0.0 {
                elastic_cpu / spare
            } else {
                0.0
            },
            process_cpu: cpus(acc.process),
            neighbour_cpu: cpus(acc.neighbour),
            throttled_periods: acc.throttled,
        }
    }

    // --- draws ---

    /// An exponential draw of mean `mean` nanoseconds, at least 1.
    fn exp(&mut self, mean: f64) -> u64 {
        let u = self.rng.f64(); // [0, 1)
        let x = -mean * (1.0 - u).ln();
        if x.is_finite() {
            (x as u64).max(1)
        } else {
            NEVER
        }
    }

    /// The gap to the next arrival.
    fn gap(&mut self) -> u64 {
        if self.arrivals_per_sec > 0.0 {
            self.exp(1e9 / self.arrivals_per_sec)
        } else {
            NEVER
        }
    }

    fn service(&mut self) -> u64 {
        match self.cfg.foreground.service {
            Service::Fixed(d) => nanos(d).max(1),
            Service::Exponential(d) => self.exp(d.as_nanos() as f64),
        }
    }
}

fn add(acc: &mut (u64, u64), delay: u64) {
    acc.0 = acc.0.saturating_add(delay);
    acc.1 += 1;
}
