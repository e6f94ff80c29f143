//! The named scenarios run at a static share: they run at all, in little time, and hold the
//! physics' invariants. (What a controller must reach on them is tested with the controller.)

use std::time::Duration;

use elastic_cpu_plant::{scenarios, Run, Scenario, StaticShare};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Runs `scenario` with every class at `share` of the CPUs; checks CPU conservation per tick
/// and the quota per period.
fn run(scenario: &Scenario, share: f64) -> Run {
    let config = &scenario.config;
    let shares = vec![share; config.classes.len()];
    let run = scenario
        .run(&mut StaticShare::of_cpus(&shares, config.cpus as f64))
        .unwrap();
    let capacity = config.tick * config.cpus as u32;
    for t in &run.ticks {
        assert!(t.process_cpu + t.neighbour_cpu <= capacity, "{t:?}");
        let parts: Duration = t.foreground_cpu + t.class_cpu.iter().sum::<Duration>();
        assert_eq!(parts, t.process_cpu, "{t:?}");
    }
    if let Some(q) = config.quota {
        let budget = q.period.mul_f64(q.cpus);
        assert!(
            run.periods.iter().all(|&p| p <= budget),
            "{:?}",
            run.periods
        );
    }
    assert_eq!(
        run.ticks.len() as u32,
        scenario.length().as_millis() as u32 / 100
    );
    for p in &run.phases {
        eprintln!(
            "{:>10}: fg {:.2} elastic {:.2} ({:.0}% of the spare) sched p99 {:?} response p99 {:?} throttled {}",
            p.name,
            p.foreground_cpu,
            p.elastic_cpu,
            p.harvest * 100.0,
            p.sched_p99.unwrap_or_default(),
            p.response_p99.unwrap_or_default(),
            p.throttled_periods,
        );
    }
    run
}

#[test]
fn a_bare_host_runs_the_share_and_a_load_step_raises_the_p99() {
    let run = run(&scenarios::bare_host(), 0.3);
    let (steady, step) = (&run.phases[0], &run.phases[1]);
    assert!((steady.elastic_cpu - 0.6).abs() < 0.06, "{steady:?}");
    assert!((step.foreground_cpu - 0.9).abs() < 0.06, "{step:?}");
    assert!(step.sched_p99 > steady.sched_p99, "{steady:?} → {step:?}");
}

#[test]
fn a_quota_of_1_5_throttles_a_share_beyond_its_spare() {
    // 0.4 CPU beside 0.5: rarely throttled once the first second of tokens is spent (a
    // 100 ms grant can still run most of a period on one CPU beside a busy foreground).
    let calm = run(&scenarios::quota_1_5(), 0.2);
    let late = calm.ticks_between(secs(2), secs(20));
    let throttled = late.iter().filter(|t| t.throttled).count();
    assert!(
        throttled * 20 <= late.len(),
        "{throttled} of {}",
        late.len()
    );
    // 1.2 CPUs beside 0.5: throttled in most periods, held to 1.5.
    let over = run(&scenarios::quota_1_5(), 0.6);
    let steady = &over.phases[0];
    assert!(steady.throttled_periods > 150, "{steady:?}");
    assert!((steady.process_cpu - 1.5).abs() < 0.05, "{steady:?}");
}

#[test]
fn eight_workers_on_two_cpus_wait_for_the_os() {
    // Elastic work on ~1.2 CPUs: more workers runnable than CPUs.
    let eight = run(&scenarios::eight_workers(), 0.6);
    let two = run(&scenarios::bare_host(), 0.6);
    let (eight, two) = (&eight.phases[0], &two.phases[0]);
    // A worker the OS preempts mid-request holds it until its turn comes back.
    assert!(
        eight.response_p99 > two.response_p99.map(|p| p * 2),
        "{two:?} → {eight:?}"
    );
}

#[test]
fn a_neighbour_takes_its_cpu_and_raises_the_p99() {
    let run = run(&scenarios::neighbour(), 0.3);
    let (quiet, noisy) = (&run.phases[0], &run.phases[1]);
    assert_eq!(quiet.neighbour_cpu, 0.0);
    assert!(noisy.neighbour_cpu > 0.5, "{noisy:?}");
    assert!(noisy.sched_p99 > quiet.sched_p99, "{quiet:?} → {noisy:?}");
}

#[test]
fn long_polls_on_the_pool_take_the_spare() {
    let run = run(&scenarios::long_polls(), 1.0);
    let steady = &run.phases[0];
    assert!(steady.harvest > 0.9, "{steady:?}");
    assert!(run.ticks[50..]
        .iter()
        .all(|t| t.class_cpu[0] > Duration::ZERO));
}

#[test]
fn three_classes_each_get_their_share() {
    let run = run(&scenarios::three_classes(), 0.1);
    let steady = &run.phases[0];
    for (i, cpu) in steady.class_cpu.iter().enumerate() {
        assert!(
            (cpu - 0.2).abs() < 0.03,
            "{}: {steady:?}",
            run.class_names[i]
        );
    }
}

#[test]
fn three_heterogeneous_nodes_run_apart() {
    let runs: Vec<Run> = scenarios::three_nodes()
        .iter()
        .map(|s| run(s, 0.1))
        .collect();
    let fg: Vec<f64> = runs.iter().map(|r| r.phases[0].foreground_cpu).collect();
    assert!(
        (fg[0] - 0.6).abs() < 0.06 && (fg[1] - 1.2).abs() < 0.1,
        "{fg:?}"
    );
    assert!(
        runs[2].phases[0].neighbour_cpu > 0.2,
        "{:?}",
        runs[2].phases[0]
    );
}
