//! The real decision step (library defaults) steering the named scenarios: steady-state share
//! and harvest of the spare against a baseline without elastic work, settle time from the floor
//! and from the ceiling, and the reaction to a foreground load step. The plant is deterministic,
//! so each figure is the same every run; the bounds leave room for a controller change that
//! keeps the behaviour, and fail one that loses it. Try a controller change here first.

use std::time::Duration;

use elastic_cpu_plant::{
    scenarios, ClassCommand, DecisionStep, FastObservation, Observation, PhaseSummary, Run,
    Scenario, ScenarioPhase, Steering,
};

const STEADY_END: Duration = Duration::from_secs(20);

struct Outcome {
    run: Run,
    base: Run,
}

impl Outcome {
    fn of(scenario: Scenario, start: f64) -> Outcome {
        let scenario = scenario.classes_start_at(start);
        let base = scenario.baseline().expect("baseline");
        let mut step = DecisionStep::new(&scenario.config, start).expect("valid start");
        let run = scenario.run(&mut step).expect("run");
        Outcome { run, base }
    }

    fn phase(&self, name: &str) -> (&PhaseSummary, &PhaseSummary) {
        (
            self.run.phase(name).expect("phase"),
            self.base.phase(name).expect("baseline phase"),
        )
    }

    /// The phase's scheduling p99 over its baseline's.
    fn p99_ratio(&self, name: &str) -> f64 {
        let (p, b) = self.phase(name);
        p.p99_over(b).expect("a p99 on both sides")
    }

    /// The CPUs the classes' rates paid for at a tick.
    fn rate_cpus(t: &elastic_cpu_plant::PlantTick) -> f64 {
        t.class_rate.iter().sum::<u64>() as f64 / 1e9
    }

    /// The mean of the rates over the last half of the steady phase.
    fn steady_rate(&self) -> f64 {
        let ticks = self.run.ticks_between(STEADY_END / 2, STEADY_END);
        ticks.iter().map(Self::rate_cpus).sum::<f64>() / ticks.len().max(1) as f64
    }

    /// When the rate first came within `low ..= high` of the steady rate (from the floor: up
    /// to `low` of it; from the ceiling: down to `high` of it).
    fn settle(&self, low: f64, high: f64) -> Option<Duration> {
        let steady = self.steady_rate();
        self.run
            .ticks_between(Duration::ZERO, STEADY_END)
            .iter()
            .find(|t| (low * steady..=high * steady).contains(&Self::rate_cpus(t)))
            .map(|t| t.now)
    }

    /// How long after the load step the rate first fell to `share` of the steady rate.
    fn reaction(&self, share: f64) -> Option<Duration> {
        let steady = self.steady_rate();
        let after = self.run.ticks_between(STEADY_END, STEADY_END * 2);
        after
            .iter()
            .find(|t| Self::rate_cpus(t) <= share * steady)
            .map(|t| t.now.saturating_sub(STEADY_END))
    }

    fn report(&self, name: &str) {
        for p in &self.run.phases {
            println!(
                "{name} {}: p99 {:.2}× baseline, harvest {:.2} of the spare, throttled {}",
                p.name,
                self.p99_ratio(&p.name),
                p.harvest,
                p.throttled_periods
            );
        }
        println!(
            "{name}: steady rate {:.2} CPU, settled {:?}, step reaction {:?}",
            self.steady_rate(),
            self.settle(0.8, 1.25),
            self.reaction(0.9)
        );
    }
}

const FLOOR: f64 = 0.05;
const CEILING: f64 = 0.75;
const SECOND: Duration = Duration::from_secs(1);

#[test]
fn bare_host() {
    let o = Outcome::of(scenarios::bare_host(), FLOOR);
    o.report("bare host");
    let (steady, _) = o.phase("steady");
    assert!(steady.harvest >= 0.45, "harvest {}", steady.harvest);
    assert!(o.p99_ratio("steady") <= 2.5, "{}", o.p99_ratio("steady"));
    // From the floor to 0.8 of the steady rate within 3 s.
    let settled = o
        .settle(0.8, f64::INFINITY)
        .expect("reaches the steady rate");
    assert!(settled <= 3 * SECOND, "{settled:?}");
    // The foreground × 1.5: elastic work gives way (its polls yield to the requests on their
    // workers, so the rate need not move) and the foreground keeps its latency.
    assert!(o.phase("step").0.elastic_cpu < steady.elastic_cpu);
    assert!(o.p99_ratio("step") <= 2.5, "{}", o.p99_ratio("step"));
}

#[test]
fn quota_1_5() {
    let o = Outcome::of(scenarios::quota_1_5(), FLOOR);
    o.report("quota 1.5");
    let (steady, _) = o.phase("steady");
    let (step, _) = o.phase("step");
    // One holder (the holder cap rounds the headroom's ~0.87 CPU up to 1), its polls deferred
    // on its worker behind the requests handed to it: ~0.6 of the spare.
    assert!(steady.harvest >= 0.55, "harvest {}", steady.harvest);
    assert!(o.p99_ratio("steady") <= 2.5, "{}", o.p99_ratio("steady"));
    // The headroom and the quota brake keep the quota from throttling the foreground.
    assert!(
        steady.throttled_periods <= 2,
        "{}",
        steady.throttled_periods
    );
    assert!(step.throttled_periods <= 3, "{}", step.throttled_periods);
    assert!(o.p99_ratio("step") <= 3.0, "{}", o.p99_ratio("step"));
}

#[test]
fn eight_workers() {
    let o = Outcome::of(scenarios::eight_workers(), FLOOR);
    o.report("8 workers");
    // Workers the OS preempts strand their queues: the step holds elastic work low enough
    // that the foreground keeps its latency.
    assert!(o.p99_ratio("steady") <= 1.5, "{}", o.p99_ratio("steady"));
    assert!(o.phase("steady").0.elastic_cpu > 0.0);
}

#[test]
fn neighbour() {
    let o = Outcome::of(scenarios::neighbour(), FLOOR);
    o.report("neighbour");
    let (quiet, _) = o.phase("quiet");
    let (beside, _) = o.phase("neighbour");
    // Elastic work gives the neighbour's CPU back, and the foreground keeps its latency.
    assert!(
        beside.elastic_cpu < quiet.elastic_cpu * 0.6,
        "{beside:?} vs {quiet:?}"
    );
    assert!(
        o.p99_ratio("neighbour") <= 1.5,
        "{}",
        o.p99_ratio("neighbour")
    );
}

#[test]
fn long_polls() {
    let o = Outcome::of(scenarios::long_polls(), FLOOR);
    o.report("long polls");
    // On the idle pool: the kernel keeps long polls off the foreground's cores.
    assert!(o.p99_ratio("steady") <= 1.1, "{}", o.p99_ratio("steady"));
    assert!(o.phase("steady").0.harvest >= 0.5);
    let settled = o
        .settle(0.8, f64::INFINITY)
        .expect("reaches the steady rate");
    assert!(settled <= 3 * SECOND, "{settled:?}");
}

#[test]
fn three_classes() {
    let o = Outcome::of(scenarios::three_classes(), FLOOR);
    o.report("three classes");
    let (steady, _) = o.phase("steady");
    assert!(steady.harvest >= 0.6, "harvest {}", steady.harvest);
    assert!(o.p99_ratio("steady") <= 1.2, "{}", o.p99_ratio("steady"));
    for (name, cpu) in o.run.class_names.iter().zip(&steady.class_cpu) {
        assert!(*cpu > 0.01, "{name} ran {cpu}");
    }
}

#[test]
fn from_the_ceiling() {
    let o = Outcome::of(scenarios::bare_host(), CEILING);
    o.report("bare host from the ceiling");
    // Down from the ceiling to 1.25 × the steady rate within 10 s (7.4 s now: steps down are
    // twice the steps up, boosted only while the signal is far under its target).
    let settled = o.settle(0.0, 1.25).expect("comes down");
    assert!(settled <= 10 * SECOND, "{settled:?}");
    assert!(o.p99_ratio("steady") <= 2.5, "{}", o.p99_ratio("steady"));
}

#[test]
fn three_nodes() {
    for (i, node) in scenarios::three_nodes().into_iter().enumerate() {
        let o = Outcome::of(node, FLOOR);
        o.report(&format!("node {i}"));
        assert!(
            o.p99_ratio("steady") <= 2.5,
            "node {i}: {}",
            o.p99_ratio("steady")
        );
        let (steady, _) = o.phase("steady");
        assert!(
            steady.throttled_periods <= 2,
            "node {i}: {}",
            steady.throttled_periods
        );
        assert!(steady.elastic_cpu > 0.0, "node {i}");
    }
}

// The targets of harvesting the spare, on the scenarios calibrated against the demo: inside a
// quota at least 0.85 of the spare at no more than 1.1 × the baseline's p99; after a × 1.5
// foreground step the signal back under its allowance within 250 ms; after the step ends,
// elastic work back to 0.9 of its earlier level within 2 s (each as the demo's `step` phase
// reports it).

/// The decision step, and at each tick what it steered on against its target.
struct Recorded {
    step: DecisionStep,
    /// Per tick: (now, the signal over the baseline, the allowance it steps against).
    signal: Vec<(Duration, Option<Duration>, Duration)>,
}

impl Steering for Recorded {
    fn tick(&mut self, obs: &Observation<'_>) -> Vec<ClassCommand> {
        let commands = self.step.tick(obs);
        if let Some(s) = self.step.decider().steered() {
            self.signal.push((obs.now, s.value, s.target));
        }
        commands
    }

    fn between(&mut self, now: Duration, obs: &FastObservation) -> Option<Vec<ClassCommand>> {
        self.step.between(now, obs)
    }
}

const WARM: Duration = Duration::from_secs(5);
const CALM: Duration = Duration::from_secs(15);
const STEP: Duration = Duration::from_secs(10);

/// `scenario`'s plant through "warm" (5 s), "steady" (15 s), "step" (10 s, the foreground
/// × 1.5), "after" (10 s, back to × 1), steered from the floor; and its baseline.
fn stepped(scenario: Scenario) -> (Run, Run, Recorded) {
    let scenario = Scenario::new(scenario.config)
        .classes_start_at(FLOOR)
        .phase(ScenarioPhase::new("warm", WARM))
        .phase(ScenarioPhase::new("steady", CALM))
        .phase(ScenarioPhase::new("step", STEP).load(1.5))
        .phase(ScenarioPhase::new("after", STEP).load(1.0));
    let base = scenario.baseline().expect("baseline");
    let mut rec = Recorded {
        step: DecisionStep::new(&scenario.config, FLOOR).expect("valid start"),
        signal: Vec::new(),
    };
    let run = scenario.run(&mut rec).expect("run");
    (run, base, rec)
}

/// The steady phase: (of the spare, p99 × baseline's).
fn harvest(run: &Run, base: &Run) -> (f64, f64) {
    let (p, b) = (run.phase("steady").unwrap(), base.phase("steady").unwrap());
    (p.harvest, p.p99_over(b).unwrap())
}

/// From the up step, until the first tick whose signal is at or under its allowance (`None`:
/// none in the step).
fn under_allowance(rec: &Recorded) -> Option<Duration> {
    let up = WARM + CALM;
    rec.signal
        .iter()
        .filter(|(now, ..)| *now > up && *now <= up + STEP)
        .find(|(_, value, target)| value.is_some_and(|v| v <= *target))
        .map(|(now, ..)| *now - up)
}

/// From the down step, until the first tick at which elastic work ran at 0.9 of its mean over
/// the steady phase (`None`: not in the phase after).
fn back_to_level(run: &Run) -> Option<Duration> {
    let level = run.phase("steady").unwrap().elastic_cpu;
    let down = WARM + CALM + STEP;
    run.ticks_between(down + run.tick, down + STEP)
        .iter()
        .find(|t| t.elastic_cpus(run.tick) >= 0.9 * level)
        .map(|t| t.now - down)
}

fn report(name: &str, run: &Run, base: &Run, rec: &Recorded) {
    let (h, r) = harvest(run, base);
    println!(
        "{name}: steady {h:.3} of the spare at {r:.3}× the baseline's p99; under the allowance \
         {:?} after the up step; elastic back to 0.9 {:?} after the down step",
        under_allowance(rec),
        back_to_level(run)
    );
}

#[test]
fn demo_quota_harvests_the_spare() {
    // The plant reads ~0.04 over the demo in the quota: each bar sits above the 0.85 target by
    // that much, and fails the headroom that took the busiest recent tick for the foreground
    // (0.850 and 0.870).
    for (name, scenario, least) in [
        ("demo quota", scenarios::demo_quota(), 0.87),
        ("coarse quota", scenarios::demo_coarse_quota(), 0.88),
    ] {
        let (run, base, rec) = stepped(scenario);
        report(name, &run, &base, &rec);
        let (harvest, ratio) = harvest(&run, &base);
        assert!(harvest >= least, "{name}: {harvest}");
        assert!(ratio <= 1.1, "{name}: {ratio}");
    }
}

#[test]
fn demo_reacts_to_a_load_step() {
    for (name, scenario) in [
        ("demo", scenarios::demo()),
        ("demo quota", scenarios::demo_quota()),
    ] {
        let (run, base, rec) = stepped(scenario);
        report(name, &run, &base, &rec);
        let under = under_allowance(&rec).expect("under the allowance in the step");
        assert!(under <= Duration::from_millis(250), "{name}: {under:?}");
    }
}

#[test]
fn demo_recovers_after_a_load_step() {
    for (name, scenario) in [
        ("demo", scenarios::demo()),
        ("demo quota", scenarios::demo_quota()),
    ] {
        let (run, base, rec) = stepped(scenario);
        report(name, &run, &base, &rec);
        let back = back_to_level(&run).expect("back to 0.9 of the level");
        assert!(back <= 2 * SECOND, "{name}: {back:?}");
    }
}
