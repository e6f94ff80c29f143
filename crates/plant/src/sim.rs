//! The physics, as discrete events on the manual clock: the OS shares the CPUs among threads,
//! the runtime's workers poll tasks from their queues as tokio's do, elastic tasks loop on
//! real grants.
//!
//! The runtime, as tokio's multi-thread scheduler: each worker has a local queue and there is
//! one inject queue. A request woken by the I/O driver lands in the local queue of a worker on
//! a CPU (the one that polled the driver), or in the inject queue when none is; an elastic
//! task's next poll goes back to its worker's local queue; a new grant goes to the inject
//! queue. A request lands in its worker's LIFO slot, as a task woken on a worker does in tokio
//! (the one it displaces goes to the back of the local queue), so it runs after the poll on
//! the worker ends; a yielded elastic poll never does. A worker takes its LIFO slot first
//! (at most 3 times in a row, as tokio), then its local queue, every 61st poll from the inject
//! queue first,
//! then the inject queue, then steals half of another worker's local queue, else parks. A
//! parked worker is woken when work is queued and no awake worker is looking for work. So a
//! worker the OS preempts strands its local queue until it runs again or another worker runs
//! dry and steals: the run-queue delay of more workers than CPUs.
//!
//! Between two events nothing changes but the work left on each running thread, so the loop
//! jumps from one event to the next: an arrival, a poll's end, a timeslice's end, a quota
//! running out or a period ending, a neighbour waking, a pause, a look between ticks, a tick.

use std::collections::VecDeque;
use std::task::{Poll, Waker};
use std::time::Duration;

/// Polls a worker takes from its LIFO slot in a row before it looks at its queues (tokio's).
const MAX_LIFO_POLLS: u8 = 3;

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
}

impl Kind {
    /// Charged to the process and under its quota.
    fn process(self) -> bool {
        matches!(self, Kind::Worker | Kind::Pool)
    }

    /// At idle priority: runs only on a CPU no normal thread wants.
    fn idle(self) -> bool {
        self == Kind::Pool
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
    /// A foreground request: one poll of `service`, runnable since `arrived`.
    Foreground { arrived: u64, service: u64 },
    /// One poll of task `task` of class `class`, runnable since `since`.
    Elastic {
        class: usize,
        task: usize,
        since: u64,
    },
    /// A neighbour's burst.
    Burst,
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
    ready_normal: VecDeque<usize>,
    ready_idle: VecDeque<usize>,
    /// The runtime's inject queue.
    inject: VecDeque<Task>,
    /// Each worker's local queue (workers are threads `0..workers`).
    locals: Vec<VecDeque<Task>>,
    /// Each worker's LIFO slot, and the polls taken from it in a row.
    lifo: Vec<(Option<Task>, u8)>,
    /// Each worker's polls so far (every 61st looks at the inject queue first).
    polls: Vec<u64>,
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
            ready_normal: VecDeque::new(),
            ready_idle: VecDeque::new(),
            inject: VecDeque::new(),
            locals: vec![VecDeque::new(); cfg.workers],
            lifo: vec![(None, 0); cfg.workers],
            polls: vec![0; cfg.workers],
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

    // --- the OS ---

    fn paused(&self) -> bool {
        self.paused_until.is_some()
    }

    fn throttled(&self) -> bool {
        self.quota.as_ref().is_some_and(|q| q.throttled)
    }

    fn eligible(&self, t: usize) -> bool {
        !(self.threads[t].kind.process() && self.throttled())
    }

    fn make_ready(&mut self, t: usize) {
        let th = &mut self.threads[t];
        th.state = State::Ready;
        th.ready_since = self.now;
        if th.kind.idle() {
            self.ready_idle.push_back(t);
        } else {
            self.ready_normal.push_back(t);
        }
    }

    /// Off its CPU and out of the ready queues, blocked.
    fn unschedule(&mut self, t: usize) {
        match self.threads[t].state {
            State::Running(c) => self.cpus[c] = None,
            State::Ready => {
                self.ready_normal.retain(|&x| x != t);
                self.ready_idle.retain(|&x| x != t);
            }
            State::Blocked => {}
        }
        self.threads[t].state = State::Blocked;
    }

    /// Off its CPU, runnable, at the front (throttled, or an idle thread preempted) or the
    /// back (its timeslice ended) of its ready queue.
    fn preempt(&mut self, t: usize, front: bool) {
        if let State::Running(c) = self.threads[t].state {
            self.cpus[c] = None;
        }
        let th = &mut self.threads[t];
        th.state = State::Ready;
        th.ready_since = self.now;
        let q = if th.kind.idle() {
            &mut self.ready_idle
        } else {
            &mut self.ready_normal
        };
        if front {
            q.push_front(t);
        } else {
            q.push_back(t);
        }
    }

    fn first_eligible(&self, idle: bool) -> Option<usize> {
        let q = if idle {
            &self.ready_idle
        } else {
            &self.ready_normal
        };
        q.iter().position(|&t| self.eligible(t))
    }

    /// Put `t` on CPU `c`, counting its wait in the run queue.
    fn put_on(&mut self, c: usize, t: usize) {
        let delay = self.now - self.threads[t].ready_since;
        match self.threads[t].kind {
            Kind::Worker => add(&mut self.readings.workers, delay),
            Kind::Neighbour => add(&mut self.readings.bystanders, delay),
            Kind::Pool => {}
        }
        self.cpus[c] = Some(t);
        let th = &mut self.threads[t];
        th.state = State::Running(c);
        th.slice_start = self.now;
    }

    /// Give free CPUs to ready threads (normal first), let a ready normal thread take a CPU
    /// from an idle-priority one, and park threads that find no work when they get a CPU.
    fn dispatch(&mut self) {
        if self.paused() {
            return;
        }
        loop {
            let mut parked = false;
            for c in 0..self.cpus.len() {
                if self.cpus[c].is_some() {
                    continue;
                }
                let t = if let Some(i) = self.first_eligible(false) {
                    self.ready_normal.remove(i)
                } else if let Some(i) = self.first_eligible(true) {
                    self.ready_idle.remove(i)
                } else {
                    break;
                };
                let Some(t) = t else { break };
                self.put_on(c, t);
                if !self.ensure_job(t) {
                    self.unschedule(t);
                    parked = true;
                }
            }
            while let Some(i) = self.first_eligible(false) {
                if self.cpus.contains(&None) {
                    // A worker just parked: fill its CPU before preempting anyone.
                    parked = true;
                    break;
                }
                let Some(c) = (0..self.cpus.len())
                    .find(|&c| self.cpus[c].is_some_and(|t| self.threads[t].kind.idle()))
                else {
                    break;
                };
                if let Some(idle) = self.cpus[c] {
                    self.preempt(idle, true);
                }
                let Some(t) = self.ready_normal.remove(i) else {
                    break;
                };
                self.put_on(c, t);
                if !self.ensure_job(t) {
                    self.unschedule(t);
                    parked = true;
                }
            }
            if !parked {
                break;
            }
        }
    }

    /// Whether `t` has a job, taking the next task of its run queue if it had none.
    fn ensure_job(&mut self, t: usize) -> bool {
        if self.threads[t].job.is_some() {
            return true;
        }
        let task = match self.threads[t].kind {
            Kind::Worker => self.next_task(t),
            Kind::Pool => self.pool_queue.pop_front(),
            Kind::Neighbour => None,
        };
        let Some(task) = task else { return false };
        let len = match task {
            Task::Foreground { arrived, service } => {
                let wait = (self.now - arrived).max(1);
                let _ = self.readings.sched.record(wait);
                let _ = self.readings.all.record(wait);
                let _ = self.phase.sched.record(wait);
                service
            }
            Task::Elastic { class, since, .. } => {
                if self.threads[t].kind == Kind::Worker {
                    let _ = self.readings.all.record((self.now - since).max(1));
                }
                nanos(self.classes[class].cfg.poll).max(1)
            }
            Task::Burst => 1,
        };
        self.threads[t].job = Some(Job {
            task,
            remaining: len,
            len,
        });
        true
    }

    /// Queue `task` for the pool, or the runtime's inject queue, or worker `local`'s queue;
    /// then wake a parked thread if none awake is looking for work.
    fn push(&mut self, task: Task, placement: RunsOn, local: Option<usize>) {
        let kind = match placement {
            RunsOn::Runtime => {
                match local {
                    Some(w) if w < self.locals.len() && matches!(task, Task::Foreground { .. }) => {
                        if let Some(before) = self.lifo[w].0.replace(task) {
                            self.locals[w].push_back(before);
                        }
                    }
                    Some(w) if w < self.locals.len() => self.locals[w].push_back(task),
                    _ => self.inject.push_back(task),
                }
                Kind::Worker
            }
            RunsOn::Pool => {
                self.pool_queue.push_back(task);
                Kind::Pool
            }
        };
        let looking = self
            .threads
            .iter()
            .any(|th| th.kind == kind && th.state != State::Blocked && th.job.is_none());
        if !looking {
            if let Some(t) = self
                .threads
                .iter()
                .position(|th| th.kind == kind && th.state == State::Blocked)
            {
                self.make_ready(t);
            }
        }
    }

    /// The next task for worker `w`: as a tokio worker looks for one.
    fn next_task(&mut self, w: usize) -> Option<Task> {
        self.polls[w] += 1;
        let (slot, in_a_row) = &mut self.lifo[w];
        if *in_a_row < MAX_LIFO_POLLS {
            if let Some(task) = slot.take() {
                *in_a_row += 1;
                return Some(task);
            }
        }
        *in_a_row = 0;
        if let Some(task) = slot.take() {
            // Over its run: the slot's task waits its turn in the local queue.
            self.locals[w].push_back(task);
        }
        if self.polls[w].is_multiple_of(61) {
            if let Some(task) = self.inject.pop_front() {
                return Some(task);
            }
        }
        if let Some(task) = self.locals[w].pop_front() {
            return Some(task);
        }
        if let Some(task) = self.inject.pop_front() {
            return Some(task);
        }
        let n = self.locals.len();
        let victim = (1..n)
            .map(|i| (w + i) % n)
            .find(|&v| !self.locals[v].is_empty())?;
        let take = self.locals[victim].len().div_ceil(2);
        let stolen: Vec<Task> = self.locals[victim].drain(..take).collect();
        self.locals[w].extend(stolen);
        self.locals[w].pop_front()
    }

    /// A worker on a CPU, as the one that polled the I/O driver: picked at random.
    fn running_worker(&mut self) -> Option<usize> {
        let running = self
            .cpus
            .iter()
            .flatten()
            .filter(|&&t| self.threads[t].kind == Kind::Worker)
            .count();
        if running == 0 {
            return None;
        }
        let pick = self.rng.usize(..running);
        self.cpus
            .iter()
            .flatten()
            .copied()
            .filter(|&t| self.threads[t].kind == Kind::Worker)
            .nth(pick)
    }

    fn start_burst(&mut self, t: usize) {
        let len = self.neighbour.map_or(1, |n| nanos(n.burst).max(1));
        self.threads[t].job = Some(Job {
            task: Task::Burst,
            remaining: len,
            len,
        });
    }

    // --- time ---

    fn next_event(&self, end: u64) -> u64 {
        let mut t = end
            .min(self.next_tick)
            .min(self.next_fast)
            .min(self.next_arrival);
        match (self.paused_until, self.pauses.first()) {
            (Some(until), _) => t = t.min(until),
            (None, Some(&(start, _))) => t = t.min(start),
            (None, None) => {}
        }
        let running = self.running_process();
        if let Some(q) = &self.quota {
            t = t.min(q.period_end);
            if !self.paused() && !q.throttled && running > 0 {
                t = t.min(self.now + q.budget.saturating_sub(q.used) / running);
            }
        }
        if !self.paused() {
            let slice = nanos(self.cfg.timeslice);
            for th in self.cpus.iter().flatten().map(|&t| &self.threads[t]) {
                if let Some(job) = &th.job {
                    t = t.min(self.now + job.remaining);
                }
                t = t.min(th.slice_start.saturating_add(slice));
            }
        }
        for th in &self.threads {
            if th.state == State::Blocked && !th.retired {
                t = t.min(th.wake_at);
            }
        }
        t.max(self.now)
    }

    fn running_process(&self) -> u64 {
        self.cpus
            .iter()
            .flatten()
            .filter(|&&t| self.threads[t].kind.process())
            .count() as u64
    }

    /// Move time to `to`, every running thread's job by as much.
    fn advance_to(&mut self, to: u64) {
        let dt = to - self.now;
        if dt > 0 && !self.paused() {
            let mut process = 0;
            for c in 0..self.cpus.len() {
                let Some(t) = self.cpus[c] else { continue };
                let th = &mut self.threads[t];
                let Some(job) = th.job.as_mut() else { continue };
                job.remaining -= dt.min(job.remaining);
                if th.kind.process() {
                    process += dt;
                } else {
                    self.neighbour_cpu += dt;
                    self.tick.neighbour += dt;
                    self.phase.neighbour += dt;
                }
                match job.task {
                    Task::Foreground { .. } => {
                        self.foreground_cpu += dt;
                        self.tick.foreground += dt;
                        self.phase.foreground += dt;
                    }
                    Task::Elastic { class, .. } => {
                        let long = job.len >= nanos(LONG_POLL);
                        let cl = &mut self.classes[class];
                        cl.cpu += dt;
                        cl.tick_cpu += dt;
                        cl.phase_cpu += dt;
                        if long {
                            cl.tick_long_cpu += dt;
                        }
                    }
                    Task::Burst => {}
                }
            }
            self.process_cpu += process;
            self.tick.process += process;
            self.phase.process += process;
            if let Some(q) = &mut self.quota {
                q.used += process;
            }
        }
        self.now = to;
        self.clock.set(Duration::from_nanos(to));
    }

    fn handle_events<S: Steering + ?Sized>(&mut self, steering: &mut S) {
        let now = self.now;
        if self.paused_until.is_some_and(|u| u <= now) {
            self.paused_until = None;
        }
        while self.paused_until.is_none() && self.pauses.first().is_some_and(|p| p.0 <= now) {
            let (_, end) = self.pauses.remove(0);
            if end > now {
                self.paused_until = Some(end);
            }
        }
        self.quota_events();
        if !self.paused() {
            for c in 0..self.cpus.len() {
                if let Some(t) = self.cpus[c] {
                    if self.threads[t].job.is_some_and(|j| j.remaining == 0) {
                        self.complete(t);
                    }
                }
            }
            self.timeslices();
        }
        for t in 0..self.threads.len() {
            let th = &self.threads[t];
            if th.state == State::Blocked && !th.retired && th.wake_at <= now {
                self.threads[t].wake_at = NEVER;
                self.start_burst(t);
                self.make_ready(t);
            }
        }
        while self.next_arrival <= now {
            let service = self.service();
            let arrived = self.next_arrival;
            self.arrivals += 1;
            self.tick.arrivals += 1;
            self.phase.arrivals += 1;
            let worker = self.running_worker();
            self.push(
                Task::Foreground { arrived, service },
                RunsOn::Runtime,
                worker,
            );
            self.next_arrival = arrived.saturating_add(self.gap());
        }
        if self.next_fast <= now {
            self.next_fast = now.saturating_add(nanos(self.cfg.fast_interval));
            let obs = FastObservation {
                now: Duration::from_nanos(now),
                process_cpu: Duration::from_nanos(self.process_cpu),
                backlog_age: self.backlog_age(),
            };
            if let Some(commands) = steering.between(obs.now, &obs) {
                self.apply(&commands);
            }
        }
        if self.next_tick <= now {
            self.next_tick = now.saturating_add(nanos(self.cfg.tick));
            self.do_tick(steering);
        }
    }

    /// Period ends (the quota refills, throttling lifts) and a quota running out (every
    /// thread of the process leaves its CPU until the period ends).
    fn quota_events(&mut self) {
        let now = self.now;
        let running = self.running_process();
        let Some(q) = &mut self.quota else { return };
        while q.period_end <= now {
            self.periods.push(Duration::from_nanos(q.used));
            q.used = 0;
            q.throttled = false;
            q.period_end = q.period_end.saturating_add(nanos(q.quota.period));
        }
        let left = q.budget.saturating_sub(q.used);
        // Less than a nanosecond per running thread left is spent: no event could land on it.
        if !q.throttled && (left == 0 || left < running) {
            q.throttled = true;
            self.throttled_periods += 1;
            self.phase.throttled += 1;
            self.tick.throttled = true;
            for c in (0..self.cpus.len()).rev() {
                if let Some(t) = self.cpus[c] {
                    if self.threads[t].kind.process() {
                        self.preempt(t, true);
                    }
                }
            }
        }
    }

    /// A running thread whose timeslice is over goes to the back of its ready queue if a
    /// thread that may take its CPU waits; else it runs on for another slice.
    fn timeslices(&mut self) {
        let slice = nanos(self.cfg.timeslice);
        for c in 0..self.cpus.len() {
            let Some(t) = self.cpus[c] else { continue };
            if self.threads[t].slice_start.saturating_add(slice) > self.now {
                continue;
            }
            let waiter = self.first_eligible(false).is_some()
                || (self.threads[t].kind.idle() && self.first_eligible(true).is_some());
            if waiter {
                self.preempt(t, false);
            } else {
                self.threads[t].slice_start = self.now;
            }
        }
    }

    /// The job on running thread `t` is done: account it, then take the next one or park.
    fn complete(&mut self, t: usize) {
        let Some(job) = self.threads[t].job.take() else {
            return;
        };
        match job.task {
            Task::Foreground { arrived, .. } => {
                let _ = self.phase.response.record((self.now - arrived).max(1));
            }
            Task::Elastic { class, task, .. } => self.poll_done(class, task, job.len, t),
            Task::Burst => {
                let duty = self
                    .neighbour
                    .map_or(0.0, |n| n.cpus / n.threads.max(1) as f64);
                if duty >= 1.0 {
                    self.start_burst(t);
                    return;
                }
                let wake = if duty > 0.0 {
                    let mean = job.len as f64 * (1.0 - duty) / duty;
                    self.now.saturating_add(self.exp(mean))
                } else {
                    NEVER
                };
                self.unschedule(t);
                self.threads[t].wake_at = wake;
                return;
            }
        }
        if !self.ensure_job(t) {
            self.unschedule(t);
        }
    }

    fn backlog_age(&self) -> Duration {
        self.inject
            .iter()
            .chain(self.locals.iter().flatten())
            .chain(self.lifo.iter().filter_map(|(t, _)| t.as_ref()))
            .filter_map(|task| match *task {
                Task::Foreground { arrived, .. } => Some(self.now - arrived),
                _ => None,
            })
            .max()
            .map_or(Duration::ZERO, Duration::from_nanos)
    }

    // --- elastic loops ---

    /// Task `task` of `class` asks for its next grant (running on worker `local`, if given).
    fn admit(&mut self, class: usize, task: usize, local: Option<usize>) {
        let cl = &mut self.classes[class];
        let next = match cl.queue.admit(cl.cfg.slice) {
            Admit::Granted(grant) => Loop::Holding { grant, used: 0 },
            Admit::Queued(ticket) => Loop::Waiting(ticket),
        };
        let granted = matches!(next, Loop::Holding { .. });
        cl.tasks[task] = next;
        if granted {
            self.push_poll(class, task, local);
        }
    }

    /// Queue the next poll of task `task` of `class` (on worker `local`'s queue if given).
    fn push_poll(&mut self, class: usize, task: usize, local: Option<usize>) {
        let placement = self.classes[class].cfg.placement;
        let since = self.now;
        self.push(Task::Elastic { class, task, since }, placement, local);
    }

    /// Collect the grants the queue of `class` handed to waiting tasks.
    fn collect(&mut self, class: usize) {
        for task in 0..self.classes[class].tasks.len() {
            let Loop::Waiting(ticket) = &mut self.classes[class].tasks[task] else {
                continue;
            };
            match ticket.poll_grant(Waker::noop()) {
                Poll::Pending => {}
                Poll::Ready(Ok(grant)) => {
                    self.classes[class].tasks[task] = Loop::Holding { grant, used: 0 };
                    self.push_poll(class, task, None);
                }
                Poll::Ready(Err(_)) => self.classes[class].tasks[task] = Loop::Done,
            }
        }
    }

    /// A poll of `len` ended on thread `t`: poll again while the grant lasts, else settle and
    /// ask again.
    fn poll_done(&mut self, class: usize, task: usize, len: u64, t: usize) {
        let cl = &mut self.classes[class];
        let Loop::Holding { grant, used } = &mut cl.tasks[task] else {
            return;
        };
        *used += len;
        if *used < grant.allotted_nanos() && !cl.braking {
            self.push_poll(class, task, Some(t));
            return;
        }
        if let Loop::Holding { grant, used } = std::mem::replace(&mut cl.tasks[task], Loop::Done) {
            cl.queue.done(grant, Duration::from_nanos(used));
        }
        self.admit(class, task, Some(t));
        self.collect(class);
    }

    // --- steering ---

    fn apply(&mut self, commands: &[ClassCommand]) {
        for (class, cmd) in commands.iter().enumerate().take(self.classes.len()) {
            let cl = &mut self.classes[class];
            // The cap first: the grants a new rate hands out respect it.
            cl.queue.set_max_holders(cmd.max_holders);
            if cmd.retune {
                cl.queue.retune(cmd.rate);
            } else {
                cl.queue.set_rate(cmd.rate);
            }
            cl.braking = cmd.held && cmd.braking;
            if cmd.held != cl.held {
                cl.held = cmd.held;
                if cmd.held {
                    cl.queue.pause();
                } else {
                    cl.queue.resume();
                }
            }
            self.collect(class);
        }
    }

    fn do_tick<S: Steering + ?Sized>(&mut self, steering: &mut S) {
        let mut classes = Vec::with_capacity(self.classes.len());
        for class in 0..self.classes.len() {
            let waited = self.classes[class].queue.tick();
            self.collect(class);
            let cl = &mut self.classes[class];
            if cl.recent.len() == self.cfg.probe_window {
                cl.recent.pop_front();
            }
            cl.recent.push_back((cl.tick_cpu, cl.tick_long_cpu));
            let (cpu, long) = cl.recent.iter().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
            let snap = cl.queue.snapshot();
            classes.push(ClassObservation {
                cpu: Duration::from_nanos(cl.cpu),
                waited,
                waiters: snap.waiters,
                holders: snap.holders,
                has_tokens: snap.balance_nanos > 0,
                long_polls: long * 2 > cpu,
                rate: snap.rate_nanos_per_sec,
            });
        }
        self.history.push(&self.readings);
        let window = self.cfg.probe_window;
        let throttled = self.tick.throttled || self.throttled();
        let period = self.cfg.tick;
        let obs = Observation {
            now: Duration::from_nanos(self.now),
            period,
            cpus: self.cfg.cpus as f64,
            quota: self.cfg.quota,
            throttled_periods: self.throttled_periods,
            throttled,
            process_cpu: Duration::from_nanos(self.process_cpu),
            arrivals_per_sec: self.tick.arrivals as f64 / period.as_secs_f64(),
            sched_p99: None,
            run_queue_delay: None,
            bystander_delay: None,
            classes,
            history: &self.history,
        };
        let obs = Observation {
            sched_p99: obs.sched_p99_over(window),
            run_queue_delay: obs.run_queue_delay_over(window),
            bystander_delay: obs.bystander_delay_over(window),
            ..obs
        };
        let sched_p99 = obs.sched_p99;
        let commands = steering.tick(&obs);
        self.apply(&commands);
        let record = PlantTick {
            now: Duration::from_nanos(self.now),
            process_cpu: Duration::from_nanos(self.tick.process),
            neighbour_cpu: Duration::from_nanos(self.tick.neighbour),
            foreground_cpu: Duration::from_nanos(self.tick.foreground),
            class_cpu: self
                .classes
                .iter()
                .map(|c| Duration::from_nanos(c.tick_cpu))
                .collect(),
            class_rate: self.classes.iter().map(|c| c.queue.rate()).collect(),
            sched_p99,
            throttled,
        };
        self.trace.push(record);
        self.tick = TickAcc::default();
        self.readings.reset();
        for c in &mut self.classes {
            c.tick_cpu = 0;
            c.tick_long_cpu = 0;
        }
    }
}

fn add(acc: &mut (u64, u64), delay: u64) {
    acc.0 = acc.0.saturating_add(delay);
    acc.1 += 1;
}
