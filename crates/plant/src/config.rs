//! What a plant is made of: CPUs, workers, quota, foreground load, elastic classes, neighbour.

use std::time::Duration;

use elastic_cpu_core::{SettingError, MAX_SLICE};

/// A CFS bandwidth quota over the process's threads (runtime workers and idle pool).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quota {
    /// CPUs' worth of time per period (`cpu.max` quota ÷ period), e.g. 1.5.
    pub cpus: f64,
    /// The enforcement period (100 ms in the kernel's default).
    pub period: Duration,
}

impl Quota {
    /// `cpus` per 100 ms period.
    pub fn new(cpus: f64) -> Self {
        Self {
            cpus,
            period: Duration::from_millis(100),
        }
    }
}

/// How long a foreground request's one poll runs (CPU time).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Service {
    /// Every request takes this long.
    Fixed(Duration),
    /// Exponentially distributed with this mean.
    Exponential(Duration),
}

impl Service {
    /// The mean service time.
    pub fn mean(&self) -> Duration {
        match *self {
            Service::Fixed(d) | Service::Exponential(d) => d,
        }
    }
}

/// The foreground: open-loop Poisson arrivals, each one task polled once on the runtime.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Foreground {
    /// Mean arrivals per second (0: none).
    pub arrivals_per_sec: f64,
    /// Each arrival's CPU time.
    pub service: Service,
}

impl Foreground {
    /// Arrivals at a rate that keeps `cpus` CPUs busy on average with `service`.
    pub fn load(cpus: f64, service: Service) -> Self {
        Self {
            arrivals_per_sec: cpus / service.mean().as_secs_f64(),
            service,
        }
    }

    /// The CPUs the foreground keeps busy on average: arrivals × mean service time.
    pub fn cpus(&self) -> f64 {
        self.arrivals_per_sec * self.service.mean().as_secs_f64()
    }
}

/// Where a class's polls run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunsOn {
    /// On the runtime's workers, in the run queue with the foreground.
    Runtime,
    /// On the idle-priority pool's threads.
    Pool,
}

/// One class of elastic work: `tasks` loops of grant → polls → settle, through a real
/// [`WorkQueue`](elastic_cpu_core::WorkQueue).
#[derive(Debug, Clone, PartialEq)]
pub struct ClassConfig {
    /// A name for reports.
    pub name: String,
    /// Tasks that loop on grants.
    pub tasks: usize,
    /// CPU time of one poll (~70 µs for short polls, milliseconds for long ones).
    pub poll: Duration,
    /// The slice each task asks a grant for (clamped by the queue to its 10–100 ms).
    pub slice: Duration,
    /// Where the polls run.
    pub placement: RunsOn,
    /// The bucket's token rate (CPU nanoseconds per second) before the first command.
    pub initial_rate: u64,
}

impl ClassConfig {
    /// `tasks` tasks of `poll`-long polls on the runtime, 100 ms slices, starting at 0.05 CPU.
    pub fn new(name: &str, tasks: usize, poll: Duration) -> Self {
        Self {
            name: name.to_owned(),
            tasks,
            poll,
            slice: MAX_SLICE,
            placement: RunsOn::Runtime,
            initial_rate: 50_000_000,
        }
    }

    /// The same class on the idle pool.
    pub fn on_pool(mut self) -> Self {
        self.placement = RunsOn::Pool;
        self
    }

    /// The same class starting at `rate` CPU nanoseconds per second.
    pub fn starting_at(mut self, rate: u64) -> Self {
        self.initial_rate = rate;
        self
    }
}

/// The load generator inside the process, as the demo runs it: threads at real-time
/// priority (they take a CPU from any normal or idle-priority thread at once, and run until
/// they block) that spend `per_request` of CPU for each request sent. Charged to the process
/// and counted as foreground, but outside its CFS quota, which binds normal threads only;
/// their run-queue delay is the bystanders' reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Client {
    /// Its threads.
    pub threads: usize,
    /// CPU time it spends per request.
    pub per_request: Duration,
}

impl Client {
    /// Refuses no threads or a zero cost.
    pub fn validate(&self) -> Result<(), SettingError> {
        count("client.threads", self.threads, 1)?;
        above_zero("client.per_request", self.per_request)
    }
}

/// Normal-priority threads outside the process (not charged to it, not under its quota) that
/// take about `cpus` CPUs: each runs bursts of `burst` and sleeps between them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Neighbour {
    /// Its threads.
    pub threads: usize,
    /// CPUs it takes in all when it gets them (at most `threads`).
    pub cpus: f64,
    /// CPU time of one burst.
    pub burst: Duration,
}

impl Neighbour {
    /// `cpus` CPUs' worth in 2 ms bursts over `ceil(cpus) + 1` threads, so each one sleeps
    /// between its bursts and wakes as a bystander thread would.
    pub fn new(cpus: f64) -> Self {
        Self {
            threads: cpus.ceil().max(0.0) as usize + 1,
            cpus,
            burst: Duration::from_millis(2),
        }
    }
}

/// Everything a plant is made of. [`Default`]: 2 CPUs, 2 workers, no quota, a foreground of
/// 0.5 CPU in 100 µs requests, no elastic class, no pool threads, no neighbour, no client
/// threads, 100 ms ticks,
/// CPUs that wake at once, no I/O driver.
#[derive(Debug, Clone, PartialEq)]
pub struct PlantConfig {
    /// Seeds every random draw: the same seed gives the same run.
    pub seed: u64,
    /// The host's CPUs.
    pub cpus: usize,
    /// The runtime's worker threads.
    pub workers: usize,
    /// Idle-priority pool threads (run the classes placed on the pool).
    pub pool_threads: usize,
    /// How long the OS lets a thread run while others wait for its CPU.
    pub timeslice: Duration,
    /// How long an idle CPU takes to start running a thread woken onto it (a halted virtual
    /// CPU's wake-up; zero: at once). Counted in the thread's run-queue delay.
    pub wake_up: Duration,
    /// Requests reach the runtime through its I/O driver, as tokio's do: they wait in the
    /// socket until a worker polls the driver (the one parked in it, woken by the OS; a busy
    /// one when it runs out of other work or at its maintenance tick), and their scheduling
    /// latency runs from then. Without: a request lands on a running worker at once.
    pub io_driver: bool,
    /// The steering's tick (the probe's tick and the governor's period).
    pub tick: Duration,
    /// How often [`Steering::between`](crate::Steering::between) looks between ticks.
    pub fast_interval: Duration,
    /// Ticks in the probe's window (the p99 and run-queue delay of an observation).
    pub probe_window: usize,
    /// Ticks of history an observation can read back (at least `probe_window`).
    pub history: usize,
    /// The CFS quota, if any.
    pub quota: Option<Quota>,
    /// The foreground load.
    pub foreground: Foreground,
    /// The elastic classes, in the order of observations and commands.
    pub classes: Vec<ClassConfig>,
    /// A noisy neighbour from the start, if any.
    pub neighbour: Option<Neighbour>,
    /// The load generator inside the process, if any (else the foreground costs the runtime
    /// only).
    pub client: Option<Client>,
}

impl Default for PlantConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            cpus: 2,
            workers: 2,
            pool_threads: 0,
            timeslice: Duration::from_millis(3),
            wake_up: Duration::ZERO,
            io_driver: false,
            tick: Duration::from_millis(100),
            fast_interval: Duration::from_millis(1),
            probe_window: 10,
            history: 60,
            quota: None,
            foreground: Foreground::load(0.5, Service::Fixed(Duration::from_micros(100))),
            classes: Vec::new(),
            neighbour: None,
            client: None,
        }
    }
}

/// The most of anything countable a plant takes (CPUs, threads, tasks): a bound that keeps a
/// typo from allocating the machine away.
const MAX_COUNT: usize = 4096;

fn above_zero(setting: &'static str, d: Duration) -> Result<(), SettingError> {
    if d.is_zero() {
        return Err(SettingError::new(setting, format!("{d:?}"), "above zero"));
    }
    Ok(())
}

fn count(setting: &'static str, n: usize, min: usize) -> Result<(), SettingError> {
    if n < min || n > MAX_COUNT {
        let expected = if min == 0 { "0 ..= 4096" } else { "1 ..= 4096" };
        return Err(SettingError::new(setting, n, expected));
    }
    Ok(())
}

fn finite_non_negative(setting: &'static str, x: f64) -> Result<(), SettingError> {
    if !x.is_finite() || x < 0.0 {
        return Err(SettingError::new(setting, x, "a finite number, 0 or more"));
    }
    Ok(())
}

impl Neighbour {
    /// Refuses no threads, a share that is not finite or above the threads, or a zero burst.
    pub fn validate(&self) -> Result<(), SettingError> {
        count("neighbour.threads", self.threads, 1)?;
        finite_non_negative("neighbour.cpus", self.cpus)?;
        if self.cpus > self.threads as f64 {
            return Err(SettingError::new(
                "neighbour.cpus",
                self.cpus,
                "at most one CPU per thread",
            ));
        }
        above_zero("neighbour.burst", self.burst)
    }
}

impl Foreground {
    /// Refuses a rate that is not finite and non-negative, or a zero service time.
    pub fn validate(&self) -> Result<(), SettingError> {
        finite_non_negative("foreground.arrivals_per_sec", self.arrivals_per_sec)?;
        above_zero("foreground.service", self.service.mean())
    }
}

impl PlantConfig {
    /// Checks every setting; the first refused one is the error.
    ///
    /// ```
    /// use elastic_cpu_plant::PlantConfig;
    ///
    /// let bad = PlantConfig { workers: 0, ..Default::default() };
    /// assert_eq!(bad.validate().unwrap_err().setting, "workers");
    /// ```
    pub fn validate(&self) -> Result<(), SettingError> {
        count("cpus", self.cpus, 1)?;
        count("workers", self.workers, 1)?;
        count("pool_threads", self.pool_threads, 0)?;
        above_zero("timeslice", self.timeslice)?;
        above_zero("tick", self.tick)?;
        above_zero("fast_interval", self.fast_interval)?;
        count("probe_window", self.probe_window, 1)?;
        if self.history < self.probe_window || self.history > MAX_COUNT {
            return Err(SettingError::new(
                "history",
                self.history,
                "probe_window ..= 4096",
            ));
        }
        if let Some(q) = self.quota {
            if !q.cpus.is_finite() || q.cpus <= 0.0 || q.cpus > self.cpus as f64 * 1000.0 {
                return Err(SettingError::new(
                    "quota.cpus",
                    q.cpus,
                    "above zero, finite",
                ));
            }
            above_zero("quota.period", q.period)?;
        }
        self.foreground.validate()?;
        count("classes", self.classes.len(), 0)?;
        for c in &self.classes {
            count("class.tasks", c.tasks, 1)?;
            above_zero("class.poll", c.poll)?;
            above_zero("class.slice", c.slice)?;
            if c.placement == RunsOn::Pool && self.pool_threads == 0 {
                return Err(SettingError::new(
                    "pool_threads",
                    0,
                    "1 or more when a class is placed on the pool",
                ));
            }
        }
        if let Some(n) = &self.neighbour {
            n.validate()?;
        }
        if let Some(c) = &self.client {
            c.validate()?;
        }
        Ok(())
    }

    /// What the process may use: the CPUs, or the quota when it is lower.
    pub fn capacity(&self) -> f64 {
        let cpus = self.cpus as f64;
        self.quota.map_or(cpus, |q| q.cpus.min(cpus))
    }
}
