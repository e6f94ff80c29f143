//! The fleet: nodes that differ, each measuring and pacing itself, find their own elastic CPU
//! levels.
//!
//! ```text
//! cargo run --release --example fleet                  # three nodes: quotas 0.5, 0.6, 0.8 CPUs
//! cargo run --release --example fleet -- --quick       # the same, short (about 55 s)
//! cargo run --release --example fleet -- --help        # flags
//! cargo run --release --example fleet -- --quotas 0.4,1 --fg-shares 0.5,0.3
//! cargo run --release --example fleet -- --cpus-per-node 1   # a node per CPU, each on its own
//! ```
//!
//! Run time: about 3 minutes (calibration 5 s, baseline 20 s, paced 70 s, the step and back
//! 25 s each, each node's own-scan phase 12 s, and each node's start); pinned (no own-scan
//! phases) about 2.5; `--quick` about 55 s.
//!
//! Privileges: every node runs in a child cgroup of the `cpu` controller with its own quota
//! (root, or a delegated cgroup v2 subtree); without that right there is nothing to run: the
//! fleet says so in one line and exits 0. The load generators and the pause watchdog ask for
//! real-time priority (root, `CAP_SYS_NICE` or an `RLIMIT_RTPRIO`) and run at normal priority
//! without it.
//!
//! This process is the parent: it starts this binary again once per node (`--node`, see
//! `node`), each in its own cgroup with its own CPU quota, and runs one open-loop load
//! generator per node itself (outside the quotas). It drives the phases (`plan`): every node's
//! baseline without a scan, every node's paced scan until the controllers settle, a foreground
//! step on one node and back, then each node's scan off in turn while the others' run, and
//! samples every node once a second. Then it prints a summary and writes a JSON and an HTML
//! report (`report`).
//!
//! Two scenarios. By default the nodes and the load generators share every core, and each
//! node's p99 is judged against its own-scan baseline (the others' scans on, its own off): what
//! its own scan costs it. With `--cpus-per-node N` each node and its load generator's threads
//! are pinned to N CPUs of their own (`cpus`), as a fleet's nodes are separate machines, and
//! each node's p99 is judged against its baseline without a scan.

mod args;
mod cpus;
mod node;
mod plan;
mod report;
mod wire;

use args::{Args, Fg, NodeMix};
use elastic_cpu_examples::affinity;
use elastic_cpu_examples::cpu_time::{machine_busy, process_cpu};
use elastic_cpu_examples::fg::{self, FgStats, LoadGen, Rate};
use elastic_cpu_examples::interrupt::{install_ctrl_c, sleep_until, stopped};
use elastic_cpu_examples::latency::{fmt_us, q_us, Latency};
use elastic_cpu_examples::pauses::Pauses;
use elastic_cpu_examples::report::Outputs;
use node::{NodeSpec, NODE_FLAG};
use plan::{Kind, Lengths, Plan, CALIBRATE_SECS};
use report::{HostPoint, Machine, NodeRun, Point, Run};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::{Command, Hello, Sample};

/// A guess of a node's CPU per request (µs) for the calibration's trial rate: the handler's
/// work and about as much again for the connection's tasks and the socket calls.
fn trial_cpu_per_request_us(work_us: f64) -> f64 {
    work_us * 1.5 + 20.0
}

/// A running node process, as the parent sees it.
struct NodeProc {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    hello: Hello,
}

impl NodeProc {
    /// Start node `spec` and wait for its first line.
    fn start(spec: &NodeSpec) -> Result<NodeProc, (i32, String)> {
        let exe = std::env::current_exe().map_err(|e| (1, format!("current_exe: {e}")))?;
        let mut child = std::process::Command::new(exe)
            .arg(NODE_FLAG)
            .args(spec.to_args())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| (1, format!("starting {}: {e}", spec.name)))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::Builder::new()
            .name(format!("{}-lines", spec.name))
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| (1, format!("reader thread: {e}")))?;
        let stdin = child.stdin.take();
        let mut node = NodeProc {
            name: spec.name.clone(),
            child,
            stdin,
            lines,
            hello: Hello::default(),
        };
        let first = node.lines.recv_timeout(Duration::from_secs(30));
        let hello: Hello = match first {
            Ok(line) => serde_json::from_str(&line).map_err(|e| {
                (
                    1,
                    format!("{}: unexpected first line {line:?}: {e}", spec.name),
                )
            })?,
            Err(_) => {
                let code = node.child.wait().ok().and_then(|s| s.code()).unwrap_or(1);
                return Err((code, format!("{} ended without a word", spec.name)));
            }
        };
        if let Some(why) = hello.error.clone() {
            let code = node.child.wait().ok().and_then(|s| s.code()).unwrap_or(1);
            return Err((code, why));
        }
        node.hello = hello;
        Ok(node)
    }

    fn send(&mut self, c: Command) {
        if let Some(s) = self.stdin.as_mut() {
            if writeln!(s, "{}", c.line()).and_then(|_| s.flush()).is_err() {
                self.stdin = None;
            }
        }
    }

    /// The node's answer to `sample` (None: it did not answer in time or made no sense).
    fn read_sample(&mut self, until: Instant) -> Option<Sample> {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).ok()?;
            if let Ok(s) = serde_json::from_str::<Sample>(&line) {
                return Some(s);
            }
        }
    }
}

/// Every node process; dropping it quits them all, waits, and removes any cgroup a node that
/// was killed left behind (an empty cgroup can be removed).
struct Fleet(Vec<NodeProc>);

impl Drop for Fleet {
    fn drop(&mut self) {
        for n in &mut self.0 {
            n.send(Command::Quit);
            n.stdin = None;
        }
        let deadline = Instant::now() + Duration::from_secs(8);
        for n in &mut self.0 {
            while Instant::now() < deadline && matches!(n.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            if matches!(n.child.try_wait(), Ok(None)) {
                eprintln!("{} did not quit: killing it", n.name);
                let _ = n.child.kill();
                let _ = n.child.wait();
            }
            if let Some(dir) = &n.hello.cgroup {
                if std::path::Path::new(dir).exists() {
                    if let Err(e) = std::fs::remove_dir(dir) {
                        eprintln!("warning: removing {dir}: {e}");
                    }
                }
            }
        }
    }
}

/// One node's foreground: its load generator, its latencies, its rate.
struct Client {
    stats: Arc<FgStats>,
    rate: Rate,
    base_rate: f64,
    gen: Option<LoadGen>,
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(NODE_FLAG) {
        node::main(&argv[2..]);
    }
    let args = Args::from_env();
    let mix = match args.mix() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    fg::set_client_realtime(!args.client_normal);
    // The second Ctrl-C quits at once: the nodes see their stdin close and clean up.
    install_ctrl_c("fleet-ctrl-c", || {});
    let pauses = Pauses::start();

    let mut fleet = Fleet(Vec::new());
    let mut lib_cpus_notes = Vec::new();
    for (i, m) in mix.iter().enumerate() {
        let spec = NodeSpec {
            name: m.name.clone(),
            quota: m.quota,
            workers: args.workers,
            work_us: args.work_us,
            slice_ms: args.slice_ms,
            cpus: args.cpu_plan.get(i).cloned().unwrap_or_default(),
        };
        match NodeProc::start(&spec) {
            Ok(n) => {
                eprintln!(
                    "{}: quota {} CPUs in {} (cgroup {}), on CPUs {}, the library computes for {} CPUs ({}), serving on {}",
                    n.name,
                    m.quota,
                    n.hello.cgroup.as_deref().unwrap_or("-"),
                    n.hello.cgroup_version.as_deref().unwrap_or("-"),
                    n.hello
                        .cpus_allowed
                        .as_deref()
                        .map_or("-".into(), cpus::fmt_cpus),
                    n.hello.lib_cpus.map_or("-".into(), |c| format!("{c:.2}")),
                    n.hello.lib_cpus_source.as_deref().unwrap_or("-"),
                    n.hello.addr.as_deref().unwrap_or("-"),
                );
                if let Some(why) =
                    cpus::check_node(&spec, n.hello.cpus_allowed.as_deref(), n.hello.lib_cpus)
                {
                    eprintln!("warning: {why}");
                    lib_cpus_notes.push(why);
                }
                fleet.0.push(n);
            }
            // 2: the node could not enter its quota cgroup. Every node would fail alike, and
            // without quotas there is nothing to compare: skip the run, as the other examples
            // skip their quota phase.
            Err((2, why)) => {
                println!("fleet skipped: no rights to make a cgroup with a CPU quota here ({why})");
                drop(fleet);
                std::process::exit(0);
            }
            Err((_, why)) => {
                eprintln!("error: {why}");
                drop(fleet);
                std::process::exit(1);
            }
        }
    }

    let own_off: Vec<usize> = (0..mix.len()).filter(|&i| args.scans(i)).collect();
    let plan = Plan::new(
        Lengths {
            calibrate: if mix.iter().any(|m| matches!(m.fg, Fg::Share(_))) {
                CALIBRATE_SECS
            } else {
                0
            },
            baseline: args.baseline_secs,
            paced: args.paced_secs,
            rest: args.rest_secs,
            step: args.step_secs,
            warmup: args.warmup_secs,
            own_off: args.own_off_secs(),
        },
        &own_off,
    );
    let mut clients = Vec::new();
    for (i, (m, n)) in mix.iter().zip(&fleet.0).enumerate() {
        let r = match m.fg {
            Fg::Rate(r) => r,
            Fg::Share(s) => s * m.quota / (trial_cpu_per_request_us(args.work_us) * 1e-6),
        };
        let stats = FgStats::new();
        let rate = Rate::new(r);
        let addr = n.hello.addr.as_deref().unwrap_or_default().parse();
        let cpus = args.cpu_plan.get(i).map_or(&[][..], Vec::as_slice);
        let gen = addr
            .map_err(|e| format!("{}: address: {e}", m.name))
            .and_then(|a| {
                start_load(
                    a,
                    rate.clone(),
                    args.conns,
                    stats.clone(),
                    args.seed + i as u64,
                    cpus,
                )
            });
        match gen {
            Ok(g) => clients.push(Client {
                stats,
                rate,
                base_rate: r,
                gen: Some(g),
            }),
            Err(e) => {
                eprintln!("error: {e}");
                drop(fleet);
                std::process::exit(1);
            }
        }
    }

    let step_node = args.step_index(mix.len());
    let mut runs: Vec<NodeRun> = mix
        .iter()
        .zip(&fleet.0)
        .map(|(m, n)| NodeRun {
            name: m.name.clone(),
            quota: m.quota,
            fg_share: match m.fg {
                Fg::Share(s) => Some(s),
                Fg::Rate(_) => None,
            },
            lib_cpus: n.hello.lib_cpus,
            rows_per_cpu_s: n.hello.rows_per_cpu_s,
            lib_cpus_source: n.hello.lib_cpus_source.clone().unwrap_or_default(),
            cpus: n.hello.cpus_allowed.clone().unwrap_or_default(),
            cgroup: n.hello.cgroup.clone().unwrap_or_default(),
            ..NodeRun::default()
        })
        .collect();
    let mut host = Vec::new();
    let t0 = drive(
        &plan,
        &args,
        &mix,
        &mut fleet,
        &mut clients,
        &mut runs,
        &mut host,
        step_node,
    );
    let at = |s: usize| t0 + Duration::from_secs(s as u64);
    let ran = host.len();
    for (i, (c, r)) in clients.iter_mut().zip(&mut runs).enumerate() {
        c.stats.measure_until_now();
        if let Some(g) = c.gen.take() {
            r.lost = g.stop_and_drain(Duration::from_secs(2));
        }
        let window = |w: plan::Window| {
            let w = w.start.min(ran)..w.end.min(ran);
            c.stats.window_between(&pauses, at(w.start), at(w.end))
        };
        let b = window(plan.baseline());
        let rest = window(plan.rest());
        let whole = window(plan.paced_whole());
        r.baseline = Latency::of(&b.hist);
        r.paced_rest = Latency::of(&rest.hist);
        r.paced_whole = Latency::of(&whole.hist);
        r.left_out = b.left_out + whole.left_out;
        if !plan.own_off(i).is_empty() {
            let own = window(plan.own_off(i));
            r.own_off = Latency::of(&own.hist);
            r.left_out += own.left_out;
        }
    }
    drop(fleet);

    let interrupted = stopped();
    let mut notes = vec![match args.cpus_per_node {
        None => format!(
            "One machine of {} CPUs holds every node: their quotas ({:.2} CPUs together), the load \
             generators and the watchdog compete for its cores, and the VM's host takes it away at \
             times; a node's threads wait for a core that another node's quota lets that node use.",
            elastic_cpu_examples::cli::cores(),
            mix.iter().map(|m| m.quota).sum::<f64>()
        ),
        Some(n) => format!(
            "Each node and its load generator's threads are pinned to {n} CPU(s) of their own \
             ({}); the parent's sampling thread and the pause watchdog (one thread per CPU, \
             asleep but for 1 ms wake-ups) are not, and the VM's host takes the machine away at \
             times.",
            args.cpu_plan
                .iter()
                .zip(&mix)
                .map(|(c, m)| format!("{} on {}", m.name, cpus::fmt_cpus(c)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }];
    notes.extend(lib_cpus_notes);
    if interrupted {
        notes.push("partial report: the run was interrupted".into());
    }
    let run = Run {
        plan,
        nodes: runs,
        host,
        step_node,
        step_factor: args.step_factor,
        cpus_per_node: args.cpus_per_node,
        machine: Machine {
            cpus: elastic_cpu_examples::cli::cores(),
            workers: args.workers,
            work_us: args.work_us,
            conns: args.conns,
            client_priority: if args.client_normal {
                "normal"
            } else {
                "real-time"
            },
            pause_watchdog: pauses.realtime,
            slice_ms: args.slice_ms,
            command: std::env::args().collect::<Vec<_>>().join(" "),
        },
        interrupted,
        notes,
    };
    let out = Outputs {
        summary: run.summary_text(),
        json: run.to_json(),
        html: run.to_html(),
    };
    // An interruption is among the notes (the JSON report lists them too).
    (args.reports).finish("fleet", &out, &run.notes, false);
}

/// Start a node's load generator; with `cpus`, on a thread pinned to them, so that the
/// generator's threads (which inherit the mask) run on the node's CPUs.
fn start_load(
    addr: SocketAddr,
    rate: Rate,
    conns: usize,
    stats: Arc<FgStats>,
    seed: u64,
    cpus: &[usize],
) -> Result<LoadGen, String> {
    if cpus.is_empty() {
        return LoadGen::start(addr, rate, conns, stats, seed);
    }
    let cpus = cpus.to_vec();
    std::thread::Builder::new()
        .name("loadgen-pin".into())
        .spawn(move || {
            affinity::pin(&cpus).map_err(|e| format!("load generator: {e}"))?;
            LoadGen::start(addr, rate, conns, stats, seed)
        })
        .map_err(|e| format!("load generator thread: {e}"))?
        .join()
        .map_err(|_| "the load generator's start panicked".to_string())?
}

/// The previous sample of a node and of the host, to take differences from.
struct Prev {
    at: Instant,
    nodes: Vec<Option<Sample>>,
    busy: Option<(Duration, Duration)>,
    parent: Option<Duration>,
}

/// Run the plan: act at each phase's start, sample every node each second. Returns the run
/// clock's start.
#[allow(clippy::too_many_arguments)]
fn drive(
    plan: &Plan,
    args: &Args,
    mix: &[NodeMix],
    fleet: &mut Fleet,
    clients: &mut [Client],
    runs: &mut [NodeRun],
    host: &mut Vec<HostPoint>,
    step_node: usize,
) -> Instant {
    let t0 = Instant::now();
    let mut prev = Prev {
        at: t0,
        nodes: vec![None; fleet.0.len()],
        busy: machine_busy(),
        parent: process_cpu(),
    };
    sample_all(fleet, &mut prev, None, clients, runs, host, "");
    for sec in 0..plan.total() {
        if stopped() {
            break;
        }
        let kind = plan.kind_at(sec).expect("inside the plan");
        if plan.phases.iter().any(|p| p.secs.start == sec) {
            start_phase(kind, plan, args, mix, fleet, clients, runs, step_node);
        }
        sleep_until(t0 + Duration::from_secs(sec as u64 + 1));
        if stopped() {
            break;
        }
        sample_all(
            fleet,
            &mut prev,
            Some(sec),
            clients,
            runs,
            host,
            kind.name(),
        );
        progress(sec, kind, runs);
    }
    t0
}

/// What each phase changes as it starts.
#[allow(clippy::too_many_arguments)]
fn start_phase(
    kind: Kind,
    plan: &Plan,
    args: &Args,
    mix: &[NodeMix],
    fleet: &mut Fleet,
    clients: &mut [Client],
    runs: &mut [NodeRun],
    step_node: usize,
) {
    match kind {
        Kind::Calibrate => eprintln!(
            "calibrate: every node's foreground at a trial rate, to measure its CPU per request"
        ),
        Kind::Baseline => {
            for (i, (c, r)) in clients.iter_mut().zip(runs.iter_mut()).enumerate() {
                if let Fg::Share(share) = mix[i].fg {
                    let w = plan.calibration();
                    let pts: Vec<&Point> = r.points.iter().filter(|p| w.contains(&p.sec)).collect();
                    let cpus: f64 = pts.iter().filter_map(|p| p.cpus).sum();
                    let rps: f64 = pts.iter().map(|p| p.fg_rps).sum();
                    if cpus > 0.0 && rps > 0.0 {
                        let per_req = cpus / rps;
                        c.base_rate = share * mix[i].quota / per_req;
                        r.cpu_per_request_us = Some(per_req * 1e6);
                    } else {
                        eprintln!("{}: no calibration figures; the trial rate stays", r.name);
                    }
                }
                c.rate.set(c.base_rate);
                r.rate = c.base_rate;
                c.stats.measure_from_now();
            }
            let rates: Vec<String> = runs
                .iter()
                .map(|r| {
                    format!(
                        "{} {:.0} req/s{}",
                        r.name,
                        r.rate,
                        r.cpu_per_request_us
                            .map_or(String::new(), |c| format!(" ({c:.0} us CPU each)"))
                    )
                })
                .collect();
            eprintln!("baseline: foreground only: {}", rates.join(", "));
        }
        Kind::Paced => {
            eprintln!("paced: the scans on");
            for (i, n) in fleet.0.iter_mut().enumerate() {
                if args.scans(i) {
                    n.send(Command::ScanOn);
                }
            }
        }
        Kind::Step => {
            let c = &clients[step_node];
            c.rate.set(c.base_rate * args.step_factor);
            eprintln!(
                "step: {}'s foreground x{} ({:.0} req/s)",
                runs[step_node].name,
                args.step_factor,
                c.base_rate * args.step_factor
            );
        }
        Kind::Back => {
            let c = &clients[step_node];
            c.rate.set(c.base_rate);
            eprintln!(
                "back: {}'s foreground back to {:.0} req/s",
                runs[step_node].name, c.base_rate
            );
        }
        Kind::OwnOff(k) => {
            eprintln!("own-off: {}'s scan off, the other nodes' on", runs[k].name);
            // The node before it (if any) turns its scan back on.
            for (i, n) in fleet.0.iter_mut().enumerate() {
                if args.scans(i) {
                    n.send(if i == k {
                        Command::ScanOff
                    } else {
                        Command::ScanOn
                    });
                }
            }
        }
    }
}

/// Ask every node for a sample and record the second `sec` (None: only take the counters).
fn sample_all(
    fleet: &mut Fleet,
    prev: &mut Prev,
    sec: Option<usize>,
    clients: &[Client],
    runs: &mut [NodeRun],
    host: &mut Vec<HostPoint>,
    phase: &'static str,
) {
    for n in &mut fleet.0 {
        n.send(Command::Sample);
    }
    let now = Instant::now();
    let dt = (now - prev.at).as_secs_f64().max(1e-3);
    let until = now + Duration::from_millis(800);
    for (i, n) in fleet.0.iter_mut().enumerate() {
        let hist = clients[i].stats.take_sample();
        let cur = n.read_sample(until);
        if let Some(sec) = sec {
            let mut p = Point {
                sec,
                phase,
                fg_p99_us: q_us(&hist, 0.99),
                fg_rps: hist.len() as f64 / dt,
                ..Point::default()
            };
            if let (Some(c), Some(Some(b))) = (&cur, prev.nodes.get(i)) {
                p.limit = Some(c.limit);
                p.share = Some(c.share);
                p.cpus = Some((c.cpu_s - b.cpu_s) / dt);
                p.ledger_cpus = Some((c.elastic_s - b.elastic_s) / dt);
                p.granted_cpus = Some((c.acquired_s - b.acquired_s) / dt);
                p.over_limit_cpus = Some((c.over_limit_s - b.over_limit_s) / dt);
                p.forgiven_cpus = Some((c.forgiven_s - b.forgiven_s) / dt);
                p.quota_braked = Some(((c.quota_braked_s - b.quota_braked_s) / dt).clamp(0.0, 1.0));
                p.rate_cpus = Some(c.rate_cpus);
                p.periods = c.periods.saturating_sub(b.periods);
                p.throttled = c.throttled.saturating_sub(b.throttled);
                p.rows_per_s = c.rows.saturating_sub(b.rows) as f64 / dt;
                p.elastic_cpus = (runs[i].rows_per_cpu_s)
                    .filter(|r| *r > 0.0)
                    .map(|r| p.rows_per_s / r);
                p.signal_us = c.signal_us;
                p.target_us = Some(c.target_us);
                p.source = c.source.clone();
            }
            if let Some(c) = cur.as_ref().filter(|c| !c.placement.is_empty()) {
                runs[i].placement.clone_from(&c.placement);
            }
            runs[i].points.push(p);
        }
        if cur.is_some() {
            prev.nodes[i] = cur;
        }
    }
    let busy = machine_busy();
    let parent = process_cpu();
    if let Some(sec) = sec {
        let cores = elastic_cpu_examples::cli::cores() as f64;
        host.push(HostPoint {
            sec,
            busy_cpus: match (busy, prev.busy) {
                (Some((b1, t1)), Some((b0, t0))) if t1 > t0 => {
                    Some((b1 - b0).as_secs_f64() / (t1 - t0).as_secs_f64() * cores)
                }
                _ => None,
            },
            parent_cpus: match (parent, prev.parent) {
                (Some(c1), Some(c0)) => Some((c1.saturating_sub(c0)).as_secs_f64() / dt),
                _ => None,
            },
        });
    }
    prev.at = now;
    prev.busy = busy;
    prev.parent = parent;
}

/// A line a second on stderr: every node's limit, elastic CPUs, p99 and throttled periods.
fn progress(sec: usize, kind: Kind, runs: &[NodeRun]) {
    let mut line = format!("{:>4}s {:<9}", sec + 1, kind.name());
    for r in runs {
        if let Some(p) = r.points.last() {
            line.push_str(&format!(
                " | {} lim {} el {} cpu {} p99 {} thr {}",
                r.name,
                report::f2(p.limit),
                report::f2(p.elastic_cpus),
                report::f2(p.cpus),
                fmt_us(p.fg_p99_us),
                p.throttled
            ));
        }
    }
    eprintln!("{line}");
}
