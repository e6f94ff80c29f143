//! Command-line pieces both examples use: the help's layout and the flags every example has,
//! the foreground's flags, value parsers, and parsing with the usage line on an error.

use clap::error::{ContextKind, ContextValue};
use clap::{Arg, ArgAction, Command, CommandFactory, FromArgMatches};

/// The foreground service and its load generator (flattened into each example's flags).
#[derive(Clone, Debug, clap::Args)]
pub struct ForegroundArgs {
    /// worker threads of the service's runtime (the runtime under test) [default: one per core]
    #[arg(long, value_name = "N", default_value_t = cores(), hide_default_value = true, value_parser = at_least_1)]
    pub workers: usize,
    /// foreground requests per second [default: sized to --fg-load]
    #[arg(long, value_name = "R", value_parser = positive)]
    pub rate: Option<f64>,
    /// CPU work per request in microseconds
    #[arg(long, value_name = "N", default_value = "50", value_parser = positive)]
    pub work_us: f64,
    /// the load generator's connections to the service
    #[arg(long, value_name = "N", default_value = "4", value_parser = at_least_1)]
    pub conns: usize,
}

/// An example's command line (`A`, named after the example, with
/// [`ReportArgs`](crate::report::ReportArgs)): its flags
/// under "Flags", a later flag overriding an earlier one, `-h` / `--help`, the usage line
/// through cargo, the reports' default folder, and the note on Ctrl-C.
pub fn command<A: CommandFactory>() -> Command {
    let mut cmd = A::command();
    let name = cmd.get_name().to_string();
    for ext in ["json", "html"] {
        cmd = cmd.mut_arg(ext, |a| {
            let help = a.get_help().map(ToString::to_string).unwrap_or_default();
            a.help(format!("{help} [default: target/{name}/report.{ext}]"))
        });
    }
    cmd.override_usage(format!("cargo run --release --example {name} -- [FLAGS]"))
        .after_help("Ctrl-C ends the run early and still writes the (partial) report.")
        .help_template("{usage-heading} {usage}\n\n{about}\n\n{before-help}{all-args}{after-help}")
        .args_override_self(true)
        .disable_help_flag(true)
        .disable_version_flag(true)
        .arg(
            Arg::new("help")
                .short('h')
                .long("help")
                .action(ArgAction::Help)
                .help("this text"),
        )
        .mut_args(|a| a.help_heading("Flags"))
}

/// Parse `args` (the first is the program's name) into `A`.
pub fn parse_from<A, I, T>(args: I) -> Result<A, clap::Error>
where
    A: CommandFactory + FromArgMatches,
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let mut cmd = command::<A>();
    let matches = cmd.try_get_matches_from_mut(args)?;
    A::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))
}

/// Parse the process's flags and check them across flags with `finish`; on an error, print it
/// with the usage line and exit with 2 (`-h` / `--help`: print the help and exit with 0).
pub fn parse_or_exit<A>(finish: impl FnOnce(A) -> Result<A, clap::Error>) -> A
where
    A: CommandFactory + FromArgMatches,
{
    parse_from(std::env::args_os())
        .and_then(finish)
        .unwrap_or_else(|mut e| {
            if e.use_stderr() {
                let usage = command::<A>().render_usage();
                e.insert(ContextKind::Usage, ContextValue::StyledStr(usage));
            }
            e.exit()
        })
}

/// The machine's cores.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A value of any type that parses from text.
pub fn number<T: std::str::FromStr<Err: std::fmt::Display>>(v: &str) -> Result<T, String> {
    v.parse::<T>().map_err(|e| e.to_string())
}

/// A finite number above 0.
pub fn positive(v: &str) -> Result<f64, String> {
    let x: f64 = number(v)?;
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err("must be a positive number".into())
    }
}

/// A finite number, 0 or above.
pub fn non_negative(v: &str) -> Result<f64, String> {
    let x: f64 = number(v)?;
    if x.is_finite() && x >= 0.0 {
        Ok(x)
    } else {
        Err("must be >= 0".into())
    }
}

/// A count, 1 or more.
pub fn at_least_1(v: &str) -> Result<usize, String> {
    match number(v)? {
        0 => Err("must be at least 1".into()),
        x => Ok(x),
    }
}

/// A share in (0, 1].
pub fn share(v: &str) -> Result<f64, String> {
    let x: f64 = number(v)?;
    if x.is_finite() && x > 0.0 && x <= 1.0 {
        Ok(x)
    } else {
        Err("must be in (0, 1]".into())
    }
}
