//! The boundary to the steering: what an observation reads, and what each command does.

use std::time::Duration;

use elastic_cpu_plant::{
    ClassCommand, ClassConfig, FastObservation, Foreground, Observation, Plant, PlantConfig,
    Service, StaticShare, Steering,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Gives `commands` at every tick, and records what it saw.
struct Recorder {
    commands: Vec<ClassCommand>,
    seen: Vec<String>,
    checks: Vec<bool>,
}

impl Recorder {
    fn new(commands: Vec<ClassCommand>) -> Self {
        Self {
            commands,
            seen: Vec::new(),
            checks: Vec::new(),
        }
    }
}

impl Steering for Recorder {
    fn tick(&mut self, obs: &Observation<'_>) -> Vec<ClassCommand> {
        // The window's p99 is the last ten ticks', and one tick's differs from it.
        self.checks.push(obs.sched_p99 == obs.sched_p99_over(10));
        self.checks
            .push(obs.run_queue_delay == obs.run_queue_delay_over(10));
        self.seen.push(format!("{obs:?}"));
        self.commands.clone()
    }
}

fn config(classes: Vec<ClassConfig>) -> PlantConfig {
    PlantConfig {
        foreground: Foreground::load(0.5, Service::Exponential(Duration::from_micros(100))),
        classes,
        ..PlantConfig::default()
    }
}

#[test]
fn an_observation_reads_what_the_plant_did() {
    let mut plant = Plant::new(config(vec![
        ClassConfig::new("short", 4, Duration::from_micros(70)),
        ClassConfig::new("long", 2, ms(5)),
    ]))
    .unwrap();
    // 0.1 CPU each: work waits for tokens.
    let mut steering = Recorder::new(vec![ClassCommand::rate(100_000_000); 2]);
    plant.run_for(Duration::from_secs(3), &mut steering);
    assert_eq!(steering.seen.len(), 30);
    assert!(steering.checks.iter().all(|&ok| ok));

    /// What the last tick's observation said: arrivals a second, per class (waited, long
    /// polls, rate), the process's CPU.
    #[derive(Default)]
    struct Last {
        arrivals: f64,
        classes: Vec<(bool, bool, u64)>,
        cpu: Duration,
    }
    impl Steering for Last {
        fn tick(&mut self, obs: &Observation<'_>) -> Vec<ClassCommand> {
            let classes = obs.classes.iter().map(|c| (c.waited, c.long_polls, c.rate));
            self.classes = classes.collect();
            self.arrivals = obs.arrivals_per_sec;
            self.cpu = obs.process_cpu;
            assert_eq!(obs.period, ms(100));
            assert_eq!(obs.cpus, 2.0);
            assert!(obs.history_len() <= 60);
            vec![ClassCommand::rate(100_000_000); 2]
        }
    }
    let mut last = Last::default();
    plant.run_for(ms(100), &mut last);
    let Last {
        arrivals,
        classes,
        cpu,
    } = last;
    // 5000 a second on average; one tick's count is noisy.
    assert!((3500.0..6500.0).contains(&arrivals), "{arrivals}");
    assert_eq!(classes[0], (true, false, 100_000_000));
    assert_eq!(classes[1], (true, true, 100_000_000));
    assert_eq!(cpu, plant.process_cpu());
}

#[test]
fn a_holder_cap_bounds_the_cpus_a_class_runs_on() {
    let capped = ClassCommand {
        max_holders: Some(1),
        ..ClassCommand::rate(2_000_000_000)
    };
    let mut plant = Plant::new(config(vec![ClassConfig::new("batch", 4, ms(1))])).unwrap();
    plant.run_for(Duration::from_secs(2), &mut StaticShare::new(vec![capped]));
    for t in &plant.trace()[1..] {
        assert!(t.class_cpu[0] <= ms(100), "{t:?}");
    }
    let used = plant.trace()[10..]
        .iter()
        .map(|t| t.class_cpu[0])
        .sum::<Duration>();
    // One CPU, less what the foreground takes from it: the holder's polls are deferred on
    // its worker, which runs the requests it was handed first.
    assert!(used > ms(800), "{used:?}");
}

/// Sets the rate at the first tick (later ticks command nothing: the classes keep it), and
/// holds every class from a time on, through `between`.
struct HoldAt(Duration, ClassCommand);

impl Steering for HoldAt {
    fn tick(&mut self, obs: &Observation<'_>) -> Vec<ClassCommand> {
        if obs.now == obs.period {
            vec![self.1]
        } else {
            vec![]
        }
    }

    fn between(&mut self, now: Duration, obs: &FastObservation) -> Option<Vec<ClassCommand>> {
        assert_eq!(now, obs.now);
        (now >= self.0).then(|| {
            vec![ClassCommand {
                held: true,
                ..self.1
            }]
        })
    }
}

#[test]
fn a_hold_from_between_stops_new_grants() {
    let mut plant = Plant::new(config(vec![ClassConfig::new("batch", 2, ms(1))])).unwrap();
    let mut steering = HoldAt(Duration::from_secs(1), ClassCommand::rate(500_000_000));
    plant.run_for(Duration::from_secs(2), &mut steering);
    let trace = plant.trace();
    assert!(trace[5].class_cpu[0] > Duration::ZERO);
    // After 1 s only the grants out then (2 × 100 ms, and a poll's overshoot) run.
    let after: Duration = trace[10..].iter().map(|t| t.class_cpu[0]).sum();
    assert!(after <= ms(202), "{after:?}");
    assert_eq!(
        trace[14..].iter().map(|t| t.class_cpu[0]).sum::<Duration>(),
        Duration::ZERO
    );
    assert!(plant.queue(0).unwrap().snapshot().pauses >= 1);
}

#[test]
fn retune_moves_no_balance_and_set_rate_does() {
    let run = |retune: bool| {
        let mut plant = Plant::new(config(vec![
            ClassConfig::new("batch", 2, ms(1)).starting_at(100_000_000)
        ]))
        .unwrap();
        let cmd = ClassCommand {
            retune,
            ..ClassCommand::rate(1_000_000_000)
        };
        plant.run_for(ms(100), &mut StaticShare::new(vec![cmd]));
        plant.queue(0).unwrap().snapshot().balance_nanos
    };
    // set_rate adds the burst's change (0.9 s of tokens); retune adds none.
    assert!(
        run(false) > run(true) + 800_000_000,
        "{} vs {}",
        run(false),
        run(true)
    );
}

#[test]
fn the_trimmed_p99_leaves_out_a_pause_in_one_tick() {
    /// At 1.5 s: (foreground p99, all polls' p99, trimmed) over the last 10 ticks.
    #[derive(Default)]
    struct At15(Option<[Option<Duration>; 3]>);
    impl Steering for At15 {
        fn tick(&mut self, obs: &Observation<'_>) -> Vec<ClassCommand> {
            if obs.now == ms(1500) {
                self.0 = Some([
                    obs.sched_p99_over(10),
                    obs.all_polls_p99_over(10),
                    obs.trimmed_p99_over(10),
                ]);
            }
            vec![ClassCommand::rate(500_000_000)]
        }
    }
    let mut plant = Plant::new(config(vec![ClassConfig::new(
        "batch",
        2,
        Duration::from_micros(70),
    )]))
    .unwrap();
    plant.pause_at(ms(1210), ms(60));
    let mut at = At15::default();
    plant.run_for(Duration::from_secs(2), &mut at);
    let [foreground, all, trimmed] = at.0.unwrap().map(Option::unwrap);
    // The pause, in one tick of ten, holds more than 1 % of the polls past 20 ms.
    assert!(foreground > ms(20), "{foreground:?}");
    assert!(all > ms(20), "{all:?}");
    assert!(trimmed < ms(2), "{trimmed:?}");
}
