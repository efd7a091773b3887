//! A pool of connections to the REST port, HTTP/1.1 or h2c ([`Pooled`]), as
//! the REST adapters of the same wire keep it: what the Connect adapters
//! send on too.

use std::sync::Arc;

use super::exchange::{Answer, Outgoing, Target, alpn};
use super::h1::H1Pool;
use super::h2::H2Pool;
use crate::metrics::TransportMetrics;
use crate::upstream::endpoints::Endpoints;
use crate::upstream::port::UpstreamError;

/// A pool of connections to the REST port, HTTP/1.1 or h2c, as the REST
/// adapters of the same wire use it: what the Connect adapters send on.
#[derive(Debug)]
pub(crate) enum Pooled {
    H1(H1Pool),
    H2(H2Pool),
}

impl Pooled {
    /// `ep.pool_size` connections to the REST port, h2c when `h2`.
    pub(crate) fn new(
        h2: bool,
        ep: &Endpoints,
        metrics: Arc<TransportMetrics>,
    ) -> anyhow::Result<Self> {
        let target = Target::new(&ep.rest_url, ep, alpn(h2), &metrics)?;
        Ok(Pooled::on(target, h2, ep.pool_size, metrics))
    }

    /// `size` connections to `target`, h2c when `h2`.
    pub(crate) fn on(
        target: Target,
        h2: bool,
        size: usize,
        metrics: Arc<TransportMetrics>,
    ) -> Self {
        if h2 {
            Pooled::H2(H2Pool::new(target, size, metrics))
        } else {
            Pooled::H1(H1Pool::new(target, size, metrics))
        }
    }

    /// Sends `out` on one of the pool's connections.
    pub(crate) async fn send(&self, out: &Outgoing<'_>) -> Result<Answer, UpstreamError> {
        match self {
            Pooled::H1(p) => p.send(out).await,
            Pooled::H2(p) => p.send(out).await,
        }
    }
}
