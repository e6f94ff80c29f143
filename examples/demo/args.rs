//! Command-line flags of the demo (hand-rolled: no extra dependency).

use std::path::PathBuf;
use std::time::Duration;

/// What a phase does with the elastic scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Foreground only.
    Baseline,
    /// Foreground + scan, no control.
    Unthrottled,
    /// Scan capped at a fixed share through the token bucket, controller off.
    Static,
    /// Scan calls `yield_now()` after every chunk.
    Yield,
    /// Scan on a separate 1-worker runtime.
    Dedicated,
    /// Scan `.paced()` with the controller on.
    Paced,
    /// `paced`, starting from the minimum limit (settle time from too low).
    Low,
    /// `paced`, starting from the maximum limit (settle time from too high).
    High,
    /// `paced` with a step in foreground load (up at 1/3, back down at 2/3 of the phase).
    Step,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Baseline => "baseline",
            Kind::Unthrottled => "unthrottled",
            Kind::Static => "static",
            Kind::Yield => "yield",
            Kind::Dedicated => "dedicated",
            Kind::Paced => "paced",
            Kind::Low => "low",
            Kind::High => "high",
            Kind::Step => "step",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "baseline" => Kind::Baseline,
            "unthrottled" => Kind::Unthrottled,
            "static" => Kind::Static,
            "yield" => Kind::Yield,
            "dedicated" => Kind::Dedicated,
            "paced" => Kind::Paced,
            "low" => Kind::Low,
            "high" => Kind::High,
            "step" => Kind::Step,
            _ => return None,
        })
    }

    /// Phases that run the controller (and so take a profile).
    pub fn controlled(self) -> bool {
        matches!(self, Kind::Paced | Kind::Low | Kind::High | Kind::Step)
    }
}

/// Controller speed profile for the controlled phases.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ProfileSpec {
    /// The library's default profile.
    Default,
    /// CockroachDB's constants (+0.1 %/s, -0.2 %/s).
    Cockroach,
    /// The default profile with this adjustment delta per second.
    Delta(f64),
}

impl ProfileSpec {
    pub fn label(self) -> String {
        match self {
            ProfileSpec::Default => "default".into(),
            ProfileSpec::Cockroach => "cockroach".into(),
            ProfileSpec::Delta(d) => format!("{d}"),
        }
    }

    fn parse(s: &str) -> Result<ProfileSpec, String> {
        match s {
            "default" => Ok(ProfileSpec::Default),
            "cockroach" | "crdb" => Ok(ProfileSpec::Cockroach),
            _ => match s.parse::<f64>() {
                Ok(d) if d.is_finite() && (0.0001..=1.0).contains(&d) => Ok(ProfileSpec::Delta(d)),
                _ => Err(format!(
                    "bad profile {s:?}: expected default, cockroach or a delta per second in 0.0001..=1"
                )),
            },
        }
    }
}

/// One phase to run.
#[derive(Clone, Debug)]
pub struct PhaseSpec {
    pub kind: Kind,
    /// Only for controlled phases.
    pub profile: Option<ProfileSpec>,
}

impl PhaseSpec {
    /// Name as it appears in the report: `paced`, `low@0.05`, `high@cockroach`.
    pub fn name(&self) -> String {
        match self.profile {
            Some(p) if p != ProfileSpec::Default => format!("{}@{}", self.kind.name(), p.label()),
            _ => self.kind.name().to_string(),
        }
    }

    fn parse(s: &str) -> Result<PhaseSpec, String> {
        let (k, p) = match s.split_once('@') {
            Some((k, p)) => (k, Some(p)),
            None => (s, None),
        };
        let kind = Kind::parse(k).ok_or_else(|| {
            format!(
                "unknown phase {k:?}: expected one of {}",
                ALL_KINDS.join(", ")
            )
        })?;
        let profile = match p {
            None if kind.controlled() => Some(ProfileSpec::Default),
            None => None,
            Some(_) if !kind.controlled() => {
                return Err(format!(
                    "phase {k:?} takes no @profile (only paced, low, high, step do)"
                ))
            }
            Some(p) => Some(ProfileSpec::parse(p)?),
        };
        Ok(PhaseSpec { kind, profile })
    }
}

const ALL_KINDS: [&str; 9] = [
    "baseline",
    "unthrottled",
    "static",
    "yield",
    "dedicated",
    "paced",
    "low",
    "high",
    "step",
];

pub const DEFAULT_PHASES: &str = "baseline,unthrottled,static,yield,dedicated,paced";

/// Parsed flags.
#[derive(Clone, Debug)]
pub struct Args {
    pub phases: Vec<PhaseSpec>,
    pub phase_secs: f64,
    pub warmup_secs: f64,
    pub rounds: usize,
    pub workers: usize,
    pub rate: Option<f64>,
    pub fg_load: f64,
    pub work_us: f64,
    pub conns: usize,
    pub elastic_tasks: usize,
    pub rows: usize,
    pub chunk_rows: usize,
    /// None: `auto`.
    pub target_us: Option<u64>,
    pub slice_ms: Option<u64>,
    pub quantum_us: Option<u64>,
    /// Backlog brake threshold: None = the library's default, Some(None) = off.
    pub brake_us: Option<Option<u64>>,
    pub static_limit: f64,
    pub sample: Duration,
    pub json: Option<PathBuf>,
    pub html: Option<PathBuf>,
    pub seed: u64,
    /// Print where each phase's foreground latency goes, hop by hop.
    pub hops: bool,
    pub help: bool,
}

pub const USAGE: &str = "\
usage: cargo run --release --example demo -- [FLAGS]

The isolation experiment: a loopback TCP service (foreground) under open-loop Poisson load,
next to a CPU-heavy export scan (elastic), in several phases of one run. Prints one line a
second, a summary table at the end, and writes a JSON and an HTML report.

Phases (run in the order given):
  baseline     foreground only
  unthrottled  + the scan, no control
  static       + the scan capped at a fixed share through the token bucket, controller off
  yield        + the scan, yield_now() after every chunk
  dedicated    + the scan on a separate 1-worker runtime
  paced        + the scan .paced() with the controller (ours)
  low, high    paced starting from the minimum / maximum limit (controller settle time)
  step         paced from where the last paced phase ended, foreground load x1.5 from 1/3
               to 2/3 of the phase (settle time after a step in load)
  paced, low, high and step take an optional @PROFILE: default, cockroach, or a number
  (the controller's adjustment delta per second, e.g. low@0.05).

Flags:
  --phases LIST        comma-separated phases [default: baseline,unthrottled,static,yield,dedicated,paced]
  --speed              append the controller-speed phases: low, high and step for each --profiles entry
  --profiles LIST      profiles for --speed [default: cockroach,default,0.02,0.1]
  --phase-secs N       length of each phase in seconds, warm-up included [default: 15]
  --warmup-secs N      start of each phase left out of its summary [default: 4]
  --rounds N           run the phase list N times, interleaved, and merge each phase's rounds
                       (this machine's noise comes in bursts of seconds) [default: 3]
  --workers N          worker threads of the runtime under test [default: one per core]
  --rate R             foreground requests per second [default: sized to --fg-load]
  --fg-load F          foreground share of the machine's CPU when --rate is not given [default: 0.4]
  --work-us N          CPU work per request in microseconds [default: 50]
  --conns N            load-generator connections [default: 4]
  --elastic-tasks N    concurrent scan tasks [default: 8]
  --rows N             rows in the in-memory table [default: 1000000]
  --chunk-rows N       rows per encoded chunk [default: 512]
  --target-us N|auto   scheduling-latency p99 target of the controller; auto = the median
                       window p99 the baseline phase measured + the poll quantum (100..5000 us;
                       the library's default when no baseline runs first) [default: auto]
  --brake-us N|off     foreground run-queue wait at which the paced phases' backlog brake
                       stops elastic work [default: the library's, 4 x the target]
  --static-limit F     share for the static phase [default: 0.25]
  --slice-ms N         CPU time per grant, 10..=100 [default: the library's]
  --quantum-us N       poll quantum of paced streams [default: the library's]
  --sample-ms N        timeline resolution [default: 250]
  --json PATH          write the JSON report here [default: target/demo/report.json]
  --html PATH          write the HTML report here [default: target/demo/report.html]
  --seed N             RNG seed [default: 1]
  --hops               print, per phase, the mean time each request spent in each hop (client
                       send lag, to the reader task, to the handler, work, to the writer, back),
                       over all requests and over the slowest 1 %
  -h, --help           this text

Ctrl-C ends the run early and still writes the (partial) report.";

fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse::<T>()
        .map_err(|_| format!("bad value {v:?} for {flag}"))
}

fn positive_f64(flag: &str, v: &str) -> Result<f64, String> {
    let x: f64 = num(flag, v)?;
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(format!("{flag} must be a positive number, got {v:?}"))
    }
}

fn positive_usize(flag: &str, v: &str) -> Result<usize, String> {
    let x: usize = num(flag, v)?;
    if x > 0 {
        Ok(x)
    } else {
        Err(format!("{flag} must be at least 1, got {v:?}"))
    }
}

fn share(flag: &str, v: &str) -> Result<f64, String> {
    let x: f64 = num(flag, v)?;
    if x.is_finite() && x > 0.0 && x <= 1.0 {
        Ok(x)
    } else {
        Err(format!("{flag} must be in (0, 1], got {v:?}"))
    }
}

fn list(v: &str) -> impl Iterator<Item = &str> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// Parse the flags (without the program name).
pub fn parse<I: IntoIterator<Item = String>>(it: I) -> Result<Args, String> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mut a = Args {
        phases: Vec::new(),
        phase_secs: 15.0,
        warmup_secs: 4.0,
        rounds: 3,
        workers: cores,
        rate: None,
        fg_load: 0.4,
        work_us: 50.0,
        conns: 4,
        elastic_tasks: 8,
        rows: 1_000_000,
        chunk_rows: 512,
        target_us: None,
        slice_ms: None,
        quantum_us: None,
        brake_us: None,
        static_limit: 0.25,
        sample: Duration::from_millis(250),
        json: None,
        html: None,
        seed: 1,
        hops: false,
        help: false,
    };
    let mut phases = DEFAULT_PHASES.to_string();
    let mut speed = false;
    let mut profiles = "cockroach,default,0.02,0.1".to_string();
    let mut it = it.into_iter();
    while let Some(flag) = it.next() {
        // Accept both `--flag value` and `--flag=value`.
        let (flag, inline) = match flag.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (flag, None),
        };
        const KNOWN: &[&str] = &[
            "-h",
            "--help",
            "--speed",
            "--phases",
            "--profiles",
            "--phase-secs",
            "--warmup-secs",
            "--workers",
            "--rate",
            "--fg-load",
            "--work-us",
            "--conns",
            "--elastic-tasks",
            "--rows",
            "--chunk-rows",
            "--target-us",
            "--static-limit",
            "--sample-ms",
            "--json",
            "--html",
            "--seed",
            "--slice-ms",
            "--quantum-us",
            "--brake-us",
            "--rounds",
            "--hops",
        ];
        if !KNOWN.contains(&flag.as_str()) {
            return Err(format!("unknown flag {flag:?}"));
        }
        let takes_value = !matches!(flag.as_str(), "-h" | "--help" | "--speed" | "--hops");
        let val = if takes_value {
            match inline {
                Some(v) => v,
                None => it.next().ok_or_else(|| format!("{flag} needs a value"))?,
            }
        } else {
            if inline.is_some() {
                return Err(format!("{flag} takes no value"));
            }
            String::new()
        };
        let v = val.as_str();
        match flag.as_str() {
            "-h" | "--help" => a.help = true,
            "--speed" => speed = true,
            "--hops" => a.hops = true,
            "--phases" => phases = v.to_string(),
            "--profiles" => profiles = v.to_string(),
            "--phase-secs" => a.phase_secs = positive_f64(&flag, v)?,
            "--warmup-secs" => {
                let x: f64 = num(&flag, v)?;
                if !(x.is_finite() && x >= 0.0) {
                    return Err(format!("{flag} must be >= 0, got {v:?}"));
                }
                a.warmup_secs = x;
            }
            "--workers" => a.workers = positive_usize(&flag, v)?,
            "--rounds" => a.rounds = positive_usize(&flag, v)?,
            "--rate" => a.rate = Some(positive_f64(&flag, v)?),
            "--fg-load" => a.fg_load = share(&flag, v)?,
            "--work-us" => a.work_us = positive_f64(&flag, v)?,
            "--conns" => a.conns = positive_usize(&flag, v)?,
            "--elastic-tasks" => a.elastic_tasks = positive_usize(&flag, v)?,
            "--rows" => a.rows = positive_usize(&flag, v)?,
            "--chunk-rows" => a.chunk_rows = positive_usize(&flag, v)?,
            "--target-us" if v == "auto" => a.target_us = None,
            "--target-us" => {
                let x: u64 = num(&flag, v)?;
                if !(50..=1_000_000).contains(&x) {
                    return Err(format!("{flag} must be in 50..=1000000, got {v:?}"));
                }
                a.target_us = Some(x);
            }
            "--slice-ms" => {
                let x: u64 = num(&flag, v)?;
                if !(10..=100).contains(&x) {
                    return Err(format!("{flag} must be in 10..=100, got {v:?}"));
                }
                a.slice_ms = Some(x);
            }
            "--quantum-us" => {
                let x: u64 = num(&flag, v)?;
                if !(10..=100_000).contains(&x) {
                    return Err(format!("{flag} must be in 10..=100000, got {v:?}"));
                }
                a.quantum_us = Some(x);
            }
            "--brake-us" if v == "off" => a.brake_us = Some(None),
            "--brake-us" => {
                let x: u64 = num(&flag, v)?;
                if !(10..=1_000_000).contains(&x) {
                    return Err(format!("{flag} must be in 10..=1000000 or off, got {v:?}"));
                }
                a.brake_us = Some(Some(x));
            }
            "--static-limit" => a.static_limit = share(&flag, v)?,
            "--sample-ms" => {
                let x: u64 = num(&flag, v)?;
                if !(10..=10_000).contains(&x) {
                    return Err(format!("{flag} must be in 10..=10000, got {v:?}"));
                }
                a.sample = Duration::from_millis(x);
            }
            "--json" => a.json = Some(PathBuf::from(v)),
            "--html" => a.html = Some(PathBuf::from(v)),
            "--seed" => a.seed = num(&flag, v)?,
            _ => return Err(format!("unknown flag {flag:?}")),
        }
    }
    for p in list(&phases) {
        a.phases.push(PhaseSpec::parse(p)?);
    }
    if speed {
        let mut any = false;
        for p in list(&profiles) {
            let profile = Some(ProfileSpec::parse(p)?);
            for kind in [Kind::Low, Kind::High, Kind::Step] {
                a.phases.push(PhaseSpec { kind, profile });
            }
            any = true;
        }
        if !any {
            return Err("--profiles is empty".into());
        }
    }
    if a.phases.is_empty() && !a.help {
        return Err("no phases to run".into());
    }
    if a.warmup_secs >= a.phase_secs {
        return Err(format!(
            "--warmup-secs ({}) must be shorter than --phase-secs ({})",
            a.warmup_secs, a.phase_secs
        ));
    }
    if a.rows < a.chunk_rows * a.elastic_tasks {
        return Err("--rows must be at least --chunk-rows x --elastic-tasks".into());
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Args, String> {
        parse(s.split_whitespace().map(String::from))
    }

    #[test]
    fn defaults_and_errors() {
        let a = p("").unwrap();
        assert_eq!(a.phases.len(), 6);
        assert!(p("--bogus").is_err());
        assert!(p("--phase-secs").is_err());
        assert!(p("--phase-secs x").is_err());
        assert!(p("--phases nope").is_err());
        assert!(p("--phases baseline@0.1").is_err());
        let a = p("--phases=paced@0.05,low@cockroach --speed --profiles 0.1").unwrap();
        assert_eq!(a.phases.len(), 5);
        assert_eq!(a.phases[0].name(), "paced@0.05");
    }
}
