//! `Elastic`: the handle users hold.

use std::borrow::BorrowMut;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use elastic_cpu_core::{rate_for, MonotonicClock, QueueSnapshot, StepController, WorkQueue};
use elastic_cpu_probe::{Probe, ProbeConfig, Window};
use tokio::runtime::{Builder, Handle};

use crate::config::{BuildError, ElasticBuilder};
use crate::governor::GovernorState;
use crate::shared::{AtomicF64, QueueClock, Shared};
use crate::{PacedExt, Pacer, RuntimeBuilder};

/// Elastic CPU admission for one tokio runtime: the probe that measures it, the controller
/// that decides the elastic share, and the token bucket that enforces it. Cheap to clone.
///
/// ```
/// use elastic_cpu_pacer::{Elastic, PacedExt};
/// let elastic = Elastic::builder().build()?;
/// let rt = elastic.runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2)).build()?;
/// let scan = rt.spawn(async { (0..1_000_000u64).map(|x| x % 7).sum::<u64>() }.paced(&elastic));
/// rt.block_on(scan)?;
/// let s = elastic.snapshot();
/// assert!(s.limit > 0.0 && s.cpus >= 1.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Elastic {
    pub(crate) shared: Arc<Shared>,
}

/// What [`Elastic::snapshot`] reports: always available, no exporter needed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Elastic share of the runtime's CPUs currently allowed.
    pub limit: f64,
    /// CPUs the token rate is computed for.
    pub cpus: f64,
    /// Governor ticks so far.
    pub ticks: u64,
    /// p99 scheduling latency of all tasks over the probe window (`None`: no data).
    pub sched_p99: Option<Duration>,
    /// p99 poll time of foreground tasks over the window.
    pub fg_poll_p99: Option<Duration>,
    /// p99 poll time of elastic polls over the window.
    pub elastic_poll_p99: Option<Duration>,
    /// Token balance in CPU nanoseconds (negative: debt).
    pub balance_nanos: i64,
    /// Elastic work waiting for a grant.
    pub waiters: usize,
    /// CPU nanoseconds granted.
    pub acquired_nanos: u64,
    /// Granted nanoseconds given back unused.
    pub returned_nanos: u64,
    /// Nanoseconds run past grants (charged as debt).
    pub over_limit_nanos: u64,
    /// Nanoseconds elastic work ran, as measured (`acquired − returned + over_limit` once settled).
    pub used_nanos: u64,
    /// The backlog brake is on now.
    pub braked: bool,
    /// Times the backlog brake engaged.
    pub brakes: u64,
    /// Time spent braked (brakes that ended).
    pub braked_time: Duration,
    /// The whole probe window.
    pub window: Window,
    /// The whole queue ledger.
    pub queue: QueueSnapshot,
}

impl Elastic {
    /// Start building: defaults from [`Profile::Default`](crate::Profile::Default).
    pub fn builder() -> ElasticBuilder {
        ElasticBuilder::default()
    }

    pub(crate) fn from_builder(b: ElasticBuilder) -> Result<Elastic, BuildError> {
        let controller_config = b.validate()?;
        let brake = b.resolved_brake(&controller_config);
        let probe = Probe::new(ProbeConfig {
            tick: controller_config.tick,
            window: controller_config.window,
            alarm_at: brake,
            ..b.probe.clone()
        })?;
        let initial = b.initial_limit.unwrap_or(controller_config.min_limit);
        let controller = StepController::with_initial_limit(controller_config.clone(), initial)?;
        let limit = b.fixed_limit.unwrap_or(initial);
        let default_cpus = std::thread::available_parallelism()
            .map(|n| n.get() as f64)
            .unwrap_or(1.0);
        let cpus = b.cpus.unwrap_or(default_cpus);
        let clock = match &b.manual {
            Some(c) => QueueClock::Manual(c.clone()),
            None => QueueClock::Monotonic(MonotonicClock::new()),
        };
        let shared = Arc::new(Shared {
            queue: Arc::new(WorkQueue::new(clock.clone(), rate_for(limit, cpus))),
            clock,
            brake: brake.map(|_| Mutex::new(crate::brake::Brake::default())),
            braked: AtomicBool::new(false),
            cap_concurrency: b.cap_concurrency,
            probe,
            slice: b.slice,
            quantum: b.quantum,
            running: b.running.clone(),
            limit: AtomicF64::new(limit),
            cpus: AtomicF64::new(cpus),
            cpus_fixed: AtomicBool::new(b.cpus.is_some()),
            ticks: AtomicU64::new(0),
            governor: Mutex::new(GovernorState {
                controller,
                fixed: b.fixed_limit,
            }),
            governor_thread: Mutex::new(None),
            samplers: Mutex::new(Vec::new()),
        });
        shared.cap_holders(limit);
        if b.manual.is_none() {
            crate::governor::spawn(&shared, controller_config.tick)
                .map_err(BuildError::GovernorThread)?;
        }
        Ok(Elastic { shared })
    }

    /// Wrap a tokio runtime builder: its `build()` installs the probe and sizes the bucket for
    /// the runtime's workers. Takes the builder by value or by `&mut`.
    pub fn runtime<B: BorrowMut<Builder>>(&self, builder: B) -> RuntimeBuilder<'_, B> {
        RuntimeBuilder {
            elastic: self,
            builder,
        }
    }

    /// Install the probe's hooks on a builder you build yourself; then call
    /// [`attach`](Self::attach) with the runtime's handle.
    pub fn instrument<'a>(&self, builder: &'a mut Builder) -> &'a mut Builder {
        self.shared.probe.instrument(builder)
    }

    /// Tell this `Elastic` which runtime it governs: sizes the bucket for
    /// min(workers, available parallelism) (unless [`ElasticBuilder::cpus`] fixed it) and,
    /// without `tokio_unstable`, starts the sampling probe on it.
    pub fn attach(&self, handle: &Handle) {
        if !self.shared.cpus_fixed.load(Ordering::Relaxed) {
            let workers = handle.metrics().num_workers().max(1) as f64;
            let cores = std::thread::available_parallelism()
                .map(|n| n.get() as f64)
                .unwrap_or(workers);
            self.set_cpus(workers.min(cores));
        }
        if matches!(Probe::source(), elastic_cpu_probe::Source::Sampler) {
            let sampler = self.shared.probe.start_sampler(handle);
            self.shared
                .samplers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(sampler);
        }
    }

    fn set_cpus(&self, cpus: f64) {
        self.shared.cpus.store(cpus);
        self.shared
            .queue
            .set_rate(rate_for(self.shared.limit.load(), cpus));
    }

    /// A [`Pacer`] for one loop of elastic work.
    pub fn pacer(&self) -> Pacer {
        Pacer::new(self.shared.clone())
    }

    /// Spawn `future` on the current runtime as paced elastic work.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, like [`tokio::spawn`].
    pub fn spawn<F>(&self, future: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        tokio::spawn(future.paced(self))
    }

    /// Run one governor tick now, with the configured tick as its period. The governor thread
    /// does this on its own; with [`ElasticBuilder::manual`] tests call it by hand.
    pub fn tick(&self) {
        let period = self.shared.probe.config().tick;
        self.shared.tick(period);
    }

    /// The probe measuring the runtime.
    pub fn probe(&self) -> &Probe {
        &self.shared.probe
    }

    /// Everything at once: limit, latencies, ledger.
    pub fn snapshot(&self) -> Snapshot {
        let window = self.shared.probe.window();
        let queue = self.shared.queue.snapshot();
        let braked_time = self.shared.brake.as_ref().map_or(Duration::ZERO, |b| {
            b.lock().unwrap_or_else(|p| p.into_inner()).total
        });
        Snapshot {
            braked: self.shared.braked(),
            // Only the brake pauses the queue.
            brakes: queue.pauses,
            braked_time,
            limit: self.shared.limit.load(),
            cpus: self.shared.cpus.load(),
            ticks: self.shared.ticks.load(Ordering::Relaxed),
            sched_p99: window.queue_latency.all.p99,
            fg_poll_p99: window.poll_time.foreground.p99,
            elastic_poll_p99: window.poll_time.elastic.p99,
            balance_nanos: queue.balance_nanos,
            waiters: queue.waiters,
            acquired_nanos: queue.acquired_nanos,
            returned_nanos: queue.returned_nanos,
            over_limit_nanos: queue.over_limit_nanos,
            used_nanos: queue.used_nanos,
            window,
            queue,
        }
    }
}

impl std::fmt::Debug for Elastic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elastic")
            .field("limit", &self.shared.limit.load())
            .field("cpus", &self.shared.cpus.load())
            .finish_non_exhaustive()
    }
}

/// `Elastic`, `Paced` and `Pacer` move between threads (spawned tasks, the governor).
const _: () = {
    const fn is<T: Send + Sync>() {}
    is::<Elastic>();
    is::<crate::Pacer>();
};
