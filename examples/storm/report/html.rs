//! The HTML report: the run's settings, the bars, the summary per phase and per round, and the
//! plots over time (the phases shaded in their colours).

use super::{Point, Report};
use crate::args::Kind;
use elastic_cpu_examples::latency::{fmt_us, fmt_us_list};
use elastic_cpu_examples::report::html::{self, esc, Cell, Table};
use elastic_cpu_examples::report::plot::{Axis, Line, RefLine, Span, Timeline};
use std::fmt::Write as _;

impl Report {
    pub fn to_html(&self) -> String {
        let m = &self.machine;
        let mut h = html::head(
            "elastic-cpu connection storm",
            "elastic-cpu: a reconnect storm against established traffic",
            self.interrupted,
        );
        let _ = write!(
            h,
            "<div class=\"note\">{} CPUs, service runtime {} workers, tokio_unstable {}. Established: {:.0} req/s at calm, 1.5x in the middle of each storm and of calm's window, Poisson over {} loopback connections, {} us CPU each, \
             latency from the intended send time (load generator at real-time priority). Setup: {}, {:.0} us of server CPU when measured alone{}. \
             Clients (a separate process, normal priority): timeout {} ms, think {} ms, {} requests per session; the storm peaks at {}x capacity. \
             Static: {} x capacity. Gate: deadline {} ms, queue {}, retry hint {}. Phases: calm {:.1} s, capacity {} s (first {} s left out), storm phases {} s (measured from 10% to 90%), {} round(s). \
             Machine-pause watchdog: {}.</div>",
            m.cpus, m.workers, m.tokio_unstable, m.rate, m.conns, m.work_us,
            if m.setup == "hash" { "an iterated hash" } else { "TLS 1.3 (rustls) + SCRAM-SHA-256 (PBKDF2, 4096 iterations)" },
            m.setup_us,
            if m.setup == "hash" { format!(" ({} chunks of {:.0} us)", m.chunks, m.chunk_us) } else { String::new() },
            m.timeout_ms, m.think_ms, m.requests, m.peak, m.static_share, m.gate_deadline_ms, m.gate_queue,
            if m.gate_crowd_hint { "the larger of the gate's and the crowd's" } else { "the gate's" },
            m.calm_secs, m.capacity_secs, m.warmup_secs, m.storm_secs, m.rounds,
            if m.pause_watchdog { "on (requests in flight across a pause left out)" } else { "off" }
        );

        h.push_str(&html::bars_table(&[("value".to_string(), self.bars())]));

        let _ = write!(
            h,
            "<h2>Summary per phase (rounds merged)</h2><div class=\"note\">capacity: {} setups/s beside the storm phases' foreground (its 1.5x step too).</div>",
            self.capacity.map_or("-".into(), |c| format!("{c:.0}"))
        );
        let mut t = Table::new(
            "phase|requests|est. p50|est. p99|p99 / calm|p99 per round|setups/s|/ capacity|\
             rejected/s|expired/s|wasted setup CPU|client timeouts/s|static rate|gate share"
                .split('|'),
        );
        let calm = self.find("calm").and_then(|p| p.fg.p99_us);
        for p in &self.phases {
            t.row([
                esc(&p.name),
                p.fg.requests.to_string(),
                fmt_us(p.fg.p50_us),
                format!("<b>{}</b>", fmt_us(p.fg.p99_us)),
                match (p.fg.p99_us, calm) {
                    (Some(x), Some(c)) => format!("{:.2}x", x / c),
                    _ => "-".into(),
                },
                fmt_us_list(&p.p99_rounds, ", "),
                format!("{:.0}", p.completed_per_sec()),
                (self.capacity)
                    .map_or("-".into(), |c| format!("{:.2}x", p.completed_per_sec() / c)),
                format!("{:.0}", p.rejected_per_sec()),
                format!("{:.0}", p.expired_per_sec()),
                (p.wasted_cpu_share()).map_or("-".into(), |w| format!("{:.1}%", w * 100.0)),
                format!("{:.0}", p.per_sec(p.clients[1])),
                p.static_rate.map_or("-".into(), |r| format!("{r:.0}/s")),
                p.share_mean.map_or("-".into(), |s| format!("{s:.2}")),
            ]);
        }
        h.push_str(&t.finish());
        h.push_str("<div class=\"note\">est.: established connections' request latency from the intended send time. setups/s: setups finished while \
            their client still waited. wasted setup CPU: the share of setup CPU spent on setups that finished after their client had given up. \
            rejected: turned away at once with a retry-after hint (static: over the rate; gated: queue full or could not start within the deadline); \
            expired: waited in the gate past its deadline and dropped before any setup CPU.</div>");

        h.push_str("<h2>Over time</h2>");
        let refs = RefLine::p99_and_multiple("calm", calm, 2.0);
        let timeline = self.timeline();
        h.push_str(&timeline.chart(
            "Established requests: p99 latency per second (log scale)",
            &Axis::latency(self.timeline.iter().filter_map(|p| p.fg_p99_us)),
            &[Line::new("#1f5fbf", "p99", |p| p.fg_p99_us)],
            &refs,
        ));
        h.push_str("<br>");
        let max_of = |f: &dyn Fn(&Point) -> f64| self.timeline.iter().map(f).fold(0.0f64, f64::max);
        let mut refs = Vec::new();
        if let Some(c) = self.capacity {
            refs.push(RefLine::new(c, "#555", format!("capacity {c:.0}/s")));
            refs.push(RefLine::new(
                0.85 * c,
                "#c60",
                format!("0.85x capacity {:.0}/s", 0.85 * c),
            ));
        }
        h.push_str(&timeline.chart(
            "Setups completed per second (client still waiting)",
            &Axis::linear(max_of(&|p| p.completed_per_sec).max(self.capacity.unwrap_or(1.0)) * 1.1),
            &[Line::new("#2e7d32", "completed/s", |p| {
                Some(p.completed_per_sec)
            })],
            &refs,
        ));
        h.push_str("<br>");
        h.push_str(&timeline.chart(
            "Setup CPU (cores): on clients still waiting, and wasted on clients that had given up",
            &Axis::linear(max_of(&|p| p.wasted_cpu.max(p.useful_cpu)).max(0.1) * 1.1),
            &[
                Line::new("#2e7d32", "useful", |p| Some(p.useful_cpu)),
                Line::new("#c62828", "wasted", |p| Some(p.wasted_cpu)),
            ],
            &[],
        ));
        h.push_str("<br>");
        h.push_str(&timeline.chart(
            "CPU (cores): the service's process, the clients' process, every other process",
            &Axis::linear(self.machine.cpus as f64),
            &[
                Line::new("#1565c0", "service", |p| Some(p.server_cpu)),
                Line::new("#8e3fbf", "clients", |p| Some(p.client_cpu)),
                Line::new("#888888", "others", |p| p.others_cpu),
            ],
            &[],
        ));
        h.push_str("<br>");
        h.push_str(
            &timeline.chart(
                "Rejects, expiries (server) and timeouts (clients) per second",
                &Axis::linear(
                    max_of(&|p| {
                        p.rejected_per_sec
                            .max(p.expired_per_sec)
                            .max(p.timeouts_per_sec)
                    })
                    .max(1.0)
                        * 1.1,
                ),
                &[
                    Line::new("#8e3fbf", "rejected/s", |p| Some(p.rejected_per_sec)),
                    Line::new("#c25a00", "expired/s", |p| Some(p.expired_per_sec)),
                    Line::new("#888888", "client timeouts/s", |p| Some(p.timeouts_per_sec)),
                ],
                &[],
            ),
        );
        h.push_str("<br>");
        h.push_str(&timeline.chart(
            "The gate's share (of the runtime's CPUs, for setups)",
            &Axis::linear(1.0),
            &[Line::new("#c25a00", "share", |p| p.share)],
            &[],
        ));
        h.push_str("<div class=\"note\">Shading: phases; dotted lines: the storm's steps (connection demand 0.3x, 1x the peak; the foreground 1.5x from \
            the middle; back down; in calm, its foreground steps only). Each point is one second.</div>");

        h.push_str("<h2>Rounds</h2>");
        let mut t = Table::new(
            "phase|round|est. p99|setups/s|rejected/s|expired/s|wasted|gate share|\
             pauses (requests left out)"
                .split('|'),
        );
        for s in &self.segments {
            let (phase, round) = (
                Cell::new(s.kind.name()),
                Cell::new(format!("{}", s.round + 1)),
            );
            if let Some(why) = &s.skipped {
                let skipped = Cell::new(format!("skipped: {}", esc(why)));
                t.row([phase, round, skipped.class("na").span(7)]);
                continue;
            }
            let secs = s.measured_secs.max(1e-9);
            t.row([
                phase,
                round,
                Cell::new(fmt_us(s.p99_us())),
                Cell::new(format!("{:.0}", s.completed_per_sec())),
                Cell::new(format!("{:.0}", s.setups.rejected as f64 / secs)),
                Cell::new(format!("{:.0}", s.setups.expired as f64 / secs)),
                Cell::new(
                    (s.setups.wasted_share()).map_or("-".into(), |w| format!("{:.1}%", w * 100.0)),
                ),
                Cell::new(s.share_mean.map_or("-".into(), |x| format!("{x:.2}"))),
                Cell::new(format!("{} ({})", s.pauses, s.left_out)),
            ]);
        }
        h.push_str(&t.finish());
        h.push_str(&html::foot(&m.command));
        h
    }
}

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
    fn timeline(&self) -> Timeline<'_, Point> {
        let spans = (self.segments.iter().filter(|p| p.skipped.is_none())).map(|p| {
            Span::new(
                p.start_ms..p.end_ms,
                &p.step_ms,
                fill(p.kind),
                p.kind.name(),
            )
        });
        Timeline::new(spans, &self.timeline)
    }
}
