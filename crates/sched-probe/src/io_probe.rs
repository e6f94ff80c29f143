//! The I/O wake-up probe: how long a datagram waits between being written and being read by a
//! task of the runtime, through the runtime's own I/O driver (what it measures and costs: on
//! [`IoProbe`]).

use std::fmt;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use elastic_cpu_core::SettingError;
use hdrhistogram::Histogram;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::config::ProbeConfig;
use crate::shared::nanos;
use crate::slot::{Layout, Slot};
use crate::window::{Summary, WindowState};

/// A canary is the write time as nanoseconds since the probe's start, little-endian.
const CANARY_LEN: usize = 8;

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
/// };
/// config.validate().unwrap();
/// let bad = IoProbeConfig { period: Duration::ZERO, ..IoProbeConfig::default() };
/// assert_eq!(bad.validate().unwrap_err().setting, "period");
/// let bad = IoProbeConfig { quiet_period: Duration::from_micros(10), ..IoProbeConfig::default() };
/// assert_eq!(bad.validate().unwrap_err().setting, "quiet_period");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct IoProbeConfig {
    /// How often the writer thread sends a canary. Must be > 0. Default 1 ms: a few µs of work
    /// per canary, and a 2.5 s window of up to 2500 samples.
    pub period: Duration,
    /// The period while the probe is quiet ([`IoProbe::set_quiet`]): when nothing steers by
    /// it, canaries cost less. Must be ≥ `period`. Default 50 ms: on an idle runtime each
    /// canary wakes parked workers, so the 1 ms period costs 3–4 % of one core there and 50 ms
    /// about 0.3 % (bench `io_probe/cpu_share`).
    pub quiet_period: Duration,
    /// Tick, window and histogram bounds, with the same meaning as for the scheduling
    /// [`Probe`](crate::Probe): give both the same settings so that their windows cover the
    /// same time. `poll_time_every` and `alarm_at` are not used.
    pub probe: ProbeConfig,
}

impl Default for IoProbeConfig {
    fn default() -> Self {
        IoProbeConfig {
            period: Duration::from_millis(1),
            quiet_period: Duration::from_millis(50),
            probe: ProbeConfig::default(),
        }
    }
}

impl IoProbeConfig {
    /// The writer's period: `quiet_period` while quiet, else `period`.
    ///
    /// ```
    /// use elastic_cpu_probe::IoProbeConfig;
    /// use std::time::Duration;
    ///
    /// let c = IoProbeConfig::default();
    /// assert_eq!(c.period_when(false), Duration::from_millis(1));
    /// assert_eq!(c.period_when(true), Duration::from_millis(50));
    /// ```
    pub fn period_when(&self, quiet: bool) -> Duration {
        if quiet {
            self.quiet_period
        } else {
            self.period
        }
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
        if self.quiet_period < self.period {
            return Err(SettingError::new(
                "quiet_period",
                format!("{:?}", self.quiet_period),
                "at least period",
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
    /// The OS refused the socket pair, or the runtime refused to register it (it is shutting
    /// down).
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
            IoProbeError::Socket(e) => write!(f, "cannot set up the I/O probe's socket: {e}"),
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

/// A running I/O wake-up probe: canaries written from a thread outside the runtime, read by a
/// task on it, *written → read* recorded into a window rotated like the scheduling probe's.
///
/// tokio's schedule latency starts when a task is woken. A request on a socket waits before
/// that too: from the socket becoming readable until a worker polls the I/O driver and wakes the
/// reader task. With every worker busy on long polls (elastic work), the driver is polled only
/// between them, and that wait is invisible to the task hooks. The I/O probe measures the whole
/// path a request's first byte takes: a thread outside the runtime writes a timestamp into a
/// datagram socket every `period` (1 ms by default); a task on the runtime, registered with the
/// runtime's I/O driver like any server socket, reads it and records *written → read*: the I/O
/// driver delay (readable → a worker polls the driver, which wakes the task), plus the reader
/// task's schedule latency (woken → polled), plus one `recv` call.
///
/// The socket is a Unix datagram socket pair on Unix (no network stack, no port, works in any
/// network namespace) and a connected pair of loopback UDP sockets elsewhere.
///
/// # Cost
///
/// Per canary, on the writer thread: one clock read, one non-blocking `send` of 8 bytes and one
/// timed park (a futex wait and its timer wake-up, a context switch): a few µs of CPU per ms.
/// On the runtime: one readiness event in a driver poll the workers make anyway (or, on an idle
/// runtime, the wake-up of a parked worker), one task wake and poll, two `recv` calls (the
/// datagram, then the `WouldBlock` that re-arms readiness), one clock read and one relaxed
/// `fetch_add` on a histogram counter: a few µs of one worker per ms, no lock, no allocation.
/// Measured (bench `io_probe/cpu_share`, 2-vCPU VM): on an idle runtime, where every canary
/// wakes parked workers, 3–4 % of one core at the 1 ms period and about 0.3 % at the 50 ms
/// quiet period (window rotated every tick in both); on a busy runtime the per-poll cost of a
/// workload moved by +0.5 to +10 % between runs of `io_probe/{off,on}`, as much as `off`
/// itself moves between runs on this VM. Memory: the window reuses
/// the probe's interval sets (four series, of which the canaries fill one), about 2 MB at the
/// default bounds once every interval of the 2.5 s window holds samples. [`IoProbe::rotate`]
/// costs what [`Probe::rotate`](crate::Probe::rotate) costs for one worker slot.
///
/// # Stopping
///
/// Dropping it stops and joins the writer thread (within one `period`) and aborts the reader
/// task. If the runtime shuts down first, the reader task is dropped with it and the writer
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
/// drop(io); // stops the writer thread and the reader task
/// ```
pub struct IoProbe {
    shared: Arc<IoShared>,
    writer: Option<thread::JoinHandle<()>>,
    reader: JoinHandle<()>,
}

/// What the writer thread, the reader task and the handle share.
struct IoShared {
    config: IoProbeConfig,
    /// Set by [`IoProbe`]'s drop: the writer stops.
    stop: AtomicBool,
    /// [`IoProbe::set_quiet`]: the writer waits `quiet_period` between canaries.
    quiet: AtomicBool,
    /// Canaries written.
    sent: AtomicU64,
    /// Canaries not written because the socket buffer was full (the reader is stalled).
    skipped: AtomicU64,
    /// Canaries read and recorded.
    received: AtomicU64,
    layout: Layout,
    /// One slot, in shared mode: written by the reader task wherever it runs (`fetch_add`).
    slot: Slot,
    window: Mutex<WindowState>,
}

impl IoProbe {
    /// Starts the probe on the runtime behind `handle`: registers the reading end of a socket
    /// pair with the runtime's I/O driver, spawns the reader task there and starts the writer
    /// thread (`io-probe-canary`).
    ///
    /// Fails with [`IoProbeError::IoDisabled`] on a runtime built without I/O. tokio has no call
    /// that tells; the probe tries to register its socket and catches the panic tokio raises
    /// then. The panic hook still reports that panic (a message on stderr), and a program built
    /// with `panic = "abort"` aborts: there, only start the probe on a runtime with I/O.
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
        let shared = Arc::new(IoShared {
            slot: Slot::new(&layout, true),
            window: Mutex::new(WindowState::new(&template, config.probe.intervals())),
            layout,
            config,
            stop: AtomicBool::new(false),
            quiet: AtomicBool::new(false),
            sent: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            received: AtomicU64::new(0),
        });

        let (send, recv) = socket_pair().map_err(IoProbeError::Socket)?;
        let recv = register(handle, recv)?;
        // Both ends measure from the same origin: a canary carries its write time.
        let origin = Instant::now();
        let reader = handle.spawn(read_canaries(recv, shared.clone(), origin));
        let writer = {
            let shared = shared.clone();
            thread::Builder::new()
                .name("io-probe-canary".into())
                .spawn(move || write_canaries(&send, &shared, origin))
        };
        match writer {
            Ok(writer) => Ok(IoProbe {
                shared,
                writer: Some(writer),
                reader,
            }),
            Err(e) => {
                reader.abort();
                Err(IoProbeError::Thread(e))
            }
        }
    }

    /// The settings this probe was started with.
    pub fn config(&self) -> &IoProbeConfig {
        &self.shared.config
    }

    /// Closes the current interval and pushes it into the window (evicting the interval that
    /// falls out), as [`Probe::rotate`](crate::Probe::rotate) does. Call once per tick, from
    /// outside the runtime; never blocks the reader task (it only reads counters).
    pub fn rotate(&self) {
        let shared = &*self.shared;
        let mut state = shared.window.lock().unwrap_or_else(PoisonError::into_inner);
        let mut interval = None;
        state.collect_from(0, &shared.slot, &shared.layout, &mut interval);
        state.push(interval);
    }

    /// *Written → read* latency of the canaries over the window (the intervals closed by
    /// [`rotate`](Self::rotate)). `count == 0` and `None` percentiles when there were none.
    ///
    /// Every canary counts: when the reader is held up, canaries queue in the socket and each
    /// reports its own wait when read, as requests arriving meanwhile would. If the reader is
    /// held up for longer than the socket buffer lasts (a few hundred canaries: ~280 on Linux
    /// with default buffer sizes), the writer skips canaries ([`skipped`](Self::skipped)) and
    /// the window holds fewer samples than the stall lasted milliseconds.
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
    /// quiet wakes the writer at once, so the next canary does not wait out a quiet period.
    ///
    /// ```
    /// use elastic_cpu_probe::{IoProbe, IoProbeConfig};
    ///
    /// let rt = tokio::runtime::Builder::new_multi_thread().enable_io().build().unwrap();
    /// let io = IoProbe::start(rt.handle(), IoProbeConfig::default()).unwrap();
    /// io.set_quiet(true);
    /// assert!(io.is_quiet());
    /// io.set_quiet(false);
    /// assert!(!io.is_quiet());
    /// ```
    pub fn set_quiet(&self, quiet: bool) {
        let was = self.shared.quiet.swap(quiet, Ordering::Relaxed);
        if was && !quiet {
            if let Some(t) = &self.writer {
                t.thread().unpark();
            }
        }
    }

    /// Whether the probe is quiet ([`set_quiet`](Self::set_quiet)).
    pub fn is_quiet(&self) -> bool {
        self.shared.quiet.load(Ordering::Relaxed)
    }

    /// Canaries written so far.
    pub fn sent(&self) -> u64 {
        self.shared.sent.load(Ordering::Relaxed)
    }

    /// Canaries read and recorded so far.
    pub fn received(&self) -> u64 {
        self.shared.received.load(Ordering::Relaxed)
    }

    /// Canaries not written because the socket buffer was full (the reader was held up).
    pub fn skipped(&self) -> u64 {
        self.shared.skipped.load(Ordering::Relaxed)
    }

    /// Whether both the writer thread and the reader task are still running (false once the
    /// runtime has shut down and the writer has noticed).
    pub fn is_running(&self) -> bool {
        self.writer.as_ref().is_some_and(|t| !t.is_finished()) && !self.reader.is_finished()
    }
}

impl fmt::Debug for IoProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoProbe")
            .field("period", &self.shared.config.period)
            .field("quiet", &self.is_quiet())
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
        if let Some(t) = self.writer.take() {
            t.thread().unpark();
            // The writer parks for one period at most and never blocks on the socket: prompt.
            let _ = t.join();
        }
        // Cancels the reader at its next poll (it is parked on the socket); its end of the
        // socket closes with it. A no-op if the runtime is gone.
        self.reader.abort();
    }
}

/// The writer thread: one canary per period, skipping ahead rather than bursting after a delay.
fn write_canaries(send: &StdEnd, shared: &IoShared, origin: Instant) {
    let mut next = Instant::now();
    while !shared.stop.load(Ordering::Acquire) {
        let written = nanos(origin.elapsed());
        match send.send(&written.to_le_bytes()) {
            Ok(_) => {
                shared.sent.fetch_add(1, Ordering::Relaxed);
            }
            // The reader is held up and the buffer is full: the queued canaries will report it.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                shared.skipped.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The reading end is closed: the runtime has shut down (or the reader was aborted).
            Err(_) => return,
        }
        let quiet = shared.quiet.load(Ordering::Relaxed);
        let period = shared.config.period_when(quiet);
        next += period;
        let now = Instant::now();
        if next <= now {
            next = now + period;
        }
        thread::park_timeout(next - now);
        // Woken out of a quiet wait by `set_quiet(false)`: the next canary goes now.
        if quiet && !shared.quiet.load(Ordering::Relaxed) {
            next = next.min(Instant::now());
        }
    }
}

/// The reader task: reads canaries as the I/O driver reports them and records their age.
async fn read_canaries(recv: RecvEnd, shared: Arc<IoShared>, origin: Instant) {
    // Larger than a canary, so that a longer datagram is seen as such (and ignored).
    let mut buf = [0u8; 2 * CANARY_LEN];
    loop {
        match recv.recv(&mut buf).await {
            Ok(CANARY_LEN) => {
                let mut bytes = [0u8; CANARY_LEN];
                bytes.copy_from_slice(&buf[..CANARY_LEN]);
                let written = u64::from_le_bytes(bytes);
                let age = nanos(origin.elapsed()).saturating_sub(written);
                shared.slot.bump(&shared.layout, Some(age), None, false);
                shared.received.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The socket failed (or the writer is gone): nothing more to read.
            Err(_) => return,
        }
    }
}

/// One end of the socket pair, as std has it (the writer's end stays so).
#[cfg(unix)]
type StdEnd = std::os::unix::net::UnixDatagram;
/// The reading end, registered with the runtime's I/O driver.
#[cfg(unix)]
type RecvEnd = tokio::net::UnixDatagram;
#[cfg(not(unix))]
type StdEnd = std::net::UdpSocket;
#[cfg(not(unix))]
type RecvEnd = tokio::net::UdpSocket;

/// A connected datagram socket pair, both ends non-blocking (the writer never blocks on a full
/// buffer; tokio requires it of the reader). The reading end is not registered yet.
#[cfg(unix)]
fn socket_pair() -> io::Result<(StdEnd, StdEnd)> {
    let (send, recv) = StdEnd::pair()?;
    send.set_nonblocking(true)?;
    recv.set_nonblocking(true)?;
    Ok((send, recv))
}

#[cfg(not(unix))]
fn socket_pair() -> io::Result<(StdEnd, StdEnd)> {
    use std::net::Ipv4Addr;
    let send = StdEnd::bind((Ipv4Addr::LOCALHOST, 0))?;
    let recv = StdEnd::bind((Ipv4Addr::LOCALHOST, 0))?;
    // Connected both ways: the reader only accepts datagrams from the writer.
    send.connect(recv.local_addr()?)?;
    recv.connect(send.local_addr()?)?;
    send.set_nonblocking(true)?;
    recv.set_nonblocking(true)?;
    Ok((send, recv))
}

/// Registers the reading end with the I/O driver of `handle`'s runtime. Inside the runtime's
/// context (entered here) tokio panics there only when the runtime has no I/O driver ("IO is
/// disabled"): that panic becomes [`IoProbeError::IoDisabled`]. Not matched on its message,
/// which tokio does not promise to keep.
fn register(handle: &Handle, recv: StdEnd) -> Result<RecvEnd, IoProbeError> {
    let _entered = handle.enter();
    match panic::catch_unwind(AssertUnwindSafe(|| RecvEnd::from_std(recv))) {
        Ok(registered) => registered.map_err(IoProbeError::Socket),
        Err(_io_disabled) => Err(IoProbeError::IoDisabled),
    }
}
