//! Where `Elastic::spawn` and its kin run elastic work: on the runtime, or on the idle pool.

use std::fmt;
use std::future::Future;

use tokio::runtime::{Handle, TryCurrentError};
use tokio::task::JoinHandle;

use super::Elastic;
use crate::grant::paced::Paced;

cfg_idle_pool! {
    use std::sync::Arc;

    use crate::idle::IdleRuntime;
    use crate::placement::placed::{OwnAbort, Placed};
    use crate::placement::{Environment, Route, Work};
}

/// Spawn the `Placed` that `make` builds on `handle`, its own task's abort handle given to it
/// once the task exists (to take itself back from the pool).
#[cfg(feature = "idle-pool")]
fn spawn_placed<F>(
    handle: &Handle,
    make: impl FnOnce(OwnAbort) -> Placed<F>,
) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let own = OwnAbort::default();
    let task = handle.spawn(make(own.clone()));
    let _ = own.set(task.abort_handle());
    task
}

/// Where [`Elastic::route`] sends one spawn.
#[cfg(feature = "idle-pool")]
enum Routed<W, T> {
    /// On the pool.
    Spawned(T),
    /// To the runtime.
    Runtime(W),
    /// To the runtime for now, to the pool once elastic work runs long.
    Watch(W),
}

impl Elastic {
    /// Spawn `future` as paced elastic work where it protects the foreground best (see
    /// [`Placement`](crate::settings::Placement)): by default on the runtime this thread is in
    /// (inside one of its tasks or `block_on`, or under [`Handle::enter`]); it moves to this
    /// `Elastic`'s idle-priority pool (made at the first spawn, a thread per CPU of the runtime)
    /// once its polls run long. [`Snapshot::placement`](crate::Snapshot::placement) says where, and why.
    ///
    /// Streams, futures and [`Pacer`](crate::Pacer) loops of this `Elastic` inside `future` pace themselves:
    /// `elastic.spawn(stream.paced(&elastic).for_each(..))` is paced once, per item, with a
    /// yield at the quantum.
    ///
    /// **Lifetime.** Spawned work runs to its end wherever it was placed, also once the last
    /// `Elastic` handle is dropped: on the runtime as any task, and on the pool, which ends
    /// once its tasks have (the paced work keeps the governor alive, as all paced work does).
    /// [`shutdown`](Self::shutdown) cancels what is left on the pool; on the runtime it is
    /// the runtime's to end.
    ///
    /// On the runtime, outside any it returns [`SpawnError`] where [`tokio::spawn`] would panic;
    /// [`spawn_on`](Self::spawn_on) takes a runtime's handle.
    ///
    /// ```
    /// use elastic_cpu_pacer::{settings::Placement, Elastic};
    /// let elastic = Elastic::builder().placement(Placement::Runtime).build()?;
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
    #[track_caller]
    pub fn spawn<F>(&self, future: F) -> Result<JoinHandle<F::Output>, SpawnError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.place(future, || Handle::try_current().map_err(SpawnError))
    }

    /// [`spawn`](Self::spawn) from any thread: the same placement, with `handle`'s runtime
    /// where `spawn` takes the current one (for work placed on the runtime, or watched from it
    /// under [`Placement::Auto`](crate::settings::Placement::Auto)). The arguments come in the
    /// order of tokio's `task::Builder::spawn_on`.
    ///
    /// ```
    /// let elastic = elastic_cpu_pacer::Elastic::builder().build()?;
    /// let rt = elastic.runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2)).build()?;
    /// let task = elastic.spawn_on(async { 6 * 7 }, rt.handle());
    /// assert_eq!(rt.block_on(task)?, 42);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn spawn_on<F>(&self, future: F, handle: &Handle) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match self.place(future, || Ok::<_, std::convert::Infallible>(handle.clone())) {
            Ok(task) => task,
            Err(never) => match never {},
        }
    }

    /// Spawn `future` where the placement says, on the runtime `runtime` gives where it goes
    /// there.
    #[track_caller]
    fn place<F, E>(
        &self,
        future: F,
        runtime: impl Fn() -> Result<Handle, E>,
    ) -> Result<JoinHandle<F::Output>, E>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        #[cfg(feature = "idle-pool")]
        let on_pool = |pool: &IdleRuntime, future| match runtime() {
            // `Auto`: watched from the runtime, to come back if the pool starves.
            Ok(handle) if self.placer.auto() => spawn_placed(&handle, |own| {
                Placed::on_pool(
                    future,
                    pool,
                    self.shared.clone(),
                    Arc::downgrade(&self.placer),
                    own,
                )
            }),
            // In this handle's class: on the pool the own class's work becomes idle work, and
            // a class made with `class` keeps its part.
            _ => pool.handle().spawn(Paced::new(future, self.shared.clone())),
        };
        #[cfg(feature = "idle-pool")]
        let workers = || runtime().map_or(0, |rt| rt.metrics().num_workers());
        #[cfg(feature = "idle-pool")]
        let future = match self.route(Work::Future, on_pool, future, workers) {
            Routed::Spawned(task) => return Ok(task),
            Routed::Runtime(future) => future,
            Routed::Watch(future) => {
                return Ok(spawn_placed(&runtime()?, |own| {
                    Placed::new(
                        future,
                        self.shared.clone(),
                        Arc::downgrade(&self.placer),
                        own,
                    )
                }));
            }
        };
        let handle = runtime()?;
        Ok(handle.spawn(Paced::new(future, self.shared.clone())))
    }

    /// Run `f`, blocking work that paces itself with [`Pacer::pace_blocking`](crate::Pacer::pace_blocking): on the idle
    /// pool's blocking threads (at idle priority too) wherever [`spawn`](Self::spawn) has the
    /// pool, else on the runtime's (`spawn_blocking`). With
    /// [`Placement::Auto`](crate::settings::Placement::Auto) that is wherever the OS grants
    /// idle priority, short calls or long: a blocking thread holds no worker, so the quantum
    /// frees nothing, and at normal priority it takes cores from the foreground's other threads.
    /// Dropping that runtime waits for the work, which still runs at its share: call
    /// [`shutdown`](Self::shutdown) first (the work then runs unpaced) or use tokio's
    /// `Runtime::shutdown_timeout`.
    ///
    /// ```
    /// let elastic = elastic_cpu_pacer::Elastic::builder().build()?;
    /// let rt = elastic.runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2)).build()?;
    /// let _in_rt = rt.enter();
    /// let mut pacer = elastic.pacer();
    /// let sum = elastic.spawn_blocking(move || {
    ///     let mut sum = 0u64;
    ///     for row in 0..10_000u64 {
    ///         pacer.pace_blocking();
    ///         sum += row;
    ///     }
    ///     sum
    /// })?;
    /// assert_eq!(rt.block_on(sum)?, 49_995_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn_blocking<F, R>(&self, f: F) -> Result<JoinHandle<R>, SpawnError>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        #[cfg(feature = "idle-pool")]
        let workers = || Handle::try_current().map_or(0, |rt| rt.metrics().num_workers());
        #[cfg(feature = "idle-pool")]
        let f = match self.route(
            Work::Blocking,
            |pool, f| pool.handle().spawn_blocking(f),
            f,
            workers,
        ) {
            Routed::Spawned(task) => return Ok(task),
            // Blocking work is never watched: it goes to the pool wherever there is one.
            Routed::Runtime(f) | Routed::Watch(f) => f,
        };
        let handle = Handle::try_current().map_err(SpawnError)?;
        Ok(handle.spawn_blocking(f))
    }

    /// `spawn(pool)` if elastic work goes to the idle pool (deciding the first time), else
    /// `work` back with where it goes.
    /// `runtime_workers`: the worker threads of the runtime work goes to there.
    #[cfg(feature = "idle-pool")]
    fn route<W, T>(
        &self,
        kind: Work,
        spawn: impl FnOnce(&IdleRuntime, W) -> T,
        work: W,
        runtime_workers: impl FnOnce() -> usize,
    ) -> Routed<W, T> {
        let environment = || {
            let record = self.control.record();
            Environment {
                workers: record
                    .cpus
                    .ceil()
                    .clamp(1.0, IdleRuntime::MAX_WORKERS as f64) as usize,
                runtime_workers: runtime_workers(),
            }
        };
        let make_pool = |workers| self.idle_runtime(workers);
        let spawn = |route: Route<'_>| match route {
            Route::Pool(pool) => Routed::Spawned(spawn(pool, work)),
            Route::Runtime => Routed::Runtime(work),
            Route::Watch => Routed::Watch(work),
        };
        self.placer.with(kind, environment, make_pool, spawn)
    }
}

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
