//! The idle-priority elastic pool: a companion tokio runtime whose threads run at the lowest
//! priority the OS offers (`SCHED_IDLE` on Linux), for elastic work that is still paced by the
//! same `Elastic` that governs the foreground runtime.

use std::fmt;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use elastic_cpu_core::SettingError;
use tokio::runtime::{Builder, Handle, Runtime};
use tokio::task::JoinHandle;

use super::spread::Spread;
use super::watch::{PoolWatch, PULSE};
use crate::grant::paced::Paced;
use crate::grant::class_state::ClassState;
use crate::grant::thread_class;

/// How long [`Elastic::idle_runtime`] waits for its worker threads to start and report the
/// priority they got (they start at once; this only bounds a stuck OS).
const START_WAIT: Duration = Duration::from_secs(5);

/// The priority the idle pool's threads got from the OS.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IdlePriority {
    /// Linux `SCHED_IDLE`: the kernel runs the thread only when no normal thread wants its
    /// core, and preempts it the moment one does.
    SchedIdle,
    /// Not Linux: the lowest priority the OS offers normal threads (nice 19, or the platform's
    /// minimum). Foreground threads win most contention, not all of it.
    Lowest,
    /// The OS refused to lower the priority (or no thread has started): the pool runs at
    /// normal priority, so it is a plain second runtime, still paced.
    Unchanged,
}

impl IdlePriority {
    /// How the priority is named in output: `SCHED_IDLE`, `lowest (nice 19)`, `normal`.
    pub fn describe(self) -> &'static str {
        match self {
            IdlePriority::SchedIdle => "SCHED_IDLE",
            IdlePriority::Lowest => "lowest (nice 19 or the platform's minimum)",
            IdlePriority::Unchanged => "normal (the OS refused a lower priority)",
        }
    }

    fn code(self) -> u8 {
        match self {
            IdlePriority::SchedIdle => 1,
            IdlePriority::Lowest => 2,
            IdlePriority::Unchanged => 3,
        }
    }

    fn from_code(c: u8) -> IdlePriority {
        match c {
            1 => IdlePriority::SchedIdle,
            2 => IdlePriority::Lowest,
            _ => IdlePriority::Unchanged,
        }
    }
}

impl fmt::Display for IdlePriority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// Lower the calling thread to the lowest priority the OS offers.
#[cfg(target_os = "linux")]
fn lower_this_thread() -> IdlePriority {
    use thread_priority::unix::{
        set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy,
        ThreadSchedulePolicy,
    };
    use thread_priority::ThreadPriority;
    let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
    match set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle) {
        Ok(()) => IdlePriority::SchedIdle,
        Err(_) => IdlePriority::Unchanged,
    }
}

/// Lower the calling thread to the lowest priority the OS offers.
#[cfg(not(target_os = "linux"))]
fn lower_this_thread() -> IdlePriority {
    match thread_priority::set_current_thread_priority(thread_priority::ThreadPriority::Min) {
        Ok(()) => IdlePriority::Lowest,
        Err(_) => IdlePriority::Unchanged,
    }
}

/// What the pool's threads report as they start: how many started, and the worst priority any
/// of them got (a pool is only as idle as its least idle thread).
struct Started {
    count: Mutex<usize>,
    cv: Condvar,
    worst: AtomicU8,
}

impl Started {
    fn record(&self, got: IdlePriority) {
        self.worst.fetch_max(got.code(), Ordering::SeqCst);
        let mut n = self.count.lock().unwrap_or_else(|e| e.into_inner());
        *n += 1;
        self.cv.notify_all();
    }

    fn wait_for(&self, threads: usize) {
        let n = self.count.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self.cv.wait_timeout_while(n, START_WAIT, |n| *n < threads);
    }

    fn priority(&self) -> IdlePriority {
        match self.worst.load(Ordering::SeqCst) {
            0 => IdlePriority::Unchanged,
            c => IdlePriority::from_code(c),
        }
    }
}

/// A companion tokio runtime for elastic work, its threads at the lowest OS priority
/// (`SCHED_IDLE` on Linux), made by [`Elastic::idle_runtime`](crate::Elastic::idle_runtime).
/// Work on it is the [`Elastic`](crate::Elastic)'s *idle class*: paced by a token bucket of its
/// own, with a share of its own, steered on the same tick by the *foreground* runtime's probe.
/// Everything spawned through [`spawn`](Self::spawn) runs in it, and so does anything paced by
/// that `Elastic` (`.paced(&elastic)`, a [`Pacer`](crate::Pacer)) that first asks for CPU on one
/// of the pool's threads.
///
/// ```
/// use elastic_cpu_pacer::Elastic;
/// let elastic = Elastic::builder().build()?;
/// let fg = elastic
///     .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all())
///     .build()?;
/// let idle = elastic.idle_runtime(2)?;
/// println!("elastic threads at {}", idle.priority());
/// let scan = idle.spawn(async { (0..1_000_000u64).map(|x| x % 7).sum::<u64>() });
/// let total = fg.block_on(scan)?;
/// assert_eq!(total, 2_999_997);
/// // The idle class has its own share: on a bare host it starts at every CPU.
/// assert!(elastic.snapshot().idle_share.is_some());
/// idle.shutdown_timeout(std::time::Duration::from_secs(1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Its own share
///
/// The kernel keeps elastic threads off a core the moment a foreground thread wants it, so a
/// foreground task never waits behind an elastic poll (same-runtime [`paced`] work makes it wait
/// up to one poll quantum). Holding that work to the same-runtime share would buy the
/// foreground little and cost the elastic work most of its CPU. So the idle class takes what
/// the kernel lets it, up to every CPU
/// ([`Snapshot::idle_share`](crate::Snapshot::idle_share), 1.0 at most), and steps down only
///
/// * when the foreground's p99 scheduling latency passes **4 × the target** (the level at which
///   the backlog brake acts): the foreground really waits, which idle priority cannot always
///   prevent (memory bandwidth, SMT siblings, a hypervisor);
/// * when the process's cgroup is throttled (inside a CPU quota, a container's limit): idle
///   threads spend the quota like any other, and unpaced they get the whole cgroup throttled,
///   foreground included. There it starts at the elastic share and takes the backlog brake;
/// * to the elastic share, while the threads beside the runtime (a client library's, at normal
///   priority) wait longer than their allowance over their quiet wait (with a measured
///   target): on a core busy with idle work their wake-ups queue and preempt rather than find
///   an idle one.
///
/// Its polls do not yield at the poll quantum (a yield on an idle thread lets no foreground
/// task in; the kernel does that). A [`fixed_share`](crate::ElasticBuilder::fixed_share) holds
/// for the idle class too. The two classes' shares are separate: work in both may together
/// take more than either share on a bare host.
///
/// # When to use same-runtime `paced` instead
///
/// At idle priority, elastic work runs only while a core is otherwise idle. If it holds a lock
/// (a `std::sync::Mutex`, a database page latch, a connection pool slot) that a foreground task
/// needs, the foreground waits for a thread the kernel will not run while the foreground keeps
/// the cores busy: priority inversion, and the foreground can stall for as long as the cores
/// stay busy. Use same-runtime [`paced`] work when elastic work shares locks or other
/// exclusive resources with the foreground, when it must make progress on a saturated machine
/// (at idle priority it gets nothing there; paced it gets at least the controller's floor), or
/// where lowering a thread's priority is not allowed. Use the idle pool for self-contained
/// CPU work (scans, encoding, compression) that touches the foreground only through channels.
///
/// # Threads and the probe
///
/// The pool's runtime has no probe hooks: its polls never enter the foreground runtime's
/// scheduling-latency signal (without `tokio_unstable`, paced polls still feed their poll
/// times to the probe as elastic poll times, as on any runtime). Its worker threads (and its
/// blocking-pool threads) are named `elastic-cpu-idle` and lower their own priority as they
/// start. On Linux each keeps to one of the CPUs the building thread may run on, taken in
/// turn: an unpinned idle thread is pulled to whichever core is idle each time a foreground
/// thread preempts it, and carrying its working set from cache to cache thousands of times a
/// second slows the foreground. Tasks still move between the pool's threads at polls; a call in
/// progress waits on its core while a foreground thread holds it. A task on the pool stamps a
/// pulse every 100 ms, and a thread at normal priority
/// (`elastic-cpu-idle-watch`) looks at it: work [`Placement::Auto`] put here comes back to
/// the runtime while the pool has had no CPU for ~0.3 s, so a lock it holds is let go.
/// Dropping the `IdleRuntime` shuts it down like dropping a tokio [`Runtime`]; use
/// [`shutdown_timeout`](Self::shutdown_timeout) to bound the wait. The pool's own threads are
/// what cancel its tasks, and while normal threads keep every core busy they get next to no
/// CPU: there only `shutdown_timeout` or [`shutdown_background`](Self::shutdown_background)
/// bounds how long a shutdown takes.
///
/// [`paced`]: crate::PacedExt::paced
/// [`Placement::Auto`]: crate::settings::Placement::Auto
pub struct IdleRuntime {
    rt: Runtime,
    /// Whether the pool's threads get CPU, for the work `Auto` put here.
    watch: Arc<PoolWatch>,
    /// The pacing state of the idle class of the `Elastic` it was made from.
    shared: Arc<ClassState>,
    started: Arc<Started>,
}

/// How often a pool whose last `Elastic` handle is gone looks whether its tasks have ended.
const DRAIN_POLL: Duration = Duration::from_millis(10);

impl IdleRuntime {
    /// The most worker threads a pool may have: past this a pool is a mistake (a count of
    /// tasks, not of CPUs) that would start threads until the OS refuses.
    pub const MAX_WORKERS: usize = 1024;

    /// `workers` outside `1 ..= MAX_WORKERS` is a [`SettingError`] (checked before anything is
    /// made).
    pub(crate) fn check_workers(workers: usize) -> Result<(), SettingError> {
        if !(1..=IdleRuntime::MAX_WORKERS).contains(&workers) {
            return Err(SettingError::new(
                "idle_runtime(workers)",
                workers,
                "1 ..= 1024",
            ));
        }
        Ok(())
    }

    /// See [`Elastic::idle_runtime`](crate::Elastic::idle_runtime): a pool for `parent`'s idle
    /// class `shared`.
    pub(crate) fn new(
        parent: Arc<ClassState>,
        shared: Arc<ClassState>,
        workers: usize,
    ) -> io::Result<IdleRuntime> {
        let started = Arc::new(Started {
            count: Mutex::new(0),
            cv: Condvar::new(),
            worst: AtomicU8::new(0),
        });
        let on_start = started.clone();
        let class = shared.clone();
        let spread = Spread::of_this_thread();
        let rt = Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("elastic-cpu-idle")
            .on_thread_start(move || {
                thread_class::enter(&parent, &class);
                if let Some(spread) = &spread {
                    spread.pin_this_thread();
                }
                on_start.record(lower_this_thread());
            })
            .enable_all()
            .build()?;
        started.wait_for(workers);
        let watch = PoolWatch::start()?;
        let pulse = watch.clone();
        rt.spawn(async move {
            loop {
                pulse.beat();
                tokio::time::sleep(PULSE).await;
            }
        });
        Ok(IdleRuntime {
            rt,
            watch,
            shared,
            started,
        })
    }

    /// Spawn `future` on the pool as paced elastic work (as [`Elastic::spawn`](crate::Elastic::spawn) does there).
    #[track_caller]
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.rt.spawn(Paced::new(future, self.shared.clone()))
    }

    /// The pool's runtime handle: for work that paces itself (a [`Pacer`](crate::Pacer), a
    /// [`PacedStream`](crate::PacedStream)) or, knowingly, for unpaced work.
    pub fn handle(&self) -> &Handle {
        self.rt.handle()
    }

    /// Whether the pool's threads get CPU, and the work `Auto` put here.
    pub(crate) fn watch(&self) -> &Arc<PoolWatch> {
        &self.watch
    }

    /// The priority the pool's threads got (the least idle of them).
    pub fn priority(&self) -> IdlePriority {
        self.started.priority()
    }

    /// Shut the pool down, waiting at most `timeout` for its tasks to stop and its threads to
    /// end (as [`Runtime::shutdown_timeout`]).
    pub fn shutdown_timeout(self, timeout: Duration) {
        self.rt.shutdown_timeout(timeout);
        self.watch.stop(true);
    }

    /// Shut the pool down once its tasks have ended, from a thread of its own (callable
    /// anywhere, a runtime included): what the last `Elastic` handle does with the pool
    /// `spawn` made, so work spawned there runs to its end as it would on the runtime. Where
    /// the OS refuses that thread, the pool shuts down at once.
    pub(crate) fn end_when_idle(self) {
        let pool = Arc::new(Mutex::new(Some(self)));
        let drained = pool.clone();
        let drain = move || {
            let pool = drained.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(pool) = pool {
                // The pulse task lives as long as the pool: one task is none of the work's.
                while pool.rt.metrics().num_alive_tasks() > 1 {
                    std::thread::sleep(DRAIN_POLL);
                }
                pool.shutdown_background();
            }
        };
        let spawned = std::thread::Builder::new()
            .name("elastic-cpu-idle-drain".into())
            .spawn(drain);
        if spawned.is_err() {
            let pool = pool.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(pool) = pool {
                pool.shutdown_background();
            }
        }
    }

    /// Shut the pool down without waiting (as [`Runtime::shutdown_background`]): callable
    /// inside a runtime, where dropping one panics.
    pub fn shutdown_background(self) {
        self.rt.shutdown_background();
        self.watch.stop(false);
    }
}

impl fmt::Debug for IdleRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdleRuntime")
            .field("priority", &self.priority())
            .field("workers", &self.rt.metrics().num_workers())
            .finish_non_exhaustive()
    }
}
