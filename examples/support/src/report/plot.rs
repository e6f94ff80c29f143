//! The reports' charts, drawn with plotters as inline SVG: timelines of a run (its phases shaded
//! behind, a line per series, dashed reference lines, a legend) and panels of horizontal bars.

use crate::latency::fmt_us;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;

/// A chart's width in px (the page shrinks it to the window).
const WIDTH: u32 = 1280;
/// A timeline's height in px.
const HEIGHT: u32 = 200;
/// The charts' font; plotters' sizes are some 1.24 times the SVG's.
const FONT: &str = "sans-serif";
/// Room right of a timeline for its legend, px.
const LEGEND: u32 = 190;
/// Grid lines, and the legend's frame.
const GRID: RGBColor = RGBColor(0xcc, 0xcc, 0xdd);
/// Phase labels and the dotted lines at a phase's steps.
const INK: RGBColor = RGBColor(0x44, 0x44, 0x55);

/// What drawing into a string can fail with.
type DrawError = DrawingAreaErrorKind<std::io::Error>;

/// `hex` (`#rgb` or `#rrggbb`) as a colour; grey for anything else.
fn rgb(hex: &str) -> RGBColor {
    fn byte(h: &str, at: Range<usize>) -> Option<u8> {
        u8::from_str_radix(h.get(at)?, 16).ok()
    }
    let h = hex.trim_start_matches('#');
    let parsed = match h.len() {
        3 => byte(h, 0..1)
            .zip(byte(h, 1..2))
            .zip(byte(h, 2..3))
            .map(|((r, g), b)| (r * 17, g * 17, b * 17)),
        6 => byte(h, 0..2)
            .zip(byte(h, 2..4))
            .zip(byte(h, 4..6))
            .map(|((r, g), b)| (r, g, b)),
        _ => None,
    };
    let (r, g, b) = parsed.unwrap_or((0x88, 0x88, 0x88));
    RGBColor(r, g, b)
}

/// An SVG drawn by `draw` into an area of `width` x `height`; on a failure, a note that says
/// which chart is missing and why.
fn svg(
    title: &str,
    (width, height): (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<(), DrawError>,
) -> String {
    let mut out = String::new();
    let drawn = {
        let root = SVGBackend::with_string(&mut out, (width, height)).into_drawing_area();
        root.fill(&WHITE)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present())
    };
    match drawn {
        Ok(()) => out,
        Err(e) => format!(
            "<div class=\"note\">chart not drawn ({}): {e}</div>",
            super::html::esc(title)
        ),
    }
}

/// A chart's value axis: from `lo` to `hi`, on a linear or a log scale.
pub struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
}

impl Axis {
    /// Latencies in µs on a log scale: from 10 µs to the decade above the largest of `us`
    /// (1 ms at least).
    pub fn latency(us: impl IntoIterator<Item = f64>) -> Axis {
        let largest = (us.into_iter())
            .filter(|v| v.is_finite())
            .fold(1000.0f64, f64::max);
        Axis {
            lo: 10.0,
            hi: 10f64.powf(largest.log10().ceil()),
            log: true,
        }
    }

    /// A linear scale from 0 to `hi` (to 1 when `hi` is not a positive number).
    pub fn linear(hi: f64) -> Axis {
        Axis {
            lo: 0.0,
            hi: if hi.is_finite() && hi > 0.0 { hi } else { 1.0 },
            log: false,
        }
    }

    /// Where `v` is drawn: held inside the axis, and its log10 on a log scale.
    fn at(&self, v: f64) -> f64 {
        let v = v.clamp(self.lo, self.hi);
        if self.log {
            v.log10()
        } else {
            v
        }
    }

    /// The drawn range.
    fn range(&self) -> Range<f64> {
        self.at(self.lo)..self.at(self.hi)
    }

    /// How many ticks: one a decade on a log scale.
    fn ticks(&self) -> usize {
        if self.log {
            (self.hi / self.lo).log10().round() as usize + 1
        } else {
            5
        }
    }

    /// The label of the tick drawn at `y`.
    fn label(&self, y: f64) -> String {
        if self.log {
            fmt_us(Some(10f64.powf(y)))
        } else if self.hi >= 1e6 {
            format!("{:.1}M", y / 1e6)
        } else if self.hi >= 1e4 {
            format!("{:.0}k", y / 1e3)
        } else if self.hi <= 2.0 {
            format!("{y:.2}")
        } else {
            format!("{y:.0}")
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

/// A dashed line across a chart at a value, labelled at its end.
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
    spans: Vec<Span>,
    samples: &'a [P],
    /// Seconds to the last sample (1 at least).
    t_max: f64,
}

impl<'a, P: Sample> Timeline<'a, P> {
    /// The `samples` (in time order) over the phases' `spans`.
    pub fn new(spans: impl IntoIterator<Item = Span>, samples: &'a [P]) -> Self {
        let t_max = (samples.last())
            .map_or(1.0, |p| p.t_ms() as f64 / 1e3)
            .max(1.0);
        Timeline {
            spans: spans.into_iter().collect(),
            samples,
            t_max,
        }
    }

    /// One chart: `lines` over the timeline on `axis`, with `refs`.
    pub fn chart(&self, title: &str, axis: &Axis, lines: &[Line<P>], refs: &[RefLine]) -> String {
        svg(title, (WIDTH, HEIGHT), |root| {
            self.draw(root, title, axis, lines, refs)
        })
    }

    fn draw(
        &self,
        root: &DrawingArea<SVGBackend, Shift>,
        title: &str,
        axis: &Axis,
        lines: &[Line<P>],
        refs: &[RefLine],
    ) -> Result<(), DrawError> {
        let y = axis.range();
        let t_max = self.t_max;
        let mut chart = ChartBuilder::on(root)
            .caption(title, (FONT, 16).into_font().style(FontStyle::Bold))
            .margin(6)
            .margin_right(LEGEND)
            .x_label_area_size(18)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..t_max, y.clone())?;
        for span in &self.spans {
            let t0 = span.ms.start as f64 / 1e3;
            let t1 = span.ms.end as f64 / 1e3;
            chart.draw_series([Rectangle::new(
                [(t0, y.start), (t1, y.end)],
                rgb(span.fill).filled(),
            )])?;
            for &step in &span.steps_ms {
                let t = step as f64 / 1e3;
                chart.draw_series(DashedLineSeries::new(
                    [(t, y.start), (t, y.end)],
                    2,
                    3,
                    INK.stroke_width(1),
                ))?;
            }
            chart.draw_series([EmptyElement::at((t0, y.end))
                + Text::new(
                    span.label.clone(),
                    (3, 3),
                    (FONT, 12).into_font().color(&INK),
                )])?;
        }
        chart
            .configure_mesh()
            .disable_x_mesh()
            .bold_line_style(GRID.stroke_width(1))
            .light_line_style(TRANSPARENT)
            .x_labels(12)
            .x_label_formatter(&|t| format!("{t:.0}s"))
            .y_labels(axis.ticks())
            .y_label_formatter(&|v| axis.label(*v))
            .label_style((FONT, 14))
            .draw()?;
        for (i, r) in refs.iter().enumerate() {
            let color = rgb(r.color);
            let v = axis.at(r.value);
            chart.draw_series(DashedLineSeries::new(
                [(0.0, v), (t_max, v)],
                6,
                4,
                color.stroke_width(1),
            ))?;
            // Labels alternate below and above their lines, so that close ones stay apart (a
            // line and a multiple of it: the lower one's label below, the higher one's above).
            let (dy, vpos) = if i % 2 == 0 {
                (2, VPos::Top)
            } else {
                (-2, VPos::Bottom)
            };
            let style = (FONT, 12)
                .into_font()
                .color(&color)
                .pos(Pos::new(HPos::Right, vpos));
            chart.draw_series([
                EmptyElement::at((t_max, v)) + Text::new(r.label.clone(), (-4, dy), style)
            ])?;
        }
        for line in lines {
            let color = rgb(line.color);
            for run in self.runs(axis, line) {
                match run[..] {
                    [only] => chart.draw_series([Circle::new(only, 2, color.filled())])?,
                    _ => chart.draw_series(LineSeries::new(run, color.stroke_width(2)))?,
                };
            }
        }
        // The legend, right of the plot (clear of the lines and the reference lines' labels):
        // a swatch and the label per series.
        let x = (WIDTH - LEGEND + 16) as i32;
        for (i, line) in lines.iter().enumerate() {
            let y = 34 + 18 * i as i32;
            root.draw(&Rectangle::new(
                [(x, y - 1), (x + 14, y + 2)],
                rgb(line.color).filled(),
            ))?;
            let style = (FONT, 14)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center));
            root.draw(&Text::new(line.label, (x + 20, y), style))?;
        }
        Ok(())
    }

    /// A series' points as drawn, in runs: a run breaks where the phase changes or a value is
    /// missing (a run of one point is drawn as a dot).
    fn runs(&self, axis: &Axis, line: &Line<P>) -> Vec<Vec<(f64, f64)>> {
        let mut runs = Vec::new();
        let mut run = Vec::new();
        let mut phase = None;
        for p in self.samples {
            let v = (line.get)(p).filter(|v| v.is_finite());
            if v.is_none() || phase != Some(p.phase()) {
                if !run.is_empty() {
                    runs.push(std::mem::take(&mut run));
                }
                phase = Some(p.phase());
            }
            if let Some(v) = v {
                run.push((p.t_ms() as f64 / 1e3, axis.at(v)));
            }
        }
        if !run.is_empty() {
            runs.push(run);
        }
        runs
    }
}

/// One row of a bar panel.
pub struct BarRow {
    /// Named at the left.
    pub label: String,
    /// The bar's length (None: no bar).
    pub value: Option<f64>,
    /// The bar's colour.
    pub color: &'static str,
    /// Written at the bar's end.
    pub text: String,
}

/// A panel of horizontal bars, one row each, the first on top.
pub struct BarPanel {
    /// Above the panel.
    pub title: String,
    /// The bars' scale.
    pub axis: Axis,
    /// The rows, in order.
    pub rows: Vec<BarRow>,
    /// Dashed lines across the rows at values to judge the bars by, labelled on top.
    pub refs: Vec<RefLine>,
}

/// `panels` side by side (each with its rows' labels), as one SVG.
pub fn bar_panels(panels: &[BarPanel]) -> String {
    let rows = panels.iter().map(|p| p.rows.len()).max().unwrap_or(0);
    let height = 90 + 22 * rows as u32 + 30;
    let title = panels.first().map_or("", |p| &p.title);
    // Room above the rows for the most reference lines' labels any panel has.
    let labels = panels.iter().map(|p| p.refs.len()).max().unwrap_or(0) as u32;
    svg(title, (WIDTH, height), |root| {
        let areas = root.split_evenly((1, panels.len().max(1)));
        for (panel, area) in panels.iter().zip(areas) {
            let title = (FONT, 15).into_font().style(FontStyle::Bold);
            bar_panel(&area.titled(&panel.title, title)?, panel, labels)?;
        }
        Ok(())
    })
}

/// One panel of [`bar_panels`] into `area`.
fn bar_panel(
    area: &DrawingArea<SVGBackend, Shift>,
    panel: &BarPanel,
    labels: u32,
) -> Result<(), DrawError> {
    let n = panel.rows.len() as i32;
    let x = panel.axis.range();
    // Rows from the top: the first row is drawn at the highest segment.
    let row_at = |i: usize| n - 1 - i as i32;
    let mut chart = ChartBuilder::on(area)
        .margin(6)
        .margin_top(4 + 12 * labels)
        // Room for the text at the end of a bar as long as the axis.
        .margin_right(120)
        .x_label_area_size(18)
        .y_label_area_size(110)
        // Integer ranges include their end: one segment a row.
        .build_cartesian_2d(x.clone(), (0..(n - 1).max(0)).into_segmented())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .bold_line_style(GRID.stroke_width(1))
        .light_line_style(TRANSPARENT)
        .x_labels(panel.axis.ticks())
        .x_label_formatter(&|v| panel.axis.label(*v))
        .y_labels(panel.rows.len())
        .y_label_formatter(&|s| match s {
            SegmentValue::CenterOf(i) => {
                (panel.rows.get((n - 1 - i) as usize)).map_or(String::new(), |r| r.label.clone())
            }
            _ => String::new(),
        })
        .label_style((FONT, 14))
        .draw()?;
    for (i, row) in panel.rows.iter().enumerate() {
        let Some(v) = row.value.filter(|v| v.is_finite()) else {
            continue;
        };
        let at = row_at(i);
        let end = panel.axis.at(v);
        let mut bar = Rectangle::new(
            [
                (x.start, SegmentValue::Exact(at)),
                (end, SegmentValue::Exact(at + 1)),
            ],
            rgb(row.color).filled(),
        );
        bar.set_margin(3, 3, 0, 0);
        chart.draw_series([bar])?;
        let style = (FONT, 14)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Left, VPos::Center));
        chart.draw_series([EmptyElement::at((end, SegmentValue::CenterOf(at)))
            + Text::new(row.text.clone(), (4, 0), style)])?;
    }
    for (k, r) in panel.refs.iter().enumerate() {
        let color = rgb(r.color);
        let v = panel.axis.at(r.value);
        chart.draw_series(DashedLineSeries::new(
            [(v, SegmentValue::Exact(0)), (v, SegmentValue::Last)],
            4,
            3,
            color.stroke_width(1),
        ))?;
        // Labels stacked above the panel, the first lowest.
        let style = (FONT, 12)
            .into_font()
            .color(&color)
            .pos(Pos::new(HPos::Center, VPos::Bottom));
        chart.draw_series([EmptyElement::at((v, SegmentValue::Last))
            + Text::new(r.label.clone(), (0, -2 - 12 * k as i32), style)])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct P(u64, &'static str, Option<f64>);

    impl Sample for P {
        fn t_ms(&self) -> u64 {
            self.0
        }
        fn phase(&self) -> &str {
            self.1
        }
    }

    #[test]
    fn colours_parse_in_both_lengths_and_fall_back_to_grey() {
        assert_eq!(rgb("#2a7"), RGBColor(0x22, 0xaa, 0x77));
        assert_eq!(rgb("#1f5fbf"), RGBColor(0x1f, 0x5f, 0xbf));
        assert_eq!(rgb("#12"), RGBColor(0x88, 0x88, 0x88));
        assert_eq!(rgb("#zzzzzz"), RGBColor(0x88, 0x88, 0x88));
    }

    #[test]
    fn axes_hold_values_inside_and_label_their_ticks() {
        let lat = Axis::latency([2500.0, f64::NAN]);
        assert_eq!(lat.range(), 1.0..4.0);
        assert_eq!(lat.ticks(), 4);
        assert_eq!(lat.at(1.0), 1.0);
        assert_eq!(lat.at(1e9), 4.0);
        assert_eq!(lat.label(3.0), fmt_us(Some(1000.0)));
        let lin = Axis::linear(0.0);
        assert_eq!(lin.range(), 0.0..1.0);
        assert_eq!(lin.label(0.5), "0.50");
        assert_eq!(Axis::linear(2e6).label(1.5e6), "1.5M");
        assert_eq!(Axis::linear(8e5).label(2e5), "200k");
        assert_eq!(Axis::linear(100.0).label(20.0), "20");
    }

    #[test]
    fn series_break_at_phases_and_gaps() {
        let samples = [
            P(1000, "a", Some(1.0)),
            P(2000, "a", Some(2.0)),
            P(3000, "b", Some(3.0)),
            P(4000, "b", None),
            P(5000, "b", Some(f64::INFINITY)),
            P(6000, "b", Some(0.5)),
        ];
        let tl = Timeline::new([Span::new(0..6000, &[3000], "#eee", "a")], &samples);
        let line = Line::new("#000", "v", |p: &P| p.2);
        let runs = tl.runs(&Axis::linear(2.0), &line);
        assert_eq!(
            runs,
            vec![
                vec![(1.0, 1.0), (2.0, 2.0)],
                vec![(3.0, 2.0)],
                vec![(6.0, 0.5)]
            ]
        );
        let svg = tl.chart("t", &Axis::linear(2.0), &[line], &[]);
        assert!(
            svg.starts_with("<svg") && svg.contains("<polyline"),
            "{svg}"
        );
    }

    #[test]
    fn bar_panels_draw_each_row() {
        let panel = BarPanel {
            title: "p99".into(),
            axis: Axis::latency([3000.0]),
            rows: vec![
                BarRow {
                    label: "baseline".into(),
                    value: Some(800.0),
                    color: "#4caf50",
                    text: "800us".into(),
                },
                BarRow {
                    label: "paced".into(),
                    value: None,
                    color: "#e53935",
                    text: String::new(),
                },
            ],
            refs: vec![RefLine::new(800.0, "#2a7", "baseline".into())],
        };
        let svg = bar_panels(&[panel]);
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(
            svg.contains("\nbaseline\n") && svg.contains("\npaced\n") && svg.contains("\n800us\n"),
            "{svg}"
        );
    }
}
