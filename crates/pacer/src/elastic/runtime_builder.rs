//! `Elastic::runtime`'s builder: a tokio builder that installs the probe.

use std::borrow::BorrowMut;
use std::io;

use tokio::runtime::{Builder, Runtime};

use super::Elastic;

/// A tokio [`Builder`] wrapped by [`Elastic::runtime`]: [`build`](Self::build) installs the
/// probe and sizes the token bucket for the runtime's workers.
#[derive(Debug)]
pub struct RuntimeBuilder<'e, B> {
    pub(super) elastic: &'e Elastic,
    pub(super) builder: B,
}

impl<B: BorrowMut<Builder>> RuntimeBuilder<'_, B> {
    /// Build the runtime: probe hooks installed (or, without `tokio_unstable`, the sampling
    /// probe started), CPUs = the least of its workers, the cgroup CPU quota and the affinity
    /// mask (see [`Elastic::attach`]). With the I/O wake-up input on (the default,
    /// [`Inputs::io_wakeup`](crate::settings::Inputs::io_wakeup)) it enables the runtime's I/O
    /// driver and starts the I/O wake-up probe ([`Elastic::start_io_probe`]); a probe that
    /// cannot start is no error ([`Snapshot::io_probe`](crate::Snapshot::io_probe) says why). It always enables the timer,
    /// which the connection gate's setup timeouts and accept pauses use. Fails where tokio's
    /// builder does, or where [`Elastic::attach`] does (the OS refusing the sampling probe's
    /// thread).
    pub fn build(mut self) -> io::Result<Runtime> {
        let builder = self.builder.borrow_mut();
        self.elastic.instrument(builder);
        builder.enable_time();
        let io = self.elastic.control.io_input();
        if io {
            builder.enable_io();
        }
        let rt = builder.build()?;
        self.elastic.attach(rt.handle())?;
        if io {
            let _said_in_the_snapshot = self.elastic.start_io_probe(rt.handle());
        }
        Ok(rt)
    }
}
