//! The demo's SVG: how its timeline charts look (phase colours, style), and the at-a-glance bar
//! panels.

use super::{PhaseResult, Point, Report};
use crate::args::{Env, Kind};
use elastic_cpu_examples::latency::fmt_us;
use elastic_cpu_examples::report::html::esc;
use elastic_cpu_examples::report::svg::{Span, Style, Timeline};
use std::fmt::Write as _;

const STYLE: Style = Style {
    height: 190.0,
    step_stroke: "#555",
    legend_slot: 140.0,
    log_thirds: true,
    short_run_tick_secs: 10.0,
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
        use elastic_cpu_examples::report::svg::{Axis, Line};
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
        Timeline::new(&STYLE, [span], &shifted).chart(
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
        Timeline::new(&STYLE, spans, &self.timeline)
    }

    /// Two bar panels, one row per phase: foreground p99 (log) and elastic rows/s.
    pub(super) fn summary_svg(&self, env: Env) -> String {
        let ran: Vec<&PhaseResult> = self
            .phases
            .iter()
            .filter(|p| p.ran() && p.env == env)
            .collect();
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
        let slowest = ran
            .iter()
            .filter_map(|p| p.fg.p99_us)
            .fold(1000.0f64, f64::max);
        // A log scale from 10 us to the decade above the slowest phase.
        let (lat_min, lat_max) = (10f64, 10f64.powf(slowest.log10().ceil()));
        let lx = |v: f64| -> f64 {
            let f = ((v.max(lat_min).ln() - lat_min.ln()) / (lat_max.ln() - lat_min.ln()))
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
        while v <= lat_max * 1.0001 {
            let x = lx(v);
            let _ = write!(
                s,
                "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{top}\" y2=\"{:.1}\" stroke=\"#dde\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\" font-size=\"10\">{}</text>",
                height - 22.0,
                height - 8.0,
                fmt_us(Some(v))
            );
            v *= 10.0;
        }
        let b99 = self.find(env, "baseline").and_then(|b| b.fg.p99_us);
        for (i, p) in ran.iter().enumerate() {
            let y = top + row_h * i as f64;
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                label_w - 8.0,
                y + 15.0,
                esc(&p.name)
            );
            if let Some(v) = p.fg.p99_us {
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
                    fmt_us(Some(v))
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
        if let Some(u) = self.find(env, "unthrottled").map(|u| u.rows_per_sec) {
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
}
