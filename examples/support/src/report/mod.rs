//! What the examples' reports share: the "done when" bar, writing a report out, and one module
//! per output: `text` tables, `json` numbers, the `html` page, and its charts (`plot`).

pub mod html;
pub mod json;
pub mod plot;
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
    /// Write both reports of `example`, each where its flag says or in its
    /// [`default_dir`], and say where; a failure is reported, not fatal.
    pub fn write(&self, example: &str, json: &str, html: &str) {
        let dir = default_dir(example);
        write(self.json.as_deref(), &dir.join("report.json"), json);
        write(self.html.as_deref(), &dir.join("report.html"), html);
    }
}

/// A run's report in its three forms.
pub struct Outputs {
    /// The terminal summary.
    pub summary: String,
    /// The JSON report.
    pub json: String,
    /// The HTML page.
    pub html: String,
}

impl ReportArgs {
    /// The end of `example`'s run: a blank line and the summary, both reports written (see
    /// [`write`](Self::write)), then `notes`, one a line, and a line that says the report is
    /// partial when the run was `interrupted`.
    pub fn finish(&self, example: &str, out: &Outputs, notes: &[String], interrupted: bool) {
        println!();
        print!("{}", out.summary);
        self.write(example, &out.json, &out.html);
        for n in notes {
            println!("{n}");
        }
        if interrupted {
            println!("(partial report: the run was interrupted)");
        }
    }
}

/// Where `example`'s reports go without `--json` / `--html`: `<target>/<example>/`, the target
/// folder being `CARGO_TARGET_DIR` where it is set, else the repository's `target`.
pub fn default_dir(example: &str) -> PathBuf {
    // This crate sits at `examples/support` of the repository.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2);
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || repo.unwrap_or(Path::new(".")).join("target"),
        PathBuf::from,
    );
    target.join(example)
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
