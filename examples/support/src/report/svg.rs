//! SVG line charts over a run's timeline, written by hand: the phases shaded behind, one
//! polyline per phase and series, dashed reference lines, axes with ticks, a title and a legend.

use super::html::esc;
use crate::latency::fmt_us;
use std::fmt::Write as _;
use std::ops::Range;

const W: f64 = 1280.0;
const ML: f64 = 70.0;
const MR: f64 = 20.0;
const MT: f64 = 26.0;
const MB: f64 = 22.0;

/// How one report draws its charts.
pub struct Style {
    /// A chart's height in px.
    pub height: f64,
    /// Colour of the dotted lines at a phase's steps.
    pub step_stroke: &'static str,
    /// Room the legend takes per series, from the right edge.
    pub legend_slot: f64,
    /// Log axes of up to 3.5 decades get a tick at 3x each decade too.
    pub log_thirds: bool,
    /// Seconds between time ticks on runs up to 100 s (longer runs: 20, past 300 s: 60).
    pub short_run_tick_secs: f64,
}

/// A chart's y axis: values from `y_min` to `y_max` (time runs from 0 to the last sample).
pub struct Axis {
    y_min: f64,
    y_max: f64,
    log: bool,
}

impl Axis {
    /// Latencies in µs on a log scale: from 10 µs to the decade above the largest of `us`
    /// (1 ms at least).
    pub fn latency(us: impl IntoIterator<Item = f64>) -> Axis {
        let largest = us.into_iter().fold(1000.0f64, f64::max);
        Axis {
            y_min: 10.0,
            y_max: 10f64.powf(largest.log10().ceil()),
            log: true,
        }
    }

    /// A linear scale from 0 to `y_max`.
    pub fn linear(y_max: f64) -> Axis {
        Axis {
            y_min: 0.0,
            y_max,
            log: false,
        }
    }
}

/// A timeline sample: when it was taken and in which phase.
pub trait Sample {
    /// Milliseconds since the run started.
    fn t_ms(&self) -> u64;
    /// The phase it was taken in (a series' line breaks where this changes).
    fn phase(&self) -> &str;
}

/// A phase's stretch of the run, shaded behind the lines.
pub struct Span {
    ms: Range<u64>,
    steps_ms: Vec<u64>,
    fill: &'static str,
    label: String,
}

impl Span {
    /// The run-clock stretch `ms`, its steps at `steps_ms` (dotted lines), shaded `fill`, with
    /// `label` at its top left.
    pub fn new(
        ms: Range<u64>,
        steps_ms: &[u64],
        fill: &'static str,
        label: impl Into<String>,
    ) -> Span {
        Span {
            ms,
            steps_ms: steps_ms.to_vec(),
            fill,
            label: label.into(),
        }
    }
}

/// One series of a chart.
pub struct Line<'a, P> {
    color: &'a str,
    label: &'a str,
    get: fn(&P) -> Option<f64>,
}

impl<'a, P> Line<'a, P> {
    /// Drawn in `color`, `label` in the legend, its value in a sample from `get` (None: a gap).
    pub fn new(color: &'a str, label: &'a str, get: fn(&P) -> Option<f64>) -> Self {
        Line { color, label, get }
    }
}

/// A dashed horizontal line across a chart, labelled at the right edge.
pub struct RefLine {
    value: f64,
    color: &'static str,
    label: String,
}

impl RefLine {
    /// A line at `value`, stroke and label in `color`.
    pub fn new(value: f64, color: &'static str, label: String) -> RefLine {
        RefLine {
            value,
            color,
            label,
        }
    }

    /// A phase's p99 to judge latency by (`name`'s, green) and `factor` times it (orange); none
    /// without that p99.
    pub fn p99_and_multiple(name: &str, p99: Option<f64>, factor: f64) -> Vec<RefLine> {
        let Some(p) = p99 else {
            return Vec::new();
        };
        vec![
            RefLine::new(p, "#2a7", format!("{name} p99 {}", fmt_us(Some(p)))),
            RefLine::new(
                p * factor,
                "#c60",
                format!("{factor}x {name} {}", fmt_us(Some(p * factor))),
            ),
        ]
    }
}

/// A run's timeline, to draw charts of.
pub struct Timeline<'a, P> {
    style: &'a Style,
    spans: Vec<Span>,
    samples: &'a [P],
    /// Seconds to the last sample (1 at least).
    t_max: f64,
}

impl<'a, P: Sample> Timeline<'a, P> {
    /// The `samples` (in time order) over the phases' `spans`, drawn in `style`.
    pub fn new(style: &'a Style, spans: impl IntoIterator<Item = Span>, samples: &'a [P]) -> Self {
        let t_max = samples
            .last()
            .map_or(1.0, |p| p.t_ms() as f64 / 1e3)
            .max(1.0);
        Timeline {
            style,
            spans: spans.into_iter().collect(),
            samples,
            t_max,
        }
    }

    fn x(&self, t_s: f64) -> f64 {
        ML + (W - ML - MR) * (t_s / self.t_max)
    }

    fn y(&self, axis: &Axis, v: f64) -> f64 {
        let (a, b, v) = if axis.log {
            (axis.y_min.ln(), axis.y_max.ln(), v.max(axis.y_min).ln())
        } else {
            (axis.y_min, axis.y_max, v)
        };
        let f = ((v - a) / (b - a)).clamp(0.0, 1.02);
        let h = self.style.height;
        h - MB - (h - MT - MB) * f
    }

    /// The y ticks and their labels.
    fn ticks(&self, a: &Axis) -> Vec<(f64, String)> {
        if a.log {
            let decades = (a.y_max / a.y_min).log10();
            let mults: &[f64] = if self.style.log_thirds && decades <= 3.5 {
                &[1.0, 3.0]
            } else {
                &[1.0]
            };
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
                let label = if a.y_max >= 1e6 {
                    format!("{:.1}M", v / 1e6)
                } else if a.y_max <= 2.0 {
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

    /// One chart: `lines` over the timeline on `axis`, with `refs`.
    pub fn chart(&self, title: &str, axis: &Axis, lines: &[Line<P>], refs: &[RefLine]) -> String {
        let h = self.style.height;
        let mut s = String::new();
        let _ = write!(
            s,
            "<svg width=\"{W}\" height=\"{h}\" viewBox=\"0 0 {W} {h}\" xmlns=\"http://www.w3.org/2000/svg\" font-family=\"sans-serif\" font-size=\"11\">"
        );
        for p in &self.spans {
            let x0 = self.x(p.ms.start as f64 / 1e3);
            let x1 = self.x(p.ms.end as f64 / 1e3);
            let _ = write!(
                s,
                "<rect x=\"{x0:.1}\" y=\"{MT}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"/><line x1=\"{x0:.1}\" x2=\"{x0:.1}\" y1=\"{MT}\" y2=\"{:.1}\" stroke=\"#9aa\" stroke-width=\"0.6\"/>",
                (x1 - x0).max(0.0),
                h - MT - MB,
                p.fill,
                h - MB
            );
            for &st in &p.steps_ms {
                let xs = self.x(st as f64 / 1e3);
                let _ = write!(
                    s,
                    "<line x1=\"{xs:.1}\" x2=\"{xs:.1}\" y1=\"{MT}\" y2=\"{:.1}\" stroke=\"{}\" stroke-dasharray=\"2,3\"/>",
                    h - MB,
                    self.style.step_stroke
                );
            }
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#445\" font-size=\"10\">{}</text>",
                x0 + 3.0,
                MT + 11.0,
                esc(&p.label)
            );
        }
        for (v, label) in self.ticks(axis) {
            let y = self.y(axis, v);
            let _ = write!(
                s,
                "<line x1=\"{ML}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#ccd\" stroke-width=\"0.5\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#333\">{}</text>",
                W - MR,
                ML - 4.0,
                y + 4.0,
                esc(&label)
            );
        }
        let step = if self.t_max > 300.0 {
            60.0
        } else if self.t_max > 100.0 {
            20.0
        } else {
            self.style.short_run_tick_secs
        };
        let mut t = 0.0;
        while t <= self.t_max {
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">{t:.0}s</text>",
                self.x(t),
                h - 6.0
            );
            t += step;
        }
        for (i, r) in refs.iter().enumerate() {
            let y = self.y(axis, r.value);
            let dy = if i % 2 == 0 { -3.0 } else { 11.0 };
            let _ = write!(
                s,
                "<line x1=\"{ML}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{c}\" stroke-dasharray=\"6,4\" stroke-width=\"1.2\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"{c}\" font-size=\"10\">{}</text>",
                W - MR,
                W - MR - 2.0,
                y + dy,
                esc(&r.label),
                c = r.color
            );
        }
        for line in lines {
            self.polylines(&mut s, axis, line);
        }
        let _ = write!(
            s,
            "<text x=\"{ML}\" y=\"16\" font-size=\"13\" font-weight=\"bold\" fill=\"#222\">{}</text>",
            esc(title)
        );
        let mut lx = W - MR - self.style.legend_slot * lines.len() as f64;
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
            h - MT - MB
        );
        s
    }

    /// A series: one polyline per phase and per run of present values (a lone value: a dot).
    fn polylines(&self, s: &mut String, axis: &Axis, line: &Line<P>) {
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
        for p in self.samples {
            if last_phase != Some(p.phase()) {
                flush(&mut cur, s);
                last_phase = Some(p.phase());
            }
            match (line.get)(p) {
                Some(v) if v.is_finite() => cur.push(format!(
                    "{:.1},{:.1}",
                    self.x(p.t_ms() as f64 / 1e3),
                    self.y(axis, v)
                )),
                _ => flush(&mut cur, s),
            }
        }
        flush(&mut cur, s);
    }
}
