//! What the examples' reports share: the "done when" bar, writing a report out, and one module
//! per output: `text` tables, `json` numbers, the `html` page, and its `svg` charts.

pub mod html;
pub mod json;
pub mod svg;
pub mod text;

use std::path::{Path, PathBuf};

/// One "done when" bar: what it checks, the value measured, and the verdict (in the JSON
/// reports as `{"what", "value", "pass"}`).
#[derive(serde::Serialize)]
pub struct Bar {
    /// What the bar asks.
    pub what: String,
    /// The figures it was judged on.
    pub value: String,
    /// None: not measured (a phase it needs did not run).
    pub pass: Option<bool>,
}

/// Where the JSON and HTML reports go (flattened into each example's flags; their default,
/// `target/<example>/`, is added to the help by [`cli::command`](crate::cli::command)).
#[derive(Clone, Debug, clap::Args)]
pub struct ReportArgs {
    /// write the JSON report here
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// write the HTML report here
    #[arg(long, value_name = "PATH")]
    pub html: Option<PathBuf>,
}

impl ReportArgs {
    /// Write both reports, each where its flag says or in `default_dir`, and say where; a
    /// failure is reported, not fatal.
    pub fn write(&self, default_dir: &Path, json: &str, html: &str) {
        write(self.json.as_deref(), &default_dir.join("report.json"), json);
        write(self.html.as_deref(), &default_dir.join("report.html"), html);
    }
}

/// Write `body` to `path`, or to `default` without one, creating the folder.
fn write(path: Option<&Path>, default: &Path, body: &str) {
    let path = path.unwrap_or(default);
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match std::fs::write(path, body) {
        Ok(()) => println!("wrote {}", path.display()),
        Err(e) => eprintln!("error: writing {}: {e}", path.display()),
    }
}
