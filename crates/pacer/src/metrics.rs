//! Export through the `metrics` facade, once per governor tick, from the tick's [`Snapshot`].
//! The application installs the exporter; with none installed these calls cost next to
//! nothing. A panic in the installed recorder costs that tick's metrics, not the governor (it
//! is caught and counted: `elastic_cpu_recorder_panics_total`); under `panic = "abort"` it
//! aborts the process, as any panic does.
//!
//! Names follow Prometheus': the unit, then `_total` for a counter. Whatever only grows is a
//! counter, set to the running total each tick, so that `rate()` and counter resets work and
//! an OpenTelemetry bridge sees a monotonic sum. The facade's counters hold integers, so the
//! CPU-time and wait totals count whole microseconds (`*_microseconds_total`, unit
//! microseconds): a counter of whole seconds would drop everything below a second, and a gauge
//! would be typed wrong. A microsecond is finer than any tick (1 ms at least) needs, and a `u64`
//! of them lasts over 500 000 years; `rate(x[1m]) / 1e6` is in CPUs.
//! Levels (shares, latencies, waits now) are gauges in seconds or ratios. Labels are names:
//! `class` a class's, `gate` a gate's (`GateSettings::name`).

use metrics::{counter, describe_counter, describe_gauge, gauge, Unit};

use crate::snapshot::Snapshot;

/// Every metric this crate emits: name, unit, description.
pub const METRICS: &[(&str, &str, &str)] = &[
    (
        "elastic_cpu_share_ratio",
        "ratio",
        "The share: part of the CPUs elastic work may use now, as the controller decided it",
    ),
    (
        "elastic_cpu_min_share_ratio",
        "ratio",
        "The share's lower bound in force: the builder's `share(min, _)` or the last `set_share`",
    ),
    (
        "elastic_cpu_max_share_ratio",
        "ratio",
        "The share's upper bound in force: the builder's `share(_, max)` or the last `set_share`",
    ),
    (
        "elastic_cpu_paused",
        "count",
        "1 while elastic work is paused (`Elastic::pause`: no new grants), else 0",
    ),
    (
        "elastic_cpu_target_seconds",
        "seconds",
        "What the controller compares the signal with: the builder's target, or the latency elastic work may add over the quiet baseline",
    ),
    (
        "elastic_cpu_cpus",
        "count",
        "CPUs the token rate is computed for: the least of workers, the cgroup CPU quota and the affinity mask",
    ),
    (
        "elastic_cpu_sched_latency_p99_seconds",
        "seconds",
        "p99 scheduling latency over the probe window (unset while the window is empty)",
    ),
    (
        "elastic_cpu_signal_p99_seconds",
        "seconds",
        "What the controller stepped on: the largest of the scheduling p99, the I/O wake-up p99 / 3 and the run-queue delay (unset with no data)",
    ),
    (
        "elastic_cpu_io_latency_p99_seconds",
        "seconds",
        "p99 I/O wake-up latency over the probe window: a canary due to its read by a task (unset while off or empty)",
    ),
    (
        "elastic_cpu_run_queue_delay_seconds",
        "seconds",
        "Mean OS run-queue wait per timeslice over the probe window, of the runtime's threads (threads=runtime) and of the process's other threads, elastic work's aside (threads=bystanders); unset while unavailable",
    ),
    (
        "elastic_cpu_run_queue_wait_ratio",
        "ratio",
        "OS run-queue wait over the last tick as a fraction of it, summed over threads, label kind=foreground|elastic",
    ),
    (
        "elastic_cpu_poll_p99_seconds",
        "seconds",
        "p99 poll time over the probe window, label kind=foreground|elastic",
    ),
    (
        "elastic_cpu_tokens_available_seconds",
        "seconds",
        "CPU tokens in the bucket; negative is debt",
    ),
    (
        "elastic_cpu_waiters",
        "count",
        "Elastic tasks waiting for a grant",
    ),
    (
        "elastic_cpu_acquired_microseconds_total",
        "microseconds",
        "CPU time granted to elastic work since start",
    ),
    (
        "elastic_cpu_returned_microseconds_total",
        "microseconds",
        "Granted CPU time given back unused since start",
    ),
    (
        "elastic_cpu_over_limit_microseconds_total",
        "microseconds",
        "CPU time elastic work ran past its grants since start (charged as debt)",
    ),
    (
        "elastic_cpu_used_microseconds_total",
        "microseconds",
        "CPU time elastic work ran since start, as measured (acquired - returned + over limit)",
    ),
    (
        "elastic_cpu_wait_microseconds_total",
        "microseconds",
        "Time elastic work spent waiting for grants since start",
    ),
    (
        "elastic_cpu_longest_wait_seconds",
        "seconds",
        "Longest wait for a grant over the probe window (a waiter still queued counts)",
    ),
    (
        "elastic_cpu_grants_total",
        "count",
        "Grants handed out since start",
    ),
    (
        "elastic_cpu_waits_total",
        "count",
        "Admissions that had to wait since start",
    ),
    (
        "elastic_cpu_brakes_total",
        "count",
        "Times the backlog brake stopped elastic work since start",
    ),
    (
        "elastic_cpu_governor_up",
        "count",
        "1 while the governor steers, 0 once it has stopped (shut down, its thread ended or panicked): every queue and gate is closed then",
    ),
    (
        "elastic_cpu_recorder_panics_total",
        "count",
        "Ticks whose metrics export panicked in the installed recorder (each cost that tick's metrics)",
    ),
    (
        "elastic_cpu_os_yields_total",
        "count",
        "Quantum yields at which elastic work also yielded its thread's CPU to the OS",
    ),
    (
        "elastic_cpu_idle_unstacked_total",
        "count",
        "Times an idle pool's thread moved a runtime worker queued behind another onto its own CPU",
    ),
    (
        "elastic_cpu_long_polls_total",
        "count",
        "Elastic polls on the runtime that ran past 4 quanta (a long call holds its worker whatever the share)",
    ),
    (
        "elastic_cpu_outlier_polls_total",
        "count",
        "Polls over the outlier threshold since start, label site=path:line (the first 8 spawn sites seen, the rest site=other)",
    ),
    (
        "elastic_cpu_overhead_ratio",
        "ratio",
        "Elastic work's scheduler overhead over the running time charged; the rate is cut by it",
    ),
    (
        "elastic_cpu_throttled_periods_total",
        "count",
        "CFS periods in which the cgroup ran out of CPU quota, each one a step down of the limit",
    ),
    (
        "elastic_cpu_quota_headroom_cpus",
        "cpus",
        "Inside a CPU quota: the CPUs elastic work may take, 90 % of what the foreground leaves",
    ),
    (
        "elastic_cpu_quota_brakes_total",
        "count",
        "Inside a CPU quota: times elastic work was stopped as a period's quota neared its end",
    ),
    (
        "elastic_cpu_idle_share_ratio",
        "ratio",
        "The idle pool's share of the CPUs now (unset while no pool is made)",
    ),
    (
        "elastic_cpu_idle_cpu_microseconds_total",
        "microseconds",
        "CPU time work on the idle pool ran since the pool was made, as its ledger measured it (unset while no pool lives)",
    ),
    (
        "elastic_cpu_class_share_ratio",
        "ratio",
        "A class's part of the elastic share now (0 while it has no work and others do), label class=NAME",
    ),
    (
        "elastic_cpu_class_cpu_microseconds_total",
        "microseconds",
        "CPU time charged to a class's elastic work since start, label class=NAME",
    ),
    (
        "elastic_cpu_class_waiters",
        "count",
        "A class's elastic tasks waiting for a grant, label class=NAME",
    ),
    (
        "elastic_cpu_class_longest_wait_seconds",
        "seconds",
        "A class's longest wait for a grant over the probe window, label class=NAME",
    ),
    (
        "elastic_cpu_gate_admitted_total",
        "count",
        "Connection attempts admitted to setup since start, label gate=NAME",
    ),
    (
        "elastic_cpu_gate_rejected_total",
        "count",
        "Connection attempts refused at once since start (queue full, would expire, closed), label gate=NAME",
    ),
    (
        "elastic_cpu_gate_expired_total",
        "count",
        "Connection attempts dropped after waiting past their deadlines since start, label gate=NAME",
    ),
    (
        "elastic_cpu_gate_share_ratio",
        "ratio",
        "The setup class's share of the CPUs now, label gate=NAME",
    ),
    (
        "elastic_cpu_gate_queue_length",
        "count",
        "Connection attempts waiting for admission, label gate=NAME",
    ),
    (
        "elastic_cpu_gate_setup_cpu_microseconds_total",
        "microseconds",
        "CPU time charged to connection setups since start, label gate=NAME",
    ),
    (
        "elastic_cpu_gate_longest_wait_seconds",
        "seconds",
        "Longest admission wait over the probe window, label gate=NAME",
    ),
    (
        "elastic_cpu_gate_os_yields_total",
        "count",
        "Setup quantum yields that also yielded the thread's CPU to the OS, label gate=NAME",
    ),
    (
        "elastic_cpu_gate_waiting_on_peer",
        "count",
        "Setups waiting on their clients, holding no running place, label gate=NAME",
    ),
    (
        "elastic_cpu_gate_timed_out_total",
        "count",
        "Setups closed at the setup timeout (clients that never finished) since start, label gate=NAME",
    ),
];

/// Described on every tick, not once: the application may install its recorder after the
/// first tick, and a dozen calls per tick cost nothing next to the tick itself.
fn describe() {
    for &(name, unit, help) in METRICS {
        let unit = match unit {
            "seconds" => Unit::Seconds,
            "microseconds" => Unit::Microseconds,
            _ => Unit::Count,
        };
        if name.ends_with("_total") {
            describe_counter!(name, unit, help);
        } else {
            describe_gauge!(name, unit, help);
        }
    }
}

/// The governor has stopped: `elastic_cpu_governor_up` is 0 (its last export).
pub(crate) fn governor_down() {
    describe();
    gauge!("elastic_cpu_governor_up").set(0.0);
}

/// Emit every metric in [`METRICS`] from `s`.
pub(crate) fn emit(s: &Snapshot) {
    describe();
    gauge!("elastic_cpu_share_ratio").set(s.share);
    gauge!("elastic_cpu_min_share_ratio").set(s.min_share);
    gauge!("elastic_cpu_max_share_ratio").set(s.max_share);
    gauge!("elastic_cpu_paused").set(if s.paused { 1.0 } else { 0.0 });
    gauge!("elastic_cpu_target_seconds").set(s.target.as_secs_f64());
    gauge!("elastic_cpu_cpus").set(s.cpus);
    if let Some(p99) = s.sched_p99 {
        gauge!("elastic_cpu_sched_latency_p99_seconds").set(p99.as_secs_f64());
    }
    if let Some(p99) = s.signal_p99 {
        gauge!("elastic_cpu_signal_p99_seconds").set(p99.as_secs_f64());
    }
    if let Some(p99) = s.io_p99 {
        gauge!("elastic_cpu_io_latency_p99_seconds").set(p99.as_secs_f64());
    }
    for (threads, delay) in [
        ("runtime", s.run_queue_delay),
        ("bystanders", s.bystander_delay),
    ] {
        if let Some(d) = delay {
            gauge!("elastic_cpu_run_queue_delay_seconds", "threads" => threads)
                .set(d.as_secs_f64());
        }
    }
    if let Some(f) = s.run_queue_wait {
        gauge!("elastic_cpu_run_queue_wait_ratio", "kind" => "foreground").set(f);
    }
    if let Some(f) = s.elastic_run_queue_wait {
        gauge!("elastic_cpu_run_queue_wait_ratio", "kind" => "elastic").set(f);
    }
    if let Some(p99) = s.fg_poll_p99 {
        gauge!("elastic_cpu_poll_p99_seconds", "kind" => "foreground").set(p99.as_secs_f64());
    }
    if let Some(p99) = s.elastic_poll_p99 {
        gauge!("elastic_cpu_poll_p99_seconds", "kind" => "elastic").set(p99.as_secs_f64());
    }
    gauge!("elastic_cpu_tokens_available_seconds").set(s.balance_secs_f64());
    gauge!("elastic_cpu_waiters").set(s.waiters as f64);
    counter!("elastic_cpu_acquired_microseconds_total").absolute(micros(s.acquired));
    counter!("elastic_cpu_returned_microseconds_total").absolute(micros(s.returned));
    counter!("elastic_cpu_over_limit_microseconds_total").absolute(micros(s.over_limit));
    counter!("elastic_cpu_used_microseconds_total").absolute(micros(s.used));
    counter!("elastic_cpu_wait_microseconds_total").absolute(micros(s.waited));
    gauge!("elastic_cpu_longest_wait_seconds").set(s.longest_wait.as_secs_f64());
    counter!("elastic_cpu_grants_total").absolute(s.grants);
    counter!("elastic_cpu_waits_total").absolute(s.waits);
    counter!("elastic_cpu_brakes_total").absolute(s.brakes);
    gauge!("elastic_cpu_governor_up").set(if s.governor.is_running() { 1.0 } else { 0.0 });
    counter!("elastic_cpu_recorder_panics_total").absolute(s.recorder_panics);
    counter!("elastic_cpu_os_yields_total").absolute(s.os_yields);
    counter!("elastic_cpu_idle_unstacked_total").absolute(s.idle_unstacked);
    counter!("elastic_cpu_long_polls_total").absolute(s.long_polls);
    for (site, n) in &s.outliers.polls_by_site {
        counter!("elastic_cpu_outlier_polls_total", "site" => site.clone()).absolute(*n);
    }
    counter!("elastic_cpu_throttled_periods_total").absolute(s.throttled_periods);
    if let Some(cpus) = s.quota_headroom {
        gauge!("elastic_cpu_quota_headroom_cpus").set(cpus);
    }
    counter!("elastic_cpu_quota_brakes_total").absolute(s.quota_brakes);
    gauge!("elastic_cpu_overhead_ratio").set(s.overhead);
    if let Some(share) = s.idle_share {
        gauge!("elastic_cpu_idle_share_ratio").set(share);
    }
    if let Some(q) = &s.idle_queue {
        counter!("elastic_cpu_idle_cpu_microseconds_total").absolute(q.used_nanos / 1_000);
    }
    for c in &s.classes {
        let class = c.name.to_string();
        gauge!("elastic_cpu_class_share_ratio", "class" => class.clone()).set(c.share);
        counter!("elastic_cpu_class_cpu_microseconds_total", "class" => class.clone())
            .absolute(micros(c.cpu));
        gauge!("elastic_cpu_class_waiters", "class" => class.clone()).set(c.waiters as f64);
        gauge!("elastic_cpu_class_longest_wait_seconds", "class" => class)
            .set(c.longest_wait.as_secs_f64());
    }
}

/// `d` in whole microseconds, the unit of the `*_microseconds_total` counters (saturating: a
/// `u64` of microseconds outlasts any process).
pub(crate) fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
