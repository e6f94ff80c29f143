//! The named scenarios a controller is tested on. Each runs "steady" (20 s), then "step" (10 s,
//! the foreground × 1.5), unless said otherwise; its classes start at a share of 0.05 of the
//! CPUs (the floor): [`Scenario::classes_start_at`] starts them elsewhere (the ceiling).

use std::time::Duration;

use crate::config::{ClassConfig, Client, Foreground, Neighbour, PlantConfig, Quota, Service};
use crate::scenario::{Scenario, ScenarioPhase};

/// ~70 µs: a short elastic poll.
pub const SHORT_POLL: Duration = Duration::from_micros(70);
/// 5 ms: a long elastic poll.
pub const LONG_POLL_LEN: Duration = Duration::from_millis(5);

/// The share the classes start at.
const FLOOR: f64 = 0.05;

fn base(seed: u64, cpus: usize, workers: usize, foreground_cpus: f64) -> PlantConfig {
    PlantConfig {
        seed,
        cpus,
        workers,
        foreground: Foreground::load(
            foreground_cpus,
            Service::Exponential(Duration::from_micros(100)),
        ),
        classes: vec![ClassConfig::new("batch", 4, SHORT_POLL)],
        ..PlantConfig::default()
    }
}

fn steady_then_step(config: PlantConfig) -> Scenario {
    Scenario::new(config)
        .classes_start_at(FLOOR)
        .phase(ScenarioPhase::new("steady", Duration::from_secs(20)))
        .phase(ScenarioPhase::new("step", Duration::from_secs(10)).load(1.5))
}

/// 2 CPUs, 2 workers, no quota; the foreground at 0.6 CPU in ~100 µs requests; one class of
/// 4 tasks of short polls on the runtime.
pub fn bare_host() -> Scenario {
    steady_then_step(base(11, 2, 2, 0.6))
}

/// As [`bare_host`] inside a quota of 1.5 CPUs (100 ms periods), the foreground at 0.5 CPU.
pub fn quota_1_5() -> Scenario {
    let mut config = base(12, 2, 2, 0.5);
    config.quota = Some(Quota::new(1.5));
    steady_then_step(config)
}

/// 8 workers on 2 CPUs: the OS picks which worker runs; the class has 8 tasks.
pub fn eight_workers() -> Scenario {
    let mut config = base(13, 2, 8, 0.6);
    config.classes[0].tasks = 8;
    steady_then_step(config)
}

/// [`bare_host`] with a neighbour of 0.7 CPU: "quiet" (10 s), "neighbour" (10 s, on),
/// "step" (10 s, on, the foreground × 1.5).
pub fn neighbour() -> Scenario {
    let n = Neighbour::new(0.7);
    Scenario::new(base(14, 2, 2, 0.6))
        .classes_start_at(FLOOR)
        .phase(ScenarioPhase::new("quiet", Duration::from_secs(10)))
        .phase(ScenarioPhase::new("neighbour", Duration::from_secs(10)).neighbour(n))
        .phase(ScenarioPhase::new("step", Duration::from_secs(10)).load(1.5))
}

/// Long polls (5 ms) on the idle pool (2 threads), as `spawn` places them, on a bare host.
pub fn long_polls() -> Scenario {
    let mut config = base(15, 2, 2, 0.6);
    config.pool_threads = 2;
    config.classes = vec![ClassConfig::new("long", 2, LONG_POLL_LEN).on_pool()];
    steady_then_step(config)
}

/// Three classes: short polls on the runtime, 500 µs polls on the runtime, long polls on the
/// pool (2 threads).
pub fn three_classes() -> Scenario {
    let mut config = base(16, 2, 2, 0.5);
    config.pool_threads = 2;
    config.classes = vec![
        ClassConfig::new("short", 4, SHORT_POLL),
        ClassConfig::new("medium", 2, Duration::from_micros(500)),
        ClassConfig::new("long", 2, LONG_POLL_LEN).on_pool(),
    ];
    steady_then_step(config)
}

/// Three heterogeneous nodes, each its own plant: 2 CPUs bare; 4 CPUs, 4 workers in a quota
/// of 2.5; 1 CPU, 2 workers beside a neighbour of 0.3 CPU.
pub fn three_nodes() -> Vec<Scenario> {
    let small = base(17, 2, 2, 0.6);
    let mut big = base(18, 4, 4, 1.2);
    big.quota = Some(Quota::new(2.5));
    let mut crowded = base(19, 1, 2, 0.3);
    crowded.neighbour = Some(Neighbour::new(0.3));
    vec![
        steady_then_step(small),
        steady_then_step(big),
        steady_then_step(crowded),
    ]
}

/// The plant closest to `cargo run --release --example demo`'s default run on this project's
/// 2-CPU virtual machine, calibrated against its figures (docs/results.md, the calibration
/// table): ~8200 requests a second of ~98 µs of process CPU each, as the demo's calibration
/// reads it (0.8 CPU, 0.4 of the machine): ~65 µs on the runtime (exponential) through its I/O
/// driver, ~33 µs on the client's 2 real-time threads, in the process but outside a quota; the
/// scan's 8 tasks of ~67 µs chunks on the runtime; idle CPUs that take 20 µs to wake (the quiet
/// run-queue delay the demo reads: 18–26 µs per timeslice); 20 s.
pub fn demo() -> Scenario {
    let mut config = base(21, 2, 2, 0.8);
    config.foreground = Foreground {
        arrivals_per_sec: 8200.0,
        service: Service::Fixed(Duration::from_micros(65)),
    };
    config.client = Some(Client {
        threads: 2,
        per_request: Duration::from_micros(33),
    });
    config.io_driver = true;
    config.wake_up = Duration::from_micros(200);
    config.classes = vec![ClassConfig::new("scan", 8, Duration::from_micros(67))];
    Scenario::new(config)
        .classes_start_at(FLOOR)
        .phase(ScenarioPhase::new("steady", Duration::from_secs(20)))
}

/// [`demo`] inside a quota of 1.5 CPUs (100 ms periods), as the demo runs its quota phases:
/// the same load, the client outside the quota.
pub fn demo_quota() -> Scenario {
    let mut s = demo();
    s.config.seed = 22;
    s.config.quota = Some(Quota::new(1.5));
    s
}

/// [`demo`] with coarse chunks (8192 rows: ~1.1 ms calls), on the idle pool as `Auto` places
/// long polls (2 pool threads).
pub fn demo_coarse() -> Scenario {
    let mut s = demo();
    s.config.seed = 23;
    s.config.pool_threads = 2;
    s.config.classes = vec![ClassConfig::new("scan", 8, Duration::from_micros(1100)).on_pool()];
    s
}

/// [`demo_coarse`] inside a quota of 1.5 CPUs.
pub fn demo_coarse_quota() -> Scenario {
    let mut s = demo_coarse();
    s.config.seed = 24;
    s.config.quota = Some(Quota::new(1.5));
    s
}
