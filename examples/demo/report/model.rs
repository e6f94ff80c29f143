//! The report's model: the run's settings, each phase of each round, the rounds merged per
//! phase, the timeline, and the verdicts against the experiment's done-when bars.

use crate::args::{Env, Kind};
use elastic_cpu_examples::latency::{fmt_us, new_hist, q_us, Latency};
use elastic_cpu_examples::report::plot::Sample;
use elastic_cpu_examples::report::Bar;
use elastic_cpu_examples::stats::{mean, median};
use hdrhistogram::Histogram;

/// Start of the limit in `low` phases (the controller's floor).
pub const LOW_START: f64 = 0.05;
/// Start of the limit in `high` phases (the controller's ceiling).
pub const HIGH_START: f64 = 0.75;
/// Foreground rate multiplier in the middle third of a `step` phase.
pub const STEP_FACTOR: f64 = 1.5;

/// One timeline sample.
#[derive(Clone, Debug)]
pub struct Point {
    pub t_ms: u64,
    pub phase: String,
    pub limit: Option<f64>,
    /// The quota headroom cap as a share of the bucket's CPUs (written in `timeline_signal`).
    pub headroom_share: Option<f64>,
    /// The own class's and the idle pool's limits (written in `timeline_signal`).
    pub own_share: Option<f64>,
    pub idle_share: Option<f64>,
    pub sched_p99_us: Option<f64>,
    /// Not in the report's core timeline schema: written as `timeline_sched_split`.
    pub sched_fg_p99_us: Option<f64>,
    pub sched_elastic_p99_us: Option<f64>,
    pub fg_p99_us: Option<f64>,
    pub elastic_rows_per_sec: f64,
    /// The governor's signal and its components (written as `timeline_signal`).
    pub signal: crate::ctl::SignalSnap,
    /// The target the signal was compared with (paced phases).
    pub target_us: Option<f64>,
}

impl Sample for Point {
    fn t_ms(&self) -> u64 {
        self.t_ms
    }
    fn phase(&self) -> &str {
        &self.phase
    }
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
    /// Share of one core a neighbour process burned through the run, if any.
    pub neighbour: Option<f64>,
    pub command: String,
}

/// One phase's summary.
#[derive(Clone, Debug)]
pub struct PhaseResult {
    pub name: String,
    pub kind: Kind,
    /// Host or inside the CPU quota.
    pub env: Env,
    /// The quota in CPUs (quota environment).
    pub quota_cpus: Option<f64>,
    /// The process's CPU time per wall second over the measurement window.
    pub process_cpus: Option<f64>,
    /// The quota cgroup's enforcement periods, throttled periods and throttled time over the
    /// measurement window (quota environment).
    pub periods: Option<u64>,
    pub throttled_periods: Option<u64>,
    pub throttled_ms: Option<f64>,
    /// The controller's target in this phase (paced phases).
    pub target_us: Option<u64>,
    pub skipped: Option<String>,
    pub interrupted: bool,
    pub start_ms: u64,
    pub end_ms: u64,
    pub step_ms: Vec<u64>,
    pub measured_secs: f64,
    /// Foreground requests over the measurement window (machine pauses left out).
    pub fg: Latency,
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
    /// The outlier trap's polls over its threshold in the measurement window, by spawn site,
    /// summed over consecutive probe windows; most time held first.
    pub outliers: Vec<SiteRow>,
    pub outlier_threshold_us: Option<f64>,
    /// The probe windows those outliers come from (seconds), and the windows left out because
    /// a machine pause fell in them (a pause stretches every poll it catches, as it stretches
    /// the requests the latency figures leave out).
    pub outlier_secs: f64,
    pub outlier_windows_paused: u64,
    /// Task polls per second on the runtime under test, one reading per probe window.
    pub polls_per_sec: Vec<f64>,
    /// The `culprit` phase: where the planted offender was spawned (`path:line`).
    pub planted_at: Option<String>,
    /// ...and its longest hold on its own clock over the windows the outliers come from (µs).
    pub planted_longest_us: Option<f64>,
    /// The `classes` phase: when its first class stopped (run clock), its samples, and what
    /// they add up to.
    pub first_class_stop_ms: Option<u64>,
    pub class_samples: Vec<crate::classes::ClassSample>,
    pub classes: Option<ClassesResult>,
}

/// The `classes` phase's classes: while all three were busy, and after the first stopped.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassesResult {
    pub busy: Vec<crate::classes::ClassStats>,
    pub after_first: Option<Vec<crate::classes::ClassStats>>,
    /// How long after the first class stopped the second one's CPU (over half a second)
    /// reached 90 % of its new entitlement.
    pub rise_ms: Option<u64>,
}

impl ClassesResult {
    /// From `samples`: busy over `[from_ms, stop_ms]`, the rest over `[stop_ms, end_ms]`.
    pub fn of(
        samples: &[crate::classes::ClassSample],
        from_ms: u64,
        stop_ms: Option<u64>,
        end_ms: u64,
    ) -> Option<ClassesResult> {
        let stop = stop_ms.unwrap_or(end_ms);
        let busy = crate::classes::over(samples, from_ms, stop)?;
        let after_first = stop_ms.and_then(|s| crate::classes::over(samples, s, end_ms));
        let rise_ms = match (&after_first, stop_ms) {
            (Some(after), Some(s)) => crate::classes::rise_ms(
                samples,
                1,
                s,
                after[1].entitled_share,
                std::time::Duration::from_millis(500),
            ),
            _ => None,
        };
        Some(ClassesResult {
            busy,
            after_first,
            rise_ms,
        })
    }
}

/// One spawn site's polls over the outlier threshold in a phase.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SiteRow {
    pub spawned_at: String,
    pub elastic: bool,
    pub count: u64,
    pub worst_poll_us: f64,
    pub held_ms: f64,
    /// Foreground waits over the threshold these polls held up.
    pub waits_held: u64,
}

/// Adds one probe window's outliers to `rows` (merged by site and kind), most held first.
pub fn add_outliers(rows: &mut Vec<SiteRow>, o: &elastic_cpu::snapshot::Outliers) {
    for s in &o.sites {
        let row = SiteRow {
            spawned_at: s.spawned_at(),
            elastic: s.elastic,
            count: s.count,
            worst_poll_us: s.worst.as_secs_f64() * 1e6,
            held_ms: s.held.as_secs_f64() * 1e3,
            waits_held: s.waits_held,
        };
        merge_row(rows, &row);
    }
}

fn merge_row(rows: &mut Vec<SiteRow>, row: &SiteRow) {
    match rows
        .iter_mut()
        .find(|r| r.spawned_at == row.spawned_at && r.elastic == row.elastic)
    {
        Some(r) => {
            r.count += row.count;
            r.worst_poll_us = r.worst_poll_us.max(row.worst_poll_us);
            r.held_ms += row.held_ms;
            r.waits_held += row.waits_held;
        }
        None => rows.push(row.clone()),
    }
    rows.sort_by(|a, b| b.held_ms.total_cmp(&a.held_ms));
}

impl PhaseResult {
    pub fn new(name: &str, kind: Kind, env: Env) -> PhaseResult {
        PhaseResult {
            name: name.to_string(),
            kind,
            env,
            quota_cpus: None,
            process_cpus: None,
            periods: None,
            throttled_periods: None,
            throttled_ms: None,
            target_us: None,
            skipped: None,
            interrupted: false,
            start_ms: 0,
            end_ms: 0,
            step_ms: Vec::new(),
            measured_secs: 0.0,
            fg: Latency::default(),
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
            outliers: Vec::new(),
            outlier_threshold_us: None,
            outlier_secs: 0.0,
            outlier_windows_paused: 0,
            polls_per_sec: Vec::new(),
            planted_at: None,
            planted_longest_us: None,
            first_class_stop_ms: None,
            class_samples: Vec::new(),
            classes: None,
        }
    }

    /// The run-clock time of the last class sample (0 with none).
    pub fn end_of_samples(&self) -> u64 {
        self.class_samples.last().map_or(0, |s| s.t_ms)
    }

    pub(super) fn ran(&self) -> bool {
        self.skipped.is_none() && self.fg.requests > 0
    }

    /// The phase's name with its environment where that is not the host: `paced`,
    /// `quota:paced`.
    pub fn label(&self) -> String {
        match self.env {
            Env::Host => self.name.clone(),
            Env::Quota => format!("quota:{}", self.name),
        }
    }
}

/// Merge the rounds of each phase (first-appearance order): latency histograms merged, rows
/// and CPU over the summed measurement time, limit and scheduling samples pooled.
pub fn aggregate(segs: &[PhaseResult]) -> Vec<PhaseResult> {
    let mut names: Vec<(Env, &str)> = Vec::new();
    for s in segs {
        if !names.contains(&(s.env, s.name.as_str())) {
            names.push((s.env, &s.name));
        }
    }
    names
        .into_iter()
        .map(|(env, n)| {
            let all: Vec<&PhaseResult> = segs
                .iter()
                .filter(|s| s.name == n && s.env == env)
                .collect();
            let group: Vec<&PhaseResult> = all
                .iter()
                .copied()
                .filter(|s| s.skipped.is_none() && s.hist.is_some())
                .collect();
            let mut r = PhaseResult::new(n, all[0].kind, env);
            r.quota_cpus = all[0].quota_cpus;
            r.target_us = all[0].target_us;
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
            r.fg = Latency::of(&h);
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
            r.process_cpus = wmean(&|g| g.process_cpus);
            let sum = |f: &dyn Fn(&PhaseResult) -> Option<u64>| -> Option<u64> {
                group.iter().map(|g| f(g)).sum()
            };
            r.periods = sum(&|g| g.periods);
            r.throttled_periods = sum(&|g| g.throttled_periods);
            r.throttled_ms = group.iter().map(|g| g.throttled_ms).sum();
            r.p99_rounds = group.iter().filter_map(|g| g.fg.p99_us).collect();
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
            for g in &group {
                for row in &g.outliers {
                    merge_row(&mut r.outliers, row);
                }
            }
            r.outlier_threshold_us = group.iter().find_map(|g| g.outlier_threshold_us);
            r.outlier_secs = group.iter().map(|g| g.outlier_secs).sum();
            r.outlier_windows_paused = group.iter().map(|g| g.outlier_windows_paused).sum();
            r.polls_per_sec = (group.iter())
                .flat_map(|g| g.polls_per_sec.iter().copied())
                .collect();
            r.planted_at = group.iter().find_map(|g| g.planted_at.clone());
            r.planted_longest_us =
                (group.iter().filter_map(|g| g.planted_longest_us)).reduce(f64::max);
            // Classes are read from the first round that has them.
            if let Some(g) = group.iter().find(|g| g.classes.is_some()) {
                r.classes = g.classes.clone();
                r.class_samples = g.class_samples.clone();
                r.first_class_stop_ms = g.first_class_stop_ms;
            }
            r
        })
        .collect()
}

/// Elastic CPU share from the process's CPU time: what a phase's process used above the
/// baseline phase's (same service, same load, no scan), over the machine's CPUs. The
/// single-threaded rows-per-CPU-second calibration is kept as `cpu_share_from_rows`; on this
/// shared machine it moves by tens of percent between runs, the process CPU time does not.
pub fn attribute_cpu(phases: &mut [PhaseResult], segments: &mut [PhaseResult]) {
    for env in [Env::Host, Env::Quota] {
        attribute_cpu_in(env, phases, segments);
    }
}

/// [`attribute_cpu`] for one environment, against that environment's baseline.
fn attribute_cpu_in(env: Env, phases: &mut [PhaseResult], segments: &mut [PhaseResult]) {
    let base = phases
        .iter()
        .find(|p| p.kind == Kind::Baseline && p.env == env)
        .and_then(|p| p.process_cpu_share);
    let Some(base) = base else {
        return;
    };
    for p in phases
        .iter_mut()
        .chain(segments.iter_mut())
        .filter(|p| p.env == env)
    {
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

fn ratio(x: Option<f64>, y: Option<f64>) -> Option<f64> {
    match (x, y) {
        (Some(x), Some(y)) if y > 0.0 => Some(x / y),
        _ => None,
    }
}

fn fmt_x(r: Option<f64>) -> String {
    r.map(|r| format!("{r:.2}x")).unwrap_or("n/a".into())
}

/// The bar `{name} fg p99 <= {most}x baseline`: what it says, the ratio, and whether it holds.
fn within_baseline(
    name: &str,
    p99: Option<f64>,
    base: Option<f64>,
    most: f64,
) -> (String, String, Option<bool>) {
    let r = ratio(p99, base);
    (
        format!("{name} fg p99 <= {most}x baseline"),
        fmt_x(r),
        r.map(|r| r <= most),
    )
}

/// Inside a quota, the quick start (`default`) is held to the harvest goal: most of the spare
/// at about the baseline's p99; the pinned placements to the older, looser bars.
fn quota_goal(name: &str) -> (f64, f64) {
    if name == "default" {
        (1.1, 0.85)
    } else {
        (1.5, 0.6)
    }
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
    /// Lines the run wants the reader to see (an environment skipped, and why).
    pub notes: Vec<String>,
}

// ---------------------------------------------------------------------------------------------
// Verdicts against the done-when bars.

/// A paced phase `p` against `static` `s`: no worse on fg p99 and rows/s, better on one.
fn no_worse_than_static(
    p: Option<&PhaseResult>,
    s: Option<&PhaseResult>,
    p_p99: Option<f64>,
    s_p99: Option<f64>,
) -> (String, Option<bool>) {
    match (p, s, p_p99, s_p99) {
        (Some(p), Some(s), Some(pl), Some(sl)) => {
            let lat_ok = pl <= sl;
            let thr_ok = p.rows_per_sec >= s.rows_per_sec;
            (
                format!(
                    "p99 {} vs {}, rows/s {:.2}M vs {:.2}M",
                    fmt_us(Some(pl)),
                    fmt_us(Some(sl)),
                    p.rows_per_sec / 1e6,
                    s.rows_per_sec / 1e6
                ),
                Some(lat_ok && thr_ok && (pl < sl || p.rows_per_sec > s.rows_per_sec)),
            )
        }
        _ => ("n/a".into(), None),
    }
}

impl Report {
    pub(super) fn find(&self, env: Env, name: &str) -> Option<&PhaseResult> {
        self.phases
            .iter()
            .find(|p| p.name == name && p.env == env && p.ran())
    }

    /// The phases a bar judges, by name: `default` only where it ran (runs from before it
    /// existed have none), the others as found or not.
    fn judged<'a>(
        &'a self,
        env: Env,
        names: &'a [&'a str],
    ) -> impl Iterator<Item = (&'a str, Option<&'a PhaseResult>)> + 'a {
        names.iter().filter_map(move |&name| {
            let p = self.find(env, name);
            (name != "default" || p.is_some()).then_some((name, p))
        })
    }

    /// The environments that ran, in run order.
    pub fn envs(&self) -> Vec<Env> {
        let mut v = Vec::new();
        for p in &self.segments {
            if !v.contains(&p.env) {
                v.push(p.env);
            }
        }
        v
    }

    /// The done-when bars, on the merged rounds (`median == false`) or on the median of the
    /// rounds' fg p99 (`median == true`; throughput and CPU are always over all rounds), for
    /// every environment that ran.
    pub fn bars_on(&self, median: bool) -> Vec<Bar> {
        let mut out = Vec::new();
        for env in self.envs() {
            match env {
                Env::Host => self.host_bars(median, &mut out),
                Env::Quota => self.quota_bars(median, &mut out),
            }
        }
        out
    }

    fn p99_of(p: Option<&PhaseResult>, median: bool) -> Option<f64> {
        p.and_then(|p| if median { p.p99_median } else { p.fg.p99_us })
    }

    fn host_bars(&self, median: bool, out: &mut Vec<Bar>) {
        let env = Env::Host;
        let p99 = |p| Self::p99_of(p, median);
        let b = self.find(env, "baseline");
        let u = self.find(env, "unthrottled");
        let s = self.find(env, "static");
        let ir = self.find(env, "idle-runtime");
        let mut bar = |what: String, value: String, pass: Option<bool>| {
            out.push(Bar {
                what: format!("host: {what}"),
                value,
                pass,
            })
        };
        let r = ratio(p99(u), p99(b));
        bar(
            "unthrottled fg p99 >= 3x baseline (the experiment is real)".into(),
            fmt_x(r),
            r.map(|r| r >= 3.0),
        );
        // The same-runtime bars hold for `default` (the quick start's path) as for `paced`.
        for (name, p) in self.judged(env, &["paced", "paced-idle", "default"]) {
            let (what, value, pass) = within_baseline(name, p99(p), p99(b), 1.5);
            bar(what, value, pass);
        }
        for (name, p) in self.judged(env, &["paced", "default"]) {
            let r = ratio(p.map(|p| p.rows_per_sec), u.map(|u| u.rows_per_sec));
            bar(
                format!("{name} rows/s >= 0.6x unthrottled"),
                fmt_x(r),
                r.map(|r| r >= 0.6),
            );
            let (value, pass) = no_worse_than_static(p, s, p99(p), p99(s));
            bar(
                format!("{name} no worse than static on fg p99 and rows/s, better on one"),
                value,
                pass,
            );
        }
        // And the idle-priority bars for `default` as for `paced-idle`: on a bare host the quick
        // start's path should do what the kernel's idle priority does.
        for (name, pi) in self.judged(env, &["paced-idle", "default"]) {
            let r = ratio(p99(pi), p99(ir));
            bar(
                format!("{name} fg p99 <= 1.1x idle-runtime"),
                fmt_x(r),
                r.map(|r| r <= 1.1),
            );
            let r = ratio(pi.map(|p| p.rows_per_sec), ir.map(|p| p.rows_per_sec));
            bar(
                format!("{name} rows/s >= 0.9x idle-runtime"),
                fmt_x(r),
                r.map(|r| r >= 0.9),
            );
        }
    }

    fn quota_bars(&self, median: bool, out: &mut Vec<Bar>) {
        let env = Env::Quota;
        let p99 = |p| Self::p99_of(p, median);
        let b = self.find(env, "baseline");
        let ir = self.find(env, "idle-runtime");
        let quota = self
            .phases
            .iter()
            .find(|p| p.env == env)
            .and_then(|p| p.quota_cpus);
        let q = quota.map(|q| format!("{q}")).unwrap_or("?".into());
        let mut bar = |what: String, value: String, pass: Option<bool>| {
            out.push(Bar {
                what: format!("quota {q}: {what}"),
                value,
                pass,
            })
        };
        let r = ratio(p99(ir), p99(b));
        bar(
            "idle-runtime fg p99 >= 5x baseline (the experiment is real)".into(),
            fmt_x(r),
            r.map(|r| r >= 5.0),
        );
        for (name, p) in self.judged(env, &["paced", "paced-idle", "default"]) {
            let (most_p99, least_spare) = quota_goal(name);
            let (what, value, pass) = within_baseline(name, p99(p), p99(b), most_p99);
            bar(what, value, pass);
            let base = b.and_then(|b| b.process_cpus);
            let cpu = match (p.and_then(|p| p.process_cpus), base, quota) {
                (Some(c), Some(base), Some(q)) if q > base => {
                    let share = (c - base) / (q - base);
                    Some((
                        format!(
                            "{:.2} of the spare quota ({c:.2} - {base:.2} CPUs of {q} - {base:.2})",
                            share
                        ),
                        share >= least_spare,
                    ))
                }
                _ => None,
            };
            bar(
                format!("{name} elastic CPU >= {least_spare}x (quota - baseline's process CPUs)"),
                cpu.as_ref().map(|c| c.0.clone()).unwrap_or("n/a".into()),
                cpu.map(|c| c.1),
            );
        }
    }

    pub(super) fn rounds(&self) -> usize {
        self.segments.iter().map(|s| s.round).max().unwrap_or(0) + 1
    }
}
