//! The plant: a deterministic simulation, on the manual clock, of what the elastic CPU governor
//! steers, so a decision step can be tested against it in seconds.
//!
//! It models a host's CPUs shared by the OS among threads (a timeslice when more want them
//! than there are; optionally, idle CPUs that take a while to wake), a runtime's workers
//! polling tasks as tokio's do (elastic polls deferred as `yield_now` defers them), foreground
//! requests arriving open-loop (optionally through the runtime's I/O driver, and with a client
//! at real-time priority inside the process), elastic classes whose tasks loop on grants of a
//! real [`WorkQueue`](elastic_cpu_core::WorkQueue), an idle-priority pool that normal threads
//! preempt, a CFS quota with its periods and throttling, host pauses and a noisy neighbour.
//! Everything is discrete events: no thread, no wall clock; the same seed gives the same run.
//! [`scenarios::demo`] and its siblings are calibrated against the real demo.
//!
//! At every tick the plant hands a [`Steering`] an [`Observation`] (what the probe and the
//! governor would read) and applies the [`ClassCommand`]s it returns; between ticks
//! [`Steering::between`] gets a [`FastObservation`] for brakes. [`StaticShare`] is a fixed
//! share; a decision step plugs in through one adapter implementing [`Steering`].
//!
//! ```
//! use elastic_cpu_plant::{ClassConfig, ScenarioPhase, PlantConfig, Scenario, StaticShare};
//! use std::time::Duration;
//!
//! // 2 CPUs, the foreground at 0.5 CPU, one class of short polls held at 0.5 CPU.
//! let config = PlantConfig {
//!     classes: vec![ClassConfig::new("batch", 4, Duration::from_micros(70))],
//!     ..Default::default()
//! };
//! let run = Scenario::new(config)
//!     // The bucket starts full: a second's worth of tokens is spent here.
//!     .phase(ScenarioPhase::new("warm", Duration::from_secs(2)))
//!     .phase(ScenarioPhase::new("steady", Duration::from_secs(3)))
//!     .phase(ScenarioPhase::new("step", Duration::from_secs(1)).load(1.5))
//!     .run(&mut StaticShare::of_cpus(&[0.25], 2.0))
//!     .unwrap();
//! let steady = run.phase("steady").unwrap();
//! assert!((steady.foreground_cpu - 0.5).abs() < 0.05);
//! assert!((steady.elastic_cpu - 0.5).abs() < 0.05);
//! assert!(run.phase("step").unwrap().sched_p99 > steady.sched_p99);
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod config;
mod decision;
mod observe;
mod report;
mod scenario;
pub mod scenarios;
mod sim;

pub use config::{ClassConfig, Client, Foreground, Neighbour, PlantConfig, Quota, RunsOn, Service};
pub use decision::DecisionStep;
pub use observe::{
    ClassCommand, ClassObservation, FastObservation, Observation, StaticShare, Steering, LONG_POLL,
};
pub use report::{PhaseSummary, PlantTick};
pub use scenario::{Run, Scenario, ScenarioPhase};
pub use sim::Plant;
