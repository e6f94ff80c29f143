//! The JSON report (serde): its core (`capacity`, `phases` with `established` and `setups`),
//! whose objects keep their keys from run to run, and the extras beside it (`machine`,
//! per-phase `extra`, `rounds`, `timeline`, `bars`).

use super::{Phase, Report, Segment};
use elastic_cpu_examples::report::json::{self, opt, Num};
use elastic_cpu_examples::report::Bar;
use serde::Serialize;

#[derive(Serialize)]
struct Doc<'a> {
    capacity: Capacity,
    phases: Vec<PhaseJ<'a>>,
    machine: Machine<'a>,
    rounds: Vec<RoundJ<'a>>,
    timeline: Vec<PointJ<'a>>,
    bars: Vec<Bar>,
    interrupted: bool,
}

#[derive(Serialize)]
struct Capacity {
    setups_per_sec: Option<Num>,
}

#[derive(Serialize)]
struct PhaseJ<'a> {
    name: &'a str,
    established: Established,
    setups: Setups,
    /// Beyond the core.
    extra: Extra,
}

#[derive(Serialize)]
struct Established {
    requests: u64,
    p50_us: Option<Num>,
    p99_us: Option<Num>,
}

#[derive(Serialize)]
struct Setups {
    completed_per_sec: Num,
    rejected_per_sec: Num,
    expired_per_sec: Num,
    wasted_cpu_share: Option<Num>,
    /// Server CPU per setup run (completed or wasted), measured on the worker threads.
    server_cpu_per_setup_us: Option<Num>,
}

#[derive(Serialize)]
struct Extra {
    rounds: usize,
    measured_secs: Num,
    p999_us: Option<Num>,
    p99_us_per_round: Vec<Num>,
    accepted: u64,
    client_gone_before_hello: u64,
    completed: u64,
    wasted: u64,
    rejected: u64,
    expired: u64,
    useful_setup_cpu_secs: Num,
    wasted_setup_cpu_secs: Num,
    client_set_up: u64,
    client_timeouts: u64,
    client_rejected: u64,
    client_connect_errors: u64,
    static_rate_per_sec: Option<Num>,
    gate_share_mean: Option<Num>,
    machine_pauses: usize,
    requests_left_out_for_pauses: u64,
}

#[derive(Serialize)]
struct Machine<'a> {
    cpus: usize,
    workers: usize,
    tokio_unstable: bool,
    fg_rate_per_sec: Num,
    fg_work_us: Num,
    fg_process_cpu_per_request_us: Option<Num>,
    fg_connections: usize,
    /// "tls+scram" or "hash".
    setup: &'a str,
    setup_cpu_us: Num,
    setup_chunk_us: Num,
    setup_chunks: u32,
    client_timeout_ms: u64,
    client_think_ms: u64,
    requests_per_session: u32,
    peak_x_capacity: Num,
    capacity_clients: usize,
    static_share_of_capacity: Num,
    gate_deadline_ms: u64,
    gate_max_queue: usize,
    gate_crowd_hint: bool,
    target_us: Option<u64>,
    calm_secs: Num,
    capacity_secs: Num,
    storm_secs: Num,
    warmup_secs: Num,
    rounds: usize,
    pause_watchdog: bool,
    command: &'a str,
}

#[derive(Serialize)]
struct RoundJ<'a> {
    name: &'a str,
    round: usize,
    start_ms: u64,
    end_ms: u64,
    skipped: Option<&'a str>,
    p99_us: Option<Num>,
    raw_p99_us: Option<Num>,
    completed_per_sec: Num,
    rejected_per_sec: Num,
    expired_per_sec: Num,
    wasted_cpu_share: Option<Num>,
    gate_share_mean: Option<Num>,
}

#[derive(Serialize)]
struct PointJ<'a> {
    t_ms: u64,
    phase: &'a str,
    established_p99_us: Option<Num>,
    completed_per_sec: Num,
    wasted_setup_cpu: Num,
    useful_setup_cpu: Num,
    rejected_per_sec: Num,
    expired_per_sec: Num,
    client_timeouts_per_sec: Num,
    service_process_cpu: Num,
    client_process_cpu: Num,
    other_processes_cpu: Option<Num>,
    gate_share: Option<Num>,
    gate_queue: Option<Num>,
    clients: usize,
    fg_factor: Num,
}

fn phase_j(p: &Phase) -> PhaseJ<'_> {
    let s = &p.setups;
    PhaseJ {
        name: &p.name,
        established: Established {
            requests: p.fg.requests,
            p50_us: opt(p.fg.p50_us),
            p99_us: opt(p.fg.p99_us),
        },
        setups: Setups {
            completed_per_sec: Num(p.completed_per_sec()),
            rejected_per_sec: Num(p.rejected_per_sec()),
            expired_per_sec: Num(p.expired_per_sec()),
            wasted_cpu_share: opt(p.wasted_cpu_share()),
            server_cpu_per_setup_us: opt(p.setups.cpu_per_setup_us()),
        },
        extra: Extra {
            rounds: p.rounds,
            measured_secs: Num(p.secs),
            p999_us: opt(p.fg.p999_us),
            p99_us_per_round: p.p99_rounds.iter().map(|&x| Num(x)).collect(),
            accepted: s.accepted,
            client_gone_before_hello: s.gone,
            completed: s.completed,
            wasted: s.wasted,
            rejected: s.rejected,
            expired: s.expired,
            useful_setup_cpu_secs: Num(s.useful_ns as f64 / 1e9),
            wasted_setup_cpu_secs: Num(s.wasted_ns as f64 / 1e9),
            client_set_up: p.clients[0],
            client_timeouts: p.clients[1],
            client_rejected: p.clients[2],
            client_connect_errors: p.clients[3],
            static_rate_per_sec: opt(p.static_rate),
            gate_share_mean: opt(p.share_mean),
            machine_pauses: p.pauses,
            requests_left_out_for_pauses: p.left_out,
        },
    }
}

fn round_j(s: &Segment) -> RoundJ<'_> {
    let secs = s.measured_secs.max(1e-9);
    RoundJ {
        name: s.kind.name(),
        round: s.round,
        start_ms: s.start_ms,
        end_ms: s.end_ms,
        skipped: s.skipped.as_deref(),
        p99_us: opt(s.p99_us()),
        raw_p99_us: opt(s.raw_p99_us),
        completed_per_sec: Num(s.setups.completed as f64 / secs),
        rejected_per_sec: Num(s.setups.rejected as f64 / secs),
        expired_per_sec: Num(s.setups.expired as f64 / secs),
        wasted_cpu_share: opt(s.setups.wasted_share()),
        gate_share_mean: opt(s.share_mean),
    }
}

impl Report {
    pub fn to_json(&self) -> String {
        let m = &self.machine;
        let doc = Doc {
            capacity: Capacity {
                setups_per_sec: opt(self.capacity),
            },
            phases: self.phases.iter().map(phase_j).collect(),
            machine: Machine {
                cpus: m.cpus,
                workers: m.workers,
                tokio_unstable: m.tokio_unstable,
                fg_rate_per_sec: Num(m.rate),
                fg_work_us: Num(m.work_us),
                fg_process_cpu_per_request_us: opt(m.per_request_cpu_us),
                fg_connections: m.conns,
                setup: m.setup,
                setup_cpu_us: Num(m.setup_us),
                setup_chunk_us: Num(m.chunk_us),
                setup_chunks: m.chunks,
                client_timeout_ms: m.timeout_ms,
                client_think_ms: m.think_ms,
                requests_per_session: m.requests,
                peak_x_capacity: Num(m.peak),
                capacity_clients: m.capacity_clients,
                static_share_of_capacity: Num(m.static_share),
                gate_deadline_ms: m.gate_deadline_ms,
                gate_max_queue: m.gate_queue,
                gate_crowd_hint: m.gate_crowd_hint,
                target_us: m.target_us,
                calm_secs: Num(m.calm_secs),
                capacity_secs: Num(m.capacity_secs),
                storm_secs: Num(m.storm_secs),
                warmup_secs: Num(m.warmup_secs),
                rounds: m.rounds,
                pause_watchdog: m.pause_watchdog,
                command: &m.command,
            },
            rounds: self.segments.iter().map(round_j).collect(),
            timeline: self
                .timeline
                .iter()
                .map(|p| PointJ {
                    t_ms: p.t_ms,
                    phase: &p.phase,
                    established_p99_us: opt(p.fg_p99_us),
                    completed_per_sec: Num(p.completed_per_sec),
                    wasted_setup_cpu: Num(p.wasted_cpu),
                    useful_setup_cpu: Num(p.useful_cpu),
                    rejected_per_sec: Num(p.rejected_per_sec),
                    expired_per_sec: Num(p.expired_per_sec),
                    client_timeouts_per_sec: Num(p.timeouts_per_sec),
                    service_process_cpu: Num(p.server_cpu),
                    client_process_cpu: Num(p.client_cpu),
                    other_processes_cpu: opt(p.others_cpu),
                    gate_share: opt(p.share),
                    gate_queue: opt(p.queue),
                    clients: p.population,
                    fg_factor: Num(p.fg_factor),
                })
                .collect(),
            bars: self.bars(),
            interrupted: self.interrupted,
        };
        json::to_string(&doc)
    }
}
