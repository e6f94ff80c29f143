//! Command-line flags of the storm example (clap, derive API).

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use elastic_cpu_examples::cli::{
    at_least_1, non_negative, number, parse_or_exit, positive, share, ForegroundArgs,
};
use elastic_cpu_examples::report::ReportArgs;

/// What a phase does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The foreground alone.
    Calm,
    /// Setups in a closed loop beside the foreground: what this machine can set up per second.
    Capacity,
    /// The storm, every connection set up at once.
    Open,
    /// The storm, setups admitted at a fixed rate (`governor`), the rest rejected.
    Static,
    /// The storm through the library's connection gate.
    Gated,
}

pub const ALL_KINDS: [Kind; 5] = [
    Kind::Calm,
    Kind::Capacity,
    Kind::Open,
    Kind::Static,
    Kind::Gated,
];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Calm => "calm",
            Kind::Capacity => "capacity",
            Kind::Open => "open",
            Kind::Static => "static",
            Kind::Gated => "gated",
        }
    }

    fn parse(s: &str) -> Result<Kind, String> {
        ALL_KINDS
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let all: Vec<&str> = ALL_KINDS.iter().map(|k| k.name()).collect();
                format!("unknown phase {s:?}: expected one of {}", all.join(", "))
            })
    }

    /// The phases that run the storm.
    pub fn storm(self) -> bool {
        matches!(self, Kind::Open | Kind::Static | Kind::Gated)
    }
}

const ABOUT: &str = "\
Connection storms: a loopback service whose established connections carry ~50 us requests at a
steady rate, and a population of connecting clients (a separate process) whose every setup costs
a TLS 1.3 handshake and a SCRAM-SHA-256 password check (a few ms of server CPU); clients that get no answer within their timeout drop the
connection and reconnect at once. The population steps up to ~10x what the machine can set up per
second, the foreground rate rises 1.5x halfway through the storm, then both step back down.
Prints a line a second and a summary, writes a JSON and an HTML report.";

const PHASES_HELP: &str = "\
Phases (run in the order given, the list repeated --rounds times):
  calm      the foreground alone, with the storm phases' 1.5x foreground step
  capacity  + setups in a closed loop, no timeouts: setups per second this machine can do
            beside the same foreground (its 1.5x step too)
  open      + the storm, no gate
  static    + the storm, setups at a fixed rate (governor), the rest rejected with a hint
  gated     + the storm through elastic-cpu's connection gate (ours)
";

/// Parsed flags.
#[derive(Clone, Debug, Parser)]
#[command(name = "storm", about = ABOUT, before_help = PHASES_HELP)]
pub struct Args {
    /// comma-separated phases
    #[arg(long, value_name = "LIST", default_value = "calm,capacity,open,static,gated", value_parser = phase_list)]
    pub phases: std::vec::Vec<Kind>,
    /// a short run, about 40 s, to see the report (its figures noisier than the default's):
    /// one round, capacity 4 s, storm phases 8 s, warm-up 1 s; flags given beside it override
    /// these
    #[arg(long)]
    pub quick: bool,
    /// run the phase list N times, interleaved, and merge each phase's rounds
    #[arg(long, value_name = "N", default_value = "2", default_value_if("quick", "true", Some("1")), value_parser = at_least_1)]
    pub rounds: usize,
    /// length of the calm phase, warm-up included [default: the warm-up and as long as the
    /// storm phases' measurement window, so both p99s are taken over the same span, with the
    /// same foreground step]
    #[arg(long, value_name = "N", value_parser = positive)]
    pub calm_secs: Option<f64>,
    /// length of the capacity phase, warm-up included
    #[arg(long, value_name = "N", default_value = "8", default_value_if("quick", "true", Some("4")), value_parser = positive)]
    pub capacity_secs: f64,
    /// length of each storm phase (open, static, gated)
    #[arg(long, value_name = "N", default_value = "24", default_value_if("quick", "true", Some("8")), value_parser = positive)]
    pub storm_secs: f64,
    /// start of the calm and capacity phases left out of their summary
    #[arg(long, value_name = "N", default_value = "2", default_value_if("quick", "true", Some("1")), value_parser = non_negative)]
    pub warmup_secs: f64,
    #[command(flatten)]
    pub fg: ForegroundArgs,
    /// foreground share of the machine's CPU at calm when --rate is not given
    #[arg(long, value_name = "F", default_value = "0.25", value_parser = share)]
    pub fg_load: f64,
    /// what a connection setup is: `tls` (a TLS 1.3 handshake with rustls, then a SCRAM-SHA-256
    /// exchange whose server side derives the password's key with PBKDF2 at 4096 iterations),
    /// or `hash` (a synthetic setup: --setup-us of an iterated hash in --chunk-us chunks)
    #[arg(long, value_name = "KIND", default_value = "tls", value_parser = ["tls", "hash"])]
    pub setup: String,
    /// --setup hash: server CPU per connection setup in microseconds
    #[arg(long, value_name = "N", default_value = "1000", value_parser = positive)]
    pub setup_us: f64,
    /// --setup hash: CPU per hash chunk in microseconds (the setup yields or paces between
    /// chunks)
    #[arg(long, value_name = "N", default_value = "50", value_parser = positive)]
    pub chunk_us: f64,
    /// a connecting client's timeout in milliseconds
    #[arg(long, value_name = "N", default_value = "500", value_parser = at_least_1_u64)]
    pub timeout_ms: u64,
    /// a client's mean pause between sessions in milliseconds
    #[arg(long, value_name = "N", default_value = "1000", value_parser = at_least_1_u64)]
    pub think_ms: u64,
    /// requests per session on a new connection (each --work-us of CPU, as the foreground's)
    #[arg(long, value_name = "N", default_value = "3")]
    pub requests: u32,
    /// the storm's peak: connection demand as a multiple of the measured capacity
    #[arg(long, value_name = "X", default_value = "10", value_parser = positive)]
    pub peak: f64,
    /// closed-loop clients of the capacity phase
    #[arg(long, value_name = "N", default_value = "16", value_parser = at_least_1)]
    pub capacity_clients: usize,
    /// the static phase's fixed rate as a share of the measured capacity
    #[arg(long, value_name = "F", default_value = "0.8", value_parser = positive)]
    pub static_share: f64,
    /// the controller's target p99 of scheduling latency in µs, which steers the gate's share
    /// [default: the library's, 1 ms]
    #[arg(long, value_name = "N", value_parser = at_least_1_u64)]
    pub target_us: Option<u64>,
    /// the gate's deadline in milliseconds: longest wait before a setup starts
    #[arg(long, value_name = "N", default_value = "250", value_parser = at_least_1_u64)]
    pub gate_deadline_ms: u64,
    /// how the connecting clients retry: `eager` (reconnect at once after a timeout, wait exactly
    /// the server's hint after a refusal) or `polite` (the library's `RetryBudget`: the hint with
    /// jitter, backoff after a timeout, attempts held locally once they exceed 2x the accepted
    /// ones over 10 s)
    #[arg(long, value_name = "KIND", default_value = "eager", value_parser = ["eager", "polite"])]
    pub clients: String,
    /// gated phase: where admitted TLS setups run: `idle` (the library's idle-priority pool, for
    /// setups that are long library calls on a bare host: the OS cuts a call whenever the
    /// foreground needs the core) or `runtime` (the service's own workers, where the quantum
    /// cannot cut a call and the gate's holder cap is all that keeps a worker free)
    #[arg(long, value_name = "WHERE", default_value = "idle", value_parser = ["idle", "runtime"])]
    pub gate_setups: String,
    /// turn off the idle pool's moving of a runtime worker queued behind another
    /// (`Enforcement::unstack_workers`): for an A/B
    #[arg(long)]
    pub no_unstack: bool,
    /// the gate's queue bound
    #[arg(long, value_name = "N", default_value = "512", value_parser = at_least_1)]
    pub gate_queue: usize,
    /// gated phase: send rejected clients the larger of the gate's retry-after hint and a
    /// crowd hint (rejects per second / admissions per second, +-50 % jitter, the static
    /// phase's rule) [default: the gate's hint alone]
    #[arg(long)]
    pub gate_crowd_hint: bool,
    #[command(flatten)]
    pub reports: ReportArgs,
    /// RNG seed
    #[arg(long, value_name = "N", default_value = "1")]
    pub seed: u64,
}

fn at_least_1_u64(v: &str) -> Result<u64, String> {
    match number(v)? {
        0 => Err("must be at least 1".into()),
        x => Ok(x),
    }
}

fn phase_list(v: &str) -> Result<Vec<Kind>, String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(Kind::parse)
        .collect()
}

impl Args {
    /// The calm phase's length: as given, or the warm-up plus the storm phases' window.
    pub fn calm_secs(&self) -> f64 {
        self.calm_secs.unwrap_or_else(|| {
            let (from, to) = crate::phase::STORM_WINDOW;
            self.warmup_secs + (to - from) * self.storm_secs
        })
    }

    /// Parse the process's flags, or exit (see [`parse_or_exit`]).
    pub fn from_env() -> Args {
        parse_or_exit(Args::finish)
    }

    fn finish(self) -> Result<Args, clap::Error> {
        let err = |msg: String| Args::command().error(ErrorKind::ValueValidation, msg);
        if self.phases.is_empty() {
            return Err(err("no phases to run".into()));
        }
        if self.warmup_secs >= self.calm_secs() || self.warmup_secs >= self.capacity_secs {
            return Err(err(
                "--warmup-secs must be shorter than --calm-secs and --capacity-secs".into(),
            ));
        }
        if self.chunk_us > self.setup_us {
            return Err(err("--chunk-us must not exceed --setup-us".into()));
        }
        let storm = self.phases.iter().any(|k| k.storm());
        let capacity = self.phases.iter().position(|&k| k == Kind::Capacity);
        let first_storm = self.phases.iter().position(|k| k.storm());
        if storm && !matches!((capacity, first_storm), (Some(c), Some(s)) if c < s) {
            return Err(err(
                "the storm phases are sized from capacity: list capacity before them".into(),
            ));
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(flags: &str) -> Result<Args, String> {
        let argv = std::iter::once("storm").chain(flags.split_whitespace());
        elastic_cpu_examples::cli::parse_from::<Args, _, _>(argv)
            .and_then(Args::finish)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn quick_shortens_the_run_and_flags_beside_it_win() {
        let a = parse("").unwrap();
        let lengths = |a: &Args| (a.rounds, a.capacity_secs, a.storm_secs, a.warmup_secs);
        assert_eq!(lengths(&a), (2, 8.0, 24.0, 2.0));
        let q = parse("--quick").unwrap();
        assert_eq!(lengths(&q), (1, 4.0, 8.0, 1.0));
        assert!((q.calm_secs() - 7.4).abs() < 1e-9, "{}", q.calm_secs());
        let q = parse("--storm-secs 12 --quick").unwrap();
        assert_eq!(lengths(&q), (1, 4.0, 12.0, 1.0));
    }
}
