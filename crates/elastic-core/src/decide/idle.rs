//! The idle class: a controller of its own with a looser target, up to every CPU, started at
//! the ceiling on a bare host (the kernel keeps idle-priority threads off a core the foreground
//! wants) and at the elastic share inside a quota (a quota is shared).

use std::time::Duration;

use super::class::{Limit, IDLE_TARGET_FACTOR};
use crate::{ControllerConfig, SettingError, StepController};

/// The idle class's ceiling: every CPU the bucket is sized for.
pub const IDLE_MAX_SHARE: f64 = 1.0;

/// Where the idle class starts.
#[derive(Clone, Copy, Debug)]
pub struct IdleStart {
    /// The `Elastic`'s own share now.
    pub elastic_share: f64,
    /// The `Elastic`'s share is fixed: the idle class holds it too.
    pub fixed: Option<f64>,
    /// A CPU quota was seen: start from the elastic share, not the ceiling, and decay when
    /// idle work stops (a quota is shared; a bare host's idle cores are not).
    pub quota: bool,
}

impl IdleStart {
    /// The share the idle class starts at.
    pub fn initial_share(&self) -> f64 {
        match (self.fixed, self.quota) {
            (Some(fixed), _) => fixed,
            (None, true) => self.elastic_share,
            (None, false) => IDLE_MAX_SHARE,
        }
    }
}

/// The idle class's controller settings, from the `Elastic`'s own.
pub fn idle_controller(elastic: &ControllerConfig, quota: bool) -> ControllerConfig {
    ControllerConfig {
        target_p99: elastic
            .target_p99
            .saturating_mul(IDLE_TARGET_FACTOR)
            .min(Duration::from_secs(1)),
        max_share: IDLE_MAX_SHARE,
        // On a bare host idle work that comes back after a pause starts where it was.
        inactive_point: if quota { elastic.inactive_point } else { 1.0 },
        ..elastic.clone()
    }
}

/// The limit of a new idle class of an `Elastic` whose controller is `elastic`: its fixed share,
/// or a controller of [`idle_controller`]'s settings at `start`'s share.
///
/// # Errors
/// `elastic` or the start share out of range.
pub fn idle_limit(elastic: &ControllerConfig, start: IdleStart) -> Result<Limit, SettingError> {
    Ok(match start.fixed {
        Some(share) => Limit::Fixed(share),
        None => Limit::Controller(Box::new(StepController::with_initial_share(
            idle_controller(elastic, start.quota),
            start.initial_share(),
        )?)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_target_is_looser_and_its_ceiling_all_cpus() {
        let elastic = ControllerConfig {
            target_p99: Duration::from_micros(250),
            ..ControllerConfig::default()
        };
        let host = idle_controller(&elastic, false);
        assert_eq!(host.target_p99, Duration::from_millis(1));
        assert_eq!(host.max_share, 1.0);
        assert_eq!(host.inactive_point, 1.0);
        assert_eq!(host.min_share, elastic.min_share);
        assert!(host.validate().is_ok());
        let quota = idle_controller(&elastic, true);
        assert_eq!(quota.inactive_point, elastic.inactive_point);
        // A target near the top stays valid.
        let slow = ControllerConfig {
            target_p99: Duration::from_millis(900),
            ..ControllerConfig::default()
        };
        assert_eq!(
            idle_controller(&slow, false).target_p99,
            Duration::from_secs(1)
        );
    }
}
