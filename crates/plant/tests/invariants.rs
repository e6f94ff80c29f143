//! Properties of the physics over random plants (with and without the I/O driver, idle CPUs'
//! wake-up and a real-time client): CPU is conserved in every tick, and the quota is never
//! exceeded in a period.

use std::time::Duration;

use elastic_cpu_plant::{
    ClassConfig, Client, Foreground, Neighbour, Plant, PlantConfig, Quota, Service, StaticShare,
};
use proptest::prelude::*;

fn plant(
    seed: u64,
    (cpus, workers, pool_threads): (usize, usize, usize),
    load: f64,
    share: f64,
    quota: Option<f64>,
    neighbour: Option<f64>,
    (io_driver, wakes, client): (bool, bool, bool),
) -> (PlantConfig, StaticShare) {
    let service = if seed.is_multiple_of(2) {
        Service::Fixed(Duration::from_micros(100))
    } else {
        Service::Exponential(Duration::from_micros(100))
    };
    let mut classes = vec![ClassConfig::new("short", 3, Duration::from_micros(70))];
    if pool_threads > 0 {
        classes.push(ClassConfig::new("long", 2, Duration::from_millis(5)).on_pool());
    }
    let shares = vec![share; classes.len()];
    let config = PlantConfig {
        seed,
        cpus,
        workers,
        pool_threads,
        quota: quota.map(Quota::new),
        foreground: Foreground::load(load, service),
        classes,
        neighbour: neighbour.map(Neighbour::new),
        io_driver,
        wake_up: if wakes {
            Duration::from_micros(200)
        } else {
            Duration::ZERO
        },
        client: client.then_some(CLIENT),
        ..PlantConfig::default()
    };
    (config, StaticShare::of_cpus(&shares, cpus as f64))
}

const CLIENT: Client = Client {
    threads: 2,
    per_request: Duration::from_micros(30),
};

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn cpu_is_conserved_and_the_quota_is_never_exceeded(
        seed in any::<u64>(),
        threads in (1usize..=4, 1usize..=8, 0usize..=2),
        load in 0.0f64..2.5,
        share in 0.0f64..0.8,
        quota in proptest::option::of(0.3f64..4.0),
        neighbour in proptest::option::of(0.0f64..2.0),
        extras in (any::<bool>(), any::<bool>(), any::<bool>()),
    ) {
        let (config, mut steering) = plant(seed, threads, load, share, quota, neighbour, extras);
        let mut plant = Plant::new(config.clone()).unwrap();
        plant.pause_at(Duration::from_millis(700), Duration::from_millis(150));
        plant.run_for(Duration::from_secs(2), &mut steering);

        let capacity = config.tick * config.cpus as u32;
        prop_assert_eq!(plant.trace().len(), 20);
        for t in plant.trace() {
            prop_assert!(t.process_cpu + t.neighbour_cpu <= capacity, "{:?}", t);
            let parts = t.foreground_cpu + t.class_cpu.iter().sum::<Duration>();
            prop_assert_eq!(parts, t.process_cpu);
        }
        let total: Duration = plant.trace().iter().map(|t| t.process_cpu).sum();
        prop_assert_eq!(total, plant.process_cpu());
        match config.quota {
            Some(q) => {
                let budget = q.period.mul_f64(q.cpus);
                prop_assert_eq!(plant.period_usage().len(), 20);
                for &p in plant.period_usage() {
                    prop_assert!(p <= budget, "{:?} > {:?}", p, budget);
                }
            }
            None => prop_assert_eq!(plant.throttled_periods(), 0),
        }
        if let Service::Fixed(service) = config.foreground.service {
            // The client spends its share of each request in two halves.
            let client = config.client.map_or(Duration::ZERO, |c| c.per_request);
            let most = (service + client) * plant.arrivals() as u32;
            prop_assert!(plant.foreground_cpu() <= most);
        }
    }
}
