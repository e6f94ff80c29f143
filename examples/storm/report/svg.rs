//! The SVG plots of the HTML report, written by hand: a timeline panel with the phases shaded,
//! one polyline per phase and series, and reference lines.

use super::{Point, Report};
use crate::args::Kind;
use crate::util::fmt_us;
use std::fmt::Write as _;

pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const W: f64 = 1280.0;
const H: f64 = 200.0;
const ML: f64 = 70.0;
const MR: f64 = 20.0;
const MT: f64 = 26.0;
const MB: f64 = 22.0;

fn phase_color(kind: Kind) -> &'static str {
    match kind {
        Kind::Calm => "#e8eef7",
        Kind::Capacity => "#eceff1",
        Kind::Open => "#fbe9e7",
        Kind::Static => "#fff4d6",
        Kind::Gated => "#eef6e8",
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

fn ticks(a: &Axis) -> Vec<(f64, String)> {
    if a.log {
        let mut out = Vec::new();
        let mut v = 1.0;
        while v <= a.y_max * 1.0001 {
            if v >= a.y_min * 0.9999 {
                out.push((v, fmt_us(Some(v))));
            }
            v *= 10.0;
        }
        out
    } else {
        let raw = (a.y_max - a.y_min) / 4.0;
        let mag = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 2.5, 5.0, 10.0]
            .iter()
            .map(|m| m * mag)
            .find(|s| *s >= raw)
            .unwrap_or(raw);
        let mut out = Vec::new();
        let mut v = (a.y_min / step).ceil() * step;
        while v <= a.y_max + 1e-9 {
            let label = if a.y_max <= 2.0 {
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
        refs: &[(f64, &str, String)],
    ) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "<svg width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" xmlns=\"http://www.w3.org/2000/svg\" font-family=\"sans-serif\" font-size=\"11\">"
        );
        for p in &self.segments {
            if p.skipped.is_some() {
                continue;
            }
            let x0 = axis.x(p.start_ms as f64 / 1e3);
            let x1 = axis.x(p.end_ms as f64 / 1e3);
            let _ = write!(
                s,
                "<rect x=\"{x0:.1}\" y=\"{MT}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"/><line x1=\"{x0:.1}\" x2=\"{x0:.1}\" y1=\"{MT}\" y2=\"{:.1}\" stroke=\"#9aa\" stroke-width=\"0.6\"/>",
                (x1 - x0).max(0.0),
                H - MT - MB,
                phase_color(p.kind),
                H - MB
            );
            for &st in &p.step_ms {
                let xs = axis.x(st as f64 / 1e3);
                let _ = write!(
                    s,
                    "<line x1=\"{xs:.1}\" x2=\"{xs:.1}\" y1=\"{MT}\" y2=\"{:.1}\" stroke=\"#999\" stroke-dasharray=\"2,3\"/>",
                    H - MB
                );
            }
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#445\" font-size=\"10\">{}</text>",
                x0 + 3.0,
                MT + 11.0,
                p.kind.name()
            );
        }
        for (v, label) in ticks(axis) {
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
        let step = if axis.t_max > 300.0 { 60.0 } else { 20.0 };
        let mut t = 0.0;
        while t <= axis.t_max {
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">{t:.0}s</text>",
                axis.x(t),
                H - 6.0
            );
            t += step;
        }
        for (i, (v, color, label)) in refs.iter().enumerate() {
            let y = axis.y(*v);
            let dy = if i % 2 == 0 { -3.0 } else { 11.0 };
            let _ = write!(
                s,
                "<line x1=\"{ML}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{color}\" stroke-dasharray=\"6,4\" stroke-width=\"1.2\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"{color}\" font-size=\"10\">{}</text>",
                W - MR,
                W - MR - 2.0,
                y + dy,
                esc(label)
            );
        }
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
                } else if let Some(xy) = cur.first() {
                    let (x, y) = xy.split_once(',').unwrap_or(("0", "0"));
                    let _ = write!(
                        s,
                        "<circle cx=\"{x}\" cy=\"{y}\" r=\"1.5\" fill=\"{}\"/>",
                        line.color
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
        let _ = write!(
            s,
            "<text x=\"{ML}\" y=\"16\" font-size=\"13\" font-weight=\"bold\" fill=\"#222\">{}</text>",
            esc(title)
        );
        let mut lx = W - MR - 150.0 * lines.len() as f64;
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
}
