//! Connection storms: established traffic beside a reconnect storm, with no gate, a static
//! accept rate, and elastic-cpu's connection gate.
//!
//! ```text
//! cargo run --release --example storm                     # the default run (~4 minutes)
//! cargo run --release --example storm -- --help           # flags
//! cargo run --release --example storm -- --json out.json  # the JSON report elsewhere
//! ```
//!
//! Every phase builds a fresh runtime for the service (through the library, so scheduling
//! latency is measured the same way in each), its two ports (established connections, and the
//! setup port), the foreground load generator on its own real-time threads (like the demo's),
//! and, depending on the phase, the connecting clients in a separate process. The run prints a
//! line a second, a summary, and writes a JSON and an HTML report.

mod args;
// Shared by the `demo` and `storm` examples (each uses only part of them).
mod clients;
#[allow(dead_code)]
#[path = "../common/fg.rs"]
mod fg;
#[allow(dead_code)]
#[path = "../common/pauses.rs"]
mod pauses;
mod phase;
mod report;
mod server;
mod setup;
#[allow(dead_code)]
#[path = "../common/util.rs"]
mod util;

use args::{Args, Kind};
use fg::{FgStats, LoadGen, Rate};
use report::Report;
use setup::SetupCost;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Set by Ctrl-C: end the run, write what we have.
static STOP: AtomicBool = AtomicBool::new(false);

fn stopped() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// Ctrl-C handler on a side thread (a tiny current-thread runtime of its own).
fn install_ctrl_c() {
    let _ = std::thread::Builder::new()
        .name("storm-ctrl-c".into())
        .spawn(|| {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if tokio::signal::ctrl_c().await.is_ok() {
                    eprintln!("\ninterrupted: finishing the current phase early and writing the partial report (Ctrl-C again to quit now)");
                    STOP.store(true, Ordering::SeqCst);
                }
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            });
        });
}

/// Everything the phases share.
struct Ctx {
    args: Args,
    /// Foreground requests per second at calm.
    rate: f64,
    cost: SetupCost,
    run_start: Instant,
    pauses: pauses::Pauses,
    /// Setups per second measured by the capacity phases so far (mean).
    capacity: Option<f64>,
}

fn main() {
    // The connecting clients are this binary again, in client mode (see `clients`).
    if let Some(p) = clients::client_mode() {
        clients::run(p);
    }
    let args = Args::from_env();
    install_ctrl_c();
    util::calibrate_spin();
    let cost = SetupCost::calibrate(args.setup_us, args.chunk_us);
    eprintln!(
        "setup: {} chunks of {} hash rounds, {:.0} us of CPU each ({:.0} us per setup)",
        cost.chunks,
        cost.iters,
        cost.chunk_us,
        cost.setup_ns() as f64 / 1e3
    );
    let mut ctx = Ctx {
        rate: 0.0,
        cost,
        run_start: Instant::now(),
        pauses: pauses::Pauses::start(),
        capacity: None,
        args,
    };
    if !ctx.pauses.realtime {
        eprintln!("note: no real-time priority for the pause watchdog; machine pauses stay in the figures");
    }
    let mut per_request_cpu_us = None;
    ctx.rate = match ctx.args.rate {
        Some(r) => r,
        None => match calibrate_rate(&ctx) {
            Ok((r, c)) => {
                per_request_cpu_us = Some(c);
                r
            }
            Err(e) => {
                eprintln!("error: calibrating the foreground rate: {e}");
                std::process::exit(1);
            }
        },
    };
    eprintln!(
        "foreground: {:.0} requests/s at calm ({:.0} at 1.5x), {} us of work each, {} connections, {} workers",
        ctx.rate,
        ctx.rate * 1.5,
        ctx.args.work_us,
        ctx.args.conns,
        ctx.args.workers
    );
    let mut rep = Report::new(&ctx, per_request_cpu_us);
    ctx.run_start = Instant::now();
    let plan: Vec<(usize, Kind)> = (0..ctx.args.rounds)
        .flat_map(|round| ctx.args.phases.iter().map(move |&k| (round, k)))
        .collect();
    let mut capacities = Vec::new();
    for (round, kind) in plan {
        if stopped() {
            break;
        }
        let seg = phase::run(&ctx, kind, round, &mut rep);
        if kind == Kind::Capacity && seg.skipped.is_none() && seg.measured_secs > 0.0 {
            capacities.push(seg.completed_per_sec());
            ctx.capacity = report::mean(&capacities);
            eprintln!(
                "capacity: {:.0} setups/s (mean of {} round(s))",
                ctx.capacity.unwrap_or(0.0),
                capacities.len()
            );
        }
        rep.segments.push(seg);
    }
    rep.finish(&ctx);

    println!();
    print!("{}", rep.summary_text());
    let json = ctx
        .args
        .json
        .clone()
        .unwrap_or_else(|| report::default_path("report.json"));
    let html = ctx
        .args
        .html
        .clone()
        .unwrap_or_else(|| report::default_path("report.html"));
    for (path, body) in [(&json, rep.to_json()), (&html, rep.to_html())] {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        match std::fs::write(path, body) {
            Ok(()) => println!("wrote {}", path.display()),
            Err(e) => eprintln!("error: writing {}: {e}", path.display()),
        }
    }
    if rep.interrupted {
        println!("(partial report: the run was interrupted)");
    }
}

/// Run the service alone at a trial rate and measure the CPU the whole process spends per
/// request (server, load generator and kernel), to size the calm rate to `--fg-load`.
fn calibrate_rate(ctx: &Ctx) -> Result<(f64, f64), String> {
    let a = &ctx.args;
    let machine = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let trial = (0.5 * a.fg_load * machine / (a.work_us * 1e-6)).max(100.0);
    let (elastic, rt) = phase::service_runtime(a.workers, None)?;
    let addr = fg::start_server(&rt, a.work_us)?;
    let stats = FgStats::new();
    let lg = LoadGen::start(
        addr,
        Rate::new(trial),
        a.conns,
        stats.clone(),
        a.seed ^ 0xCA1,
    )
    .map_err(|e| format!("load generator: {e}"))?;
    std::thread::sleep(Duration::from_millis(500));
    let c0 = util::process_cpu().ok_or("no /proc/self/stat")?;
    let r0 = stats.received.load(Ordering::SeqCst);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(2500));
    let c1 = util::process_cpu().ok_or("no /proc/self/stat")?;
    let r1 = stats.received.load(Ordering::SeqCst);
    let secs = t0.elapsed().as_secs_f64();
    lg.stop_and_drain(Duration::from_secs(2), &STOP);
    rt.shutdown_timeout(Duration::from_secs(3));
    drop(elastic);
    if r1 <= r0 {
        return Err("no replies during calibration".into());
    }
    let per_req = (c1 - c0).as_secs_f64() / (r1 - r0) as f64;
    let rate = a.fg_load * machine / per_req;
    eprintln!(
        "calibrated: {:.0} req/s used {:.0}% of the machine, {:.0} us of process CPU per request",
        (r1 - r0) as f64 / secs,
        100.0 * (c1 - c0).as_secs_f64() / secs / machine,
        per_req * 1e6
    );
    Ok((rate, per_req * 1e6))
}
