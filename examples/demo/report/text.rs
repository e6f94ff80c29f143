//! The terminal summary: the table, the pauses, each round's p99, the bars, the controller speed.

use super::Report;
use crate::args::Env;
use elastic_cpu_examples::latency::{fmt_us, fmt_us_list};
use elastic_cpu_examples::report::text::TextTable;
use elastic_cpu_examples::stats::mean;
use std::fmt::Write as _;

/// The summary table's columns: header and width.
const COLUMNS: [(&str, usize); 13] = [
    ("phase", 16),
    ("requests", 8),
    ("fg p50", 8),
    ("fg p99", 8),
    ("fg p999", 8),
    ("fg max", 8),
    ("sched p99", 9),
    ("rows/s", 9),
    ("cpu", 6),
    ("limit mean", 11),
    ("proc cpu", 8),
    ("cpus", 6),
    ("throttled", 16),
];

impl Report {
    /// Per environment that ran both `baseline` and `default`: the foreground p99 of each and
    /// their ratio, and how much of the CPU the baseline left the scan took (the process's CPUs
    /// above the baseline's, over the machine's cores or the quota less the baseline's).
    pub fn main_result(&self) -> Vec<String> {
        let mut out = Vec::new();
        for env in self.envs() {
            let (Some(b), Some(d)) = (self.find(env, "baseline"), self.find(env, "default")) else {
                continue;
            };
            let room = match env {
                Env::Host => Some(self.machine.cpus as f64),
                Env::Quota => d.quota_cpus,
            };
            let ratio = match (d.fg.p99_us, b.fg.p99_us) {
                (Some(x), Some(y)) if y > 0.0 => format!(" ({:.2}x)", x / y),
                _ => String::new(),
            };
            let spare = match (d.process_cpus, b.process_cpus, room) {
                (Some(c), Some(base), Some(room)) if room > base => format!(
                    "the scan took {:.2} of the spare CPU ({c:.2} - {base:.2} CPUs of {room} - {base:.2})",
                    (c - base) / (room - base)
                ),
                _ => "the scan's share of the spare CPU: n/a".into(),
            };
            let label = match (env, d.quota_cpus) {
                (Env::Quota, Some(q)) => format!("in a {q}-CPU quota:"),
                (Env::Quota, None) => "in a quota:".into(),
                (Env::Host, _) => "host:".into(),
            };
            out.push(format!(
                "{label:<20} fg p99 {} against {} without the scan{ratio}; {spare}",
                fmt_us(d.fg.p99_us),
                fmt_us(b.fg.p99_us),
            ));
        }
        out
    }

    pub fn summary_text(&self) -> String {
        let mut s = String::new();
        let table = TextTable::new(&COLUMNS);
        for env in self.envs() {
            let _ = writeln!(s, "== {} ==", self.env_title(env));
            let _ = writeln!(s, "{}", table.header());
            for p in self.phases.iter().filter(|p| p.env == env) {
                if let Some(why) = &p.skipped {
                    let _ = writeln!(s, "{:<16} skipped: {why}", p.name);
                    continue;
                }
                let row = table.row(&[
                    p.name.clone(),
                    p.fg.requests.to_string(),
                    fmt_us(p.fg.p50_us),
                    fmt_us(p.fg.p99_us),
                    fmt_us(p.fg.p999_us),
                    fmt_us(p.fg.max_us),
                    fmt_us(p.sched_p99_us),
                    format!("{:.2}M", p.rows_per_sec / 1e6),
                    format!("{:.0}%", p.cpu_share * 100.0),
                    p.limit_mean.map_or("-".into(), |l| format!("{l:.3}")),
                    (p.process_cpu_share).map_or("-".into(), |c| format!("{:.0}%", c * 100.0)),
                    p.process_cpus.map_or("-".into(), |c| format!("{c:.2}")),
                    match (p.throttled_periods, p.periods, p.throttled_ms) {
                        (Some(t), Some(n), Some(ms)) => format!("{t}/{n} {ms:.0}ms"),
                        _ => "-".into(),
                    },
                ]);
                let interrupted = if p.interrupted { " (interrupted)" } else { "" };
                let _ = writeln!(s, "{row}{interrupted}");
            }
        }
        let _ = writeln!(
            s,
            "(fg latency leaves out requests in flight across a machine pause; see 'pauses' below; \
             cpus: process CPU time per wall second; throttled: quota periods throttled / periods, time held back)"
        );
        let _ = writeln!(
            s,
            "\npauses (whole machine descheduled, seen by a real-time watchdog thread):"
        );
        for p in self.phases.iter().filter(|p| p.skipped.is_none()) {
            let _ = writeln!(
                s,
                "  {:<22} {:>3} pauses, {:>6.0} ms in all, {:>6} requests left out; fg p99 with them: {}{}",
                p.label(),
                p.pauses,
                p.paused_ms,
                p.left_out,
                fmt_us(p.raw_p99_us),
                if p.kind.controlled() {
                    format!("; {} brakes", p.brakes)
                } else {
                    String::new()
                }
            );
        }
        let _ = writeln!(
            s,
            "\noutliers (polls over the trap's threshold, by spawn site, most time held first):"
        );
        for p in self.phases.iter().filter(|p| p.skipped.is_none()) {
            let secs = p.outlier_secs.max(1e-9);
            let _ = writeln!(
                s,
                "  {:<22} threshold {}, {:.0} polls/s, {:.0} s of windows{}{}{}",
                p.label(),
                fmt_us(p.outlier_threshold_us),
                mean(&p.polls_per_sec).unwrap_or(0.0),
                p.outlier_secs,
                match p.outlier_windows_paused {
                    0 => String::new(),
                    n => format!(" ({n} with a machine pause left out)"),
                },
                p.planted_at
                    .as_ref()
                    .map(|at| format!(
                        "; planted at {at}, its longest hold on its own clock {}",
                        fmt_us(p.planted_longest_us)
                    ))
                    .unwrap_or_default(),
                if p.outliers.is_empty() { "; none" } else { "" }
            );
            for o in p.outliers.iter().take(3) {
                let _ = writeln!(
                    s,
                    "    {:<44} {:<10} {:>6.1}/s worst {:>7} held {:>7.1} ms/s, held up {} fg waits",
                    o.spawned_at,
                    if o.elastic { "elastic" } else { "foreground" },
                    o.count as f64 / secs,
                    fmt_us(Some(o.worst_poll_us)),
                    o.held_ms / secs,
                    o.waits_held
                );
            }
        }
        for p in self.phases.iter().filter(|p| p.classes.is_some()) {
            let _ = writeln!(s, "\n{}", crate::classes::table_text(p));
        }
        let rounds = self.rounds();
        if rounds > 1 {
            let _ = writeln!(s, "\nfg p99 of each round:");
            for p in &self.phases {
                if !p.p99_rounds.is_empty() {
                    let _ = writeln!(
                        s,
                        "  {:<22} {}  (median {})",
                        p.label(),
                        fmt_us_list(&p.p99_rounds, " "),
                        fmt_us(p.p99_median)
                    );
                }
            }
        }
        let variants: &[(bool, &str)] = if rounds > 1 {
            &[
                (false, "all rounds merged"),
                (true, "median of the rounds' fg p99"),
            ]
        } else {
            &[(false, "")]
        };
        for &(median, label) in variants {
            let bars = self.bars_on(median);
            if bars.iter().any(|b| b.pass.is_some()) {
                let _ = writeln!(s);
                if !label.is_empty() {
                    let _ = writeln!(s, "bars, {label}:");
                }
                // A bar whose phases did not run (a shorter phase list) has no verdict: counted,
                // not listed.
                let unjudged = bars.iter().filter(|b| b.pass.is_none()).count();
                for b in bars.iter().filter(|b| b.pass.is_some()) {
                    let mark = if b.pass == Some(true) { "PASS" } else { "FAIL" };
                    let _ = writeln!(s, "[{mark}] {:<76} {}", b.what, b.value);
                }
                if unjudged > 0 {
                    let _ = writeln!(
                        s,
                        "({unjudged} more bars not judged: their phases did not run)"
                    );
                }
            }
        }
        let main = self.main_result();
        if !main.is_empty() {
            let _ = writeln!(
                s,
                "\nmain result (the quick start's scan, every library setting at its default, against the baseline):"
            );
            for line in main {
                let _ = writeln!(s, "  {line}");
            }
        }
        let settles = self.settles();
        if !settles.is_empty() {
            let _ = writeln!(
                s,
                "\ncontroller speed (settle: first time within max(0.05, 20%) of the resting level; tail p-p: dithering after)"
            );
            for st in &settles {
                let _ = writeln!(s, "  {}", st.text());
            }
        }
        s
    }
}
