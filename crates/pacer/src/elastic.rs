//! `Elastic`: the handle users hold.

use std::borrow::BorrowMut;
use std::fmt;
use std::future::Future;
use std::io;
use std::sync::Arc;

use elastic_cpu_core::{SettingError, StepController, WorkQueue};
use elastic_cpu_probe::{cpu_affinity, cpu_quota, Probe, ProbeConfig, QuotaReading};
use tokio::runtime::{Builder, Handle, Runtime, TryCurrentError};
use tokio::task::JoinHandle;

use crate::config::{BuildError, ElasticBuilder};
use crate::gate::{ConnectionGate, GateSettings};
use crate::governor::{self, choose_cpus, Control, CpusInputs, Governor};
use crate::idle_pool::IdleRuntime;
use crate::paced::Paced;
use crate::pacer::Pacer;
use crate::shared::Shared;
use crate::signal::Signals;
use crate::snapshot::Snapshot;

/// Elastic CPU admission for one tokio runtime: the probe that measures it, the controller
/// that decides the limit (the elastic share of the CPUs), and the token bucket that enforces
/// it. Cheap to clone.
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
///
/// # Tokens
///
/// Tokens are CPU time. At limit `u` on `n` CPUs the bucket refills at `u × n` CPU-seconds per
/// second and holds at most one second of that. It starts full: one second of tokens at the
/// initial rate, `u × n` CPU-seconds, where `u` is the [`fixed_limit`], else the
/// [`initial_share`], else the [`min_share`], and `n` is [`cpus`] if given, else
/// `available_parallelism`. So elastic work may take up to that much at once right after the
/// build before it is held to the rate. Attaching a runtime resizes the bucket for its CPUs
/// (unless [`cpus`] was given: the least of its worker threads, the cgroup CPU quota kept
/// fractional, and the CPUs in the affinity mask; see [`CpusSource`](crate::CpusSource))
/// and keeps it full: a new rate moves the balance by the change in the one-second burst
/// (a lower limit can push it into debt).
///
/// # Threads
///
/// [`build`](ElasticBuilder::build) starts one OS thread, the governor
/// (`elastic-cpu-governor`), unless the builder has a manual clock (feature `test-util`). It
/// belongs to no runtime: it outlives the runtime it governs, and ends only once the last
/// `Elastic`, [`Paced`], [`PacedStream`](crate::PacedStream) and [`Pacer`] made from this
/// handle is dropped (then it closes the work queue, so nothing waits for a grant that cannot
/// come). Without `tokio_unstable`, [`attach`](Self::attach) also starts a sampling probe
/// thread on the runtime (`sched-probe-sampler`); it is stopped and joined at that same last
/// drop, and also ends by itself soon after its runtime shuts down.
///
/// [`fixed_limit`]: ElasticBuilder::fixed_limit
/// [`initial_share`]: ElasticBuilder::initial_share
/// [`min_share`]: ElasticBuilder::min_share
/// [`cpus`]: ElasticBuilder::cpus
#[derive(Clone)]
pub struct Elastic {
    pub(crate) shared: Arc<Shared>,
    control: Arc<Control>,
}

impl ElasticBuilder {
    /// Validate every setting and start the governor.
    pub fn build(self) -> Result<Elastic, BuildError> {
        let controller_config = self.validate()?;
        let brake = self.resolved_brake(&controller_config);
        let probe = Probe::new(ProbeConfig {
            tick: controller_config.tick,
            window: controller_config.window,
            alarm_at: brake,
            ..self.probe.clone()
        })?;
        let initial = self.initial_share.unwrap_or(controller_config.min_share);
        let controller = StepController::with_initial_share(controller_config.clone(), initial)?;
        let default_cpus = std::thread::available_parallelism()
            .map(|n| n.get() as f64)
            .unwrap_or(1.0);
        let clock = self.queue_clock();
        let manual = clock.is_manual();
        let governor = Governor::new(
            controller,
            self.fixed_limit,
            brake.is_some(),
            clock.clone(),
            self.cap_concurrency,
            self.cpus,
            default_cpus,
        );
        let governor = if self.throttle_signal {
            governor
        } else {
            governor.without_throttle_signal()
        };
        let governor = if self.quota_headroom {
            governor
        } else {
            governor.without_quota_headroom()
        };
        let shared = Arc::new(Shared::new(
            WorkQueue::new(clock, governor.rate()),
            self.slice,
            self.quantum,
            self.os_yield,
            self.running.clone(),
            probe,
        ));
        // A manual clock steers by the probe the test drives, nothing measured for real.
        let governor = if manual {
            governor
        } else {
            governor.with_signals(Signals::new(
                &shared.threads,
                self.io_signal,
                self.run_queue_signal,
            ))
        };
        let control = Arc::new(Control::new(governor, &shared));
        if !manual {
            governor::spawn(&shared, control.clone(), controller_config.tick)
                .map_err(BuildError::GovernorThread)?;
        }
        Ok(Elastic { shared, control })
    }
}

impl Elastic {
    /// Start building: defaults from [`Profile::Default`](crate::Profile::Default).
    pub fn builder() -> ElasticBuilder {
        ElasticBuilder::default()
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
    /// [`attach`](Self::attach) with the runtime's handle (and, for the I/O wake-up signal,
    /// [`start_io_probe`](Self::start_io_probe)).
    ///
    /// Besides the task hooks, it sets the thread hooks `on_thread_start`, `on_thread_park` and
    /// `on_thread_stop` (registering the runtime's threads for the run-queue signal,
    /// [`ElasticBuilder::run_queue_signal`]): hooks of those names set before are replaced, so
    /// set your own after this call, and yours replace ours (that signal then sees no thread).
    pub fn instrument<'a>(&self, builder: &'a mut Builder) -> &'a mut Builder {
        self.shared.threads.instrument(builder);
        self.shared.probe.instrument(builder)
    }

    /// Start the I/O wake-up probe ([`ElasticBuilder::io_signal`]) on `handle`'s runtime, which
    /// must have its I/O driver enabled (`enable_io()` / `enable_all()`);
    /// [`runtime`](Self::runtime) does this for you. Replaces a probe started before. Off by
    /// setting (or on a manual clock): does nothing. Fails with
    /// [`IoProbeError::IoDisabled`](elastic_cpu_probe::IoProbeError::IoDisabled) on a runtime
    /// without I/O (tokio panics there and the probe catches it: a program built with
    /// `panic = "abort"` aborts; see [`IoProbe::start`](elastic_cpu_probe::IoProbe::start)).
    /// [`Snapshot::io_probe`] says what happened.
    ///
    /// ```
    /// let elastic = elastic_cpu_pacer::Elastic::builder().build()?;
    /// let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_io().build()?;
    /// elastic.attach(rt.handle());
    /// elastic.start_io_probe(rt.handle())?;
    /// assert!(elastic.snapshot().io_probe.is_on());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn start_io_probe(&self, handle: &Handle) -> Result<(), elastic_cpu_probe::IoProbeError> {
        self.control
            .start_io_probe(handle, self.shared.probe.config())
    }

    /// Tell this `Elastic` which runtime it governs: sizes the bucket (unless
    /// [`ElasticBuilder::cpus`] fixed it) for the least of the runtime's worker threads, the
    /// cgroup CPU quota (fractional: 1.5 CPUs stay 1.5) and the CPUs the process may run on (its
    /// affinity mask; `available_parallelism` when that cannot be read), and, without
    /// `tokio_unstable`, starts the sampling probe on it. [`Snapshot::cpus_source`] says which
    /// figure it took. The quota and the mask are read here, once (a few small files). With a
    /// quota, the governor watches the cgroup's throttling and holds elastic work within what
    /// the foreground leaves of the quota from now on ([`ElasticBuilder::throttle_signal`],
    /// [`ElasticBuilder::quota_headroom`]).
    pub fn attach(&self, handle: &Handle) {
        let quota = cpu_quota();
        let (cpus, source) = choose_cpus(&CpusInputs {
            builder: self.control.builder_cpus(),
            workers: handle.metrics().num_workers(),
            quota: &quota,
            affinity: cpu_affinity(),
            available: std::thread::available_parallelism().ok().map(|n| n.get()),
        });
        self.control.attach_cpus(&self.shared, cpus, source);
        if let QuotaReading::Limited(quota) = quota {
            self.control.watch_quota(quota.cgroup_dir, quota.cpus);
        }
        if matches!(Probe::source(), elastic_cpu_probe::Source::Sampler) {
            self.shared
                .keep_sampler(self.shared.probe.start_sampler(handle));
        }
    }

    /// Build an [`IdleRuntime`] of `workers` threads at the lowest OS priority, for elastic
    /// work paced by this `Elastic` in its idle class: a bucket and a limit of its own, up to
    /// every CPU, steered by 4 × the target and the cgroup's throttling (see [`IdleRuntime`]).
    /// Every pool made from one `Elastic` shares that class. The foreground runtime is the one
    /// given to [`runtime`](Self::runtime) or [`attach`](Self::attach): the limit follows its
    /// probe, and its CPUs size the bucket; a quota seen there when the first pool is made
    /// starts the class at the elastic limit instead of every CPU. Use it for self-contained CPU work; work that shares
    /// locks with the foreground belongs in same-runtime [`paced`](crate::PacedExt::paced)
    /// work (see [`IdleRuntime`]: at idle priority a lock holder starves).
    ///
    /// Errors: `workers == 0` is an [`io::ErrorKind::InvalidInput`] error wrapping a
    /// [`SettingError`](elastic_cpu_core::SettingError); the OS refusing to start threads is the runtime builder's error. The
    /// OS refusing to lower the priority is not an error: [`IdleRuntime::priority`] says what
    /// the threads got.
    ///
    /// ```
    /// let elastic = elastic_cpu_pacer::Elastic::builder().build()?;
    /// let err = elastic.idle_runtime(0).err().unwrap();
    /// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn idle_runtime(&self, workers: usize) -> io::Result<IdleRuntime> {
        IdleRuntime::check_workers(workers)?;
        let class = self
            .control
            .idle_class(&self.shared)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        IdleRuntime::new(self.shared.clone(), class, workers)
    }

    /// A [`Pacer`] for one loop of elastic work.
    pub fn pacer(&self) -> Pacer {
        Pacer::new(self.shared.clone())
    }

    /// Spawn `future` as paced elastic work on the runtime this thread is in (inside one of
    /// its tasks or `block_on`, or under [`Handle::enter`]). Outside any runtime it returns
    /// [`SpawnError`] where [`tokio::spawn`] would panic; from outside, use
    /// [`spawn_on`](Self::spawn_on).
    ///
    /// ```
    /// use elastic_cpu_pacer::Elastic;
    /// let elastic = Elastic::builder().build()?;
    /// // No runtime on this thread: an error, not a panic.
    /// assert!(elastic.spawn(async {}).is_err());
    ///
    /// let rt = elastic.runtime(tokio::runtime::Builder::new_current_thread()).build()?;
    /// let sum = rt.block_on(async {
    ///     let scan = elastic.spawn(async { (0..1000u64).sum::<u64>() })?;
    ///     Ok::<_, Box<dyn std::error::Error>>(scan.await?)
    /// })?;
    /// assert_eq!(sum, 499_500);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn<F>(&self, future: F) -> Result<JoinHandle<F::Output>, SpawnError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let handle = Handle::try_current().map_err(SpawnError)?;
        Ok(self.spawn_on(&handle, future))
    }

    /// Spawn `future` as paced elastic work on `handle`'s runtime, from any thread.
    ///
    /// ```
    /// let elastic = elastic_cpu_pacer::Elastic::builder().build()?;
    /// let rt = elastic.runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2)).build()?;
    /// let task = elastic.spawn_on(rt.handle(), async { 6 * 7 });
    /// assert_eq!(rt.block_on(task)?, 42);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn_on<F>(&self, handle: &Handle, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        handle.spawn(Paced::new(future, self.shared.clone()))
    }

    /// Watch the cgroup in `cgroup_dir` for CPU throttling, as [`attach`](Self::attach) does for
    /// the process's own cgroup when it has a quota (feature `test-util`): tests point it at a
    /// fake `cpu.stat`.
    #[cfg(feature = "test-util")]
    pub fn watch_throttling(&self, cgroup_dir: impl Into<std::path::PathBuf>) {
        self.control.watch_throttling(cgroup_dir.into());
    }

    /// Treat the cgroup in `cgroup_dir` as the process's, with a quota of `cpus`, as
    /// [`attach`](Self::attach) does when it finds one (feature `test-util`): the governor
    /// watches its throttling and caps elastic work within the quota's headroom.
    #[cfg(feature = "test-util")]
    pub fn watch_quota(&self, cgroup_dir: impl Into<std::path::PathBuf>, cpus: f64) {
        self.control.watch_quota(cgroup_dir.into(), cpus);
    }

    /// Run one governor tick now, with the configured tick as its period (feature
    /// `test-util`). The governor thread does this on its own; with
    /// [`ElasticBuilder::manual`] tests call it by hand.
    #[cfg(feature = "test-util")]
    pub fn tick(&self) {
        let period = self.shared.probe.config().tick;
        self.control.tick(&self.shared, period);
    }

    /// A [`ConnectionGate`]: connection setups admitted while they can start within their
    /// deadlines and paced as their own class of CPU time, its share steered by the same
    /// scheduling latency on the same governor tick (docs/design.md §5). Fails with the
    /// [`SettingError`] of the first bad setting. The gate does not keep this `Elastic` alive.
    ///
    /// ```
    /// use elastic_cpu_pacer::{Elastic, GateSettings};
    /// let elastic = Elastic::builder().build()?;
    /// let gate = elastic.connection_gate(GateSettings::new())?;
    /// assert_eq!(gate.snapshot().admitted, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn connection_gate(&self, settings: GateSettings) -> Result<ConnectionGate, SettingError> {
        let shared = self.control.add_gate(&self.shared, &settings)?;
        Ok(ConnectionGate { shared })
    }

    /// The probe measuring the runtime.
    pub fn probe(&self) -> &Probe {
        &self.shared.probe
    }

    /// Everything at once: the limit, latencies, the token ledger, the brake.
    pub fn snapshot(&self) -> Snapshot {
        let window = self.shared.probe.window();
        self.control.snapshot(&self.shared, window)
    }
}

impl fmt::Debug for Elastic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Elastic")
            .field("limit", &self.control.limit())
            .field("cpus", &self.control.cpus())
            .field("cpus_source", &self.control.cpus_source())
            .finish_non_exhaustive()
    }
}

/// `Elastic`, `Paced` and `Pacer` move between threads (spawned tasks, the governor).
const _: () = {
    const fn is<T: Send + Sync>() {}
    is::<Elastic>();
    is::<Pacer>();
};

/// Why [`Elastic::spawn`] spawned nothing: there is no tokio runtime on this thread (or it is
/// being torn down). [`Elastic::spawn_on`] takes the runtime's handle instead.
#[derive(Debug)]
pub struct SpawnError(TryCurrentError);

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot spawn elastic work: {}", self.0)
    }
}

impl std::error::Error for SpawnError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// A tokio [`Builder`] wrapped by [`Elastic::runtime`]: [`build`](Self::build) installs the
/// probe and sizes the token bucket for the runtime's workers.
#[derive(Debug)]
pub struct RuntimeBuilder<'e, B> {
    elastic: &'e Elastic,
    builder: B,
}

impl<B: BorrowMut<Builder>> RuntimeBuilder<'_, B> {
    /// Build the runtime: probe hooks installed (or, without `tokio_unstable`, the sampling
    /// probe started), CPUs = the least of its workers, the cgroup CPU quota and the affinity
    /// mask (see [`Elastic::attach`]). With the I/O signal on (the default,
    /// [`ElasticBuilder::io_signal`]) it enables the runtime's I/O driver and starts the I/O
    /// wake-up probe ([`Elastic::start_io_probe`]); a probe that cannot start is no error
    /// ([`Snapshot::io_probe`] says why).
    pub fn build(mut self) -> io::Result<Runtime> {
        let builder = self.builder.borrow_mut();
        self.elastic.instrument(builder);
        let io = self.elastic.control.io_signal();
        if io {
            builder.enable_io();
        }
        let rt = builder.build()?;
        self.elastic.attach(rt.handle());
        if io {
            let _said_in_the_snapshot = self.elastic.start_io_probe(rt.handle());
        }
        Ok(rt)
    }
}
