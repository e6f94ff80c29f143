//! A `tower` layer (feature `tower`) that runs a service's response futures as paced elastic
//! work: for routes that are bulk work (exports, reports), not for the latency-sensitive ones.
//!
//! ```
//! use elastic_cpu_pacer::tower::PacedLayer;
//! use elastic_cpu_pacer::Elastic;
//! use tower_layer::Layer;
//! use tower_service::Service;
//! use std::convert::Infallible;
//!
//! # #[derive(Clone)] struct Export;
//! # impl Service<u32> for Export {
//! #     type Response = u64; type Error = Infallible;
//! #     type Future = std::future::Ready<Result<u64, Infallible>>;
//! #     fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> { std::task::Poll::Ready(Ok(())) }
//! #     fn call(&mut self, n: u32) -> Self::Future { std::future::ready(Ok((0..u64::from(n)).sum())) }
//! # }
//! let elastic = Elastic::builder().build()?;
//! let rt = elastic.runtime(tokio::runtime::Builder::new_current_thread()).build()?;
//! // With axum: `Router::new().route("/export", get(export)).layer(PacedLayer::new(&elastic))`.
//! let mut export = PacedLayer::new(&elastic).layer(Export);
//! assert_eq!(rt.block_on(export.call(1000)).unwrap(), 499_500);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::task::{Context, Poll};

use tower_layer::Layer;
use tower_service::Service;

use crate::ext::PacedExt;
use crate::grant::paced::Paced;
use crate::Elastic;

/// Wraps services in [`PacedService`]: each response future runs as paced elastic work of
/// the `Elastic` it was made with.
#[derive(Clone)]
pub struct PacedLayer {
    elastic: Elastic,
}

impl PacedLayer {
    /// A layer pacing response futures by `elastic`.
    pub fn new(elastic: &Elastic) -> PacedLayer {
        PacedLayer {
            elastic: elastic.clone(),
        }
    }
}

impl<S> Layer<S> for PacedLayer {
    type Service = PacedService<S>;

    fn layer(&self, inner: S) -> PacedService<S> {
        PacedService {
            inner,
            elastic: self.elastic.clone(),
        }
    }
}

impl fmt::Debug for PacedLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacedLayer").finish_non_exhaustive()
    }
}

/// A service whose response futures are paced elastic work (see [`PacedLayer`]).
#[derive(Clone)]
pub struct PacedService<S> {
    inner: S,
    elastic: Elastic,
}

impl<S, R> Service<R> for PacedService<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Paced<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.inner.call(request).paced(&self.elastic)
    }
}

impl<S> fmt::Debug for PacedService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacedService").finish_non_exhaustive()
    }
}
