//! N multiplexed HTTP/2 connections: the slots every HTTP/2 client here
//! keeps them in ([`H2Slots`]), and hyper's HTTP/2 client on them
//! ([`H2Pool`], prior knowledge, no upgrade), round-robin, every call a
//! stream on one of them. A call whose shared connection died before
//! answering is sent once more on a new one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::exchange::{Answer, Outgoing, Target, into_answer, read_body, unavailable};
use crate::metrics::TransportMetrics;
use crate::upstream::port::UpstreamError;
use crate::upstream::wire;

/// One connection of [`H2Slots`], numbered so that a caller whose call failed
/// replaces that connection and not a newer one another caller already
/// opened.
#[derive(Debug)]
struct H2Slot<S> {
    conn: Option<(u64, S)>,
    generations: u64,
}

/// N multiplexed (HTTP/2) connections, picked round-robin, each opened on
/// first use and again when it broke: what `h2c-*` (hyper's connections)
/// and the tuned twins (the `h2` crate's) share. `S` is a connection's handle
/// for sending, cloned for each call.
#[derive(Debug)]
pub(crate) struct H2Slots<S> {
    slots: Vec<tokio::sync::Mutex<H2Slot<S>>>,
    next: AtomicUsize,
}

impl<S: Clone> H2Slots<S> {
    pub(crate) fn new(size: usize) -> Self {
        H2Slots {
            slots: (0..size.max(1))
                .map(|_| {
                    tokio::sync::Mutex::new(H2Slot {
                        conn: None,
                        generations: 0,
                    })
                })
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// The next slot, round-robin.
    pub(crate) fn pick(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len()
    }

    /// Slot `i`'s connection and its generation, opened by `open` if there
    /// is none, it is not `live`, or it is the generation `failed` a caller
    /// just saw fail. The slot's lock makes concurrent callers wait for one
    /// handshake rather than each open a connection.
    pub(crate) async fn get<F, Fut>(
        &self,
        i: usize,
        failed: Option<u64>,
        live: impl Fn(&S) -> bool,
        open: F,
    ) -> Result<(u64, S), UpstreamError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<S, UpstreamError>>,
    {
        let mut slot = self.slots[i].lock().await;
        if let Some((generation, sender)) = slot
            .conn
            .as_ref()
            .filter(|(g, s)| live(s) && Some(*g) != failed)
        {
            return Ok((*generation, sender.clone()));
        }
        // Drop a broken connection first: its socket closes before a new
        // one opens.
        slot.conn = None;
        let sender = open().await?;
        slot.generations += 1;
        let generation = slot.generations;
        slot.conn = Some((generation, sender.clone()));
        Ok((generation, sender))
    }
}

/// N HTTP/2 cleartext connections, each multiplexing every call sent on it.
#[derive(Debug)]
pub struct H2Pool {
    target: Target,
    slots: H2Slots<http2::SendRequest<Full<Bytes>>>,
    metrics: Arc<TransportMetrics>,
}

impl H2Pool {
    /// `size` connections to `target`, each opened on first use.
    pub(crate) fn new(target: Target, size: usize, metrics: Arc<TransportMetrics>) -> Self {
        H2Pool {
            target,
            slots: H2Slots::new(size),
            metrics,
        }
    }

    async fn open(&self) -> Result<http2::SendRequest<Full<Bytes>>, UpstreamError> {
        let io = self.target.connect(&self.metrics).await?;
        let (sender, conn) = http2::Builder::new(TokioExecutor::new())
            .handshake(TokioIo::new(io))
            .await
            .map_err(|e| unavailable("the HTTP/2 handshake failed", wire::chain(&e)))?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "an HTTP/2 connection to order-service ended");
            }
        });
        Ok(sender)
    }

    /// The connection of slot `i` (see [`H2Slots::get`]).
    async fn sender(
        &self,
        i: usize,
        failed: Option<u64>,
    ) -> Result<(u64, http2::SendRequest<Full<Bytes>>), UpstreamError> {
        self.slots
            .get(i, failed, |s| !s.is_closed(), || self.open())
            .await
    }

    /// Sends `out` as a stream on the next connection.
    pub(crate) async fn send(&self, out: &Outgoing<'_>) -> Result<Answer, UpstreamError> {
        let i = self.slots.pick();
        let uri = self.target.dial.absolute(out.path_and_query);
        let mut failed = None;
        loop {
            let (generation, mut sender) = self.sender(i, failed).await?;
            let mut req = Request::builder()
                .method(out.method.clone())
                .uri(uri.as_str())
                .body(Full::new(out.body.clone()))
                .map_err(|e| UpstreamError::Protocol(format!("building the request: {e}")))?;
            req.headers_mut().extend(out.headers.clone());
            telemetry::propagation::inject_headers(req.headers_mut());
            let on_wire = self.metrics.in_flight();
            let sent = match sender.ready().await {
                Ok(()) => sender.send_request(req).await,
                Err(e) => Err(e),
            };
            let resp = match sent {
                Ok(r) => r,
                // The shared connection died before answering (order-service
                // went away and came back): one more try on a new connection.
                Err(e) if failed.is_none() => {
                    tracing::debug!(error = %e, "an HTTP/2 connection failed; retrying on a new one");
                    failed = Some(generation);
                    drop(on_wire);
                    continue;
                }
                Err(e) => return Err(unavailable("the HTTP/2 call failed", wire::chain(&e))),
            };
            let (parts, body) = resp.into_parts();
            let body = read_body(body).await?;
            return Ok(into_answer(parts, body));
        }
    }
}
