//! The HTML report: the run's settings, the bars, the summary per phase and per round, and the
//! plots over time.

use super::svg::{esc, Axis, Line};
use super::{Point, Report};
use crate::util::fmt_us;
use std::fmt::Write as _;

impl Report {
    pub fn to_html(&self) -> String {
        let m = &self.machine;
        let t_max = self
            .timeline
            .last()
            .map_or(1.0, |p| p.t_ms as f64 / 1e3)
            .max(1.0);
        let mut h = String::new();
        h.push_str("<!doctype html><html><head><meta charset=\"utf-8\"><title>elastic-cpu connection storm</title><style>\
            body{font-family:sans-serif;margin:24px;color:#222;max-width:1320px}\
            table{border-collapse:collapse;margin:10px 0 18px 0;font-size:13px}\
            th,td{border:1px solid #ccd;padding:4px 9px;text-align:right}\
            th{background:#f0f2f6}td:first-child,th:first-child{text-align:left}\
            .pass{color:#1a7f37;font-weight:bold}.fail{color:#c62828;font-weight:bold}.na{color:#888}\
            .note{color:#555;font-size:12px;max-width:1200px}\
            h1{font-size:22px;margin-bottom:4px}h2{font-size:16px;margin:22px 0 6px 0}\
            </style></head><body>");
        let _ = write!(
            h,
            "<h1>elastic-cpu: a reconnect storm against established traffic{}</h1>",
            if self.interrupted {
                " <span class=\"fail\">(partial: interrupted)</span>"
            } else {
                ""
            }
        );
        let _ = write!(
            h,
            "<div class=\"note\">{} CPUs, service runtime {} workers, tokio_unstable {}. Established: {:.0} req/s at calm (1.5x in the storm's middle), Poisson over {} loopback connections, {} us CPU each, \
             latency from the intended send time (load generator at real-time priority). Setup: {:.0} us of CPU ({} chunks of {:.0} us, an iterated hash). \
             Clients (a separate process, normal priority): timeout {} ms, think {} ms, {} requests per session; the storm peaks at {}x capacity. \
             Static: {} x capacity. Gate: deadline {} ms, queue {}, retry hint {}. Phases: calm {:.1} s, capacity {} s (first {} s left out), storm phases {} s (measured from 10% to 90%), {} round(s). \
             Machine-pause watchdog: {}.</div>",
            m.cpus, m.workers, m.tokio_unstable, m.rate, m.conns, m.work_us, m.setup_us, m.chunks, m.chunk_us,
            m.timeout_ms, m.think_ms, m.requests, m.peak, m.static_share, m.gate_deadline_ms, m.gate_queue,
            if m.gate_crowd_hint { "the larger of the gate's and the crowd's" } else { "the gate's" },
            m.calm_secs, m.capacity_secs, m.warmup_secs, m.storm_secs, m.rounds,
            if m.pause_watchdog { "on (requests in flight across a pause left out)" } else { "off" }
        );

        h.push_str(
            "<h2>Done-when bars</h2><table><tr><th>bar</th><th>value</th><th>result</th></tr>",
        );
        for b in self.bars() {
            let (cls, txt) = match b.pass {
                Some(true) => ("pass", "PASS"),
                Some(false) => ("fail", "FAIL"),
                None => ("na", "not measured"),
            };
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td class=\"{cls}\">{txt}</td></tr>",
                esc(&b.what),
                esc(&b.value)
            );
        }
        h.push_str("</table>");

        let _ = write!(
            h,
            "<h2>Summary per phase (rounds merged)</h2><div class=\"note\">capacity: {} setups/s beside the calm foreground.</div>\
             <table><tr><th>phase</th><th>requests</th><th>est. p50</th><th>est. p99</th><th>p99 / calm</th><th>p99 per round</th><th>setups/s</th><th>/ capacity</th>\
             <th>rejected/s</th><th>expired/s</th><th>wasted setup CPU</th><th>client timeouts/s</th><th>static rate</th><th>gate share</th></tr>",
            self.capacity.map_or("-".into(), |c| format!("{c:.0}"))
        );
        let calm = self.find("calm").and_then(|p| p.p99_us);
        for p in &self.phases {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td><b>{}</b></td><td>{}</td><td>{}</td><td>{:.0}</td><td>{}</td><td>{:.0}</td><td>{:.0}</td><td>{}</td><td>{:.0}</td><td>{}</td><td>{}</td></tr>",
                esc(&p.name),
                p.requests,
                fmt_us(p.p50_us),
                fmt_us(p.p99_us),
                match (p.p99_us, calm) {
                    (Some(x), Some(c)) => format!("{:.2}x", x / c),
                    _ => "-".into(),
                },
                p.p99_rounds
                    .iter()
                    .map(|x| fmt_us(Some(*x)))
                    .collect::<Vec<_>>()
                    .join(", "),
                p.completed_per_sec(),
                self.capacity
                    .map_or("-".into(), |c| format!("{:.2}x", p.completed_per_sec() / c)),
                p.rejected_per_sec(),
                p.expired_per_sec(),
                p.wasted_cpu_share()
                    .map_or("-".into(), |w| format!("{:.1}%", w * 100.0)),
                p.per_sec(p.clients[1]),
                p.static_rate.map_or("-".into(), |r| format!("{r:.0}/s")),
                p.share_mean.map_or("-".into(), |s| format!("{s:.2}"))
            );
        }
        h.push_str("</table><div class=\"note\">est.: established connections' request latency from the intended send time. setups/s: setups finished while \
            their client still waited. wasted setup CPU: the share of setup CPU spent on setups that finished after their client had given up. \
            rejected: turned away at once with a retry-after hint (static: over the rate; gated: queue full or could not start within the deadline); \
            expired: waited in the gate past its deadline and dropped before any setup CPU.</div>");

        h.push_str("<h2>Over time</h2>");
        let lat_max = self
            .timeline
            .iter()
            .filter_map(|p| p.fg_p99_us)
            .fold(1000.0f64, f64::max);
        let mut refs = Vec::new();
        if let Some(c) = calm {
            refs.push((c, "#2a7", format!("calm p99 {}", fmt_us(Some(c)))));
            refs.push((
                2.0 * c,
                "#c60",
                format!("2x calm {}", fmt_us(Some(2.0 * c))),
            ));
        }
        let fg: &dyn Fn(&Point) -> Option<f64> = &|p| p.fg_p99_us;
        h.push_str(&self.plot(
            "Established requests: p99 latency per second (log scale)",
            &Axis {
                t_max,
                y_min: 10.0,
                y_max: 10f64.powf(lat_max.log10().ceil()),
                log: true,
            },
            &[Line {
                color: "#1f5fbf",
                label: "p99",
                get: fg,
            }],
            &refs,
        ));
        h.push_str("<br>");
        let max_of = |f: &dyn Fn(&Point) -> f64| self.timeline.iter().map(f).fold(0.0f64, f64::max);
        let mut refs = Vec::new();
        if let Some(c) = self.capacity {
            refs.push((c, "#555", format!("capacity {c:.0}/s")));
            refs.push((0.6 * c, "#c60", format!("0.6x capacity {:.0}/s", 0.6 * c)));
        }
        let done: &dyn Fn(&Point) -> Option<f64> = &|p| Some(p.completed_per_sec);
        h.push_str(&self.plot(
            "Setups completed per second (client still waiting)",
            &Axis {
                t_max,
                y_min: 0.0,
                y_max: max_of(&|p| p.completed_per_sec).max(self.capacity.unwrap_or(1.0)) * 1.1,
                log: false,
            },
            &[Line {
                color: "#2e7d32",
                label: "completed/s",
                get: done,
            }],
            &refs,
        ));
        h.push_str("<br>");
        let wasted: &dyn Fn(&Point) -> Option<f64> = &|p| Some(p.wasted_cpu);
        let useful: &dyn Fn(&Point) -> Option<f64> = &|p| Some(p.useful_cpu);
        h.push_str(&self.plot(
            "Setup CPU (cores): on clients still waiting, and wasted on clients that had given up",
            &Axis {
                t_max,
                y_min: 0.0,
                y_max: max_of(&|p| p.wasted_cpu.max(p.useful_cpu)).max(0.1) * 1.1,
                log: false,
            },
            &[
                Line {
                    color: "#2e7d32",
                    label: "useful",
                    get: useful,
                },
                Line {
                    color: "#c62828",
                    label: "wasted",
                    get: wasted,
                },
            ],
            &[],
        ));
        h.push_str("<br>");
        let rej: &dyn Fn(&Point) -> Option<f64> = &|p| Some(p.rejected_per_sec);
        let exp: &dyn Fn(&Point) -> Option<f64> = &|p| Some(p.expired_per_sec);
        let tmo: &dyn Fn(&Point) -> Option<f64> = &|p| Some(p.timeouts_per_sec);
        h.push_str(
            &self.plot(
                "Rejects, expiries (server) and timeouts (clients) per second",
                &Axis {
                    t_max,
                    y_min: 0.0,
                    y_max: max_of(&|p| {
                        p.rejected_per_sec
                            .max(p.expired_per_sec)
                            .max(p.timeouts_per_sec)
                    })
                    .max(1.0)
                        * 1.1,
                    log: false,
                },
                &[
                    Line {
                        color: "#8e3fbf",
                        label: "rejected/s",
                        get: rej,
                    },
                    Line {
                        color: "#c25a00",
                        label: "expired/s",
                        get: exp,
                    },
                    Line {
                        color: "#888888",
                        label: "client timeouts/s",
                        get: tmo,
                    },
                ],
                &[],
            ),
        );
        h.push_str("<br>");
        let share: &dyn Fn(&Point) -> Option<f64> = &|p| p.share;
        h.push_str(&self.plot(
            "The gate's share (of the runtime's CPUs, for setups)",
            &Axis {
                t_max,
                y_min: 0.0,
                y_max: 1.0,
                log: false,
            },
            &[Line {
                color: "#c25a00",
                label: "share",
                get: share,
            }],
            &[],
        ));
        h.push_str("<div class=\"note\">Shading: phases; dotted lines: the storm's steps (connection demand 0.3x, 1x the peak; the foreground 1.5x from \
            the middle; back down). Each point is one second.</div>");

        h.push_str("<h2>Rounds</h2><table><tr><th>phase</th><th>round</th><th>est. p99</th><th>setups/s</th><th>rejected/s</th><th>expired/s</th><th>wasted</th><th>gate share</th><th>pauses (requests left out)</th></tr>");
        for s in &self.segments {
            if let Some(why) = &s.skipped {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td colspan=\"7\" class=\"na\">skipped: {}</td></tr>",
                    s.kind.name(),
                    s.round + 1,
                    esc(why)
                );
                continue;
            }
            let secs = s.measured_secs.max(1e-9);
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.0}</td><td>{:.0}</td><td>{:.0}</td><td>{}</td><td>{}</td><td>{} ({})</td></tr>",
                s.kind.name(),
                s.round + 1,
                fmt_us(s.p99_us()),
                s.completed_per_sec(),
                s.setups.rejected as f64 / secs,
                s.setups.expired as f64 / secs,
                s.setups
                    .wasted_share()
                    .map_or("-".into(), |w| format!("{:.1}%", w * 100.0)),
                s.share_mean.map_or("-".into(), |x| format!("{x:.2}")),
                s.pauses,
                s.left_out
            );
        }
        h.push_str("</table>");
        let _ = writeln!(
            h,
            "<h2>Run</h2><div class=\"note\"><code>{}</code></div></body></html>",
            esc(&m.command)
        );
        h
    }
}
