//! MEASURE: scheduling (queue) latency and poll time of tokio tasks, as windowed percentiles.
//!
//! ```
//! use elastic_cpu_probe::{Probe, ProbeConfig, Source};
//! use std::time::Duration;
//!
//! let probe = Probe::new(ProbeConfig::default()).unwrap();
//! let mut builder = tokio::runtime::Builder::new_multi_thread();
//! builder.worker_threads(2);
//! probe.instrument(&mut builder); // task hooks with `--cfg tokio_unstable`, else a no-op
//! let rt = builder.build().unwrap();
//! // Without tokio_unstable the hooks are not there: sample the runtime from outside instead.
//! let _sampler = (Probe::source() == Source::Sampler).then(|| probe.start_sampler(rt.handle()));
//!
//! rt.block_on(async {
//!     for _ in 0..100 {
//!         tokio::spawn(async { tokio::task::yield_now().await }).await.unwrap();
//!     }
//! });
//! probe.rotate(); // normally every `tick` (100 ms), from a thread outside the runtime
//! let w = probe.window();
//! if let Some(p99) = w.queue_latency.all.p99 {
//!     println!("p99 scheduling latency over {} ticks: {p99:?}", w.intervals);
//! }
//! ```
//!
//! # What is measured
//!
//! * **Queue latency** (scheduling latency): time from a task becoming runnable (spawned or
//!   woken) to the start of its poll. This is what CPU-heavy background work inflates and what a
//!   controller steers by.
//! * **Poll time**: how long one poll of a task ran.
//!
//! Each is kept separately for *foreground* and *elastic* polls ([`Split`]).
//!
//! # Sources and their precision
//!
//! [`Probe::source`] tells which one this build uses.
//!
//! * [`Source::Hooks`] (built with `--cfg tokio_unstable`): [`Probe::instrument`] installs
//!   tokio's `on_before_task_poll` / `on_after_task_poll` hooks and turns on
//!   `track_task_schedule_latency`. **Every** poll of every task on the runtime is a sample.
//!   Queue latency is tokio's own `TaskMeta::schedule_latency()`: from the task's latest
//!   transition to *scheduled* to just before the poll, whichever queue it waited in (LIFO slot,
//!   local queue, injection queue, stolen). Poll time is measured between the two hooks. Both are
//!   exact up to the clock read cost (tens of ns) and the histogram precision.
//! * [`Source::Sampler`] (without `tokio_unstable`): [`Probe::start_sampler`] runs a thread
//!   that spawns a tiny probe task onto the runtime every ~1 ms. Once running on a worker, the
//!   task wakes itself and returns `Pending` once, which puts it at the back of that worker's
//!   local run queue, and records the time until its next poll as a foreground queue latency:
//!   the same quantity the hooks measure for a task re-scheduled from a worker. It is a *sample*
//!   (up to ~1000/s, independent of the real load; fewer when the sampler thread itself is
//!   starved of CPU), so spikes shorter than a few ms can be missed and the p99 of a 2.5 s window
//!   rests on a few thousand samples at most. It does not see the LIFO slot (tasks woken by a task
//!   on the same worker usually wait less), and it lands on whichever worker picks it from the
//!   injection queue, which may be idle while another is backed up. The spawn → first poll time
//!   is deliberately *not* recorded: in an idle runtime it is dominated by the OS waking a parked
//!   worker for the sampler's own task (milliseconds on a loaded machine), which a task made
//!   runnable on an awake worker does not pay. There is no poll time from the sampler: elastic
//!   wrappers report the poll times they measure themselves through [`Probe::record_poll`]. If
//!   every worker is blocked, probe tasks do not run and the window gets *no* new samples (the
//!   stall is reported late, when they finally run).
//!
//! # Elastic vs foreground: a thread-local flag, not a set of task ids
//!
//! A poll is *elastic* when the elastic wrapper (the `pacer` crate's `Paced`) calls
//! [`mark_elastic_poll`] while it is being polled; the after-poll hook takes (reads and clears)
//! that thread-local flag. The alternative, looking up the polled task's `tokio::task::Id` in a
//! shared set of elastic ids, would put a lock or a shared cache line on every poll of every task
//! on the runtime; the flag is one thread-local write in the elastic poll and one thread-local
//! read in the hook, and costs foreground polls nothing. A task is elastic per poll: a task that
//! is only sometimes polled through an elastic wrapper is only sometimes elastic.
//!
//! # Cost and concurrency
//!
//! Per poll (hooks): two `Instant::now()` reads (start and end of the poll; tokio reads the clock
//! twice more for its schedule latency on its own), two histogram bucket increments, no lock, no
//! atomic read-modify-write, no allocation in steady state. Where clock reads are expensive (some
//! VMs), [`ProbeConfig::poll_time_every`] measures poll time on one poll in *n* only, saving our
//! two reads on the others.
//!
//! Samples go to a per-worker slot (`tokio::runtime::worker_index() % 64`), allocated on the
//! worker's first sample. A slot is owned by the first thread that records into it (released
//! when that thread exits): only its owner writes it, so a bucket increment is a relaxed load and
//! store of a counter in a cache line no other worker writes. [`Probe::rotate`] never writes a
//! slot and never waits for a worker: it reads the cumulative counters and records the
//! difference since its previous read into the interval (every sample is counted exactly once;
//! one recorded during a rotation lands in that interval or the next). Threads that own no slot
//! (callers outside a runtime, workers of a second runtime whose index collides) share an
//! overflow slot with `fetch_add` counters: correct, only slower. The counters use
//! `hdrhistogram`'s own bucket layout, and the intervals and the window are bounded
//! `hdrhistogram::Histogram`s ([`ProbeConfig`] bounds): out-of-range values are clamped, never
//! resized.
//!
//! # Windows
//!
//! [`Probe::rotate`] is called once per `tick` by whoever drives the probe (the pacer's governor
//! thread, a test by hand): it closes the current interval of every slot, merges them into one
//! interval and pushes it into a ring of `ceil(window / tick)` intervals, subtracting the interval
//! that falls out from a running window sum. [`Probe::window`] summarises that sum: cheap (a few
//! histogram scans) and always available. An empty window answers `count == 0` and `None`
//! percentiles, never 0 or NaN.

#![forbid(unsafe_code)]

mod cgroup;
mod config;
mod sampler;
mod slot;
mod window;

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

pub use cgroup::{
    cpu_quota, cpu_quota_at, CgroupVersion, CpuQuota, CpuThrottling, NoQuota, QuotaReading,
    QuotaSource,
};
pub use config::ProbeConfig;
pub use elastic_cpu_core::SettingError;
pub use sampler::Sampler;
pub use window::{Split, Summary, Window};

use slot::{Layout, Slot};
use window::WindowState;

/// Per-worker slots (worker index modulo this); one more slot takes everything off-runtime.
const SLOTS: usize = 64;
const OVERFLOW: usize = SLOTS;

/// Where the probe's queue latency comes from in this build.
///
/// ```
/// use elastic_cpu_probe::{Probe, Source};
/// match Probe::source() {
///     Source::Hooks => println!("every poll is measured by tokio task hooks"),
///     Source::Sampler => println!("call Probe::start_sampler for a sampled signal"),
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// tokio task poll hooks (`--cfg tokio_unstable`): every poll, exact schedule latency and
    /// poll time.
    Hooks,
    /// The sampling fallback ([`Probe::start_sampler`]): ~1000 probe tasks a second, each
    /// timing one wait at the back of a worker's run queue; queue latency only.
    Sampler,
}

/// The scheduling-latency probe. Cheap to clone (an `Arc`); every clone records into and reads
/// from the same histograms.
///
/// See the [crate docs](crate) for an end-to-end example.
///
/// ```
/// use elastic_cpu_probe::{Probe, ProbeConfig};
/// use std::time::Duration;
///
/// let probe = Probe::new(ProbeConfig::default()).unwrap();
/// probe.record_poll(Some(Duration::from_millis(3)), Some(Duration::from_micros(50)), true);
/// probe.rotate();
/// let w = probe.window();
/// assert_eq!(w.queue_latency.elastic.count, 1);
/// assert_eq!(w.queue_latency.foreground.count, 0);
/// ```
#[derive(Clone)]
pub struct Probe {
    shared: Arc<Shared>,
}

struct Shared {
    config: ProbeConfig,
    /// Bucket layout of the histograms (shared by slots and intervals).
    layout: Layout,
    /// `SLOTS` per-worker slots plus the overflow slot, each allocated on first use.
    slots: Box<[OnceLock<Box<Slot>>]>,
    window: Mutex<WindowState>,
    /// `config.alarm_at` in nanoseconds, minus one: a queue latency *above* this alarms.
    /// `u64::MAX` (never) without `alarm_at`: even a latency that saturates to `u64::MAX` ns
    /// must not alarm then.
    alarm_above: u64,
    /// Foreground polls whose queue latency reached `config.alarm_at`.
    alarms: AtomicU64,
    /// Raised by an alarm, lowered by [`Probe::take_alarm`].
    raised: AtomicBool,
    /// Unparked when the alarm is raised.
    listener: Mutex<Option<Thread>>,
}

impl fmt::Debug for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Probe")
            .field("config", &self.shared.config)
            .field("source", &Probe::source())
            .finish_non_exhaustive()
    }
}

impl Probe {
    /// Creates a probe; fails with the first bad setting.
    ///
    /// ```
    /// use elastic_cpu_probe::{Probe, ProbeConfig};
    /// use std::time::Duration;
    ///
    /// assert!(Probe::new(ProbeConfig::default()).is_ok());
    /// let short = ProbeConfig { window: Duration::from_millis(10), ..ProbeConfig::default() };
    /// assert_eq!(Probe::new(short).unwrap_err().setting, "window");
    /// ```
    pub fn new(config: ProbeConfig) -> Result<Probe, SettingError> {
        config.validate()?;
        let template = Histogram::<u64>::new_with_bounds(
            config.lowest_ns(),
            config.highest_ns(),
            config.significant_figures,
        )
        .expect("validated bounds make a histogram");
        let layout = Layout::new(
            &template,
            config.lowest_ns(),
            config.highest_ns(),
            config.significant_figures,
        );
        let slots = (0..=SLOTS).map(|_| OnceLock::new()).collect();
        let window = Mutex::new(WindowState::new(&template, config.intervals()));
        // `alarm_at` > 0 (validated): `nanos(at) - 1` cannot underflow.
        let alarm_above = config.alarm_at.map_or(u64::MAX, |at| nanos(at) - 1);
        Ok(Probe {
            shared: Arc::new(Shared {
                config,
                layout,
                slots,
                window,
                alarm_above,
                alarms: AtomicU64::new(0),
                raised: AtomicBool::new(false),
                listener: Mutex::new(None),
            }),
        })
    }

    /// The settings this probe was built with.
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// let probe = Probe::new(ProbeConfig::default()).unwrap();
    /// assert_eq!(probe.config(), &ProbeConfig::default());
    /// ```
    pub fn config(&self) -> &ProbeConfig {
        &self.shared.config
    }

    /// Where queue latency comes from in this build: [`Source::Hooks`] when compiled with
    /// `--cfg tokio_unstable`, [`Source::Sampler`] otherwise. See the [crate docs](crate) for
    /// the precision of each.
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, Source};
    /// if Probe::source() == Source::Sampler {
    ///     println!("no task hooks in this build: use Probe::start_sampler");
    /// }
    /// ```
    pub const fn source() -> Source {
        if cfg!(tokio_unstable) {
            Source::Hooks
        } else {
            Source::Sampler
        }
    }

    /// Installs the probe on a runtime builder (multi-thread or current-thread).
    ///
    /// With `--cfg tokio_unstable`: turns on `track_task_schedule_latency` and sets
    /// `on_before_task_poll` / `on_after_task_poll` (replacing poll hooks set before; set yours
    /// after this call and you replace the probe's). Without it: does nothing — use
    /// [`Probe::start_sampler`] on the built runtime instead.
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// let probe = Probe::new(ProbeConfig::default()).unwrap();
    /// let rt = probe
    ///     .instrument(&mut tokio::runtime::Builder::new_current_thread())
    ///     .build()
    ///     .unwrap();
    /// rt.block_on(async { tokio::spawn(async {}).await.unwrap() });
    /// ```
    pub fn instrument<'a>(
        &self,
        builder: &'a mut tokio::runtime::Builder,
    ) -> &'a mut tokio::runtime::Builder {
        #[cfg(tokio_unstable)]
        {
            let shared = self.shared.clone();
            builder
                .track_task_schedule_latency()
                .on_before_task_poll({
                    let every = self.shared.config.poll_time_every;
                    move |_meta| hooks::before_poll(every)
                })
                .on_after_task_poll(move |meta| hooks::after_poll(&shared, meta))
        }
        #[cfg(not(tokio_unstable))]
        {
            builder
        }
    }

    /// Starts the sampling fallback on the runtime behind `handle`: a dedicated OS thread spawns
    /// a tiny probe task every ~1 ms; the task re-queues itself once at the back of its worker's
    /// run queue and records the wait as a foreground queue latency (see the [crate docs](crate)
    /// for why and how precise).
    ///
    /// Never blocks a worker (the probe task only re-queues once and records). Stops when the returned [`Sampler`]
    /// is dropped, or by itself once the runtime has shut down. With hooks it still works (an
    /// extra signal; its tasks' polls are then also seen by the hooks, as tiny foreground polls).
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
    /// let probe = Probe::new(ProbeConfig::default()).unwrap();
    /// let sampler = probe.start_sampler(rt.handle());
    /// assert!(sampler.is_running());
    /// drop(sampler);
    /// ```
    pub fn start_sampler(&self, handle: &tokio::runtime::Handle) -> Sampler {
        Sampler::start(self, handle)
    }

    /// Records one poll sample into the calling thread's slot: its worker's slot on a runtime
    /// worker, else the shared overflow slot. Lock-free. `None` leaves that measure out. Values are clamped
    /// to the configured `highest`.
    ///
    /// Used by the hooks and by the sampler; elastic wrappers without hooks and tests call it
    /// directly.
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// # use std::time::Duration;
    /// let probe = Probe::new(ProbeConfig::default()).unwrap();
    /// probe.record_poll(None, Some(Duration::from_micros(300)), true); // poll time only
    /// probe.rotate();
    /// assert_eq!(probe.window().poll_time.elastic.count, 1);
    /// assert_eq!(probe.window().queue_latency.all.count, 0);
    /// ```
    pub fn record_poll(
        &self,
        queue_latency: Option<Duration>,
        poll_time: Option<Duration>,
        elastic: bool,
    ) {
        self.shared
            .record(queue_latency.map(nanos), poll_time.map(nanos), elastic);
    }

    /// Closes the current interval: collects what every slot recorded since the last rotation
    /// into one interval, pushes it into the window and evicts the interval that falls out of it.
    ///
    /// Call once per `tick` from outside the runtime (the pacer's governor thread does). It never
    /// blocks a worker: it only reads the slots' counters. Concurrent calls are serialised.
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// # use std::time::Duration;
    /// let probe = Probe::new(ProbeConfig::default()).unwrap(); // 25 intervals
    /// probe.record_poll(Some(Duration::from_micros(10)), None, false);
    /// for _ in 0..25 {
    ///     probe.rotate();
    /// }
    /// assert_eq!(probe.window().queue_latency.all.count, 1);
    /// probe.rotate(); // the first interval leaves the window
    /// assert_eq!(probe.window().queue_latency.all.count, 0);
    /// ```
    pub fn rotate(&self) {
        let shared = &*self.shared;
        let mut state = shared.window.lock().unwrap_or_else(PoisonError::into_inner);
        let mut interval = None;
        for (index, slot) in shared.slots.iter().enumerate() {
            if let Some(slot) = slot.get() {
                state.collect_from(index, slot, &shared.layout, &mut interval);
            }
        }
        state.push(interval);
    }

    /// The window's statistics: a snapshot of the intervals closed by [`Probe::rotate`] (samples
    /// recorded since the last rotation are not in it yet).
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// let probe = Probe::new(ProbeConfig::default()).unwrap();
    /// let w = probe.window();
    /// assert_eq!(w.intervals, 0);
    /// assert_eq!(w.queue_latency.all.count, 0);
    /// assert_eq!(w.queue_latency.all.p99, None); // no data, not 0
    /// ```
    pub fn window(&self) -> Window {
        self.shared
            .window
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .window()
    }
}

impl Probe {
    /// Foreground polls so far whose queue latency reached
    /// [`ProbeConfig::alarm_at`](crate::ProbeConfig::alarm_at).
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// # use std::time::Duration;
    /// let config = ProbeConfig { alarm_at: Some(Duration::from_millis(1)), ..Default::default() };
    /// let probe = Probe::new(config).unwrap();
    /// probe.record_poll(Some(Duration::from_micros(900)), None, false); // under: no alarm
    /// probe.record_poll(Some(Duration::from_millis(2)), None, true); // elastic: never alarms
    /// probe.record_poll(Some(Duration::from_millis(2)), None, false);
    /// assert_eq!(probe.alarms(), 1);
    /// assert!(probe.take_alarm());
    /// assert!(!probe.take_alarm()); // lowered until the next alarm
    /// ```
    pub fn alarms(&self) -> u64 {
        self.shared.alarms.load(Ordering::Relaxed)
    }

    /// Whether an alarm was raised since the last call; lowers it. The next alarming poll
    /// raises it again (and unparks the [`notify_on_alarm`](Self::notify_on_alarm) thread).
    pub fn take_alarm(&self) -> bool {
        self.shared.raised.swap(false, Ordering::AcqRel)
    }

    /// Unpark `thread` whenever the alarm goes from lowered to raised (at most once per
    /// [`take_alarm`](Self::take_alarm)), so a controller can react within the poll that saw
    /// the backlog instead of at its next tick. Replaces an earlier listener.
    pub fn notify_on_alarm(&self, thread: Thread) {
        *self
            .shared
            .listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(thread);
    }
}

impl Shared {
    /// A foreground poll waited at least `alarm_at`: count it, raise the alarm, notify.
    #[cold]
    #[inline(never)]
    fn alarm(&self) {
        self.alarms.fetch_add(1, Ordering::Relaxed);
        if !self.raised.load(Ordering::Relaxed) && !self.raised.swap(true, Ordering::AcqRel) {
            if let Some(t) = &*self.listener.lock().unwrap_or_else(PoisonError::into_inner) {
                t.unpark();
            }
        }
    }

    /// Slot `index`, allocated on first use.
    #[inline]
    fn slot(&self, index: usize) -> &Slot {
        self.slots[index].get_or_init(|| Box::new(Slot::new(&self.layout, index == OVERFLOW)))
    }
}

#[inline]
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

struct PollState {
    /// Start of the current poll, set by the before-poll hook.
    #[cfg_attr(not(tokio_unstable), allow(dead_code))]
    start: Cell<Option<Instant>>,
    /// Set by [`mark_elastic_poll`] during the current poll.
    elastic: Cell<bool>,
    /// Polls left before the next one whose poll time is measured (`poll_time_every`).
    #[cfg_attr(not(tokio_unstable), allow(dead_code))]
    countdown: Cell<u32>,
}

thread_local! {
    static POLL: PollState = const {
        PollState { start: Cell::new(None), elastic: Cell::new(false), countdown: Cell::new(0) }
    };
}

/// Marks the task poll running on this thread as elastic work.
///
/// Called by elastic wrappers (the `pacer` crate's `Paced`) inside their `poll`. One
/// thread-local write; the probe's after-poll hook reads and clears it, and the before-poll hook
/// clears it, so a mark outside a task poll does not leak into the next one. Without hooks it has
/// no effect (there is no hook to read it).
///
/// ```
/// use std::future::poll_fn;
/// use std::task::Poll;
///
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// // What an elastic wrapper does in each poll of the work it wraps:
/// poll_fn(|_cx| {
///     elastic_cpu_probe::mark_elastic_poll();
///     Poll::Ready(())
/// })
/// .await;
/// # });
/// ```
#[inline]
pub fn mark_elastic_poll() {
    let _ = POLL.try_with(|p| p.elastic.set(true));
}

#[cfg(tokio_unstable)]
mod hooks {
    use super::{nanos, Instant, Shared, POLL};

    #[inline]
    pub(crate) fn before_poll(poll_time_every: u32) {
        let _ = POLL.try_with(|p| {
            p.elastic.set(false);
            let left = p.countdown.get();
            if left == 0 {
                p.countdown.set(poll_time_every - 1);
                p.start.set(Some(Instant::now()));
            } else {
                p.countdown.set(left - 1);
                p.start.set(None);
            }
        });
    }

    #[inline]
    pub(crate) fn after_poll(shared: &std::sync::Arc<Shared>, meta: &tokio::runtime::TaskMeta<'_>) {
        let (start, elastic) = POLL
            .try_with(|p| (p.start.take(), p.elastic.replace(false)))
            .unwrap_or((None, false));
        // Only measured polls read the clock (every poll by default).
        let poll_ns = start.map(|s| nanos(s.elapsed()));
        shared.record(meta.schedule_latency().map(nanos), poll_ns, elastic);
    }
}
