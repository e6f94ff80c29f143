//! The real decision step ([`Decider`]) steering the plant: each tick's [`Observation`] as the
//! governor would read it, each class's [`ClassDecision`](elastic_cpu_core::decide::ClassDecision)
//! as the governor would apply it.
//!
//! The plant's classes map to the decision's as an `Elastic` places them: the first class on
//! the runtime is the `Elastic`'s own, the others on the runtime members of its group (weight 1,
//! unless set with [`DecisionStep::weights`]), a class on the pool the idle class (one at most).
//! Between ticks the step's brakes look every `fast_interval`: the backlog brake on an alarm
//! raised while a request has waited past 4 × the target (the library's threshold), the quota
//! brake on the process's CPU time.

use std::cell::Cell;
use std::time::Duration;

use elastic_cpu_core::decide::{
    idle_limit, Alarm, ClassKind, ClassReading, Decider, DeciderSettings, HostReading, IdleStart,
    Part, QuietWindow, QuotaLimit, RunQueueWaits, SignalReading, SignalSource, TickReadings,
    BRAKE_FACTOR,
};
use elastic_cpu_core::SettingError;

use crate::config::{PlantConfig, RunsOn};
use crate::observe::{ClassCommand, FastObservation, Observation, Steering};

/// The backlog alarm as the plant raises it: a request waited past `at`.
#[derive(Debug)]
struct BacklogAlarm {
    at: Duration,
    count: Cell<u64>,
    raised: Cell<bool>,
}

impl Alarm for BacklogAlarm {
    fn alarms(&self) -> u64 {
        self.count.get()
    }

    fn take_alarm(&self) -> bool {
        self.raised.replace(false)
    }
}

/// The real decision step as a [`Steering`] of the plant.
#[derive(Debug)]
pub struct DecisionStep {
    decider: Decider,
    /// For each plant class, its place in the decision's order.
    places: Vec<usize>,
    /// Each decision class's hold (held, braking), as the last changes left it.
    held: Vec<(bool, bool)>,
    /// The host was handed to the decision (at the first tick).
    host_set: bool,
    /// The probe's window in ticks.
    window: usize,
    /// Each decision class's reading (kept to reuse its memory).
    readings: Vec<ClassReading>,
    alarm: BacklogAlarm,
}

impl DecisionStep {
    /// The step with the library's defaults for `config`'s plant, its classes starting at
    /// `share` of the CPUs.
    ///
    /// # Errors
    ///
    /// A `share` outside the default bounds.
    pub fn new(config: &PlantConfig, share: f64) -> Result<DecisionStep, SettingError> {
        Self::with_settings(config, DeciderSettings::library(config.cpus as f64), share)
    }

    /// The step with `settings` (their `cpus` are replaced by the plant's) for `config`'s
    /// plant, its classes starting at `share`.
    ///
    /// # Errors
    ///
    /// A `share` outside the controller's bounds, or a bad controller setting.
    pub fn with_settings(
        config: &PlantConfig,
        mut settings: DeciderSettings,
        share: f64,
    ) -> Result<DecisionStep, SettingError> {
        settings.cpus = config.cpus as f64;
        settings.initial_share = share;
        settings.intervals = config.probe_window;
        let controller = settings.controller.clone();
        let alarm = BacklogAlarm {
            at: controller.target_p99.saturating_mul(BRAKE_FACTOR),
            count: Cell::new(0),
            raised: Cell::new(false),
        };
        let mut decider = Decider::new(settings)?;
        let mut places = Vec::with_capacity(config.classes.len());
        let mut own_taken = false;
        let mut pool = Vec::new();
        for (i, class) in config.classes.iter().enumerate() {
            match class.placement {
                RunsOn::Runtime if !own_taken => {
                    own_taken = true;
                    places.push(0);
                }
                RunsOn::Runtime => {
                    let at = decider
                        .add_member(ClassKind::Member(i), Part::new(&class.name, 1.0, None, 0.0));
                    places.push(at);
                }
                RunsOn::Pool => {
                    pool.push(i);
                    places.push(usize::MAX);
                }
            }
        }
        if !pool.is_empty() {
            // As an `Elastic` makes it: at the ceiling on a bare host, at the group's share in
            // a quota, a controller with the idle class's settings.
            let start = IdleStart {
                elastic_share: decider.group_share(),
                fixed: decider.fixed(),
                quota: config.quota.is_some(),
            };
            let limit = idle_limit(&controller, start)?;
            let at = decider.add_solo(ClassKind::Idle, limit, controller.min_share, true);
            for i in pool {
                places[i] = at;
            }
        }
        let classes = decider.kinds().len();
        Ok(DecisionStep {
            decider,
            places,
            held: vec![(false, false); classes],
            host_set: false,
            window: config.probe_window,
            readings: Vec::with_capacity(classes),
            alarm,
        })
    }

    /// The decision step as it stands.
    pub fn decider(&self) -> &Decider {
        &self.decider
    }
}

/// The plant's quiet window: its trimmed p99 over the last ticks, as the probe's.
struct PlantQuiet<'a, 'b>(&'a Observation<'b>);

impl QuietWindow for PlantQuiet<'_, '_> {
    fn quiet_p99(&mut self, ticks: usize) -> Option<Duration> {
        self.0.trimmed_p99_over(ticks)
    }
}

impl Steering for DecisionStep {
    fn tick(&mut self, obs: &Observation<'_>) -> Vec<ClassCommand> {
        if !self.host_set {
            let quota = obs.quota.map(|q| QuotaLimit {
                cpus: q.cpus,
                period: q.period,
            });
            let host = HostReading {
                cpus: obs.cpus,
                quota,
                in_quota: quota.is_some(),
                parallelism: obs.cpus.ceil().max(1.0) as usize,
                throttling: true,
            };
            self.decider.set_host(&host, obs.now);
            self.host_set = true;
        }
        // Each decision class's reading: the sum of the plant classes placed in it.
        self.readings.clear();
        self.readings
            .resize(self.decider.kinds().len(), ClassReading::default());
        for (class, &at) in obs.classes.iter().zip(&self.places) {
            let Some(r) = self.readings.get_mut(at) else {
                continue;
            };
            r.charged += class.cpu;
            r.waited |= class.waited;
            r.busy |= class.waiters > 0 || class.holders > 0;
            r.has_tokens |= class.has_tokens;
            r.holders += class.holders;
            r.steering |= class.holders > 0 || class.waited;
            r.long_polls |= class.long_polls;
        }
        let sched = obs.trimmed_p99_over(self.window);
        let (value, source) = if obs.throttled {
            (Some(Duration::MAX), SignalSource::Throttled)
        } else {
            match (sched, obs.run_queue_delay) {
                (Some(s), Some(rq)) if rq > s => (Some(rq), SignalSource::RunQueue),
                (Some(s), _) => (Some(s), SignalSource::Sched),
                (None, Some(rq)) => (Some(rq), SignalSource::RunQueue),
                (None, None) => (None, SignalSource::None),
            }
        };
        let (runtime, bystanders) = obs.run_queue_waits();
        let readings = TickReadings {
            now: obs.now,
            period: obs.period,
            intervals: self.window,
            signal: SignalReading {
                value,
                source,
                sched_p99: sched,
                run_queue_delay: obs.run_queue_delay,
                bystander_delay: obs.bystander_delay,
                throttled: obs.throttled,
            },
            run_queue: Some(RunQueueWaits {
                runtime,
                bystanders,
            }),
            throttled_periods: obs.throttled_periods,
            process_cpu: Some(obs.process_cpu),
            foreground_per_sec: obs.arrivals_per_sec,
            classes: &self.readings,
        };
        self.decider.step(&readings, &mut PlantQuiet(obs));
        self.commands()
    }

    fn between(&mut self, now: Duration, obs: &FastObservation) -> Option<Vec<ClassCommand>> {
        if obs.backlog_age >= self.alarm.at {
            self.alarm.count.set(self.alarm.count.get() + 1);
            self.alarm.raised.set(true);
        }
        let before = self.held.clone();
        self.decider
            .between(now, Some(obs.process_cpu), &self.alarm);
        // Only the holds change between ticks: the rates stand, their balances untouched.
        let commands = self
            .commands()
            .into_iter()
            .map(|c| ClassCommand { retune: true, ..c });
        (self.held != before).then(|| commands.collect())
    }
}

impl DecisionStep {
    /// Each plant class's command from the decisions and the holds as they stand.
    fn commands(&mut self) -> Vec<ClassCommand> {
        let held = &mut self.held;
        self.decider.hold_changes(|c| {
            if let Some(h) = held.get_mut(c.class) {
                *h = (c.held, c.braking);
            }
        });
        let decisions = self.decider.decisions();
        self.places
            .iter()
            .map(|&at| {
                let d = decisions.get(at).copied().unwrap_or_default();
                let (held, braking) = self.held.get(at).copied().unwrap_or_default();
                ClassCommand {
                    rate: d.rate,
                    max_holders: d.holder_cap,
                    held,
                    braking,
                    retune: d.retune,
                }
            })
            .collect()
    }
}
