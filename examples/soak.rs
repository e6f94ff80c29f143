//! A long soak on real time with random faults: one `Elastic` with every setting at its default
//! and its runtime (2 workers) serve a steady foreground of small tasks while elastic work is
//! started, aborted and dropped mid-flight at random (paced loops, paced futures and streams,
//! paced blocking work, some in a class of its own), a connection gate set up with TLS 1.3 and
//! SCRAM-SHA-256 takes honest clients, clients that vanish mid-setup and silent ones, the
//! global `metrics` recorder panics on a random fraction of its calls, and the process's CPU
//! quota changes every few seconds. At the end every generator stops and every handle is
//! dropped, and it checks that the ledgers balance, that no waiter is left and that no thread
//! is leaked, prints a summary and exits non-zero if a check failed.
//!
//! ```text
//! cargo run --release --example soak                     # 30 minutes
//! cargo run --release --example soak -- --minutes 2 --seed 7
//! cargo run --release --example soak -- --recorder-panics false
//! ```
//!
//! Run time: `--minutes` (30 by default) plus up to a minute to wind down; Ctrl-C ends it
//! early, with the checks. Privileges: none to
//! run; the quota changes need write access to the cgroup's `cpu` controller (root, or a
//! delegated cgroup v2 subtree), and without it the soak says so in one line and runs without
//! them. It listens on 127.0.0.1 only.

use std::any::Any;
use std::net::SocketAddr;
use std::panic::PanicHookInfo;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use elastic_cpu::gate::{ConnectionGate, GateSettings, GatedListener, SetupListener};
use elastic_cpu::prelude::*;
use elastic_cpu::settings::ClassSettings;
use elastic_cpu::Elastic;
use elastic_cpu_examples::handshake::{ClientSide, ServerSide};
use elastic_cpu_examples::interrupt::{install_ctrl_c, stopped};
use elastic_cpu_examples::quota::{self, QuotaCgroup};
use elastic_cpu_examples::spin::spin_us;
use futures_util::StreamExt;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// Flags.
#[derive(Parser, Debug)]
#[command(
    name = "soak",
    about = "A long soak with random faults; checks the ledgers, the waiters and the threads at the end"
)]
struct Args {
    /// how long to run, in minutes
    #[arg(long, default_value = "30")]
    minutes: f64,
    /// the random seed [default: from the clock]
    #[arg(long)]
    seed: Option<u64>,
    /// the global metrics recorder panics on a random fraction of its calls
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    recorder_panics: bool,
    /// change the process's CPU quota at random (needs write access to the cgroup)
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    quota_changes: bool,
}

/// What one run does.
#[derive(Clone, Debug)]
struct Config {
    run: Duration,
    seed: u64,
    recorder_panics: bool,
    quota_changes: bool,
    /// The gate's setup timeout (`None`: the library's default).
    setup_timeout: Option<Duration>,
    /// Seconds between quota changes (a range).
    quota_every: (f64, f64),
}

fn main() {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let config = Config {
        run: Duration::try_from_secs_f64(args.minutes * 60.0)
            .unwrap_or_else(|_| fail("--minutes: a number of minutes, at least 0")),
        seed,
        recorder_panics: args.recorder_panics,
        quota_changes: args.quota_changes,
        setup_timeout: None,
        quota_every: (2.0, 6.0),
    };
    install_recorder();
    // Ctrl-C ends the run early (the checks still run); a second one quits, leaving the cgroup.
    install_ctrl_c("soak-ctrl-c", quota::cleanup_active);
    let report = soak(&config);
    report.print();
    if !report.passed() {
        std::process::exit(1);
    }
}

// ----- the recorder -----

/// The fraction of recorder calls that panic while panics are on.
const PANIC_FRACTION: f64 = 1e-3;
static PANICS_ON: AtomicBool = AtomicBool::new(false);
static RECORDER_CALLS: AtomicU64 = AtomicU64::new(0);
static RECORDER_PANICS: AtomicU64 = AtomicU64::new(0);
static RECORDER_RNG: Mutex<Option<fastrand::Rng>> = Mutex::new(None);

/// The payload of an injected panic (the panic hook stays quiet about these).
struct RecorderPanic;

/// A recorder that records nothing and panics on a random fraction of its calls.
struct PanickyRecorder;

impl PanickyRecorder {
    fn call(&self) {
        RECORDER_CALLS.fetch_add(1, Ordering::Relaxed);
        if !PANICS_ON.load(Ordering::Relaxed) {
            return;
        }
        let hit = RECORDER_RNG
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .is_some_and(|r| r.f64() < PANIC_FRACTION);
        if hit {
            RECORDER_PANICS.fetch_add(1, Ordering::Relaxed);
            std::panic::panic_any(RecorderPanic);
        }
    }
}

impl metrics::Recorder for PanickyRecorder {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
        self.call();
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
        self.call();
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
        self.call();
    }
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        self.call();
        metrics::Counter::noop()
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        self.call();
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        self.call();
        metrics::Histogram::noop()
    }
}

/// Install the recorder globally (once per process) and a panic hook that keeps quiet about
/// its injected panics and reports every other panic as before.
fn install_recorder() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = metrics::set_global_recorder(PanickyRecorder);
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info: &PanicHookInfo<'_>| {
            let payload: &(dyn Any + Send) = info.payload();
            if !payload.is::<RecorderPanic>() {
                previous(info);
            }
        }));
    });
}

// ----- counts -----

/// Faults injected and what came of them.
#[derive(Default)]
struct Counts {
    fg_tasks: AtomicU64,
    started: AtomicU64,
    started_class: AtomicU64,
    loops: AtomicU64,
    futures: AtomicU64,
    streams: AtomicU64,
    blocking: AtomicU64,
    aborted: AtomicU64,
    dropped: AtomicU64,
    finished: AtomicU64,
    honest: AtomicU64,
    honest_ok: AtomicU64,
    honest_failed: AtomicU64,
    vanished: AtomicU64,
    silent: AtomicU64,
    silent_closed: AtomicU64,
    served: AtomicU64,
    quota_set: AtomicU64,
    /// Elastic work and clients still running at the wind-down's bound (then aborted).
    stuck: AtomicU64,
    /// Why honest clients failed: each reason once, with a count.
    why_failed: Mutex<Vec<(String, u64)>>,
}

impl Counts {
    fn client_failed(&self, why: String) {
        bump(&self.honest_failed);
        let mut list = self.why_failed.lock().unwrap_or_else(|e| e.into_inner());
        match list.iter_mut().find(|(w, _)| *w == why) {
            Some((_, n)) => *n += 1,
            None => list.push((why, 1)),
        }
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// The generators' stop signal.
#[derive(Clone, Default)]
struct Stop(Arc<AtomicBool>);

impl Stop {
    fn stopped(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
    fn stop(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// How long elastic work and clients may take to end once told to stop: a paced step waits
/// at most about a second of refill at the share's floor, and a client's setup ends at the
/// setup timeout.
const WIND_DOWN: Duration = Duration::from_secs(30);

/// Sleep `ms` milliseconds.
async fn nap(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

// ----- the run -----

/// What the checks at the end found.
struct Report {
    config: Config,
    elapsed: Duration,
    quota: String,
    counts: Arc<Counts>,
    recorder_calls: u64,
    recorder_panics: u64,
    /// Ticks whose metrics the recorder's panics cost, as the snapshot counts them.
    ticks_lost: u64,
    /// The snapshot's governor state, and whether its tick count still moves.
    governor: String,
    governor_running: bool,
    ticks: u64,
    elastic_cpu: Duration,
    placement: String,
    quota_changes: u64,
    gate_line: String,
    failures: Vec<String>,
    threads_before: usize,
    threads_after: usize,
}

impl Report {
    fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    fn print(&self) {
        let c = &self.counts;
        println!(
            "soak: {:.1} min, seed {}, recorder panics {}, quota {}",
            self.elapsed.as_secs_f64() / 60.0,
            self.config.seed,
            if self.config.recorder_panics {
                "on"
            } else {
                "off"
            },
            self.quota
        );
        println!("  foreground tasks      {}", get(&c.fg_tasks));
        println!(
            "  elastic work started  {} ({} in the class): {} paced loops, {} paced futures, {} paced streams, {} blocking",
            get(&c.started),
            get(&c.started_class),
            get(&c.loops),
            get(&c.futures),
            get(&c.streams),
            get(&c.blocking)
        );
        println!(
            "    ended               {} finished, {} aborted, {} dropped mid-flight",
            get(&c.finished),
            get(&c.aborted),
            get(&c.dropped)
        );
        println!(
            "  elastic CPU used      {:.1} s; placement {}",
            self.elastic_cpu.as_secs_f64(),
            self.placement
        );
        println!(
            "  clients               {} honest ({} set up, {} refused or failed), {} vanished mid-setup, {} silent ({} closed by the server)",
            get(&c.honest),
            get(&c.honest_ok),
            get(&c.honest_failed),
            get(&c.vanished),
            get(&c.silent),
            get(&c.silent_closed)
        );
        for (why, n) in c
            .why_failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            println!("    failed {n:>4} times   {why}");
        }
        println!("  gate                  {}", self.gate_line);
        println!(
            "  recorder              {} calls, {} panics ({} ticks' metrics lost)",
            self.recorder_calls, self.recorder_panics, self.ticks_lost
        );
        println!(
            "  quota                 {} set, {} changes seen (snapshot.quota_changes)",
            get(&c.quota_set),
            self.quota_changes
        );
        println!(
            "  governor              {} ({}, {} ticks)",
            if self.governor_running {
                "running at the end"
            } else {
                "NOT running at the end"
            },
            self.governor,
            self.ticks
        );
        println!(
            "  threads               {} before, {} after",
            self.threads_before, self.threads_after
        );
        if self.failures.is_empty() {
            println!(
                "  checks                ledgers balance, no waiter left, no thread leaked: PASS"
            );
        } else {
            for f in &self.failures {
                println!("  FAIL                  {f}");
            }
        }
    }
}

/// This process's threads: `(tid, name)`.
fn threads() -> Vec<(String, String)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.flatten()
        .map(|e| {
            let tid = e.file_name().to_string_lossy().to_string();
            let name = std::fs::read_to_string(e.path().join("comm"))
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            (tid, name)
        })
        .collect()
}

/// Run the soak as `config` says (the recorder installed already) and check the end state.
fn soak(config: &Config) -> Report {
    let mut rng = fastrand::Rng::with_seed(config.seed);
    *RECORDER_RNG.lock().unwrap_or_else(|e| e.into_inner()) = Some(rng.fork());
    RECORDER_CALLS.store(0, Ordering::Relaxed);
    RECORDER_PANICS.store(0, Ordering::Relaxed);
    let mut failures = Vec::new();
    let server = Arc::new(ServerSide::new().unwrap_or_else(|e| fail(&e)));
    let client = Arc::new(ClientSide::new(&server.cert).unwrap_or_else(|e| fail(&e)));
    // The cgroup first: the library reads the quota at attach and re-reads it while it runs.
    let mut cgroup = None;
    let quota = if config.quota_changes {
        match QuotaCgroup::enter_named("elastic-cpu-soak", 2.0, false) {
            Ok(g) => {
                let q = format!("changes in cgroup {} ({})", g.dir.display(), g.version);
                cgroup = Some(g);
                q
            }
            Err(e) => {
                println!("soak: no quota changes (cannot make a cgroup with a CPU quota: {e})");
                "unchanged (no rights)".to_string()
            }
        }
    } else {
        "unchanged (off)".to_string()
    };
    // Let any thread of the setup above end before counting.
    std::thread::sleep(Duration::from_millis(50));
    let before = threads();
    PANICS_ON.store(config.recorder_panics, Ordering::Relaxed);

    let elastic = Elastic::builder()
        .build()
        .unwrap_or_else(|e| fail(&e.to_string()));
    let rt = elastic
        .runtime(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all(),
        )
        .build()
        .unwrap_or_else(|e| fail(&e.to_string()));
    let class = elastic
        .class(ClassSettings::new("soak-batch").weight(2.0))
        .unwrap_or_else(|e| fail(&e.to_string()));
    let counts = Arc::new(Counts::default());
    let stop = Stop::default();
    let start = Instant::now();
    let cgroup = Arc::new(Mutex::new(cgroup));

    let (gate, ticks_then, ticks_now) = rt.block_on(async {
        let mut settings = GateSettings::new();
        if let Some(t) = config.setup_timeout {
            settings = settings.setup_timeout(t);
        }
        let gate = elastic
            .connection_gate(settings)
            .unwrap_or_else(|e| fail(&e.to_string()));
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| fail(&e.to_string()));
        let gated = GatedListener::new(tcp, gate.clone()).unwrap_or_else(|e| fail(&e.to_string()));
        let setup_server = server.clone();
        let mut listener = SetupListener::new(gated, move |tcp: TcpStream| {
            let server = setup_server.clone();
            async move {
                let mut tls = server.acceptor.accept(tcp).await?;
                server
                    .scram(&mut tls)
                    .await
                    .map_err(|e| std::io::Error::other(e.0))?;
                Ok(tls)
            }
        });
        let addr = listener.local_addr();

        let mut generators: Vec<JoinHandle<()>> = Vec::new();
        // The server: each set-up connection is read until its client closes it.
        {
            let (stop, counts) = (stop.clone(), counts.clone());
            generators.push(tokio::spawn(async move {
                while !stop.stopped() {
                    // `accept` is cancel-safe: a timeout loses no connection.
                    let mut conn = match tokio::time::timeout(Duration::from_millis(100), listener.accept()).await {
                        Ok(Ok((conn, _))) => conn,
                        Ok(Err(_)) => break,
                        Err(_) => continue,
                    };
                    bump(&counts.served);
                    tokio::spawn(async move {
                        let mut buf = [0u8; 64];
                        let _ = tokio::time::timeout(Duration::from_secs(30), conn.read(&mut buf))
                            .await;
                    });
                }
            }));
        }
        generators.push(tokio::spawn(foreground(stop.clone(), counts.clone())));
        generators.push(tokio::spawn(elastic_work(
            elastic.clone(),
            class.clone(),
            stop.clone(),
            counts.clone(),
            rng.fork(),
        )));
        generators.push(tokio::spawn(clients(
            addr,
            client.clone(),
            stop.clone(),
            counts.clone(),
            rng.fork(),
        )));
        let quota_thread = {
            let (stop, counts, cgroup, mut rng, every) = (
                stop.clone(),
                counts.clone(),
                cgroup.clone(),
                rng.fork(),
                config.quota_every,
            );
            tokio::spawn(async move {
                while !stop.stopped() {
                    let wait = every.0 + rng.f64() * (every.1 - every.0);
                    let until = Instant::now() + Duration::from_secs_f64(wait);
                    while Instant::now() < until && !stop.stopped() {
                        nap(50).await;
                    }
                    let mut guard = cgroup.lock().unwrap_or_else(|e| e.into_inner());
                    let Some(g) = guard.as_mut() else { break };
                    let cpus = (rng.f64() >= 0.2).then(|| 0.5 + rng.f64() * 1.5);
                    if stop.stopped() {
                        // Leave the run's end unlimited, as a wind-down should not be throttled.
                        let _ = g.set_cpus(None);
                        break;
                    }
                    match g.set_cpus(cpus) {
                        Ok(()) => bump(&counts.quota_set),
                        Err(e) => {
                            println!("soak: quota change failed, no more changes: {e}");
                            break;
                        }
                    }
                }
            })
        };
        generators.push(quota_thread);

        // Run, with a line a minute.
        let mut next_line = Duration::from_secs(60);
        while start.elapsed() < config.run && !stopped() {
            nap(100).await;
            if start.elapsed() >= next_line {
                next_line += Duration::from_secs(60);
                let s = elastic.snapshot();
                let g = gate.snapshot();
                println!(
                    "soak: {:>3.0} min: ticks {}, share {:.3}, elastic cpu {:.1} s, quota {:?} ({} changes), fg {}, started {}, clients ok {}, timed out {}, recorder panics {}",
                    start.elapsed().as_secs_f64() / 60.0,
                    s.ticks,
                    s.share,
                    s.used.as_secs_f64(),
                    s.quota_cpus.map(|q| (q * 100.0).round() / 100.0),
                    s.quota_changes,
                    get(&counts.fg_tasks),
                    get(&counts.started),
                    get(&counts.honest_ok),
                    g.timed_out,
                    get(&RECORDER_PANICS),
                );
            }
        }

        // Wind down: stop every generator and wait for it (and its work) with a bound.
        stop.stop();
        let bound = Instant::now() + WIND_DOWN + Duration::from_secs(10);
        for g in generators {
            let left = bound.saturating_duration_since(Instant::now());
            let abort = g.abort_handle();
            if tokio::time::timeout(left, g).await.is_err() {
                abort.abort();
            }
        }
        // Whether the governor still ticks.
        let ticks_then = elastic.snapshot().ticks;
        nap(1500).await;
        let ticks_now = elastic.snapshot().ticks;
        (gate, ticks_then, ticks_now)
    });

    // Settle: every grant and setup ends (with a bound: one that never does is a failure).
    let settled = |e: &Elastic, g: &ConnectionGate| {
        let s = e.snapshot();
        let gs = g.snapshot();
        s.waiters == 0
            && s.queue.holders == 0
            && s.classes.iter().all(|c| c.waiters == 0)
            && gs.queue_len == 0
            && gs.in_setup == 0
            && gs.waiting_on_peer == 0
            && gs.stats.pending == 0
    };
    let until = Instant::now() + Duration::from_secs(30);
    while !settled(&elastic, &gate) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = elastic.snapshot();
    let g = gate.snapshot();
    let elapsed = start.elapsed();
    if get(&counts.stuck) > 0 {
        failures.push(format!(
            "{} elastic tasks or clients still waiting {} s after the stop",
            get(&counts.stuck),
            WIND_DOWN.as_secs()
        ));
    }
    // The elastic queue's ledger.
    if s.waiters != 0 || s.queue.holders != 0 {
        failures.push(format!(
            "elastic queue: {} waiters, {} holders left",
            s.waiters, s.queue.holders
        ));
    }
    if s.acquired + s.over_limit != s.used + s.returned {
        failures.push(format!(
            "elastic ledger: acquired {:?} - returned {:?} + over_limit {:?} != used {:?}",
            s.acquired, s.returned, s.over_limit, s.used
        ));
    }
    for c in &s.classes {
        if c.waiters != 0 {
            failures.push(format!("class {}: {} waiters left", c.name, c.waiters));
        }
    }
    if let Some(q) = &s.idle_queue {
        if q.waiters != 0 || q.holders != 0 {
            failures.push(format!(
                "idle queue: {} waiters, {} holders left",
                q.waiters, q.holders
            ));
        }
        if q.acquired_nanos + q.over_limit_nanos != q.used_nanos + q.returned_nanos {
            failures.push(format!("idle ledger does not balance: {q:?}"));
        }
    }
    // The gate's.
    let st = &g.stats;
    if (g.queue_len, g.in_setup, g.waiting_on_peer, st.pending) != (0, 0, 0, 0) {
        failures.push(format!(
            "gate: queue {}, in setup {}, waiting on peer {}, pending {} left",
            g.queue_len, g.in_setup, g.waiting_on_peer, st.pending
        ));
    }
    if st.acquired_nanos + st.over_limit_nanos != st.used_nanos + st.returned_nanos {
        failures.push(format!(
            "gate ledger: acquired {} - returned {} + over_limit {} != used {} (ns)",
            st.acquired_nanos, st.returned_nanos, st.over_limit_nanos, st.used_nanos
        ));
    }
    if g.admitted + g.rejected + g.expired + g.cancelled != st.attempts {
        failures.push(format!(
            "gate attempts: {} admitted + {} rejected + {} expired + {} cancelled != {} attempts",
            g.admitted, g.rejected, g.expired, g.cancelled, st.attempts
        ));
    }
    let governor_running = s.governor.is_running() && ticks_now > ticks_then;
    if !governor_running {
        failures.push(format!(
            "the governor is not running: {:?}, ticks {ticks_then} then {ticks_now}",
            s.governor
        ));
    }
    let gate_line = format!(
        "{} attempts: {} admitted, {} rejected, {} expired, {} cancelled; {} setups, {} timed out; setup CPU {:.1} s",
        st.attempts,
        g.admitted,
        g.rejected,
        g.expired,
        g.cancelled,
        st.setups,
        g.timed_out,
        g.setup_cpu.as_secs_f64()
    );

    // Shut everything down, then count the threads.
    PANICS_ON.store(false, Ordering::Relaxed);
    elastic.shutdown();
    drop((gate, class));
    let (elastic_cpu, quota_changes, ticks) = (s.used, s.quota_changes, s.ticks);
    let placement = format!("{:?} ({:?})", s.placement, s.placement_reason);
    drop(elastic);
    rt.shutdown_timeout(Duration::from_secs(10));
    let until = Instant::now() + Duration::from_secs(10);
    let mut after = threads();
    while after.len() > before.len() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
        after = threads();
    }
    if after.len() > before.len() {
        let extra: Vec<String> = after
            .iter()
            .filter(|t| !before.contains(t))
            .map(|(tid, name)| format!("{name} ({tid})"))
            .collect();
        failures.push(format!(
            "{} threads leaked: {}",
            after.len() - before.len(),
            extra.join(", ")
        ));
    }
    // Back out of the cgroup (the guard's drop) before reporting.
    drop(cgroup.lock().unwrap_or_else(|e| e.into_inner()).take());
    Report {
        config: config.clone(),
        elapsed,
        quota,
        counts,
        recorder_calls: get(&RECORDER_CALLS),
        recorder_panics: get(&RECORDER_PANICS),
        ticks_lost: s.recorder_panics,
        governor: format!("{:?}", s.governor),
        governor_running,
        ticks,
        elastic_cpu,
        placement,
        quota_changes,
        gate_line,
        failures,
        threads_before: before.len(),
        threads_after: after.len(),
    }
}

fn fail(e: &str) -> ! {
    eprintln!("soak: {e}");
    std::process::exit(1)
}

/// A steady foreground: a small task (a few µs of CPU) every millisecond.
async fn foreground(stop: Stop, counts: Arc<Counts>) {
    let mut every = tokio::time::interval(Duration::from_millis(1));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while !stop.stopped() {
        every.tick().await;
        bump(&counts.fg_tasks);
        tokio::spawn(async { spin_us(5.0) });
    }
}

/// Elastic work of a random kind, started every 20–120 ms, some in the class, and now and then
/// a random one of it aborted; some is dropped mid-flight by its own task.
async fn elastic_work(
    elastic: Elastic,
    class: Elastic,
    stop: Stop,
    counts: Arc<Counts>,
    mut rng: fastrand::Rng,
) {
    let mut live: Vec<JoinHandle<()>> = Vec::new();
    let blocking_live = Arc::new(AtomicU64::new(0));
    while !stop.stopped() {
        nap(rng.u64(20..120)).await;
        live.retain(|t| !t.is_finished());
        if !live.is_empty() && rng.f64() < 0.15 {
            live.swap_remove(rng.usize(..live.len())).abort();
            bump(&counts.aborted);
        }
        if live.len() >= 16 {
            continue;
        }
        let in_class = rng.bool();
        let on = if in_class { &class } else { &elastic };
        // Some of it is dropped mid-flight: a deadline shorter than the work.
        let cut = (rng.f64() < 0.25).then(|| Duration::from_millis(rng.u64(1..200)));
        let steps = rng.u64(10..2000);
        let step_us = rng.f64() * 80.0 + 5.0;
        let task = match rng.u8(0..4) {
            0 => {
                bump(&counts.loops);
                let mut pacer = on.pacer();
                let (stop, counts) = (stop.clone(), counts.clone());
                let work = async move {
                    for _ in 0..steps {
                        if stop.stopped() {
                            break;
                        }
                        pacer.pace().await;
                        spin_us(step_us);
                    }
                };
                on.spawn(cutoff(work, cut, counts))
            }
            1 => {
                bump(&counts.futures);
                let stop = stop.clone();
                let work = async move {
                    for _ in 0..steps {
                        if stop.stopped() {
                            break;
                        }
                        spin_us(step_us);
                        tokio::task::yield_now().await;
                    }
                }
                .paced(on);
                Ok(tokio::spawn(cutoff(work, cut, counts.clone())))
            }
            2 => {
                bump(&counts.streams);
                let stop = stop.clone();
                let work = futures_util::stream::iter(0..steps)
                    .take_while(move |_| std::future::ready(!stop.stopped()))
                    .map(move |_| spin_us(step_us))
                    .paced(on)
                    .for_each(|()| async {});
                Ok(tokio::spawn(cutoff(work, cut, counts.clone())))
            }
            _ => {
                if blocking_live.load(Ordering::Relaxed) >= 2 {
                    continue;
                }
                bump(&counts.blocking);
                blocking_live.fetch_add(1, Ordering::Relaxed);
                let mut pacer = on.pacer();
                let (stop, counts2, blocking_live) =
                    (stop.clone(), counts.clone(), blocking_live.clone());
                // Blocking work cannot be aborted: it stops itself at a random step.
                let steps = if cut.is_some() { steps / 3 } else { steps };
                let job = on.spawn_blocking(move || {
                    for _ in 0..steps {
                        if stop.stopped() {
                            break;
                        }
                        pacer.pace_blocking();
                        spin_us(step_us);
                    }
                    blocking_live.fetch_sub(1, Ordering::Relaxed);
                    bump(&counts2.finished);
                });
                job.map(|j| tokio::spawn(async move { drop(j.await) }))
            }
        };
        bump(&counts.started);
        if in_class {
            bump(&counts.started_class);
        }
        match task {
            Ok(t) => live.push(t),
            Err(e) => fail(&format!("spawning elastic work: {e}")),
        }
    }
    // Wind down: what is left stops itself at its next step.
    wind_down(live, &counts).await;
}

/// Wait for `tasks` to end, up to [`WIND_DOWN`] in all; count and abort those still running.
async fn wind_down(tasks: Vec<JoinHandle<()>>, counts: &Counts) {
    let until = tokio::time::Instant::now() + WIND_DOWN;
    for t in tasks {
        let abort = t.abort_handle();
        if tokio::time::timeout_at(until, t).await.is_err() {
            bump(&counts.stuck);
            abort.abort();
        }
    }
}

/// Run `work`, dropping it at `cut` if it has not finished by then.
async fn cutoff<F: std::future::Future<Output = ()>>(
    work: F,
    cut: Option<Duration>,
    counts: Arc<Counts>,
) {
    match cut {
        Some(cut) => match tokio::time::timeout(cut, work).await {
            Ok(()) => bump(&counts.finished),
            Err(_) => bump(&counts.dropped),
        },
        None => {
            work.await;
            bump(&counts.finished);
        }
    }
}

/// Clients every 10–80 ms: honest ones (TLS, then SCRAM), ones that vanish mid-setup, and
/// silent ones (at most 8 at once) that hold their socket until the server closes it.
async fn clients(
    addr: SocketAddr,
    client: Arc<ClientSide>,
    stop: Stop,
    counts: Arc<Counts>,
    mut rng: fastrand::Rng,
) {
    let silent_live = Arc::new(AtomicU64::new(0));
    let mut tasks: Vec<JoinHandle<()>> = Vec::new();
    while !stop.stopped() {
        nap(rng.u64(10..80)).await;
        tasks.retain(|t| !t.is_finished());
        let (client, counts) = (client.clone(), counts.clone());
        let kind = rng.u8(0..10);
        let vanish_after = Duration::from_micros(rng.u64(0..20_000));
        let silent_n = silent_live.clone();
        tasks.push(tokio::spawn(async move {
            let tcp = match TcpStream::connect(addr).await {
                Ok(tcp) => tcp,
                Err(e) => {
                    bump(&counts.honest);
                    counts.client_failed(format!("connect: {e}"));
                    return;
                }
            };
            match kind {
                // Honest.
                0..=5 => {
                    bump(&counts.honest);
                    let setup = tokio::time::timeout(Duration::from_secs(30), client.connect(tcp));
                    match setup.await {
                        Ok(Ok(_tls)) => bump(&counts.honest_ok),
                        Ok(Err(e)) => counts.client_failed(e.0),
                        Err(_) => counts.client_failed("no setup in 30 s".into()),
                    }
                }
                // Vanishes mid-setup: gone after a random part of the handshake.
                6..=8 => match tokio::time::timeout(vanish_after, client.connect(tcp)).await {
                    Err(_) => bump(&counts.vanished),
                    // Done before its time to vanish: an honest one after all.
                    Ok(done) => {
                        bump(&counts.honest);
                        match done {
                            Ok(_tls) => bump(&counts.honest_ok),
                            Err(e) => counts.client_failed(e.0),
                        }
                    }
                },
                // Silent: sends nothing and waits for the server to close.
                _ => {
                    if silent_n.load(Ordering::Relaxed) >= 8 {
                        return;
                    }
                    silent_n.fetch_add(1, Ordering::Relaxed);
                    bump(&counts.silent);
                    let mut tcp = tcp;
                    let mut buf = [0u8; 16];
                    let read = tokio::time::timeout(Duration::from_secs(60), tcp.read(&mut buf));
                    if matches!(read.await, Ok(Ok(0)) | Ok(Err(_))) {
                        bump(&counts.silent_closed);
                    }
                    silent_n.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }));
    }
    wind_down(tasks, &counts).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A few seconds of the same loop with every fault (the quota changes where the process
    /// may make a cgroup), and the end-state checks.
    #[test]
    fn a_short_soak_with_every_fault_ends_balanced_with_no_waiter_or_thread_left() {
        install_recorder();
        let config = Config {
            run: Duration::from_secs(6),
            seed: 66,
            recorder_panics: true,
            quota_changes: true,
            // Short, so that the silent clients are closed within the run.
            setup_timeout: Some(Duration::from_millis(500)),
            quota_every: (0.5, 1.5),
        };
        let report = soak(&config);
        report.print();
        let c = &report.counts;
        assert!(get(&c.fg_tasks) > 0 && get(&c.started) > 0);
        assert!(get(&c.honest) + get(&c.vanished) + get(&c.silent) > 0);
        assert!(report.passed(), "{:?}", report.failures);
    }
}
