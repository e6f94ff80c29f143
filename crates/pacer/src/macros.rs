//! Feature gates for items, as tokio gates its own: a gated item sits in one of these instead of
//! carrying the `cfg` itself, and where the code around needs it either way, a stub with the same
//! API stands in when the feature is off, so call sites need no `cfg` at all.

/// Items that exist only with the idle-priority pool (feature `idle-pool`).
macro_rules! cfg_idle_pool {
    ($($item:item)*) => {
        $(
            #[cfg(feature = "idle-pool")]
            $item
        )*
    };
}

/// Items that stand in for the idle pool's when it is built without (feature `idle-pool` off).
macro_rules! cfg_not_idle_pool {
    ($($item:item)*) => {
        $(
            #[cfg(not(feature = "idle-pool"))]
            $item
        )*
    };
}

/// Items that exist only with the connection gate (feature `gate`).
macro_rules! cfg_gate {
    ($($item:item)*) => {
        $(
            #[cfg(feature = "gate")]
            $item
        )*
    };
}
