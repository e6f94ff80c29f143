//! The physics, checked against what must hold whatever the steering does.

use std::time::Duration;

use elastic_cpu_plant::{
    ClassConfig, Client, Foreground, Neighbour, PhaseSummary, Plant, PlantConfig, Quota, Run,
    Scenario, ScenarioPhase, Service, StaticShare,
};

const SERVICE: Duration = Duration::from_micros(100);
const SHORT: Duration = Duration::from_micros(70);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// 2 CPUs, 2 workers, the foreground at `load` CPUs of `service`.
fn host(load: f64, service: Service) -> PlantConfig {
    PlantConfig {
        foreground: Foreground::load(load, service),
        ..PlantConfig::default()
    }
}

/// A summary of `length` at a static `share` per class, after 2 s in which the buckets'
/// first second of tokens (they start full) is spent.
fn steady(config: PlantConfig, length: Duration, share: &[f64]) -> (PhaseSummary, Run) {
    let cpus = config.cpus as f64;
    let run = Scenario::new(config)
        .phase(ScenarioPhase::new("warm", secs(2)))
        .phase(ScenarioPhase::new("run", length))
        .run(&mut StaticShare::of_cpus(share, cpus))
        .unwrap();
    (run.phases[1].clone(), run)
}

#[test]
fn foreground_cpu_is_arrivals_times_service() {
    let mut plant = Plant::new(host(0.5, Service::Fixed(SERVICE))).unwrap();
    plant.run_for(secs(10), &mut StaticShare::new(vec![]));
    let expected = SERVICE * plant.arrivals() as u32;
    let used = plant.foreground_cpu();
    // Only requests still queued or running at the end are short.
    assert!(used <= expected, "{used:?} > {expected:?}");
    assert!(expected - used < SERVICE * 4, "{used:?} vs {expected:?}");
    let cpus = used.as_secs_f64() / 10.0;
    assert!((cpus - 0.5).abs() < 0.03, "{cpus}");
    assert_eq!(plant.process_cpu(), used);
}

#[test]
fn p99_is_small_at_low_load_and_grows_at_high_load() {
    let p99 = |load| {
        let (phase, _) = steady(host(load, Service::Exponential(SERVICE)), secs(5), &[]);
        assert!(
            (phase.foreground_cpu - load).abs() < load * 0.1,
            "{phase:?}"
        );
        phase.sched_p99.unwrap()
    };
    let low = p99(0.2);
    let high = p99(1.8);
    // At low load a request waits at most behind the poll its worker runs (its LIFO slot is
    // not stolen): a few service times at the p99.
    assert!(low < Duration::from_micros(400), "{low:?}");
    assert!(high > low * 5, "{low:?} → {high:?}");
    assert!(high > Duration::from_micros(500), "{high:?}");
}

#[test]
fn half_share_on_two_cpus_runs_one_cpu_and_raises_the_p99() {
    let (a, _) = steady(host(0.5, Service::Exponential(SERVICE)), secs(5), &[]);
    let mut config = host(0.5, Service::Exponential(SERVICE));
    config.classes = vec![ClassConfig::new("batch", 4, SHORT)];
    let (b, _) = steady(config, secs(5), &[0.5]);
    assert!((b.elastic_cpu - 1.0).abs() < 0.05, "{b:?}");
    assert!((b.foreground_cpu - 0.5).abs() < 0.05, "{b:?}");
    assert!(b.sched_p99 > a.sched_p99, "{a:?} → {b:?}");
    assert!(b.response_p99 > a.response_p99, "{a:?} → {b:?}");
    assert!((b.harvest - 1.0 / 1.5).abs() < 0.05, "{b:?}");
}

#[test]
fn a_quota_throttles_when_demand_exceeds_it_and_is_never_exceeded() {
    let quota = Quota::new(1.5);
    let budget = ms(150);
    // Below the quota: no throttling.
    let mut config = host(0.5, Service::Exponential(SERVICE));
    config.quota = Some(quota);
    config.classes = vec![ClassConfig::new("batch", 4, SHORT)];
    let (calm, _) = steady(config.clone(), secs(3), &[0.1]);
    assert_eq!(calm.throttled_periods, 0, "{calm:?}");
    // Demand of ~2 CPUs against 1.5: throttled, and held to the quota in every period.
    let (phase, over) = steady(config, secs(3), &[1.0]);
    assert!(phase.throttled_periods >= 20, "{phase:?}");
    assert_eq!(over.periods.len(), 50);
    assert!(
        over.periods.iter().all(|&p| p <= budget),
        "{:?}",
        over.periods
    );
    assert!(over.periods.iter().filter(|&&p| p == budget).count() >= 20);
    assert!((phase.process_cpu - 1.5).abs() < 0.05, "{phase:?}");
    assert!(over.ticks.iter().any(|t| t.throttled));
}

#[test]
fn the_idle_pool_only_gets_what_normal_threads_leave() {
    let pooled = |neighbour: Option<Neighbour>| {
        let mut config = host(0.5, Service::Exponential(SERVICE));
        config.pool_threads = 2;
        config.classes = vec![ClassConfig::new("pool", 2, ms(5)).on_pool()];
        config.neighbour = neighbour;
        steady(config, secs(4), &[1.0]).0
    };
    let (a, _) = steady(host(0.5, Service::Exponential(SERVICE)), secs(4), &[]);
    // Room for 1.5 CPUs: the pool takes it, and the foreground waits no longer for it.
    let b = pooled(None);
    assert!((b.elastic_cpu - 1.5).abs() < 0.05, "{b:?}");
    assert!(b.sched_p99 <= a.sched_p99, "{a:?} → {b:?}");
    // A neighbour spinning on both CPUs: the foreground gets some, the pool nothing.
    let spinning = Neighbour {
        threads: 2,
        cpus: 2.0,
        burst: ms(2),
    };
    let b = pooled(Some(spinning));
    assert_eq!(b.elastic_cpu, 0.0, "{b:?}");
    assert!(b.foreground_cpu > 0.3, "{b:?}");
    assert!(b.neighbour_cpu > 1.3, "{b:?}");
}

#[test]
fn a_host_pause_shows_as_a_latency_spike() {
    let run = Scenario::new(host(0.5, Service::Exponential(SERVICE)))
        .phase(ScenarioPhase::new("before", secs(1)))
        .phase(ScenarioPhase::new("pause", secs(1)).pause(ms(300), ms(200)))
        .phase(ScenarioPhase::new("after", secs(2)))
        .run(&mut StaticShare::new(vec![]))
        .unwrap();
    let before = run.phase("before").unwrap();
    let pause = run.phase("pause").unwrap();
    let after = run.phase("after").unwrap();
    assert!(before.sched_p99 < Some(ms(1)), "{before:?}");
    assert!(pause.sched_p99 > Some(ms(50)), "{pause:?}");
    assert!(after.sched_p99 < Some(ms(1)), "{after:?}");
    // The probe's window carries the spike for its 10 ticks after the pause.
    let tick = run.ticks.iter().find(|t| t.now == ms(1600)).unwrap();
    assert!(tick.sched_p99 > Some(ms(50)), "{tick:?}");
    // No CPU ran in the pause (1.3 s to 1.5 s); the backlog ran after it.
    let cpu_in = |end| {
        run.ticks
            .iter()
            .find(|t| t.now == ms(end))
            .unwrap()
            .process_cpu
    };
    assert_eq!(cpu_in(1400), Duration::ZERO);
    assert_eq!(cpu_in(1500), Duration::ZERO);
    assert!(cpu_in(1600) > ms(50), "{:?}", cpu_in(1600));
    assert!((pause.foreground_cpu - 0.5).abs() < 0.05, "{pause:?}");
}

#[test]
fn the_same_seed_gives_the_same_run_another_seed_another() {
    let scenario = |seed| {
        let mut config = host(0.7, Service::Exponential(SERVICE));
        config.seed = seed;
        config.workers = 4;
        config.quota = Some(Quota::new(1.5));
        config.neighbour = Some(Neighbour::new(0.3));
        config.classes = vec![ClassConfig::new("batch", 4, SHORT)];
        Scenario::new(config)
            .phase(ScenarioPhase::new("a", secs(1)))
            .phase(
                ScenarioPhase::new("b", secs(1))
                    .load(1.5)
                    .pause(ms(100), ms(50)),
            )
            .run(&mut StaticShare::of_cpus(&[0.4], 2.0))
            .unwrap()
    };
    assert_eq!(scenario(7), scenario(7));
    assert_ne!(scenario(7), scenario(8));
}

#[test]
fn bad_settings_are_refused_with_their_name() {
    let refused = |config: PlantConfig| Plant::new(config).unwrap_err().setting;
    assert_eq!(
        refused(PlantConfig {
            cpus: 0,
            ..Default::default()
        }),
        "cpus"
    );
    assert_eq!(
        refused(PlantConfig {
            tick: Duration::ZERO,
            ..Default::default()
        }),
        "tick"
    );
    let nan = Foreground {
        arrivals_per_sec: f64::NAN,
        service: Service::Fixed(SERVICE),
    };
    assert_eq!(
        refused(PlantConfig {
            foreground: nan,
            ..Default::default()
        }),
        "foreground.arrivals_per_sec"
    );
    let pool_class = vec![ClassConfig::new("pool", 1, SHORT).on_pool()];
    assert_eq!(
        refused(PlantConfig {
            classes: pool_class,
            ..Default::default()
        }),
        "pool_threads"
    );
    let quota = Some(Quota {
        cpus: -1.0,
        period: ms(100),
    });
    assert_eq!(
        refused(PlantConfig {
            quota,
            ..Default::default()
        }),
        "quota.cpus"
    );
    let step = Scenario::new(PlantConfig::default())
        .phase(ScenarioPhase::new("x", ms(10)).load(f64::INFINITY))
        .run(&mut StaticShare::new(vec![]));
    assert_eq!(step.unwrap_err().setting, "phase.load");
}

#[test]
fn an_idle_cpu_takes_its_wake_up_to_start_a_thread() {
    // 200 requests a second: between two, every CPU has been idle for milliseconds.
    let config = |wake_up| PlantConfig {
        workers: 1,
        wake_up,
        ..host(0.02, Service::Fixed(SERVICE))
    };
    let (woken, _) = steady(config(Duration::from_micros(200)), secs(5), &[]);
    let (at_once, _) = steady(config(Duration::ZERO), secs(5), &[]);
    let (woken, at_once) = (woken.sched_p99.unwrap(), at_once.sched_p99.unwrap());
    assert!(woken >= Duration::from_micros(200), "{woken:?}");
    // Without, only a request that comes while another runs waits.
    assert!(at_once < Duration::from_micros(100), "{at_once:?}");
}

#[test]
fn the_client_runs_outside_the_quota() {
    // 0.3 CPU of requests on the runtime and 0.45 on the client, in a quota of 0.5.
    let config = PlantConfig {
        quota: Some(Quota::new(0.5)),
        client: Some(Client {
            threads: 2,
            per_request: Duration::from_micros(150),
        }),
        ..host(0.3, Service::Fixed(SERVICE))
    };
    let budget = ms(100).mul_f64(0.5);
    let (phase, run) = steady(config, secs(5), &[]);
    assert!((phase.foreground_cpu - 0.75).abs() < 0.05, "{phase:?}");
    assert!((phase.process_cpu - 0.75).abs() < 0.05, "{phase:?}");
    assert_eq!(phase.throttled_periods, 0, "{phase:?}");
    for &p in &run.periods {
        assert!(p <= budget, "{p:?}");
    }
}

#[test]
fn requests_wait_in_the_socket_until_a_worker_polls_the_driver() {
    // One worker on one CPU, half of it 2 ms elastic polls.
    let config = |io_driver| PlantConfig {
        cpus: 1,
        workers: 1,
        io_driver,
        classes: vec![ClassConfig::new("long", 1, ms(2))],
        ..host(0.02, Service::Fixed(Duration::from_micros(50)))
    };
    let (driver, _) = steady(config(true), secs(5), &[0.5]);
    let (direct, _) = steady(config(false), secs(5), &[0.5]);
    assert!((driver.elastic_cpu - 0.5).abs() < 0.05, "{driver:?}");
    // Through the driver a request is seen after the poll, and runs next: its scheduling
    // latency is short, its response is not.
    assert!(
        driver.sched_p99 < Some(Duration::from_micros(200)),
        "{driver:?}"
    );
    assert!(driver.response_p99 > Some(ms(1)), "{driver:?}");
    // Without, it waits for the poll on the worker's queue.
    assert!(direct.sched_p99 > Some(ms(1)), "{direct:?}");
}
