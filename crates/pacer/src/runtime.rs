//! Building a tokio runtime that the probe measures and the bucket is sized for.

use std::borrow::BorrowMut;
use std::io;

use tokio::runtime::{Builder, Runtime};

use crate::Elastic;

/// A tokio [`Builder`] wrapped by [`Elastic::runtime`]: [`build`](Self::build) installs the
/// probe and sizes the token bucket for the runtime's workers.
#[derive(Debug)]
pub struct RuntimeBuilder<'e, B> {
    pub(crate) elastic: &'e Elastic,
    pub(crate) builder: B,
}

impl<B: BorrowMut<Builder>> RuntimeBuilder<'_, B> {
    /// Build the runtime: probe hooks installed (or, without `tokio_unstable`, the sampling
    /// probe started), CPUs = min(workers, available parallelism).
    pub fn build(mut self) -> io::Result<Runtime> {
        let builder = self.builder.borrow_mut();
        self.elastic.instrument(builder);
        let rt = builder.build()?;
        self.elastic.attach(rt.handle());
        Ok(rt)
    }
}
