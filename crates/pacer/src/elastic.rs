//! `Elastic`: the handle users hold.

use std::borrow::BorrowMut;
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex};

use elastic_cpu_core::{StepController, WorkQueue};
use elastic_cpu_probe::{Probe, ProbeConfig};
use tokio::runtime::{Builder, Handle, Runtime};

use crate::config::{BuildError, ElasticBuilder};
use crate::governor::{self, Governor};
use crate::paced::Paced;
use crate::pacer::Pacer;
use crate::shared::Shared;
use crate::snapshot::Snapshot;

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
    governor: Arc<Mutex<Governor>>,
}

impl ElasticBuilder {
    /// Validate every setting and start the governor.
    pub fn build(self) -> Result<Elastic, BuildError> {
        let b = self;
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
        let default_cpus = std::thread::available_parallelism()
            .map(|n| n.get() as f64)
            .unwrap_or(1.0);
        let clock = b.queue_clock();
        let manual = clock.is_manual();
        let governor = Governor::new(
            controller,
            b.fixed_limit,
            brake.is_some(),
            clock.clone(),
            b.cap_concurrency,
            b.cpus,
            default_cpus,
        );
        let shared = Arc::new(Shared::new(
            WorkQueue::new(clock, governor.rate()),
            b.slice,
            b.quantum,
            b.running.clone(),
            probe,
        ));
        governor.cap_holders(&shared);
        let governor = Arc::new(Mutex::new(governor));
        if !manual {
            governor::spawn(&shared, governor.clone(), controller_config.tick)
                .map_err(BuildError::GovernorThread)?;
        }
        Ok(Elastic { shared, governor })
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
    /// [`attach`](Self::attach) with the runtime's handle.
    pub fn instrument<'a>(&self, builder: &'a mut Builder) -> &'a mut Builder {
        self.shared.probe.instrument(builder)
    }

    /// Tell this `Elastic` which runtime it governs: sizes the bucket for
    /// min(workers, available parallelism) (unless [`ElasticBuilder::cpus`] fixed it) and,
    /// without `tokio_unstable`, starts the sampling probe on it.
    pub fn attach(&self, handle: &Handle) {
        let workers = handle.metrics().num_workers().max(1) as f64;
        let cores = std::thread::available_parallelism()
            .map(|n| n.get() as f64)
            .unwrap_or(workers);
        governor::lock(&self.governor).attach_cpus(&self.shared, workers.min(cores));
        if matches!(Probe::source(), elastic_cpu_probe::Source::Sampler) {
            self.shared
                .keep_sampler(self.shared.probe.start_sampler(handle));
        }
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
        tokio::spawn(Paced::new(future, self.shared.clone()))
    }

    /// Run one governor tick now, with the configured tick as its period (feature
    /// `test-util`). The governor thread does this on its own; with
    /// [`ElasticBuilder::manual`] tests call it by hand.
    #[cfg(feature = "test-util")]
    pub fn tick(&self) {
        let period = self.shared.probe.config().tick;
        governor::tick(&self.governor, &self.shared, period);
    }

    /// The probe measuring the runtime.
    pub fn probe(&self) -> &Probe {
        &self.shared.probe
    }

    /// Everything at once: limit, latencies, ledger.
    pub fn snapshot(&self) -> Snapshot {
        let window = self.shared.probe.window();
        governor::lock(&self.governor).snapshot(&self.shared, window)
    }
}

impl std::fmt::Debug for Elastic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = governor::lock(&self.governor);
        f.debug_struct("Elastic")
            .field("limit", &g.limit())
            .field("cpus", &g.cpus())
            .finish_non_exhaustive()
    }
}

/// `Elastic`, `Paced` and `Pacer` move between threads (spawned tasks, the governor).
const _: () = {
    const fn is<T: Send + Sync>() {}
    is::<Elastic>();
    is::<Pacer>();
};

/// A tokio [`Builder`] wrapped by [`Elastic::runtime`]: [`build`](Self::build) installs the
/// probe and sizes the token bucket for the runtime's workers.
#[derive(Debug)]
pub struct RuntimeBuilder<'e, B> {
    elastic: &'e Elastic,
    builder: B,
}

impl<B: BorrowMut<Builder>> RuntimeBuilder<'_, B> {
    /// Build the runtime: probe hooks installed (or, without `tokio_unstable`, the sampling
    /// probe started), CPUs = min(workers, available parallelism).
    pub fn build(mut self) -> io::Result<Runtime> {
        let builder = self.builder.borrow_mut();
        self.elastic.instrument(builder);
        let rt = builder.build()?;
        self.elastic.attach(rt.handle());
        Ok(rt)
    }
}
