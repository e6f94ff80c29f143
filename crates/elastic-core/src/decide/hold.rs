//! Why a class is held back: holds are bits, a class may be held for several at once.

/// Why a class is held back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// The backlog brake: a foreground task waited too long in a run queue.
    Brake = 1,
    /// A quiet reading: elastic work is held to read the latency without it.
    Quiet = 2,
    /// The quota brake: a period's quota is nearly spent.
    Quota = 4,
    /// Paused by hand: no new grants, holders keep theirs.
    Paused = 8,
}

/// Whether holds `held` ask holders to give their grants back: every hold but a pause.
pub(crate) fn braking(held: u8) -> bool {
    held & !(Hold::Paused as u8) != 0
}
