//! The HTML page both reports fill: its head and style sheet, the done-when bars table with the
//! pass / fail styling, the run's command line at the foot.

use super::Bar;
use std::fmt::Write as _;

/// `s` escaped for HTML text and attribute values.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The page's style sheet: tables, the verdicts (`pass`, `fail`, `na`), cells better (`good`)
/// or worse (`bad`) than their bar, notes.
const STYLE: &str = "\
    body{font-family:sans-serif;margin:24px;color:#222;max-width:1320px}\
    table{border-collapse:collapse;margin:10px 0 18px 0;font-size:13px}\
    th,td{border:1px solid #ccd;padding:4px 9px;text-align:right}\
    th{background:#f0f2f6}td:first-child,th:first-child{text-align:left}\
    .pass{color:#1a7f37;font-weight:bold}.fail{color:#c62828;font-weight:bold}.na{color:#888}\
    .good{background:#e6f4ea}.bad{background:#fdecea}\
    .note{color:#555;font-size:12px;max-width:1200px}\
    h1{font-size:22px;margin-bottom:4px}h2{font-size:16px;margin:22px 0 6px 0}";

/// The page up to and with its `<h1>`: `heading`, marked partial when the run was interrupted.
pub fn head(title: &str, heading: &str, interrupted: bool) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title><style>{STYLE}</style></head><body><h1>{heading}{}</h1>",
        if interrupted {
            " <span class=\"fail\">(partial: interrupted)</span>"
        } else {
            ""
        }
    )
}

/// The end of the page: the run's command line.
pub fn foot(command: &str) -> String {
    format!(
        "<h2>Run</h2><div class=\"note\"><code>{}</code></div></body></html>\n",
        esc(command)
    )
}

/// The done-when bars: one row per bar, a value and a verdict column per judgement (`label`
/// and its bars, the same bars in the same order in each).
pub fn bars_table(judgements: &[(String, Vec<Bar>)]) -> String {
    let mut h = String::from("<h2>Done-when bars</h2><table><tr><th>bar</th>");
    for (label, _) in judgements {
        let _ = write!(h, "<th>{}</th><th>result</th>", esc(label));
    }
    h.push_str("</tr>");
    let Some((_, first)) = judgements.first() else {
        return h + "</table>";
    };
    for (k, bar) in first.iter().enumerate() {
        let _ = write!(h, "<tr><td>{}</td>", esc(&bar.what));
        for (_, bars) in judgements {
            let b = &bars[k];
            let (class, verdict) = match b.pass {
                Some(true) => ("pass", "PASS"),
                Some(false) => ("fail", "FAIL"),
                None => ("na", "not measured"),
            };
            let _ = write!(
                h,
                "<td>{}</td><td class=\"{class}\">{verdict}</td>",
                esc(&b.value)
            );
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>");
    h
}
