//! Connection storms: established traffic beside a reconnect storm, with no gate, a static
//! accept rate, and elastic-cpu's connection gate.
//!
//! ```text
//! cargo run --release --example storm                     # the default run (~4 minutes)
//! cargo run --release --example storm -- --quick          # a short run (~40 s)
//! cargo run --release --example storm -- --help           # flags
//! cargo run --release --example storm -- --json out.json  # the JSON report elsewhere
//! ```
//!
//! Run time: about 4 minutes (five phases, two rounds); `--quick` about 40 s. Privileges: none; it makes no cgroup.
//! The load generator and the pause watchdog ask for real-time priority (root, `CAP_SYS_NICE`
//! or an `RLIMIT_RTPRIO`) and run at normal priority without it; the idle pool's `SCHED_IDLE`
//! needs no right.
//!
//! Every phase builds a fresh runtime for the service (through the library, so scheduling
//! latency is measured the same way in each), its two ports (established connections, and the
//! setup port), the foreground load generator on its own real-time threads (like the demo's),
//! and, depending on the phase, the connecting clients in a separate process. The run prints a
//! line a second, a summary, and writes a JSON and an HTML report.

mod args;
mod clients;
mod phase;
mod report;
mod server;
mod setup;

use args::{Args, Kind};
use elastic_cpu_examples::interrupt::{install_ctrl_c, stopped};
use elastic_cpu_examples::pauses::Pauses;
use elastic_cpu_examples::report::Outputs;
use elastic_cpu_examples::stats::mean;
use elastic_cpu_examples::{fg, spin};
use report::Report;
use setup::{Setup, SetupCost};
use std::time::{Duration, Instant};

impl Ctx {
    /// CPUs of this machine.
    fn cpus(&self) -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

/// Everything the phases share.
struct Ctx {
    args: Args,
    /// Foreground requests per second at calm.
    rate: f64,
    setup: Setup,
    run_start: Instant,
    pauses: Pauses,
    /// Setups per second measured by the capacity phases so far (mean).
    capacity: Option<f64>,
}

fn main() {
    // The connecting clients are this binary again, in client mode (see `clients`).
    if let Some(p) = clients::client_mode() {
        clients::run(p);
    }
    let args = Args::from_env();
    install_ctrl_c("storm-ctrl-c", || {});
    spin::calibrate_spin();
    let setup = if args.setup == "hash" {
        let cost = SetupCost::calibrate(args.setup_us, args.chunk_us);
        eprintln!(
            "setup: {} chunks of {} hash rounds, {:.0} us of CPU each ({:.0} us per setup)",
            cost.chunks,
            cost.iters,
            cost.chunk_us,
            cost.setup_ns() as f64 / 1e3
        );
        Setup::Hash(cost)
    } else {
        let setup = Setup::tls().unwrap_or_else(|e| {
            eprintln!("TLS setup: {e}");
            std::process::exit(1)
        });
        eprintln!(
            "setup: TLS 1.3 (ECDSA P-256, X25519) + SCRAM-SHA-256 (PBKDF2, {} iterations): {:.0} us of server CPU",
            elastic_cpu_examples::handshake::ITERATIONS,
            setup.cpu().as_secs_f64() * 1e6
        );
        setup
    };
    let mut ctx = Ctx {
        rate: 0.0,
        setup,
        run_start: Instant::now(),
        pauses: Pauses::start(),
        capacity: None,
        args,
    };
    let (rate, per_request_cpu_us) = fg::rate_or_calibrate(ctx.args.fg.rate, || {
        let (elastic, rt) =
            phase::service_runtime(ctx.args.fg.workers, None, !ctx.args.no_unstack)?;
        let calibrated = fg::calibrate_rate(&rt, &ctx.args.fg, ctx.args.fg_load, ctx.args.seed);
        rt.shutdown_timeout(Duration::from_secs(3));
        drop(elastic);
        calibrated
    });
    ctx.rate = rate;
    eprintln!(
        "foreground: {:.0} requests/s at calm ({:.0} at 1.5x), {} us of work each, {} connections, {} workers",
        ctx.rate,
        ctx.rate * 1.5,
        ctx.args.fg.work_us,
        ctx.args.fg.conns,
        ctx.args.fg.workers
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
            ctx.capacity = mean(&capacities);
            eprintln!(
                "capacity: {:.0} setups/s (mean of {} round(s))",
                ctx.capacity.unwrap_or(0.0),
                capacities.len()
            );
        }
        rep.segments.push(seg);
    }
    rep.finish(&ctx);

    let out = Outputs {
        summary: rep.summary_text(),
        json: rep.to_json(),
        html: rep.to_html(),
    };
    (ctx.args.reports).finish("storm", &out, &[], rep.interrupted);
}
