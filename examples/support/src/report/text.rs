//! Plain-text tables for the terminal summaries.

use std::fmt::Write as _;

/// A table's columns: the first left-aligned, the others right-aligned, each as wide as given
/// (a longer cell widens its row), one space apart.
pub struct TextTable<'a> {
    columns: &'a [(&'a str, usize)],
}

impl<'a> TextTable<'a> {
    /// Columns as (header, width).
    pub fn new(columns: &'a [(&'a str, usize)]) -> Self {
        TextTable { columns }
    }

    /// The header line (without a newline).
    pub fn header(&self) -> String {
        let names: Vec<&str> = self.columns.iter().map(|c| c.0).collect();
        self.row(&names)
    }

    /// One row (without a newline): a cell per column, in order.
    pub fn row<S: AsRef<str>>(&self, cells: &[S]) -> String {
        let mut line = String::new();
        for (i, (cell, &(_, width))) in cells.iter().zip(self.columns).enumerate() {
            let cell = cell.as_ref();
            if i == 0 {
                let _ = write!(line, "{cell:<width$}");
            } else {
                let _ = write!(line, " {cell:>width$}");
            }
        }
        line
    }
}
