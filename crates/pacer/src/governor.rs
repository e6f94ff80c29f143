//! The governor: the control loop in one place. Once per tick: probe → controller → bucket
//! rate → holder cap → grants; in between, the backlog brake. It runs on its own OS thread, off
//! the runtime it measures: a saturated runtime would delay the very loop that must react to it.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread;
use std::time::{Duration, Instant};

use elastic_cpu_core::{rate_for, Clock, ProcessCpuClock, SettingError, StepController, WorkQueue};
use elastic_cpu_probe::{CgroupVersion, QuotaReading, Window};

use crate::brake::{Brake, Change, BRAKE_POLL};
use crate::gate::link::{GateLink, GateParts};
use crate::gate::shared::GateShared;
use crate::gate::GateSettings;
use crate::headroom::Headroom;
use crate::idle_class::{IdleClass, IdleStart};
use crate::running::RunningTime;
use crate::share::{ShareCorrection, TickReading};
use crate::shared::{Queue, QueueClock, Shared};
use crate::signal::{combine, Reading, SignalSource, Signals};
use crate::snapshot::{CpusSource, Governed, Snapshot};
use crate::throttle::ThrottleWatch;

/// What decides the limit and applies it: the controller (or the fixed limit), the backlog
/// brake and the holder cap. It acts on the [`Shared`] state it is handed; the governor thread
/// and the `Elastic` handles (`attach`, manual ticks) share it through [`Control`].
pub(crate) struct Governor {
    controller: StepController,
    /// A fixed limit turns the controller off.
    fixed: Option<f64>,
    /// The backlog brake (`None`: off).
    brake: Option<Brake>,
    /// The brake times itself on the queue's clock.
    clock: QueueClock,
    /// Grants at a time are capped at the CPUs the limit pays for.
    cap_concurrency: bool,
    /// The limit (the elastic share of the CPUs) now.
    limit: f64,
    /// CPUs the rate is computed for.
    cpus: f64,
    /// Where `cpus` came from.
    cpus_source: CpusSource,
    /// `cpus` as given to the builder: `attach` leaves it alone.
    builder_cpus: Option<f64>,
    ticks: u64,
    /// The longest wait for a grant in each tick of the probe window, newest last.
    waits: VecDeque<Duration>,
    /// Connection gates: each its own class of CPU with its own controller, on the same tick.
    gates: Vec<GateLink>,
    /// Gates made so far (their metrics label).
    gates_made: usize,
    /// The cgroup's throttling, read once per tick once a quota is seen (`None`: off).
    throttle: Option<ThrottleWatch>,
    /// Inside a quota, the cap on elastic work from what the foreground leaves (`None`: off).
    headroom: Option<Headroom>,
    /// The rate's correction for elastic work's scheduler overhead (off on a manual clock).
    share: ShareCorrection,
    /// The I/O wake-up and run-queue components of the signal (off on a manual clock).
    signals: Signals,
    /// What the controller stepped on at the last tick, and which component it was.
    signal: (Option<Duration>, SignalSource),
    /// Work on the idle pool: its own limit and bucket (`None`: no pool made yet, or gone).
    idle: Option<IdleClass>,
    /// A CPU quota was seen when a runtime was attached.
    quota_seen: bool,
    /// The backlog brake paused the idle class too (only inside a quota: on a bare host the
    /// kernel already hands the cores to the foreground).
    idle_braked: bool,
}

impl Governor {
    /// `cpus` is `Some` when the builder fixed it; else `default_cpus` (available parallelism)
    /// holds until a runtime is attached.
    pub(crate) fn new(
        controller: StepController,
        fixed: Option<f64>,
        brake: bool,
        clock: QueueClock,
        cap_concurrency: bool,
        cpus: Option<f64>,
        default_cpus: f64,
    ) -> Governor {
        Governor {
            limit: fixed.unwrap_or(controller.share()),
            controller,
            fixed,
            brake: brake.then(Brake::default),
            clock,
            cap_concurrency,
            cpus: cpus.unwrap_or(default_cpus),
            cpus_source: if cpus.is_some() {
                CpusSource::Builder
            } else {
                CpusSource::AvailableParallelism
            },
            builder_cpus: cpus,
            ticks: 0,
            waits: VecDeque::new(),
            gates: Vec::new(),
            gates_made: 0,
            throttle: Some(ThrottleWatch::default()),
            headroom: Some(Headroom::default()),
            share: ShareCorrection::default(),
            signals: Signals::off(),
            signal: (None, SignalSource::None),
            idle: None,
            quota_seen: false,
            idle_braked: false,
        }
    }

    /// Steer by these components too.
    pub(crate) fn with_signals(mut self, signals: Signals) -> Governor {
        self.signals = signals;
        self
    }

    /// One tick: the brake, then rotate the probe window and read its p99, step the controller,
    /// set the bucket's rate and the holder cap, grant waiters. Returns the window it read.
    pub(crate) fn tick(&mut self, shared: &Shared, period: Duration) -> Window {
        self.brake_step(shared);
        shared.probe.rotate();
        let window = shared.probe.window();
        let intervals = shared.probe.config().intervals();
        // A throttled cgroup stopped the foreground too: over the target, whatever the probe saw.
        let throttled = self.throttle.as_mut().is_some_and(|w| w.tick(intervals));
        self.signals.tick(intervals);
        self.signal = if throttled {
            (Some(Duration::MAX), SignalSource::Throttled)
        } else {
            combine(window.queue_latency.all.p99, self.signals.reading())
        };
        let p99 = self.signal.0;
        // Grants waiters at the old rate and clears "had waiters since the last tick".
        let had_waiters = shared.queue.tick();
        // The I/O canaries matter only while something steers by the signal: elastic work
        // running or waiting, an idle class, a gate. Otherwise each one mostly wakes a parked
        // worker (~3 % of a core at 1 ms on an idle runtime), so they slow to the quiet period.
        let steering = had_waiters
            || shared.queue.snapshot().holders > 0
            || self.idle.is_some()
            || !self.gates.is_empty();
        self.signals.set_io_quiet(!steering);
        self.limit = match self.fixed {
            Some(fixed) => fixed,
            None => self.controller.tick(p99, period, had_waiters),
        };
        if !self.clock.is_manual() {
            let window_secs = window.intervals.max(1) as f64 * period.as_secs_f64();
            let process_cpu = ProcessCpuClock::now();
            let charged = shared.charged.total();
            self.share.tick(TickReading {
                process_cpu,
                charged,
                foreground_per_sec: window.queue_latency.foreground.count as f64 / window_secs,
                period,
            });
            let idle_charged = self
                .idle
                .as_ref()
                .and_then(IdleClass::shared)
                .map_or(Duration::ZERO, |class| class.charged.total());
            if let Some(headroom) = &mut self.headroom {
                headroom.tick(process_cpu, charged, idle_charged, period);
            }
        }
        shared.queue.set_rate(self.rate());
        self.cap_holders(shared);
        self.tick_idle(p99, period);
        self.ticks += 1;
        self.waits.push_back(shared.queue.take_longest_wait());
        while self.waits.len() > intervals {
            self.waits.pop_front();
        }
        let cpus = self.cpus;
        self.gates
            .retain_mut(|gate| gate.tick(p99, period, cpus, intervals));
        window
    }

    /// Step the idle class on the same signal (its own, looser target) and apply its limit.
    fn tick_idle(&mut self, p99: Option<Duration>, period: Duration) {
        let Some(idle) = &mut self.idle else {
            return;
        };
        let Some(class) = idle.shared() else {
            self.idle = None;
            return;
        };
        let had_waiters = class.queue.tick();
        idle.step(p99, period, had_waiters);
        self.apply_idle(&class);
    }

    /// The idle class's rate and holder cap for its limit on the CPUs.
    fn apply_idle(&self, class: &Shared) {
        let Some(idle) = &self.idle else {
            return;
        };
        let limit = self.capped(idle.limit(), Headroom::idle_cap_cpus);
        class
            .queue
            .set_rate(self.share.apply(rate_for(limit, self.cpus)));
        if self.cap_concurrency {
            class
                .queue
                .set_max_holders(Some(holder_cap(limit, self.cpus)));
        }
    }

    /// The idle class of `parent`: the one made before while it lives, else a new one.
    fn idle_class(&mut self, parent: &Arc<Shared>) -> Result<Arc<Shared>, SettingError> {
        if let Some(class) = self.idle.as_ref().and_then(IdleClass::shared) {
            return Ok(class);
        }
        let start = IdleStart {
            elastic_limit: self.limit,
            fixed: self.fixed,
            quota: self.quota_seen,
        };
        let rate = self.share.apply(rate_for(start.initial_share(), self.cpus));
        let queue = WorkQueue::new(self.clock.clone(), rate);
        let (class, link) = IdleClass::create(parent, queue, self.controller.config(), start)?;
        self.idle = Some(link);
        self.apply_idle(&class);
        Ok(class)
    }

    /// The idle class's limit (`None`: no idle pool).
    fn idle_limit(&self) -> Option<f64> {
        self.idle.as_ref().map(IdleClass::limit)
    }

    /// A new connection gate, steered from now on with the elastic limit.
    fn add_gate(
        &mut self,
        shared: &Shared,
        settings: &GateSettings,
    ) -> Result<Arc<GateShared>, elastic_cpu_core::SettingError> {
        let running: RunningTime = shared.running.clone();
        let (gate, link) = GateLink::create(
            settings,
            GateParts {
                controller: self.controller.config(),
                clock: self.clock.clone(),
                running,
                quantum: shared.quantum,
                os_yield: shared.os_yield,
                cpus: self.cpus,
                id: self.gates_made,
            },
        )?;
        self.gates_made += 1;
        link.brake(shared.braked());
        self.gates.push(link);
        Ok(gate)
    }

    /// The longest wait for a grant over the probe window (a waiter still queued counts with
    /// its wait so far).
    fn longest_wait(&self) -> Duration {
        self.waits.iter().copied().max().unwrap_or_default()
    }

    /// Engage or release the backlog brake. Returns whether it is on (the governor then
    /// re-checks every [`BRAKE_POLL`]). Runs on the governor thread (each tick and each
    /// wake-up), never on a worker: a lock, a clock read and an atomic store.
    pub(crate) fn brake_step(&mut self, shared: &Shared) -> bool {
        let Some(brake) = &mut self.brake else {
            return false;
        };
        match brake.step(self.clock.now(), &shared.probe) {
            Change::Keep => {}
            Change::Engage => {
                shared.queue.pause();
                shared.set_braked(true);
                self.gates.iter().for_each(|g| g.brake(true));
                if self.quota_seen {
                    if let Some(class) = self.idle.as_ref().and_then(IdleClass::shared) {
                        class.queue.pause();
                        class.set_braked(true);
                        self.idle_braked = true;
                    }
                }
            }
            Change::Release => {
                shared.set_braked(false);
                shared.queue.resume();
                self.gates.iter().for_each(|g| g.brake(false));
                if std::mem::take(&mut self.idle_braked) {
                    if let Some(class) = self.idle.as_ref().and_then(IdleClass::shared) {
                        class.set_braked(false);
                        class.queue.resume();
                    }
                }
            }
        }
        brake.is_on()
    }

    /// With the concurrency cap on: at most `ceil(limit × cpus)` grants at a time.
    fn cap_holders(&self, shared: &Shared) {
        if self.cap_concurrency {
            let limit = self.capped(self.limit, Headroom::cap_cpus);
            shared
                .queue
                .set_max_holders(Some(holder_cap(limit, self.cpus)));
        }
    }

    /// The token rate for the limit on the CPUs (within the quota's headroom), less what elastic
    /// work's overhead takes.
    pub(crate) fn rate(&self) -> u64 {
        let limit = self.capped(self.limit, Headroom::cap_cpus);
        self.share.apply(rate_for(limit, self.cpus))
    }

    /// `limit`, lowered to the share of the CPUs the quota's headroom leaves a class (`cap`),
    /// but never below the controller's floor: elastic work always moves.
    fn capped(&self, limit: f64, cap: fn(&Headroom) -> Option<f64>) -> f64 {
        match self.headroom.as_ref().and_then(cap) {
            Some(cpus) if self.cpus > 0.0 => {
                let floor = self.controller.config().min_share.min(limit);
                limit.min(cpus / self.cpus).max(floor)
            }
            _ => limit,
        }
    }

    /// CPUs the quota's headroom leaves elastic work now (`None`: no quota, or the cap is off).
    pub(crate) fn headroom_cpus(&self) -> Option<f64> {
        self.headroom.as_ref().and_then(Headroom::cap_cpus)
    }

    /// Size the bucket for `cpus` from `source` (unless the builder fixed it).
    fn attach_cpus(&mut self, shared: &Shared, cpus: f64, source: CpusSource) {
        if self.builder_cpus.is_none() {
            self.cpus = cpus;
            self.cpus_source = source;
            shared.queue.set_rate(self.rate());
            for link in &self.gates {
                if let Some(gate) = link.gate() {
                    link.apply(&gate, cpus);
                }
            }
            if let Some(class) = self.idle.as_ref().and_then(IdleClass::shared) {
                self.apply_idle(&class);
            }
        }
    }

    /// Leave the cgroup's throttling out of the signal.
    pub(crate) fn without_throttle_signal(mut self) -> Governor {
        self.throttle = None;
        self
    }

    /// Leave the quota's headroom cap off.
    pub(crate) fn without_quota_headroom(mut self) -> Governor {
        self.headroom = None;
        self
    }

    /// Watch the cgroup in `dir` for throttling from now on (if the signal is on).
    fn watch_throttling(&mut self, dir: PathBuf) {
        self.quota_seen = true;
        if let Some(watch) = &mut self.throttle {
            watch.watch(dir);
        }
    }

    /// A quota of `cpus` applies in the cgroup in `dir`: watch its throttling and cap elastic
    /// work within it from now on (each if on).
    fn watch_quota(&mut self, dir: PathBuf, cpus: f64) {
        self.watch_throttling(dir);
        if let Some(headroom) = &mut self.headroom {
            headroom.watch(cpus);
        }
    }

    /// Start the I/O wake-up probe on `handle`'s runtime.
    fn start_io_probe(
        &mut self,
        handle: &tokio::runtime::Handle,
        probe: &elastic_cpu_probe::ProbeConfig,
    ) -> Result<(), elastic_cpu_probe::IoProbeError> {
        self.signals.start_io(handle, probe)
    }

    /// Time spent braked (brakes that ended).
    fn braked_time(&self) -> Duration {
        self.brake.as_ref().map_or(Duration::ZERO, Brake::total)
    }
}

/// The governor as its thread and the `Elastic` handles share it: behind a lock, with what it
/// published last readable without the lock, so a snapshot never waits for a tick.
pub(crate) struct Control {
    governor: Mutex<Governor>,
    limit: AtomicF64,
    cpus: AtomicF64,
    cpus_source: AtomicU8,
    ticks: AtomicU64,
    braked_nanos: AtomicU64,
    longest_wait_nanos: AtomicU64,
    throttled_periods: AtomicU64,
    /// [`Governor::headroom_cpus`], NaN for `None`.
    headroom: AtomicF64,
    overhead: AtomicF64,
    /// The signal's components at the last tick (a lock for the few µs of a copy).
    signal: Mutex<(Reading, Option<Duration>, SignalSource)>,
    idle_limit: AtomicF64,
    has_idle: AtomicBool,
    /// The idle class, for snapshots (read without the governor's lock).
    idle: Mutex<Weak<Shared>>,
}

impl Control {
    /// Apply `governor`'s holder cap to `shared` and share it.
    pub(crate) fn new(governor: Governor, shared: &Shared) -> Control {
        governor.cap_holders(shared);
        let control = Control {
            limit: AtomicF64::default(),
            cpus: AtomicF64::default(),
            cpus_source: AtomicU8::new(0),
            ticks: AtomicU64::new(0),
            braked_nanos: AtomicU64::new(0),
            longest_wait_nanos: AtomicU64::new(0),
            throttled_periods: AtomicU64::new(0),
            headroom: AtomicF64::default(),
            overhead: AtomicF64::default(),
            signal: Mutex::new((Reading::default(), None, SignalSource::None)),
            idle_limit: AtomicF64::default(),
            has_idle: AtomicBool::new(false),
            idle: Mutex::new(Weak::new()),
            governor: Mutex::new(governor),
        };
        control.publish(&control.lock());
        control
    }

    /// Lock the governor; a panic in an earlier tick leaves its state usable. Queue operations
    /// run under this lock and wake the tasks they grant.
    fn lock(&self) -> MutexGuard<'_, Governor> {
        self.governor.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, g: &Governor) {
        self.limit.store(g.limit);
        self.cpus.store(g.cpus);
        self.cpus_source
            .store(encode_source(g.cpus_source), Ordering::Relaxed);
        self.ticks.store(g.ticks, Ordering::Relaxed);
        let braked = u64::try_from(g.braked_time().as_nanos()).unwrap_or(u64::MAX);
        self.braked_nanos.store(braked, Ordering::Relaxed);
        let longest = u64::try_from(g.longest_wait().as_nanos()).unwrap_or(u64::MAX);
        self.longest_wait_nanos.store(longest, Ordering::Relaxed);
        let throttled = g
            .throttle
            .as_ref()
            .map_or(0, ThrottleWatch::throttled_periods);
        self.throttled_periods.store(throttled, Ordering::Relaxed);
        self.headroom.store(g.headroom_cpus().unwrap_or(f64::NAN));
        self.overhead.store(g.share.overhead());
        let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
        signal.0.clone_from(g.signals.reading());
        (signal.1, signal.2) = g.signal;
        let idle = g.idle_limit();
        self.idle_limit.store(idle.unwrap_or(0.0));
        self.has_idle.store(idle.is_some(), Ordering::Relaxed);
    }

    /// One governor tick over `shared`, then the metrics export (outside the lock: an exporter
    /// may call back into the handle).
    pub(crate) fn tick(&self, shared: &Shared, period: Duration) {
        let mut g = self.lock();
        let _window = g.tick(shared, period);
        self.publish(&g);
        #[cfg(feature = "metrics")]
        let gates: Vec<_> = g.gates.iter().filter_map(GateLink::gate).collect();
        drop(g);
        #[cfg(feature = "metrics")]
        {
            crate::metrics::emit(&self.snapshot(shared, _window));
            for gate in gates {
                crate::metrics::emit_gate(&gate);
            }
        }
    }

    /// [`Governor::add_gate`].
    pub(crate) fn add_gate(
        &self,
        shared: &Shared,
        settings: &GateSettings,
    ) -> Result<Arc<GateShared>, elastic_cpu_core::SettingError> {
        self.lock().add_gate(shared, settings)
    }

    /// [`Governor::brake_step`]; returns whether the brake is on.
    pub(crate) fn brake_step(&self, shared: &Shared) -> bool {
        let mut g = self.lock();
        let on = g.brake_step(shared);
        self.publish(&g);
        on
    }

    /// [`Governor::attach_cpus`].
    pub(crate) fn attach_cpus(&self, shared: &Shared, cpus: f64, source: CpusSource) {
        let mut g = self.lock();
        g.attach_cpus(shared, cpus, source);
        self.publish(&g);
    }

    /// [`Governor::start_io_probe`].
    pub(crate) fn start_io_probe(
        &self,
        handle: &tokio::runtime::Handle,
        probe: &elastic_cpu_probe::ProbeConfig,
    ) -> Result<(), elastic_cpu_probe::IoProbeError> {
        let mut g = self.lock();
        let started = g.start_io_probe(handle, probe);
        g.signals.refresh_state();
        self.publish(&g);
        started
    }

    /// [`Governor::idle_class`].
    pub(crate) fn idle_class(&self, parent: &Arc<Shared>) -> Result<Arc<Shared>, SettingError> {
        let mut g = self.lock();
        let class = g.idle_class(parent)?;
        *self.idle.lock().unwrap_or_else(|p| p.into_inner()) = Arc::downgrade(&class);
        self.publish(&g);
        Ok(class)
    }

    /// [`Governor::watch_throttling`].
    #[cfg(feature = "test-util")]
    pub(crate) fn watch_throttling(&self, dir: PathBuf) {
        self.lock().watch_throttling(dir);
    }

    /// [`Governor::watch_quota`].
    pub(crate) fn watch_quota(&self, dir: PathBuf, cpus: f64) {
        self.lock().watch_quota(dir, cpus);
    }

    /// Whether the I/O wake-up signal is on.
    pub(crate) fn io_signal(&self) -> bool {
        self.lock().signals.io_on()
    }

    /// `cpus` as given to the builder.
    pub(crate) fn builder_cpus(&self) -> Option<f64> {
        self.lock().builder_cpus
    }

    /// The limit now.
    pub(crate) fn limit(&self) -> f64 {
        self.limit.load()
    }

    /// CPUs the rate is computed for.
    pub(crate) fn cpus(&self) -> f64 {
        self.cpus.load()
    }

    /// Where [`cpus`](Self::cpus) came from.
    pub(crate) fn cpus_source(&self) -> CpusSource {
        decode_source(self.cpus_source.load(Ordering::Relaxed))
    }

    /// Everything at once: what the governor published, the probe `window` and the queue's
    /// ledger.
    pub(crate) fn snapshot(&self, shared: &Shared, window: Window) -> Snapshot {
        let governed = Governed {
            limit: self.limit(),
            cpus: self.cpus(),
            cpus_source: self.cpus_source(),
            ticks: self.ticks.load(Ordering::Relaxed),
            braked: shared.braked(),
            braked_time: Duration::from_nanos(self.braked_nanos.load(Ordering::Relaxed)),
            longest_wait: Duration::from_nanos(self.longest_wait_nanos.load(Ordering::Relaxed)),
            throttled_periods: self.throttled_periods.load(Ordering::Relaxed),
            os_yields: shared.os_yields.load(Ordering::Relaxed),
            quota_headroom: Some(self.headroom.load()).filter(|c| !c.is_nan()),
            overhead: self.overhead.load(),
            signal: self
                .signal
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            idle_limit: self
                .has_idle
                .load(Ordering::Relaxed)
                .then(|| self.idle_limit.load()),
        };
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .upgrade();
        let idle_queue = idle.map(|class| class.queue.snapshot());
        Snapshot::new(governed, window, shared.queue.snapshot(), idle_queue)
    }
}

/// An `f64` in an `AtomicU64`, for values the governor publishes.
#[derive(Default)]
struct AtomicF64(AtomicU64);

impl AtomicF64 {
    fn load(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
    fn store(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed)
    }
}

/// What decides the CPUs the rate is computed for; read once, when a runtime is attached.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpusInputs<'a> {
    /// [`ElasticBuilder::cpus`](crate::ElasticBuilder::cpus), validated by the builder.
    pub(crate) builder: Option<f64>,
    /// The runtime's worker threads.
    pub(crate) workers: usize,
    /// The cgroup CPU quota.
    pub(crate) quota: &'a QuotaReading,
    /// CPUs in the affinity mask; `None`: unknown.
    pub(crate) affinity: Option<usize>,
    /// `std::thread::available_parallelism`; `None`: unknown.
    pub(crate) available: Option<usize>,
}

/// The CPUs the rate is computed for and where the figure came from: the builder's value if
/// given, else the least of the workers (at least 1), the quota (fractional) and the affinity
/// count, or available parallelism when the affinity is unknown. A figure that is not a
/// positive finite number is left out; on a tie the earlier in that order is named (see
/// [`CpusSource`]).
pub(crate) fn choose_cpus(inputs: &CpusInputs<'_>) -> (f64, CpusSource) {
    if let Some(cpus) = inputs.builder {
        return (cpus, CpusSource::Builder);
    }
    let mut best = (inputs.workers.max(1) as f64, CpusSource::Workers);
    let mut consider = |cpus: f64, source: CpusSource| {
        if cpus.is_finite() && cpus > 0.0 && cpus < best.0 {
            best = (cpus, source);
        }
    };
    if let QuotaReading::Limited(quota) = inputs.quota {
        consider(quota.cpus, CpusSource::Quota(quota.version));
    }
    match (
        inputs.affinity.filter(|&n| n > 0),
        inputs.available.filter(|&n| n > 0),
    ) {
        (Some(n), _) => consider(n as f64, CpusSource::Affinity),
        (None, Some(n)) => consider(n as f64, CpusSource::AvailableParallelism),
        (None, None) => {}
    }
    best
}

/// [`CpusSource`] as published in an atomic.
fn encode_source(source: CpusSource) -> u8 {
    match source {
        CpusSource::AvailableParallelism => 0,
        CpusSource::Builder => 1,
        CpusSource::Workers => 2,
        CpusSource::Quota(CgroupVersion::V1) => 3,
        CpusSource::Quota(CgroupVersion::V2) => 4,
        CpusSource::Affinity => 5,
    }
}

fn decode_source(code: u8) -> CpusSource {
    match code {
        1 => CpusSource::Builder,
        2 => CpusSource::Workers,
        3 => CpusSource::Quota(CgroupVersion::V1),
        4 => CpusSource::Quota(CgroupVersion::V2),
        5 => CpusSource::Affinity,
        _ => CpusSource::AvailableParallelism,
    }
}

/// The CPUs `limit` of `cpus` pays for, rounded up: the most elastic tasks that need to run at
/// once to use the limit.
pub(crate) fn holder_cap(limit: f64, cpus: f64) -> usize {
    let c = (limit * cpus).ceil();
    if c.is_finite() && c >= 1.0 {
        c.min(usize::MAX as f64) as usize
    } else {
        1
    }
}

/// Closes the queue when the governor thread ends for any reason (including a panic), so no
/// waiter waits for a grant that can no longer come.
struct CloseOnExit(Queue);

impl Drop for CloseOnExit {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Start the governor thread for `shared`. It ends when the last strong reference to `shared`
/// is gone (every `Elastic`, `Paced`, `PacedStream` and `Pacer` dropped).
pub(crate) fn spawn(
    shared: &Arc<Shared>,
    control: Arc<Control>,
    tick: Duration,
) -> std::io::Result<()> {
    let weak = Arc::downgrade(shared);
    let queue = shared.queue.clone();
    let handle = thread::Builder::new()
        .name("elastic-cpu-governor".into())
        .spawn(move || run(weak, control, queue, tick))?;
    // A backlog seen by the probe wakes the governor at once (the brake).
    shared.probe.notify_on_alarm(handle.thread().clone());
    shared.set_governor_thread(handle.thread().clone());
    Ok(())
}

fn run(weak: Weak<Shared>, control: Arc<Control>, queue: Queue, period: Duration) {
    let _close = CloseOnExit(queue);
    let mut last = Instant::now();
    let mut next = last + period;
    loop {
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let now = Instant::now();
        let braked = if now < next {
            // Woken early: by the probe's alarm, a brake re-check, or a shutdown.
            control.brake_step(&shared)
        } else {
            // The real period (the OS may wake us late); capped so a long stall is not one
            // giant step.
            control.tick(&shared, (now - last).min(period * 10));
            last = now;
            next += period;
            if next <= now {
                next = now + period;
            }
            shared.braked()
        };
        drop(shared);
        let until = if braked {
            next.min(now + BRAKE_POLL)
        } else {
            next
        };
        if let Some(wait) = until.checked_duration_since(Instant::now()) {
            thread::park_timeout(wait);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use elastic_cpu_probe::{CpuQuota, NoQuota};

    use super::*;

    fn quota(cpus: f64, version: CgroupVersion) -> QuotaReading {
        QuotaReading::Limited(CpuQuota {
            cpus,
            quota: Duration::from_millis(150),
            period: Duration::from_millis(100),
            version,
            cgroup_dir: PathBuf::from("/sys/fs/cgroup/cpu/svc"),
        })
    }

    fn unlimited() -> QuotaReading {
        QuotaReading::NoQuota(NoQuota::Unlimited {
            version: CgroupVersion::V2,
            cgroup_dir: PathBuf::from("/sys/fs/cgroup"),
        })
    }

    /// No builder value; 8 CPUs in the mask and available.
    fn inputs(workers: usize, quota: &QuotaReading) -> CpusInputs<'_> {
        CpusInputs {
            builder: None,
            workers,
            quota,
            affinity: Some(8),
            available: Some(8),
        }
    }

    #[test]
    fn no_quota() {
        let q = unlimited();
        assert_eq!(choose_cpus(&inputs(2, &q)), (2.0, CpusSource::Workers));
        let few_cpus = CpusInputs {
            affinity: Some(4),
            available: Some(4),
            ..inputs(16, &q)
        };
        assert_eq!(choose_cpus(&few_cpus), (4.0, CpusSource::Affinity));
        let unsupported = QuotaReading::NoQuota(NoQuota::Unsupported);
        assert_eq!(
            choose_cpus(&inputs(3, &unsupported)),
            (3.0, CpusSource::Workers)
        );
    }

    #[test]
    fn a_fractional_quota_stays_fractional() {
        let q = quota(1.5, CgroupVersion::V1);
        assert_eq!(
            choose_cpus(&inputs(2, &q)),
            (1.5, CpusSource::Quota(CgroupVersion::V1))
        );
        // available_parallelism rounds the quota down; it is not consulted when the mask is
        // known.
        let rounded = CpusInputs {
            available: Some(1),
            ..inputs(2, &q)
        };
        assert_eq!(
            choose_cpus(&rounded),
            (1.5, CpusSource::Quota(CgroupVersion::V1))
        );
        let q = quota(0.25, CgroupVersion::V2);
        assert_eq!(
            choose_cpus(&inputs(2, &q)),
            (0.25, CpusSource::Quota(CgroupVersion::V2))
        );
    }

    #[test]
    fn fewer_workers_than_the_quota() {
        let q = quota(4.0, CgroupVersion::V2);
        assert_eq!(choose_cpus(&inputs(2, &q)), (2.0, CpusSource::Workers));
        // A tie names the workers.
        let q = quota(2.0, CgroupVersion::V2);
        assert_eq!(choose_cpus(&inputs(2, &q)), (2.0, CpusSource::Workers));
    }

    #[test]
    fn a_narrow_affinity_mask_beats_the_quota() {
        let q = quota(1.5, CgroupVersion::V2);
        let pinned = CpusInputs {
            affinity: Some(1),
            available: Some(1),
            ..inputs(2, &q)
        };
        assert_eq!(choose_cpus(&pinned), (1.0, CpusSource::Affinity));
    }

    #[test]
    fn the_builder_value_wins() {
        let q = quota(1.5, CgroupVersion::V1);
        let given = CpusInputs {
            builder: Some(6.0),
            affinity: Some(1),
            ..inputs(2, &q)
        };
        assert_eq!(choose_cpus(&given), (6.0, CpusSource::Builder));
    }

    #[test]
    fn malformed_inputs_fall_back() {
        // An unreadable affinity mask: available_parallelism (which may round a quota down).
        let q = unlimited();
        let no_mask = CpusInputs {
            affinity: None,
            available: Some(1),
            ..inputs(2, &q)
        };
        assert_eq!(
            choose_cpus(&no_mask),
            (1.0, CpusSource::AvailableParallelism)
        );
        let zero_mask = CpusInputs {
            affinity: Some(0),
            ..no_mask
        };
        assert_eq!(
            choose_cpus(&zero_mask),
            (1.0, CpusSource::AvailableParallelism)
        );
        // Nothing known but the workers; no workers counts as one.
        let nothing = CpusInputs {
            affinity: None,
            available: None,
            ..inputs(0, &q)
        };
        assert_eq!(choose_cpus(&nothing), (1.0, CpusSource::Workers));
        // A malformed quota file is no quota.
        let malformed = QuotaReading::NoQuota(NoQuota::Malformed {
            path: PathBuf::from("/sys/fs/cgroup/svc/cpu.max"),
        });
        assert_eq!(
            choose_cpus(&inputs(2, &malformed)),
            (2.0, CpusSource::Workers)
        );
        // A quota figure that is no number of CPUs is left out.
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -1.5] {
            let q = quota(bad, CgroupVersion::V1);
            assert_eq!(
                choose_cpus(&inputs(2, &q)),
                (2.0, CpusSource::Workers),
                "{bad}"
            );
        }
    }

    #[test]
    fn every_source_survives_publishing() {
        for source in [
            CpusSource::Builder,
            CpusSource::Workers,
            CpusSource::Quota(CgroupVersion::V1),
            CpusSource::Quota(CgroupVersion::V2),
            CpusSource::Affinity,
            CpusSource::AvailableParallelism,
        ] {
            assert_eq!(decode_source(encode_source(source)), source);
        }
    }
}
