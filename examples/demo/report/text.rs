//! The terminal summary: the table, the pauses, each round's p99, the bars, the controller speed.

use super::Report;
use crate::util::fmt_us;
use std::fmt::Write as _;

impl Report {
    pub fn summary_text(&self) -> String {
        let mut s = String::new();
        for env in self.envs() {
            let _ = writeln!(s, "== {} ==", self.env_title(env));
            let _ = writeln!(
                s,
                "{:<16} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>6} {:>11} {:>8} {:>6} {:>16}",
                "phase",
                "requests",
                "fg p50",
                "fg p99",
                "fg p999",
                "fg max",
                "sched p99",
                "rows/s",
                "cpu",
                "limit mean",
                "proc cpu",
                "cpus",
                "throttled"
            );
            for p in self.phases.iter().filter(|p| p.env == env) {
                if let Some(why) = &p.skipped {
                    let _ = writeln!(s, "{:<16} skipped: {why}", p.name);
                    continue;
                }
                let _ = writeln!(
                    s,
                    "{:<16} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8.2}M {:>5.0}% {:>11} {:>7} {:>6} {:>16}{}",
                    p.name,
                    p.requests,
                    fmt_us(p.p50_us),
                    fmt_us(p.p99_us),
                    fmt_us(p.p999_us),
                    fmt_us(p.max_us),
                    fmt_us(p.sched_p99_us),
                    p.rows_per_sec / 1e6,
                    p.cpu_share * 100.0,
                    p.limit_mean
                        .map(|l| format!("{l:.3}"))
                        .unwrap_or_else(|| "-".into()),
                    p.process_cpu_share
                        .map(|c| format!("{:.0}%", c * 100.0))
                        .unwrap_or_else(|| "-".into()),
                    p.process_cpus
                        .map(|c| format!("{c:.2}"))
                        .unwrap_or_else(|| "-".into()),
                    match (p.throttled_periods, p.periods, p.throttled_ms) {
                        (Some(t), Some(n), Some(ms)) => format!("{t}/{n} {ms:.0}ms"),
                        _ => "-".into(),
                    },
                    if p.interrupted { " (interrupted)" } else { "" }
                );
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
        let rounds = self.rounds();
        if rounds > 1 {
            let _ = writeln!(s, "\nfg p99 of each round:");
            for p in &self.phases {
                if !p.p99_rounds.is_empty() {
                    let _ = writeln!(
                        s,
                        "  {:<22} {}  (median {})",
                        p.label(),
                        p.p99_rounds
                            .iter()
                            .map(|x| fmt_us(Some(*x)))
                            .collect::<Vec<_>>()
                            .join(" "),
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
                for b in bars {
                    let mark = match b.pass {
                        Some(true) => "PASS",
                        Some(false) => "FAIL",
                        None => " -- ",
                    };
                    let _ = writeln!(s, "[{mark}] {:<76} {}", b.what, b.value);
                }
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
