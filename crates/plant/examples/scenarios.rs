//! Every named scenario steered by the real decision step (library defaults), beside its
//! baseline (the same foreground, elastic work held at zero): per phase the foreground's
//! scheduling p99 against the baseline's, and the elastic CPU as a share of the spare.
//!
//! `cargo run --release -p elastic-cpu-plant --example scenarios`

use elastic_cpu_plant::{scenarios, DecisionStep, Scenario};

fn run(name: &str, scenario: Scenario) {
    let base = scenario.baseline().expect("baseline");
    let mut step = DecisionStep::new(&scenario.config, 0.05).expect("step");
    let run = scenario.run(&mut step).expect("run");
    for (p, b) in run.phases.iter().zip(&base.phases) {
        let ratio = p.p99_over(b).unwrap_or(f64::NAN);
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
    run("coarse quota", scenarios::demo_coarse_quota());
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
