//! The terminal summary: one line per phase, then the bars.

use super::Report;
use elastic_cpu_examples::latency::fmt_us;
use elastic_cpu_examples::report::text::TextTable;
use std::fmt::Write as _;

/// The summary table's columns: header and width.
const COLUMNS: [(&str, usize); 9] = [
    ("phase", 9),
    ("requests", 8),
    ("p50", 8),
    ("p99", 8),
    ("setups/s", 10),
    ("rejects/s", 10),
    ("expired/s", 10),
    ("wasted", 8),
    ("share", 7),
];

impl Report {
    pub fn summary_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "capacity: {} setups/s beside the storm phases' foreground (its 1.5x step too)",
            self.capacity.map_or("-".into(), |c| format!("{c:.0}"))
        );
        let table = TextTable::new(&COLUMNS);
        let _ = writeln!(s, "{}", table.header());
        for p in &self.phases {
            let row = table.row(&[
                p.name.clone(),
                p.fg.requests.to_string(),
                fmt_us(p.fg.p50_us),
                fmt_us(p.fg.p99_us),
                format!("{:.0}", p.completed_per_sec()),
                format!("{:.0}", p.rejected_per_sec()),
                format!("{:.0}", p.expired_per_sec()),
                (p.wasted_cpu_share()).map_or("-".into(), |w| format!("{:.1}%", w * 100.0)),
                p.share_mean.map_or("-".into(), |x| format!("{x:.2}")),
            ]);
            let _ = writeln!(s, "{row}");
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
