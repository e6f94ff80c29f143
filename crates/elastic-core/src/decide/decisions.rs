//! What one tick's decision is: per class, what its queue is to be set to.

/// One class's decision.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClassDecision {
    /// The share its limit decided (before the headroom and the split).
    pub share: f64,
    /// The share its rate pays for.
    pub applied: f64,
    /// Its token rate, in CPU nanoseconds per second.
    pub rate: u64,
    /// Set the rate without moving the bucket's balance (a part of a split share: the parts
    /// move every tick).
    pub retune: bool,
    /// At most this many grants at once (`None`: no cap).
    pub holder_cap: Option<usize>,
    /// The grants the elastic group's members hold together (`Some(None)`: no shared count),
    /// decided for the group's first member only.
    pub slots: Option<Option<usize>>,
}

/// How a class's queue is to be held, where that changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldChange {
    /// The class, by its place in the step's order.
    pub class: usize,
    /// No new grants.
    pub held: bool,
    /// Holders are asked to give their grants back too (every hold but a pause).
    pub braking: bool,
}
