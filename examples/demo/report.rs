//! The report: summary table (text), JSON (hand-written, schema of issue 5), HTML with inline
//! SVG plots, and the controller settle-time analysis.

use crate::args::Kind;
use crate::util::{new_hist, q_us};
use hdrhistogram::Histogram;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Start of the limit in `low` phases (the controller's floor).
pub const LOW_START: f64 = 0.05;
/// Start of the limit in `high` phases (the controller's ceiling).
pub const HIGH_START: f64 = 0.75;
/// Foreground rate multiplier in the middle third of a `step` phase.
pub const STEP_FACTOR: f64 = 1.5;

pub fn default_path(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join("demo")
        .join(file)
}

pub fn mean(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        None
    } else {
        Some(v.iter().sum::<f64>() / v.len() as f64)
    }
}

/// One timeline sample.
#[derive(Clone, Debug)]
pub struct Point {
    pub t_ms: u64,
    pub phase: String,
    pub limit: Option<f64>,
    pub sched_p99_us: Option<f64>,
    /// Not in the issue's timeline schema: written as `timeline_sched_split`.
    pub sched_fg_p99_us: Option<f64>,
    pub sched_elastic_p99_us: Option<f64>,
    pub fg_p99_us: Option<f64>,
    pub elastic_rows_per_sec: f64,
}

/// Run configuration and machine facts.
#[derive(Clone, Debug)]
pub struct Machine {
    pub cpus: usize,
    pub workers: usize,
    pub cpus_used: f64,
    pub os: String,
    pub arch: String,
    pub tokio_unstable: bool,
    pub rate: f64,
    pub work_us: f64,
    pub per_request_cpu_us: Option<f64>,
    pub conns: usize,
    pub elastic_tasks: usize,
    pub rows: usize,
    pub chunk_rows: usize,
    pub chunk_cpu_us: f64,
    pub rows_per_cpu_sec: f64,
    pub phase_secs: f64,
    pub warmup_secs: f64,
    pub target_us: Option<u64>,
    pub target_source: String,
    pub slice_ms: u64,
    pub quantum_us: u64,
    pub static_limit: f64,
    pub command: String,
}

/// One phase's summary.
#[derive(Clone, Debug)]
pub struct PhaseResult {
    pub name: String,
    pub kind: Kind,
    pub skipped: Option<String>,
    pub interrupted: bool,
    pub start_ms: u64,
    pub end_ms: u64,
    pub step_ms: Vec<u64>,
    pub measured_secs: f64,
    pub requests: u64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
    pub max_us: Option<f64>,
    pub sched_p99_us: Option<f64>,
    pub rows_per_sec: f64,
    pub cpu_share: f64,
    pub limit_mean: Option<f64>,
    pub limit_min: Option<f64>,
    pub limit_max: Option<f64>,
    pub unanswered: u64,
    pub process_cpu_share: Option<f64>,
    pub machine_busy_share: Option<f64>,
    /// Elastic CPU the pacer measured (its `used_nanos`), as a share of the runtime's CPUs.
    pub used_share: Option<f64>,
    /// Round of the run (per-round segments), 0 for aggregates.
    pub round: usize,
    /// The measurement window's latency histogram (per-round segments).
    pub hist: Option<Histogram<u64>>,
    /// Limit and scheduling-p99 samples in the measurement window.
    pub limits: Vec<f64>,
    pub scheds: Vec<f64>,
    /// Rows written in the measurement window.
    pub rows: u64,
    /// Elastic CPU share estimated from rows/s and the single-threaded calibration.
    pub cpu_share_from_rows: Option<f64>,
    /// Aggregates: each round's fg p99, and their median.
    pub p99_rounds: Vec<f64>,
    pub p99_median: Option<f64>,
    /// Machine pauses during the measurement window, their total length, and the requests in
    /// flight across them (left out of `hist` and its percentiles).
    pub pauses: usize,
    pub paused_ms: f64,
    /// Times the pacer's backlog brake engaged in the window.
    pub brakes: u64,
    pub left_out: u64,
    /// Every request of the window, pauses included, and its p99.
    pub raw_hist: Option<Histogram<u64>>,
    pub raw_p99_us: Option<f64>,
}

impl PhaseResult {
    pub fn new(name: &str, kind: Kind) -> PhaseResult {
        PhaseResult {
            name: name.to_string(),
            kind,
            skipped: None,
            interrupted: false,
            start_ms: 0,
            end_ms: 0,
            step_ms: Vec::new(),
            measured_secs: 0.0,
            requests: 0,
            p50_us: None,
            p99_us: None,
            p999_us: None,
            max_us: None,
            sched_p99_us: None,
            rows_per_sec: 0.0,
            cpu_share: 0.0,
            limit_mean: None,
            limit_min: None,
            limit_max: None,
            unanswered: 0,
            process_cpu_share: None,
            machine_busy_share: None,
            used_share: None,
            round: 0,
            hist: None,
            limits: Vec::new(),
            scheds: Vec::new(),
            rows: 0,
            p99_rounds: Vec::new(),
            p99_median: None,
            cpu_share_from_rows: None,
            pauses: 0,
            paused_ms: 0.0,
            brakes: 0,
            left_out: 0,
            raw_hist: None,
            raw_p99_us: None,
        }
    }

    fn ran(&self) -> bool {
        self.skipped.is_none() && self.requests > 0
    }
}

/// Merge the rounds of each phase (first-appearance order): latency histograms merged, rows
/// and CPU over the summed measurement time, limit and scheduling samples pooled.
pub fn aggregate(segs: &[PhaseResult]) -> Vec<PhaseResult> {
    let mut names: Vec<&str> = Vec::new();
    for s in segs {
        if !names.contains(&s.name.as_str()) {
            names.push(&s.name);
        }
    }
    names
        .into_iter()
        .map(|n| {
            let all: Vec<&PhaseResult> = segs.iter().filter(|s| s.name == n).collect();
            let group: Vec<&PhaseResult> = all
                .iter()
                .copied()
                .filter(|s| s.skipped.is_none() && s.hist.is_some())
                .collect();
            let mut r = PhaseResult::new(n, all[0].kind);
            if group.is_empty() {
                r.skipped = all[0].skipped.clone().or(Some("no data".into()));
                r.interrupted = all.iter().any(|s| s.interrupted);
                return r;
            }
            let mut h = new_hist();
            for g in &group {
                if let Some(gh) = &g.hist {
                    let _ = h.add(gh);
                }
            }
            let secs: f64 = group.iter().map(|g| g.measured_secs).sum::<f64>().max(1e-9);
            let wmean = |f: &dyn Fn(&PhaseResult) -> Option<f64>| -> Option<f64> {
                let v: Vec<(f64, f64)> = group
                    .iter()
                    .filter_map(|g| f(g).map(|x| (x, g.measured_secs)))
                    .collect();
                let w: f64 = v.iter().map(|x| x.1).sum();
                (w > 0.0).then(|| v.iter().map(|x| x.0 * x.1).sum::<f64>() / w)
            };
            r.interrupted = all.iter().any(|s| s.interrupted);
            r.measured_secs = secs;
            r.requests = h.len();
            r.p50_us = q_us(&h, 0.50);
            r.p99_us = q_us(&h, 0.99);
            r.p999_us = q_us(&h, 0.999);
            r.max_us = q_us(&h, 1.0);
            r.rows = group.iter().map(|g| g.rows).sum();
            r.rows_per_sec = r.rows as f64 / secs;
            r.cpu_share = wmean(&|g| Some(g.cpu_share)).unwrap_or(0.0);
            r.limits = group
                .iter()
                .flat_map(|g| g.limits.iter().copied())
                .collect();
            r.scheds = group
                .iter()
                .flat_map(|g| g.scheds.iter().copied())
                .collect();
            r.sched_p99_us = mean(&r.scheds);
            r.limit_mean = mean(&r.limits);
            r.limit_min = r.limits.iter().copied().reduce(f64::min);
            r.limit_max = r.limits.iter().copied().reduce(f64::max);
            r.unanswered = group.iter().map(|g| g.unanswered).sum();
            r.process_cpu_share = wmean(&|g| g.process_cpu_share);
            r.machine_busy_share = wmean(&|g| g.machine_busy_share);
            r.used_share = wmean(&|g| g.used_share);
            r.p99_rounds = group.iter().filter_map(|g| g.p99_us).collect();
            r.p99_median = median(&r.p99_rounds);
            r.hist = Some(h);
            r.pauses = group.iter().map(|g| g.pauses).sum();
            r.brakes = group.iter().map(|g| g.brakes).sum();
            r.paused_ms = group.iter().map(|g| g.paused_ms).sum();
            r.left_out = group.iter().map(|g| g.left_out).sum();
            let mut raw = new_hist();
            for g in &group {
                if let Some(gh) = &g.raw_hist {
                    let _ = raw.add(gh);
                }
            }
            r.raw_p99_us = q_us(&raw, 0.99);
            r.raw_hist = Some(raw);
            r
        })
        .collect()
}

/// Elastic CPU share from the process's CPU time: what a phase's process used above the
/// baseline phase's (same service, same load, no scan), over the machine's CPUs. The
/// single-threaded rows-per-CPU-second calibration is kept as `cpu_share_from_rows`; on this
/// shared machine it moves by tens of percent between runs, the process CPU time does not.
pub fn attribute_cpu(phases: &mut [PhaseResult], segments: &mut [PhaseResult]) {
    let base = phases
        .iter()
        .find(|p| p.kind == Kind::Baseline)
        .and_then(|p| p.process_cpu_share);
    let Some(base) = base else {
        return;
    };
    for p in phases.iter_mut().chain(segments.iter_mut()) {
        p.cpu_share_from_rows = Some(p.cpu_share);
        if let Some(c) = p.process_cpu_share {
            p.cpu_share = if p.kind == Kind::Baseline {
                0.0
            } else {
                (c - base).max(0.0)
            };
        }
    }
}

pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The whole report.
pub struct Report {
    pub machine: Machine,
    /// Each phase of each round, in run order.
    pub segments: Vec<PhaseResult>,
    /// Per phase name, the rounds merged.
    pub phases: Vec<PhaseResult>,
    pub timeline: Vec<Point>,
    pub interrupted: bool,
}

// ---------------------------------------------------------------------------------------------
// Verdicts against the issue's bars.

/// One "done when" bar.
pub struct Bar {
    pub what: String,
    pub value: String,
    pub pass: Option<bool>,
}

impl Report {
    fn find(&self, name: &str) -> Option<&PhaseResult> {
        self.phases.iter().find(|p| p.name == name && p.ran())
    }

    /// The issue's bars, on the merged rounds (`median == false`) or on the median of the
    /// rounds' fg p99 (`median == true`; throughput is always over all rounds).
    pub fn bars_on(&self, median: bool) -> Vec<Bar> {
        let p99 = |p: Option<&PhaseResult>| -> Option<f64> {
            p.and_then(|p| if median { p.p99_median } else { p.p99_us })
        };
        let b = self.find("baseline");
        let u = self.find("unthrottled");
        let s = self.find("static");
        let p = self.find("paced");
        let ratio = |x: Option<f64>, y: Option<f64>| match (x, y) {
            (Some(x), Some(y)) if y > 0.0 => Some(x / y),
            _ => None,
        };
        let fmt = |r: Option<f64>| r.map(|r| format!("{r:.2}x")).unwrap_or("n/a".into());
        let mut out = Vec::new();
        let r = ratio(p99(u), p99(b));
        out.push(Bar {
            what: "unthrottled fg p99 >= 3x baseline (the experiment is real)".into(),
            value: fmt(r),
            pass: r.map(|r| r >= 3.0),
        });
        let r = ratio(p99(p), p99(b));
        out.push(Bar {
            what: "paced fg p99 <= 1.5x baseline".into(),
            value: fmt(r),
            pass: r.map(|r| r <= 1.5),
        });
        let r = ratio(p.map(|p| p.rows_per_sec), u.map(|u| u.rows_per_sec));
        out.push(Bar {
            what: "paced rows/s >= 0.6x unthrottled".into(),
            value: fmt(r),
            pass: r.map(|r| r >= 0.6),
        });
        let cmp = match (p, s, p99(p), p99(s)) {
            (Some(p), Some(s), Some(pl), Some(sl)) => {
                let lat_ok = pl <= sl;
                let thr_ok = p.rows_per_sec >= s.rows_per_sec;
                Some((
                    format!(
                        "p99 {} vs {}, rows/s {:.2}M vs {:.2}M",
                        crate::util::fmt_us(Some(pl)),
                        crate::util::fmt_us(Some(sl)),
                        p.rows_per_sec / 1e6,
                        s.rows_per_sec / 1e6
                    ),
                    lat_ok && thr_ok && (pl < sl || p.rows_per_sec > s.rows_per_sec),
                ))
            }
            _ => None,
        };
        out.push(Bar {
            what: "paced no worse than static on fg p99 and rows/s, better on one".into(),
            value: cmp.as_ref().map(|c| c.0.clone()).unwrap_or("n/a".into()),
            pass: cmp.map(|c| c.1),
        });
        out
    }

    fn rounds(&self) -> usize {
        self.segments.iter().map(|s| s.round).max().unwrap_or(0) + 1
    }

    // -----------------------------------------------------------------------------------------
    // Text summary.

    pub fn summary_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<16} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>6} {:>11} {:>8}",
            "phase",
            "requests",
            "fg p50",
            "fg p99",
            "fg p999",
            "fg max",
            "sched p99",
            "rows/s",
            "cpu",
            "limit mean",
            "proc cpu"
        );
        let _ = writeln!(
            s,
            "(fg latency leaves out requests in flight across a machine pause; see 'pauses' below)"
        );
        for p in &self.phases {
            if let Some(why) = &p.skipped {
                let _ = writeln!(s, "{:<16} skipped: {why}", p.name);
                continue;
            }
            let _ = writeln!(
                s,
                "{:<16} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8.2}M {:>5.0}% {:>11} {:>7}{}",
                p.name,
                p.requests,
                crate::util::fmt_us(p.p50_us),
                crate::util::fmt_us(p.p99_us),
                crate::util::fmt_us(p.p999_us),
                crate::util::fmt_us(p.max_us),
                crate::util::fmt_us(p.sched_p99_us),
                p.rows_per_sec / 1e6,
                p.cpu_share * 100.0,
                p.limit_mean
                    .map(|l| format!("{l:.3}"))
                    .unwrap_or_else(|| "-".into()),
                p.process_cpu_share
                    .map(|c| format!("{:.0}%", c * 100.0))
                    .unwrap_or_else(|| "-".into()),
                if p.interrupted { " (interrupted)" } else { "" }
            );
        }
        let _ = writeln!(
            s,
            "\npauses (whole machine descheduled, seen by a real-time watchdog thread):"
        );
        for p in self.phases.iter().filter(|p| p.skipped.is_none()) {
            let _ = writeln!(
                s,
                "  {:<16} {:>3} pauses, {:>6.0} ms in all, {:>6} requests left out; fg p99 with them: {}{}",
                p.name,
                p.pauses,
                p.paused_ms,
                p.left_out,
                crate::util::fmt_us(p.raw_p99_us),
                if p.kind.controlled() {
                    format!("; {} brakes", p.brakes)
                } else {
                    String::new()
                }
            );
        }
        let rounds = self.rounds();
        if rounds > 1 {
            let _ = writeln!(s, "\nfg p99 of each round:");
            for p in &self.phases {
                if !p.p99_rounds.is_empty() {
                    let _ = writeln!(
                        s,
                        "  {:<16} {}  (median {})",
                        p.name,
                        p.p99_rounds
                            .iter()
                            .map(|x| crate::util::fmt_us(Some(*x)))
                            .collect::<Vec<_>>()
                            .join(" "),
                        crate::util::fmt_us(p.p99_median)
                    );
                }
            }
        }
        let variants: &[(bool, &str)] = if rounds > 1 {
            &[
                (false, "all rounds merged"),
                (true, "median of the rounds' fg p99"),
            ]
        } else {
            &[(false, "")]
        };
        for &(median, label) in variants {
            let bars = self.bars_on(median);
            if bars.iter().any(|b| b.pass.is_some()) {
                let _ = writeln!(s);
                if !label.is_empty() {
                    let _ = writeln!(s, "bars, {label}:");
                }
                for b in bars {
                    let mark = match b.pass {
                        Some(true) => "PASS",
                        Some(false) => "FAIL",
                        None => " -- ",
                    };
                    let _ = writeln!(s, "[{mark}] {:<66} {}", b.what, b.value);
                }
            }
        }
        let settles = self.settles();
        if !settles.is_empty() {
            let _ = writeln!(
                s,
                "\ncontroller speed (settle: first time within max(0.05, 20%) of the resting level; tail p-p: dithering after)"
            );
            for st in &settles {
                let _ = writeln!(s, "  {}", st.text());
            }
        }
        s
    }
}

// ---------------------------------------------------------------------------------------------
// Controller speed.

/// Settle analysis of one controlled phase.
pub struct Settle {
    pub phase: String,
    pub kind: Kind,
    pub start_limit: Option<f64>,
    /// Mean over the last quarter of the phase (or of the segment, for step phases).
    pub end_limit: Option<f64>,
    /// Seconds from the phase start (low/high) or from the step (step) until the limit stays
    /// within the band of `end_limit` for good; None if it never did.
    pub settle_s: Vec<Option<f64>>,
    /// Limit peak-to-peak over the second half of the phase (or segment).
    pub tail_p2p: f64,
    /// Direction changes of the limit (moves larger than 0.01) in the second half.
    pub reversals: usize,
    /// Mean limit before the load step and at the end of the stepped segment (step phases).
    pub step_levels: Vec<Option<f64>>,
    /// Max foreground p99 in the 5 s after the (up) step.
    pub fg_p99_after_step_us: Option<f64>,
    /// Mean limit at the end of the sibling phase (low <-> high) of the same profile.
    pub sibling_end: Option<f64>,
}

fn band(v: f64) -> f64 {
    (0.2 * v).max(0.05)
}

/// Time from `from_s` until the limit first comes within the band of `level` (the controller
/// dithers around its resting level by design; how much is `tail_p2p`).
fn settle_time(pts: &[(f64, f64)], from_s: f64, level: f64) -> Option<f64> {
    let b = band(level);
    pts.iter()
        .find(|p| p.0 >= from_s && (p.1 - level).abs() <= b)
        .map(|p| (p.0 - from_s).max(0.0))
}

fn tail_stats(pts: &[(f64, f64)]) -> (f64, usize) {
    let half = &pts[pts.len() / 2..];
    let mx = half.iter().map(|p| p.1).fold(f64::MIN, f64::max);
    let mn = half.iter().map(|p| p.1).fold(f64::MAX, f64::min);
    let mut rev = 0;
    let mut dir = 0i8;
    let mut anchor = half.first().map(|p| p.1).unwrap_or(0.0);
    for p in half {
        let d = p.1 - anchor;
        if d.abs() > 0.01 {
            let nd = if d > 0.0 { 1 } else { -1 };
            if dir != 0 && nd != dir {
                rev += 1;
            }
            dir = nd;
            anchor = p.1;
        }
    }
    (if half.is_empty() { 0.0 } else { mx - mn }, rev)
}

fn mean_last(pts: &[(f64, f64)], frac: f64) -> Option<f64> {
    if pts.is_empty() {
        return None;
    }
    let n = ((pts.len() as f64 * frac).ceil() as usize).max(1);
    mean(&pts[pts.len() - n..].iter().map(|p| p.1).collect::<Vec<_>>())
}

impl Settle {
    pub fn profile(&self) -> &str {
        let name = self.phase.split(' ').next().unwrap_or("");
        name.split_once('@').map(|x| x.1).unwrap_or("default")
    }

    pub fn text(&self) -> String {
        let f = |x: Option<f64>| x.map(|x| format!("{x:.3}")).unwrap_or("-".into());
        let s = |x: &Option<f64>| {
            x.map(|x| format!("{x:.1}s"))
                .unwrap_or("not settled".into())
        };
        match self.kind {
            Kind::Step => format!(
                "{:<18} before {} -> stepped {} -> after {}; settle after up {}, after down {}; fg p99 max 5s after up {}; tail p-p {:.3}, reversals {}",
                self.phase,
                f(self.step_levels.first().copied().flatten()),
                f(self.step_levels.get(1).copied().flatten()),
                f(self.end_limit),
                s(self.settle_s.first().unwrap_or(&None)),
                s(self.settle_s.get(1).unwrap_or(&None)),
                crate::util::fmt_us(self.fg_p99_after_step_us),
                self.tail_p2p,
                self.reversals
            ),
            _ => format!(
                "{:<18} start {} -> end {} (other side ended at {}); settle {}; tail p-p {:.3}, reversals {}",
                self.phase,
                f(self.start_limit),
                f(self.end_limit),
                f(self.sibling_end),
                s(self.settle_s.first().unwrap_or(&None)),
                self.tail_p2p,
                self.reversals
            ),
        }
    }
}

impl Report {
    fn points_of(&self, p: &PhaseResult) -> Vec<(f64, f64)> {
        self.points3_of(p).into_iter().map(|x| (x.0, x.1)).collect()
    }

    /// (seconds into the phase, limit, sched p99 us) of a phase's samples that have a limit.
    fn points3_of(&self, p: &PhaseResult) -> Vec<(f64, f64, Option<f64>)> {
        self.timeline
            .iter()
            .filter(|x| x.phase == p.name && x.t_ms >= p.start_ms && x.t_ms <= p.end_ms)
            .filter_map(|x| {
                x.limit.map(|l| {
                    (
                        (x.t_ms.saturating_sub(p.start_ms)) as f64 / 1e3,
                        l,
                        x.sched_p99_us,
                    )
                })
            })
            .collect()
    }

    /// Whether the last `frac` of these samples look like the controller's resting state:
    /// the latency signal on both sides of the target (the controller dithers around it), or
    /// the limit pinned at the floor with latency above target / at the ceiling below it.
    fn at_rest(&self, pts: &[(f64, f64, Option<f64>)], frac: f64) -> bool {
        let Some(target) = self.machine.target_us.map(|t| t as f64) else {
            return false;
        };
        if pts.is_empty() {
            return false;
        }
        let n = ((pts.len() as f64 * frac).ceil() as usize).clamp(1, pts.len());
        let tail = &pts[pts.len() - n..];
        let above = tail
            .iter()
            .filter(|x| x.2.is_some_and(|s| s > target))
            .count();
        let below = tail
            .iter()
            .filter(|x| x.2.is_some_and(|s| s <= target))
            .count();
        let floor = tail.iter().all(|x| x.1 <= LOW_START + 0.01);
        let ceiling = tail.iter().all(|x| x.1 >= HIGH_START - 0.01);
        (above > 0 && below > 0) || (floor && below == 0) || (ceiling && above == 0)
    }

    /// Settle analysis of the low / high / step phases.
    pub fn settles(&self) -> Vec<Settle> {
        let mut out = Vec::new();
        let rounds = self.rounds();
        for p in &self.segments {
            if !matches!(p.kind, Kind::Low | Kind::High | Kind::Step) || p.skipped.is_some() {
                continue;
            }
            let pts = self.points_of(p);
            let pts3 = self.points3_of(p);
            if pts.len() < 4 {
                continue;
            }
            let mut st = Settle {
                phase: if rounds > 1 {
                    format!("{} #{}", p.name, p.round + 1)
                } else {
                    p.name.clone()
                },
                kind: p.kind,
                start_limit: pts.first().map(|x| x.1),
                end_limit: mean_last(&pts, 0.25),
                settle_s: Vec::new(),
                tail_p2p: 0.0,
                reversals: 0,
                step_levels: Vec::new(),
                fg_p99_after_step_us: None,
                sibling_end: None,
            };
            match p.kind {
                Kind::Low | Kind::High => {
                    let sib_name = {
                        let other = if p.kind == Kind::Low { "high" } else { "low" };
                        match p.name.split_once('@') {
                            Some((_, prof)) => format!("{other}@{prof}"),
                            None => other.to_string(),
                        }
                    };
                    let sib = self
                        .segments
                        .iter()
                        .find(|q| q.name == sib_name && q.round == p.round && q.skipped.is_none());
                    st.sibling_end = sib.and_then(|q| mean_last(&self.points_of(q), 0.25));
                    // The resting level: where both sides (from the floor and from the
                    // ceiling) end, when they end at the same level; not settled when they end
                    // apart. Without the other side: where this one ends, if it ends at rest.
                    let level = match (st.end_limit, st.sibling_end) {
                        (Some(a), Some(b)) if (a - b).abs() <= band((a + b) / 2.0) => {
                            Some((a + b) / 2.0)
                        }
                        (Some(_), Some(_)) => None,
                        (a, None) if self.at_rest(&pts3, 0.3) => a,
                        _ => None,
                    };
                    st.settle_s
                        .push(level.and_then(|t| settle_time(&pts, 0.0, t)));
                    let (pp, rev) = tail_stats(&pts);
                    st.tail_p2p = pp;
                    st.reversals = rev;
                }
                Kind::Step => {
                    let steps: Vec<f64> = p
                        .step_ms
                        .iter()
                        .map(|&t| t.saturating_sub(p.start_ms) as f64 / 1e3)
                        .collect();
                    let end = pts.last().map(|x| x.0).unwrap_or(0.0);
                    let mut bounds = vec![0.0];
                    bounds.extend(steps.iter().copied());
                    bounds.push(end + 1.0);
                    let segs: Vec<Vec<(f64, f64)>> = bounds
                        .windows(2)
                        .map(|w| {
                            pts.iter()
                                .copied()
                                .filter(|x| x.0 >= w[0] && x.0 < w[1])
                                .collect()
                        })
                        .collect();
                    for (i, seg) in segs.iter().enumerate() {
                        let lvl = mean_last(seg, 0.3);
                        st.step_levels.push(lvl);
                        if i > 0 {
                            st.settle_s
                                .push(lvl.and_then(|l| settle_time(seg, bounds[i], l)));
                        }
                    }
                    if let Some(last) = segs.last() {
                        let (pp, rev) = tail_stats(last);
                        st.tail_p2p = pp;
                        st.reversals = rev;
                    }
                    if let Some(&up) = p.step_ms.first() {
                        st.fg_p99_after_step_us = self
                            .timeline
                            .iter()
                            .filter(|x| x.phase == p.name && x.t_ms >= up && x.t_ms < up + 5000)
                            .filter_map(|x| x.fg_p99_us)
                            .reduce(f64::max);
                    }
                    st.end_limit = st.step_levels.last().copied().flatten();
                }
                _ => {}
            }
            out.push(st);
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// JSON.

fn jstr(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn jnum(x: f64) -> String {
    if x.is_finite() {
        let r = (x * 1000.0).round() / 1000.0;
        if r == r.trunc() && r.abs() < 1e15 {
            format!("{}", r as i64)
        } else {
            format!("{r}")
        }
    } else {
        "null".into()
    }
}

fn jopt(x: Option<f64>) -> String {
    x.map(jnum).unwrap_or_else(|| "null".into())
}

impl Report {
    pub fn to_json(&self) -> String {
        let m = &self.machine;
        let mut s = String::new();
        s.push_str("{\n  \"machine\": {");
        let _ = write!(
            s,
            "\"cpus\": {}, \"workers\": {}, \"cpus_used\": {}, \"os\": {}, \"arch\": {}, \"tokio_unstable\": {}, \
             \"fg_rate_per_sec\": {}, \"fg_work_us\": {}, \"fg_process_cpu_per_request_us\": {}, \"fg_connections\": {}, \
             \"elastic_tasks\": {}, \"table_rows\": {}, \"chunk_rows\": {}, \"chunk_cpu_us\": {}, \"rows_per_cpu_sec\": {}, \
             \"phase_secs\": {}, \"warmup_secs\": {}, \"target_p99_us\": {}, \"target_source\": {}, \"slice_ms\": {}, \"quantum_us\": {}, \"static_limit\": {}, \"rounds\": {}, \"command\": {}",
            m.cpus,
            m.workers,
            jnum(m.cpus_used),
            jstr(&m.os),
            jstr(&m.arch),
            m.tokio_unstable,
            jnum(m.rate),
            jnum(m.work_us),
            jopt(m.per_request_cpu_us),
            m.conns,
            m.elastic_tasks,
            m.rows,
            m.chunk_rows,
            jnum(m.chunk_cpu_us),
            jnum(m.rows_per_cpu_sec),
            jnum(m.phase_secs),
            jnum(m.warmup_secs),
            jopt(m.target_us.map(|t| t as f64)),
            jstr(&m.target_source),
            m.slice_ms,
            m.quantum_us,
            jnum(m.static_limit),
            self.rounds(),
            jstr(&m.command)
        );
        s.push_str("},\n  \"phases\": [");
        let ran: Vec<&PhaseResult> = self.phases.iter().filter(|p| p.skipped.is_none()).collect();
        for (i, p) in ran.iter().enumerate() {
            let _ = write!(
                s,
                "{}\n    {{\"name\": {}, \"fg\": {{\"requests\": {}, \"p50_us\": {}, \"p99_us\": {}, \"p999_us\": {}, \"max_us\": {}}}, \
                 \"sched\": {{\"p99_us\": {}}}, \"elastic\": {{\"rows_per_sec\": {}, \"cpu_share\": {}}}, \
                 \"limit\": {{\"mean\": {}, \"min\": {}, \"max\": {}}}}}",
                if i == 0 { "" } else { "," },
                jstr(&p.name),
                p.requests,
                jopt(p.p50_us),
                jopt(p.p99_us),
                jopt(p.p999_us),
                jopt(p.max_us),
                jopt(p.sched_p99_us),
                jnum(p.rows_per_sec),
                jnum(p.cpu_share),
                jopt(p.limit_mean),
                jopt(p.limit_min),
                jopt(p.limit_max)
            );
        }
        s.push_str("\n  ],\n  \"timeline\": [");
        for (i, t) in self.timeline.iter().enumerate() {
            let _ = write!(
                s,
                "{}\n    {{\"t_ms\": {}, \"phase\": {}, \"limit\": {}, \"sched_p99_us\": {}, \"fg_p99_us\": {}, \"elastic_rows_per_sec\": {}}}",
                if i == 0 { "" } else { "," },
                t.t_ms,
                jstr(&t.phase),
                jopt(t.limit),
                jopt(t.sched_p99_us),
                jopt(t.fg_p99_us),
                jnum(t.elastic_rows_per_sec)
            );
        }
        s.push_str("\n  ],\n");
        // Extras beyond the issue's schema, kept out of the phase and timeline objects.
        s.push_str("  \"timeline_sched_split\": [");
        for (i, t) in self.timeline.iter().enumerate() {
            let _ = write!(
                s,
                "{}\n    {{\"t_ms\": {}, \"sched_fg_p99_us\": {}, \"sched_elastic_p99_us\": {}}}",
                if i == 0 { "" } else { "," },
                t.t_ms,
                jopt(t.sched_fg_p99_us),
                jopt(t.sched_elastic_p99_us)
            );
        }
        s.push_str("\n  ],\n");
        s.push_str("  \"phase_extras\": [");
        for (i, p) in self.phases.iter().enumerate() {
            let _ = write!(
                s,
                "{}\n    {{\"name\": {}, \"skipped\": {}, \"rounds_fg_p99_us\": [{}], \"fg_p99_median_of_rounds_us\": {}, \
                 \"cpu_share_from_rows\": {}, \"measured_secs\": {}, \"unanswered\": {}, \"process_cpu_share\": {}, \"machine_busy_share\": {}, \"pacer_used_share\": {}, \
                 \"pauses\": {}, \"paused_ms\": {}, \"requests_left_out\": {}, \"fg_p99_with_pauses_us\": {}, \"brakes\": {}}}",
                if i == 0 { "" } else { "," },
                jstr(&p.name),
                p.skipped.as_deref().map(jstr).unwrap_or("null".into()),
                p.p99_rounds.iter().map(|x| jnum(*x)).collect::<Vec<_>>().join(", "),
                jopt(p.p99_median),
                jopt(p.cpu_share_from_rows),
                jnum(p.measured_secs),
                p.unanswered,
                jopt(p.process_cpu_share),
                jopt(p.machine_busy_share),
                jopt(p.used_share),
                p.pauses,
                jnum(p.paused_ms),
                p.left_out,
                jopt(p.raw_p99_us),
                p.brakes
            );
        }
        s.push_str("\n  ],\n  \"segments\": [");
        for (i, p) in self.segments.iter().enumerate() {
            let _ = write!(
                s,
                "{}\n    {{\"name\": {}, \"round\": {}, \"skipped\": {}, \"interrupted\": {}, \"start_ms\": {}, \"end_ms\": {}, \"step_ms\": [{}], \
                 \"measured_secs\": {}, \"requests\": {}, \"fg_p50_us\": {}, \"fg_p99_us\": {}, \"sched_p99_us\": {}, \"rows_per_sec\": {}, \
                 \"limit_mean\": {}, \"unanswered\": {}, \"process_cpu_share\": {}, \"machine_busy_share\": {}, \"pacer_used_share\": {}}}",
                if i == 0 { "" } else { "," },
                jstr(&p.name),
                p.round + 1,
                p.skipped.as_deref().map(jstr).unwrap_or("null".into()),
                p.interrupted,
                p.start_ms,
                p.end_ms,
                p.step_ms
                    .iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                jnum(p.measured_secs),
                p.requests,
                jopt(p.p50_us),
                jopt(p.p99_us),
                jopt(p.sched_p99_us),
                jnum(p.rows_per_sec),
                jopt(p.limit_mean),
                p.unanswered,
                jopt(p.process_cpu_share),
                jopt(p.machine_busy_share),
                jopt(p.used_share)
            );
        }
        s.push_str("\n  ],\n  \"controller_speed\": [");
        for (i, st) in self.settles().iter().enumerate() {
            let _ = write!(
                s,
                "{}\n    {{\"phase\": {}, \"profile\": {}, \"kind\": {}, \"start_limit\": {}, \"end_limit\": {}, \"other_side_end_limit\": {}, \
                 \"settle_secs\": [{}], \"step_levels\": [{}], \"fg_p99_5s_after_step_us\": {}, \"tail_peak_to_peak\": {}, \"tail_reversals\": {}}}",
                if i == 0 { "" } else { "," },
                jstr(&st.phase),
                jstr(st.profile()),
                jstr(st.kind.name()),
                jopt(st.start_limit),
                jopt(st.end_limit),
                jopt(st.sibling_end),
                st.settle_s.iter().map(|x| jopt(*x)).collect::<Vec<_>>().join(", "),
                st.step_levels.iter().map(|x| jopt(*x)).collect::<Vec<_>>().join(", "),
                jopt(st.fg_p99_after_step_us),
                jnum(st.tail_p2p),
                st.reversals
            );
        }
        for (key, median) in [("bars", false), ("bars_median_of_rounds", true)] {
            let _ = write!(s, "\n  ],\n  \"{key}\": [");
            for (i, b) in self.bars_on(median).iter().enumerate() {
                let _ = write!(
                    s,
                    "{}\n    {{\"bar\": {}, \"value\": {}, \"pass\": {}}}",
                    if i == 0 { "" } else { "," },
                    jstr(&b.what),
                    jstr(&b.value),
                    b.pass.map(|p| p.to_string()).unwrap_or("null".into())
                );
            }
        }
        let _ = write!(s, "\n  ],\n  \"interrupted\": {}\n}}\n", self.interrupted);
        s
    }
}

// ---------------------------------------------------------------------------------------------
// HTML.

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const W: f64 = 1280.0;
const H: f64 = 190.0;
const ML: f64 = 70.0;
const MR: f64 = 20.0;
const MT: f64 = 26.0;
const MB: f64 = 22.0;

const PHASE_COLORS: [&str; 9] = [
    "#e8eef7", "#fbe9e7", "#fff4d6", "#eef6e8", "#f1e8f7", "#e4f4f4", "#f7efe4", "#eceff1",
    "#fce4ec",
];

fn phase_color(kind: Kind) -> &'static str {
    match kind {
        Kind::Baseline => PHASE_COLORS[0],
        Kind::Unthrottled => PHASE_COLORS[1],
        Kind::Static => PHASE_COLORS[2],
        Kind::Yield => PHASE_COLORS[6],
        Kind::Dedicated => PHASE_COLORS[5],
        Kind::Paced => PHASE_COLORS[3],
        Kind::Low => PHASE_COLORS[4],
        Kind::High => PHASE_COLORS[8],
        Kind::Step => PHASE_COLORS[7],
    }
}

struct Axis {
    t_max: f64,
    y_min: f64,
    y_max: f64,
    log: bool,
}

impl Axis {
    fn x(&self, t_s: f64) -> f64 {
        ML + (W - ML - MR) * (t_s / self.t_max.max(1e-9))
    }
    fn y(&self, v: f64) -> f64 {
        let (a, b, v) = if self.log {
            (self.y_min.ln(), self.y_max.ln(), v.max(self.y_min).ln())
        } else {
            (self.y_min, self.y_max, v)
        };
        let f = ((v - a) / (b - a)).clamp(0.0, 1.02);
        H - MB - (H - MT - MB) * f
    }
}

fn nice_ticks(a: &Axis) -> Vec<(f64, String)> {
    if a.log {
        let decades = (a.y_max / a.y_min).log10();
        let mults: &[f64] = if decades > 3.5 { &[1.0] } else { &[1.0, 3.0] };
        let mut out = Vec::new();
        let mut v = 1.0;
        while v <= a.y_max * 1.0001 {
            for m in mults {
                let x = v * m;
                if x >= a.y_min * 0.9999 && x <= a.y_max * 1.0001 {
                    out.push((x, crate::util::fmt_us(Some(x))));
                }
            }
            v *= 10.0;
        }
        out
    } else {
        let span = a.y_max - a.y_min;
        let raw = span / 4.0;
        let mag = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 2.5, 5.0, 10.0]
            .iter()
            .map(|m| m * mag)
            .find(|s| *s >= raw)
            .unwrap_or(raw);
        let mut out = Vec::new();
        let mut v = (a.y_min / step).ceil() * step;
        while v <= a.y_max + 1e-9 {
            let label = if a.y_max >= 1e6 {
                format!("{:.1}M", v / 1e6)
            } else if a.y_max <= 1.0 {
                format!("{v:.2}")
            } else {
                format!("{v:.0}")
            };
            out.push((v, label));
            v += step;
        }
        out
    }
}

struct Line<'a> {
    color: &'a str,
    label: &'a str,
    get: &'a dyn Fn(&Point) -> Option<f64>,
}

impl Report {
    fn plot(&self, title: &str, axis: &Axis, lines: &[Line], refs: &[(f64, &str, &str)]) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "<svg width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" xmlns=\"http://www.w3.org/2000/svg\" font-family=\"sans-serif\" font-size=\"11\">"
        );
        // Phase shading.
        for p in &self.segments {
            if p.skipped.is_some() {
                continue;
            }
            let x0 = axis.x(p.start_ms as f64 / 1e3);
            let x1 = axis.x(p.end_ms as f64 / 1e3);
            let _ = write!(
                s,
                "<rect x=\"{x0:.1}\" y=\"{MT}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"/>",
                (x1 - x0).max(0.0),
                H - MT - MB,
                phase_color(p.kind)
            );
            let _ = write!(
                s,
                "<line x1=\"{x0:.1}\" x2=\"{x0:.1}\" y1=\"{MT}\" y2=\"{:.1}\" stroke=\"#9aa\" stroke-width=\"0.6\"/>",
                H - MB
            );
            for &st in &p.step_ms {
                let xs = axis.x(st as f64 / 1e3);
                let _ = write!(
                    s,
                    "<line x1=\"{xs:.1}\" x2=\"{xs:.1}\" y1=\"{MT}\" y2=\"{:.1}\" stroke=\"#555\" stroke-dasharray=\"2,3\"/>",
                    H - MB
                );
            }
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#445\" font-size=\"10\">{}</text>",
                x0 + 3.0,
                MT + 11.0,
                esc(&p.name)
            );
        }
        // Grid and ticks.
        for (v, label) in nice_ticks(axis) {
            let y = axis.y(v);
            let _ = write!(
                s,
                "<line x1=\"{ML}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#ccd\" stroke-width=\"0.5\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#333\">{}</text>",
                W - MR,
                ML - 4.0,
                y + 4.0,
                esc(&label)
            );
        }
        let step = if axis.t_max > 300.0 {
            60.0
        } else if axis.t_max > 100.0 {
            20.0
        } else {
            10.0
        };
        let mut t = 0.0;
        while t <= axis.t_max {
            let x = axis.x(t);
            let _ = write!(
                s,
                "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">{t:.0}s</text>",
                H - 6.0
            );
            t += step;
        }
        // Reference lines.
        for (i, &(v, color, label)) in refs.iter().enumerate() {
            let y = axis.y(v);
            let (lx, anchor, dy) = if i % 2 == 0 {
                (W - MR - 2.0, "end", -3.0)
            } else {
                (W - MR - 2.0, "end", 11.0)
            };
            let _ = write!(
                s,
                "<line x1=\"{ML}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{color}\" stroke-dasharray=\"6,4\" stroke-width=\"1.2\"/><text x=\"{lx:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" fill=\"{color}\" font-size=\"10\">{}</text>",
                W - MR,
                y + dy,
                esc(label)
            );
        }
        // Data: one polyline per phase and per run of present values.
        for line in lines {
            let mut cur: Vec<String> = Vec::new();
            let mut last_phase: Option<&str> = None;
            let flush = |cur: &mut Vec<String>, s: &mut String| {
                if cur.len() > 1 {
                    let _ = write!(
                        s,
                        "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\" points=\"{}\"/>",
                        line.color,
                        cur.join(" ")
                    );
                } else if cur.len() == 1 {
                    let xy: Vec<&str> = cur[0].split(',').collect();
                    let _ = write!(
                        s,
                        "<circle cx=\"{}\" cy=\"{}\" r=\"1.5\" fill=\"{}\"/>",
                        xy[0], xy[1], line.color
                    );
                }
                cur.clear();
            };
            for p in &self.timeline {
                if last_phase != Some(p.phase.as_str()) {
                    flush(&mut cur, &mut s);
                    last_phase = Some(p.phase.as_str());
                }
                match (line.get)(p) {
                    Some(v) if v.is_finite() => cur.push(format!(
                        "{:.1},{:.1}",
                        axis.x(p.t_ms as f64 / 1e3),
                        axis.y(v)
                    )),
                    _ => flush(&mut cur, &mut s),
                }
            }
            flush(&mut cur, &mut s);
        }
        // Title and legend.
        let _ = write!(
            s,
            "<text x=\"{ML}\" y=\"16\" font-size=\"13\" font-weight=\"bold\" fill=\"#222\">{}</text>",
            esc(title)
        );
        let mut lx = W - MR - 140.0 * lines.len() as f64;
        for line in lines {
            let _ = write!(
                s,
                "<rect x=\"{lx:.1}\" y=\"7\" width=\"14\" height=\"3\" fill=\"{}\"/><text x=\"{:.1}\" y=\"13\" fill=\"#333\">{}</text>",
                line.color,
                lx + 18.0,
                esc(line.label)
            );
            lx += 30.0 + 6.5 * line.label.len() as f64;
        }
        let _ = write!(
            s,
            "<rect x=\"{ML}\" y=\"{MT}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"#889\"/></svg>",
            W - ML - MR,
            H - MT - MB
        );
        s
    }

    /// Two bar panels, one row per phase: foreground p99 (log) and elastic rows/s.
    fn summary_svg(&self) -> String {
        let ran: Vec<&PhaseResult> = self.phases.iter().filter(|p| p.ran()).collect();
        if ran.is_empty() {
            return String::new();
        }
        let row_h = 22.0;
        let top = 46.0;
        let label_w = 130.0;
        let panel_w = 480.0;
        let gap = 60.0;
        let height = top + row_h * ran.len() as f64 + 26.0;
        let width = label_w + 2.0 * panel_w + gap + 150.0;
        let lat_max = ran
            .iter()
            .filter_map(|p| p.p99_us)
            .fold(1000.0f64, f64::max);
        let lat = Axis {
            t_max: 1.0,
            y_min: 10.0,
            y_max: 10f64.powf(lat_max.log10().ceil()),
            log: true,
        };
        let lx = |v: f64| -> f64 {
            let f = ((v.max(lat.y_min).ln() - lat.y_min.ln()) / (lat.y_max.ln() - lat.y_min.ln()))
                .clamp(0.0, 1.0);
            label_w + panel_w * f
        };
        let rows_max = ran.iter().map(|p| p.rows_per_sec).fold(1.0f64, f64::max) * 1.1;
        let x2 = label_w + panel_w + gap;
        let rx = |v: f64| -> f64 { x2 + panel_w * (v / rows_max).clamp(0.0, 1.0) };
        let mut s = String::new();
        let _ = write!(
            s,
            "<svg width=\"{width}\" height=\"{height}\" xmlns=\"http://www.w3.org/2000/svg\" font-family=\"sans-serif\" font-size=\"12\">\
             <text x=\"{label_w}\" y=\"12\" font-weight=\"bold\">Foreground p99 (log scale; lower is better)</text>\
             <text x=\"{x2}\" y=\"12\" font-weight=\"bold\">Elastic rows/s (higher is better)</text>"
        );
        // Decade grid for latency.
        let mut v = 10.0;
        while v <= lat.y_max * 1.0001 {
            let x = lx(v);
            let _ = write!(
                s,
                "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{top}\" y2=\"{:.1}\" stroke=\"#dde\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\" font-size=\"10\">{}</text>",
                height - 22.0,
                height - 8.0,
                crate::util::fmt_us(Some(v))
            );
            v *= 10.0;
        }
        let b99 = self.find("baseline").and_then(|b| b.p99_us);
        for (i, p) in ran.iter().enumerate() {
            let y = top + row_h * i as f64;
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                label_w - 8.0,
                y + 15.0,
                esc(&p.name)
            );
            if let Some(v) = p.p99_us {
                let color = match b99 {
                    Some(b) if v <= 1.5 * b => "#4caf50",
                    Some(b) if v >= 3.0 * b => "#e53935",
                    Some(_) => "#fb8c00",
                    None => "#1f5fbf",
                };
                let _ = write!(
                    s,
                    "<rect x=\"{label_w}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{}</text>",
                    y + 3.0,
                    (lx(v) - label_w).max(1.0),
                    row_h - 6.0,
                    lx(v) + 4.0,
                    y + 15.0,
                    crate::util::fmt_us(Some(v))
                );
            }
            if p.kind != Kind::Baseline {
                let _ = write!(
                    s,
                    "<rect x=\"{x2}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#2e7d32\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{:.2}M ({:.0}% CPU)</text>",
                    y + 3.0,
                    (rx(p.rows_per_sec) - x2).max(1.0),
                    row_h - 6.0,
                    rx(p.rows_per_sec) + 4.0,
                    y + 15.0,
                    p.rows_per_sec / 1e6,
                    p.cpu_share * 100.0
                );
            }
        }
        if let Some(b) = b99 {
            for (i, (m, c, l)) in [
                (1.0, "#2a7", "baseline"),
                (1.5, "#c60", "1.5x baseline"),
                (3.0, "#c33", "3x baseline"),
            ]
            .into_iter()
            .enumerate()
            {
                let x = lx(b * m);
                let ly = top - 6.0 - 9.0 * i as f64;
                let _ = write!(
                    s,
                    "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{c}\" stroke-dasharray=\"4,3\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"{c}\" font-size=\"10\">{l}</text>",
                    top - 4.0,
                    height - 22.0,
                    ly
                );
            }
        }
        if let Some(u) = self.find("unthrottled").map(|u| u.rows_per_sec) {
            for (i, (m, c, l)) in [
                (1.0, "#555", "unthrottled"),
                (0.6, "#c60", "0.6x unthrottled"),
            ]
            .into_iter()
            .enumerate()
            {
                let x = rx(u * m);
                let ly = top - 6.0 - 9.0 * i as f64;
                let _ = write!(
                    s,
                    "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{c}\" stroke-dasharray=\"4,3\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"{c}\" font-size=\"10\">{l}</text>",
                    top - 4.0,
                    height - 22.0,
                    ly
                );
            }
        }
        s.push_str("</svg>");
        s
    }

    pub fn to_html(&self) -> String {
        let m = &self.machine;
        let t_max = self
            .timeline
            .last()
            .map(|p| p.t_ms as f64 / 1e3)
            .unwrap_or(1.0)
            .max(1.0);
        let lat_max = self
            .timeline
            .iter()
            .flat_map(|p| [p.fg_p99_us, p.sched_p99_us])
            .flatten()
            .fold(1000.0f64, f64::max);
        let lat_axis = Axis {
            t_max,
            y_min: 10.0,
            y_max: 10f64.powf(lat_max.log10().ceil()),
            log: true,
        };
        let rows_max = self
            .timeline
            .iter()
            .map(|p| p.elastic_rows_per_sec)
            .fold(1.0f64, f64::max);
        let baseline = self.find("baseline");
        let b99 = baseline.and_then(|b| b.p99_us);
        let mut fg_refs = Vec::new();
        let (l1, l2);
        if let Some(b) = b99 {
            l1 = format!("baseline p99 {}", crate::util::fmt_us(Some(b)));
            l2 = format!("1.5x baseline {}", crate::util::fmt_us(Some(b * 1.5)));
            fg_refs.push((b, "#2a7", l1.as_str()));
            fg_refs.push((b * 1.5, "#c60", l2.as_str()));
        }
        let mut sched_refs = Vec::new();
        let lt;
        if let Some(t) = m.target_us {
            lt = format!("target {}", crate::util::fmt_us(Some(t as f64)));
            sched_refs.push((t as f64, "#c33", lt.as_str()));
        }

        let mut h = String::new();
        h.push_str("<!doctype html><html><head><meta charset=\"utf-8\"><title>elastic-cpu isolation experiment</title><style>\
            body{font-family:sans-serif;margin:24px;color:#222;max-width:1320px}\
            table{border-collapse:collapse;margin:10px 0 18px 0;font-size:13px}\
            th,td{border:1px solid #ccd;padding:4px 9px;text-align:right}\
            th{background:#f0f2f6}td:first-child,th:first-child{text-align:left}\
            .pass{color:#1a7f37;font-weight:bold}.fail{color:#c62828;font-weight:bold}.na{color:#888}\
            .good{background:#e6f4ea}.bad{background:#fdecea}\
            .note{color:#555;font-size:12px;max-width:1200px}\
            h1{font-size:22px;margin-bottom:4px}h2{font-size:16px;margin:22px 0 6px 0}\
            </style></head><body>");
        let _ = write!(
            h,
            "<h1>elastic-cpu: foreground latency next to elastic CPU work{}</h1>",
            if self.interrupted {
                " <span class=\"fail\">(partial: interrupted)</span>"
            } else {
                ""
            }
        );
        let _ = write!(
            h,
            "<div class=\"note\">{} CPUs ({} {}), runtime under test: {} workers; foreground {:.0} req/s Poisson over {} loopback TCP connections, {} us CPU per request, \
             latency from the intended send time; elastic: {} scan tasks over a {}-row sorted table, {}-row chunks ({:.0} us CPU each), \
             {:.2}M rows per CPU-second single-threaded. Phases of {} s, the first {} s of each left out of its summary. Controller target p99 {} us ({}), slice {} ms, quantum {} us, static limit {}. tokio_unstable: {}.</div>",
            m.cpus, m.os, m.arch, m.workers, m.rate, m.conns, m.work_us, m.elastic_tasks, m.rows, m.chunk_rows, m.chunk_cpu_us,
            m.rows_per_cpu_sec / 1e6, m.phase_secs, m.warmup_secs,
            m.target_us.map(|t| t.to_string()).unwrap_or("-".into()), esc(&m.target_source), m.slice_ms, m.quantum_us, m.static_limit,
            m.tokio_unstable
        );

        h.push_str("<h2>At a glance</h2>");
        h.push_str(&self.summary_svg());

        // Bars.
        let rounds = self.rounds();
        let variants: Vec<(bool, String)> = if rounds > 1 {
            vec![
                (false, format!("{rounds} rounds merged")),
                (true, "median of the rounds' fg p99".to_string()),
            ]
        } else {
            vec![(false, "value".to_string())]
        };
        h.push_str("<h2>Done-when bars</h2><table><tr><th>bar</th>");
        for (_, label) in &variants {
            let _ = write!(h, "<th>{}</th><th>result</th>", esc(label));
        }
        h.push_str("</tr>");
        let sets: Vec<Vec<Bar>> = variants.iter().map(|(m, _)| self.bars_on(*m)).collect();
        for (k, b0) in sets[0].iter().enumerate() {
            let _ = write!(h, "<tr><td>{}</td>", esc(&b0.what));
            for set in &sets {
                let b = &set[k];
                let (cls, txt) = match b.pass {
                    Some(true) => ("pass", "PASS"),
                    Some(false) => ("fail", "FAIL"),
                    None => ("na", "not measured"),
                };
                let _ = write!(
                    h,
                    "<td>{}</td><td class=\"{cls}\">{txt}</td>",
                    esc(&b.value)
                );
            }
            h.push_str("</tr>");
        }
        h.push_str("</table>");

        // Summary table.
        h.push_str("<h2>Summary per phase</h2><table><tr><th>phase</th><th>requests</th><th>fg p50</th><th>fg p99</th><th>fg p99 / baseline</th><th>fg p99 of each round (median)</th><th>fg p99.9</th><th>fg max</th>\
            <th>sched p99</th><th>elastic rows/s</th><th>rows/s / unthrottled</th><th>elastic CPU share</th><th>limit mean [min, max]</th><th>process CPU</th><th>unanswered</th></tr>");
        let unth = self.find("unthrottled").map(|u| u.rows_per_sec);
        for p in &self.phases {
            if let Some(why) = &p.skipped {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td colspan=\"14\" style=\"text-align:left\" class=\"na\">skipped: {}</td></tr>",
                    esc(&p.name),
                    esc(why)
                );
                continue;
            }
            let rel = match (p.p99_us, b99) {
                (Some(x), Some(b)) if b > 0.0 => {
                    let r = x / b;
                    let cls = if r <= 1.5 {
                        "good"
                    } else if r >= 3.0 {
                        "bad"
                    } else {
                        ""
                    };
                    format!("<td class=\"{cls}\">{r:.2}x</td>")
                }
                _ => "<td>-</td>".into(),
            };
            let relr = match unth {
                Some(u) if u > 0.0 && p.kind != Kind::Baseline => {
                    let r = p.rows_per_sec / u;
                    let cls = if r >= 0.6 { "good" } else { "" };
                    format!("<td class=\"{cls}\">{r:.2}x</td>")
                }
                _ => "<td>-</td>".into(),
            };
            let lim = match (p.limit_mean, p.limit_min, p.limit_max) {
                (Some(a), Some(b), Some(c)) => format!("{a:.3} [{b:.2}, {c:.2}]"),
                _ => "-".into(),
            };
            let per_round = if p.p99_rounds.len() > 1 {
                format!(
                    "{} ({})",
                    p.p99_rounds
                        .iter()
                        .map(|x| crate::util::fmt_us(Some(*x)))
                        .collect::<Vec<_>>()
                        .join(", "),
                    crate::util::fmt_us(p.p99_median)
                )
            } else {
                "-".into()
            };
            let _ = write!(
                h,
                "<tr><td>{}{}</td><td>{}</td><td>{}</td><td><b>{}</b></td>{rel}<td>{per_round}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}M</td>{relr}<td>{:.0}%</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&p.name),
                if p.interrupted { " (interrupted)" } else { "" },
                p.requests,
                crate::util::fmt_us(p.p50_us),
                crate::util::fmt_us(p.p99_us),
                crate::util::fmt_us(p.p999_us),
                crate::util::fmt_us(p.max_us),
                crate::util::fmt_us(p.sched_p99_us),
                p.rows_per_sec / 1e6,
                p.cpu_share * 100.0,
                lim,
                p.process_cpu_share
                    .map(|c| format!("{:.0}%", c * 100.0))
                    .unwrap_or("-".into()),
                p.unanswered
            );
        }
        h.push_str("</table><div class=\"note\">fg: request latency from the intended send time (open loop). sched p99: mean of the library's \
            window p99 of scheduling latency (all tasks) sampled through the phase. process CPU: this process's CPU time (server, load generator, scan) over the \
            machine's CPUs. elastic CPU share: process CPU above the baseline phase's, over the machine's CPUs (when a baseline ran; \
            otherwise rows/s over the single-threaded rows per CPU-second).</div>");

        // Plots.
        h.push_str("<h2>Over time</h2>");
        let pts_fg: &dyn Fn(&Point) -> Option<f64> = &|p| p.fg_p99_us;
        let pts_sched: &dyn Fn(&Point) -> Option<f64> = &|p| p.sched_p99_us;
        let pts_sched_fg: &dyn Fn(&Point) -> Option<f64> = &|p| p.sched_fg_p99_us;
        let pts_sched_el: &dyn Fn(&Point) -> Option<f64> = &|p| p.sched_elastic_p99_us;
        let pts_limit: &dyn Fn(&Point) -> Option<f64> = &|p| p.limit;
        let pts_rows: &dyn Fn(&Point) -> Option<f64> = &|p| Some(p.elastic_rows_per_sec);
        h.push_str(&self.plot(
            "Foreground p99 latency (per sample, log scale)",
            &lat_axis,
            &[Line {
                color: "#1f5fbf",
                label: "fg p99",
                get: pts_fg,
            }],
            &fg_refs,
        ));
        h.push_str("<br>");
        h.push_str(&self.plot(
            "Scheduling latency p99 (library probe, window p99 of all tasks, log scale)",
            &lat_axis,
            &[
                Line {
                    color: "#bbbbbb",
                    label: "elastic tasks",
                    get: pts_sched_el,
                },
                Line {
                    color: "#8e3fbf",
                    label: "all tasks (steers)",
                    get: pts_sched,
                },
                Line {
                    color: "#1f5fbf",
                    label: "foreground tasks",
                    get: pts_sched_fg,
                },
            ],
            &sched_refs,
        ));
        h.push_str("<br>");
        h.push_str(&self.plot(
            "Elastic CPU limit (share of the runtime's CPUs)",
            &Axis {
                t_max,
                y_min: 0.0,
                y_max: 1.0,
                log: false,
            },
            &[Line {
                color: "#c25a00",
                label: "limit",
                get: pts_limit,
            }],
            &[],
        ));
        h.push_str("<br>");
        h.push_str(&self.plot(
            "Elastic throughput (rows/s)",
            &Axis {
                t_max,
                y_min: 0.0,
                y_max: rows_max * 1.05,
                log: false,
            },
            &[Line {
                color: "#2e7d32",
                label: "rows/s",
                get: pts_rows,
            }],
            &[],
        ));

        // Controller speed.
        let settles = self.settles();
        if !settles.is_empty() {
            h.push_str("<h2>Controller speed</h2><table><tr><th>phase</th><th>start</th><th>end</th><th>other side ended at</th><th>settle</th><th>tail peak-to-peak</th><th>reversals</th><th>step: before / stepped / after</th><th>fg p99 max, 5 s after step up</th></tr>");
            let f = |x: Option<f64>| x.map(|x| format!("{x:.3}")).unwrap_or("-".into());
            for st in &settles {
                let settle = st
                    .settle_s
                    .iter()
                    .map(|x| {
                        x.map(|x| format!("{x:.1} s"))
                            .unwrap_or("not settled".into())
                    })
                    .collect::<Vec<_>>()
                    .join(" / ");
                let steps = if st.step_levels.is_empty() {
                    "-".to_string()
                } else {
                    st.step_levels
                        .iter()
                        .map(|x| f(*x))
                        .collect::<Vec<_>>()
                        .join(" / ")
                };
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&st.phase),
                    f(st.start_limit),
                    f(st.end_limit),
                    f(st.sibling_end),
                    settle,
                    st.tail_p2p,
                    st.reversals,
                    steps,
                    crate::util::fmt_us(st.fg_p99_after_step_us)
                );
            }
            h.push_str("</table><div class=\"note\">low / high: the limit starts at the controller's floor / ceiling. step: starts from \
                the level the paced phase ended at; foreground load x1.5 in the middle third; settle times after the step up / down. \
                settle = time until the limit first comes within max(0.05, 20%) of its resting level: for low/high the level both sides \
                end at (not settled when they end apart); for step segments the level the segment ends at, counted only when it ends at \
                rest (over its last 30%, the scheduling p99 on both sides of the target, or the limit pinned at floor/ceiling). The \
                controller dithers around its resting level by design: tail peak-to-peak says how much. tail: over the second half of the phase (or \
                last segment).</div>");
        }
        let _ = writeln!(
            h,
            "<h2>Run</h2><div class=\"note\"><code>{}</code></div></body></html>",
            esc(&m.command)
        );
        h
    }
}
