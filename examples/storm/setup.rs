//! What a connection setup costs — a real TLS handshake and SCRAM exchange, or an iterated
//! hash standing in for a password check — and the server's ledger of connection attempts.

use elastic_cpu_core::{Clock, ThreadCpuClock};
use elastic_cpu_examples::handshake::{ClientSide, ServerSide};
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The setup each connection runs.
#[derive(Clone)]
pub enum Setup {
    /// `--setup tls`: TLS 1.3 then SCRAM-SHA-256; `cpu` is one setup's server CPU, measured
    /// at start.
    Tls {
        server: Arc<ServerSide>,
        cpu: Duration,
    },
    /// `--setup hash`: the synthetic setup, cooperative chunks of an iterated hash.
    Hash(SetupCost),
}

impl Setup {
    /// The real setup, its server CPU measured over a few handshakes on this thread.
    pub fn tls() -> Result<Setup, String> {
        let server = Arc::new(ServerSide::new()?);
        let client = ClientSide::new(&server.cert)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| e.to_string())?;
        let mut cpu: Vec<Duration> = rt.block_on(async {
            let mut v = Vec::new();
            for _ in 0..15 {
                let (a, b) = tokio::io::duplex(64 * 1024);
                let srv = CpuTimed::new(async {
                    let mut s = server.acceptor.accept(a).await?;
                    server.scram(&mut s).await
                });
                let ((ok, cpu), c) = tokio::join!(srv, client.connect(b));
                ok.and(c.map(drop)).map_err(|e| e.0)?;
                v.push(cpu);
            }
            Ok::<_, String>(v)
        })?;
        cpu.sort();
        // The best third: other processes share these cores.
        Ok(Setup::Tls {
            cpu: cpu[cpu.len() / 3],
            server,
        })
    }

    /// One setup's server CPU: measured (tls) or nominal (hash).
    pub fn cpu(&self) -> Duration {
        match self {
            Setup::Tls { cpu, .. } => *cpu,
            Setup::Hash(c) => Duration::from_nanos(c.setup_ns()),
        }
    }

    /// The JSON's name for it.
    pub fn name(&self) -> &'static str {
        match self {
            Setup::Tls { .. } => "tls+scram",
            Setup::Hash(_) => "hash",
        }
    }

    /// The certificate the clients trust (tls).
    pub fn cert(&self) -> Option<&[u8]> {
        match self {
            Setup::Tls { server, .. } => Some(&server.cert),
            Setup::Hash(_) => None,
        }
    }
}

/// A future and the CPU its polls ran on their threads (`CLOCK_THREAD_CPUTIME_ID`): what one
/// setup cost the server, whoever admitted it.
pub struct CpuTimed<F> {
    inner: Pin<Box<F>>,
    cpu: Duration,
}

impl<F: Future> CpuTimed<F> {
    pub fn new(inner: F) -> CpuTimed<F> {
        CpuTimed {
            inner: Box::pin(inner),
            cpu: Duration::ZERO,
        }
    }
}

impl<F: Future> Future for CpuTimed<F> {
    type Output = (F::Output, Duration);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let t0 = ThreadCpuClock.now();
        let out = self.inner.as_mut().poll(cx);
        self.cpu += ThreadCpuClock.now().saturating_sub(t0);
        out.map(|o| (o, self.cpu))
    }
}

/// One round of the iterated hash: a 64-bit mix (splitmix64's finaliser), fed back `iters`
/// times, as a key-stretching function feeds its output back.
#[inline(never)]
pub fn hash_chunk(seed: u64, iters: u64) -> u64 {
    let mut h = black_box(seed);
    for i in 0..iters {
        h = h.wrapping_add(0x9e37_79b9_7f4a_7c15 ^ i);
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
    }
    black_box(h)
}

/// The setup's size: `chunks` chunks of `iters` hash rounds, each about `chunk_us` of CPU.
#[derive(Clone, Copy, Debug)]
pub struct SetupCost {
    pub iters: u64,
    pub chunks: u32,
    pub chunk_us: f64,
}

impl SetupCost {
    /// Measure the hash (best of several tries: other processes share the cores) and size a
    /// setup of about `setup_us` in chunks of about `chunk_us`.
    pub fn calibrate(setup_us: f64, chunk_us: f64) -> SetupCost {
        let n = 200_000u64;
        let mut best = f64::MAX;
        for i in 0..15 {
            let t = Instant::now();
            hash_chunk(i, n);
            best = best.min(t.elapsed().as_secs_f64());
        }
        let per_us = n as f64 / (best * 1e6);
        let chunks = (setup_us / chunk_us).round().max(1.0) as u32;
        let chunk_us = setup_us / chunks as f64;
        SetupCost {
            iters: (per_us * chunk_us).max(1.0) as u64,
            chunks,
            chunk_us,
        }
    }

    /// Nominal CPU of one whole setup, in ns.
    pub fn setup_ns(&self) -> u64 {
        (self.chunk_us * self.chunks as f64 * 1e3) as u64
    }
}

/// Wall-clock time in ns since the Unix epoch: the one clock the client process and the
/// server share, for the client's give-up time.
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// What the server saw of the connecting clients, as running totals.
#[derive(Default)]
pub struct Ledger {
    /// Connections accepted on the setup port.
    pub accepted: AtomicU64,
    /// Client gone before it said hello (nothing spent).
    pub gone: AtomicU64,
    /// Rejected at once (static limit, or the gate: queue full / would expire / closed).
    pub rejected: AtomicU64,
    /// Waited in the gate past its deadline, dropped before its setup ran.
    pub expired: AtomicU64,
    /// Setups finished while their client was still waiting.
    pub completed: AtomicU64,
    /// Setups finished after their client had given up.
    pub wasted: AtomicU64,
    /// Setup CPU (ns, measured) of completed / wasted setups; a setup its client broke off
    /// midway is wasted too.
    pub useful_ns: AtomicU64,
    pub wasted_ns: AtomicU64,
    /// Requests served on set-up connections.
    pub requests: AtomicU64,
    /// Hellos read, and the sum of their ages (ns since the client started the attempt):
    /// how long attempts waited before the service saw them (the kernel's accept queue).
    pub hellos: AtomicU64,
    pub hello_age_ns: AtomicU64,
}

/// A copy of the ledger's totals.
#[derive(Clone, Copy, Debug, Default)]
pub struct Totals {
    pub accepted: u64,
    pub gone: u64,
    pub rejected: u64,
    pub expired: u64,
    pub completed: u64,
    pub wasted: u64,
    pub useful_ns: u64,
    pub wasted_ns: u64,
    pub requests: u64,
    pub hellos: u64,
    pub hello_age_ns: u64,
}

impl Ledger {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub fn totals(&self) -> Totals {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Totals {
            accepted: g(&self.accepted),
            gone: g(&self.gone),
            rejected: g(&self.rejected),
            expired: g(&self.expired),
            completed: g(&self.completed),
            wasted: g(&self.wasted),
            useful_ns: g(&self.useful_ns),
            wasted_ns: g(&self.wasted_ns),
            requests: g(&self.requests),
            hellos: g(&self.hellos),
            hello_age_ns: g(&self.hello_age_ns),
        }
    }
}

impl Totals {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Totals) -> Totals {
        Totals {
            accepted: self.accepted - earlier.accepted,
            gone: self.gone - earlier.gone,
            rejected: self.rejected - earlier.rejected,
            expired: self.expired - earlier.expired,
            completed: self.completed - earlier.completed,
            wasted: self.wasted - earlier.wasted,
            useful_ns: self.useful_ns - earlier.useful_ns,
            wasted_ns: self.wasted_ns - earlier.wasted_ns,
            requests: self.requests - earlier.requests,
            hellos: self.hellos - earlier.hellos,
            hello_age_ns: self.hello_age_ns - earlier.hello_age_ns,
        }
    }

    /// Mean age of the attempts when the service read their hello, in ms.
    pub fn hello_age_ms(&self) -> Option<f64> {
        (self.hellos > 0).then(|| self.hello_age_ns as f64 / self.hellos as f64 / 1e6)
    }

    /// Server CPU per setup run (completed or wasted), in µs (None: no setups).
    pub fn cpu_per_setup_us(&self) -> Option<f64> {
        let n = self.completed + self.wasted;
        (n > 0).then(|| (self.useful_ns + self.wasted_ns) as f64 / n as f64 / 1e3)
    }

    /// Share of the setup CPU spent on clients that had already given up (None: no setups).
    pub fn wasted_share(&self) -> Option<f64> {
        let all = self.useful_ns + self.wasted_ns;
        (all > 0).then(|| self.wasted_ns as f64 / all as f64)
    }
}
