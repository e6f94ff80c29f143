//! The isolation experiment: foreground latency next to elastic CPU work, phase by phase.
//!
//! ```text
//! cargo run --release --example demo -- --quick          # the main result, about 90 s
//! cargo run --release --example demo                     # every phase, about 10 minutes
//! cargo run --release --example demo -- --help           # flags
//! cargo run --release --example demo -- --speed          # + controller settle-time phases
//! ```
//!
//! Run time: `--quick` about 90 s (baseline and `default`, one 20 s round each, on the host and
//! inside the quota). The default run: 9 phases on the host and 6 inside the quota, 3 rounds of
//! 13 s each, about 10 minutes; `--speed` adds 12 phases a round (about 8 minutes more).
//!
//! Privileges: none to run. The quota environment makes a child cgroup of the `cpu` controller
//! (root, or a delegated cgroup v2 subtree); without that right it is skipped with a note and
//! the run still exits 0 (an explicit `--cpu-quota F` exits 2 instead). The load generator and
//! the pause watchdog ask for real-time priority (root, `CAP_SYS_NICE` or an `RLIMIT_RTPRIO`);
//! without it they run at normal priority and the watchdog says machine pauses stay in the
//! figures.
//!
//! Every phase builds a fresh runtime under test (through the library, so the scheduling
//! latency is measured the same way in each), a loopback TCP service on it, an open-loop load
//! generator on its own threads, and, depending on the phase, the export scan. The run prints a
//! line a second, a summary table with the main result (the quick start's scan against the
//! baseline: foreground p99, and the share of the spare CPU it took), and writes a JSON and an
//! HTML report.

mod args;
mod classes;
mod ctl;
mod culprit;
mod mix;
mod neighbour;
mod phase;
mod report;
mod scan;

use args::{Args, Env, Kind, PhaseSpec, TargetArg};
use ctl::{Control, Mode, Tuning};
use elastic_cpu_examples::interrupt::{install_ctrl_c, stopped};
use elastic_cpu_examples::latency::fmt_us;
use elastic_cpu_examples::pauses::Pauses;
use elastic_cpu_examples::quota::{self, QuotaCgroup};
use elastic_cpu_examples::report::Outputs;
use elastic_cpu_examples::stats::{mean, median};
use elastic_cpu_examples::{fg, spin};
use phase::{rest_key, run_phase};
use report::Report;
use scan::Table;
use std::sync::Arc;
use std::time::Instant;

/// `--target-us auto`: the baseline's median window p99 of scheduling latency plus one poll
/// quantum: at the p99, a foreground task may wait behind about one elastic poll.
fn auto_target_us(baseline_sched_p99_us: f64, quantum_us: u64) -> u64 {
    (baseline_sched_p99_us + quantum_us as f64).clamp(100.0, 5000.0) as u64
}

/// Everything the phases share.
struct Ctx {
    args: Args,
    cpus: f64,
    rate: f64,
    table: Arc<Table>,
    rows_per_cpu_sec: f64,
    run_start: Instant,
    /// Where the last `paced` phase's limit ended (the start of `step` phases).
    rest_level: Option<f64>,
    /// The controller's target for the paced phases (None: the library's default).
    target_us: Option<u64>,
    /// How the target was chosen.
    target_source: String,
    /// Where each paced phase (by name) ended (the start of its next round).
    rest_by_name: std::collections::HashMap<String, f64>,
    /// Machine pauses (the whole VM descheduled), to leave out of the latency figures.
    pauses: Pauses,
    /// Where the phases run now.
    env: Env,
    /// The machine's cores, read at the start (on the host).
    machine_cpus: usize,
    /// The quota cgroup the process is in (quota environment).
    quota: Option<QuotaCgroup>,
}

fn main() {
    // The noisy neighbour is this binary again, in burn mode (see `neighbour`).
    neighbour::burn_if_neighbour();
    let args = Args::from_env();
    fg::set_client_realtime(args.client_priority == args::ClientPriority::Realtime);
    install_ctrl_c("demo-ctrl-c", quota::cleanup_active);

    let machine_cpus = elastic_cpu_examples::cli::cores();
    let cpus = machine_cpus.min(args.fg.workers) as f64;

    let spin_per_us = spin::calibrate_spin();
    eprintln!(
        "calibrated: {:.0} spin iterations per us of CPU; building a {}-row table...",
        spin_per_us, args.rows
    );
    let table = Arc::new(Table::build(args.rows, args.seed));
    let (rows_per_cpu_sec, chunk_cpu) = scan::calibrate(&table, args.chunk_rows);
    eprintln!(
        "scan: {:.2}M rows per CPU-second single-threaded, {:.0} us of CPU per {}-row chunk",
        rows_per_cpu_sec / 1e6,
        chunk_cpu * 1e6,
        args.chunk_rows
    );

    let mut ctx = Ctx {
        cpus,
        rate: 0.0,
        table,
        rows_per_cpu_sec,
        run_start: Instant::now(),
        rest_level: None,
        target_us: None,
        target_source: String::new(),
        rest_by_name: Default::default(),
        pauses: Pauses::start(),
        env: Env::Host,
        machine_cpus,
        quota: None,
        args,
    };
    // An explicit --cpu-quota that cannot work ends the run before it starts.
    if let Some(Some(cpus)) = ctx.args.cpu_quota {
        if let Err(why) = QuotaCgroup::enter(cpus) {
            eprintln!("error: cannot run under a CPU quota of {cpus} CPUs: {why}");
            std::process::exit(2);
        }
    }
    // Started after calibration, so the spin and scan rates are measured on a quiet machine;
    // it runs through every phase and stops when this guard drops.
    let _neighbour = ctx.args.neighbour.map(|share| {
        let n = neighbour::Neighbour::start(share).unwrap_or_else(|e| {
            eprintln!("cannot start the neighbour process: {e}");
            std::process::exit(2)
        });
        eprintln!("neighbour: a separate process burning {share} of a core in 10 ms periods");
        n
    });
    let (rate, per_request_cpu_us) = fg::rate_or_calibrate(ctx.args.fg.rate, || {
        let ctl = Control::new(ctx.args.fg.workers, Mode::Unpaced, tuning(&ctx))?;
        let calibrated = fg::calibrate_rate(&ctl.rt, &ctx.args.fg, ctx.args.fg_load, ctx.args.seed);
        ctl.shutdown();
        calibrated
    });
    ctx.rate = rate;
    eprintln!(
        "foreground: {:.0} requests/s, {} us of work each, {} connections, {} workers, client at {} priority{}",
        ctx.rate,
        ctx.args.fg.work_us,
        ctx.args.fg.conns,
        ctx.args.fg.workers,
        ctx.args.client_priority.name(),
        if ctx.args.elastic_mix {
            "; elastic work: pace_blocking scan + Pacer loops + paced streams"
        } else {
            ""
        }
    );

    let mut rep = Report {
        machine: report::Machine {
            cpus: machine_cpus,
            workers: ctx.args.fg.workers,
            cpus_used: cpus,
            os: std::env::consts::OS.into(),
            arch: std::env::consts::ARCH.into(),
            tokio_unstable: cfg!(tokio_unstable),
            rate: ctx.rate,
            work_us: ctx.args.fg.work_us,
            per_request_cpu_us,
            conns: ctx.args.fg.conns,
            elastic_tasks: ctx.args.elastic_tasks,
            rows: ctx.args.rows,
            chunk_rows: ctx.args.chunk_rows,
            chunk_cpu_us: chunk_cpu * 1e6,
            rows_per_cpu_sec,
            phase_secs: ctx.args.phase_secs,
            warmup_secs: ctx.args.warmup_secs,
            target_us: None,
            target_source: String::new(),
            slice_ms: ctx
                .args
                .slice_ms
                .unwrap_or(elastic_cpu::settings::DEFAULT_SLICE.as_millis() as u64),
            quantum_us: ctx
                .args
                .quantum_us
                .unwrap_or(elastic_cpu::settings::DEFAULT_QUANTUM.as_micros() as u64),
            static_limit: ctx.args.static_limit,
            neighbour: ctx.args.neighbour,
            command: std::env::args().collect::<Vec<_>>().join(" "),
        },
        segments: Vec::new(),
        phases: Vec::new(),
        timeline: Vec::new(),
        interrupted: false,
        notes: Vec::new(),
    };

    let lib_target = elastic_cpu::settings::DEFAULT_TARGET.as_micros() as u64;
    match ctx.args.target_us {
        TargetArg::Us(t) => {
            ctx.target_us = Some(t);
            ctx.target_source = "--target-us".into();
        }
        TargetArg::Library => {
            ctx.target_source = "the library's own, measured: what elastic work adds over the \
                foreground's quiet latency, against half of it (per phase, in the report)"
                .into();
        }
        TargetArg::Auto if ctx.args.phases.first().map(|p| p.kind) == Some(Kind::Baseline) => {
            ctx.target_source = "auto (set after the first baseline phase)".into();
        }
        TargetArg::Auto => {
            ctx.target_us = Some(lib_target);
            ctx.target_source = "the library's default (auto needs baseline first)".into();
        }
    }
    ctx.run_start = Instant::now();
    let envs = match ctx.args.cpu_quota {
        Some(None) => vec![Env::Host],
        _ => vec![Env::Host, Env::Quota],
    };
    let mut host_target = None;
    for env in envs {
        if stopped() {
            break;
        }
        let phases = match env {
            Env::Host => ctx.args.phases.clone(),
            Env::Quota => ctx.args.quota_phases.clone(),
        };
        if env == Env::Quota {
            let cpus = ctx.args.cpu_quota.flatten().unwrap_or(DEFAULT_QUOTA);
            match QuotaCgroup::enter(cpus) {
                Ok(q) => {
                    eprintln!(
                        "quota: the process now runs in {} (cgroup {}), {cpus} CPUs per 100 ms period",
                        q.dir.display(),
                        q.version
                    );
                    ctx.quota = Some(q);
                }
                Err(why) if ctx.args.cpu_quota.is_some() => {
                    eprintln!("error: cannot run under a CPU quota of {cpus} CPUs: {why}");
                    std::process::exit(2);
                }
                Err(why) => {
                    let note = format!(
                        "quota environment skipped: this machine does not let the demo make a cgroup with a CPU quota ({why})"
                    );
                    println!("{note}");
                    rep.notes.push(note);
                    continue;
                }
            }
            host_target = ctx.target_us;
            // The auto target comes from this environment's own baseline.
            if ctx.args.target_us == TargetArg::Auto
                && phases.first().map(|p| p.kind) == Some(Kind::Baseline)
            {
                ctx.target_us = None;
            }
        }
        ctx.env = env;
        run_env(&mut ctx, &phases, &mut rep, lib_target);
        // Leave the quota cgroup (back to where the process came from) and remove it.
        ctx.quota = None;
    }
    rep.machine.target_us = host_target.or(ctx.target_us);
    rep.machine.target_source = ctx.target_source.clone();
    rep.phases = report::aggregate(&rep.segments);
    report::attribute_cpu(&mut rep.phases, &mut rep.segments);
    rep.interrupted = stopped();

    let out = Outputs {
        summary: rep.summary_text(),
        json: rep.to_json(),
        html: rep.to_html(),
    };
    (ctx.args.reports).finish("demo", &out, &rep.notes, rep.interrupted);
}

/// The quota of the default run's quota environment, in CPUs.
const DEFAULT_QUOTA: f64 = 1.5;

/// Run `phases` for every round in the current environment, into `rep`.
fn run_env(ctx: &mut Ctx, phases: &[PhaseSpec], rep: &mut Report, lib_target: u64) {
    let plan: Vec<(usize, PhaseSpec)> = (0..ctx.args.rounds)
        .flat_map(|round| phases.iter().map(move |p| (round, p.clone())))
        .collect();
    for (round, spec) in plan {
        if stopped() {
            break;
        }
        let mut r = run_phase(ctx, &spec, &mut rep.timeline);
        r.round = round;
        if ctx.args.target_us == TargetArg::Auto
            && ctx.target_us.is_none()
            && spec.kind == Kind::Baseline
        {
            let t = match median(&r.scheds) {
                Some(m) => auto_target_us(m, quantum_us(ctx)),
                None => lib_target,
            };
            ctx.target_us = Some(t);
            ctx.target_source = format!(
                "auto: the baseline's median window p99 ({}) + the quantum ({})",
                fmt_us(median(&r.scheds)),
                fmt_us(Some(quantum_us(ctx) as f64))
            );
            eprintln!(
                "controller target p99 ({}): {} ({})",
                ctx.env.name(),
                fmt_us(Some(t as f64)),
                ctx.target_source
            );
        }
        if matches!(spec.kind, Kind::Paced | Kind::PacedIdle) && r.skipped.is_none() {
            let label = r.label();
            let lim: Vec<f64> = rep
                .timeline
                .iter()
                .filter(|p| p.phase == label && p.t_ms >= r.start_ms && p.t_ms <= r.end_ms)
                .filter_map(|p| p.limit)
                .collect();
            let n = lim.len().div_ceil(4);
            let rest = mean(&lim[lim.len() - n..]);
            if spec.kind == Kind::Paced {
                ctx.rest_level = rest;
            }
            if let Some(l) = rest {
                ctx.rest_by_name.insert(rest_key(ctx, &spec), l);
            }
        }
        rep.segments.push(r);
    }
}

fn quantum_us(ctx: &Ctx) -> u64 {
    ctx.args
        .quantum_us
        .unwrap_or(elastic_cpu::settings::DEFAULT_QUANTUM.as_micros() as u64)
}

fn tuning(ctx: &Ctx) -> Tuning {
    let a = &ctx.args;
    Tuning {
        target_us: ctx.target_us,
        slice_ms: a.slice_ms,
        quantum_us: a.quantum_us,
        brake_us: a.brake_us,
        outlier_us: a.outlier_us,
        throttle_signal: !a.no_throttle_signal,
        quota_headroom: !a.no_quota_headroom,
        io_signal: !a.no_io_signal,
        run_queue_signal: !a.no_run_queue_signal,
        os_yield: !a.no_os_yield,
        unstack: !a.no_unstack,
        attach: a.attach,
    }
}
