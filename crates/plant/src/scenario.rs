//! Scenarios: a plant's configuration and phases of load changes, run to per-phase summaries.

use std::time::Duration;

use elastic_cpu_core::SettingError;

use crate::config::{Neighbour, PlantConfig};
use crate::observe::{ClassCommand, StaticShare, Steering};
use crate::report::{PhaseSummary, PlantTick};
use crate::sim::Plant;

/// A stretch of a scenario: how long, and what changes at its start.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioPhase {
    /// Its name in the summaries.
    pub name: String,
    /// How long it runs.
    pub length: Duration,
    /// The foreground's arrival rate from its start, as a factor of the configuration's
    /// (`None`: unchanged).
    pub load: Option<f64>,
    /// The neighbour from its start (`None`: unchanged; `Some(None)`: off).
    pub neighbour: Option<Option<Neighbour>>,
    /// Host pauses: (offset from the phase's start, span).
    pub pauses: Vec<(Duration, Duration)>,
}

impl ScenarioPhase {
    /// A phase called `name` lasting `length`, changing nothing.
    pub fn new(name: &str, length: Duration) -> Self {
        Self {
            name: name.to_owned(),
            length,
            load: None,
            neighbour: None,
            pauses: Vec::new(),
        }
    }

    /// The foreground at `factor` × the configured arrival rate (1.5: a load step).
    pub fn load(mut self, factor: f64) -> Self {
        self.load = Some(factor);
        self
    }

    /// The neighbour on from the phase's start.
    pub fn neighbour(mut self, n: Neighbour) -> Self {
        self.neighbour = Some(Some(n));
        self
    }

    /// The neighbour off from the phase's start.
    pub fn no_neighbour(mut self) -> Self {
        self.neighbour = Some(None);
        self
    }

    /// Every CPU stops `at` into the phase for `span`.
    pub fn pause(mut self, at: Duration, span: Duration) -> Self {
        self.pauses.push((at, span));
        self
    }
}

/// A plant's configuration and its phases, in order.
///
/// Several heterogeneous nodes are several scenarios, each run with its own steering.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// The plant at the start.
    pub config: PlantConfig,
    /// The phases, run one after the other.
    pub phases: Vec<ScenarioPhase>,
}

impl Scenario {
    /// A scenario of `config` with no phase yet.
    pub fn new(config: PlantConfig) -> Self {
        Self {
            config,
            phases: Vec::new(),
        }
    }

    /// Add a phase at the end.
    pub fn phase(mut self, phase: ScenarioPhase) -> Self {
        self.phases.push(phase);
        self
    }

    /// Every class's bucket starting at `share` of the CPUs (0.05, the floor, in the named
    /// scenarios): a start from the ceiling, for a settle time from above. A share that is not
    /// finite or below zero is 0.
    ///
    /// ```
    /// use elastic_cpu_plant::scenarios;
    ///
    /// let from_above = scenarios::bare_host().classes_start_at(0.75);
    /// assert_eq!(from_above.config.classes[0].initial_rate, 1_500_000_000); // of 2 CPUs
    /// ```
    pub fn classes_start_at(mut self, share: f64) -> Self {
        let cpus = share * self.config.cpus as f64;
        let rate = if cpus.is_finite() {
            cpus.max(0.0) * 1e9
        } else {
            0.0
        };
        for class in &mut self.config.classes {
            class.initial_rate = rate as u64;
        }
        self
    }

    /// The total length of the phases.
    pub fn length(&self) -> Duration {
        self.phases.iter().map(|p| p.length).sum()
    }

    /// Run every phase with elastic work held at zero: the baseline a steered run's foreground
    /// latency is compared with.
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub fn baseline(&self) -> Result<Run, SettingError> {
        let zero = vec![ClassCommand::rate(0); self.config.classes.len()];
        self.run(&mut StaticShare::new(zero))
    }

    /// Run every phase with `steering`.
    ///
    /// # Errors
    /// A setting the plant refuses: the configuration, a phase's load factor (not finite or
    /// below zero) or its neighbour.
    pub fn run<S: Steering + ?Sized>(&self, steering: &mut S) -> Result<Run, SettingError> {
        let mut plant = Plant::new(self.config.clone())?;
        let base = self.config.foreground.arrivals_per_sec;
        let mut phases = Vec::with_capacity(self.phases.len());
        for phase in &self.phases {
            if let Some(factor) = phase.load {
                if !factor.is_finite() || factor < 0.0 {
                    return Err(SettingError::new(
                        "phase.load",
                        factor,
                        "a finite factor, 0 or more",
                    ));
                }
                plant.set_arrivals(base * factor)?;
            }
            if let Some(n) = phase.neighbour {
                plant.set_neighbour(n)?;
            }
            let start = plant.now();
            for &(at, span) in &phase.pauses {
                plant.pause_at(start + at, span);
            }
            plant.run_for(phase.length, steering);
            phases.push(plant.summarize(&phase.name));
        }
        Ok(Run {
            tick: self.config.tick,
            phases,
            ticks: plant.trace().to_vec(),
            periods: plant.period_usage().to_vec(),
            class_names: self.config.classes.iter().map(|c| c.name.clone()).collect(),
        })
    }
}

/// What a scenario's run left: per-phase summaries, the tick trace, the quota periods.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The tick length.
    pub tick: Duration,
    /// One summary per phase, in order.
    pub phases: Vec<PhaseSummary>,
    /// One record per tick.
    pub ticks: Vec<PlantTick>,
    /// The process's CPU time in each quota period (empty without a quota).
    pub periods: Vec<Duration>,
    /// The classes' names, in the order of the per-class figures.
    pub class_names: Vec<String>,
}

impl Run {
    /// The summary of the phase called `name`.
    pub fn phase(&self, name: &str) -> Option<&PhaseSummary> {
        self.phases.iter().find(|p| p.name == name)
    }

    /// The ticks in `from ..= until`.
    pub fn ticks_between(&self, from: Duration, until: Duration) -> &[PlantTick] {
        let a = self.ticks.partition_point(|t| t.now < from);
        let b = self.ticks.partition_point(|t| t.now <= until);
        &self.ticks[a..b.max(a)]
    }

    /// How long after `from` `ok` started to hold at every tick through `until`: the settle
    /// time. `None` if it does not hold at the last tick by `until`.
    ///
    /// ```
    /// use elastic_cpu_plant::{ClassConfig, ScenarioPhase, PlantConfig, Scenario, StaticShare};
    /// use std::time::Duration;
    ///
    /// let config = PlantConfig {
    ///     classes: vec![ClassConfig::new("batch", 2, Duration::from_micros(70))],
    ///     ..Default::default()
    /// };
    /// let run = Scenario::new(config)
    ///     .phase(ScenarioPhase::new("steady", Duration::from_secs(2)))
    ///     .run(&mut StaticShare::of_cpus(&[0.25], 2.0))
    ///     .unwrap();
    /// // The static share sets its rate at the first tick, and keeps it.
    /// let settled = run.settle_time(Duration::ZERO, Duration::from_secs(2), |t| {
    ///     t.class_rate[0] == 500_000_000
    /// });
    /// assert_eq!(settled, Some(Duration::from_millis(100)));
    /// ```
    pub fn settle_time(
        &self,
        from: Duration,
        until: Duration,
        ok: impl Fn(&PlantTick) -> bool,
    ) -> Option<Duration> {
        let ticks = self.ticks_between(from, until);
        let last = ticks.last()?;
        if !ok(last) {
            return None;
        }
        let first_ok = ticks.iter().rposition(|t| !ok(t)).map_or(0, |i| i + 1);
        let at = ticks.get(first_ok).map_or(last.now, |t| t.now);
        Some(at.saturating_sub(from))
    }
}
