//! `Elastic`: the handle users hold.

use std::borrow::BorrowMut;
use std::fmt;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use elastic_cpu_core::SettingError;
use tokio::runtime::{Builder, Handle};

use crate::builder::{BuildError, ElasticBuilder};
#[cfg(feature = "gate")]
use crate::gate::{ConnectionGate, GateSettings};
use crate::governor::Control;
use crate::grant::class_state::ClassState;
use crate::grant::pacer::Pacer;
use crate::placement::Placer;
use crate::record::ClassKind;
use crate::settings::ClassSettings;
use crate::snapshot::Snapshot;

mod runtime_builder;
mod spawn;

pub use self::runtime_builder::RuntimeBuilder;
pub use self::spawn::SpawnError;

cfg_idle_pool! {
    use crate::idle::IdleRuntime;
}

/// Elastic CPU admission for one tokio runtime: the probe that measures it, the controller
/// that decides the share (the part of the CPUs elastic work may use), and the token bucket
/// that enforces it. Cheap to clone.
///
/// ```
/// use elastic_cpu_pacer::{Elastic, PacedExt};
/// let elastic = Elastic::builder().build()?;
/// let rt = elastic.runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2)).build()?;
/// let scan = rt.spawn(async { (0..1_000_000u64).map(|x| x % 7).sum::<u64>() }.paced(&elastic));
/// rt.block_on(scan)?;
/// let s = elastic.snapshot();
/// assert!(s.share > 0.0 && s.cpus >= 1.0);
/// elastic.shutdown(); // or just drop it: the threads end once nothing uses them
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Tokens
///
/// Tokens are CPU time. At share `u` of `n` CPUs the bucket refills at `u × n` CPU-seconds per
/// second and holds at most one second of that. It starts full: one second of tokens at the
/// initial rate, where `u` is the [`fixed_share`], else the [`initial_share`], else the lower
/// bound of the [`share`], and `n` is [`cpus`] if given, else `available_parallelism`. So
/// elastic work may take up to that much at once right after the build before it is held to the
/// rate. Attaching a runtime resizes the bucket for its CPUs (unless [`cpus`] was given: the
/// least of its worker threads, the cgroup CPU quota kept fractional, and the CPUs in the
/// affinity mask; see [`CpusSource`](crate::snapshot::CpusSource)) and keeps it full: a new rate
/// moves the balance by the change in the one-second burst (a lower share can push it into
/// debt).
///
/// # Threads
///
/// [`build`](ElasticBuilder::build) starts one OS thread, the governor
/// (`elastic-cpu-governor`), unless the builder has a manual clock (feature `test-util`). It
/// belongs to no runtime: it outlives the runtime it governs. Without `tokio_unstable`,
/// [`attach`](Self::attach) also starts a sampling probe thread on the runtime
/// (`elastic-cpu-sampler`), which also ends by itself soon after its runtime shuts down.
/// [`shutdown`](Self::shutdown) stops and joins both; without it they end once the last
/// `Elastic`, [`Paced`](crate::Paced), [`PacedStream`](crate::PacedStream) and [`Pacer`] made from this handle
/// is dropped. Either way the work queues and gates close and no brake holds, so nothing waits
/// for a grant that cannot come: paced work left then runs unpaced, gates refuse. The same
/// happens however else the governor thread ends (a panic): it is not restarted, and
/// [`Snapshot::governor`] says why it stopped. A panic in the installed `metrics` recorder does
/// not end it (see [`Snapshot::recorder_panics`]).
///
/// [`fixed_share`]: ElasticBuilder::fixed_share
/// [`initial_share`]: ElasticBuilder::initial_share
/// [`share`]: ElasticBuilder::share
/// [`cpus`]: ElasticBuilder::cpus
#[derive(Clone)]
pub struct Elastic {
    pub(crate) shared: Arc<ClassState>,
    pub(crate) control: Arc<Control>,
    /// Where `spawn` puts elastic work, and the pool it made: held by the handles only, so the
    /// pool (whose threads hold `shared`) ends with the last handle.
    placer: Arc<Placer>,
}

/// How long [`Elastic::shutdown`] waits for the idle pool's threads.
const POOL_SHUTDOWN: Duration = Duration::from_secs(5);

impl ElasticBuilder {
    /// Validate every setting and start the governor.
    pub fn build(self) -> Result<Elastic, BuildError> {
        let (shared, control, placement) = self.start()?;
        let placer = Arc::new(Placer::new(placement, shared.long_polls.clone()));
        Ok(Elastic {
            shared,
            control,
            placer,
        })
    }

    /// Run `main` on a multi-thread tokio runtime governed by the [`Elastic`] built from these
    /// settings, and return its output: what `#[tokio::main]` does, with full resolution. The
    /// runtime (every driver on, one worker per CPU) is built through [`Elastic::runtime`], so
    /// it has the probe's task hooks where the library is built with `--cfg tokio_unstable`
    /// ([`ProbeSource::TaskHooks`](crate::snapshot::ProbeSource::TaskHooks); the sampling
    /// probe otherwise), the run-queue thread hooks and the I/O wake-up probe. A runtime built
    /// elsewhere and given to [`Elastic::attach`] has no hooks: it is always sampled.
    ///
    /// `main` gets the `Elastic`; inside it, [`Elastic::spawn`] puts work on this runtime. Once
    /// it returns, the `Elastic` is [shut down](Elastic::shutdown) (paced work left runs
    /// unpaced, the idle pool's tasks are cancelled) and the runtime dropped, which cancels its
    /// tasks as `#[tokio::main]` does. Fails with the first bad setting, or with
    /// [`BuildError::Runtime`] where tokio or the OS refuses the runtime.
    ///
    /// ```
    /// use elastic_cpu_pacer::{snapshot::ProbeSource, Elastic};
    /// let source = Elastic::builder().run(|elastic| async move {
    ///     let sum = elastic.spawn(async { (0..1_000u64).sum::<u64>() }).unwrap();
    ///     assert_eq!(sum.await.unwrap(), 499_500);
    ///     elastic.snapshot().probe_source
    /// })?;
    /// // `TaskHooks` where the library was built with `--cfg tokio_unstable`, else `Sampler`.
    /// assert_ne!(source, ProbeSource::None);
    /// # Ok::<(), elastic_cpu_pacer::BuildError>(())
    /// ```
    pub fn run<F, Fut>(self, main: F) -> Result<Fut::Output, BuildError>
    where
        F: FnOnce(Elastic) -> Fut,
        Fut: Future,
    {
        let elastic = self.build()?;
        let mut builder = Builder::new_multi_thread();
        builder.enable_all();
        let rt = elastic
            .runtime(builder)
            .build()
            .map_err(BuildError::Runtime)?;
        let output = rt.block_on(main(elastic.clone()));
        elastic.shutdown();
        drop(rt);
        Ok(output)
    }
}

impl Elastic {
    /// Start building: every setting at its default.
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
    /// [`Inputs::run_queue`](crate::settings::Inputs::run_queue)): hooks of those names set before are replaced, so
    /// set your own after this call, and yours replace ours (that signal then sees no thread).
    pub fn instrument<'a>(&self, builder: &'a mut Builder) -> &'a mut Builder {
        let root = self.shared.root_class();
        root.threads.instrument(builder);
        root.probe.instrument(builder)
    }

    /// Start the I/O wake-up probe ([`Inputs::io_wakeup`](crate::settings::Inputs::io_wakeup)) on `handle`'s runtime, which
    /// must have its I/O driver enabled (`enable_io()` / `enable_all()`);
    /// [`runtime`](Self::runtime) does this for you. Replaces a probe started before. Off by
    /// setting (or on a manual clock): does nothing. Fails with
    /// [`IoProbeError::IoDisabled`](crate::IoProbeError::IoDisabled) on a runtime
    /// without I/O (tokio panics there and the probe catches it: a program built with
    /// `panic = "abort"` aborts; see [`IoProbe::start`](elastic_cpu_probe::IoProbe::start)).
    /// [`Snapshot::io_probe`] says what happened.
    ///
    /// ```
    /// let elastic = elastic_cpu_pacer::Elastic::builder().build()?;
    /// let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_io().build()?;
    /// elastic.attach(rt.handle())?;
    /// elastic.start_io_probe(rt.handle())?;
    /// assert!(elastic.snapshot().io_probe.is_on());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn start_io_probe(&self, handle: &Handle) -> Result<(), crate::IoProbeError> {
        self.control
            .start_io_probe(handle, self.shared.probe.config())
    }

    /// Tell this `Elastic` which runtime it governs: sizes the buckets (unless
    /// [`ElasticBuilder::cpus`] fixed them) for the least of the runtime's worker threads, the
    /// cgroup CPU quota (fractional: 1.5 CPUs stay 1.5) and the CPUs the process may run on (its
    /// affinity mask; `available_parallelism` when that cannot be read), and, where the task
    /// hooks are not installed (no `tokio_unstable`, or a runtime not built through
    /// [`runtime`](Self::runtime) or [`instrument`](Self::instrument)), starts the sampling
    /// probe on it, whose tasks also register the workers they run on for the run-queue delay
    /// (where no thread hooks did). [`Snapshot::cpus_source`] says which figure it took. The
    /// quota and the mask are read here (a few small files), and again by the governor every
    /// [`ElasticBuilder::quota_reread`] (an in-place resize, a vertical autoscaler): the CPUs,
    /// the rates and holder caps, the headroom and the quota brake follow a change from that
    /// tick on ([`Snapshot::quota_changes`] counts them). With a quota, the governor watches
    /// the cgroup's throttling and holds elastic work within what the foreground leaves of the
    /// quota (see [`Inputs`](crate::settings::Inputs)).
    ///
    /// Fails, changing nothing, where the OS refuses the sampling probe's thread (a pids or
    /// thread limit in a container: `EAGAIN`, [`io::ErrorKind::WouldBlock`]); without it the
    /// governor would steer on no latency at all.
    ///
    /// A runtime built elsewhere (`#[tokio::main]`, a framework's) is governed this way, measured
    /// by the sampler even with `tokio_unstable` (it has no task hooks);
    /// [`ElasticBuilder::run`] builds one with them in place of `#[tokio::main]`:
    ///
    /// ```
    /// #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// async fn main() -> Result<(), Box<dyn std::error::Error>> {
    ///     let elastic = elastic_cpu_pacer::Elastic::builder().build()?;
    ///     let handle = tokio::runtime::Handle::current();
    ///     elastic.attach(&handle)?; // the bucket, and the sampling probe
    ///     elastic.start_io_probe(&handle)?; // the I/O wake-up signal
    ///     let sum = elastic.spawn(async { (0..1_000u64).sum::<u64>() })?.await?;
    ///     assert_eq!(sum, 499_500);
    ///     Ok(())
    /// }
    /// ```
    pub fn attach(&self, handle: &Handle) -> io::Result<()> {
        // Without the task hooks (no `tokio_unstable`, or a runtime built without `instrument`:
        // `#[tokio::main]`) the sampler measures the runtime. On a manual clock the test drives
        // the probe: no sampler records real latencies. Started first: if the OS refuses its
        // thread, nothing has changed.
        let root = self.shared.root_class();
        let sampler = if !root.probe.has_hooks() && !self.control.is_manual() {
            Some(
                root.probe
                    .start_sampler_registering(handle, &root.threads)?,
            )
        } else {
            None
        };
        self.control.attach(handle.metrics().num_workers());
        if let Some(sampler) = sampler {
            root.keep_sampler(sampler);
        }
        Ok(())
    }

    /// Build an [`IdleRuntime`] of `workers` threads at the lowest OS priority, for elastic
    /// work paced by this `Elastic` in its idle class: a bucket and a share of its own, up to
    /// every CPU, steered by 4 × the target, the cgroup's throttling and the quota's headroom,
    /// and held to the elastic share while the threads beside the runtime wait over their
    /// allowance (see [`IdleRuntime`]). Every pool made from one `Elastic` shares that class. The
    /// foreground runtime is the one given to [`runtime`](Self::runtime) or
    /// [`attach`](Self::attach): the share follows its signal, and its CPUs size the bucket; a
    /// quota seen there when the first pool is made starts the class at the elastic share
    /// instead of every CPU. Use it for self-contained CPU work; work that shares locks with the
    /// foreground belongs in same-runtime [`paced`](crate::PacedExt::paced) work (see
    /// [`IdleRuntime`]: at idle priority a lock holder starves). Feature `idle-pool` (default).
    ///
    /// Errors: `workers` outside `1 ..=` [`IdleRuntime::MAX_WORKERS`] is a
    /// [`BuildError::Setting`]; the OS refusing to start the pool's threads a
    /// [`BuildError::PoolThreads`]. The OS refusing to lower the priority is not an error:
    /// [`IdleRuntime::priority`] says what the threads got.
    ///
    /// ```
    /// use elastic_cpu_pacer::BuildError;
    /// let elastic = elastic_cpu_pacer::Elastic::builder().build()?;
    /// let Err(BuildError::Setting(e)) = elastic.idle_runtime(0) else { panic!() };
    /// assert_eq!(e.setting, "idle_runtime(workers)");
    /// assert!(elastic.idle_runtime(1_000_000).is_err()); // a task count, not a CPU count
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "idle-pool")]
    #[cfg_attr(docsrs, doc(cfg(feature = "idle-pool")))]
    pub fn idle_runtime(&self, workers: usize) -> Result<IdleRuntime, BuildError> {
        IdleRuntime::check_workers(workers)?;
        let root = self.shared.root_class();
        let class = self.control.idle_class(root)?;
        IdleRuntime::new(root.clone(), class, workers).map_err(BuildError::PoolThreads)
    }

    /// A class of this `Elastic`'s elastic work: a handle like this one (everything it offers
    /// for elastic work: [`paced`](crate::PacedExt::paced), [`pacer`](Self::pacer),
    /// [`spawn`](Self::spawn), [`spawn_blocking`](Self::spawn_blocking), on the idle pool too)
    /// whose work gets its own part of the elastic share. The governor splits the share its
    /// controller decides among the classes with work, by weight, within caps, floors kept
    /// ([`ClassSettings`]); a class whose work stops gives its part to the others at the next
    /// tick. Work paced through this handle itself is the class `"default"`, of weight 1:
    /// nothing changes until a second class exists. Within a class grants are FIFO; each class
    /// has its own bucket, so an overrun is debt of the class that ran it. Settings, the
    /// snapshot, the gates and [`shutdown`](Self::shutdown) are the `Elastic`'s: the same from
    /// every handle. [`Snapshot::classes`] lists the classes. The class ends with its last
    /// handle and paced work.
    ///
    /// Fails with a [`SettingError`] on a bad setting (weight 0, a cap above 1, a floor above
    /// the cap) or a name another live class has.
    ///
    /// ```
    /// use elastic_cpu_pacer::{settings::ClassSettings, Elastic, PacedExt};
    /// let elastic = Elastic::builder().build()?;
    /// let backups = elastic.class(ClassSettings::new("backup").weight(3.0))?;
    /// let exports = elastic.class(ClassSettings::new("export"))?;
    /// let rt = elastic.runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2)).build()?;
    /// let backup = rt.spawn(async { (0..1000u64).sum::<u64>() }.paced(&backups));
    /// let export = rt.spawn(async { (0..10u64).product::<u64>() }.paced(&exports));
    /// assert_eq!(rt.block_on(backup)?, 499_500);
    /// assert_eq!(rt.block_on(export)?, 0);
    /// assert!(elastic.class(ClassSettings::new("export")).is_err(), "the name is taken");
    /// assert!(elastic.class(ClassSettings::new("bad").weight(0.0)).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn class(&self, settings: ClassSettings) -> Result<Elastic, SettingError> {
        let shared = self
            .control
            .add_member(self.shared.root_class(), &settings)?;
        Ok(Elastic {
            shared,
            control: self.control.clone(),
            placer: self.placer.clone(),
        })
    }

    /// A [`Pacer`] for one loop of elastic work.
    pub fn pacer(&self) -> Pacer {
        Pacer::new(self.shared.clone())
    }

    /// A [`ConnectionGate`]: connection setups admitted while they can start within their
    /// deadlines and paced as their own class of CPU time, its share steered by the same signal
    /// on the same governor tick. Fails with the [`SettingError`] of the first bad setting. The
    /// gate does not keep this `Elastic` alive. Feature `gate` (default).
    ///
    /// ```
    /// use elastic_cpu_pacer::{gate::GateSettings, Elastic};
    /// let elastic = Elastic::builder().build()?;
    /// let gate = elastic.connection_gate(GateSettings::new())?;
    /// assert_eq!(gate.snapshot().admitted, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "gate")]
    #[cfg_attr(docsrs, doc(cfg(feature = "gate")))]
    pub fn connection_gate(&self, settings: GateSettings) -> Result<ConnectionGate, SettingError> {
        let shared = self.control.add_gate(self.shared.root_class(), &settings)?;
        Ok(ConnectionGate { shared })
    }

    /// Move the bounds of the share on a live `Elastic`, validated as the builder's
    /// [`share`](ElasticBuilder::share) (a bad pair is a [`SettingError`] and changes nothing;
    /// so is an `Elastic` with a [`fixed_share`](ElasticBuilder::fixed_share)). Applied at
    /// once: the share moves into the new bounds, the token rate follows, and the controller
    /// steps within them from the next tick. Idle pools and gates made later take their floor
    /// from them; those made before keep theirs. [`Snapshot::min_share`] and
    /// [`Snapshot::max_share`] show the bounds in force.
    ///
    /// ```
    /// let elastic = elastic_cpu_pacer::Elastic::builder().build()?;
    /// elastic.set_share(0.2, 0.5)?;
    /// let s = elastic.snapshot();
    /// assert_eq!((s.min_share, s.max_share, s.share), (0.2, 0.5, 0.2));
    /// assert_eq!(elastic.set_share(0.5, 0.2).unwrap_err().setting, "max_share");
    /// assert_eq!(elastic.snapshot().max_share, 0.5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_share(&self, min: f64, max: f64) -> Result<(), SettingError> {
        self.control.set_share(min, max)
    }

    /// Pause elastic work (every class of this `Elastic`, its idle pool's included; not the
    /// gates, whose setups are the foreground's): no new grants from now on; grants held now run
    /// to their end; work waiting for a grant stays in line, and the share holds. Calling it
    /// again does nothing. [`Snapshot::paused`] says so.
    ///
    /// ```
    /// let elastic = elastic_cpu_pacer::Elastic::builder().build()?;
    /// elastic.pause();
    /// assert!(elastic.snapshot().paused);
    /// elastic.resume();
    /// assert!(!elastic.snapshot().paused);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pause(&self) {
        self.control.set_paused(true);
    }

    /// End a [`pause`](Self::pause): the work waiting is granted, in order, as the tokens
    /// allow. Without a pause it does nothing.
    pub fn resume(&self) {
        self.control.set_paused(false);
    }

    /// Everything at once: the share, the signal and its components, the token ledger, the
    /// brake.
    pub fn snapshot(&self) -> Snapshot {
        let root = self.shared.root_class();
        let mut s = self.control.snapshot(root, root.probe.window());
        (s.placement, s.placement_reason) = self.placer.decided();
        s.idle_returns = self.placer.idle_returns();
        s
    }

    /// Stop the governor and sampler threads and join them, stop the I/O probe, shut down the
    /// idle pool [`spawn`](Self::spawn) made (cancelling its tasks; joined unless called inside
    /// a runtime), and close every work queue and gate of this `Elastic` (every clone of it):
    /// paced work left runs unpaced from now on, gates refuse. Calling it again does nothing.
    /// Dropping every handle without it also ends the threads, without waiting for them.
    ///
    /// ```
    /// let elastic = elastic_cpu_pacer::Elastic::builder().build()?;
    /// elastic.shutdown();
    /// assert!(elastic.snapshot().queue.closed);
    /// # Ok::<(), elastic_cpu_pacer::BuildError>(())
    /// ```
    pub fn shutdown(&self) {
        self.control.shutdown();
        self.shared.root_class().stop_samplers();
        self.placer.shutdown(POOL_SHUTDOWN);
    }
}

impl fmt::Debug for Elastic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let record = self.control.record();
        f.debug_struct("Elastic")
            .field("share", &record.class(ClassKind::Elastic).map(|c| c.share))
            .field("cpus", &record.cpus)
            .field("cpus_source", &record.cpus_source)
            .finish_non_exhaustive()
    }
}

/// `Elastic`, `Paced` and `Pacer` move between threads (spawned tasks, the governor).
const _: () = {
    const fn is<T: Send + Sync>() {}
    is::<Elastic>();
    is::<Pacer>();
};
