//! One node of the fleet: this binary again, started by the parent with `--node`. In a pinned
//! run it first pins itself to its CPUs (every thread it starts, the runtime's and the idle
//! pool's among them, inherits them, and the library counts them). It moves itself into a
//! cgroup of its own with its CPU quota, serves the foreground (the demo's
//! service) on a runtime built through the library with every setting at its default, runs a
//! paced scan when told to, and answers the parent's `sample` with its counters (see `wire`).
//! It leaves and removes its cgroup when told to quit, when its stdin closes (the parent is
//! gone), a few seconds after Ctrl-C, and on a panic (the guard's `Drop`).

use crate::wire::{Command, Hello, Sample};
use elastic_cpu::prelude::*;
use elastic_cpu::settings::Enforcement;
use elastic_cpu::settings::Placement;
use elastic_cpu::snapshot::{QueueSnapshot, SignalSource};
use elastic_cpu::{Elastic, Snapshot};
use elastic_cpu_examples::cpu_time::process_cpu;
use elastic_cpu_examples::quota::{self, QuotaCgroup};
use elastic_cpu_examples::{affinity, fg, spin};
use futures_util::StreamExt;
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// The flag that starts a node; the parent passes [`NodeSpec::to_args`] after it.
pub const NODE_FLAG: &str = "--node";

/// Paced scan tasks per node (they share the node's bucket; its holder cap decides how many
/// run at once).
const SCAN_TASKS: usize = 2;

/// What a node is given by the parent.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSpec {
    /// Its name in the report (`node1`, ...).
    pub name: String,
    /// Its CPU quota in CPUs.
    pub quota: f64,
    /// Worker threads of its service's runtime.
    pub workers: usize,
    /// CPU work per request in µs.
    pub work_us: f64,
    /// The library's slice in ms (None: its default; every other setting is its default).
    pub slice_ms: Option<u64>,
    /// The CPUs it pins itself to (empty: it shares every core).
    pub cpus: Vec<usize>,
}

impl NodeSpec {
    /// The arguments after [`NODE_FLAG`].
    pub fn to_args(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            self.quota.to_string(),
            self.workers.to_string(),
            self.work_us.to_string(),
            self.slice_ms.map_or("default".into(), |ms| ms.to_string()),
            if self.cpus.is_empty() {
                "-".into()
            } else {
                crate::cpus::fmt_cpus(&self.cpus)
            },
        ]
    }

    /// Read the arguments [`to_args`](Self::to_args) wrote.
    pub fn parse(args: &[String]) -> Result<NodeSpec, String> {
        let [name, quota, workers, work_us, slice, cpus] = args else {
            return Err(format!(
                "{NODE_FLAG} takes: NAME QUOTA WORKERS WORK_US SLICE_MS CPUS (got {} values)",
                args.len()
            ));
        };
        let num = |what: &str, v: &str| -> Result<f64, String> {
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| format!("{NODE_FLAG}: {what} {v:?} is not a positive number"))
        };
        Ok(NodeSpec {
            name: name.clone(),
            quota: num("quota", quota)?,
            workers: workers
                .parse()
                .ok()
                .filter(|w| *w > 0)
                .ok_or_else(|| format!("{NODE_FLAG}: workers {workers:?} is not a count"))?,
            work_us: num("work", work_us)?,
            slice_ms: match slice.as_str() {
                "default" => None,
                ms => Some(ms.parse().map_err(|_| {
                    format!("{NODE_FLAG}: slice {ms:?} is neither `default` nor whole ms")
                })?),
            },
            cpus: match cpus.as_str() {
                "-" => Vec::new(),
                list => list
                    .split(',')
                    .map(|c| c.parse::<usize>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| {
                        format!("{NODE_FLAG}: CPUs {list:?} are neither `-` nor a list like 0,1")
                    })?,
            },
        })
    }
}

/// Print a line of JSON on stdout (the parent reads it).
fn say<T: serde::Serialize>(x: &T) {
    println!(
        "{}",
        serde_json::to_string(x).expect("node lines serialize")
    );
}

/// Say why the node cannot start and exit with `code`.
fn fail(code: i32, why: String) -> ! {
    say(&Hello {
        error: Some(why),
        ..Hello::default()
    });
    std::process::exit(code)
}

/// Stands in for the CPU-heavy part of a scan: encoding one row (the quick start's `encode`).
fn encode(row: u64) -> u64 {
    (0..2_000u64).fold(row, |h, x| h.rotate_left(5) ^ x.wrapping_mul(0x9e37_79b9))
}

/// The node's main: runs until told to quit; never returns.
pub fn main(args: &[String]) -> ! {
    let spec = NodeSpec::parse(args).unwrap_or_else(|e| fail(1, e));
    // Before any thread starts (they inherit the mask) and before the library reads it.
    if !spec.cpus.is_empty() {
        affinity::pin(&spec.cpus).unwrap_or_else(|e| fail(1, format!("{}: {e}", spec.name)));
    }
    // Measured before the quota binds (a throttled period would slow the best try down).
    spin::calibrate_spin();
    let rows_per_cpu_s = calibrate_scan();
    let cgroup = QuotaCgroup::enter_named(
        &format!("elastic-cpu-fleet-{}", spec.name),
        spec.quota,
        false,
    )
    .unwrap_or_else(|why| {
        fail(
            2,
            format!(
                "cannot run {} under a CPU quota of {} CPUs: {why}",
                spec.name, spec.quota
            ),
        )
    });
    on_ctrl_c();
    let code = match serve(&spec, &cgroup, rows_per_cpu_s) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{}: error: {e}", spec.name);
            1
        }
    };
    drop(cgroup);
    std::process::exit(code)
}

/// Ctrl-C reaches the parent and every node at once: the parent stops the run and tells the
/// nodes to quit; a node whose parent did not do so within 3 s cleans up and quits itself.
fn on_ctrl_c() {
    let _ = std::thread::Builder::new()
        .name("node-ctrl-c".into())
        .spawn(|| {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            if rt.block_on(tokio::signal::ctrl_c()).is_ok() {
                std::thread::sleep(Duration::from_secs(3));
                quota::cleanup_active();
                std::process::exit(130);
            }
        });
}

/// The running means of the limit and the share between two samples.
#[derive(Default)]
struct Means {
    share: f64,
    limit: f64,
    n: u32,
}

/// Rows the scan encodes per CPU-second on one thread: the best of 15 tries of 20 ms (other
/// processes share the cores), so that rows count the scan's CPU whatever the library's ledger
/// charged.
fn calibrate_scan() -> f64 {
    let mut best = 0.0f64;
    let mut row = 0u64;
    for _ in 0..15 {
        let t = std::time::Instant::now();
        let from = row;
        while t.elapsed() < Duration::from_millis(20) {
            for _ in 0..64 {
                std::hint::black_box(encode(row));
                row += 1;
            }
        }
        best = best.max((row - from) as f64 / t.elapsed().as_secs_f64());
    }
    best
}

/// Serve until told to quit (or stdin closes).
fn serve(spec: &NodeSpec, cgroup: &QuotaCgroup, rows_per_cpu_s: f64) -> Result<(), String> {
    let mut b = Elastic::builder();
    if let Some(ms) = spec.slice_ms {
        b = b.enforcement(Enforcement::default().slice(Duration::from_millis(ms)));
    }
    let elastic = b.build().map_err(|e| format!("elastic: {e}"))?;
    let rt = elastic
        .runtime(fg::runtime_builder(spec.workers))
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let addr = fg::start_server(&rt, spec.work_us)?;
    let s = elastic.snapshot();
    say(&Hello {
        addr: Some(addr.to_string()),
        cgroup: Some(cgroup.dir.display().to_string()),
        cgroup_version: Some(cgroup.version.into()),
        lib_cpus: Some(s.cpus),
        lib_cpus_source: Some(s.cpus_source.to_string()),
        cpus_allowed: affinity::allowed(),
        rows_per_cpu_s: Some(rows_per_cpu_s),
        error: None,
    });

    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("node-stdin".into())
        .spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if let Some(c) = Command::parse(&line) {
                    if tx.send(c).is_err() {
                        break;
                    }
                }
            }
            // The parent is gone (or closed the pipe): quit.
            let _ = tx.send(Command::Quit);
        })
        .map_err(|e| format!("stdin thread: {e}"))?;

    let rows = Arc::new(AtomicU64::new(0));
    let mut scan_stop: Option<Arc<AtomicBool>> = None;
    let mut means = Means::default();
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Err(mpsc::RecvTimeoutError::Timeout) => read_limit(&elastic, &mut means),
            Err(mpsc::RecvTimeoutError::Disconnected) | Ok(Command::Quit) => break,
            Ok(Command::Sample) => {
                if means.n == 0 {
                    read_limit(&elastic, &mut means);
                }
                say(&sample(&elastic, cgroup, &means, &rows));
                means = Means::default();
            }
            Ok(Command::ScanOn) if scan_stop.is_none() => {
                let stop = Arc::new(AtomicBool::new(false));
                for task in 0..SCAN_TASKS as u64 {
                    start_scan(&elastic, &rt, task, stop.clone(), rows.clone())?;
                }
                scan_stop = Some(stop);
            }
            Ok(Command::ScanOn) => {}
            Ok(Command::ScanOff) => {
                if let Some(stop) = scan_stop.take() {
                    stop.store(true, Ordering::Relaxed);
                }
            }
        }
    }
    if let Some(stop) = scan_stop {
        stop.store(true, Ordering::Relaxed);
    }
    rt.shutdown_timeout(Duration::from_secs(2));
    Ok(())
}

/// One paced scan task, as the quick start's stream: producing each row is what gets paced.
fn start_scan(
    elastic: &Elastic,
    rt: &tokio::runtime::Runtime,
    task: u64,
    stop: Arc<AtomicBool>,
    rows: Arc<AtomicU64>,
) -> Result<(), String> {
    let _in_rt = rt.enter();
    let scan = futures_util::stream::iter((task << 40)..)
        .take_while(move |_| std::future::ready(!stop.load(Ordering::Relaxed)))
        .map(encode)
        .paced(elastic)
        .for_each(move |h| {
            std::hint::black_box(h);
            rows.fetch_add(1, Ordering::Relaxed);
            std::future::ready(())
        });
    elastic.spawn(scan).map(drop).map_err(|e| e.to_string())
}

/// Add a reading of the share and of the limit as applied to the running means: the scan's
/// class's, which is the idle class where `Auto` placed the scan on the idle pool.
fn read_limit(elastic: &Elastic, m: &mut Means) {
    let s = elastic.snapshot();
    let (share, _) = scan_class(&s);
    m.share += share;
    m.limit += applied_limit(share, s.quota_headroom, s.cpus);
    m.n += 1;
}

/// The share and queue of the class the scan runs in: the `Elastic`'s own on the runtime, the
/// idle class on the idle pool.
fn scan_class(s: &Snapshot) -> (f64, &QueueSnapshot) {
    match (s.placement, s.idle_share, &s.idle_queue) {
        (Placement::IdlePool, Some(share), Some(queue)) => (share, queue),
        _ => (s.share, &s.queue),
    }
}

/// The share the bucket's rate follows: the controller's, held to the quota's headroom (in
/// CPUs) where the library reads one, as a share of its `cpus`.
pub fn applied_limit(share: f64, headroom_cpus: Option<f64>, cpus: f64) -> f64 {
    match headroom_cpus {
        Some(h) if cpus > 0.0 => share.min(h / cpus),
        _ => share,
    }
}

/// The node's counters now, with the limit's means since the last sample.
fn sample(elastic: &Elastic, cgroup: &QuotaCgroup, m: &Means, rows: &AtomicU64) -> Sample {
    let s = elastic.snapshot();
    let t = cgroup.throttling();
    let n = f64::from(m.n.max(1));
    let (_, queue) = scan_class(&s);
    Sample {
        cpu_s: process_cpu().map_or(0.0, |d| d.as_secs_f64()),
        elastic_s: (s.used
            + Duration::from_nanos(s.idle_queue.as_ref().map_or(0, |q| q.used_nanos)))
        .as_secs_f64(),
        share: m.share / n,
        limit: m.limit / n,
        lib_cpus: s.cpus,
        periods: t.map_or(0, |t| t.periods),
        throttled: t.map_or(0, |t| t.throttled_periods),
        lib_throttled: s.throttled_periods,
        acquired_s: queue.acquired_nanos as f64 / 1e9,
        over_limit_s: queue.over_limit_nanos as f64 / 1e9,
        forgiven_s: queue.debt_forgiven_nanos as f64 / 1e9,
        quota_braked_s: s.quota_braked_time.as_secs_f64(),
        rate_cpus: queue.rate_nanos_per_sec as f64 / 1e9,
        rows: rows.load(Ordering::Relaxed),
        signal_us: s
            .signal_p99
            .filter(|d| *d != Duration::MAX)
            .map(|d| d.as_nanos() as f64 / 1e3),
        target_us: s.target.as_nanos() as f64 / 1e3,
        source: SignalSource::name(s.signal_source).into(),
        placement: format!("{:?} ({})", s.placement, s.placement_reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_round_trips_through_its_arguments() {
        let spec = NodeSpec {
            name: "node2".into(),
            quota: 0.6,
            workers: 2,
            work_us: 100.0,
            slice_ms: None,
            cpus: Vec::new(),
        };
        assert_eq!(NodeSpec::parse(&spec.to_args()), Ok(spec.clone()));
        let spec = NodeSpec {
            slice_ms: Some(10),
            cpus: vec![2, 3],
            ..spec
        };
        assert_eq!(NodeSpec::parse(&spec.to_args()), Ok(spec));
    }

    #[test]
    fn bad_node_arguments_say_what_is_wrong() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(NodeSpec::parse(&a(&["n", "0.5", "2"]))
            .unwrap_err()
            .contains("got 3"));
        assert!(NodeSpec::parse(&a(&["n", "-1", "2", "50", "default", "-"]))
            .unwrap_err()
            .contains("quota"));
        assert!(
            NodeSpec::parse(&a(&["n", "0.5", "0", "50", "default", "-"]))
                .unwrap_err()
                .contains("workers")
        );
        assert!(NodeSpec::parse(&a(&["n", "0.5", "2", "50", "x", "-"]))
            .unwrap_err()
            .contains("slice"));
        assert!(
            NodeSpec::parse(&a(&["n", "0.5", "2", "50", "default", "0,x"]))
                .unwrap_err()
                .contains("CPUs")
        );
    }

    #[test]
    fn the_applied_limit_is_the_share_held_to_the_headroom() {
        assert_eq!(applied_limit(0.6, None, 0.5), 0.6);
        assert!((applied_limit(0.6, Some(0.1), 0.5) - 0.2).abs() < 1e-12);
        assert_eq!(applied_limit(0.3, Some(0.4), 0.5), 0.3);
        assert_eq!(applied_limit(0.3, Some(0.4), 0.0), 0.3);
    }
}
