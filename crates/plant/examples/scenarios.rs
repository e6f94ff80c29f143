//! Every named scenario steered by the real decision step (library defaults), beside its
//! baseline (the same foreground, elastic work held at zero): per phase the foreground's
//! scheduling p99 against the baseline's, and the elastic CPU as a share of the spare.
//!
//! `cargo run --release -p elastic-cpu-plant --example scenarios`

use elastic_cpu_plant::{scenarios, ClassCommand, DecisionStep, Scenario, StaticShare};

fn run(name: &str, scenario: Scenario) {
    let cfg = scenario.config.clone();
    let zero = vec![ClassCommand::rate(0); cfg.classes.len()];
    let base = scenario
        .clone()
        .run(&mut StaticShare::new(zero))
        .expect("baseline");
    let mut step = DecisionStep::new(&cfg, 0.05).expect("step");
    let run = scenario.run(&mut step).expect("run");
    for (p, b) in run.phases.iter().zip(&base.phases) {
        let ratio = match (p.sched_p99, b.sched_p99) {
            (Some(p), Some(b)) => p.as_secs_f64() / b.as_secs_f64(),
            _ => f64::NAN,
        };
        println!(
            "{name:>14} {:>10}: p99 {:>8.0?} (baseline {:>8.0?}, {ratio:.2}×)  elastic {:.2} CPU of spare {:.2} = {:.2}  throttled {}",
            p.name,
            p.sched_p99.unwrap_or_default(),
            b.sched_p99.unwrap_or_default(),
            p.elastic_cpu,
            p.spare,
            p.harvest,
            p.throttled_periods,
        );
    }
}

fn main() {
    run("demo", scenarios::demo());
    run("demo quota", scenarios::demo_quota());
    run("demo coarse", scenarios::demo_coarse());
    run("bare host", scenarios::bare_host());
    run("quota 1.5", scenarios::quota_1_5());
    run("8 workers", scenarios::eight_workers());
    run("neighbour", scenarios::neighbour());
    run("long polls", scenarios::long_polls());
    run("three classes", scenarios::three_classes());
    for (i, node) in scenarios::three_nodes().into_iter().enumerate() {
        run(&format!("node {i}"), node);
    }
}
