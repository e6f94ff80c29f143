//! The connection gate: connection setups (authentication hashing, TLS) paced as their own
//! class of CPU time, admitted only while they can start within their deadlines
//! (docs/design.md §5, "Connection gate").

mod admission;
pub(crate) mod class;
mod connection;
mod flight;
mod listener;
mod permit;
mod rejected;
mod settings;
mod setup_listener;
pub(crate) mod shared;
mod snapshot;

pub use admission::Admission;
pub use connection::ConnectionGate;
pub use listener::GatedListener;
pub use permit::{SetupPace, SetupPermit, SetupRun};
pub use rejected::{RejectReason, Rejected, RETRY_AFTER_MAX, RETRY_AFTER_MIN};
pub use settings::GateSettings;
pub use setup_listener::SetupListener;
pub use snapshot::GateSnapshot;

pub use elastic_cpu_core::{Attempt, GateStats, QueueOrder, RetryBudget};
