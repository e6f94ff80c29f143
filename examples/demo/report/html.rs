//! The HTML report: the run's settings, the bars, the summary table, the plots over time and the
//! controller speed table.

use super::Report;
use crate::args::{Env, Kind};
use elastic_cpu_examples::latency::{fmt_us, fmt_us_list};
use elastic_cpu_examples::report::html::{self, esc, Cell, Table};
use elastic_cpu_examples::report::plot::{Axis, Line, RefLine};
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
        let lat_axis = Axis::latency(
            (self.timeline.iter())
                .flat_map(|p| [p.fg_p99_us, p.sched_p99_us])
                .flatten(),
        );
        let rows_max = self
            .timeline
            .iter()
            .map(|p| p.elastic_rows_per_sec)
            .fold(1.0f64, f64::max);
        let baseline = self.find(Env::Host, "baseline");
        let b99 = baseline.and_then(|b| b.fg.p99_us);
        let fg_refs = RefLine::p99_and_multiple("baseline", b99, 1.5);
        let sched_refs: Vec<RefLine> = (m.target_us.iter())
            .map(|&t| {
                RefLine::new(
                    t as f64,
                    "#c33",
                    format!("target {}", fmt_us(Some(t as f64))),
                )
            })
            .collect();

        let mut h = html::head(
            "elastic-cpu isolation experiment",
            "elastic-cpu: foreground latency next to elastic CPU work",
            self.interrupted,
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
        let judgements = if rounds > 1 {
            vec![
                (format!("{rounds} rounds merged"), self.bars_on(false)),
                (
                    "median of the rounds' fg p99".to_string(),
                    self.bars_on(true),
                ),
            ]
        } else {
            vec![("value".to_string(), self.bars_on(false))]
        };
        h.push_str(&html::bars_table(&judgements));

        // Summary table.
        for env in self.envs() {
            let b99 = self.find(env, "baseline").and_then(|b| b.fg.p99_us);
            let _ = write!(
                h,
                "<h2>Summary per phase: {}</h2>",
                esc(&self.env_title(env))
            );
            let mut t = Table::new(
                "phase|requests|fg p50|fg p99|fg p99 / baseline|fg p99 of each round (median)|\
                 fg p99.9|fg max|sched p99|elastic rows/s|rows/s / unthrottled|\
                 elastic CPU share|limit mean [min, max]|process CPU|process CPUs|\
                 throttled periods|throttled time|unanswered"
                    .split('|'),
            );
            let unth = self.find(env, "unthrottled").map(|u| u.rows_per_sec);
            for p in self.phases.iter().filter(|p| p.env == env) {
                if let Some(why) = &p.skipped {
                    let skipped = Cell::new(format!("skipped: {}", esc(why)));
                    t.row([Cell::new(esc(&p.name)), skipped.class("na").span(17)]);
                    continue;
                }
                let rel = match (p.fg.p99_us, b99) {
                    (Some(x), Some(b)) if b > 0.0 => {
                        let r = x / b;
                        let cls = if r <= 1.5 {
                            "good"
                        } else if r >= 3.0 {
                            "bad"
                        } else {
                            ""
                        };
                        Cell::new(format!("{r:.2}x")).class(cls)
                    }
                    _ => Cell::new("-"),
                };
                let relr = match unth {
                    Some(u) if u > 0.0 && p.kind != Kind::Baseline => {
                        let r = p.rows_per_sec / u;
                        Cell::new(format!("{r:.2}x")).class(if r >= 0.6 { "good" } else { "" })
                    }
                    _ => Cell::new("-"),
                };
                let lim = match (p.limit_mean, p.limit_min, p.limit_max) {
                    (Some(a), Some(b), Some(c)) => format!("{a:.3} [{b:.2}, {c:.2}]"),
                    _ => "-".into(),
                };
                let per_round = if p.p99_rounds.len() > 1 {
                    format!(
                        "{} ({})",
                        fmt_us_list(&p.p99_rounds, ", "),
                        fmt_us(p.p99_median)
                    )
                } else {
                    "-".into()
                };
                t.row([
                    Cell::new(format!(
                        "{}{}",
                        esc(&p.name),
                        if p.interrupted { " (interrupted)" } else { "" }
                    )),
                    Cell::new(p.fg.requests.to_string()),
                    Cell::new(fmt_us(p.fg.p50_us)),
                    Cell::new(format!("<b>{}</b>", fmt_us(p.fg.p99_us))),
                    rel,
                    Cell::new(per_round),
                    Cell::new(fmt_us(p.fg.p999_us)),
                    Cell::new(fmt_us(p.fg.max_us)),
                    Cell::new(fmt_us(p.sched_p99_us)),
                    Cell::new(format!("{:.2}M", p.rows_per_sec / 1e6)),
                    relr,
                    Cell::new(format!("{:.0}%", p.cpu_share * 100.0)),
                    Cell::new(lim),
                    Cell::new(
                        (p.process_cpu_share).map_or("-".into(), |c| format!("{:.0}%", c * 100.0)),
                    ),
                    Cell::new(p.process_cpus.map_or("-".into(), |c| format!("{c:.2}"))),
                    Cell::new(match (p.throttled_periods, p.periods) {
                        (Some(t), Some(n)) => format!("{t} of {n}"),
                        _ => "-".into(),
                    }),
                    Cell::new(p.throttled_ms.map_or("-".into(), |m| format!("{m:.0} ms"))),
                    Cell::new(p.unanswered.to_string()),
                ]);
            }
            h.push_str(&t.finish());
        }
        h.push_str("<div class=\"note\">fg: request latency from the intended send time (open loop). sched p99: mean of the library's \
            window p99 of scheduling latency (all tasks) sampled through the phase. process CPU: this process's CPU time (server, load generator, scan) over the \
            machine's CPUs. elastic CPU share: process CPU above the baseline phase's, over the machine's CPUs (when a baseline ran; \
            otherwise rows/s over the single-threaded rows per CPU-second). process CPUs: the process's CPU time per wall second. \
            throttled: enforcement periods of the quota cgroup in which it ran out of quota, and the time its threads were held back.</div>");

        h.push_str(&self.outliers_html());
        h.push_str(&self.classes_html());

        // Plots.
        h.push_str("<h2>Over time</h2>");
        let timeline = self.timeline();
        h.push_str(&timeline.chart(
            "Foreground p99 latency (per sample, log scale)",
            &lat_axis,
            &[Line::new("#1f5fbf", "fg p99", |p| p.fg_p99_us)],
            &fg_refs,
        ));
        h.push_str("<br>");
        h.push_str(&timeline.chart(
            "Scheduling latency p99 (library probe, window p99 of all tasks, log scale)",
            &lat_axis,
            &[
                Line::new("#bbbbbb", "elastic tasks", |p| p.sched_elastic_p99_us),
                Line::new("#8e3fbf", "all tasks (steers)", |p| p.sched_p99_us),
                Line::new("#1f5fbf", "foreground tasks", |p| p.sched_fg_p99_us),
            ],
            &sched_refs,
        ));
        h.push_str("<br>");
        h.push_str(&timeline.chart(
            "Elastic CPU limit, and inside a quota the headroom cap (share of the runtime's CPUs)",
            &Axis::linear(1.0),
            &[
                Line::new("#c25a00", "limit", |p| p.limit),
                Line::new("#7a7a7a", "quota headroom cap", |p| p.headroom_share),
            ],
            &[],
        ));
        h.push_str("<br>");
        h.push_str(&timeline.chart(
            "Elastic throughput (rows/s)",
            &Axis::linear(rows_max * 1.05),
            &[Line::new("#2e7d32", "rows/s", |p| {
                Some(p.elastic_rows_per_sec)
            })],
            &[],
        ));

        // Controller speed.
        let settles = self.settles();
        if !settles.is_empty() {
            h.push_str("<h2>Controller speed</h2>");
            let mut t = Table::new(
                "phase|start|end|other side ended at|settle|tail peak-to-peak|reversals|\
                 step: before / stepped / after|step: moves after up / down|\
                 fg p99 max, 5 s after step up"
                    .split('|'),
            );
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
                t.row([
                    esc(&st.phase),
                    f(st.start_limit),
                    f(st.end_limit),
                    f(st.sibling_end),
                    settle,
                    format!("{:.3}", st.tail_p2p),
                    st.reversals.to_string(),
                    steps,
                    moves,
                    fmt_us(st.fg_p99_after_step_us),
                ]);
            }
            h.push_str(&t.finish());
            h.push_str("<div class=\"note\">low / high: the limit starts at the controller's floor / ceiling. step: starts from \
                the level the paced phase ended at (the floor when none ran); foreground load x1.5 in the middle third; settle times after the step up / down; moves after: time until the limit first moved 0.02 toward the level its segment ends at \
                (- when it was within the band of that level already). \
                settle = time until the limit first comes within max(0.05, 20%) of its resting level: for low/high the level both sides \
                end at (not settled when they end apart); for step segments the level the segment ends at, counted only when it ends at \
                rest (over its last 30%, the scheduling p99 on both sides of the target, or the limit pinned at floor/ceiling). The \
                controller dithers around its resting level by design: tail peak-to-peak says how much. tail: over the second half of the phase (or \
                last segment).</div>");
        }
        h.push_str(&html::foot(&m.command));
        h
    }
}

impl Report {
    /// The outlier trap's sites per phase (the three that held their workers longest), as the
    /// text report lists them; the planted offender's row is marked.
    fn outliers_html(&self) -> String {
        let mut t = Table::new(
            "phase|threshold|spawned at|kind|polls/s|worst|held ms/s|fg waits held up".split('|'),
        );
        for p in self.phases.iter().filter(|p| p.skipped.is_none()) {
            let secs = p.outlier_secs.max(1e-9);
            let threshold = fmt_us(p.outlier_threshold_us);
            if p.outliers.is_empty() {
                t.row([
                    Cell::new(esc(&p.label())),
                    Cell::new(threshold.clone()),
                    Cell::new("none").class("na").span(6),
                ]);
            }
            for o in p.outliers.iter().take(3) {
                let planted = p.planted_at.as_deref() == Some(o.spawned_at.as_str());
                let site = if planted {
                    let note = format!(
                        " (planted; its own clock: longest hold {})",
                        fmt_us(p.planted_longest_us)
                    );
                    Cell::new(esc(&o.spawned_at) + &note).class("bad")
                } else {
                    Cell::new(esc(&o.spawned_at))
                };
                t.row([
                    Cell::new(esc(&p.label())),
                    Cell::new(threshold.clone()),
                    site,
                    Cell::new(if o.elastic { "elastic" } else { "foreground" }),
                    Cell::new(format!("{:.1}", o.count as f64 / secs)),
                    Cell::new(fmt_us(Some(o.worst_poll_us))),
                    Cell::new(format!("{:.1}", o.held_ms / secs)),
                    Cell::new(o.waits_held.to_string()),
                ]);
            }
        }
        "<h2>Outliers: polls over the trap's threshold, by spawn site</h2>".to_string()
            + &t.finish()
    }

    /// The `classes` phase: entitled against charged share per class, and each class's CPUs
    /// over time.
    fn classes_html(&self) -> String {
        let mut h = String::new();
        for p in self.phases.iter().filter(|p| p.skipped.is_none()) {
            let Some(c) = &p.classes else {
                continue;
            };
            let _ = write!(h, "<h2>Classes of elastic work ({})</h2>", esc(&p.label()));
            let mut t = Table::new(
                "class|weight|cap|entitled, all busy|charged, all busy|library's part, all busy|\
                 entitled after backup|charged after backup|longest wait"
                    .split('|'),
            );
            for (i, b) in c.busy.iter().enumerate() {
                let after = c.after_first.as_ref().and_then(|a| a.get(i));
                let share = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
                t.row([
                    esc(b.name),
                    b.weight.to_string(),
                    share(b.cap),
                    share(Some(b.entitled_share)),
                    share(Some(b.cpu_share)),
                    share(Some(b.part_share)),
                    share(after.map(|a| a.entitled_share)),
                    share(after.map(|a| a.cpu_share)),
                    format!("{:.0} ms", b.longest_wait_ms),
                ]);
            }
            h.push_str(&t.finish());
            let _ = write!(
                h,
                "<div class=\"note\">Shares of the CPUs. Entitled: what the classes ran \
                 together, split by weight among those with work, a capped class held at its cap \
                 (computed by the demo, per sample, not read from the library). Charged: CPU time \
                 charged to the class over wall time × CPUs. The library's part: the share its \
                 split gave the class (its token rate), read from the snapshot. backup stops midway; export reached \
                 90 % of its new part (over half a second) {} after.</div>",
                c.rise_ms.map_or("never".into(), |ms| format!("{ms} ms"))
            );
        }
        if let Some(seg) = self.segments.iter().find(|p| !p.class_samples.is_empty()) {
            h.push_str(&self.class_chart(seg));
        }
        h
    }
}
