//! HTTP/1.1 to the REST port, on hyper's low-level `client::conn` with
//! connections opened through [`wire::connect`]: the budget must be exact,
//! and a pooled client (reqwest, hyper-util's legacy client) does not cap
//! connections per host.
//!
//! - [`H1Pool`]: a semaphore of N slots; a slot holder takes an idle
//!   keep-alive connection or opens one, so there are never more than N
//!   connections nor N calls in flight. Callers beyond N wait for a slot, and
//!   the wait counts in the upstream time. A pooled connection that broke
//!   while idle (order-service restarted) is noticed when it is taken or when
//!   the request fails before an answer arrives; the call is then sent once
//!   more on a fresh connection.
//! - [`H1Close`]: the same N slots, but every call opens its own connection
//!   and sends `Connection: close` (the Go post's default `http.Post`).

use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONNECTION, HOST};
use http::{HeaderValue, Request};
use http_body_util::Full;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::sync::Semaphore;

use super::exchange::{Answer, Outgoing, Target, into_answer, read_body, unavailable};
use crate::metrics::TransportMetrics;
use crate::upstream::port::UpstreamError;
use crate::upstream::wire;

/// HTTP/1.1 keep-alive connections, at most N, each carrying one call at a time.
#[derive(Debug)]
pub struct H1Pool {
    target: Target,
    slots: Semaphore,
    idle: std::sync::Mutex<Vec<http1::SendRequest<Full<Bytes>>>>,
    metrics: Arc<TransportMetrics>,
}

async fn open_h1(
    target: &Target,
    metrics: &Arc<TransportMetrics>,
) -> Result<http1::SendRequest<Full<Bytes>>, UpstreamError> {
    let io = target.connect(metrics).await?;
    let (sender, conn) = http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| unavailable("the HTTP/1.1 handshake failed", wire::chain(&e)))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "an HTTP/1.1 connection to order-service ended");
        }
    });
    Ok(sender)
}

fn h1_request(
    target: &Target,
    out: &Outgoing<'_>,
    close: bool,
) -> Result<Request<Full<Bytes>>, UpstreamError> {
    let mut req = Request::builder()
        .method(out.method.clone())
        .uri(out.path_and_query)
        .body(Full::new(out.body.clone()))
        .map_err(|e| UpstreamError::Protocol(format!("building the request: {e}")))?;
    let h = req.headers_mut();
    h.insert(HOST, target.host.clone());
    h.extend(out.headers.clone());
    if close {
        h.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    telemetry::propagation::inject_headers(h);
    Ok(req)
}

impl H1Pool {
    /// `size` slots to `target`, no connection open yet.
    pub(crate) fn new(target: Target, size: usize, metrics: Arc<TransportMetrics>) -> Self {
        H1Pool {
            target,
            slots: Semaphore::new(size),
            idle: std::sync::Mutex::new(Vec::with_capacity(size)),
            metrics,
        }
    }

    /// An idle connection that is still usable, if any.
    async fn take_idle(&self) -> Option<http1::SendRequest<Full<Bytes>>> {
        loop {
            let mut sender = self
                .idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .pop()?;
            if !sender.is_closed() && sender.ready().await.is_ok() {
                return Some(sender);
            }
        }
    }

    /// Sends `out` on an idle connection or a new one, once more on a new
    /// one if an idle one turns out to be dead.
    pub(crate) async fn send(&self, out: &Outgoing<'_>) -> Result<Answer, UpstreamError> {
        // Held until the answer is read: the budget is calls, not just sockets.
        let _slot =
            self.slots.acquire().await.map_err(|_| {
                UpstreamError::Unavailable("the connection pool is closed".to_owned())
            })?;
        let mut retried = false;
        loop {
            let (mut sender, reused) = match self.take_idle().await {
                Some(s) => (s, true),
                None => (open_h1(&self.target, &self.metrics).await?, false),
            };
            let req = h1_request(&self.target, out, false)?;
            let on_wire = self.metrics.in_flight();
            let resp = match sender.send_request(req).await {
                Ok(r) => r,
                // A keep-alive connection the server closed while it sat
                // idle: the call reads only, so try once more on a new one.
                Err(e) if reused && !retried => {
                    tracing::debug!(error = %e, "a pooled HTTP/1.1 connection was stale; retrying on a new one");
                    retried = true;
                    drop((on_wire, sender));
                    continue;
                }
                Err(e) => return Err(unavailable("the HTTP/1.1 call failed", wire::chain(&e))),
            };
            let (parts, body) = resp.into_parts();
            let body = read_body(body).await?;
            drop(on_wire);
            let keep = !parts
                .headers
                .get(CONNECTION)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
            if keep && !sender.is_closed() {
                self.idle
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(sender);
            }
            return Ok(into_answer(parts, body));
        }
    }
}

/// HTTP/1.1 with a new connection per call, at most N calls at once.
#[derive(Debug)]
pub struct H1Close {
    target: Target,
    slots: Semaphore,
    metrics: Arc<TransportMetrics>,
}

impl H1Close {
    /// `size` slots to `target`.
    pub(crate) fn new(target: Target, size: usize, metrics: Arc<TransportMetrics>) -> Self {
        H1Close {
            target,
            slots: Semaphore::new(size),
            metrics,
        }
    }

    /// Sends `out` on a new connection, closed after the answer.
    pub(crate) async fn send(&self, out: &Outgoing<'_>) -> Result<Answer, UpstreamError> {
        let _slot =
            self.slots.acquire().await.map_err(|_| {
                UpstreamError::Unavailable("the connection pool is closed".to_owned())
            })?;
        let mut sender = open_h1(&self.target, &self.metrics).await?;
        let req = h1_request(&self.target, out, true)?;
        let _on_wire = self.metrics.in_flight();
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| unavailable("the HTTP/1.1 call failed", wire::chain(&e)))?;
        let (parts, body) = resp.into_parts();
        let body = read_body(body).await?;
        Ok(into_answer(parts, body))
    }
}
