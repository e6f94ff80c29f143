//! The HTML report: what ran, the table per node, the bars, and charts over time with a line
//! per node (limit, elastic CPU, the node's CPU, foreground p99, throttled periods).

use super::text::row;
use super::{bars, f2, Point, Run};
use crate::plan::Kind;
use elastic_cpu_examples::report::html::{self, esc, Table};
use elastic_cpu_examples::report::plot::{Axis, Line, RefLine, Sample, Span, Timeline};
use std::fmt::Write as _;

/// A colour per node (the charts draw at most this many).
const NODE_COLORS: [&str; crate::args::MAX_NODES] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
];

/// A series' value for node `i`, one fn per node (the chart takes plain fns).
const NODE: [fn(&Multi) -> Option<f64>; crate::args::MAX_NODES] = [
    |m| m.v[0],
    |m| m.v[1],
    |m| m.v[2],
    |m| m.v[3],
    |m| m.v[4],
    |m| m.v[5],
    |m| m.v[6],
    |m| m.v[7],
];

/// One second of one figure, every node's value side by side.
struct Multi {
    t_ms: u64,
    phase: &'static str,
    v: [Option<f64>; crate::args::MAX_NODES],
}

impl Sample for Multi {
    fn t_ms(&self) -> u64 {
        self.t_ms
    }
    fn phase(&self) -> &str {
        self.phase
    }
}

fn fill(kind: Kind) -> &'static str {
    match kind {
        Kind::Calibrate => "#eceff1",
        Kind::Baseline => "#e8eef7",
        Kind::Paced => "#eef6e8",
        Kind::Step => "#fff4d6",
        Kind::Back => "#f1e8f7",
        Kind::OwnOff(k) if k % 2 == 0 => "#f7ece8",
        Kind::OwnOff(_) => "#f2e4df",
    }
}

impl Run {
    /// One figure over the run, every node's side by side (a point at the end of its second).
    fn multi(&self, get: fn(&Point) -> Option<f64>) -> Vec<Multi> {
        (0..self.plan.total())
            .map(|sec| {
                let mut v = [None; crate::args::MAX_NODES];
                for (slot, n) in v.iter_mut().zip(&self.nodes) {
                    *slot = n.points.iter().find(|p| p.sec == sec).and_then(get);
                }
                Multi {
                    t_ms: (sec as u64 + 1) * 1000,
                    phase: self.plan.kind_at(sec).map_or("", Kind::name),
                    v,
                }
            })
            .collect()
    }

    fn chart(
        &self,
        title: &str,
        get: fn(&Point) -> Option<f64>,
        axis: Axis,
        refs: &[RefLine],
    ) -> String {
        let samples = self.multi(get);
        let step_ms = [self.plan.span(Kind::Step).start as u64 * 1000];
        let spans = self.plan.phases.iter().map(|p| {
            let steps: &[u64] = if p.kind == Kind::Step { &step_ms } else { &[] };
            Span::new(
                p.secs.start as u64 * 1000..p.secs.end as u64 * 1000,
                steps,
                fill(p.kind),
                p.kind.name(),
            )
        });
        let tl = Timeline::new(spans, &samples);
        let lines: Vec<Line<Multi>> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| Line::new(NODE_COLORS[i], &n.name, NODE[i]))
            .collect();
        tl.chart(title, &axis, &lines, refs)
    }

    /// The page.
    pub fn to_html(&self) -> String {
        let figs = self.figures();
        let m = &self.machine;
        let mut h = html::head(
            "elastic-cpu fleet",
            "elastic-cpu: nodes that differ find their own elastic CPU levels",
            self.interrupted,
        );
        let _ = write!(
            h,
            "<div class=\"note\">{} node processes on one machine of {} CPUs, each in a cgroup of its own with a CPU quota \
             ({:.2} CPUs together), each the demo's loopback service ({} workers, {} us of CPU per request, {} connections) \
             on a runtime built through the library with every setting at its default{}, plus a paced scan (2 tasks, the quick \
             start's stream). One open-loop load generator per node runs in the parent, outside the quotas, at {} priority. \
             {} The host's busy CPUs at rest: {}, the parent's: {}, outside the fleet (other processes): {}. Machine pauses (the whole VM descheduled) are {}.</div>",
            self.nodes.len(),
            m.cpus,
            self.nodes.iter().map(|n| n.quota).sum::<f64>(),
            m.workers,
            m.work_us,
            m.conns,
            m.slice_ms
                .map_or(String::new(), |ms| format!(" but the slice ({ms} ms)")),
            m.client_priority,
            match self.cpus_per_node {
                None => "The nodes share the machine's cores: what one node's quota lets it run, the others' threads wait for; \
                         each node's p99 is judged against its own-scan phase (its scan off, the others' on).".to_string(),
                Some(n) => format!(
                    "Each node and its load generator run on {n} CPU(s) of their own ({}); each node's p99 is judged \
                     against its baseline.",
                    self.nodes
                        .iter()
                        .map(|x| format!("{} on {}", x.name, crate::cpus::fmt_cpus(&x.cpus)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
            f2(self.host_mean(&self.plan.rest(), |x| x.busy_cpus)),
            f2(self.host_mean(&self.plan.rest(), |x| x.parent_cpus)),
            f2(self.outside_at_rest()),
            if m.pause_watchdog {
                "left out of the p99s (requests in flight across one)"
            } else {
                "in the figures (no real-time watchdog)"
            },
        );
        h.push_str("<h2>Per node</h2>");
        let mut t = Table::new(
            "node|quota|fg CPU|spare|baseline p99|paced p99|ratio|own-scan ratio|throttled %|quota brake %|\
             limit at rest|elastic CPUs at rest|rows|ledger|/ spare|\
             step: limit before &gt; during &gt; after|moved within"
                .split('|'),
        );
        for f in &figs {
            t.row(row(f).iter().map(|cell| esc(cell)));
        }
        h.push_str(&t.finish());
        let _ = write!(
            h,
            "<div class=\"note\">fg CPU: the node's CPUs in the baseline (no scan); spare = quota - fg CPU; \
             paced p99, limit and elastic CPUs at rest: the paced phase's last {} s; ratio: paced p99 over baseline p99; \
             own-scan ratio: paced p99 over the p99 in the node's own-scan phase (its scan off, the others' on); elastic CPUs: the node's CPUs at rest over \
             its baseline; rows: the scan's rows over the rows a CPU-second encodes (measured by the node alone, at its best, \
             before its quota bound: a lower bound); ledger: the elastic CPU the library's ledger charged; throttled %: of the CFS periods while \
             the scan ran; quota brake %: of the time at rest the library's quota brake held elastic work back; limit: the share of the scan's class (the idle class on the idle pool) as its bucket applies it (held to the quota's headroom), of the \
             node's quota; * the stepped node (foreground x{}), moved within: seconds until its limit was half way to \
             its new level.</div>",
            self.plan.lengths.rest, self.step_factor
        );
        h.push_str(&html::bars_table(&[(
            "this run".into(),
            bars(&figs, self.scenario()),
        )]));

        h.push_str("<h2>Over time</h2>");
        let lim_max = self
            .nodes
            .iter()
            .flat_map(|n| n.points.iter().filter_map(|p| p.limit))
            .fold(0.5f64, f64::max);
        h.push_str(&self.chart(
            "limit per node (the share as applied, of the node's quota)",
            |p| p.limit,
            Axis::linear((lim_max * 1.1).min(1.0)),
            &[],
        ));
        let spare_refs: Vec<RefLine> = figs
            .iter()
            .enumerate()
            .filter_map(|(i, f)| {
                Some(RefLine::new(
                    f.spare?,
                    NODE_COLORS[i],
                    format!("{} spare {:.2}", f.name, f.spare?),
                ))
            })
            .collect();
        let cpu_max = self
            .nodes
            .iter()
            .flat_map(|n| n.points.iter().filter_map(|p| p.elastic_cpus))
            .chain(figs.iter().filter_map(|f| f.spare))
            .fold(0.2f64, f64::max);
        h.push_str(&self.chart(
            "elastic CPUs per node: the scan's rows over its rows per CPU-second (dashed: the spare quota)",
            |p| p.elastic_cpus,
            Axis::linear(cpu_max * 1.1),
            &spare_refs,
        ));
        let quota_refs: Vec<RefLine> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                RefLine::new(
                    n.quota,
                    NODE_COLORS[i],
                    format!("{} quota {}", n.name, n.quota),
                )
            })
            .collect();
        let node_max = self
            .nodes
            .iter()
            .flat_map(|n| n.points.iter().filter_map(|p| p.cpus).chain([n.quota]))
            .fold(0.2f64, f64::max);
        h.push_str(&self.chart(
            "CPUs each node process used (dashed: its quota)",
            |p| p.cpus,
            Axis::linear(node_max * 1.1),
            &quota_refs,
        ));
        h.push_str(
            &self.chart(
                "foreground p99 per node, each second (load generator)",
                |p| p.fg_p99_us,
                Axis::latency(
                    self.nodes
                        .iter()
                        .flat_map(|n| n.points.iter().filter_map(|p| p.fg_p99_us)),
                ),
                &[],
            ),
        );
        let thr_max = self
            .nodes
            .iter()
            .flat_map(|n| n.points.iter().filter_map(|p| p.throttled_share()))
            .fold(0.1f64, f64::max);
        h.push_str(&self.chart(
            "throttled periods per node, % of the second's CFS periods",
            |p| p.throttled_share().map(|s| s * 100.0),
            Axis::linear(thr_max * 110.0),
            &[RefLine::new(5.0, "#c60", "5 %".into())],
        ));
        for n in &self.notes {
            let _ = write!(h, "<div class=\"note\">{}</div>", esc(n));
        }
        h.push_str(&html::foot(&m.command));
        h
    }
}
