//! `.paced(&elastic)`: the extension traits that make futures and streams elastic work.

use std::future::Future;

use futures_core::Stream;

use crate::elastic::Elastic;
use crate::grant::paced::{Paced, PacedStream};

/// `.paced(&elastic)` for futures.
pub trait PacedExt: Future + Sized {
    /// Run this future as elastic work paced by `elastic`.
    ///
    /// ```
    /// use elastic_cpu_pacer::{Elastic, PacedExt};
    /// let elastic = Elastic::builder().build().unwrap();
    /// let rt = elastic.runtime(tokio::runtime::Builder::new_current_thread()).build().unwrap();
    /// let sum = rt.block_on(async { (0..1000u64).sum::<u64>() }.paced(&elastic));
    /// assert_eq!(sum, 499500);
    /// ```
    #[track_caller]
    fn paced(self, elastic: &Elastic) -> Paced<Self> {
        Paced::new(self, elastic.shared.clone())
    }
}

impl<F: Future> PacedExt for F {}

/// `.paced(&elastic)` for streams.
pub trait PacedStreamExt: Stream + Sized {
    /// Produce this stream's items as elastic work paced by `elastic`.
    ///
    /// ```
    /// use futures_util::StreamExt;
    /// use elastic_cpu_pacer::{Elastic, PacedStreamExt};
    /// let elastic = Elastic::builder().build().unwrap();
    /// let rt = elastic.runtime(tokio::runtime::Builder::new_current_thread()).build().unwrap();
    /// let chunks = futures_util::stream::iter(0..100u32).paced(&elastic);
    /// assert_eq!(rt.block_on(chunks.count()), 100);
    /// ```
    #[track_caller]
    fn paced(self, elastic: &Elastic) -> PacedStream<Self> {
        PacedStream::new(self, elastic.shared.clone())
    }
}

impl<S: Stream> PacedStreamExt for S {}
