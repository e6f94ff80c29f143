//! An axum JSON API on 2 workers under an open-loop HTTP load, while a background export
//! compresses 32 KiB chunks with flate2 (about a millisecond a call): the export written each
//! way a user would write it, the library's among them exactly as the README's quick start
//! teaches (`elastic.spawn` of a `.paced(&elastic)` stream, every setting at its default).
//!
//! ```text
//! cargo run --release --example export                      # bare host, then a 1.5-CPU quota
//! cargo run --release --example export -- --cpu-quota off   # bare host only
//! ```
//!
//! Run time: about 5 minutes (5 modes, 3 rounds of 10 s each, on the bare host and again inside
//! the quota); about 2.5 minutes with `--cpu-quota off`.
//!
//! Privileges: none to run. The quota environment makes a child cgroup of the `cpu` controller
//! (root, or a delegated cgroup v2 subtree); without that right it is skipped with a one-line
//! note and the run exits 0 (an explicit `--cpu-quota F` exits 1 instead). The client's threads
//! ask for real-time priority (root, `CAP_SYS_NICE` or an `RLIMIT_RTPRIO`) and run at normal
//! priority without it.
//!
//! The client is hyper's HTTP/1.1 client in a process of its own (this binary, started again
//! before any quota), on real-time threads, outside the service's process and cgroup as a
//! remote client would be: requests leave at Poisson-spaced intended times over keep-alive
//! connections, and each latency runs from the intended time, so a stalled server cannot slow
//! the sender down and hide its stall. The modes run interleaved, `--rounds` times; the report
//! merges each mode's rounds. `svc cpus` is the service process's CPU time per second; `of
//! spare` the export's part of it above the baseline's, over what the quota (on a bare host,
//! the CPUs the client leaves) left the baseline.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::Path;
use axum::routing::get;
use axum::{Json, Router};
use clap::Parser;
use elastic_cpu::{Elastic, PacedStreamExt};
use elastic_cpu_examples::cli::cores;
use elastic_cpu_examples::cpu_time::process_cpu;
use elastic_cpu_examples::fg::exp;
use elastic_cpu_examples::interrupt::{install_ctrl_c, sleep_until, stopped};
use elastic_cpu_examples::latency::{fmt_us, new_hist, q_us, record};
use elastic_cpu_examples::priority::{lowest_priority, realtime};
use elastic_cpu_examples::quota::{cleanup_active, QuotaCgroup};
use elastic_cpu_examples::stats::median;
use elastic_cpu_examples::table::{csv_rows, deflate};
use futures_util::StreamExt;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Empty};
use tokio::runtime::Runtime;

/// Flags.
#[derive(Parser, Debug)]
#[command(
    name = "export",
    about = "An axum API under open-loop load beside a flate2 export, each way a user would run it"
)]
struct Args {
    /// requests per second (Poisson arrivals)
    #[arg(long, default_value = "3000")]
    rate: f64,
    /// keep-alive connections of the client
    #[arg(long, default_value = "32")]
    conns: usize,
    /// the service runtime's worker threads
    #[arg(long, default_value = "2")]
    workers: usize,
    /// concurrent export tasks
    #[arg(long, default_value = "2")]
    export_tasks: usize,
    /// KiB per compressed chunk (one library call)
    #[arg(long, default_value = "32")]
    chunk_kib: usize,
    /// modes to run: none, yield, spawn-blocking, idle-runtime, default
    #[arg(
        long,
        default_value = "none,yield,spawn-blocking,idle-runtime,default",
        value_delimiter = ','
    )]
    modes: Vec<Mode>,
    /// seconds per mode, warm-up included
    #[arg(long, default_value = "10")]
    phase_secs: f64,
    /// start of each mode left out of its figures
    #[arg(long, default_value = "3")]
    warmup_secs: f64,
    /// run the mode list N times, interleaved
    #[arg(long, default_value = "3")]
    rounds: usize,
    /// after the bare host, run again inside a CPU quota of F CPUs (a child cgroup it makes and
    /// moves itself into); `off`: host only [default: 1.5, skipped with a note where the machine
    /// does not allow it; given explicitly, the example exits 1 instead]
    #[arg(long, value_name = "F|off", value_parser = quota)]
    cpu_quota: Option<Quota>,
    /// worker threads of the `SCHED_IDLE` runtime [default: tokio's own count, which rounds a
    /// quota down]
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    idle_workers: Option<u16>,
    /// run as the load generator, driven by commands on stdin (started by the example itself)
    #[arg(long, hide = true)]
    client: bool,
}

/// The quota of the run's second environment without `--cpu-quota`, in CPUs.
const DEFAULT_QUOTA: f64 = 1.5;

/// `--cpu-quota`: a number of CPUs, or none.
#[derive(Clone, Copy, Debug)]
struct Quota(Option<f64>);

fn quota(v: &str) -> Result<Quota, String> {
    match v {
        "off" => Ok(Quota(None)),
        _ => match v.parse::<f64>() {
            Ok(f) if f.is_finite() && f >= 0.1 => Ok(Quota(Some(f))),
            _ => Err(format!("{v:?}: expected a number of CPUs (≥ 0.1) or off")),
        },
    }
}

/// How the export runs.
#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
enum Mode {
    /// No export: the baseline.
    None,
    /// Tasks on the service's runtime, `yield_now()` after every chunk.
    Yield,
    /// `spawn_blocking` threads, one loop each.
    SpawnBlocking,
    /// A separate runtime, its threads at `SCHED_IDLE` (`--idle-workers`).
    IdleRuntime,
    /// The README's quick start: `elastic.spawn(stream.map(compress).paced(&elastic)...)`.
    Default,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Yield => "yield",
            Mode::SpawnBlocking => "spawn-blocking",
            Mode::IdleRuntime => "idle-runtime",
            Mode::Default => "default",
        }
    }
}

fn main() {
    let args = Args::parse();
    if args.warmup_secs >= args.phase_secs || args.rate <= 0.0 || args.conns == 0 {
        fail("need --warmup-secs < --phase-secs, --rate > 0 and --conns > 0");
    }
    if args.client {
        client_process(&args);
        return;
    }
    install_ctrl_c("export-ctrl-c", cleanup_active);
    let chunk = Arc::new(csv_rows(0, args.chunk_kib * 1024));
    let t = Instant::now();
    let n = deflate(&chunk).len();
    println!(
        "one call: {} KiB -> {} KiB in {:.2} ms; {} req/s over {} connections, {} workers",
        args.chunk_kib,
        n / 1024,
        t.elapsed().as_secs_f64() * 1e3,
        args.rate,
        args.conns,
        args.workers
    );
    // Started before the quota so that it stays outside it.
    let mut client = RemoteClient::spawn(&args).unwrap_or_else(|e| fail(&format!("client: {e}")));
    let mut envs = vec![None];
    if let Some(q) = args.cpu_quota.unwrap_or(Quota(Some(DEFAULT_QUOTA))).0 {
        envs.push(Some(q));
    }
    for env in envs {
        let _cgroup =
            match env.map(|cpus| QuotaCgroup::enter_named("elastic-cpu-export", cpus, false)) {
                None => None,
                Some(Ok(cgroup)) => Some(cgroup),
                Some(Err(e)) if args.cpu_quota.is_some() => fail(&format!("CPU quota: {e}")),
                Some(Err(e)) => {
                    println!(
                    "quota phase skipped: no rights to make a cgroup with a CPU quota here ({e})"
                );
                    break;
                }
            };
        let title = match env {
            None => "bare host".to_string(),
            Some(q) => format!("inside a CPU quota of {q} CPUs"),
        };
        println!("== {title} ==");
        let rows = run_env(&args, &chunk, &mut client, _cgroup.as_ref());
        print_table(&rows, env);
        if stopped() {
            break;
        }
    }
}

/// One mode's figures from every round.
struct Row {
    mode: Mode,
    hist: Histogram<u64>,
    round_p99: Vec<f64>,
    bytes: u64,
    secs: f64,
    /// The service process's CPU time over the windows.
    cpu: Duration,
    /// The client process's CPU time over the windows.
    client_cpu: Duration,
    /// Throttled periods and periods of the quota over the windows.
    throttled: (u64, u64),
    /// Backlog brakes in the windows: the governor saw a foreground task wait its brake
    /// threshold in a run queue (counted whatever runs the export, the library's or not).
    brakes: u64,
    placement: Option<String>,
}

/// The service, its client and every mode in one environment.
fn run_env(
    args: &Args,
    chunk: &Arc<Vec<u8>>,
    client: &mut RemoteClient,
    cgroup: Option<&QuotaCgroup>,
) -> Vec<Row> {
    // Built here, inside the quota if there is one, as a service would start inside its container.
    let elastic = Elastic::builder()
        .build()
        .unwrap_or_else(|e| fail(&e.to_string()));
    let rt = elastic
        .runtime(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(args.workers)
                .enable_all(),
        )
        .build()
        .unwrap_or_else(|e| fail(&e.to_string()));
    let idle = idle_runtime(args.idle_workers.map_or_else(cores, usize::from));
    let addr = start_service(&rt);
    client
        .connect(addr)
        .unwrap_or_else(|e| fail(&format!("client: {e}")));
    // Connections up, caches and allocators warm before the first mode counts.
    std::thread::sleep(CLIENT_WARMUP);
    let mut rows: Vec<Row> = args
        .modes
        .iter()
        .map(|&mode| Row {
            mode,
            hist: new_hist(),
            round_p99: Vec::new(),
            bytes: 0,
            secs: 0.0,
            cpu: Duration::ZERO,
            client_cpu: Duration::ZERO,
            throttled: (0, 0),
            brakes: 0,
            placement: None,
        })
        .collect();
    for round in 0..args.rounds {
        for row in rows.iter_mut() {
            if stopped() {
                break;
            }
            let export = Export::start(row.mode, &elastic, &rt, &idle, chunk, args.export_tasks);
            let start = Instant::now();
            let from = start + Duration::from_secs_f64(args.warmup_secs);
            let to = start + Duration::from_secs_f64(args.phase_secs);
            sleep_until(from);
            let bytes0 = export.bytes.load(Ordering::Relaxed);
            let cpu0 = process_cpu().unwrap_or_default();
            let client0 = client
                .cpu()
                .unwrap_or_else(|e| fail(&format!("client: {e}")));
            let thr0 = cgroup.and_then(|c| c.throttling()).unwrap_or_default();
            let brakes0 = elastic.snapshot().brakes;
            client
                .measure(from, to)
                .unwrap_or_else(|e| fail(&format!("client: {e}")));
            sleep_until(to);
            let bytes = export.bytes.load(Ordering::Relaxed) - bytes0;
            let client_cpu = client
                .cpu()
                .unwrap_or_else(|e| fail(&format!("client: {e}")))
                .saturating_sub(client0);
            let cpu = process_cpu().unwrap_or_default().saturating_sub(cpu0);
            let thr = cgroup.and_then(|c| c.throttling()).unwrap_or_default();
            let s = elastic.snapshot();
            let brakes = s.brakes.saturating_sub(brakes0);
            if row.mode == Mode::Default {
                row.placement = Some(format!(
                    "{:?} ({}), share {:.2}, idle share {}, quota headroom {}, long polls {}, brakes {}, quota brakes {}",
                    s.placement,
                    s.placement_reason,
                    s.share,
                    s.idle_share.map_or("-".into(), |x| format!("{x:.2}")),
                    s.quota_headroom.map_or("-".into(), |x| format!("{x:.2}")),
                    s.long_polls,
                    s.brakes,
                    s.quota_brakes
                ));
            }
            export.stop(&rt);
            // Requests in flight at the window's end land in it after.
            std::thread::sleep(Duration::from_millis(300));
            let h = client
                .take()
                .unwrap_or_else(|e| fail(&format!("client: {e}")));
            let p99 = q_us(&h, 0.99).unwrap_or(0.0);
            println!(
                "[round {} {:>14}] fg p99 {:>7} over {} requests | export {:.1} MiB/s | brakes {}",
                round + 1,
                row.mode.name(),
                fmt_us(Some(p99)),
                h.len(),
                bytes as f64 / (to - from).as_secs_f64() / (1 << 20) as f64,
                brakes
            );
            let _ = row.hist.add(&h);
            row.round_p99.push(p99);
            row.bytes += bytes;
            row.secs += (to - from).as_secs_f64();
            row.cpu += cpu;
            row.client_cpu += client_cpu;
            row.throttled.0 += thr.throttled_periods - thr0.throttled_periods;
            row.throttled.1 += thr.periods - thr0.periods;
            row.brakes += brakes;
        }
    }
    client
        .disconnect()
        .unwrap_or_else(|e| fail(&format!("client: {e}")));
    rt.shutdown_timeout(Duration::from_secs(2));
    idle.shutdown_timeout(Duration::from_secs(2));
    elastic.shutdown();
    rows
}

fn print_table(rows: &[Row], quota: Option<f64>) {
    let p99 = |mode| {
        rows.iter()
            .find(|r| r.mode == mode)
            .and_then(|r| q_us(&r.hist, 0.99))
    };
    let (base, idle) = (p99(Mode::None), p99(Mode::IdleRuntime));
    let cpus = |r: &Row| r.cpu.as_secs_f64() / r.secs.max(1e-9);
    let client_cpus = |r: &Row| r.client_cpu.as_secs_f64() / r.secs.max(1e-9);
    let base_row = rows.iter().find(|r| r.mode == Mode::None);
    let base_cpus = base_row.map(cpus);
    // What the service may use: the quota, or on a bare host the CPUs the client leaves.
    let room = match quota {
        Some(q) => q,
        None => cores() as f64 - base_row.map_or(0.0, client_cpus),
    };
    println!(
        "{:<15} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>6} {:>10} {:>10} {:>11} {:>9} {:>7}",
        "mode",
        "requests",
        "p50",
        "p99",
        "p999",
        "p99 rnds",
        "× none",
        "× idle",
        "MiB/s",
        "svc cpus",
        "of spare",
        "throttled",
        "brakes"
    );
    for r in rows {
        let p = q_us(&r.hist, 0.99);
        let ratio = |b: Option<f64>| match (p, b) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
            _ => "-".into(),
        };
        // The export's CPU: the service's above the baseline's; the spare: the room less the
        // baseline's.
        let of_spare = match base_cpus {
            Some(b) if r.mode != Mode::None => {
                format!("{:.2}", (cpus(r) - b) / (room - b).max(1e-9))
            }
            _ => "-".into(),
        };
        println!(
            "{:<15} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>6} {:>10.1} {:>10.2} {:>11} {:>9} {:>7}",
            r.mode.name(),
            r.hist.len(),
            fmt_us(q_us(&r.hist, 0.5)),
            fmt_us(p),
            fmt_us(q_us(&r.hist, 0.999)),
            fmt_us(median(&r.round_p99)),
            ratio(base),
            ratio(idle),
            r.bytes as f64 / r.secs.max(1e-9) / (1 << 20) as f64,
            cpus(r),
            of_spare,
            if quota.is_some() {
                format!("{}/{}", r.throttled.0, r.throttled.1)
            } else {
                "-".into()
            },
            r.brakes
        );
    }
    for r in rows {
        if let Some(p) = &r.placement {
            println!("{}: at the last round's end {p}", r.mode.name());
        }
    }
}

/// Serve the API on a loopback port on `rt`; returns its address.
fn start_service(rt: &Runtime) -> SocketAddr {
    rt.block_on(async {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| fail(&e.to_string()));
        let addr = tcp.local_addr().unwrap_or_else(|e| fail(&e.to_string()));
        let app = Router::new().route("/item/{id}", get(item));
        tokio::spawn(async move {
            let _ = axum::serve(tcp, app).await;
        });
        addr
    })
}

/// `GET /item/{id}`: a small JSON document, tens of µs of CPU.
async fn item(Path(id): Path<u64>) -> Json<serde_json::Value> {
    let lines: Vec<serde_json::Value> = (0..20u64)
        .map(|i| {
            serde_json::json!({
                "sku": format!("sku-{}", id.wrapping_mul(31).wrapping_add(i) % 100_000),
                "qty": (id ^ i) % 7 + 1,
                "price": ((id + i) % 10_000) as f64 / 100.0,
            })
        })
        .collect();
    Json(
        serde_json::json!({ "id": id, "customer": format!("customer-{}", id % 977), "lines": lines }),
    )
}

/// A running export: its tasks, its stop flag and the bytes it compressed.
struct Export {
    stop: Arc<AtomicBool>,
    bytes: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Export {
    fn start(
        mode: Mode,
        elastic: &Elastic,
        rt: &Runtime,
        idle: &Runtime,
        chunk: &Arc<Vec<u8>>,
        tasks: usize,
    ) -> Export {
        let stop = Arc::new(AtomicBool::new(false));
        let bytes = Arc::new(AtomicU64::new(0));
        let _in_rt = rt.enter();
        let tasks = (0..tasks)
            .filter(|_| mode != Mode::None)
            .map(|_| {
                let (stop, bytes, chunk) = (stop.clone(), bytes.clone(), chunk.clone());
                let n = chunk.len() as u64;
                match mode {
                    Mode::None => unreachable!("filtered out"),
                    Mode::Yield => rt.spawn(yielding(stop, bytes, chunk)),
                    Mode::IdleRuntime => idle.spawn(yielding(stop, bytes, chunk)),
                    Mode::SpawnBlocking => rt.spawn_blocking(move || {
                        while !stop.load(Ordering::Relaxed) {
                            one_chunk(&chunk, &bytes);
                        }
                    }),
                    // As the quick start writes it: the work inside the stream, before `.paced`.
                    Mode::Default => elastic
                        .spawn(
                            futures_util::stream::iter(std::iter::from_fn(move || {
                                (!stop.load(Ordering::Relaxed)).then_some(())
                            }))
                            .map(move |()| deflate(&chunk).len())
                            .paced(elastic)
                            .for_each(move |_| {
                                bytes.fetch_add(n, Ordering::Relaxed);
                                std::future::ready(())
                            }),
                        )
                        .unwrap_or_else(|e| fail(&e.to_string())),
                }
            })
            .collect();
        Export { stop, bytes, tasks }
    }

    /// Stop the export and wait for its tasks.
    fn stop(self, rt: &Runtime) {
        self.stop.store(true, Ordering::Relaxed);
        rt.block_on(async {
            for t in self.tasks {
                let _ = t.await;
            }
        });
    }
}

/// One library call of the export: compress `chunk`, count its bytes.
fn one_chunk(chunk: &[u8], bytes: &AtomicU64) {
    std::hint::black_box(deflate(chunk));
    bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
}

/// The export as a task that yields to the scheduler after every chunk.
async fn yielding(stop: Arc<AtomicBool>, bytes: Arc<AtomicU64>, chunk: Arc<Vec<u8>>) {
    while !stop.load(Ordering::Relaxed) {
        one_chunk(&chunk, &bytes);
        tokio::task::yield_now().await;
    }
}

/// What a Linux user writes instead of this library: a runtime whose threads run at
/// `SCHED_IDLE`.
fn idle_runtime(workers: usize) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("idle-runtime")
        .on_thread_start(|| {
            let _ = lowest_priority();
        })
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(&format!("idle runtime: {e}")))
}

/// The open-loop client: a pacing thread sends intended times to a runtime thread that sends
/// each request on a free keep-alive connection; both at real-time priority.
struct Client {
    state: Arc<ClientState>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

struct ClientState {
    epoch: Instant,
    /// The measured window, ns since `epoch` of the intended send time: [from, to).
    from: AtomicU64,
    to: AtomicU64,
    hist: Mutex<Histogram<u64>>,
    done: AtomicBool,
}

impl ClientState {
    fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_nanos() as u64
    }
}

/// Load before the first mode of an environment, left out of every figure.
const CLIENT_WARMUP: Duration = Duration::from_secs(2);

/// Intended send times waiting for the client's runtime (bounded: a stalled server costs
/// dropped requests, counted as the window's slowest, not memory).
const BACKLOG: usize = 100_000;

impl Client {
    fn start(addr: SocketAddr, rate: f64, conns: usize) -> Client {
        let state = Arc::new(ClientState {
            epoch: Instant::now(),
            from: AtomicU64::new(u64::MAX),
            to: AtomicU64::new(u64::MAX),
            hist: Mutex::new(new_hist()),
            done: AtomicBool::new(false),
        });
        let (tx, rx) = tokio::sync::mpsc::channel::<Instant>(BACKLOG);
        let s = state.clone();
        let sender = std::thread::Builder::new()
            .name("client-send".into())
            .spawn(move || {
                realtime(50);
                let mut rng = fastrand::Rng::with_seed(7);
                let mut next = Instant::now();
                while !s.done.load(Ordering::Relaxed) {
                    next += Duration::from_secs_f64(exp(&mut rng, 1.0 / rate));
                    sleep_until(next);
                    if tx.try_send(next).is_err() {
                        // Backlog full: the request never leaves; it counts as timed out.
                        record_latency(&s, next, Duration::from_secs(10));
                    }
                }
            })
            .unwrap_or_else(|e| fail(&e.to_string()));
        let s = state.clone();
        let runner = std::thread::Builder::new()
            .name("client-run".into())
            .spawn(move || {
                realtime(50);
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap_or_else(|e| fail(&e.to_string()));
                rt.block_on(drive(addr, conns, rx, s));
            })
            .unwrap_or_else(|e| fail(&e.to_string()));
        Client {
            state,
            threads: vec![sender, runner],
        }
    }

    /// Record requests intended to leave in [from, to).
    fn measure(&self, from: Instant, to: Instant) {
        self.state.to.store(self.state.ns(to), Ordering::Relaxed);
        self.state
            .from
            .store(self.state.ns(from), Ordering::Relaxed);
    }

    /// The window's latencies, and a fresh histogram for the next.
    fn take(&self) -> Histogram<u64> {
        let mut h = self.state.hist.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *h, new_hist())
    }

    fn stop(self) {
        self.state.done.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// The client process's side: one [`Client`] per `connect`, driven by lines on stdin, answered
/// on stdout (see [`RemoteClient`]). Ends at the end of its input.
fn client_process(args: &Args) {
    use std::io::{BufRead, Write};
    let mut out = std::io::stdout().lock();
    let mut client: Option<Client> = None;
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let reply = match client_command(&line, args, &mut client) {
            Ok(r) => r,
            Err(e) => format!("error {e}"),
        };
        if writeln!(out, "{reply}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
    if let Some(c) = client.take() {
        c.stop();
    }
}

/// The client of a command that needs one.
fn connected(client: &Option<Client>) -> Result<&Client, String> {
    client.as_ref().ok_or_else(|| "not connected".to_string())
}

/// One command of the client process and its reply line.
fn client_command(line: &str, args: &Args, client: &mut Option<Client>) -> Result<String, String> {
    let us = |v: &str| v.parse::<u64>().map_err(|e| format!("{v}: {e}"));
    match line.split_whitespace().collect::<Vec<_>>()[..] {
        ["connect", addr] => {
            let addr: SocketAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
            if let Some(c) = client.take() {
                c.stop();
            }
            *client = Some(Client::start(addr, args.rate, args.conns));
            Ok("ok".into())
        }
        ["window", from, to] => {
            let c = connected(client)?;
            let (from, to) = (us(from)?, us(to)?);
            let now = Instant::now();
            c.measure(
                now + Duration::from_micros(from),
                now + Duration::from_micros(to),
            );
            Ok("ok".into())
        }
        ["take"] => Ok(encode(&connected(client)?.take())),
        ["cpu"] => Ok(process_cpu().ok_or("no CPU time")?.as_micros().to_string()),
        ["disconnect"] => {
            if let Some(c) = client.take() {
                c.stop();
            }
            Ok("ok".into())
        }
        _ => Err(format!("unknown command {line:?}")),
    }
}

/// A histogram as one line: `value:count` pairs of its recorded values.
fn encode(h: &Histogram<u64>) -> String {
    let pairs: Vec<String> = h
        .iter_recorded()
        .map(|v| format!("{}:{}", v.value_iterated_to(), v.count_at_value()))
        .collect();
    format!("hist {}", pairs.join(" "))
}

/// The histogram of an [`encode`]d line.
fn decode(line: &str) -> Result<Histogram<u64>, String> {
    let mut words = line.split_whitespace();
    if words.next() != Some("hist") {
        return Err(format!("not a histogram: {line:?}"));
    }
    let mut h = new_hist();
    for pair in words {
        let (v, n) = pair
            .split_once(':')
            .and_then(|(v, n)| Some((v.parse::<u64>().ok()?, n.parse::<u64>().ok()?)))
            .ok_or_else(|| format!("bad pair {pair:?}"))?;
        h.record_n(v, n).map_err(|e| format!("{pair}: {e}"))?;
    }
    Ok(h)
}

/// The load generator in its own process: this binary run with `--client`, spoken to over
/// its stdin and stdout one line each way. It ends when this handle drops (its input closes),
/// also when this process dies.
struct RemoteClient {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
}

impl RemoteClient {
    fn spawn(args: &Args) -> Result<RemoteClient, String> {
        use std::process::{Command, Stdio};
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut command = Command::new(exe);
        command
            .args(["--client", "--rate", &args.rate.to_string()])
            .args(["--conns", &args.conns.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        // Its own process group: Ctrl-C reaches this process, which reports and ends it.
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command.spawn().map_err(|e| e.to_string())?;
        let (Some(input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("no pipes to the client process".into());
        };
        Ok(RemoteClient {
            child,
            input,
            output: std::io::BufReader::new(output),
        })
    }

    /// Send one command, return its reply.
    fn ask(&mut self, command: &str) -> Result<String, String> {
        use std::io::{BufRead, Write};
        writeln!(self.input, "{command}").map_err(|e| format!("{command}: {e}"))?;
        let mut reply = String::new();
        match self.output.read_line(&mut reply) {
            Ok(0) => Err(format!("{command}: the client process ended")),
            Ok(_) => match reply.trim_end().strip_prefix("error ") {
                Some(e) => Err(format!("{command}: {e}")),
                None => Ok(reply.trim_end().to_string()),
            },
            Err(e) => Err(format!("{command}: {e}")),
        }
    }

    /// Open the connections to a service at `addr` (replacing any earlier).
    fn connect(&mut self, addr: SocketAddr) -> Result<(), String> {
        self.ask(&format!("connect {addr}")).map(drop)
    }

    /// Record requests intended to leave in [from, to).
    fn measure(&mut self, from: Instant, to: Instant) -> Result<(), String> {
        let now = Instant::now();
        let us = |t: Instant| t.saturating_duration_since(now).as_micros();
        self.ask(&format!("window {} {}", us(from), us(to)))
            .map(drop)
    }

    /// The window's latencies, and a fresh histogram for the next.
    fn take(&mut self) -> Result<Histogram<u64>, String> {
        decode(&self.ask("take")?)
    }

    /// The client process's CPU time so far.
    fn cpu(&mut self) -> Result<Duration, String> {
        let reply = self.ask("cpu")?;
        let us = reply
            .parse::<u64>()
            .map_err(|e| format!("cpu {reply:?}: {e}"))?;
        Ok(Duration::from_micros(us))
    }

    /// Close the connections.
    fn disconnect(&mut self) -> Result<(), String> {
        self.ask("disconnect").map(drop)
    }
}

impl Drop for RemoteClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn record_latency(s: &ClientState, intended: Instant, took: Duration) {
    let at = s.ns(intended);
    if at >= s.from.load(Ordering::Relaxed) && at < s.to.load(Ordering::Relaxed) {
        let mut h = s.hist.lock().unwrap_or_else(|e| e.into_inner());
        record(&mut h, took.as_nanos() as u64);
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// Send each intended request on a free connection; latency from the intended time to the
/// whole response read.
async fn drive(
    addr: SocketAddr,
    conns: usize,
    mut rx: tokio::sync::mpsc::Receiver<Instant>,
    s: Arc<ClientState>,
) {
    let (free_tx, mut free_rx) = tokio::sync::mpsc::channel::<Sender>(conns);
    for _ in 0..conns {
        match connect(addr).await {
            Ok(c) => {
                let _ = free_tx.try_send(c);
            }
            Err(e) => fail(&format!("client: {e}")),
        }
    }
    let mut id = 0u64;
    while let Some(intended) = rx.recv().await {
        if s.done.load(Ordering::Relaxed) {
            break;
        }
        let Some(mut conn) = free_rx.recv().await else {
            break;
        };
        id += 1;
        let (s, free_tx) = (s.clone(), free_tx.clone());
        tokio::spawn(async move {
            let req = hyper::Request::get(format!("/item/{id}"))
                .header(hyper::header::HOST, "export")
                .body(Empty::<Bytes>::new());
            let ok = match req {
                Ok(req) => match conn.send_request(req).await {
                    Ok(resp) => resp.into_body().collect().await.is_ok(),
                    Err(_) => false,
                },
                Err(_) => false,
            };
            record_latency(&s, intended, intended.elapsed());
            let conn = if ok {
                Some(conn)
            } else {
                connect(addr).await.ok()
            };
            if let Some(c) = conn {
                let _ = free_tx.send(c).await;
            }
        });
    }
}

async fn connect(addr: SocketAddr) -> Result<Sender, String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(sender)
}

fn fail(e: &str) -> ! {
    cleanup_active();
    eprintln!("export: {e}");
    std::process::exit(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quota_flag_takes_cpus_or_off() {
        assert!(quota("off").unwrap().0.is_none());
        assert_eq!(quota("1.5").unwrap().0, Some(1.5));
        for bad in ["0", "0.05", "-1", "x", "NaN", "inf", ""] {
            assert!(quota(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_histogram_crosses_the_pipe_whole() {
        let mut h = new_hist();
        for ns in [1_000u64, 250_000, 250_100, 3_000_000, 90_000_000_000] {
            record(&mut h, ns);
        }
        let back = decode(&encode(&h)).unwrap();
        assert_eq!(back.len(), h.len());
        for q in [0.0, 0.5, 0.99, 1.0] {
            assert_eq!(back.value_at_quantile(q), h.value_at_quantile(q), "{q}");
        }
        assert_eq!(decode(&encode(&new_hist())).unwrap().len(), 0);
        for bad in ["", "hist 5", "hist 5:x", "hist :1", "take 1:2"] {
            assert!(decode(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_client_process_refuses_bad_commands() {
        let args = Args::parse_from(["export", "--client"]);
        let mut client = None;
        for bad in [
            "",
            "launch",
            "connect",
            "connect nowhere",
            "window 1",
            "window x 2",
            "take 3",
        ] {
            let reply = client_command(bad, &args, &mut client);
            assert!(reply.is_err(), "{bad:?}: {reply:?}");
        }
        assert!(client.is_none());
    }

    /// The client measures requests in its window only, and every mode's export runs and stops
    /// (no hang at its end), the library's through `elastic.spawn` as the quick start writes it.
    #[test]
    fn the_client_measures_its_window_and_every_export_stops() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let elastic = Elastic::builder().build().unwrap();
            let rt = elastic
                .runtime(
                    tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(2)
                        .enable_all(),
                )
                .build()
                .unwrap();
            let idle = idle_runtime(2);
            let addr = start_service(&rt);
            // The client process's commands, run here.
            let args = Args::parse_from(["export", "--client", "--rate", "400", "--conns", "4"]);
            let mut client = None;
            let mut ask = |line: &str| client_command(line, &args, &mut client);
            assert!(ask("take").is_err(), "not connected yet");
            assert_eq!(ask(&format!("connect {addr}")).unwrap(), "ok");
            // Nothing is recorded before a window is set.
            std::thread::sleep(Duration::from_millis(200));
            assert_eq!(decode(&ask("take").unwrap()).unwrap().len(), 0);
            let chunk = Arc::new(csv_rows(0, 4096));
            for mode in [
                Mode::None,
                Mode::Yield,
                Mode::SpawnBlocking,
                Mode::IdleRuntime,
                Mode::Default,
            ] {
                let export = Export::start(mode, &elastic, &rt, &idle, &chunk, 2);
                assert_eq!(ask("window 0 300000").unwrap(), "ok");
                std::thread::sleep(Duration::from_millis(600));
                let compressed = export.bytes.load(Ordering::Relaxed);
                export.stop(&rt);
                let h = decode(&ask("take").unwrap()).unwrap();
                assert!(!h.is_empty(), "{mode:?}: no request measured");
                assert_eq!(compressed > 0, mode != Mode::None, "{mode:?}");
            }
            assert!(ask("cpu").unwrap().parse::<u64>().is_ok());
            assert_eq!(ask("disconnect").unwrap(), "ok");
            assert!(ask("window 0 1").is_err(), "disconnected");
            rt.shutdown_timeout(Duration::from_secs(2));
            idle.shutdown_timeout(Duration::from_secs(2));
            elastic.shutdown();
            tx.send(()).unwrap();
        });
        // A generous guard against a hang, not a timing assertion.
        rx.recv_timeout(Duration::from_secs(120))
            .expect("the run finished");
    }
}
