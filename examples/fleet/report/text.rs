//! The terminal summary: a row per node, the bars, and what the machine was.

use super::{bars, f2, NodeFigures, Run};
use elastic_cpu_examples::latency::fmt_us;
use elastic_cpu_examples::report::text::TextTable;
use std::fmt::Write as _;

const COLUMNS: &[(&str, usize)] = &[
    ("node", 6),
    ("quota", 5),
    ("fg CPU", 6),
    ("spare", 5),
    ("base p99", 8),
    ("paced p99", 9),
    ("ratio", 5),
    ("own", 5),
    ("thr %", 5),
    ("brk %", 5),
    ("limit", 5),
    ("elastic", 7),
    ("rows", 5),
    ("ledger", 6),
    ("/spare", 6),
    ("step: before>during>after", 25),
    ("moved", 5),
];

/// The cells of one node's row.
pub fn row(f: &NodeFigures) -> Vec<String> {
    let s = &f.step;
    vec![
        f.name.clone(),
        format!("{:.2}", f.quota),
        f2(f.fg_cpus),
        f2(f.spare),
        fmt_us(f.baseline_p99_us),
        fmt_us(f.paced_p99_us),
        f2(f.p99_ratio()),
        f2(f.own_scan_ratio()),
        f.throttled_share()
            .map_or("-".into(), |x| format!("{:.1}", x * 100.0)),
        f.quota_braked_at_rest
            .map_or("-".into(), |x| format!("{:.1}", x * 100.0)),
        f2(f.limit_at_rest),
        f2(f.elastic_at_rest),
        f2(f.rows_at_rest),
        f2(f.ledger_at_rest),
        f2(f.elastic_to_spare()),
        format!(
            "{}{} > {} > {}",
            if s.node_stepped { "*" } else { "" },
            f2(s.limit_before),
            f2(s.limit_during),
            f2(s.limit_after)
        ),
        match (s.node_stepped, s.moved_within_s) {
            (false, _) => "".into(),
            (true, Some(t)) => format!("{t:.0}s"),
            (true, None) => "no".into(),
        },
    ]
}

impl Run {
    /// The summary printed at the end.
    pub fn summary_text(&self) -> String {
        let figs = self.figures();
        let t = TextTable::new(COLUMNS);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "fleet: {} nodes {} (quotas {:.2} CPUs together), the step x{} on {}, {}",
            self.nodes.len(),
            match self.cpus_per_node {
                None => format!("sharing {} cores", self.machine.cpus),
                Some(n) => format!("on {n} CPU(s) each of {}", self.machine.cpus),
            },
            self.nodes.iter().map(|n| n.quota).sum::<f64>(),
            self.step_factor,
            self.nodes
                .get(self.step_node)
                .map_or("-", |n| n.name.as_str()),
            match self.machine.slice_ms {
                Some(ms) =>
                    format!("the library's slice set to {ms} ms, every other setting its default"),
                None => "every library setting its default".into(),
            }
        );
        let _ = writeln!(s, "{}", t.header());
        for f in &figs {
            let _ = writeln!(s, "{}", t.row(&row(f)));
        }
        let _ = writeln!(
            s,
            "fg CPU: the node's CPUs in the baseline; spare = quota - fg CPU; p99s without requests \
             in flight across a machine pause; paced p99, limit and elastic CPUs at rest: the paced \
             phase's last {} s; own: paced p99 over the p99 with its own scan off and the others' \
             on (its own-scan phase); elastic: the node's CPUs at rest over its baseline, rows: the scan's \
             rows over the rows a CPU-second encodes (alone, at best), ledger: the elastic CPU the \
             library's ledger charged; thr %: throttled periods while the scan ran; brk %: time at rest the quota brake held elastic work back; limit: the share of the \
             scan's class (the idle class on the idle pool) as its bucket applies it (held to the \
             quota's headroom), of the node's quota; * the stepped node",
            self.plan.lengths.rest
        );
        for n in &self.nodes {
            let _ = writeln!(
                s,
                "  {} (cgroup {}, CPUs {}): {:.0} req/s{}, {} CPUs for the library ({}); the scan on {}; paced p99 over the whole phase {}, own scan off {}",
                n.name,
                n.cgroup,
                crate::cpus::fmt_cpus(&n.cpus),
                n.rate,
                match (n.fg_share, n.cpu_per_request_us) {
                    (Some(sh), Some(c)) =>
                        format!(" ({sh} of its quota at {c:.0} us of node CPU per request)"),
                    _ => String::new(),
                },
                f2(n.lib_cpus),
                n.lib_cpus_source,
                n.placement,
                fmt_us(n.paced_whole.p99_us),
                fmt_us(n.own_off.p99_us),
            );
        }
        let rest = self.plan.rest();
        let _ = writeln!(
            s,
            "host at rest: {} of {} CPUs busy, {} of them the parent (load generators, watchdog), \
             {} outside the fleet (other processes)",
            f2(self.host_mean(&rest, |h| h.busy_cpus)),
            self.machine.cpus,
            f2(self.host_mean(&rest, |h| h.parent_cpus)),
            f2(self.outside_at_rest()),
        );
        let _ = writeln!(s, "\ndone when:");
        for b in bars(&figs, self.scenario()) {
            let verdict = match b.pass {
                Some(true) => "PASS",
                Some(false) => "FAIL",
                None => "n/a ",
            };
            let _ = writeln!(s, "  {verdict}  {}: {}", b.what, b.value);
        }
        s
    }
}
