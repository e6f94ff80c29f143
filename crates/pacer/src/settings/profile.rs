//! How fast the share moves: [`Profile`], a named set of [`Steps`] or steps of your own.

use std::time::Duration;

use elastic_cpu_core::ControllerConfig;

/// How fast the share moves: a named set of [`Steps`], or steps of your own.
///
/// ```
/// use elastic_cpu_pacer::settings::Steps;
/// use elastic_cpu_pacer::Profile;
///
/// // CockroachDB's slow steps, or the default's with a larger step.
/// let slow = Profile::Cockroach;
/// let faster = Profile::Custom(Steps::default().delta_per_sec(0.1));
/// assert!(faster.steps().delta_per_sec > slow.steps().delta_per_sec);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub enum Profile {
    /// The library default: CockroachDB's step rule with steps sized so the share settles within
    /// a few seconds, a window short enough that the controller sees the effect of its own steps
    /// before it takes many more, and slow start (boosted steps far below the target).
    #[default]
    Default,
    /// CockroachDB's constants (+0.1 %/s, −0.2 %/s, 2.5 s window): slow by design, made for
    /// minutes-long backups on 8-vCPU nodes.
    Cockroach,
    /// Steps of your own (validated when the `Elastic` is built).
    Custom(Steps),
}

impl Profile {
    /// The steps of this profile.
    pub fn steps(self) -> Steps {
        match self {
            Profile::Cockroach => Steps::from_config(&ControllerConfig::cockroach()),
            Profile::Default => Steps::from_config(&ControllerConfig::library()),
            Profile::Custom(steps) => steps,
        }
    }
}

/// The step controller's constants besides its target and bounds (the builder's
/// [`target_p99`](crate::ElasticBuilder::target_p99) and
/// [`share`](crate::ElasticBuilder::share)). An invalid value is a
/// [`BuildError`](crate::BuildError) naming the field. Made from a profile's
/// ([`Profile::steps`]; `Default` is [`Profile::Default`]'s) with the setters below.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Steps {
    /// Step of the share per second of tick period (0.0001 ..= 1.0).
    pub delta_per_sec: f64,
    /// Multiplier on the step when the signal is above the target (above 0).
    pub decrease_factor: f64,
    /// Multiplier on the step of the idle decay (above 0).
    pub inactive_decrease_factor: f64,
    /// Where idle decay stops, as a fraction of the way from the floor to the ceiling (0 ..= 1).
    pub inactive_point: f64,
    /// The governor's tick: how often it reads, decides and applies (1 ms ..= 1 h).
    pub tick: Duration,
    /// The window every percentile is taken over (1 ..= 1000 ticks).
    pub window: Duration,
    /// Largest multiple of the step an upward run grows to while the signal stays far below the
    /// target (slow start); 1 is fixed steps (1 ..= 64).
    pub max_boost: u32,
}

impl Default for Steps {
    /// [`Profile::Default`]'s steps.
    fn default() -> Self {
        Profile::Default.steps()
    }
}

impl Steps {
    /// Set [`delta_per_sec`](Self::delta_per_sec).
    pub fn delta_per_sec(mut self, delta_per_sec: f64) -> Self {
        self.delta_per_sec = delta_per_sec;
        self
    }

    /// Set [`decrease_factor`](Self::decrease_factor).
    pub fn decrease_factor(mut self, decrease_factor: f64) -> Self {
        self.decrease_factor = decrease_factor;
        self
    }

    /// Set [`inactive_decrease_factor`](Self::inactive_decrease_factor).
    pub fn inactive_decrease_factor(mut self, inactive_decrease_factor: f64) -> Self {
        self.inactive_decrease_factor = inactive_decrease_factor;
        self
    }

    /// Set [`inactive_point`](Self::inactive_point).
    pub fn inactive_point(mut self, inactive_point: f64) -> Self {
        self.inactive_point = inactive_point;
        self
    }

    /// Set [`tick`](Self::tick).
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// Set [`window`](Self::window).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Set [`max_boost`](Self::max_boost).
    pub fn max_boost(mut self, max_boost: u32) -> Self {
        self.max_boost = max_boost;
        self
    }

    fn from_config(c: &ControllerConfig) -> Steps {
        Steps {
            delta_per_sec: c.delta_per_sec,
            decrease_factor: c.decrease_factor,
            inactive_decrease_factor: c.inactive_decrease_factor,
            inactive_point: c.inactive_point,
            tick: c.tick,
            window: c.window,
            max_boost: c.max_boost,
        }
    }

    /// The controller's settings: these steps with a target and bounds.
    pub(crate) fn controller(
        &self,
        target_p99: Duration,
        min_share: f64,
        max_share: f64,
    ) -> ControllerConfig {
        ControllerConfig {
            target_p99,
            min_share,
            max_share,
            inactive_point: self.inactive_point,
            delta_per_sec: self.delta_per_sec,
            decrease_factor: self.decrease_factor,
            inactive_decrease_factor: self.inactive_decrease_factor,
            tick: self.tick,
            window: self.window,
            max_boost: self.max_boost,
        }
    }
}
