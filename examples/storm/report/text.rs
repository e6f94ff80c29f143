//! The terminal summary: one line per phase, then the bars.

use super::Report;
use crate::util::fmt_us;
use std::fmt::Write as _;

impl Report {
    pub fn summary_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "capacity: {} setups/s beside the calm foreground",
            self.capacity.map_or("-".into(), |c| format!("{c:.0}"))
        );
        let _ = writeln!(
            s,
            "{:<9} {:>8} {:>8} {:>8} {:>10} {:>10} {:>10} {:>8} {:>7}",
            "phase",
            "requests",
            "p50",
            "p99",
            "setups/s",
            "rejects/s",
            "expired/s",
            "wasted",
            "share"
        );
        for p in &self.phases {
            let _ = writeln!(
                s,
                "{:<9} {:>8} {:>8} {:>8} {:>10.0} {:>10.0} {:>10.0} {:>8} {:>7}",
                p.name,
                p.requests,
                fmt_us(p.p50_us),
                fmt_us(p.p99_us),
                p.completed_per_sec(),
                p.rejected_per_sec(),
                p.expired_per_sec(),
                p.wasted_cpu_share()
                    .map_or("-".into(), |w| format!("{:.1}%", w * 100.0)),
                p.share_mean.map_or("-".into(), |x| format!("{x:.2}"))
            );
        }
        let _ = writeln!(s, "\ndone-when bars:");
        for b in self.bars() {
            let r = match b.pass {
                Some(true) => "PASS",
                Some(false) => "FAIL",
                None => "n/a ",
            };
            let _ = writeln!(s, "  {r}  {}: {}", b.what, b.value);
        }
        s
    }
}
