//! Command-line flags of the demo (clap, derive API).

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use elastic_cpu_examples::cli::{
    at_least_1, non_negative, number, parse_or_exit, positive, share, ForegroundArgs,
};
use elastic_cpu_examples::report::ReportArgs;
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
    /// Scan on a separate runtime, one worker per core, its threads at `SCHED_IDLE`.
    IdleRuntime,
    /// Scan `.paced()` with the controller on.
    Paced,
    /// `paced`, starting from the minimum limit (settle time from too low).
    Low,
    /// `paced`, starting from the maximum limit (settle time from too high).
    High,
    /// `paced` with a step in foreground load (up at 1/3, back down at 2/3 of the phase).
    Step,
    /// Scan `.paced()` with the controller on, on the library's idle-priority pool.
    PacedIdle,
    /// The scan as the README's quick start writes it: `elastic.spawn(stream.paced(..)..)`,
    /// every library setting at its default.
    Default,
    /// `default`, plus a foreground task that holds its worker 2 ms every 100 ms: the outlier
    /// trap must name its spawn site.
    Culprit,
    /// Three scans paced in three classes of elastic work (weights 3, 1, 1; the third capped
    /// at 0.1 of the CPUs), the controller on as in `paced`; the first stops midway.
    Classes,
}

/// Every kind, in the order of the help text.
const ALL_KINDS: [Kind; 14] = [
    Kind::Baseline,
    Kind::Unthrottled,
    Kind::Static,
    Kind::Yield,
    Kind::Dedicated,
    Kind::IdleRuntime,
    Kind::Paced,
    Kind::PacedIdle,
    Kind::Default,
    Kind::Culprit,
    Kind::Classes,
    Kind::Low,
    Kind::High,
    Kind::Step,
];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Baseline => "baseline",
            Kind::Unthrottled => "unthrottled",
            Kind::Static => "static",
            Kind::Yield => "yield",
            Kind::Dedicated => "dedicated",
            Kind::IdleRuntime => "idle-runtime",
            Kind::Paced => "paced",
            Kind::PacedIdle => "paced-idle",
            Kind::Default => "default",
            Kind::Culprit => "culprit",
            Kind::Classes => "classes",
            Kind::Low => "low",
            Kind::High => "high",
            Kind::Step => "step",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        ALL_KINDS.into_iter().find(|k| k.name() == s)
    }

    /// Phases that run the controller (and so take a profile).
    pub fn controlled(self) -> bool {
        matches!(
            self,
            Kind::Paced | Kind::PacedIdle | Kind::Low | Kind::High | Kind::Step
        )
    }

    /// The scan as the README's quick start writes it: `elastic.spawn`, library defaults.
    pub fn quick_start(self) -> bool {
        matches!(self, Kind::Default | Kind::Culprit)
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
            let all: Vec<&str> = ALL_KINDS.iter().map(|k| k.name()).collect();
            format!("unknown phase {k:?}: expected one of {}", all.join(", "))
        })?;
        let profile = match p {
            None if kind.controlled() => Some(ProfileSpec::Default),
            None => None,
            Some(_) if !kind.controlled() => {
                return Err(format!(
                    "phase {k:?} takes no @profile (only paced, paced-idle, low, high, step do)"
                ))
            }
            Some(p) => Some(ProfileSpec::parse(p)?),
        };
        Ok(PhaseSpec { kind, profile })
    }
}

pub const DEFAULT_PHASES: &str =
    "baseline,unthrottled,static,yield,dedicated,idle-runtime,paced,paced-idle,default";

/// The phases of the quota environment: what the quota comparison needs (the others show
/// nothing new there and would push the default run past 10 minutes).
pub const DEFAULT_QUOTA_PHASES: &str = "baseline,static,idle-runtime,paced,paced-idle,default";

/// The phases of `--quick`, on the host and inside the quota: the main result only.
pub const QUICK_PHASES: &str = "baseline,default";
/// `--quick`'s phase length and warm-up, in seconds.
const QUICK_PHASE_SECS: &str = "20";
const QUICK_WARMUP_SECS: &str = "5";

/// Where the phases run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Env {
    /// The bare host.
    Host,
    /// Inside a child cgroup with a CFS CPU quota (`--cpu-quota`).
    Quota,
}

impl Env {
    pub fn name(self) -> &'static str {
        match self {
            Env::Host => "host",
            Env::Quota => "quota",
        }
    }
}

const ABOUT: &str = "\
The isolation experiment: a loopback TCP service (foreground) under open-loop Poisson load,
next to a CPU-heavy export scan (elastic), in several phases of one run. Prints one line a
second, a summary table at the end with the main result, and writes a JSON and an HTML report.
About 10 minutes at the defaults; --quick shows the main result in about 90 s. The quota
environment needs the right to make a cgroup (root); without it, it is skipped with a note.";

const PHASES_HELP: &str = "\
Phases (run in the order given):
  baseline     foreground only
  unthrottled  + the scan, no control
  static       + the scan capped at a fixed share through the token bucket, controller off
  yield        + the scan, yield_now() after every chunk
  dedicated    + the scan on a separate 1-worker runtime
  idle-runtime + the scan on a separate runtime, one worker per core, threads at SCHED_IDLE
               (elsewhere than Linux: the lowest priority the OS offers)
  paced        + the scan .paced() with the controller (ours)
  paced-idle   + the scan .paced() on the library's idle-priority pool (ours)
  default      + the scan as the README's quick start writes it, elastic.spawn(..), every
               library setting at its default (ours)
  low, high    paced starting from the minimum / maximum limit (controller settle time)
  step         paced from where the last paced phase ended, foreground load x1.5 from 1/3
               to 2/3 of the phase (settle time after a step in load)
  paced, paced-idle, low, high and step take an optional @PROFILE: default, cockroach, or a number
  (the controller's adjustment delta per second, e.g. low@0.05).";

/// Parsed flags. Fields typed `std::option::Option` / `std::vec::Vec` (spelled out) take one
/// value that their parser turns into an option or a list; a plain `Option` is a flag that may
/// be absent.
#[derive(Clone, Debug, Parser)]
#[command(name = "demo", about = ABOUT, before_help = PHASES_HELP)]
pub struct Args {
    /// comma-separated phases
    #[arg(long = "phases", value_name = "LIST", default_value = DEFAULT_PHASES, default_value_if("quick", "true", Some(QUICK_PHASES)), value_parser = phase_list)]
    phase_list: std::vec::Vec<PhaseSpec>,
    /// comma-separated phases of the quota environment
    #[arg(long = "quota-phases", value_name = "LIST", default_value = DEFAULT_QUOTA_PHASES, default_value_if("quick", "true", Some(QUICK_PHASES)), value_parser = phase_list)]
    pub quota_phases: std::vec::Vec<PhaseSpec>,
    /// run the service under a CFS bandwidth limit of F CPUs (a child cgroup it creates and
    /// moves itself into), after the host phases; off: host only [default: 1.5, skipped with
    /// a note where the machine does not allow it; given explicitly, the demo exits 2 instead]
    // None: the default (1.5, lenient); Some(None): off; Some(Some(f)): strict.
    #[arg(long, value_name = "F|off", value_parser = cpu_quota)]
    pub cpu_quota: Option<std::option::Option<f64>>,
    /// turn off the library's cgroup throttling input (a throttled period steps the limit down
    /// for a probe window: `Inputs::throttling`, through `ElasticBuilder::inputs`), for an A/B
    /// inside a quota
    #[arg(long)]
    pub no_throttle_signal: bool,
    /// turn off the library's quota headroom cap (inside a quota, elastic work held to 90 % of
    /// what the foreground leaves: `Inputs::quota_headroom`), for an A/B inside a quota
    #[arg(long)]
    pub no_quota_headroom: bool,
    /// turn off the library's I/O wake-up probe as an input (`Inputs::io_wakeup`), for an A/B
    #[arg(long)]
    pub no_io_signal: bool,
    /// turn off the library's OS run-queue delay as an input (`Inputs::run_queue`), for an A/B
    #[arg(long)]
    pub no_run_queue_signal: bool,
    /// turn off the library's OS yield at each poll quantum (`Enforcement::os_yield`, through
    /// `ElasticBuilder::enforcement`), for an A/B
    #[arg(long)]
    pub no_os_yield: bool,
    /// turn off the idle pool's moving of a runtime worker queued behind another
    /// (`Enforcement::unstack_workers`), in every phase, `default` included: for an A/B
    #[arg(long)]
    pub no_unstack: bool,
    /// build the service's runtime as plain tokio, as `#[tokio::main]` does, and
    /// `elastic.attach` it (and start its I/O probe) instead of `elastic.runtime(..)`
    #[arg(long)]
    pub attach: bool,
    /// the main result in about 90 s: the baseline and the quick start's scan at the library's
    /// defaults (phase `default`), one 20 s round each on the host, then inside the quota where
    /// the machine allows it; flags given beside it override these
    #[arg(long)]
    pub quick: bool,
    /// append the controller-speed phases: low, high and step for each --profiles entry
    #[arg(long)]
    speed: bool,
    /// profiles for --speed
    #[arg(long, value_name = "LIST", default_value = "cockroach,default,0.02,0.1", value_parser = profile_list)]
    profiles: std::vec::Vec<ProfileSpec>,
    /// The phases to run: --phases, then the --speed phases.
    #[arg(skip)]
    pub phases: Vec<PhaseSpec>,
    /// length of each phase in seconds, warm-up included
    #[arg(long, value_name = "N", default_value = "13", default_value_if("quick", "true", Some(QUICK_PHASE_SECS)), value_parser = positive)]
    pub phase_secs: f64,
    /// start of each phase left out of its summary
    #[arg(long, value_name = "N", default_value = "4", default_value_if("quick", "true", Some(QUICK_WARMUP_SECS)), value_parser = non_negative)]
    pub warmup_secs: f64,
    /// run the phase list N times, interleaved, and merge each phase's rounds
    /// (this machine's noise comes in bursts of seconds)
    #[arg(long, value_name = "N", default_value = "3", default_value_if("quick", "true", Some("1")), value_parser = at_least_1)]
    pub rounds: usize,
    #[command(flatten)]
    pub fg: ForegroundArgs,
    /// foreground share of the machine's CPU when --rate is not given
    #[arg(long, value_name = "F", default_value = "0.4", value_parser = share)]
    pub fg_load: f64,
    /// concurrent scan tasks
    #[arg(long, value_name = "N", default_value = "8", value_parser = at_least_1)]
    pub elastic_tasks: usize,
    /// rows in the in-memory table
    #[arg(long, value_name = "N", default_value = "1000000", value_parser = at_least_1)]
    pub rows: usize,
    /// rows per encoded chunk
    #[arg(long, value_name = "N", default_value = "512", value_parser = at_least_1)]
    pub chunk_rows: usize,
    /// the controller's target in the paced phases: library = the library's own, measured
    /// (what elastic work adds over the foreground's quiet latency, against half of it);
    /// auto = the median window p99 the baseline phase measured + the poll quantum; or a fixed
    /// p99 of scheduling latency in µs (50..1000000). The default phase always uses the
    /// library's
    #[arg(long, value_name = "N|auto|library", default_value = "library", value_parser = target_us)]
    pub target_us: TargetArg,
    /// foreground run-queue wait at which the paced phases' backlog brake stops elastic work
    /// [default: the library's, 4 x the target]
    // None: the library's default; Some(None): off.
    #[arg(long, value_name = "N|off", value_parser = brake_us)]
    pub brake_us: Option<std::option::Option<u64>>,
    /// the outlier trap's threshold in every phase [default: the library's: the controller's
    /// target, at least 1 ms]
    #[arg(long, value_name = "N", value_parser = outlier_us)]
    pub outlier_us: Option<u64>,
    /// share for the static phase
    #[arg(long, value_name = "F", default_value = "0.25", value_parser = share)]
    pub static_limit: f64,
    /// a noisy neighbour: a separate process beside the service burning F of one core (in 10 ms
    /// periods) through every phase, as another tenant of the machine would [default: none]
    #[arg(long, value_name = "F", value_parser = share)]
    pub neighbour: Option<f64>,
    /// CPU time per grant, 10..=100 [default: the library's]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(10..=100))]
    pub slice_ms: Option<u64>,
    /// poll quantum of paced streams [default: the library's]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(10..=100_000))]
    pub quantum_us: Option<u64>,
    /// timeline resolution
    #[arg(long = "sample-ms", value_name = "N", default_value = "250", value_parser = sample_ms)]
    pub sample: Duration,
    #[command(flatten)]
    pub reports: ReportArgs,
    /// RNG seed
    #[arg(long, value_name = "N", default_value = "1")]
    pub seed: u64,
    /// priority of the load generator's threads: realtime (above the service, as clients on
    /// other machines would be) or normal (clients sharing the service's cores)
    #[arg(long, value_name = "P", default_value = "realtime", value_parser = client_priority)]
    pub client_priority: ClientPriority,
    /// elastic work as a mix of the library's adapters: one scan on a blocking thread paced by
    /// `pace_blocking`, `Pacer` loops and paced streams (unpaced in the unpaced phases), instead
    /// of paced streams only
    #[arg(long)]
    pub elastic_mix: bool,
    /// print, per phase, the mean time each request spent in each hop (client send lag, to the
    /// reader task, to the handler, work, to the writer, back), over all requests and over the
    /// slowest 1 %
    #[arg(long)]
    pub hops: bool,
}

/// `--client-priority`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientPriority {
    /// Real-time (SCHED_FIFO 10) where the OS allows it: the default.
    Realtime,
    /// The scheduler's normal priority, competing with the service for the cores.
    Normal,
}

impl ClientPriority {
    pub fn name(self) -> &'static str {
        match self {
            ClientPriority::Realtime => "realtime",
            ClientPriority::Normal => "normal",
        }
    }
}

fn client_priority(v: &str) -> Result<ClientPriority, String> {
    match v {
        "realtime" => Ok(ClientPriority::Realtime),
        "normal" => Ok(ClientPriority::Normal),
        _ => Err("expected normal or realtime".into()),
    }
}

fn in_range(v: &str, range: std::ops::RangeInclusive<u64>, or: &str) -> Result<u64, String> {
    let x: u64 = number(v)?;
    if range.contains(&x) {
        Ok(x)
    } else {
        Err(format!(
            "must be in {}..={}{or}",
            range.start(),
            range.end()
        ))
    }
}

/// Where the paced phases' controller target comes from (`--target-us`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetArg {
    /// The library's own, measured.
    Library,
    /// The baseline phase's median window p99 + the poll quantum.
    Auto,
    /// This many µs.
    Us(u64),
}

fn target_us(v: &str) -> Result<TargetArg, String> {
    match v {
        "library" => Ok(TargetArg::Library),
        "auto" => Ok(TargetArg::Auto),
        _ => in_range(v, 50..=1_000_000, ", auto or library").map(TargetArg::Us),
    }
}

fn brake_us(v: &str) -> Result<Option<u64>, String> {
    match v {
        "off" => Ok(None),
        _ => in_range(v, 10..=1_000_000, " or off").map(Some),
    }
}

fn outlier_us(v: &str) -> Result<u64, String> {
    in_range(v, 1..=10_000_000, "")
}

fn cpu_quota(v: &str) -> Result<Option<f64>, String> {
    match v {
        "off" => Ok(None),
        _ => match v.parse::<f64>() {
            Ok(f) if f.is_finite() && (0.01..=1024.0).contains(&f) => Ok(Some(f)),
            _ => Err("must be a number of CPUs in 0.01..=1024, or off".into()),
        },
    }
}

fn sample_ms(v: &str) -> Result<Duration, String> {
    in_range(v, 10..=10_000, "").map(Duration::from_millis)
}

/// Comma-separated items, blanks around and empty items left out.
fn list(v: &str) -> impl Iterator<Item = &str> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty())
}

fn phase_list(v: &str) -> Result<Vec<PhaseSpec>, String> {
    list(v).map(PhaseSpec::parse).collect()
}

fn profile_list(v: &str) -> Result<Vec<ProfileSpec>, String> {
    list(v).map(ProfileSpec::parse).collect()
}

impl Args {
    /// Parse the process's flags, or exit (see [`parse_or_exit`]).
    pub fn from_env() -> Args {
        parse_or_exit(Args::finish)
    }

    /// The checks across flags, and the phase list.
    fn finish(mut self) -> Result<Args, clap::Error> {
        let err = |msg: String| Args::command().error(ErrorKind::ValueValidation, msg);
        self.phases = self.phase_list.clone();
        if self.speed {
            if self.profiles.is_empty() {
                return Err(err("--profiles is empty".into()));
            }
            for &p in &self.profiles {
                for kind in [Kind::Low, Kind::High, Kind::Step] {
                    self.phases.push(PhaseSpec {
                        kind,
                        profile: Some(p),
                    });
                }
            }
        }
        if self.phases.is_empty() {
            return Err(err("no phases to run".into()));
        }
        if self.warmup_secs >= self.phase_secs {
            return Err(err(format!(
                "--warmup-secs ({}) must be shorter than --phase-secs ({})",
                self.warmup_secs, self.phase_secs
            )));
        }
        if self.rows < self.chunk_rows * self.elastic_tasks {
            return Err(err(
                "--rows must be at least --chunk-rows x --elastic-tasks".into(),
            ));
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use elastic_cpu_examples::cli::{command, parse_from};

    fn p(s: &'static str) -> Result<Args, clap::Error> {
        parse_from::<Args, _, _>(std::iter::once("demo").chain(s.split_whitespace()))?.finish()
    }

    #[test]
    fn defaults_and_errors() {
        command::<Args>().debug_assert();
        let a = p("").unwrap();
        assert_eq!(a.phases.len(), 9);
        assert_eq!(a.quota_phases.len(), 6);
        assert_eq!(a.cpu_quota, None);
        assert_eq!(p("--cpu-quota off").unwrap().cpu_quota, Some(None));
        assert_eq!(p("--cpu-quota 1.5").unwrap().cpu_quota, Some(Some(1.5)));
        assert!(p("--cpu-quota 0").is_err());
        assert!(p("--cpu-quota x").is_err());
        assert!(p("--quota-phases nope").is_err());
        assert_eq!(
            p("--phases paced-idle@0.05").unwrap().phases[0].name(),
            "paced-idle@0.05"
        );
        assert!(p("--phases idle-runtime@0.05").is_err());
        assert_eq!(a.sample, Duration::from_millis(250));
        assert_eq!((a.target_us, a.brake_us), (TargetArg::Library, None));
        assert_eq!(p("--target-us auto").unwrap().target_us, TargetArg::Auto);
        assert!(p("--bogus").is_err());
        assert!(p("--phase-secs").is_err());
        assert!(p("--phase-secs x").is_err());
        assert!(p("--phases nope").is_err());
        assert!(p("--phases baseline@0.1").is_err());
        assert!(p("--warmup-secs 20").is_err());
        let a = p("--phases=paced@0.05,low@cockroach --speed --profiles 0.1").unwrap();
        assert_eq!(a.phases.len(), 5);
        assert_eq!(a.phases[0].name(), "paced@0.05");
        assert_eq!(a.client_priority, ClientPriority::Realtime);
        assert!(!a.elastic_mix);
        let a = p("--client-priority normal --elastic-mix").unwrap();
        assert_eq!(a.client_priority, ClientPriority::Normal);
        assert_eq!(a.client_priority.name(), "normal");
        assert!(a.elastic_mix);
        assert!(p("--client-priority low").is_err());
        let q = p("--quick").unwrap();
        let names = |v: &[PhaseSpec]| v.iter().map(PhaseSpec::name).collect::<Vec<_>>();
        assert_eq!(names(&q.phases), ["baseline", "default"]);
        assert_eq!(names(&q.quota_phases), ["baseline", "default"]);
        assert_eq!((q.rounds, q.phase_secs, q.warmup_secs), (1, 20.0, 5.0));
        assert_eq!(q.cpu_quota, None, "the quota stays lenient");
        // Flags given beside --quick win, wherever they stand.
        let q = p("--rounds 2 --quick --phases baseline").unwrap();
        assert_eq!(
            (q.rounds, names(&q.phases)),
            (2, vec!["baseline".to_string()])
        );
        let a = p("--target-us 300 --brake-us off --seed 2 --seed 3").unwrap();
        assert_eq!(
            (a.target_us, a.brake_us, a.seed),
            (TargetArg::Us(300), Some(None), 3)
        );
    }
}
