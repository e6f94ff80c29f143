//! The JSON report (serde): its core (`machine`, `phases`, `timeline`), whose objects keep
//! their keys from run to run, and the extras kept beside it rather than in its objects.

use super::settle::Settle;
use super::{PhaseResult, Point, Report};
use elastic_cpu_examples::latency::Latency;
use elastic_cpu_examples::report::json::{self, opt, Num};
use elastic_cpu_examples::report::Bar;
use elastic_cpu_examples::stats::mean;
use serde::Serialize;

#[derive(Serialize)]
struct Doc<'a> {
    machine: Machine<'a>,
    phases: Vec<Phase<'a>>,
    timeline: Vec<TimePoint<'a>>,
    timeline_sched_split: Vec<SchedSplit>,
    timeline_signal: Vec<SignalPoint>,
    phase_extras: Vec<PhaseExtras<'a>>,
    segments: Vec<Segment<'a>>,
    controller_speed: Vec<Speed<'a>>,
    bars: Vec<BarJ<'a>>,
    bars_median_of_rounds: Vec<BarJ<'a>>,
    interrupted: bool,
}

#[derive(Serialize)]
struct Machine<'a> {
    cpus: usize,
    workers: usize,
    cpus_used: Num,
    os: &'a str,
    arch: &'a str,
    tokio_unstable: bool,
    fg_rate_per_sec: Num,
    fg_work_us: Num,
    fg_process_cpu_per_request_us: Option<Num>,
    fg_connections: usize,
    elastic_tasks: usize,
    table_rows: usize,
    chunk_rows: usize,
    chunk_cpu_us: Num,
    rows_per_cpu_sec: Num,
    phase_secs: Num,
    warmup_secs: Num,
    target_p99_us: Option<u64>,
    target_source: &'a str,
    slice_ms: u64,
    quantum_us: u64,
    static_limit: Num,
    neighbour: Option<Num>,
    rounds: usize,
    command: &'a str,
}

/// A phase that ran, all rounds merged.
#[derive(Serialize)]
struct Phase<'a> {
    name: &'a str,
    fg: Latency,
    sched: Sched,
    elastic: Elastic,
    limit: Limit,
    env: &'static str,
    quota_cpus: Option<Num>,
    process_cpus: Option<Num>,
    throttled: Throttled,
    /// The outlier trap's polls over its threshold, by spawn site, most time held first.
    outliers: Vec<OutlierJ>,
    /// The probe windows they were read from (seconds); windows with a machine pause in them
    /// are left out and counted.
    outlier_secs: Num,
    outlier_windows_paused: u64,
    /// Task polls per second on the runtime under test (mean of one reading per window).
    polls_per_sec: Option<Num>,
    /// The `culprit` phase: the planted task's longest hold on its own clock (µs), over the
    /// same windows: what the trap's worst poll for its line is read against.
    #[serde(skip_serializing_if = "Option::is_none")]
    planted_longest_hold_us: Option<Num>,
    /// The `classes` phase: each class while all three were busy, and after the first
    /// (`backup`) stopped; how long the second took to reach its new part (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    classes: Option<Vec<ClassJ>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    after_backup: Option<Vec<ClassJ>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    export_rise_ms: Option<u64>,
}

#[derive(Serialize)]
struct ClassJ {
    name: &'static str,
    weight: Num,
    cap: Option<Num>,
    cpu_share: Num,
    entitled_share: Num,
    /// The part the library's split gave it (mean over the samples).
    part_share: Num,
    longest_wait_ms: Num,
}

impl ClassJ {
    fn all(stats: &[crate::classes::ClassStats]) -> Vec<ClassJ> {
        (stats.iter())
            .map(|c| ClassJ {
                name: c.name,
                weight: Num(c.weight),
                cap: opt(c.cap),
                cpu_share: Num(c.cpu_share),
                entitled_share: Num(c.entitled_share),
                part_share: Num(c.part_share),
                longest_wait_ms: Num(c.longest_wait_ms),
            })
            .collect()
    }
}

#[derive(Serialize)]
struct OutlierJ {
    spawned_at: String,
    kind: &'static str,
    count: u64,
    worst_poll_us: Num,
    held_ms: Num,
    waits_held: u64,
}

/// The quota cgroup's throttling over the measurement window (zeros on the host).
#[derive(Serialize)]
struct Throttled {
    periods: u64,
    ms: Num,
    /// Enforcement periods in the window (beside the core's `periods` and `ms`: their
    /// denominator).
    of_periods: u64,
}

#[derive(Serialize)]
struct Sched {
    p99_us: Option<Num>,
}

#[derive(Serialize)]
struct Elastic {
    rows_per_sec: Num,
    cpu_share: Num,
}

#[derive(Serialize)]
struct Limit {
    mean: Option<Num>,
    min: Option<Num>,
    max: Option<Num>,
}

#[derive(Serialize)]
struct TimePoint<'a> {
    t_ms: u64,
    phase: &'a str,
    limit: Option<Num>,
    sched_p99_us: Option<Num>,
    fg_p99_us: Option<Num>,
    elastic_rows_per_sec: Num,
}

/// The governor's signal and its components, per timeline sample.
#[derive(Serialize)]
struct SignalPoint {
    t_ms: u64,
    signal_p99_us: Option<Num>,
    signal_source: &'static str,
    io_p99_us: Option<Num>,
    run_queue_delay_us: Option<Num>,
    bystander_delay_us: Option<Num>,
    /// The library's quiet readings of the two delays (elastic work held).
    quiet_run_queue_delay_us: Option<Num>,
    quiet_bystander_delay_us: Option<Num>,
    run_queue_wait: Option<Num>,
    elastic_run_queue_wait: Option<Num>,
    /// Inside a quota: the headroom cap on elastic work, on the limit's scale.
    quota_headroom_share: Option<Num>,
    /// The own class's and the idle pool's limits, whichever the phase's work ran in.
    own_share: Option<Num>,
    idle_share: Option<Num>,
}

#[derive(Serialize)]
struct SchedSplit {
    t_ms: u64,
    sched_fg_p99_us: Option<Num>,
    sched_elastic_p99_us: Option<Num>,
}

/// Every phase (skipped ones too), all rounds merged: what the core's phase object leaves out.
#[derive(Serialize)]
struct PhaseExtras<'a> {
    name: &'a str,
    env: &'static str,
    target_p99_us: Option<u64>,
    skipped: Option<&'a str>,
    rounds_fg_p99_us: Vec<Num>,
    fg_p99_median_of_rounds_us: Option<Num>,
    cpu_share_from_rows: Option<Num>,
    measured_secs: Num,
    unanswered: u64,
    process_cpu_share: Option<Num>,
    machine_busy_share: Option<Num>,
    pacer_used_share: Option<Num>,
    pauses: usize,
    paused_ms: Num,
    requests_left_out: u64,
    fg_p99_with_pauses_us: Option<Num>,
    brakes: u64,
}

/// One phase of one round.
#[derive(Serialize)]
struct Segment<'a> {
    name: &'a str,
    env: &'static str,
    process_cpus: Option<Num>,
    throttled_periods: Option<u64>,
    throttled_ms: Option<Num>,
    round: usize,
    skipped: Option<&'a str>,
    interrupted: bool,
    start_ms: u64,
    end_ms: u64,
    step_ms: &'a [u64],
    measured_secs: Num,
    requests: u64,
    fg_p50_us: Option<Num>,
    fg_p99_us: Option<Num>,
    sched_p99_us: Option<Num>,
    rows_per_sec: Num,
    limit_mean: Option<Num>,
    unanswered: u64,
    process_cpu_share: Option<Num>,
    machine_busy_share: Option<Num>,
    pacer_used_share: Option<Num>,
}

#[derive(Serialize)]
struct Speed<'a> {
    phase: &'a str,
    profile: &'a str,
    kind: &'a str,
    start_limit: Option<Num>,
    end_limit: Option<Num>,
    other_side_end_limit: Option<Num>,
    settle_secs: Vec<Option<Num>>,
    move_secs: Vec<Option<Num>>,
    step_levels: Vec<Option<Num>>,
    fg_p99_5s_after_step_us: Option<Num>,
    under_target_secs_after_up: Option<Num>,
    recovered_secs_after_down: Option<Num>,
    tail_peak_to_peak: Num,
    tail_reversals: usize,
}

#[derive(Serialize)]
struct BarJ<'a> {
    bar: &'a str,
    value: &'a str,
    pass: Option<bool>,
}

impl<'a> Machine<'a> {
    fn of(r: &'a Report) -> Self {
        let m = &r.machine;
        Machine {
            cpus: m.cpus,
            workers: m.workers,
            cpus_used: Num(m.cpus_used),
            os: &m.os,
            arch: &m.arch,
            tokio_unstable: m.tokio_unstable,
            fg_rate_per_sec: Num(m.rate),
            fg_work_us: Num(m.work_us),
            fg_process_cpu_per_request_us: opt(m.per_request_cpu_us),
            fg_connections: m.conns,
            elastic_tasks: m.elastic_tasks,
            table_rows: m.rows,
            chunk_rows: m.chunk_rows,
            chunk_cpu_us: Num(m.chunk_cpu_us),
            rows_per_cpu_sec: Num(m.rows_per_cpu_sec),
            phase_secs: Num(m.phase_secs),
            warmup_secs: Num(m.warmup_secs),
            target_p99_us: m.target_us,
            target_source: &m.target_source,
            slice_ms: m.slice_ms,
            quantum_us: m.quantum_us,
            static_limit: Num(m.static_limit),
            neighbour: m.neighbour.map(Num),
            rounds: r.rounds(),
            command: &m.command,
        }
    }
}

impl<'a> Phase<'a> {
    fn of(p: &'a PhaseResult) -> Self {
        Phase {
            name: &p.name,
            fg: p.fg,
            sched: Sched {
                p99_us: opt(p.sched_p99_us),
            },
            elastic: Elastic {
                rows_per_sec: Num(p.rows_per_sec),
                cpu_share: Num(p.cpu_share),
            },
            limit: Limit {
                mean: opt(p.limit_mean),
                min: opt(p.limit_min),
                max: opt(p.limit_max),
            },
            env: p.env.name(),
            quota_cpus: opt(p.quota_cpus),
            process_cpus: opt(p.process_cpus),
            throttled: Throttled {
                periods: p.throttled_periods.unwrap_or(0),
                ms: Num(p.throttled_ms.unwrap_or(0.0)),
                of_periods: p.periods.unwrap_or(0),
            },
            outliers: (p.outliers.iter())
                .map(|o| OutlierJ {
                    spawned_at: o.spawned_at.clone(),
                    kind: if o.elastic { "elastic" } else { "foreground" },
                    count: o.count,
                    worst_poll_us: Num(o.worst_poll_us),
                    held_ms: Num(o.held_ms),
                    waits_held: o.waits_held,
                })
                .collect(),
            outlier_secs: Num(p.outlier_secs),
            outlier_windows_paused: p.outlier_windows_paused,
            polls_per_sec: opt(mean(&p.polls_per_sec)),
            planted_longest_hold_us: p.planted_longest_us.map(Num),
            classes: p.classes.as_ref().map(|c| ClassJ::all(&c.busy)),
            after_backup: (p.classes.as_ref())
                .and_then(|c| c.after_first.as_deref())
                .map(ClassJ::all),
            export_rise_ms: p.classes.as_ref().and_then(|c| c.rise_ms),
        }
    }
}

impl<'a> TimePoint<'a> {
    fn of(t: &'a Point) -> Self {
        TimePoint {
            t_ms: t.t_ms,
            phase: &t.phase,
            limit: opt(t.limit),
            sched_p99_us: opt(t.sched_p99_us),
            fg_p99_us: opt(t.fg_p99_us),
            elastic_rows_per_sec: Num(t.elastic_rows_per_sec),
        }
    }
}

impl<'a> PhaseExtras<'a> {
    fn of(p: &'a PhaseResult) -> Self {
        PhaseExtras {
            name: &p.name,
            env: p.env.name(),
            target_p99_us: p.target_us,
            skipped: p.skipped.as_deref(),
            rounds_fg_p99_us: p.p99_rounds.iter().copied().map(Num).collect(),
            fg_p99_median_of_rounds_us: opt(p.p99_median),
            cpu_share_from_rows: opt(p.cpu_share_from_rows),
            measured_secs: Num(p.measured_secs),
            unanswered: p.unanswered,
            process_cpu_share: opt(p.process_cpu_share),
            machine_busy_share: opt(p.machine_busy_share),
            pacer_used_share: opt(p.used_share),
            pauses: p.pauses,
            paused_ms: Num(p.paused_ms),
            requests_left_out: p.left_out,
            fg_p99_with_pauses_us: opt(p.raw_p99_us),
            brakes: p.brakes,
        }
    }
}

impl<'a> Segment<'a> {
    fn of(p: &'a PhaseResult) -> Self {
        Segment {
            name: &p.name,
            env: p.env.name(),
            process_cpus: opt(p.process_cpus),
            throttled_periods: p.throttled_periods,
            throttled_ms: opt(p.throttled_ms),
            round: p.round + 1,
            skipped: p.skipped.as_deref(),
            interrupted: p.interrupted,
            start_ms: p.start_ms,
            end_ms: p.end_ms,
            step_ms: &p.step_ms,
            measured_secs: Num(p.measured_secs),
            requests: p.fg.requests,
            fg_p50_us: opt(p.fg.p50_us),
            fg_p99_us: opt(p.fg.p99_us),
            sched_p99_us: opt(p.sched_p99_us),
            rows_per_sec: Num(p.rows_per_sec),
            limit_mean: opt(p.limit_mean),
            unanswered: p.unanswered,
            process_cpu_share: opt(p.process_cpu_share),
            machine_busy_share: opt(p.machine_busy_share),
            pacer_used_share: opt(p.used_share),
        }
    }
}

impl<'a> Speed<'a> {
    fn of(st: &'a Settle) -> Self {
        Speed {
            phase: &st.phase,
            profile: st.profile(),
            kind: st.kind.name(),
            start_limit: opt(st.start_limit),
            end_limit: opt(st.end_limit),
            other_side_end_limit: opt(st.sibling_end),
            settle_secs: st.settle_s.iter().map(|&x| opt(x)).collect(),
            move_secs: st.move_s.iter().map(|&x| opt(x)).collect(),
            step_levels: st.step_levels.iter().map(|&x| opt(x)).collect(),
            fg_p99_5s_after_step_us: opt(st.fg_p99_after_step_us),
            under_target_secs_after_up: opt(st.under_target_s),
            recovered_secs_after_down: opt(st.recovered_s),
            tail_peak_to_peak: Num(st.tail_p2p),
            tail_reversals: st.reversals,
        }
    }
}

impl<'a> BarJ<'a> {
    fn of(b: &'a Bar) -> Self {
        BarJ {
            bar: &b.what,
            value: &b.value,
            pass: b.pass,
        }
    }
}

impl Report {
    pub fn to_json(&self) -> String {
        let settles = self.settles();
        let bars = self.bars_on(false);
        let bars_median = self.bars_on(true);
        let doc = Doc {
            machine: Machine::of(self),
            phases: (self.phases.iter())
                .filter(|p| p.skipped.is_none())
                .map(Phase::of)
                .collect(),
            timeline: self.timeline.iter().map(TimePoint::of).collect(),
            timeline_sched_split: (self.timeline.iter())
                .map(|t| SchedSplit {
                    t_ms: t.t_ms,
                    sched_fg_p99_us: opt(t.sched_fg_p99_us),
                    sched_elastic_p99_us: opt(t.sched_elastic_p99_us),
                })
                .collect(),
            timeline_signal: (self.timeline.iter())
                .map(|t| SignalPoint {
                    t_ms: t.t_ms,
                    signal_p99_us: opt(t.signal.signal_p99_us),
                    signal_source: t.signal.source,
                    io_p99_us: opt(t.signal.io_p99_us),
                    run_queue_delay_us: opt(t.signal.rq_delay_us),
                    bystander_delay_us: opt(t.signal.bystander_delay_us),
                    quiet_run_queue_delay_us: opt(t.signal.quiet_rq_delay_us),
                    quiet_bystander_delay_us: opt(t.signal.quiet_bystander_delay_us),
                    run_queue_wait: opt(t.signal.rq_wait),
                    elastic_run_queue_wait: opt(t.signal.elastic_rq_wait),
                    quota_headroom_share: opt(t.headroom_share),
                    own_share: opt(t.own_share),
                    idle_share: opt(t.idle_share),
                })
                .collect(),
            phase_extras: self.phases.iter().map(PhaseExtras::of).collect(),
            segments: self.segments.iter().map(Segment::of).collect(),
            controller_speed: settles.iter().map(Speed::of).collect(),
            bars: bars.iter().map(BarJ::of).collect(),
            bars_median_of_rounds: bars_median.iter().map(BarJ::of).collect(),
            interrupted: self.interrupted,
        };
        json::to_string(&doc)
    }
}
