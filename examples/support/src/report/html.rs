//! The HTML page the reports fill: its head and style sheet, results tables, the done-when bars
//! table with the pass / fail styling, the run's command line at the foot.

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
/// or worse (`bad`) than their bar, notes; charts shrink to the window (keeping their aspect).
const STYLE: &str = "\
    body{font-family:sans-serif;margin:24px;color:#222;max-width:1320px}\
    table{border-collapse:collapse;margin:10px 0 18px 0;font-size:13px}\
    th,td{border:1px solid #ccd;padding:4px 9px;text-align:right}\
    th{background:#f0f2f6}td:first-child,th:first-child{text-align:left}\
    .pass{color:#1a7f37;font-weight:bold}.fail{color:#c62828;font-weight:bold}.na{color:#888}\
    .good{background:#e6f4ea}.bad{background:#fdecea}\
    .note{color:#555;font-size:12px;max-width:1200px}\
    h1{font-size:22px;margin-bottom:4px}h2{font-size:16px;margin:22px 0 6px 0}\
    svg{max-width:100%;height:auto}";

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

/// One cell of a [`Table`]: its HTML, and optionally a class and the columns it spans.
pub struct Cell {
    html: String,
    class: &'static str,
    span: usize,
}

impl Cell {
    /// A cell of `html`.
    pub fn new(html: impl Into<String>) -> Cell {
        Cell {
            html: html.into(),
            class: "",
            span: 1,
        }
    }

    /// The same cell with `class` (`good`, `bad`, `na`, ...; empty: none).
    pub fn class(self, class: &'static str) -> Cell {
        Cell { class, ..self }
    }

    /// The same cell across `span` columns, its text at the left.
    pub fn span(self, span: usize) -> Cell {
        Cell { span, ..self }
    }
}

impl From<String> for Cell {
    fn from(html: String) -> Cell {
        Cell::new(html)
    }
}

impl From<&str> for Cell {
    fn from(html: &str) -> Cell {
        Cell::new(html)
    }
}

/// An HTML table, built a row at a time.
pub struct Table(String);

impl Table {
    /// A table with a header row of `columns` (HTML each; `"a|b|c".split('|')` reads as the
    /// header row it makes).
    pub fn new<S: AsRef<str>>(columns: impl IntoIterator<Item = S>) -> Table {
        let mut h = String::from("<table><tr>");
        for c in columns {
            let _ = write!(h, "<th>{}</th>", c.as_ref());
        }
        h.push_str("</tr>");
        Table(h)
    }

    /// A row of `cells`.
    pub fn row<C: Into<Cell>>(&mut self, cells: impl IntoIterator<Item = C>) {
        self.0.push_str("<tr>");
        for c in cells {
            let c = c.into();
            self.0.push_str("<td");
            if c.span > 1 {
                let _ = write!(self.0, " colspan=\"{}\" style=\"text-align:left\"", c.span);
            }
            if !c.class.is_empty() {
                let _ = write!(self.0, " class=\"{}\"", c.class);
            }
            let _ = write!(self.0, ">{}</td>", c.html);
        }
        self.0.push_str("</tr>");
    }

    /// The table's HTML.
    pub fn finish(self) -> String {
        self.0 + "</table>"
    }
}

/// The done-when bars: one row per bar, a value and a verdict column per judgement (`label`
/// and its bars, the same bars in the same order in each).
pub fn bars_table(judgements: &[(String, Vec<Bar>)]) -> String {
    let mut columns = vec!["bar".to_string()];
    for (label, _) in judgements {
        columns.extend([esc(label), "result".into()]);
    }
    let mut t = Table::new(columns);
    let first = judgements.first().map_or(&[][..], |(_, bars)| bars);
    for (k, bar) in first.iter().enumerate() {
        let mut cells = vec![Cell::new(esc(&bar.what))];
        for b in judgements.iter().filter_map(|(_, bars)| bars.get(k)) {
            let (class, verdict) = match b.pass {
                Some(true) => ("pass", "PASS"),
                Some(false) => ("fail", "FAIL"),
                None => ("na", "not measured"),
            };
            cells.extend([Cell::new(esc(&b.value)), Cell::new(verdict).class(class)]);
        }
        t.row(cells);
    }
    "<h2>Done-when bars</h2>".to_string() + &t.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_write_their_cells_classes_and_spans() {
        let mut t = Table::new("phase|p99".split('|'));
        t.row(["calm", "<b>1.0ms</b>"]);
        t.row([Cell::new("open"), Cell::new("9.0x").class("bad")]);
        t.row([Cell::new("gated"), Cell::new("skipped").class("na").span(2)]);
        assert_eq!(
            t.finish(),
            "<table><tr><th>phase</th><th>p99</th></tr>\
             <tr><td>calm</td><td><b>1.0ms</b></td></tr>\
             <tr><td>open</td><td class=\"bad\">9.0x</td></tr>\
             <tr><td>gated</td><td colspan=\"2\" style=\"text-align:left\" class=\"na\">skipped</td></tr></table>"
        );
    }

    #[test]
    fn the_bars_table_has_a_value_and_verdict_per_judgement() {
        let bar = |value: &str, pass| Bar {
            what: "p99 <= 2x calm's".into(),
            value: value.into(),
            pass,
        };
        let h = bars_table(&[
            ("merged".into(), vec![bar("1.2x", Some(true))]),
            ("median".into(), vec![bar("2.5x", Some(false))]),
        ]);
        assert!(
            h.contains("<th>bar</th><th>merged</th><th>result</th><th>median</th>"),
            "{h}"
        );
        assert!(
            h.contains("<td>p99 &lt;= 2x calm's</td><td>1.2x</td><td class=\"pass\">PASS</td><td>2.5x</td><td class=\"fail\">FAIL</td>"),
            "{h}"
        );
        assert!(bars_table(&[]).ends_with("<tr><th>bar</th></tr></table>"));
    }
}
