//! TEMPORARY stand-in for the library's gate API until h-gate lands (admits everything).
#![allow(dead_code)]
use std::time::Duration;
pub struct GateSettings;
impl GateSettings {
    pub fn new() -> Self { GateSettings }
    pub fn deadline(self, _: Duration) -> Self { self }
    pub fn max_queue(self, _: usize) -> Self { self }
    pub fn setup_cost(self, _: Duration) -> Self { self }
}
pub struct ConnectionGate;
pub struct SetupPermit;
impl SetupPermit { pub async fn pace(&mut self) { tokio::task::yield_now().await } }
pub enum RejectReason { QueueFull, WouldExpire, Expired, Closed }
pub struct Rejected;
impl Rejected { pub fn reason(&self) -> RejectReason { RejectReason::Closed } pub fn retry_after(&self) -> Duration { Duration::ZERO } }
pub struct GateSnapshot { pub share: f64, pub queue_len: usize }
impl ConnectionGate {
    pub async fn admit(&self, _: Duration) -> Result<SetupPermit, Rejected> { Ok(SetupPermit) }
    pub fn snapshot(&self) -> GateSnapshot { GateSnapshot { share: 0.0, queue_len: 0 } }
}
pub trait GateExt { fn connection_gate(&self, s: GateSettings) -> Result<ConnectionGate, String>; }
impl GateExt for elastic_cpu::Elastic { fn connection_gate(&self, _: GateSettings) -> Result<ConnectionGate, String> { Ok(ConnectionGate) } }
