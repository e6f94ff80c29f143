//! The HTML report: the run's settings, the bars, the summary table, the plots over time and the
//! controller speed table.

use super::svg::{esc, Axis, Line};
use super::{Bar, Point, Report};
use crate::args::{Env, Kind};
use crate::util::fmt_us;
use std::fmt::Write as _;

impl Report {
    /// `host` or `quota of 1.5 CPUs (cgroup v1)`.
    pub fn env_title(&self, env: Env) -> String {
        match env {
            Env::Host => "host".into(),
            Env::Quota => match self.phases.iter().find_map(|p| p.quota_cpus) {
                Some(q) => format!("inside a CPU quota of {q} CPUs"),
                None => "inside a CPU quota".into(),
            },
        }
    }

    pub fn to_html(&self) -> String {
        let m = &self.machine;
        let t_max = self
            .timeline
            .last()
            .map(|p| p.t_ms as f64 / 1e3)
            .unwrap_or(1.0)
            .max(1.0);
        let lat_max = self
            .timeline
            .iter()
            .flat_map(|p| [p.fg_p99_us, p.sched_p99_us])
            .flatten()
            .fold(1000.0f64, f64::max);
        let lat_axis = Axis {
            t_max,
            y_min: 10.0,
            y_max: 10f64.powf(lat_max.log10().ceil()),
            log: true,
        };
        let rows_max = self
            .timeline
            .iter()
            .map(|p| p.elastic_rows_per_sec)
            .fold(1.0f64, f64::max);
        let baseline = self.find(Env::Host, "baseline");
        let b99 = baseline.and_then(|b| b.p99_us);
        let mut fg_refs = Vec::new();
        let (l1, l2);
        if let Some(b) = b99 {
            l1 = format!("baseline p99 {}", fmt_us(Some(b)));
            l2 = format!("1.5x baseline {}", fmt_us(Some(b * 1.5)));
            fg_refs.push((b, "#2a7", l1.as_str()));
            fg_refs.push((b * 1.5, "#c60", l2.as_str()));
        }
        let mut sched_refs = Vec::new();
        let lt;
        if let Some(t) = m.target_us {
            lt = format!("target {}", fmt_us(Some(t as f64)));
            sched_refs.push((t as f64, "#c33", lt.as_str()));
        }

        let mut h = String::new();
        h.push_str("<!doctype html><html><head><meta charset=\"utf-8\"><title>elastic-cpu isolation experiment</title><style>\
            body{font-family:sans-serif;margin:24px;color:#222;max-width:1320px}\
            table{border-collapse:collapse;margin:10px 0 18px 0;font-size:13px}\
            th,td{border:1px solid #ccd;padding:4px 9px;text-align:right}\
            th{background:#f0f2f6}td:first-child,th:first-child{text-align:left}\
            .pass{color:#1a7f37;font-weight:bold}.fail{color:#c62828;font-weight:bold}.na{color:#888}\
            .good{background:#e6f4ea}.bad{background:#fdecea}\
            .note{color:#555;font-size:12px;max-width:1200px}\
            h1{font-size:22px;margin-bottom:4px}h2{font-size:16px;margin:22px 0 6px 0}\
            </style></head><body>");
        let _ = write!(
            h,
            "<h1>elastic-cpu: foreground latency next to elastic CPU work{}</h1>",
            if self.interrupted {
                " <span class=\"fail\">(partial: interrupted)</span>"
            } else {
                ""
            }
        );
        let _ = write!(
            h,
            "<div class=\"note\">{} CPUs ({} {}), runtime under test: {} workers; foreground {:.0} req/s Poisson over {} loopback TCP connections, {} us CPU per request, \
             latency from the intended send time; elastic: {} scan tasks over a {}-row sorted table, {}-row chunks ({:.0} us CPU each), \
             {:.2}M rows per CPU-second single-threaded. Phases of {} s, the first {} s of each left out of its summary. Controller target p99 {} us ({}), slice {} ms, quantum {} us, static limit {}. Neighbour process: {}. tokio_unstable: {}.</div>",
            m.cpus, m.os, m.arch, m.workers, m.rate, m.conns, m.work_us, m.elastic_tasks, m.rows, m.chunk_rows, m.chunk_cpu_us,
            m.rows_per_cpu_sec / 1e6, m.phase_secs, m.warmup_secs,
            m.target_us.map(|t| t.to_string()).unwrap_or("-".into()), esc(&m.target_source), m.slice_ms, m.quantum_us, m.static_limit,
            m.neighbour.map_or("none".to_string(), |f| format!("{f} of a core")), m.tokio_unstable
        );

        for env in self.envs() {
            let _ = write!(h, "<h2>At a glance: {}</h2>", esc(&self.env_title(env)));
            h.push_str(&self.summary_svg(env));
        }

        // Bars.
        let rounds = self.rounds();
        let variants: Vec<(bool, String)> = if rounds > 1 {
            vec![
                (false, format!("{rounds} rounds merged")),
                (true, "median of the rounds' fg p99".to_string()),
            ]
        } else {
            vec![(false, "value".to_string())]
        };
        h.push_str("<h2>Done-when bars</h2><table><tr><th>bar</th>");
        for (_, label) in &variants {
            let _ = write!(h, "<th>{}</th><th>result</th>", esc(label));
        }
        h.push_str("</tr>");
        let sets: Vec<Vec<Bar>> = variants.iter().map(|(m, _)| self.bars_on(*m)).collect();
        for (k, b0) in sets[0].iter().enumerate() {
            let _ = write!(h, "<tr><td>{}</td>", esc(&b0.what));
            for set in &sets {
                let b = &set[k];
                let (cls, txt) = match b.pass {
                    Some(true) => ("pass", "PASS"),
                    Some(false) => ("fail", "FAIL"),
                    None => ("na", "not measured"),
                };
                let _ = write!(
                    h,
                    "<td>{}</td><td class=\"{cls}\">{txt}</td>",
                    esc(&b.value)
                );
            }
            h.push_str("</tr>");
        }
        h.push_str("</table>");

        // Summary table.
        for env in self.envs() {
            let b99 = self.find(env, "baseline").and_then(|b| b.p99_us);
            let _ = write!(
                h,
                "<h2>Summary per phase: {}</h2>",
                esc(&self.env_title(env))
            );
            h.push_str("<table><tr><th>phase</th><th>requests</th><th>fg p50</th><th>fg p99</th><th>fg p99 / baseline</th><th>fg p99 of each round (median)</th><th>fg p99.9</th><th>fg max</th>\
            <th>sched p99</th><th>elastic rows/s</th><th>rows/s / unthrottled</th><th>elastic CPU share</th><th>limit mean [min, max]</th><th>process CPU</th><th>process CPUs</th><th>throttled periods</th><th>throttled time</th><th>unanswered</th></tr>");
            let unth = self.find(env, "unthrottled").map(|u| u.rows_per_sec);
            for p in self.phases.iter().filter(|p| p.env == env) {
                if let Some(why) = &p.skipped {
                    let _ = write!(
                    h,
                    "<tr><td>{}</td><td colspan=\"17\" style=\"text-align:left\" class=\"na\">skipped: {}</td></tr>",
                    esc(&p.name),
                    esc(why)
                );
                    continue;
                }
                let rel = match (p.p99_us, b99) {
                    (Some(x), Some(b)) if b > 0.0 => {
                        let r = x / b;
                        let cls = if r <= 1.5 {
                            "good"
                        } else if r >= 3.0 {
                            "bad"
                        } else {
                            ""
                        };
                        format!("<td class=\"{cls}\">{r:.2}x</td>")
                    }
                    _ => "<td>-</td>".into(),
                };
                let relr = match unth {
                    Some(u) if u > 0.0 && p.kind != Kind::Baseline => {
                        let r = p.rows_per_sec / u;
                        let cls = if r >= 0.6 { "good" } else { "" };
                        format!("<td class=\"{cls}\">{r:.2}x</td>")
                    }
                    _ => "<td>-</td>".into(),
                };
                let lim = match (p.limit_mean, p.limit_min, p.limit_max) {
                    (Some(a), Some(b), Some(c)) => format!("{a:.3} [{b:.2}, {c:.2}]"),
                    _ => "-".into(),
                };
                let per_round = if p.p99_rounds.len() > 1 {
                    format!(
                        "{} ({})",
                        p.p99_rounds
                            .iter()
                            .map(|x| fmt_us(Some(*x)))
                            .collect::<Vec<_>>()
                            .join(", "),
                        fmt_us(p.p99_median)
                    )
                } else {
                    "-".into()
                };
                let _ = write!(
                h,
                "<tr><td>{}{}</td><td>{}</td><td>{}</td><td><b>{}</b></td>{rel}<td>{per_round}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}M</td>{relr}<td>{:.0}%</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&p.name),
                if p.interrupted { " (interrupted)" } else { "" },
                p.requests,
                fmt_us(p.p50_us),
                fmt_us(p.p99_us),
                fmt_us(p.p999_us),
                fmt_us(p.max_us),
                fmt_us(p.sched_p99_us),
                p.rows_per_sec / 1e6,
                p.cpu_share * 100.0,
                lim,
                p.process_cpu_share
                    .map(|c| format!("{:.0}%", c * 100.0))
                    .unwrap_or("-".into()),
                p.process_cpus
                    .map(|c| format!("{c:.2}"))
                    .unwrap_or("-".into()),
                match (p.throttled_periods, p.periods) {
                    (Some(t), Some(n)) => format!("{t} of {n}"),
                    _ => "-".into(),
                },
                p.throttled_ms
                    .map(|m| format!("{m:.0} ms"))
                    .unwrap_or("-".into()),
                p.unanswered
            );
            }
            h.push_str("</table>");
        }
        h.push_str("<div class=\"note\">fg: request latency from the intended send time (open loop). sched p99: mean of the library's \
            window p99 of scheduling latency (all tasks) sampled through the phase. process CPU: this process's CPU time (server, load generator, scan) over the \
            machine's CPUs. elastic CPU share: process CPU above the baseline phase's, over the machine's CPUs (when a baseline ran; \
            otherwise rows/s over the single-threaded rows per CPU-second). process CPUs: the process's CPU time per wall second. \
            throttled: enforcement periods of the quota cgroup in which it ran out of quota, and the time its threads were held back.</div>");

        // Plots.
        h.push_str("<h2>Over time</h2>");
        let pts_fg: &dyn Fn(&Point) -> Option<f64> = &|p| p.fg_p99_us;
        let pts_sched: &dyn Fn(&Point) -> Option<f64> = &|p| p.sched_p99_us;
        let pts_sched_fg: &dyn Fn(&Point) -> Option<f64> = &|p| p.sched_fg_p99_us;
        let pts_sched_el: &dyn Fn(&Point) -> Option<f64> = &|p| p.sched_elastic_p99_us;
        let pts_limit: &dyn Fn(&Point) -> Option<f64> = &|p| p.limit;
        let pts_cap: &dyn Fn(&Point) -> Option<f64> = &|p| p.headroom_share;
        let pts_rows: &dyn Fn(&Point) -> Option<f64> = &|p| Some(p.elastic_rows_per_sec);
        h.push_str(&self.plot(
            "Foreground p99 latency (per sample, log scale)",
            &lat_axis,
            &[Line {
                color: "#1f5fbf",
                label: "fg p99",
                get: pts_fg,
            }],
            &fg_refs,
        ));
        h.push_str("<br>");
        h.push_str(&self.plot(
            "Scheduling latency p99 (library probe, window p99 of all tasks, log scale)",
            &lat_axis,
            &[
                Line {
                    color: "#bbbbbb",
                    label: "elastic tasks",
                    get: pts_sched_el,
                },
                Line {
                    color: "#8e3fbf",
                    label: "all tasks (steers)",
                    get: pts_sched,
                },
                Line {
                    color: "#1f5fbf",
                    label: "foreground tasks",
                    get: pts_sched_fg,
                },
            ],
            &sched_refs,
        ));
        h.push_str("<br>");
        h.push_str(&self.plot(
            "Elastic CPU limit, and inside a quota the headroom cap (share of the runtime's CPUs)",
            &Axis {
                t_max,
                y_min: 0.0,
                y_max: 1.0,
                log: false,
            },
            &[
                Line {
                    color: "#c25a00",
                    label: "limit",
                    get: pts_limit,
                },
                Line {
                    color: "#7a7a7a",
                    label: "quota headroom cap",
                    get: pts_cap,
                },
            ],
            &[],
        ));
        h.push_str("<br>");
        h.push_str(&self.plot(
            "Elastic throughput (rows/s)",
            &Axis {
                t_max,
                y_min: 0.0,
                y_max: rows_max * 1.05,
                log: false,
            },
            &[Line {
                color: "#2e7d32",
                label: "rows/s",
                get: pts_rows,
            }],
            &[],
        ));

        // Controller speed.
        let settles = self.settles();
        if !settles.is_empty() {
            h.push_str("<h2>Controller speed</h2><table><tr><th>phase</th><th>start</th><th>end</th><th>other side ended at</th><th>settle</th><th>tail peak-to-peak</th><th>reversals</th><th>step: before / stepped / after</th><th>step: moves after up / down</th><th>fg p99 max, 5 s after step up</th></tr>");
            let f = |x: Option<f64>| x.map(|x| format!("{x:.3}")).unwrap_or("-".into());
            for st in &settles {
                let settle = st
                    .settle_s
                    .iter()
                    .map(|x| {
                        x.map(|x| format!("{x:.1} s"))
                            .unwrap_or("not settled".into())
                    })
                    .collect::<Vec<_>>()
                    .join(" / ");
                let steps = if st.step_levels.is_empty() {
                    "-".to_string()
                } else {
                    st.step_levels
                        .iter()
                        .map(|x| f(*x))
                        .collect::<Vec<_>>()
                        .join(" / ")
                };
                let moves = if st.move_s.is_empty() {
                    "-".to_string()
                } else {
                    st.move_s
                        .iter()
                        .map(|x| x.map(|x| format!("{x:.1} s")).unwrap_or("-".into()))
                        .collect::<Vec<_>>()
                        .join(" / ")
                };
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&st.phase),
                    f(st.start_limit),
                    f(st.end_limit),
                    f(st.sibling_end),
                    settle,
                    st.tail_p2p,
                    st.reversals,
                    steps,
                    moves,
                    fmt_us(st.fg_p99_after_step_us)
                );
            }
            h.push_str("</table><div class=\"note\">low / high: the limit starts at the controller's floor / ceiling. step: starts from \
                the level the paced phase ended at (the floor when none ran); foreground load x1.5 in the middle third; settle times after the step up / down; moves after: time until the limit first moved 0.02 toward the level its segment ends at \
                (- when it was within the band of that level already). \
                settle = time until the limit first comes within max(0.05, 20%) of its resting level: for low/high the level both sides \
                end at (not settled when they end apart); for step segments the level the segment ends at, counted only when it ends at \
                rest (over its last 30%, the scheduling p99 on both sides of the target, or the limit pinned at floor/ceiling). The \
                controller dithers around its resting level by design: tail peak-to-peak says how much. tail: over the second half of the phase (or \
                last segment).</div>");
        }
        let _ = writeln!(
            h,
            "<h2>Run</h2><div class=\"note\"><code>{}</code></div></body></html>",
            esc(&m.command)
        );
        h
    }
}
