//! A gate as a class of paced CPU: its setups' own controller, bounds and bucket, steered by
//! the same signal on the same tick as the `Elastic`'s other classes.

use std::sync::Arc;
use std::time::Duration;

use elastic_cpu_core::{
    rate_for, ControllerConfig, GateConfig, GateQueue, SettingError, StepController,
};

use super::settings::GateSettings;
use super::shared::GateShared;
use crate::grant::running::RunningTime;
use crate::grant::class_state::QueueClock;
use elastic_cpu_core::decide::Limit;

/// Everything a new gate needs from the governor and the `Elastic` it belongs to.
pub(crate) struct GateParts<'a> {
    /// The `Elastic`'s controller settings: the gate's controller takes its target, steps and
    /// window, with the gate's own bounds.
    pub(crate) controller: &'a ControllerConfig,
    pub(crate) clock: QueueClock,
    pub(crate) running: RunningTime,
    pub(crate) quantum: Duration,
    pub(crate) os_yield: bool,
    pub(crate) cpus: f64,
    pub(crate) id: usize,
}

/// A new gate from `settings`: its shared state, the limit that decides its share, the floor of
/// its share and whether its setups at once are capped to what the share pays for.
pub(crate) fn create(
    settings: &GateSettings,
    parts: GateParts<'_>,
) -> Result<(Arc<GateShared>, Limit, f64, bool), SettingError> {
    let s = settings.resolve(parts.id)?;
    // Idle decay stops at the initial share: a storm that comes after a calm spell starts
    // where the gate was set to start, not at the floor.
    let span = s.max_share - s.min_share;
    let inactive_point = if span > 0.0 {
        ((s.initial_share - s.min_share) / span).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let config = ControllerConfig {
        min_share: s.min_share,
        max_share: s.max_share,
        inactive_point,
        ..parts.controller.clone()
    };
    let controller = StepController::with_initial_share(config, s.initial_share)?;
    let queue = GateQueue::new(
        parts.clock,
        rate_for(s.initial_share, parts.cpus),
        GateConfig {
            max_queue: s.max_queue,
            order: s.order,
            initial_cost: s.setup_cost,
            max_in_flight: s.max_in_flight,
        },
    );
    let gate = Arc::new(GateShared::new(
        queue,
        parts.running,
        parts.quantum,
        parts.os_yield,
        &s,
        parts.id,
    ));
    Ok((
        gate,
        Limit::Controller(Box::new(controller)),
        s.min_share,
        s.cap_concurrency,
    ))
}
