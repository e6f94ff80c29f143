//! The sampling fallback: queue latency of tiny probe tasks spawned from outside the runtime.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::shared::{nanos, ProbeState};
use crate::threads::ThreadRegistry;

/// How often the sampler spawns a probe task.
pub(crate) const SAMPLE_PERIOD: Duration = Duration::from_millis(1);

/// How often it does while it is quiet ([`Sampler::set_quiet`]): each sample mostly wakes a
/// parked worker, which on an idle runtime cost ~5 % of a core at one a millisecond.
pub const QUIET_SAMPLE_PERIOD: Duration = Duration::from_millis(50);

/// Probe tasks spawned but not yet finished, at most. Bounds the sampler's extra load when the
/// runtime is stalled; while at the bound it spawns nothing new.
const MAX_IN_FLIGHT: usize = 1024;

/// A running sampling probe, from [`Probe::start_sampler`](crate::Probe::start_sampler).
///
/// Dropping it stops the sampler thread and joins it (within about one sample period, ~1 ms).
/// The thread also ends by itself when the runtime it samples has shut down.
///
/// ```
/// use elastic_cpu_probe::{Probe, ProbeConfig};
///
/// let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
/// let probe = Probe::new(ProbeConfig::default()).unwrap();
/// let sampler = probe.start_sampler(rt.handle())?;
/// while sampler.samples() == 0 {
///     std::thread::sleep(std::time::Duration::from_millis(1));
/// }
/// drop(sampler); // stops and joins the thread
/// probe.rotate();
/// assert!(probe.window().queue_latency.foreground.count >= 1);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Sampler {
    ctl: Arc<Control>,
    thread: Option<thread::JoinHandle<()>>,
}

struct Control {
    stop: AtomicBool,
    /// Samples recorded so far (probe tasks that ran).
    samples: AtomicU64,
    /// Set when the thread has ended because the runtime is gone.
    runtime_gone: AtomicBool,
    /// Sampling every [`QUIET_SAMPLE_PERIOD`].
    quiet: AtomicBool,
    /// Where the workers the probe tasks run on are registered, and the tids registered so:
    /// no stop hook removes them, so the sampler does once the runtime is gone.
    workers: Option<(ThreadRegistry, Mutex<Vec<u32>>)>,
}

impl Sampler {
    /// Fails where the OS refuses the thread (a pids or thread limit: `EAGAIN`).
    pub(crate) fn start(
        shared: &Arc<ProbeState>,
        handle: &Handle,
        workers: Option<&ThreadRegistry>,
    ) -> io::Result<Sampler> {
        let ctl = Arc::new(Control {
            stop: AtomicBool::new(false),
            samples: AtomicU64::new(0),
            runtime_gone: AtomicBool::new(false),
            quiet: AtomicBool::new(false),
            workers: workers.map(|r| (r.clone(), Mutex::new(Vec::new()))),
        });
        let thread = {
            let ctl = ctl.clone();
            let shared = shared.clone();
            let handle = handle.clone();
            spawn_thread(move || run(&shared, &handle, &ctl))?
        };
        Ok(Sampler {
            ctl,
            thread: Some(thread),
        })
    }

    /// Number of samples recorded so far (probe tasks that have been polled).
    pub fn samples(&self) -> u64 {
        self.ctl.samples.load(Ordering::Relaxed)
    }

    /// Sample every [`QUIET_SAMPLE_PERIOD`] instead of every millisecond (`true`), or at the full
    /// rate again (`false`, at once): for when nothing steers by the latency, so the samples'
    /// own wake-ups do not cost an idle runtime CPU.
    ///
    /// ```
    /// use elastic_cpu_probe::{Probe, ProbeConfig};
    ///
    /// let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
    /// let probe = Probe::new(ProbeConfig::default()).unwrap();
    /// let sampler = probe.start_sampler(rt.handle())?;
    /// sampler.set_quiet(true);
    /// assert!(sampler.is_quiet());
    /// sampler.set_quiet(false);
    /// assert!(!sampler.is_quiet());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_quiet(&self, quiet: bool) {
        let was = self.ctl.quiet.swap(quiet, Ordering::Relaxed);
        if was && !quiet {
            if let Some(t) = &self.thread {
                t.thread().unpark();
            }
        }
    }

    /// Whether it samples at the quiet period ([`set_quiet`](Self::set_quiet)).
    pub fn is_quiet(&self) -> bool {
        self.ctl.quiet.load(Ordering::Relaxed)
    }

    /// Whether the sampler thread is still running (false once the runtime is gone).
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl fmt::Debug for Sampler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sampler")
            .field("samples", &self.samples())
            .field("running", &self.is_running())
            .field(
                "runtime_gone",
                &self.ctl.runtime_gone.load(Ordering::Relaxed),
            )
            .field("quiet", &self.is_quiet())
            .finish()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.ctl.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            // The thread only parks for one sample period at a time: this join is prompt.
            let _ = t.join();
        }
    }
}

/// The sampler thread (`elastic-cpu-sampler`), or the error the OS gave (or, under the test
/// plumbing, [`fail_sampler_spawns`](crate::testing::fail_sampler_spawns) made up).
fn spawn_thread(f: impl FnOnce() + Send + 'static) -> io::Result<thread::JoinHandle<()>> {
    #[cfg(feature = "test-util")]
    if crate::testing::take_spawn_failure() {
        return Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            "the sampler thread's spawn was refused by testing::fail_sampler_spawns",
        ));
    }
    thread::Builder::new()
        .name("elastic-cpu-sampler".into())
        .spawn(f)
}

fn run(shared: &Arc<ProbeState>, handle: &Handle, ctl: &Arc<Control>) {
    let mut in_flight: VecDeque<JoinHandle<()>> = VecDeque::new();
    let mut next = Instant::now();
    while !ctl.stop.load(Ordering::Acquire) {
        // Reap finished probe tasks; a cancelled one means the runtime shut down (we only abort
        // them after the loop).
        while let Some(task) = in_flight.pop_front() {
            if !task.is_finished() {
                in_flight.push_front(task);
                break;
            }
            if cancelled(task) {
                ctl.runtime_gone.store(true, Ordering::Relaxed);
                ctl.unregister_workers();
                return;
            }
        }
        if in_flight.len() < MAX_IN_FLIGHT {
            let shared = shared.clone();
            let ctl = ctl.clone();
            in_flight.push_back(handle.spawn(async move {
                let waited = requeue().await;
                let _ = shared.record(Some(nanos(waited)), None, false);
                ctl.note_worker();
                ctl.samples.fetch_add(1, Ordering::Relaxed);
            }));
        }
        let period = if ctl.quiet.load(Ordering::Relaxed) {
            QUIET_SAMPLE_PERIOD
        } else {
            SAMPLE_PERIOD
        };
        let now = Instant::now();
        next += period;
        if next <= now || next > now + period {
            // Fell behind (descheduled): do not burst to catch up. Or woken early (no longer
            // quiet): one period from now.
            next = now + period;
        }
        thread::park_timeout(next - now);
    }
    // Probe tasks still queued would record after the stop: cancel them.
    for task in in_flight {
        task.abort();
    }
}

impl Control {
    /// Registers the worker this probe task runs on (one thread-local read once it is). A
    /// thread marks one registry at a time: with two registries sampling one runtime it is
    /// registered again and again, so each tid is kept once.
    fn note_worker(&self) {
        if let Some((registry, mine)) = &self.workers {
            if let Some(tid) = registry.register_current_worker() {
                let mut mine = mine.lock().unwrap_or_else(PoisonError::into_inner);
                if !mine.contains(&tid) {
                    mine.push(tid);
                }
            }
        }
    }

    /// Removes the workers this sampler registered: their runtime is gone, and a later thread
    /// may get the same tid.
    fn unregister_workers(&self) {
        if let Some((registry, mine)) = &self.workers {
            for tid in mine
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .drain(..)
            {
                registry.unregister(tid);
            }
        }
    }
}

/// Puts the task at the back of its worker's run queue once and returns how long it waited there.
///
/// The task wakes itself and returns `Pending`: tokio re-schedules a task notified during its
/// own poll right after the poll, at the back of the worker's local queue (not the LIFO slot),
/// and starts its schedule-latency clock then: the wait measured here is what the hooks'
/// `schedule_latency()` reports for such a task. (`tokio::task::yield_now` would not do: it
/// defers the wake until the worker runs out of work or does maintenance, which under load adds
/// up to ~60 polls of delay that the hooks do not count as scheduling latency.)
fn requeue() -> impl Future<Output = Duration> {
    let mut requeued_at = None;
    std::future::poll_fn(move |cx| match requeued_at {
        None => {
            cx.waker().wake_by_ref();
            requeued_at = Some(Instant::now());
            Poll::Pending
        }
        Some(at) => Poll::Ready(Instant::now().saturating_duration_since(at)),
    })
}

/// Whether a finished probe task was cancelled (by the runtime shutting down).
fn cancelled(mut task: JoinHandle<()>) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    matches!(Pin::new(&mut task).poll(&mut cx), Poll::Ready(Err(e)) if e.is_cancelled())
}
