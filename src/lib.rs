//! elastic-cpu: keep foreground latency flat while background work uses the spare CPU.
pub use elastic_core;
pub use pacer;
pub use sched_probe;
