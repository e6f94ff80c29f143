//! The SVG plots of the HTML report, written by hand: the timeline panels (phases shaded, one
//! polyline per phase and series, reference lines) and the at-a-glance bar panels.

use super::{PhaseResult, Point, Report};
use crate::args::{Env, Kind};
use crate::util::fmt_us;
use std::fmt::Write as _;

pub(super) fn esc(s: &str) -> String {
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
        Kind::IdleRuntime => PHASE_COLORS[1],
        Kind::Paced | Kind::PacedIdle => PHASE_COLORS[3],
        Kind::Low => PHASE_COLORS[4],
        Kind::High => PHASE_COLORS[8],
        Kind::Step => PHASE_COLORS[7],
    }
}

pub(super) struct Axis {
    pub t_max: f64,
    pub y_min: f64,
    pub y_max: f64,
    pub log: bool,
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
                    out.push((x, fmt_us(Some(x))));
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

pub(super) struct Line<'a> {
    pub color: &'a str,
    pub label: &'a str,
    pub get: &'a dyn Fn(&Point) -> Option<f64>,
}

impl Report {
    pub(super) fn plot(
        &self,
        title: &str,
        axis: &Axis,
        lines: &[Line],
        refs: &[(f64, &str, &str)],
    ) -> String {
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
                esc(&p.label())
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
                fmt_us(Some(v))
            );
            v *= 10.0;
        }
        let b99 = self.find(env, "baseline").and_then(|b| b.p99_us);
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
