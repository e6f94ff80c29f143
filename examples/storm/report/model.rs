//! What the run measured: each phase's rounds (segments), the phases with their rounds merged,
//! the timeline, and the experiment's "done when" bars.

use crate::args::Kind;
use crate::setup::{Setup, Totals};
use crate::Ctx;
use elastic_cpu_examples::interrupt::stopped;
use elastic_cpu_examples::latency::{fmt_us, new_hist, q_us, Latency};
use elastic_cpu_examples::report::plot::Sample;
use elastic_cpu_examples::report::Bar;
use elastic_cpu_examples::stats::mean;
use hdrhistogram::Histogram;

/// One round of one phase.
pub struct Segment {
    pub kind: Kind,
    pub round: usize,
    pub start_ms: u64,
    pub end_ms: u64,
    /// Run-clock times of the storm's steps.
    pub step_ms: Vec<u64>,
    pub skipped: Option<String>,
    pub interrupted: bool,
    /// Length of the measurement window.
    pub measured_secs: f64,
    /// Established requests' latency over the window (machine pauses left out).
    pub hist: Option<Histogram<u64>>,
    pub raw_p99_us: Option<f64>,
    pub pauses: usize,
    pub left_out: u64,
    pub unanswered: u64,
    /// The server's ledger over the window.
    pub setups: Totals,
    /// The clients' side over the window: set up, timed out, rejected, failed to connect.
    pub clients: [u64; 4],
    /// The static phase's rate.
    pub static_rate: Option<f64>,
    /// The gate's mean share over the window.
    pub share_mean: Option<f64>,
}

impl Segment {
    pub fn new(kind: Kind, round: usize) -> Segment {
        Segment {
            kind,
            round,
            start_ms: 0,
            end_ms: 0,
            step_ms: Vec::new(),
            skipped: None,
            interrupted: false,
            measured_secs: 0.0,
            hist: None,
            raw_p99_us: None,
            pauses: 0,
            left_out: 0,
            unanswered: 0,
            setups: Totals::default(),
            clients: [0; 4],
            static_rate: None,
            share_mean: None,
        }
    }

    pub fn completed_per_sec(&self) -> f64 {
        self.setups.completed as f64 / self.measured_secs.max(1e-9)
    }

    pub fn p99_us(&self) -> Option<f64> {
        self.hist.as_ref().and_then(|h| q_us(h, 0.99))
    }
}

/// One sample of the timeline (each second).
pub struct Point {
    pub t_ms: u64,
    pub phase: String,
    pub fg_p99_us: Option<f64>,
    pub completed_per_sec: f64,
    /// Setup CPU (cores) spent on clients that had given up / were still waiting.
    pub wasted_cpu: f64,
    pub useful_cpu: f64,
    pub rejected_per_sec: f64,
    pub expired_per_sec: f64,
    /// Client side: attempts that timed out.
    pub timeouts_per_sec: f64,
    /// CPU (cores) of this process (service, load generator) and of the client process.
    pub server_cpu: f64,
    pub client_cpu: f64,
    /// CPU (cores) of every other process on the machine (other work sharing the cores; the
    /// machine's busy time less both processes', None without /proc/stat).
    pub others_cpu: Option<f64>,
    /// The gate's share and queue length (gated phases).
    pub share: Option<f64>,
    pub queue: Option<f64>,
    pub population: usize,
    pub fg_factor: f64,
}

impl Sample for Point {
    fn t_ms(&self) -> u64 {
        self.t_ms
    }
    fn phase(&self) -> &str {
        &self.phase
    }
}

/// A phase with its rounds merged.
pub struct Phase {
    pub name: String,
    pub kind: Kind,
    pub rounds: usize,
    /// Established requests over the measurement windows (machine pauses left out).
    pub fg: Latency,
    /// Each round's p99.
    pub p99_rounds: Vec<f64>,
    pub secs: f64,
    pub setups: Totals,
    pub clients: [u64; 4],
    pub static_rate: Option<f64>,
    pub share_mean: Option<f64>,
    pub left_out: u64,
    pub pauses: usize,
}

impl Phase {
    pub fn per_sec(&self, n: u64) -> f64 {
        n as f64 / self.secs.max(1e-9)
    }
    pub fn completed_per_sec(&self) -> f64 {
        self.per_sec(self.setups.completed)
    }
    pub fn rejected_per_sec(&self) -> f64 {
        self.per_sec(self.setups.rejected)
    }
    pub fn expired_per_sec(&self) -> f64 {
        self.per_sec(self.setups.expired)
    }
    pub fn wasted_cpu_share(&self) -> Option<f64> {
        self.setups.wasted_share()
    }
}

/// The run's settings.
pub struct Machine {
    pub cpus: usize,
    pub workers: usize,
    pub tokio_unstable: bool,
    pub rate: f64,
    pub work_us: f64,
    pub per_request_cpu_us: Option<f64>,
    pub conns: usize,
    /// "tls+scram" or "hash".
    pub setup: &'static str,
    pub setup_us: f64,
    pub chunk_us: f64,
    pub chunks: u32,
    pub timeout_ms: u64,
    pub think_ms: u64,
    pub requests: u32,
    pub peak: f64,
    pub capacity_clients: usize,
    pub static_share: f64,
    pub gate_deadline_ms: u64,
    pub gate_queue: usize,
    pub gate_crowd_hint: bool,
    /// The controller's target p99 (µs) given by `--target-us` (`None`: the library's).
    pub target_us: Option<u64>,
    pub calm_secs: f64,
    pub capacity_secs: f64,
    pub storm_secs: f64,
    pub warmup_secs: f64,
    pub rounds: usize,
    pub pause_watchdog: bool,
    pub command: String,
}

pub struct Report {
    pub machine: Machine,
    pub capacity: Option<f64>,
    pub segments: Vec<Segment>,
    pub phases: Vec<Phase>,
    pub timeline: Vec<Point>,
    pub interrupted: bool,
}

impl Report {
    pub fn new(ctx: &Ctx, per_request_cpu_us: Option<f64>) -> Report {
        let a = &ctx.args;
        Report {
            machine: Machine {
                cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
                workers: a.fg.workers,
                tokio_unstable: cfg!(tokio_unstable),
                rate: ctx.rate,
                work_us: a.fg.work_us,
                per_request_cpu_us,
                conns: a.fg.conns,
                setup: ctx.setup.name(),
                setup_us: ctx.setup.cpu().as_secs_f64() * 1e6,
                chunk_us: match &ctx.setup {
                    Setup::Hash(c) => c.chunk_us,
                    Setup::Tls { .. } => ctx.setup.cpu().as_secs_f64() * 1e6,
                },
                chunks: match &ctx.setup {
                    Setup::Hash(c) => c.chunks,
                    Setup::Tls { .. } => 1,
                },
                timeout_ms: a.timeout_ms,
                think_ms: a.think_ms,
                requests: a.requests,
                peak: a.peak,
                capacity_clients: a.capacity_clients,
                static_share: a.static_share,
                gate_deadline_ms: a.gate_deadline_ms,
                gate_queue: a.gate_queue,
                gate_crowd_hint: a.gate_crowd_hint,
                target_us: a.target_us,
                calm_secs: a.calm_secs(),
                capacity_secs: a.capacity_secs,
                storm_secs: a.storm_secs,
                warmup_secs: a.warmup_secs,
                rounds: a.rounds,
                pause_watchdog: ctx.pauses.realtime,
                command: std::env::args().collect::<Vec<_>>().join(" "),
            },
            capacity: None,
            segments: Vec::new(),
            phases: Vec::new(),
            timeline: Vec::new(),
            interrupted: false,
        }
    }

    /// Merge each phase's rounds, in the order the phases first ran.
    pub fn finish(&mut self, ctx: &Ctx) {
        self.capacity = ctx.capacity;
        self.interrupted = stopped();
        let mut phases: Vec<Phase> = Vec::new();
        for s in &self.segments {
            if s.skipped.is_some() || s.measured_secs <= 0.0 {
                continue;
            }
            let i = match phases.iter().position(|p| p.kind == s.kind) {
                Some(i) => i,
                None => {
                    phases.push(Phase {
                        name: s.kind.name().to_string(),
                        kind: s.kind,
                        rounds: 0,
                        fg: Latency::default(),
                        p99_rounds: Vec::new(),
                        secs: 0.0,
                        setups: Totals::default(),
                        clients: [0; 4],
                        static_rate: None,
                        share_mean: None,
                        left_out: 0,
                        pauses: 0,
                    });
                    phases.len() - 1
                }
            };
            let p = &mut phases[i];
            p.rounds += 1;
            p.secs += s.measured_secs;
            let t = &mut p.setups;
            let d = &s.setups;
            t.accepted += d.accepted;
            t.gone += d.gone;
            t.rejected += d.rejected;
            t.expired += d.expired;
            t.completed += d.completed;
            t.wasted += d.wasted;
            t.useful_ns += d.useful_ns;
            t.wasted_ns += d.wasted_ns;
            t.requests += d.requests;
            for (a, b) in p.clients.iter_mut().zip(s.clients) {
                *a += b;
            }
            if let Some(r) = s.p99_us() {
                p.p99_rounds.push(r);
            }
            p.left_out += s.left_out;
            p.pauses += s.pauses;
        }
        for p in &mut phases {
            let mut h = new_hist();
            let segs: Vec<&Segment> = self
                .segments
                .iter()
                .filter(|s| s.kind == p.kind && s.skipped.is_none())
                .collect();
            for s in &segs {
                if let Some(x) = &s.hist {
                    let _ = h.add(x);
                }
            }
            p.fg = Latency::of(&h);
            let rates: Vec<f64> = segs.iter().filter_map(|s| s.static_rate).collect();
            p.static_rate = mean(&rates);
            let shares: Vec<f64> = segs.iter().filter_map(|s| s.share_mean).collect();
            p.share_mean = mean(&shares);
        }
        self.phases = phases;
    }

    pub fn find(&self, name: &str) -> Option<&Phase> {
        self.phases.iter().find(|p| p.name == name)
    }

    /// The done-when bars on the merged phases.
    pub fn bars(&self) -> Vec<Bar> {
        let calm = self.find("calm").and_then(|p| p.fg.p99_us);
        let cap = self.capacity;
        let open = self.find("open");
        let stat = self.find("static");
        let gated = self.find("gated");
        let pct = |x: f64| format!("{:.1}%", x * 100.0);
        let mut bars = Vec::new();

        // open melts down.
        let (value, pass) = match (open, calm, cap) {
            (Some(o), Some(c), Some(cap)) => {
                let r = o.fg.p99_us.map_or(f64::INFINITY, |p| p / c);
                let s = o.completed_per_sec() / cap;
                let w = o.wasted_cpu_share().unwrap_or(0.0);
                (
                    format!(
                        "p99 {:.1}x calm's; setups {:.2}x capacity, {} of setup CPU wasted",
                        r,
                        s,
                        pct(w)
                    ),
                    Some(r >= 10.0 || (s < 0.3 && w > 0.5)),
                )
            }
            _ => ("-".into(), None),
        };
        bars.push(Bar {
            what: "open melts down: established p99 >= 10x calm's, or setups/s < 0.3x capacity with most setup CPU wasted".into(),
            value,
            pass,
        });

        // gated holds.
        let (value, pass) = match (gated, calm) {
            (Some(g), Some(c)) => {
                let r = g.fg.p99_us.map_or(f64::INFINITY, |p| p / c);
                (
                    format!("{r:.2}x ({} vs {})", fmt_us(g.fg.p99_us), fmt_us(Some(c))),
                    Some(r <= 1.5),
                )
            }
            _ => ("-".into(), None),
        };
        bars.push(Bar {
            what: "gated: established p99 <= 1.5x calm's".into(),
            value,
            pass,
        });
        let (value, pass) = match (gated, cap) {
            (Some(g), Some(cap)) => {
                let r = g.completed_per_sec() / cap;
                (
                    format!("{r:.2}x ({:.0}/s of {:.0}/s)", g.completed_per_sec(), cap),
                    Some(r >= 0.85),
                )
            }
            _ => ("-".into(), None),
        };
        bars.push(Bar {
            what: "gated: completed setups/s >= 0.85x capacity".into(),
            value,
            pass,
        });
        let (value, pass) = match gated.and_then(|g| g.wasted_cpu_share()) {
            Some(w) => (pct(w), Some(w <= 0.05)),
            None => ("-".into(), None),
        };
        bars.push(Bar {
            what: "gated: wasted setup CPU <= 5%".into(),
            value,
            pass,
        });

        // gated vs static.
        let (value, pass) = match (gated, stat) {
            (Some(g), Some(s)) => match (g.fg.p99_us, s.fg.p99_us) {
                (Some(gp), Some(sp)) => {
                    let (gs, ss) = (g.completed_per_sec(), s.completed_per_sec());
                    // Lower p99 is better, more setups is better; "worse by" as a share of
                    // static's figure.
                    let p99_better = gp < sp;
                    let setups_better = gs > ss;
                    let p99_worse = (gp - sp) / sp;
                    let setups_worse = (ss - gs) / ss.max(1e-9);
                    let pass = (p99_better && setups_worse <= 0.05)
                        || (setups_better && p99_worse <= 0.05);
                    (
                        format!(
                            "p99 {} vs {} ({:+.0}%); setups {:.0}/s vs {:.0}/s ({:+.0}%)",
                            fmt_us(Some(gp)),
                            fmt_us(Some(sp)),
                            p99_worse * 100.0,
                            gs,
                            ss,
                            (gs - ss) / ss.max(1e-9) * 100.0
                        ),
                        Some(pass),
                    )
                }
                _ => ("-".into(), None),
            },
            _ => ("-".into(), None),
        };
        bars.push(Bar {
            what: "gated beats static on p99 or setups/s, no more than 5% worse on the other"
                .into(),
            value,
            pass,
        });
        bars
    }
}
