//! The fleet's report: what the run recorded (`Run`), the figures per node the issue asks for
//! (`NodeFigures`, computed here), the done-when bars, and one module per output.

pub mod html;
pub mod json;
pub mod text;

use crate::plan::{Kind, Plan, Window};
use elastic_cpu_examples::latency::Latency;
use elastic_cpu_examples::report::Bar;
use elastic_cpu_examples::stats::mean;

/// Largest ratio of a node's paced p99 to its baseline p99 (pinned), or to its p99 with only
/// the others' scans on (shared cores).
pub const P99_RATIO_BAR: f64 = 1.5;
/// Largest share of CFS periods a node may be throttled in while its scan runs.
pub const THROTTLED_BAR: f64 = 0.05;
/// Least elastic CPU at rest, as a share of the node's spare quota, nodes on shared cores.
pub const SPARE_BAR: f64 = 0.6;
/// The same, each node on CPUs of its own.
pub const SPARE_BAR_PINNED: f64 = 0.7;
/// Longest the stepped node's limit may take to move toward its new level, seconds.
pub const MOVE_BAR_S: f64 = 3.0;
/// Farthest the other nodes' limits may drift from where they were.
pub const OTHERS_BAR: f64 = 0.05;
/// Spare quotas closer than this (CPUs) are a tie: their elastic CPUs may come in any order.
pub const SPARE_TIE: f64 = 0.02;
/// A limit that moves less than this on the step did not move (`moved_within_s` is null).
pub const MIN_MOVE: f64 = 0.02;

/// How the nodes sit on the machine's cores, which sets the bars.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Every node and load generator on every core: a node's p99 is judged against its
    /// own-scan baseline (the others' scans on), where it has one.
    Shared,
    /// Each node and its load generator on CPUs of its own: a node's p99 is judged against its
    /// baseline without a scan, and it must take more of its spare.
    Pinned,
}

impl Scenario {
    /// The least elastic CPU at rest over the spare.
    pub fn spare_bar(self) -> f64 {
        match self {
            Scenario::Shared => SPARE_BAR,
            Scenario::Pinned => SPARE_BAR_PINNED,
        }
    }
}

/// One node in one second of the run clock (the second `sec .. sec + 1`).
#[derive(Clone, Debug, Default)]
pub struct Point {
    pub sec: usize,
    pub phase: &'static str,
    /// The share as the bucket applies it (held to the quota's headroom), mean over the second.
    pub limit: Option<f64>,
    /// The controller's share, mean over the second.
    pub share: Option<f64>,
    /// CPUs the scan's work took: its rows over the rows a CPU-second encodes (measured by the
    /// node before its quota bound).
    pub elastic_cpus: Option<f64>,
    /// CPUs elastic work ran as the library's ledger charged them (`Snapshot::used`).
    pub ledger_cpus: Option<f64>,
    /// The ledger per second, CPUs: granted, run past grants, debt forgiven; and the token
    /// rate at the end of the second.
    pub granted_cpus: Option<f64>,
    pub over_limit_cpus: Option<f64>,
    pub forgiven_cpus: Option<f64>,
    /// The share of the second the quota brake held elastic work back (brakes that ended).
    pub quota_braked: Option<f64>,
    pub rate_cpus: Option<f64>,
    /// CPUs the node process used.
    pub cpus: Option<f64>,
    /// The cgroup's CFS periods with runnable tasks, and those throttled.
    pub periods: u64,
    pub throttled: u64,
    /// Foreground p99 (µs) and replies per second, as the load generator saw them.
    pub fg_p99_us: Option<f64>,
    pub fg_rps: f64,
    /// Rows the scan encoded per second.
    pub rows_per_s: f64,
    /// What the controller stepped on last and against which target, µs.
    pub signal_us: Option<f64>,
    pub target_us: Option<f64>,
    pub source: String,
}

impl Point {
    /// Throttled periods as a share of the second's periods (None: no period ran).
    pub fn throttled_share(&self) -> Option<f64> {
        (self.periods > 0).then(|| self.throttled as f64 / self.periods as f64)
    }
}

/// The host in one second: its busy CPUs and the parent's (load generators, the watchdog).
#[derive(Clone, Debug, Default)]
pub struct HostPoint {
    pub sec: usize,
    pub busy_cpus: Option<f64>,
    pub parent_cpus: Option<f64>,
}

/// One node's run.
#[derive(Clone, Debug, Default)]
pub struct NodeRun {
    pub name: String,
    pub quota: f64,
    /// The foreground share of the quota it was sized to (None: a rate was given).
    pub fg_share: Option<f64>,
    /// Its foreground rate, requests per second (before the step).
    pub rate: f64,
    /// The node's CPU per request the calibration measured, µs.
    pub cpu_per_request_us: Option<f64>,
    /// Rows the node's scan encodes per CPU-second.
    pub rows_per_cpu_s: Option<f64>,
    /// The CPUs the library computes its rate for, and their source.
    pub lib_cpus: Option<f64>,
    pub lib_cpus_source: String,
    /// Where the scan ran and why, as the node last said.
    pub placement: String,
    pub cgroup: String,
    /// The CPUs the node ran on (its affinity mask; every CPU when it shared them).
    pub cpus: Vec<usize>,
    pub points: Vec<Point>,
    /// Foreground latency over the baseline window, the paced phase at rest, the whole paced
    /// phase after its warm-up: requests in flight across a machine pause left out.
    pub baseline: Latency,
    pub paced_rest: Latency,
    pub paced_whole: Latency,
    /// Foreground latency in its own-scan phase's second half (its scan off, the others' on;
    /// empty without one).
    pub own_off: Latency,
    /// Requests left out of those for a machine pause.
    pub left_out: u64,
    /// Requests never answered.
    pub lost: u64,
}

/// What the run was, for the report's head.
#[derive(Clone, Debug, Default)]
pub struct Machine {
    pub cpus: usize,
    pub workers: usize,
    pub work_us: f64,
    pub conns: usize,
    pub client_priority: &'static str,
    pub pause_watchdog: bool,
    /// The library's slice, where the flag set one (None: the library's default).
    pub slice_ms: Option<u64>,
    pub command: String,
}

/// Everything a run recorded.
pub struct Run {
    pub plan: Plan,
    pub nodes: Vec<NodeRun>,
    pub host: Vec<HostPoint>,
    pub step_node: usize,
    pub step_factor: f64,
    /// `--cpus-per-node` (None: the nodes shared every core).
    pub cpus_per_node: Option<usize>,
    pub machine: Machine,
    pub interrupted: bool,
    pub notes: Vec<String>,
}

/// The step, seen from one node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepFigures {
    pub node_stepped: bool,
    /// The limit at rest before the step, in the step's second half, in the second half back.
    pub limit_before: Option<f64>,
    pub limit_during: Option<f64>,
    pub limit_after: Option<f64>,
    /// Seconds from the step until the limit was half way to its new level (stepped node
    /// only; None: it did not move).
    pub moved_within_s: Option<f64>,
    /// The same for the step back, half way back to where it was after.
    pub back_within_s: Option<f64>,
}

/// One node's figures.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeFigures {
    pub name: String,
    pub quota: f64,
    /// CPUs the node used in the baseline (its foreground, the library's own work included).
    pub fg_cpus: Option<f64>,
    /// `quota - fg_cpus`.
    pub spare: Option<f64>,
    pub baseline_p99_us: Option<f64>,
    pub paced_p99_us: Option<f64>,
    pub paced_whole_p99_us: Option<f64>,
    /// p99 with its own scan off and the other nodes' on (None: no own-scan phase).
    pub own_off_p99_us: Option<f64>,
    pub limit_at_rest: Option<f64>,
    pub share_at_rest: Option<f64>,
    /// The share of the time at rest the quota brake held elastic work back.
    pub quota_braked_at_rest: Option<f64>,
    /// What the node used at rest over its baseline (`cpu_at_rest - fg_cpus`): the spare quota
    /// elastic work took, its scheduling overhead included. The bars judge this one.
    pub elastic_at_rest: Option<f64>,
    /// The scan's CPU at rest from its rows (a lower bound: the rows per CPU-second were
    /// measured at the scan's best, alone).
    pub rows_at_rest: Option<f64>,
    /// The library's ledger of elastic CPUs at rest.
    pub ledger_at_rest: Option<f64>,
    /// The node's CPUs at rest.
    pub cpu_at_rest: Option<f64>,
    /// Throttled periods and periods while the scan ran.
    pub throttled_periods: u64,
    pub periods: u64,
    pub throttled_baseline: u64,
    pub step: StepFigures,
}

impl NodeFigures {
    /// Paced p99 over baseline p99.
    pub fn p99_ratio(&self) -> Option<f64> {
        Some(self.paced_p99_us? / self.baseline_p99_us?)
    }

    /// Paced p99 over the p99 with only the other nodes' scans on: what its own scan costs it.
    pub fn own_scan_ratio(&self) -> Option<f64> {
        Some(self.paced_p99_us? / self.own_off_p99_us?)
    }

    /// The p99 ratio the bar judges: against the baseline when pinned; against the own-scan
    /// baseline on shared cores, the baseline for a node without one.
    pub fn judged_ratio(&self, scenario: Scenario) -> Option<f64> {
        match scenario {
            Scenario::Pinned => self.p99_ratio(),
            Scenario::Shared => self.own_scan_ratio().or_else(|| self.p99_ratio()),
        }
    }

    /// Throttled share of the periods while the scan ran.
    pub fn throttled_share(&self) -> Option<f64> {
        (self.periods > 0).then(|| self.throttled_periods as f64 / self.periods as f64)
    }

    /// Elastic CPU at rest over the spare quota.
    pub fn elastic_to_spare(&self) -> Option<f64> {
        let spare = self.spare?;
        (spare > 0.0).then(|| self.elastic_at_rest.unwrap_or(0.0) / spare)
    }
}

/// The mean of `get` over the points in `w`.
pub fn mean_in(points: &[Point], w: &Window, get: impl Fn(&Point) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = points
        .iter()
        .filter(|p| w.contains(&p.sec))
        .filter_map(get)
        .collect();
    mean(&v)
}

/// Seconds from `from` until the limit first went at least half way from `before` to `to`
/// (counted to the end of the second it did), looking at seconds `from .. end`; None when the
/// levels are within [`MIN_MOVE`] or it never did.
pub fn half_way_within(
    points: &[Point],
    from: usize,
    end: usize,
    before: f64,
    to: f64,
) -> Option<f64> {
    let dist = to - before;
    if dist.abs() < MIN_MOVE {
        return None;
    }
    points
        .iter()
        .filter(|p| p.sec >= from && p.sec < end)
        .find(|p| p.limit.is_some_and(|l| (l - before) / dist >= 0.5))
        .map(|p| (p.sec + 1 - from) as f64)
}

/// One node's step figures.
pub fn step_figures(points: &[Point], plan: &Plan, stepped: bool) -> StepFigures {
    let lim = |p: &Point| p.limit;
    let before = mean_in(points, &plan.rest(), lim);
    let during = mean_in(points, &plan.during(), lim);
    let after = mean_in(points, &plan.after(), lim);
    let (step, back) = (plan.span(Kind::Step), plan.span(Kind::Back));
    let (moved, back_within) = match (stepped, before, during) {
        (true, Some(b), Some(d)) => (
            half_way_within(points, step.start, step.end, b, d),
            half_way_within(points, back.start, back.end, d, after.unwrap_or(b)),
        ),
        _ => (None, None),
    };
    StepFigures {
        node_stepped: stepped,
        limit_before: before,
        limit_during: during,
        limit_after: after,
        moved_within_s: moved,
        back_within_s: back_within,
    }
}

/// One node's figures from its run.
pub fn node_figures(n: &NodeRun, plan: &Plan, stepped: bool) -> NodeFigures {
    let fg_cpus = mean_in(&n.points, &plan.baseline(), |p| p.cpus);
    let rest = plan.rest();
    let cpu_at_rest = mean_in(&n.points, &rest, |p| p.cpus);
    let sum = |w: &Window, get: fn(&Point) -> u64| -> u64 {
        n.points
            .iter()
            .filter(|p| w.contains(&p.sec))
            .map(get)
            .sum()
    };
    NodeFigures {
        name: n.name.clone(),
        quota: n.quota,
        fg_cpus,
        spare: fg_cpus.map(|f| n.quota - f),
        baseline_p99_us: n.baseline.p99_us,
        paced_p99_us: n.paced_rest.p99_us,
        paced_whole_p99_us: n.paced_whole.p99_us,
        own_off_p99_us: n.own_off.p99_us,
        limit_at_rest: mean_in(&n.points, &rest, |p| p.limit),
        quota_braked_at_rest: mean_in(&n.points, &rest, |p| p.quota_braked),
        share_at_rest: mean_in(&n.points, &rest, |p| p.share),
        elastic_at_rest: match (cpu_at_rest, fg_cpus) {
            (Some(c), Some(f)) => Some((c - f).max(0.0)),
            _ => None,
        },
        rows_at_rest: mean_in(&n.points, &rest, |p| p.elastic_cpus),
        ledger_at_rest: mean_in(&n.points, &rest, |p| p.ledger_cpus),
        cpu_at_rest,
        throttled_periods: sum(&plan.scanning(), |p| p.throttled),
        periods: sum(&plan.scanning(), |p| p.periods),
        throttled_baseline: sum(&plan.baseline(), |p| p.throttled),
        step: step_figures(&n.points, plan, stepped),
    }
}

impl Run {
    /// How the nodes sat on the cores.
    pub fn scenario(&self) -> Scenario {
        match self.cpus_per_node {
            Some(_) => Scenario::Pinned,
            None => Scenario::Shared,
        }
    }

    /// Every node's figures.
    pub fn figures(&self) -> Vec<NodeFigures> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| node_figures(n, &self.plan, i == self.step_node))
            .collect()
    }

    /// CPUs busy at rest outside the fleet: the host's busy CPUs less the parent's and every
    /// node's (other processes on the machine; more than a few hundredths disturbs the run).
    pub fn outside_at_rest(&self) -> Option<f64> {
        let rest = self.plan.rest();
        let nodes: Option<f64> = self
            .nodes
            .iter()
            .map(|n| mean_in(&n.points, &rest, |p| p.cpus))
            .sum();
        let busy = self.host_mean(&rest, |h| h.busy_cpus)?;
        let parent = self.host_mean(&rest, |h| h.parent_cpus)?;
        Some((busy - parent - nodes?).max(0.0))
    }

    /// The mean of a host figure over `w`.
    pub fn host_mean(&self, w: &Window, get: fn(&HostPoint) -> Option<f64>) -> Option<f64> {
        let v: Vec<f64> = self
            .host
            .iter()
            .filter(|h| w.contains(&h.sec))
            .filter_map(get)
            .collect();
        mean(&v)
    }
}

/// `x` with 2 decimals, `-` without it.
pub fn f2(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.2}"))
}

/// Whether the elastic CPUs come in the order of the spare quotas: every pair whose spares
/// differ by more than [`SPARE_TIE`] has its elastic CPUs the same way round. None when a
/// figure is missing.
pub fn order_matches(spare: &[Option<f64>], elastic: &[Option<f64>]) -> Option<bool> {
    let s: Option<Vec<f64>> = spare.iter().copied().collect();
    let e: Option<Vec<f64>> = elastic.iter().copied().collect();
    let (s, e) = (s?, e?);
    Some((0..s.len()).all(|i| (0..s.len()).all(|j| s[i] + SPARE_TIE >= s[j] || e[i] < e[j])))
}

/// Names sorted by `v`, ascending, joined with `<`.
fn order(figs: &[NodeFigures], v: impl Fn(&NodeFigures) -> Option<f64>) -> String {
    let mut named: Vec<(String, f64)> = figs
        .iter()
        .map(|f| (f.name.clone(), v(f).unwrap_or(f64::NAN)))
        .collect();
    named.sort_by(|a, b| a.1.total_cmp(&b.1));
    named
        .iter()
        .map(|(n, x)| format!("{n} {x:.2}"))
        .collect::<Vec<_>>()
        .join(" < ")
}

/// A bar over every node: `check` of each (None: not measured), the value from `show`.
fn every(
    what: String,
    figs: &[NodeFigures],
    check: impl Fn(&NodeFigures) -> Option<bool>,
    show: impl Fn(&NodeFigures) -> String,
) -> Bar {
    let verdicts: Vec<Option<bool>> = figs.iter().map(&check).collect();
    if figs.is_empty() {
        // Nothing to judge (one node has no others): not a pass.
        return Bar {
            what,
            value: "no node".into(),
            pass: None,
        };
    }
    Bar {
        what,
        value: figs
            .iter()
            .map(|f| format!("{} {}", f.name, show(f)))
            .collect::<Vec<_>>()
            .join(", "),
        pass: verdicts
            .iter()
            .copied()
            .collect::<Option<Vec<bool>>>()
            .map(|v| v.iter().all(|ok| *ok)),
    }
}

/// The done-when bars of a run's figures (the README's section is not a run's bar).
pub fn bars(figs: &[NodeFigures], scenario: Scenario) -> Vec<Bar> {
    let p99_what = match scenario {
        Scenario::Pinned => {
            format!("every node's paced p99 <= {P99_RATIO_BAR}x its own baseline p99")
        }
        Scenario::Shared => format!(
            "every node's paced p99 <= {P99_RATIO_BAR}x its p99 with its own scan off and the \
             others' on (own-scan ratio; its baseline p99 without an own-scan phase)"
        ),
    };
    let spare_bar = scenario.spare_bar();
    let mut out = vec![
        every(
            p99_what,
            figs,
            |f| f.judged_ratio(scenario).map(|r| r <= P99_RATIO_BAR),
            |f| format!("{}x", f2(f.judged_ratio(scenario))),
        ),
        every(
            format!(
                "no node throttled in more than {:.0} % of periods (scan running)",
                THROTTLED_BAR * 100.0
            ),
            figs,
            |f| f.throttled_share().map(|s| s <= THROTTLED_BAR),
            |f| match f.throttled_share() {
                Some(s) => format!("{:.1} %", s * 100.0),
                None => "-".into(),
            },
        ),
    ];
    let spare: Vec<Option<f64>> = figs.iter().map(|f| f.spare).collect();
    let elastic: Vec<Option<f64>> = figs.iter().map(|f| f.elastic_at_rest).collect();
    out.push(Bar {
        what: "elastic CPU at rest in the order of the spare quota (quota - foreground CPU)".into(),
        value: format!(
            "spare {}; elastic {}",
            order(figs, |f| f.spare),
            order(figs, |f| f.elastic_at_rest)
        ),
        pass: order_matches(&spare, &elastic),
    });
    out.push(every(
        format!("every node's elastic CPU at rest >= {spare_bar}x its spare quota"),
        figs,
        |f| f.elastic_to_spare().map(|r| r >= spare_bar),
        |f| format!("{}x", f2(f.elastic_to_spare())),
    ));
    let stepped: Vec<&NodeFigures> = figs.iter().filter(|f| f.step.node_stepped).collect();
    let others: Vec<NodeFigures> = figs
        .iter()
        .filter(|f| !f.step.node_stepped)
        .cloned()
        .collect();
    if let Some(f) = stepped.first() {
        let s = &f.step;
        let levels = format!(
            "{}: {} -> {} -> {}",
            f.name,
            f2(s.limit_before),
            f2(s.limit_during),
            f2(s.limit_after)
        );
        out.push(Bar {
            what: format!("stepped node's limit moves toward its new level within {MOVE_BAR_S} s"),
            value: match s.moved_within_s {
                Some(t) => format!("{levels}, half way in {t:.0} s"),
                None => format!("{levels}, did not move"),
            },
            pass: (s.limit_during.is_some())
                .then(|| s.moved_within_s.is_some_and(|t| t <= MOVE_BAR_S)),
        });
        // Back is judged only after a move: a limit that never left cannot come back.
        let back = match (s.limit_before, s.limit_during, s.limit_after) {
            (Some(b), Some(d), Some(a)) => {
                Some(s.moved_within_s.is_some() && (a - b).abs() < (a - d).abs())
            }
            _ => None,
        };
        out.push(Bar {
            what: "... and back after (nearer where it was than the step's level)".into(),
            value: match s.back_within_s {
                Some(t) => format!("{levels}, half way back in {t:.0} s"),
                None => levels,
            },
            pass: back,
        });
    }
    out.push(every(
        format!("the other nodes' limits stay within +-{OTHERS_BAR} of where they were"),
        &others,
        |f| {
            let b = f.step.limit_before?;
            let d = (f.step.limit_during? - b).abs();
            let a = (f.step.limit_after? - b).abs();
            Some(d <= OTHERS_BAR && a <= OTHERS_BAR)
        },
        |f| {
            let s = &f.step;
            let d = |x: Option<f64>| match (x, s.limit_before) {
                (Some(x), Some(b)) => format!("{:+.2}", x - b),
                _ => "-".into(),
            };
            format!("{} / {}", d(s.limit_during), d(s.limit_after))
        },
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Lengths;

    fn plan() -> Plan {
        Plan::new(
            Lengths {
                calibrate: 0,
                baseline: 10,
                paced: 20,
                rest: 5,
                step: 10,
                warmup: 2,
                own_off: 0,
            },
            &[],
        )
    }

    /// Points of one node whose limit is `f(sec)`.
    fn points(f: impl Fn(usize) -> f64) -> Vec<Point> {
        let p = plan();
        (0..p.total())
            .map(|sec| Point {
                sec,
                phase: p.kind_at(sec).unwrap().name(),
                limit: Some(f(sec)),
                cpus: Some(if sec < 10 { 0.2 } else { 0.5 }),
                elastic_cpus: Some(if sec < 10 { 0.0 } else { 0.3 }),
                periods: 10,
                throttled: u64::from(sec >= 10 && sec % 10 == 0),
                ..Point::default()
            })
            .collect()
    }

    #[test]
    fn a_step_down_and_back_is_timed_from_its_start() {
        // Paced 10..30 (rest 25..30), step 30..40 (during 35..40), back 40..50 (after 45..50).
        let pts = points(|s| match s {
            30 | 31 => 0.6,
            32..40 => 0.3,
            40..43 => 0.35,
            43.. => 0.58,
            _ => 0.6,
        });
        let s = step_figures(&pts, &plan(), true);
        assert!((s.limit_before.unwrap() - 0.6).abs() < 1e-9);
        assert!((s.limit_during.unwrap() - 0.3).abs() < 1e-9);
        assert!((s.limit_after.unwrap() - 0.58).abs() < 1e-9);
        // Half way (0.45) first at second 32: the end of the step's third second.
        assert_eq!(s.moved_within_s, Some(3.0));
        assert_eq!(s.back_within_s, Some(4.0));
        // A node that is not stepped gets its levels, no timing.
        let o = step_figures(&pts, &plan(), false);
        assert_eq!(o.moved_within_s, None);
        assert_eq!(o.limit_during, s.limit_during);
    }

    #[test]
    fn a_limit_that_does_not_move_has_no_time() {
        let pts = points(|_| 0.5);
        assert_eq!(half_way_within(&pts, 30, 40, 0.5, 0.51), None);
        // A move that never gets half way.
        let pts = points(|s| if s >= 38 { 0.3 } else { 0.5 });
        assert_eq!(half_way_within(&pts, 30, 35, 0.5, 0.3), None);
        assert_eq!(half_way_within(&pts, 30, 40, 0.5, 0.3), Some(9.0));
    }

    #[test]
    fn node_figures_take_their_windows() {
        let n = NodeRun {
            name: "node1".into(),
            quota: 0.5,
            points: points(|_| 0.4),
            ..NodeRun::default()
        };
        let f = node_figures(&n, &plan(), false);
        assert!((f.fg_cpus.unwrap() - 0.2).abs() < 1e-9);
        assert!((f.spare.unwrap() - 0.3).abs() < 1e-9);
        assert!((f.elastic_at_rest.unwrap() - 0.3).abs() < 1e-9);
        assert!((f.elastic_to_spare().unwrap() - 1.0).abs() < 1e-9);
        assert!((f.rows_at_rest.unwrap() - 0.3).abs() < 1e-9);
        assert!((f.cpu_at_rest.unwrap() - 0.5).abs() < 1e-9);
        // Scanning 10..50: 40 seconds of 10 periods, throttled at 10, 20, 30, 40.
        assert_eq!((f.throttled_periods, f.periods), (4, 400));
        assert_eq!(f.throttled_baseline, 0);
    }

    #[test]
    fn the_order_allows_ties_only_between_near_spares() {
        let s = |v: &[f64]| v.iter().map(|x| Some(*x)).collect::<Vec<_>>();
        assert_eq!(
            order_matches(&s(&[0.4, 0.24, 0.48]), &s(&[0.3, 0.2, 0.35])),
            Some(true)
        );
        assert_eq!(
            order_matches(&s(&[0.4, 0.24, 0.48]), &s(&[0.36, 0.2, 0.35])),
            Some(false)
        );
        // Spares within the tie may come either way.
        assert_eq!(
            order_matches(&s(&[0.40, 0.41]), &s(&[0.3, 0.2])),
            Some(true)
        );
        assert_eq!(order_matches(&[Some(0.4), None], &s(&[0.3, 0.2])), None);
    }

    fn fig(name: &str, spare: f64, elastic: f64, ratio: f64, stepped: bool) -> NodeFigures {
        NodeFigures {
            name: name.into(),
            quota: 1.0,
            fg_cpus: Some(1.0 - spare),
            spare: Some(spare),
            baseline_p99_us: Some(100.0),
            paced_p99_us: Some(100.0 * ratio),
            elastic_at_rest: Some(elastic),
            throttled_periods: 1,
            periods: 100,
            step: StepFigures {
                node_stepped: stepped,
                limit_before: Some(0.5),
                limit_during: Some(if stepped { 0.3 } else { 0.52 }),
                limit_after: Some(0.49),
                moved_within_s: stepped.then_some(2.0),
                back_within_s: None,
            },
            ..NodeFigures::default()
        }
    }

    #[test]
    fn bars_pass_and_fail_on_their_figures() {
        let figs = vec![
            fig("node1", 0.4, 0.3, 1.2, false),
            fig("node2", 0.2, 0.15, 1.4, false),
            fig("node3", 0.5, 0.4, 1.1, true),
        ];
        let b = bars(&figs, Scenario::Shared);
        assert_eq!(b.len(), 7);
        assert!(
            b.iter().all(|b| b.pass == Some(true)),
            "{:?}",
            b.iter().map(|b| &b.value).collect::<Vec<_>>()
        );
        // One node over each bar fails it.
        let mut bad = figs.clone();
        bad[1].paced_p99_us = Some(160.0);
        bad[0].throttled_periods = 6;
        bad[2].elastic_at_rest = Some(0.2);
        bad[2].step.moved_within_s = Some(4.0);
        bad[2].step.limit_after = Some(0.35);
        bad[0].step.limit_during = Some(0.56);
        let b = bars(&bad, Scenario::Shared);
        let fails: Vec<bool> = b.iter().map(|b| b.pass == Some(false)).collect();
        assert_eq!(
            fails,
            [true, true, true, true, true, true, true],
            "{:?}",
            b.iter().map(|b| &b.value).collect::<Vec<_>>()
        );
        // A stepped node whose limit did not move fails, with why.
        let mut still = figs;
        still[2].step.moved_within_s = None;
        let b = bars(&still, Scenario::Shared);
        assert_eq!(b[4].pass, Some(false));
        assert!(b[4].value.contains("did not move"), "{}", b[4].value);
        assert_eq!(b[5].pass, Some(false), "no way back without a move");
        // One node alone has no others to hold still.
        let alone = bars(&[fig("node1", 0.4, 0.3, 1.2, true)], Scenario::Shared);
        assert_eq!(alone[6].pass, None);
    }

    #[test]
    fn shared_cores_judge_the_own_scan_ratio_and_pinned_nodes_their_baseline() {
        // node1 at 2x its baseline, but its own scan costs it 1.25x: others' scans took the rest.
        let mut a = fig("node1", 0.4, 0.26, 2.0, false);
        a.own_off_p99_us = Some(160.0);
        let b = fig("node2", 0.2, 0.15, 1.2, true);
        assert_eq!(a.own_scan_ratio(), Some(1.25));
        assert_eq!(a.judged_ratio(Scenario::Shared), Some(1.25));
        assert_eq!(a.judged_ratio(Scenario::Pinned), Some(2.0));
        assert_eq!(
            b.judged_ratio(Scenario::Shared),
            Some(1.2),
            "no own-scan phase"
        );
        let figs = vec![a, b];
        let shared = bars(&figs, Scenario::Shared);
        assert_eq!(shared[0].pass, Some(true), "{}", shared[0].value);
        assert!(shared[0].what.contains("own-scan"), "{}", shared[0].what);
        // 0.26 of 0.4 is 0.65 of the spare: over the shared cores' bar, under the pinned one.
        assert_eq!(shared[3].pass, Some(true), "{}", shared[3].value);
        let pinned = bars(&figs, Scenario::Pinned);
        assert_eq!(pinned[0].pass, Some(false), "{}", pinned[0].value);
        assert_eq!(pinned[3].pass, Some(false), "{}", pinned[3].value);
        assert!(pinned[3].what.contains("0.7x"), "{}", pinned[3].what);
    }

    #[test]
    fn what_runs_outside_the_fleet_is_the_hosts_busy_cpus_less_the_fleets() {
        let p = plan();
        let host = (0..p.total())
            .map(|sec| HostPoint {
                sec,
                busy_cpus: Some(1.2),
                parent_cpus: Some(0.1),
            })
            .collect();
        let node = NodeRun {
            name: "node1".into(),
            points: points(|_| 0.4),
            ..NodeRun::default()
        };
        let mut run = Run {
            plan: p,
            nodes: vec![node],
            host,
            step_node: 0,
            step_factor: 1.5,
            cpus_per_node: Some(1),
            machine: Machine::default(),
            interrupted: false,
            notes: Vec::new(),
        };
        // At rest the node uses 0.5: 1.2 - 0.1 - 0.5.
        assert!((run.outside_at_rest().unwrap() - 0.6).abs() < 1e-9);
        assert_eq!(run.scenario(), Scenario::Pinned);
        run.host.clear();
        assert_eq!(run.outside_at_rest(), None);
    }
}
