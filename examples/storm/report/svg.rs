//! How the storm's timeline charts look: the phase colours and the style.

use super::{Point, Report};
use crate::args::Kind;
use elastic_cpu_examples::report::svg::{Span, Style, Timeline};

const STYLE: Style = Style {
    height: 200.0,
    step_stroke: "#999",
    legend_slot: 150.0,
    log_thirds: false,
    short_run_tick_secs: 20.0,
};

/// The shading of a phase of this kind.
fn fill(kind: Kind) -> &'static str {
    match kind {
        Kind::Calm => "#e8eef7",
        Kind::Capacity => "#eceff1",
        Kind::Open => "#fbe9e7",
        Kind::Static => "#fff4d6",
        Kind::Gated => "#eef6e8",
    }
}

impl Report {
    /// The timeline to chart, every phase that ran shaded.
    pub(super) fn timeline(&self) -> Timeline<'_, Point> {
        let spans = (self.segments.iter().filter(|p| p.skipped.is_none())).map(|p| {
            Span::new(
                p.start_ms..p.end_ms,
                &p.step_ms,
                fill(p.kind),
                p.kind.name(),
            )
        });
        Timeline::new(&STYLE, spans, &self.timeline)
    }
}
