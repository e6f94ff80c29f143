//! The I/O wake-up probe: how long a canary waits between being due and being read by a task
//! of the runtime, through the runtime's own I/O driver (what it measures and costs: on
//! [`IoProbe`]). The canaries come from a kernel timer on Linux (`timer.rs`) or from a writer
//! thread through a socket (`socket.rs`).

use std::fmt;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use elastic_cpu_core::SettingError;
use hdrhistogram::Histogram;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::config::ProbeConfig;
use crate::runtime_load::RuntimeLoad;
use crate::shared::nanos;
use crate::slot::{Layout, RecordSlot};
use crate::window::{Summary, WindowState};

mod socket;
#[cfg(target_os = "linux")]
mod timer;

/// Where the I/O probe's canaries come from ([`IoProbeConfig::canary`]).
///
/// ```
/// use elastic_cpu_probe::IoCanary;
///
/// // The kernel's timer where there is one (Linux), a writer thread elsewhere.
/// let default = IoCanary::default();
/// assert_eq!(default == IoCanary::Timer, cfg!(target_os = "linux"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IoCanary {
    /// A `timerfd` that expires every period (Linux only). A canary's wait is counted from its
    /// expiry. No thread of the probe's own: on an idle runtime a canary wakes one thread (a
    /// worker) instead of two, half the cost.
    Timer,
    /// A thread outside the runtime sends a timestamp into a datagram socket every period (a
    /// Unix socket pair on Unix, loopback UDP elsewhere). Works on every OS.
    Thread,
}

impl Default for IoCanary {
    fn default() -> Self {
        if cfg!(target_os = "linux") {
            IoCanary::Timer
        } else {
            IoCanary::Thread
        }
    }
}

/// Settings of an [`IoProbe`].
///
/// ```
/// use elastic_cpu_probe::{IoProbeConfig, ProbeConfig};
/// use std::time::Duration;
///
/// let config = IoProbeConfig {
///     period: Duration::from_millis(2),
///     quiet_period: Duration::from_millis(20),
///     probe: ProbeConfig { tick: Duration::from_millis(50), ..ProbeConfig::default() },
///     ..IoProbeConfig::default()
/// };
/// config.validate().unwrap();
/// let bad = IoProbeConfig { period: Duration::ZERO, ..IoProbeConfig::default() };
/// assert_eq!(bad.validate().unwrap_err().setting, "period");
/// let bad = IoProbeConfig { quiet_period: Duration::from_micros(10), ..IoProbeConfig::default() };
/// assert_eq!(bad.validate().unwrap_err().setting, "quiet_period");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct IoProbeConfig {
    /// How often a canary is due on a busy runtime. Must be > 0. Default 2 ms: 500 samples a
    /// second, for a fraction of a percent of one core on a busy runtime (bench
    /// `io_probe/cpu_share` measures it). Stretched on a runtime that is not busy
    /// ([`follow_load`](Self::follow_load), [`period_for`](Self::period_for)).
    pub period: Duration,
    /// The period while the probe is quiet ([`IoProbe::set_quiet`]): when nothing steers by
    /// it, canaries cost less. Must be ≥ `idle_period`. Default 50 ms: on an idle runtime each
    /// canary wakes a parked worker, which at a short period adds up to percents of a core.
    pub quiet_period: Duration,
    /// The longest period while not quiet, on an idle runtime. Must be within `period ..=
    /// quiet_period`. Default 20 ms: a window of `w` then holds at least `w / 20 ms` canaries
    /// (125 in a 2.5 s window, 50 in a 1 s one), at a fraction of a percent of one core on an
    /// idle runtime.
    pub idle_period: Duration,
    /// Whether the period follows the runtime's load ([`period_for`](Self::period_for), measured
    /// at each [`IoProbe::rotate`]), after a window's worth of rotations at the full rate from
    /// the start and from leaving quiet. Default true; false: always `period` (or
    /// `quiet_period`).
    pub follow_load: bool,
    /// Where the canaries come from. Default: [`IoCanary::Timer`] on Linux, else
    /// [`IoCanary::Thread`]; [`IoCanary::Timer`] elsewhere is refused (setting `canary`).
    pub canary: IoCanary,
    /// Tick, window and histogram bounds, with the same meaning as for the scheduling
    /// [`Probe`](crate::Probe): give both the same settings so that their windows cover the
    /// same time. `poll_time_every` and `alarm_at` are not used.
    pub probe: ProbeConfig,
}

impl Default for IoProbeConfig {
    fn default() -> Self {
        IoProbeConfig {
            period: Duration::from_millis(2),
            quiet_period: Duration::from_millis(50),
            idle_period: Duration::from_millis(20),
            follow_load: true,
            canary: IoCanary::default(),
            probe: ProbeConfig::default(),
        }
    }
}

impl IoProbeConfig {
    /// The canaries' period: `quiet_period` while quiet, else `period` stretched on a runtime
    /// that is not fully busy (`busy`: the share of its CPUs its workers kept busy, 0.0 ..= 1.0)
    /// to `period / busy²`, at most `idle_period`.
    ///
    /// Why: a canary that finds the workers parked wakes one, which is most of its cost, while
    /// one that a busy worker picks up between polls costs a few µs. And workers that are mostly
    /// parked cannot hold the I/O driver up: a wait there is the OS's, which the run-queue
    /// signal reads. With the rate in proportion to `busy²`, the canaries that wake a worker
    /// (rate × (1 − busy)) peak near two thirds busy at about a seventh of the fixed
    /// rate's, and the rate is full where the signal matters, on a busy runtime.
    ///
    /// ```
    /// use elastic_cpu_probe::IoProbeConfig;
    /// use std::time::Duration;
    ///
    /// let c = IoProbeConfig::default();
    /// assert_eq!(c.period_for(false, 1.0), Duration::from_millis(2));
    /// assert_eq!(c.period_for(false, 0.5), Duration::from_millis(8));
    /// assert_eq!(c.period_for(false, 0.0), Duration::from_millis(20));
    /// assert_eq!(c.period_for(true, 1.0), Duration::from_millis(50));
    /// ```
    pub fn period_for(&self, quiet: bool, busy: f64) -> Duration {
        if quiet {
            return self.quiet_period;
        }
        let busy = if busy.is_nan() {
            1.0
        } else {
            busy.clamp(0.0, 1.0)
        };
        let longest = self.idle_period.as_secs_f64();
        let stretched = (self.period.as_secs_f64() / (busy * busy)).min(longest);
        // `try_`: an unchecked `idle_period` near `Duration::MAX` rounds past it as an `f64`.
        Duration::try_from_secs_f64(stretched)
            .unwrap_or(self.idle_period)
            .clamp(self.period, self.idle_period.max(self.period))
    }

    /// Checks every setting; the first bad one is returned as a [`SettingError`] naming it.
    pub fn validate(&self) -> Result<(), SettingError> {
        if self.period.is_zero() {
            return Err(SettingError::new(
                "period",
                format!("{:?}", self.period),
                "above zero",
            ));
        }
        if self.idle_period < self.period {
            return Err(SettingError::new(
                "idle_period",
                format!("{:?}", self.idle_period),
                "at least period",
            ));
        }
        if self.quiet_period < self.idle_period {
            return Err(SettingError::new(
                "quiet_period",
                format!("{:?}", self.quiet_period),
                "at least idle_period",
            ));
        }
        if self.canary == IoCanary::Timer && !cfg!(target_os = "linux") {
            return Err(SettingError::new(
                "canary",
                "Timer",
                "Thread on this OS (the timer is a Linux timerfd)",
            ));
        }
        self.probe.validate()
    }
}

/// Why [`IoProbe::start`] failed.
///
/// ```
/// use elastic_cpu_probe::{IoProbe, IoProbeConfig, IoProbeError};
///
/// // A runtime without `enable_io()` has no I/O driver to probe.
/// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// let err = IoProbe::start(rt.handle(), IoProbeConfig::default()).unwrap_err();
/// assert!(matches!(err, IoProbeError::IoDisabled));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum IoProbeError {
    /// A setting is out of range.
    Setting(SettingError),
    /// The runtime was built without `enable_io()` (or `enable_all()`): it has no I/O driver.
    IoDisabled,
    /// The OS refused the socket pair or the timer, or the runtime refused to register it (it
    /// is shutting down).
    Socket(io::Error),
    /// The OS refused to start the writer thread.
    Thread(io::Error),
}

impl fmt::Display for IoProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoProbeError::Setting(e) => e.fmt(f),
            IoProbeError::IoDisabled => f.write_str(
                "the runtime has no I/O driver to probe: build it with enable_io() or enable_all()",
            ),
            IoProbeError::Socket(e) => {
                write!(f, "cannot set up the I/O probe's socket or timer: {e}")
            }
            IoProbeError::Thread(e) => write!(f, "cannot start the I/O probe's writer thread: {e}"),
        }
    }
}

impl std::error::Error for IoProbeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IoProbeError::Setting(e) => Some(e),
            IoProbeError::IoDisabled => None,
            IoProbeError::Socket(e) | IoProbeError::Thread(e) => Some(e),
        }
    }
}

impl From<SettingError> for IoProbeError {
    fn from(e: SettingError) -> Self {
        IoProbeError::Setting(e)
    }
}

/// A running I/O wake-up probe: canaries due every `period`, read by a task on the runtime,
/// *due → read* recorded into a window rotated like the scheduling probe's.
///
/// tokio's schedule latency starts when a task is woken. A request on a socket waits before
/// that too: from the socket becoming readable until a worker polls the I/O driver and wakes the
/// reader task. With every worker busy on long polls (elastic work), the driver is polled only
/// between them, and that wait is invisible to the task hooks. The I/O probe measures the whole
/// path a request's first byte takes: a canary becomes readable every `period` (2 ms by
/// default) on a file descriptor registered with the runtime's I/O driver like any server
/// socket; a task on the runtime reads it and records *due → read*: the I/O driver delay
/// (readable → a worker polls the driver, which wakes the task), plus the reader task's
/// schedule latency (woken → polled), plus one `read` call.
///
/// Where canaries come from is [`IoProbeConfig::canary`]: on Linux by default a `timerfd`
/// ([`IoCanary::Timer`]: the kernel's timer interrupt makes it readable, the wait counts from
/// the expiry), elsewhere a thread outside the runtime that sends its clock into a Unix datagram
/// socket pair (loopback UDP off Unix) ([`IoCanary::Thread`]: the wait counts from the send).
///
/// # Cost
///
/// On the runtime, per canary: one readiness event in a driver poll the workers make anyway
/// (or, on an idle runtime, the wake-up of a parked worker), one task wake and poll, one `read`
/// (a timer's read takes every expiry so far, so readiness is cleared without a second; a
/// socket's reader reads until `WouldBlock`), one clock read, one lock nobody else takes but on
/// a re-arm, and one relaxed `fetch_add` on a histogram counter per expiry; no allocation. The
/// writer thread ([`IoCanary::Thread`] only) adds one clock read, one `send` of 8 bytes and one
/// timed park per canary: a second thread woken each time. A canary that wakes a parked worker
/// costs most; following the load keeps the probe to a fraction of a percent of one core from
/// idle to busy (bench `io_probe/cpu_share`; figures in BENCHMARKS.md). Memory: the window
/// reuses the probe's interval sets (four series, of which the canaries fill one), about 2 MB
/// at the default bounds once every interval of the 2.5 s window holds samples.
/// [`IoProbe::rotate`] costs what [`Probe::rotate`](crate::Probe::rotate) costs for one worker
/// slot.
///
/// # Stopping
///
/// Dropping it aborts the reader task, which closes its end (and disarms the timer), and stops
/// and joins the writer thread if there is one (within one `period`). If the runtime shuts down
/// first, the reader task is dropped with it: the timer is disarmed then, and a writer thread
/// stops by itself at its next canary (on Unix: the socket's other end is gone; off Unix a UDP
/// send may not notice, and the writer stops at the drop); nothing waits for the other side.
///
/// ```
/// use elastic_cpu_probe::{IoProbe, IoProbeConfig};
///
/// let rt = tokio::runtime::Builder::new_multi_thread()
///     .worker_threads(2)
///     .enable_io()
///     .build()
///     .unwrap();
/// let io = IoProbe::start(rt.handle(), IoProbeConfig::default()).unwrap();
/// while io.received() == 0 {
///     std::thread::sleep(std::time::Duration::from_millis(1));
/// }
/// io.rotate(); // normally once per tick, with the scheduling probe
/// let w = io.window();
/// assert!(w.count >= 1);
/// println!("p99 I/O wake-up latency: {:?}", w.p99);
/// drop(io); // stops the reader task (and the timer or writer thread)
/// ```
pub struct IoProbe {
    shared: Arc<IoShared>,
    source: Source,
    reader: JoinHandle<()>,
    /// The runtime's load, read at each rotate (with `follow_load`).
    load: Mutex<RuntimeLoad>,
}

/// What makes the canaries, as the handle holds it.
enum Source {
    #[cfg(target_os = "linux")]
    Timer(Arc<timer::Timer>),
    Thread(Option<thread::JoinHandle<()>>),
}

/// What the canary source, the reader task and the handle share.
struct IoShared {
    config: IoProbeConfig,
    /// Set by [`IoProbe`]'s drop: the writer thread stops.
    stop: AtomicBool,
    /// [`IoProbe::set_quiet`]: canaries every `quiet_period`.
    quiet: AtomicBool,
    /// The share of the runtime's CPUs busy at the last rotate, as `f64` bits.
    load: AtomicU64,
    /// The period canaries are due at now, in ns ([`IoProbeConfig::period_for`]).
    period_ns: AtomicU64,
    /// Rotations left at the full rate: a window's worth after the start and after leaving
    /// quiet, so that the first window's p99 rests on canaries enough (at a stretched period a
    /// few stray start-up waits would stand as its p99 for a second or more).
    warm_rotations: AtomicU64,
    /// Canaries written (the thread) or expired (the timer).
    sent: AtomicU64,
    /// Canaries not recorded: not written because the socket buffer was full, or expired longer
    /// ago than the window lasts when read (the reader was held up).
    skipped: AtomicU64,
    /// Canaries read and recorded.
    received: AtomicU64,
    /// The most canaries one read of the timer records: a window's worth.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    max_backlog: u64,
    layout: Layout,
    /// One slot, in shared mode: written by the reader task wherever it runs (`fetch_add`).
    slot: CachePadded<RecordSlot>,
    window: Mutex<WindowState>,
}

impl IoShared {
    /// The period canaries are due at now.
    fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns.load(Ordering::Relaxed))
    }

    /// One canary read `age_ns` after it was due.
    fn record(&self, age_ns: u64) {
        self.slot.bump(&self.layout, Some(age_ns), None, false);
        self.received.fetch_add(1, Ordering::Relaxed);
    }
}

impl IoProbe {
    /// Starts the probe on the runtime behind `handle`: registers the reading end (the timer,
    /// or a socket pair's) with the runtime's I/O driver, spawns the reader task there and, for
    /// [`IoCanary::Thread`], starts the writer thread (`elastic-cpu-io-canary`).
    ///
    /// Fails with [`IoProbeError::IoDisabled`] on a runtime built without I/O. tokio has no call
    /// that tells; the probe tries to register its file descriptor and catches the panic tokio
    /// raises then. The panic hook still reports that panic (a message on stderr), and a program
    /// built with `panic = "abort"` aborts: there, only start the probe on a runtime with I/O.
    pub fn start(handle: &Handle, config: IoProbeConfig) -> Result<IoProbe, IoProbeError> {
        config.validate()?;
        let template = Histogram::<u64>::new_with_bounds(
            config.probe.lowest_ns(),
            config.probe.highest_ns(),
            config.probe.significant_figures,
        )
        .expect("validated bounds make a histogram");
        let layout = Layout::new(
            &template,
            config.probe.lowest_ns(),
            config.probe.highest_ns(),
            config.probe.significant_figures,
        );
        let window = config
            .probe
            .tick
            .saturating_mul(config.probe.intervals() as u32);
        let max_backlog = (window.as_nanos() / config.period.as_nanos().max(1)).max(1);
        let shared = Arc::new(IoShared {
            slot: CachePadded::new(RecordSlot::new(&layout, true)),
            window: Mutex::new(WindowState::new(&template, config.probe.intervals())),
            layout,
            max_backlog: u64::try_from(max_backlog).unwrap_or(u64::MAX),
            period_ns: AtomicU64::new(nanos(config.period)),
            warm_rotations: AtomicU64::new(config.probe.intervals() as u64),
            config,
            stop: AtomicBool::new(false),
            quiet: AtomicBool::new(false),
            load: AtomicU64::new(1.0f64.to_bits()),
            sent: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            received: AtomicU64::new(0),
        });
        let (source, reader) = match shared.config.canary {
            #[cfg(target_os = "linux")]
            IoCanary::Timer => {
                let (timer, reader) = timer::start(handle, &shared, shared.config.period)?;
                (Source::Timer(timer), reader)
            }
            // Off Linux `validate` refused the timer.
            #[cfg(not(target_os = "linux"))]
            IoCanary::Timer | IoCanary::Thread => {
                let (reader, writer) = socket::start(handle, &shared)?;
                (Source::Thread(Some(writer)), reader)
            }
            #[cfg(target_os = "linux")]
            IoCanary::Thread => {
                let (reader, writer) = socket::start(handle, &shared)?;
                (Source::Thread(Some(writer)), reader)
            }
        };
        Ok(IoProbe {
            shared,
            source,
            reader,
            load: Mutex::new(RuntimeLoad::new(handle)),
        })
    }

    /// The settings this probe was started with.
    pub fn config(&self) -> &IoProbeConfig {
        &self.shared.config
    }

    /// Closes the current interval and pushes it into the window (evicting the interval that
    /// falls out), as [`Probe::rotate`](crate::Probe::rotate) does, and (with
    /// [`follow_load`](IoProbeConfig::follow_load)) sets the canaries' period for the runtime's
    /// load since the last rotate. Call once per tick, from outside the runtime; never blocks
    /// the reader task (it only reads counters).
    pub fn rotate(&self) {
        let shared = &*self.shared;
        {
            let mut state = shared.window.lock().unwrap_or_else(PoisonError::into_inner);
            let mut interval = None;
            state.collect_from(0, &shared.slot, &shared.layout, &mut interval);
            state.push(interval);
        }
        if shared.config.follow_load {
            let busy = self
                .load
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .busy();
            let warm = shared.warm_rotations.load(Ordering::Relaxed);
            if warm > 0 {
                shared.warm_rotations.store(warm - 1, Ordering::Relaxed);
            }
            if let Some(busy) = busy {
                let busy = if warm > 1 { 1.0 } else { busy };
                shared.load.store(busy.to_bits(), Ordering::Relaxed);
                self.retune();
            }
        }
    }

    /// *Due → read* latency of the canaries over the window (the intervals closed by
    /// [`rotate`](Self::rotate)). `count == 0` and `None` percentiles when there were none.
    ///
    /// Every canary counts: when the reader is held up, canaries queue in the socket and each
    /// reports its own wait when read, as requests arriving meanwhile would. If the reader is
    /// held up for longer than the socket buffer lasts (a few hundred canaries: ~280 on Linux
    /// with default buffer sizes), the writer skips canaries ([`skipped`](Self::skipped)) and
    /// the window holds fewer samples than the stall lasted periods.
    pub fn window(&self) -> Summary {
        self.shared
            .window
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .window()
            .queue_latency
            .foreground
    }

    /// Quiet: one canary every `quiet_period` instead of every `period`, for when nothing
    /// steers by the probe (the governor sets it while no elastic work runs or waits). Leaving
    /// quiet sends the next canary at once (the writer thread) or one `period` later (the timer),
    /// not after a quiet period.
    ///
    /// ```
    /// use elastic_cpu_probe::{IoProbe, IoProbeConfig};
    ///
    /// let rt = tokio::runtime::Builder::new_multi_thread().enable_io().build().unwrap();
    /// let io = IoProbe::start(rt.handle(), IoProbeConfig::default()).unwrap();
    /// io.set_quiet(true);
    /// assert!(io.is_quiet());
    /// assert_eq!(io.period(), io.config().quiet_period);
    /// io.set_quiet(false);
    /// assert!(!io.is_quiet());
    /// assert_eq!(io.period(), io.config().period);
    /// ```
    pub fn set_quiet(&self, quiet: bool) {
        let was = self.shared.quiet.swap(quiet, Ordering::Relaxed);
        if was && !quiet && self.shared.config.follow_load {
            // The window holds the sparse quiet canaries: refill it at the full rate first.
            let warm = self.shared.config.probe.intervals() as u64;
            self.shared.warm_rotations.store(warm, Ordering::Relaxed);
            self.shared.load.store(1.0f64.to_bits(), Ordering::Relaxed);
        }
        self.retune();
    }

    /// The period canaries are due at now ([`set_quiet`](Self::set_quiet), and the runtime's
    /// load at the last [`rotate`](Self::rotate): [`IoProbeConfig::period_for`]).
    pub fn period(&self) -> Duration {
        self.shared.period()
    }

    /// Applies the period that quiet and load ask for, when it moved by an eighth or more (a
    /// load that wobbles from tick to tick does not re-arm the timer every tick).
    fn retune(&self) {
        let shared = &*self.shared;
        let quiet = shared.quiet.load(Ordering::Relaxed);
        let busy = f64::from_bits(shared.load.load(Ordering::Relaxed));
        let want = shared.config.period_for(quiet, busy);
        let now = shared.period();
        let moved = want.abs_diff(now);
        if moved.is_zero() || (moved < now / 8 && !quiet && want != shared.config.period) {
            return;
        }
        match &self.source {
            // A failed re-arm keeps the old period (and says so): the probe still works.
            #[cfg(target_os = "linux")]
            Source::Timer(timer) => {
                if timer.arm(want, shared).is_ok() {
                    shared.period_ns.store(nanos(want), Ordering::Relaxed);
                }
            }
            Source::Thread(writer) => {
                shared.period_ns.store(nanos(want), Ordering::Relaxed);
                // A shorter period starts now, not after the longer wait the writer is in.
                if let Some(writer) = writer.as_ref().filter(|_| want < now) {
                    writer.thread().unpark();
                }
            }
        }
    }

    /// Whether the probe is quiet ([`set_quiet`](Self::set_quiet)).
    pub fn is_quiet(&self) -> bool {
        self.shared.quiet.load(Ordering::Relaxed)
    }

    /// Canaries written (a thread) or expired and read (the timer) so far.
    pub fn sent(&self) -> u64 {
        self.shared.sent.load(Ordering::Relaxed)
    }

    /// Canaries read and recorded so far.
    pub fn received(&self) -> u64 {
        self.shared.received.load(Ordering::Relaxed)
    }

    /// Canaries not recorded because the reader was held up: not written as the socket buffer
    /// was full (a thread), or more than a window's worth expired before a read (the timer).
    pub fn skipped(&self) -> u64 {
        self.shared.skipped.load(Ordering::Relaxed)
    }

    /// Whether any part of the probe still runs: false once the runtime has shut down (which
    /// ends the reader task) and the writer thread, where there is one, has noticed and ended.
    /// Once false, no canary is sent or received any more.
    pub fn is_running(&self) -> bool {
        let writer = match &self.source {
            #[cfg(target_os = "linux")]
            Source::Timer(_) => false,
            Source::Thread(writer) => writer.as_ref().is_some_and(|t| !t.is_finished()),
        };
        writer || !self.reader.is_finished()
    }
}

impl fmt::Debug for IoProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoProbe")
            .field("quiet", &self.is_quiet())
            .field("period", &self.period())
            .field("sent", &self.sent())
            .field("received", &self.received())
            .field("skipped", &self.skipped())
            .field("running", &self.is_running())
            .finish()
    }
}

impl Drop for IoProbe {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Source::Thread(writer) = &mut self.source {
            if let Some(t) = writer.take() {
                t.thread().unpark();
                // The writer parks for one period at most and never blocks on the socket.
                let _ = t.join();
            }
        }
        // Cancels the reader at its next poll (it is parked on its file descriptor), which
        // closes it (and disarms the timer). A no-op if the runtime is gone.
        self.reader.abort();
    }
}

/// Registers a reading end with the I/O driver of `handle`'s runtime (`register` wraps it in
/// tokio's type). Inside the runtime's context (entered here) tokio panics there only when the
/// runtime has no I/O driver ("IO is disabled"): that panic becomes [`IoProbeError::IoDisabled`].
/// Not matched on its message, which tokio does not promise to keep.
fn register<T>(
    handle: &Handle,
    register: impl FnOnce() -> io::Result<T>,
) -> Result<T, IoProbeError> {
    let _entered = handle.enter();
    match panic::catch_unwind(AssertUnwindSafe(register)) {
        Ok(registered) => registered.map_err(IoProbeError::Socket),
        Err(_io_disabled) => Err(IoProbeError::IoDisabled),
    }
}
