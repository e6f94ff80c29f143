//! The JSON report: `nodes` with the figures the issue names (and a few more beside them),
//! the bars, the phases, the run, the timeline per node, and the host's.

use super::{bars, NodeFigures, Run, Scenario};
use elastic_cpu_examples::report::json::{opt, to_string, Num};
use elastic_cpu_examples::report::Bar;
use serde::Serialize;

#[derive(Serialize)]
struct Step {
    node_stepped: bool,
    limit_before: Option<Num>,
    limit_during: Option<Num>,
    limit_after: Option<Num>,
    moved_within_s: Option<Num>,
    back_within_s: Option<Num>,
}

#[derive(Serialize)]
struct Node {
    name: String,
    quota_cpus: Num,
    fg_cpus: Option<Num>,
    baseline_p99_us: Option<Num>,
    paced_p99_us: Option<Num>,
    limit_at_rest: Option<Num>,
    elastic_cpus_at_rest: Option<Num>,
    throttled_periods: u64,
    step: Step,
    // Beside the issue's figures.
    spare_cpus: Option<Num>,
    elastic_to_spare: Option<Num>,
    elastic_rows_cpus_at_rest: Option<Num>,
    elastic_ledger_cpus_at_rest: Option<Num>,
    cpus_at_rest: Option<Num>,
    rows_per_cpu_s: Option<Num>,
    p99_ratio: Option<Num>,
    /// p99 with its own scan off and the others' on, and the paced p99 over it.
    own_off_p99_us: Option<Num>,
    own_scan_ratio: Option<Num>,
    paced_whole_p99_us: Option<Num>,
    share_at_rest: Option<Num>,
    periods: u64,
    throttled_share: Option<Num>,
    quota_braked_share_at_rest: Option<Num>,
    throttled_periods_baseline: u64,
    fg_share: Option<Num>,
    rate_rps: Num,
    cpu_per_request_us: Option<Num>,
    lib_cpus: Option<Num>,
    lib_cpus_source: String,
    /// The CPUs it ran on.
    cpus: Vec<usize>,
    placement: String,
    requests_left_out_for_pauses: u64,
    requests_lost: u64,
}

#[derive(Serialize)]
struct Phase {
    name: &'static str,
    from_s: usize,
    to_s: usize,
}

#[derive(Serialize)]
struct Machine<'a> {
    cpus: usize,
    /// `shared` (every node on every core) or `pinned` (`cpus_per_node` each).
    scenario: &'static str,
    cpus_per_node: Option<usize>,
    quota_sum_cpus: Num,
    workers: usize,
    work_us: Num,
    conns: usize,
    client_priority: &'a str,
    pause_watchdog: bool,
    step_node: String,
    step_factor: Num,
    /// The library's slice where `--slice-ms` set one (null: its default).
    slice_ms: Option<u64>,
    /// Means over the paced phase at rest.
    host_busy_cpus_at_rest: Option<Num>,
    parent_cpus_at_rest: Option<Num>,
    /// Busy less the parent and the nodes: other processes.
    outside_cpus_at_rest: Option<Num>,
    command: &'a str,
}

#[derive(Serialize)]
struct TimelinePoint {
    sec: usize,
    phase: &'static str,
    limit: Option<Num>,
    share: Option<Num>,
    elastic_cpus: Option<Num>,
    ledger_cpus: Option<Num>,
    granted_cpus: Option<Num>,
    over_limit_cpus: Option<Num>,
    forgiven_cpus: Option<Num>,
    /// The share of the second the quota brake held elastic work back.
    quota_braked: Option<Num>,
    rate_cpus: Option<Num>,
    cpus: Option<Num>,
    fg_p99_us: Option<Num>,
    fg_rps: Num,
    periods: u64,
    throttled: u64,
    rows_per_s: Num,
    signal_us: Option<Num>,
    target_us: Option<Num>,
    source: String,
}

#[derive(Serialize)]
struct HostSecond {
    sec: usize,
    busy_cpus: Option<Num>,
    parent_cpus: Option<Num>,
}

#[derive(Serialize)]
struct Doc<'a> {
    nodes: Vec<Node>,
    bars: Vec<Bar>,
    phases: Vec<Phase>,
    machine: Machine<'a>,
    interrupted: bool,
    notes: &'a [String],
    /// Per node, one point a second.
    timeline: Vec<(String, Vec<TimelinePoint>)>,
    /// The host, one point a second: its busy CPUs and the parent's.
    host: Vec<HostSecond>,
}

fn node(f: &NodeFigures, run: &Run, i: usize) -> Node {
    let n = &run.nodes[i];
    Node {
        name: f.name.clone(),
        quota_cpus: Num(f.quota),
        fg_cpus: opt(f.fg_cpus),
        baseline_p99_us: opt(f.baseline_p99_us),
        paced_p99_us: opt(f.paced_p99_us),
        limit_at_rest: opt(f.limit_at_rest),
        elastic_cpus_at_rest: opt(f.elastic_at_rest),
        throttled_periods: f.throttled_periods,
        step: Step {
            node_stepped: f.step.node_stepped,
            limit_before: opt(f.step.limit_before),
            limit_during: opt(f.step.limit_during),
            limit_after: opt(f.step.limit_after),
            moved_within_s: opt(f.step.moved_within_s),
            back_within_s: opt(f.step.back_within_s),
        },
        spare_cpus: opt(f.spare),
        elastic_to_spare: opt(f.elastic_to_spare()),
        elastic_rows_cpus_at_rest: opt(f.rows_at_rest),
        elastic_ledger_cpus_at_rest: opt(f.ledger_at_rest),
        cpus_at_rest: opt(f.cpu_at_rest),
        rows_per_cpu_s: opt(n.rows_per_cpu_s),
        p99_ratio: opt(f.p99_ratio()),
        own_off_p99_us: opt(f.own_off_p99_us),
        own_scan_ratio: opt(f.own_scan_ratio()),
        paced_whole_p99_us: opt(f.paced_whole_p99_us),
        share_at_rest: opt(f.share_at_rest),
        periods: f.periods,
        throttled_share: opt(f.throttled_share()),
        quota_braked_share_at_rest: opt(f.quota_braked_at_rest),
        throttled_periods_baseline: f.throttled_baseline,
        fg_share: opt(n.fg_share),
        rate_rps: Num(n.rate),
        cpu_per_request_us: opt(n.cpu_per_request_us),
        lib_cpus: opt(n.lib_cpus),
        lib_cpus_source: n.lib_cpus_source.clone(),
        cpus: n.cpus.clone(),
        placement: n.placement.clone(),
        requests_left_out_for_pauses: n.left_out,
        requests_lost: n.lost,
    }
}

impl Run {
    /// The JSON document.
    pub fn to_json(&self) -> String {
        let figs = self.figures();
        let rest = self.plan.rest();
        let doc = Doc {
            nodes: figs
                .iter()
                .enumerate()
                .map(|(i, f)| node(f, self, i))
                .collect(),
            bars: bars(&figs, self.scenario()),
            phases: self
                .plan
                .phases
                .iter()
                .map(|p| Phase {
                    name: p.kind.name(),
                    from_s: p.secs.start,
                    to_s: p.secs.end,
                })
                .collect(),
            machine: Machine {
                cpus: self.machine.cpus,
                scenario: match self.scenario() {
                    Scenario::Shared => "shared",
                    Scenario::Pinned => "pinned",
                },
                cpus_per_node: self.cpus_per_node,
                quota_sum_cpus: Num(self.nodes.iter().map(|n| n.quota).sum()),
                workers: self.machine.workers,
                work_us: Num(self.machine.work_us),
                conns: self.machine.conns,
                client_priority: self.machine.client_priority,
                pause_watchdog: self.machine.pause_watchdog,
                step_node: self
                    .nodes
                    .get(self.step_node)
                    .map_or_else(String::new, |n| n.name.clone()),
                step_factor: Num(self.step_factor),
                slice_ms: self.machine.slice_ms,
                host_busy_cpus_at_rest: opt(self.host_mean(&rest, |h| h.busy_cpus)),
                parent_cpus_at_rest: opt(self.host_mean(&rest, |h| h.parent_cpus)),
                outside_cpus_at_rest: opt(self.outside_at_rest()),
                command: &self.machine.command,
            },
            interrupted: self.interrupted,
            notes: &self.notes,
            host: self
                .host
                .iter()
                .map(|h| HostSecond {
                    sec: h.sec,
                    busy_cpus: opt(h.busy_cpus),
                    parent_cpus: opt(h.parent_cpus),
                })
                .collect(),
            timeline: self
                .nodes
                .iter()
                .map(|n| {
                    let pts = n
                        .points
                        .iter()
                        .map(|p| TimelinePoint {
                            sec: p.sec,
                            phase: p.phase,
                            limit: opt(p.limit),
                            share: opt(p.share),
                            elastic_cpus: opt(p.elastic_cpus),
                            ledger_cpus: opt(p.ledger_cpus),
                            granted_cpus: opt(p.granted_cpus),
                            over_limit_cpus: opt(p.over_limit_cpus),
                            forgiven_cpus: opt(p.forgiven_cpus),
                            quota_braked: opt(p.quota_braked),
                            rate_cpus: opt(p.rate_cpus),
                            cpus: opt(p.cpus),
                            fg_p99_us: opt(p.fg_p99_us),
                            fg_rps: Num(p.fg_rps),
                            periods: p.periods,
                            throttled: p.throttled,
                            rows_per_s: Num(p.rows_per_s),
                            signal_us: opt(p.signal_us),
                            target_us: opt(p.target_us),
                            source: p.source.clone(),
                        })
                        .collect();
                    (n.name.clone(), pts)
                })
                .collect(),
        };
        to_string(&doc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Lengths, Plan};
    use crate::report::{Machine as M, NodeRun};

    #[test]
    fn every_node_has_the_issues_keys() {
        let run = Run {
            plan: Plan::new(
                Lengths {
                    calibrate: 0,
                    baseline: 6,
                    paced: 10,
                    rest: 4,
                    step: 4,
                    warmup: 2,
                    own_off: 0,
                },
                &[],
            ),
            nodes: vec![
                NodeRun {
                    name: "node1".into(),
                    quota: 0.5,
                    ..NodeRun::default()
                },
                NodeRun {
                    name: "node2".into(),
                    quota: 0.8,
                    ..NodeRun::default()
                },
            ],
            host: Vec::new(),
            step_node: 1,
            step_factor: 1.5,
            cpus_per_node: None,
            machine: M::default(),
            interrupted: false,
            notes: Vec::new(),
        };
        let v: serde_json::Value = serde_json::from_str(&run.to_json()).unwrap();
        let nodes = v["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 2);
        for n in nodes {
            for key in [
                "name",
                "quota_cpus",
                "fg_cpus",
                "baseline_p99_us",
                "paced_p99_us",
                "limit_at_rest",
                "elastic_cpus_at_rest",
                "throttled_periods",
                "own_off_p99_us",
                "own_scan_ratio",
            ] {
                assert!(n.get(key).is_some(), "{key} missing in {n}");
            }
            for key in [
                "node_stepped",
                "limit_before",
                "limit_during",
                "limit_after",
                "moved_within_s",
            ] {
                assert!(n["step"].get(key).is_some(), "step.{key} missing in {n}");
            }
        }
        assert_eq!(nodes[1]["step"]["node_stepped"], true);
        assert_eq!(nodes[0]["step"]["node_stepped"], false);
        assert_eq!(nodes[1]["quota_cpus"], 0.8);
    }
}
