//! The decision: one tick's readings to one tick's decisions, as one pure step.
//!
//! [`Decider`] holds the control loop's state as plain values (no clock, no atomics, no I/O):
//! the elastic group's controller and its members' parts, the idle class's and each gate's
//! controller, the quiet readings' schedule and baselines, the overhead correction, the quota's
//! headroom and the holds. [`Decider::step`] takes one tick's [`TickReadings`] and sets each
//! class's [`ClassDecision`]; the driver applies them to its queues. The pacer's governor drives
//! it from the probe and the OS; the plant drives it from a simulation, so a controller change is
//! tried in seconds.
//!
//! ```
//! use std::time::Duration;
//! use elastic_cpu_core::decide::{
//!     ClassReading, Decider, DeciderSettings, QuietWindow, SignalReading, TickReadings,
//! };
//! use elastic_cpu_core::ControllerConfig;
//!
//! struct NoQuiet;
//! impl QuietWindow for NoQuiet {
//!     fn quiet_p99(&mut self, _ticks: usize) -> Option<Duration> {
//!         Some(Duration::from_micros(200))
//!     }
//! }
//!
//! let mut d = Decider::new(DeciderSettings::new(ControllerConfig::default(), 2.0))?;
//! let busy = ClassReading { waited: true, busy: true, ..ClassReading::default() };
//! let readings = TickReadings {
//!     now: Duration::from_millis(100),
//!     period: Duration::from_millis(100),
//!     intervals: 10,
//!     signal: SignalReading::default(),
//!     run_queue: None,
//!     throttled_periods: 0,
//!     process_cpu: None,
//!     foreground_per_sec: 0.0,
//!     classes: &[busy],
//! };
//! d.step(&readings, &mut NoQuiet);
//! assert!(d.decisions()[0].rate > 0);
//! # Ok::<(), elastic_cpu_core::SettingError>(())
//! ```

mod apply;
mod backlog_brake;
mod brakes;
mod class;
mod decisions;
mod headroom;
mod hold;
mod idle;
mod overhead;
mod part;
mod quiet;
mod quota_brake;
mod readings;
mod signal;
pub(crate) mod split;
mod step;
mod view;

use std::collections::VecDeque;
use std::time::Duration;

pub use self::backlog_brake::{
    BacklogChange, BRAKE_FACTOR, BRAKE_MAX, BRAKE_POLL, DEFAULT_BRAKE_HOLD,
};
use self::brakes::Brakes;
pub use self::brakes::{BrakeStep, HostReading};
use self::class::Seen;
pub use self::class::{holder_cap, ClassKind, Limit, IDLE_TARGET_FACTOR};
pub use self::decisions::{ClassDecision, HoldChange};
use self::headroom::Headroom;
pub use self::hold::Hold;
pub use self::idle::{idle_controller, idle_limit, IdleStart, IDLE_MAX_SHARE};
use self::overhead::{Overhead, TickReading as OverheadReading};
pub use self::part::Part;
use self::quiet::Quiet;
pub use self::quiet::{Baseline, Steered, TargetSource};
pub use self::quota_brake::QuotaChange;
pub use self::readings::{Alarm, ClassReading, QuietWindow, QuotaLimit, TickReadings};
pub use self::signal::{
    window_delay, RunQueueWaits, SignalReading, SignalSource, Waiters, RUN_QUEUE_MIN_TIMESLICES,
};
use crate::{ControllerConfig, SettingError, StepController};

/// What a [`Decider`] is built from.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DeciderSettings {
    /// The elastic group's controller (the idle class and the gates derive theirs from it).
    pub controller: ControllerConfig,
    /// The group's share to start from.
    pub initial_share: f64,
    /// A fixed share: the group's and the idle class's controllers are off.
    pub fixed: Option<f64>,
    /// CPUs the shares are of, until [`Decider::set_host`] says otherwise.
    pub cpus: f64,
    /// The target is measured from quiet readings (else the controller's own is kept).
    pub measured_target: bool,
    /// The target before a quiet reading, with a measured target.
    pub default_target: Duration,
    /// A poll quantum: the least latency elastic work may add with a measured target.
    pub quantum: Duration,
    /// The probe's window, in ticks.
    pub intervals: usize,
    /// Hold elastic classes to the quota's headroom.
    pub quota_headroom: bool,
    /// Cap the grants held at once to what the share pays for (the group and the idle class).
    pub cap_holders: bool,
    /// The backlog brake holds elastic work while a foreground task waits past its threshold.
    pub backlog_brake: bool,
}

impl DeciderSettings {
    /// The library's defaults ([`ControllerConfig::library`], the target measured, a 50 µs
    /// poll quantum, every modifier on) on `cpus`: what an `Elastic` built with defaults
    /// decides with.
    pub fn library(cpus: f64) -> DeciderSettings {
        DeciderSettings::new(ControllerConfig::library(), cpus)
    }

    /// Settings with `controller`'s target measured from quiet readings, on `cpus`.
    pub fn new(controller: ControllerConfig, cpus: f64) -> DeciderSettings {
        DeciderSettings {
            initial_share: controller.min_share,
            controller,
            fixed: None,
            cpus,
            measured_target: true,
            default_target: Duration::from_millis(1),
            quantum: Duration::from_micros(50),
            intervals: 10,
            quota_headroom: true,
            cap_holders: true,
            backlog_brake: true,
        }
    }
}

/// How a class's share is decided: a member's is its part of the group's, any other class's
/// its own limit's.
#[derive(Debug)]
enum Role {
    Member(Part),
    Solo(Limit),
}

/// One class in the decision.
#[derive(Debug)]
struct Class {
    kind: ClassKind,
    role: Role,
    /// The lowest share the quota's headroom may hold a solo class to: it always moves.
    floor: f64,
    cap_holders: bool,
    seen: Seen,
}

/// The decision's state. Classes are kept in one order, the one readings and decisions are
/// in: the elastic group's members first (the `Elastic`'s own one first), then the others in
/// the order they were added (the idle class, the gates).
#[derive(Debug)]
pub struct Decider {
    settings: DeciderSettings,
    /// The elastic group's controller, its share the members split.
    group: Limit,
    classes: Vec<Class>,
    decisions: Vec<ClassDecision>,
    quiet: Quiet,
    overhead: Overhead,
    /// `None`: the quota's headroom is off.
    headroom: Option<Headroom>,
    /// CPUs the shares are of, the quota in force, and whether a quota was seen.
    cpus: f64,
    quota: Option<QuotaLimit>,
    in_quota: bool,
    /// The target the group stepped on at the last tick, and its source.
    target: Duration,
    target_source: TargetSource,
    /// What the classes stepped on at the last tick.
    steered: Option<Steered>,
    /// Running time charged to elastic classes, summed tick by tick.
    charged: Duration,
    /// The run-queue waits of the last ticks, newest last.
    run_queue: VecDeque<RunQueueWaits>,
    /// The holds on now ([`Hold`] bits).
    holds: u8,
    paused: bool,
    closed: bool,
    steering: bool,
    /// Scratch for the split.
    wants: Vec<crate::Want>,
    /// The backlog brake and the quota brake.
    brakes: Brakes,
    parts: Vec<f64>,
}

/// The name of the `Elastic`'s own member.
pub const DEFAULT_CLASS: &str = "default";

/// The signal a class with a measured target steps on: with a looser target (`factor`), the
/// bystanders' component still counts at their allowance. Idle priority does not keep a
/// normal-priority client's wake-ups short (on a busy core they queue and preempt), so the
/// looser target would leave the idle class at every CPU while they wait.
pub fn steps_on(steered: &Steered, factor: u32) -> Option<Duration> {
    let bystanders = steered.bystanders.map(|b| b.saturating_mul(factor));
    steered.value.max(bystanders)
}
