//! The demo's charts: its phase colours, the timeline, the classes chart, and the at-a-glance
//! bar panels.

use super::{PhaseResult, Point, Report};
use crate::args::{Env, Kind};
use elastic_cpu_examples::latency::fmt_us;
use elastic_cpu_examples::report::plot::{
    bar_panels, Axis, BarPanel, BarRow, Line, RefLine, Span, Timeline,
};

const PHASE_COLORS: [&str; 10] = [
    "#e8eef7", "#fbe9e7", "#fff4d6", "#eef6e8", "#f1e8f7", "#e4f4f4", "#f7efe4", "#eceff1",
    "#fce4ec", "#dff2df",
];

/// The shading of a phase of this kind.
fn fill(kind: Kind) -> &'static str {
    match kind {
        Kind::Baseline => PHASE_COLORS[0],
        Kind::Unthrottled => PHASE_COLORS[1],
        Kind::Static => PHASE_COLORS[2],
        Kind::Yield => PHASE_COLORS[6],
        Kind::Dedicated => PHASE_COLORS[5],
        Kind::IdleRuntime => PHASE_COLORS[1],
        Kind::Paced | Kind::PacedIdle | Kind::Classes => PHASE_COLORS[3],
        Kind::Default | Kind::Culprit => PHASE_COLORS[9],
        Kind::Low => PHASE_COLORS[4],
        Kind::High => PHASE_COLORS[8],
        Kind::Step => PHASE_COLORS[7],
    }
}

impl Report {
    /// The `classes` phase's chart: each class's CPUs per sample over the phase alone (its
    /// clock from the phase's start), its first class's stop a dotted line.
    pub(super) fn class_chart(&self, p: &PhaseResult) -> String {
        let from = p.start_ms;
        let shifted: Vec<crate::classes::ClassSample> = (p.class_samples.iter())
            .map(|c| crate::classes::ClassSample {
                t_ms: c.t_ms.saturating_sub(from),
                ..c.clone()
            })
            .collect();
        let steps: Vec<u64> = (p.first_class_stop_ms.iter())
            .map(|ms| ms.saturating_sub(from))
            .collect();
        let span = Span::new(
            0..p.end_ms.saturating_sub(from),
            &steps,
            fill(p.kind),
            p.label(),
        );
        let cpus = shifted.last().map_or(1.0, |c| c.cpus);
        Timeline::new([span], &shifted).chart(
            "CPUs each class ran (per sample; dotted: backup stops)",
            &Axis::linear(cpus),
            &[
                Line::new("#1f5fbf", "backup (3)", |c| c.cpus_used[0]),
                Line::new("#2a7", "export (1)", |c| c.cpus_used[1]),
                Line::new("#c60", "tenant-b (1, cap 0.1)", |c| c.cpus_used[2]),
            ],
            &[],
        )
    }

    /// The timeline to chart, every phase that ran shaded.
    pub(super) fn timeline(&self) -> Timeline<'_, Point> {
        let spans = (self.segments.iter().filter(|p| p.skipped.is_none()))
            .map(|p| Span::new(p.start_ms..p.end_ms, &p.step_ms, fill(p.kind), p.label()));
        Timeline::new(spans, &self.timeline)
    }

    /// Two bar panels, one row per phase: foreground p99 (log; green within 1.5x the baseline,
    /// red from 3x) and elastic rows/s.
    pub(super) fn summary_svg(&self, env: Env) -> String {
        let ran: Vec<&PhaseResult> = (self.phases.iter())
            .filter(|p| p.ran() && p.env == env)
            .collect();
        if ran.is_empty() {
            return String::new();
        }
        let b99 = self.find(env, "baseline").and_then(|b| b.fg.p99_us);
        let latency = BarPanel {
            title: "Foreground p99 (log scale; lower is better)".into(),
            axis: Axis::latency(ran.iter().filter_map(|p| p.fg.p99_us)),
            rows: (ran.iter())
                .map(|p| BarRow {
                    label: p.name.clone(),
                    value: p.fg.p99_us,
                    color: match (p.fg.p99_us, b99) {
                        (Some(v), Some(b)) if v <= 1.5 * b => "#4caf50",
                        (Some(v), Some(b)) if v >= 3.0 * b => "#e53935",
                        (_, Some(_)) => "#fb8c00",
                        (_, None) => "#1f5fbf",
                    },
                    text: p.fg.p99_us.map_or(String::new(), |v| fmt_us(Some(v))),
                })
                .collect(),
            refs: b99.map_or(Vec::new(), |b| {
                vec![
                    RefLine::new(b, "#2a7", "baseline".into()),
                    RefLine::new(1.5 * b, "#c60", "1.5x baseline".into()),
                    RefLine::new(3.0 * b, "#c33", "3x baseline".into()),
                ]
            }),
        };
        let unthrottled = self.find(env, "unthrottled").map(|u| u.rows_per_sec);
        let rows = BarPanel {
            title: "Elastic rows/s (higher is better)".into(),
            axis: Axis::linear(ran.iter().map(|p| p.rows_per_sec).fold(1.0, f64::max) * 1.1),
            rows: (ran.iter())
                .map(|p| {
                    let elastic = p.kind != Kind::Baseline;
                    BarRow {
                        label: p.name.clone(),
                        value: elastic.then_some(p.rows_per_sec),
                        color: "#2e7d32",
                        text: if elastic {
                            format!(
                                "{:.2}M ({:.0}% CPU)",
                                p.rows_per_sec / 1e6,
                                p.cpu_share * 100.0
                            )
                        } else {
                            String::new()
                        },
                    }
                })
                .collect(),
            refs: unthrottled.map_or(Vec::new(), |u| {
                vec![
                    RefLine::new(u, "#555", "unthrottled".into()),
                    RefLine::new(0.6 * u, "#c60", "0.6x unthrottled".into()),
                ]
            }),
        };
        bar_panels(&[latency, rows])
    }
}
