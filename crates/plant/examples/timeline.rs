//! One named scenario steered by the real decision step (library defaults), second by second
//! as the demo prints its timeline: the signal the step read and what it steered on against its
//! target, the quiet baselines, the group's share, the quota's headroom cap and the CPU used.
//! For setting the plant beside a real run's `timeline_signal`.
//!
//! `cargo run --release -p elastic-cpu-plant --example timeline -- demo_quota [--every-tick]`
//! (scenarios: `demo`, `demo_quota`, `demo_coarse`, `demo_coarse_quota`, `bare_host`,
//! `quota_1_5`)

use std::time::Duration;

use elastic_cpu_core::decide::ClassKind;

use elastic_cpu_plant::{
    scenarios, DecisionStep, FastObservation, Observation, Scenario, Steering,
};

/// The decision step, and what it read and decided at each tick.
struct Traced {
    step: DecisionStep,
    /// Per tick: (now, readings and decision as one line's fields).
    lines: Vec<(Duration, String)>,
}

fn us(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| {
        if d == Duration::MAX {
            "max".into()
        } else {
            format!("{:.0}", d.as_secs_f64() * 1e6)
        }
    })
}

impl Steering for Traced {
    fn tick(&mut self, obs: &Observation<'_>) -> Vec<elastic_cpu_plant::ClassCommand> {
        let commands = self.step.tick(obs);
        let d = self.step.decider();
        let steered = d.steered();
        let base = d.baseline();
        let holders: Vec<usize> = obs.classes.iter().map(|c| c.holders).collect();
        let line = format!(
            "sched {:>4} (fg {:>4}) rq {:>3} bystanders {:>3} | quiet sched {:>4} rq {:>3} bystanders {:>3} | {:>10} {:>4} of {:>4} | share {:.3}{} headroom {}",
            us(obs.trimmed_p99_over(10)),
            us(obs.sched_p99),
            us(obs.run_queue_delay),
            us(obs.bystander_delay),
            us(base.sched),
            us(base.run_queue),
            us(base.bystanders),
            steered.map_or("-".into(), |s| s.source.to_string()),
            us(steered.and_then(|s| s.value)),
            us(steered.map(|s| s.target)),
            d.group_share(),
            d.kinds()
                .position(|k| k == ClassKind::Idle)
                .and_then(|at| d.decisions().get(at))
                .map_or(String::new(), |idle| format!(" idle {:.3}", idle.share)),
            d.headroom_cpus().map_or("-".into(), |c| format!("{c:.2} CPU")),
        ) + &format!(" holders {holders:?}");
        self.lines.push((obs.now, line));
        commands
    }

    fn between(
        &mut self,
        now: Duration,
        obs: &FastObservation,
    ) -> Option<Vec<elastic_cpu_plant::ClassCommand>> {
        self.step.between(now, obs)
    }
}

fn main() {
    let name = std::env::args().nth(1).unwrap_or_else(|| "demo".into());
    let every_tick = std::env::args().any(|a| a == "--every-tick");
    let scenario: Scenario = match name.as_str() {
        "demo" => scenarios::demo(),
        "demo_quota" => scenarios::demo_quota(),
        "demo_coarse" => scenarios::demo_coarse(),
        "demo_coarse_quota" => scenarios::demo_coarse_quota(),
        "bare_host" => scenarios::bare_host(),
        "quota_1_5" => scenarios::quota_1_5(),
        other => {
            eprintln!("unknown scenario {other}");
            std::process::exit(2);
        }
    };
    let mut traced = Traced {
        step: DecisionStep::new(&scenario.config, 0.05).expect("step"),
        lines: Vec::new(),
    };
    let run = scenario.run(&mut traced).expect("run");
    let tick = run.tick;
    for (t, (now, line)) in run.ticks.iter().zip(&traced.lines) {
        // One line a second, unless every tick is asked for.
        if now.as_millis() % 1000 != 0 && !every_tick {
            continue;
        }
        println!(
            "{:>5.1}s {line} | process {:.2} fg {:.2} elastic {:.2} CPU{}",
            now.as_secs_f64(),
            t.process_cpu.as_secs_f64() / tick.as_secs_f64(),
            t.foreground_cpu.as_secs_f64() / tick.as_secs_f64(),
            t.elastic_cpus(tick),
            if t.throttled { " throttled" } else { "" },
        );
    }
}
