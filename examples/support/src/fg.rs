//! Foreground: a loopback TCP request/response service on the runtime under test, and an
//! open-loop Poisson load generator on its own OS threads (it never shares that runtime).
//!
//! Wire format, both ways: 56-byte frames of seven u64 LE, in ns since one process-wide epoch:
//! the intended send time, a sequence number, then stamps taken on the way (sent, read by the
//! reader task, handler started, handler done, taken by the writer task) for `--hops`. The
//! client takes the latency from the *intended* send time, so a stalled server cannot hide its
//! stall by slowing the sender down (no coordinated omission).
//!
//! Per request on the server: the connection's reader task reads the frame, spawns a handler
//! task (hand-off 1), the handler burns ~`work_us` of CPU and sends the reply over a channel to
//! the connection's writer task (hand-off 2), which writes it back.

use crate::cli::ForegroundArgs;
use crate::cpu_time::process_cpu;
use crate::interrupt::stopped;
use crate::latency::{new_hist, record};
use crate::pauses::Pauses;
use crate::spin::spin_us;
use hdrhistogram::Histogram;
use std::io::{BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::runtime::Runtime;
use tokio::sync::mpsc;

const FRAME: usize = 56;

/// Process-wide epoch for the per-hop stamps (client and server share the process).
static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn stamp() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

fn put(f: &mut [u8; FRAME], i: usize, v: u64) {
    f[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
}

fn get(f: &[u8; FRAME], i: usize) -> u64 {
    u64::from_le_bytes(f[i * 8..i * 8 + 8].try_into().unwrap())
}

/// A builder of the service's runtime: `workers` worker threads, I/O and timers on (the
/// examples build it through the library, which installs its probe).
pub fn runtime_builder(workers: usize) -> tokio::runtime::Builder {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(workers).enable_all();
    b
}

/// Bind the service to a loopback port and run its accept loop on `rt`; returns the address.
pub fn start_server(rt: &Runtime, work_us: f64) -> Result<SocketAddr, String> {
    let listener = rt
        .block_on(TcpListener::bind("127.0.0.1:0"))
        .map_err(|e| format!("bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    rt.spawn(serve(listener, work_us));
    Ok(addr)
}

/// The server's accept loop: one reader task and one writer task per connection, one handler
/// task per request.
async fn serve(listener: TcpListener, work_us: f64) {
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            continue;
        };
        let _ = sock.set_nodelay(true);
        tokio::spawn(connection(sock, work_us));
    }
}

async fn connection(sock: tokio::net::TcpStream, work_us: f64) {
    let (rd, mut wr) = sock.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<[u8; FRAME]>();
    tokio::spawn(async move {
        let mut buf = Vec::with_capacity(4096);
        while let Some(mut f) = rx.recv().await {
            put(&mut f, 6, stamp());
            buf.extend_from_slice(&f);
            while buf.len() < 64 * 1024 {
                match rx.try_recv() {
                    Ok(mut f) => {
                        put(&mut f, 6, stamp());
                        buf.extend_from_slice(&f)
                    }
                    Err(_) => break,
                }
            }
            if wr.write_all(&buf).await.is_err() {
                break;
            }
            buf.clear();
        }
    });
    let mut rd = tokio::io::BufReader::with_capacity(64 * 1024, rd);
    let mut f = [0u8; FRAME];
    while rd.read_exact(&mut f).await.is_ok() {
        put(&mut f, 3, stamp());
        let tx = tx.clone();
        let mut f = f;
        tokio::spawn(async move {
            put(&mut f, 4, stamp());
            spin_us(work_us);
            put(&mut f, 5, stamp());
            let _ = tx.send(f);
        });
    }
}

/// Latency histograms shared by the receiver threads and the monitor.
pub struct FgStats {
    epoch: Instant,
    /// Requests whose intended send time is in `[from, to)` (ns since epoch) go into `phase`.
    from: AtomicU64,
    to: AtomicU64,
    sent: AtomicU64,
    received: AtomicU64,
    hists: Mutex<Hists>,
}

struct Hists {
    /// Since the last timeline sample.
    sample: Histogram<u64>,
    /// Since the last progress line.
    second: Histogram<u64>,
    /// The phase's measurement window.
    phase: Histogram<u64>,
    /// The same requests one by one, to leave out machine pauses and for `--hops`.
    samples: Vec<Sample>,
}

/// One request of the measurement window, in ns.
struct Sample {
    intended: u64,
    latency: u64,
    /// Client send lag, to the reader task, to the handler task, work, to the writer task, back.
    hops: [u64; 6],
}

impl FgStats {
    /// Empty histograms, no measurement window yet.
    pub fn new() -> Arc<FgStats> {
        Arc::new(FgStats {
            epoch: *EPOCH.get_or_init(Instant::now),
            from: AtomicU64::new(u64::MAX),
            to: AtomicU64::new(u64::MAX),
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            hists: Mutex::new(Hists {
                sample: new_hist(),
                second: new_hist(),
                phase: new_hist(),
                samples: Vec::new(),
            }),
        })
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Start the measurement window now.
    pub fn measure_from_now(&self) {
        self.from.store(self.now_ns(), Ordering::SeqCst);
    }

    /// End the measurement window now (late replies to requests sent before still count).
    pub fn measure_until_now(&self) {
        self.to.store(self.now_ns(), Ordering::SeqCst);
    }

    fn record(&self, f: &[u8; FRAME]) {
        let intended_ns = get(f, 0);
        let now = self.now_ns();
        let lat = now.saturating_sub(intended_ns);
        let t = [
            get(f, 0),
            get(f, 2),
            get(f, 3),
            get(f, 4),
            get(f, 5),
            get(f, 6),
            now,
        ];
        let mut hop = [0u64; 6];
        for i in 0..6 {
            hop[i] = t[i + 1].saturating_sub(t[i]);
        }
        let in_window = intended_ns >= self.from.load(Ordering::Relaxed)
            && intended_ns < self.to.load(Ordering::Relaxed);
        let mut h = self.hists.lock().unwrap();
        record(&mut h.sample, lat);
        record(&mut h.second, lat);
        if in_window {
            record(&mut h.phase, lat);
            h.samples.push(Sample {
                intended: intended_ns,
                latency: lat,
                hops: hop,
            });
        }
        drop(h);
        self.received.fetch_add(1, Ordering::Relaxed);
    }

    /// Take the histogram since the last sample.
    pub fn take_sample(&self) -> Histogram<u64> {
        let mut h = self.hists.lock().unwrap();
        std::mem::replace(&mut h.sample, new_hist())
    }

    /// Take the histogram since the last progress line.
    pub fn take_second(&self) -> Histogram<u64> {
        let mut h = self.hists.lock().unwrap();
        std::mem::replace(&mut h.second, new_hist())
    }

    /// The window's requests that were not in flight during one of `pauses` (machine pauses,
    /// see `pauses.rs`), passed to `f` under the lock; returns how many were left out.
    fn samples_without(&self, pauses: &[(Instant, Instant)], f: impl FnMut(&Sample)) -> u64 {
        self.samples_in(0..u64::MAX, pauses, f)
    }

    /// [`samples_without`](Self::samples_without) for the requests whose intended send time
    /// (ns since the epoch) is in `sent`.
    fn samples_in(
        &self,
        sent: std::ops::Range<u64>,
        pauses: &[(Instant, Instant)],
        mut f: impl FnMut(&Sample),
    ) -> u64 {
        let ns = |t: Instant| t.saturating_duration_since(self.epoch).as_nanos() as u64;
        let pauses: Vec<(u64, u64)> = pauses.iter().map(|&(a, b)| (ns(a), ns(b))).collect();
        let h = self.hists.lock().unwrap();
        let mut left_out = 0;
        for x in h.samples.iter().filter(|x| sent.contains(&x.intended)) {
            let (sent, done) = (x.intended, x.intended + x.latency);
            if pauses.iter().any(|&(a, b)| sent <= b && done >= a) {
                left_out += 1;
            } else {
                f(x);
            }
        }
        left_out
    }

    /// Where the phase's requests spent their time: the mean of each hop in µs, over all
    /// requests and over the slowest 1 %, leaving out requests in flight during `pauses`.
    pub fn hop_report(&self, pauses: &[(Instant, Instant)]) -> String {
        let mut v: Vec<(u64, [u64; 6])> = Vec::new();
        self.samples_without(pauses, |x| v.push((x.latency, x.hops)));
        if v.is_empty() {
            return "no requests".into();
        }
        v.sort_unstable_by_key(|x| x.0);
        let mean = |s: &[(u64, [u64; 6])]| {
            let mut m = [0f64; 6];
            for (_, hop) in s {
                for (m, &h) in m.iter_mut().zip(hop) {
                    *m += h as f64 / 1e3;
                }
            }
            m.map(|x| format!("{:.0}", x / s.len() as f64)).join(" / ")
        };
        let tail = &v[v.len() - v.len() / 100 - 1..];
        format!(
            "lag / to reader / to handler / work / to writer / back, us: all {}; slowest 1 % (>= {:.0} us) {}",
            mean(&v),
            tail[0].0 as f64 / 1e3,
            mean(tail)
        )
    }

    /// The measurement window's latencies, from `from` (its start) on, with and without the
    /// requests in flight during a machine pause that `watchdog` saw (without them only when
    /// the watchdog runs at real-time priority: otherwise it sees nothing).
    pub fn window(&self, watchdog: &Pauses, from: Instant) -> Window {
        let raw = self.hists.lock().unwrap().phase.clone();
        let pauses = watchdog.between(from, Instant::now());
        let (hist, left_out) = if watchdog.realtime {
            let mut clean = new_hist();
            let left_out = self.samples_without(&pauses, |x| record(&mut clean, x.latency));
            (clean, left_out)
        } else {
            (raw.clone(), 0)
        };
        Window {
            hist,
            raw,
            pauses,
            left_out,
        }
    }
}

impl FgStats {
    /// The latencies of the requests sent in `[from, to)`, a part of the measurement window
    /// (one window over a whole run, cut in parts afterwards), with and without those in flight
    /// during a machine pause, as [`window`](Self::window).
    pub fn window_between(&self, watchdog: &Pauses, from: Instant, to: Instant) -> Window {
        let ns = |t: Instant| t.saturating_duration_since(self.epoch).as_nanos() as u64;
        let pauses = watchdog.between(from, Instant::now());
        let (mut raw, mut clean) = (new_hist(), new_hist());
        let left_out =
            self.samples_in(ns(from)..ns(to), &pauses, |x| record(&mut clean, x.latency));
        self.samples_in(ns(from)..ns(to), &[], |x| record(&mut raw, x.latency));
        if !watchdog.realtime {
            clean = raw.clone();
        }
        Window {
            hist: clean,
            raw,
            pauses,
            left_out: if watchdog.realtime { left_out } else { 0 },
        }
    }
}

/// A phase's measurement window, from [`FgStats::window`].
pub struct Window {
    /// The latencies without the requests in flight across a machine pause.
    pub hist: Histogram<u64>,
    /// Every request's latency, pauses included.
    pub raw: Histogram<u64>,
    /// The machine pauses in the window.
    pub pauses: Vec<(Instant, Instant)>,
    /// The requests left out of `hist`.
    pub left_out: u64,
}

/// The load generator stands in for clients on other machines: at real-time priority (below
/// the pause watchdog's) its sends and receives are not held up by the CPU contention of the
/// service under test, which would otherwise be counted as the service's latency.
/// [`set_client_realtime`]`(false)` leaves it at normal priority, as a client on the same cores
/// would be (the demo's `--client-priority normal`).
fn client_priority() {
    if CLIENT_REALTIME.load(Ordering::Relaxed) {
        let _ = crate::priority::realtime(10);
    }
}

/// Whether load generators started from now on raise their threads to real-time priority.
static CLIENT_REALTIME: AtomicBool = AtomicBool::new(true);

/// Real-time (the default) or normal priority for the load generators started from now on.
pub fn set_client_realtime(on: bool) {
    CLIENT_REALTIME.store(on, Ordering::Relaxed);
}

/// Shared request rate (requests per second), changeable while running.
#[derive(Clone)]
pub struct Rate(Arc<AtomicU64>);

impl Rate {
    /// Start at `r`.
    pub fn new(r: f64) -> Rate {
        Rate(Arc::new(AtomicU64::new(r.to_bits())))
    }
    /// Change the rate from now on.
    pub fn set(&self, r: f64) {
        self.0.store(r.to_bits(), Ordering::Relaxed);
    }
    fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

/// The open-loop load generator: one sender thread (Poisson arrivals, round-robin over the
/// connections) and one blocking receiver thread per connection.
pub struct LoadGen {
    stop: Arc<AtomicBool>,
    sender: Option<JoinHandle<()>>,
    receivers: Vec<JoinHandle<()>>,
    socks: Vec<TcpStream>,
    stats: Arc<FgStats>,
}

impl LoadGen {
    /// Connect `conns` connections to `addr` and send at `rate`, recording into `stats`.
    pub fn start(
        addr: SocketAddr,
        rate: Rate,
        conns: usize,
        stats: Arc<FgStats>,
        seed: u64,
    ) -> Result<LoadGen, String> {
        Self::connect(addr, rate, conns, stats, seed).map_err(|e| format!("load generator: {e}"))
    }

    fn connect(
        addr: SocketAddr,
        rate: Rate,
        conns: usize,
        stats: Arc<FgStats>,
        seed: u64,
    ) -> std::io::Result<LoadGen> {
        let mut socks = Vec::new();
        let mut receivers = Vec::new();
        for i in 0..conns {
            let s = TcpStream::connect(addr)?;
            s.set_nodelay(true)?;
            let rd = s.try_clone()?;
            let st = stats.clone();
            receivers.push(
                std::thread::Builder::new()
                    .name(format!("loadgen-rx-{i}"))
                    .spawn(move || {
                        client_priority();
                        let mut rd = BufReader::with_capacity(64 * 1024, rd);
                        let mut f = [0u8; FRAME];
                        while rd.read_exact(&mut f).is_ok() {
                            st.record(&f);
                        }
                    })?,
            );
            socks.push(s);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut writers: Vec<TcpStream> = socks
            .iter()
            .map(|s| s.try_clone())
            .collect::<Result<_, _>>()?;
        let (st, stp) = (stats.clone(), stop.clone());
        let sender = std::thread::Builder::new()
            .name("loadgen-tx".into())
            .spawn(move || {
                client_priority();
                let mut rng = fastrand::Rng::with_seed(seed);
                let mut next = st.now_ns() as f64;
                let mut seq = 0u64;
                while !stp.load(Ordering::Relaxed) {
                    next += exp(&mut rng, 1e9 / rate.get());
                    let now = st.now_ns() as f64;
                    if next > now {
                        std::thread::sleep(Duration::from_nanos((next - now) as u64));
                    }
                    let mut f = [0u8; FRAME];
                    put(&mut f, 0, next as u64);
                    put(&mut f, 1, seq);
                    put(&mut f, 2, st.now_ns());
                    let n = writers.len();
                    if writers[(seq % n as u64) as usize].write_all(&f).is_err() {
                        break;
                    }
                    st.sent.fetch_add(1, Ordering::Relaxed);
                    seq += 1;
                }
            })?;
        Ok(LoadGen {
            stop,
            sender: Some(sender),
            receivers,
            socks,
            stats,
        })
    }

    /// Stop sending, wait up to `timeout` for the replies still in flight (less when the run is
    /// interrupted), close. Returns how many requests never got an answer.
    pub fn stop_and_drain(mut self, timeout: Duration) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(s) = self.sender.take() {
            let _ = s.join();
        }
        let deadline = Instant::now() + timeout;
        let sent = self.stats.sent.load(Ordering::SeqCst);
        while self.stats.received.load(Ordering::SeqCst) < sent
            && Instant::now() < deadline
            && !stopped()
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        for s in &self.socks {
            let _ = s.shutdown(Shutdown::Both);
        }
        for r in self.receivers.drain(..) {
            let _ = r.join();
        }
        sent.saturating_sub(self.stats.received.load(Ordering::SeqCst))
    }
}

/// Exponentially distributed with the given mean (inverse transform of a uniform in (0, 1]).
pub fn exp(rng: &mut fastrand::Rng, mean: f64) -> f64 {
    -(1.0 - rng.f64()).ln() * mean
}

/// Run the service alone on `rt` at a trial rate and measure the CPU the whole process spends
/// per request (server, load generator and kernel), to size the foreground rate to `fg_load`
/// of the machine's CPU. Returns that rate and the CPU per request in µs.
pub fn calibrate_rate(
    rt: &Runtime,
    fg: &ForegroundArgs,
    fg_load: f64,
    seed: u64,
) -> Result<(f64, f64), String> {
    let machine = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let trial = (0.5 * fg_load * machine / (fg.work_us * 1e-6)).max(100.0);
    let addr = start_server(rt, fg.work_us)?;
    let stats = FgStats::new();
    let lg = LoadGen::start(
        addr,
        Rate::new(trial),
        fg.conns,
        stats.clone(),
        seed ^ 0xCA1,
    )?;
    std::thread::sleep(Duration::from_millis(500));
    let c0 = process_cpu().ok_or("no /proc/self/stat")?;
    let r0 = stats.received.load(Ordering::SeqCst);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(2500));
    let c1 = process_cpu().ok_or("no /proc/self/stat")?;
    let r1 = stats.received.load(Ordering::SeqCst);
    let secs = t0.elapsed().as_secs_f64();
    lg.stop_and_drain(Duration::from_secs(2));
    if r1 <= r0 {
        return Err("no replies during calibration".into());
    }
    let per_req = (c1 - c0).as_secs_f64() / (r1 - r0) as f64;
    let rate = fg_load * machine / per_req;
    eprintln!(
        "calibrated: {:.0} req/s used {:.0}% of the machine, {:.0} us of process CPU per request",
        (r1 - r0) as f64 / secs,
        100.0 * (c1 - c0).as_secs_f64() / secs / machine,
        per_req * 1e6
    );
    Ok((rate, per_req * 1e6))
}

/// The foreground rate: `given`, or else the one `calibrate` measures (with the process CPU per
/// request in µs it measured). A failed calibration ends the process with 1.
pub fn rate_or_calibrate(
    given: Option<f64>,
    calibrate: impl FnOnce() -> Result<(f64, f64), String>,
) -> (f64, Option<f64>) {
    match given {
        Some(r) => (r, None),
        None => match calibrate() {
            Ok((r, c)) => (r, Some(c)),
            Err(e) => {
                eprintln!("error: calibrating the foreground rate: {e}");
                std::process::exit(1);
            }
        },
    }
}
