//! HTTP/3 connections to order-service's QUIC port: N of them per adapter,
//! picked round-robin, calls multiplexed on each as on an HTTP/2
//! connection. Each is h3-util's channel (the QUIC connection opened on
//! first use and again after it ends, requests handed to it through a
//! tower `Buffer`, as tonic's `Channel` does for HTTP/2).
//!
//! QUIC is always encrypted: with TLS to order-service configured, the same
//! trust (CA, client certificate) is used; without, the server's
//! self-signed certificate is accepted unverified, which encrypts and
//! proves nothing of who answers.
//!
//! Counted like the TCP transports' sockets: a connection opened (and open
//! until it ends), and the bytes each way, here UDP payload (QUIC's
//! headers, encryption and acknowledgements included, which TCP's counts
//! leave to the kernel), read from quinn's own counters after each call.
//! TLS handshakes are not counted by kind: quinn does not say whether one
//! resumed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::metrics::{ConnectionGuard, TransportMetrics};
use crate::upstream::endpoints::Endpoints;
use crate::upstream::port::UpstreamError;

/// A QUIC connection in use, and how much of its traffic is counted.
struct Live {
    conn: quinn::Connection,
    rx: u64,
    tx: u64,
    _open: ConnectionGuard,
}

/// One channel's current QUIC connection, shared by its connector (which
/// replaces it) and the calls (which count its bytes).
#[derive(Default)]
struct Slot(Mutex<Option<Live>>);

impl Slot {
    /// Adds the connection's bytes since the last count; forgets it (counting
    /// it closed) once it has ended.
    fn count(&self, metrics: &TransportMetrics) {
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(live) = slot.as_mut() {
            let s = live.conn.stats();
            metrics.add_read(s.udp_rx.bytes.saturating_sub(live.rx) as usize);
            metrics.add_written(s.udp_tx.bytes.saturating_sub(live.tx) as usize);
            (live.rx, live.tx) = (s.udp_rx.bytes, s.udp_tx.bytes);
            if live.conn.close_reason().is_some() {
                *slot = None;
            }
        }
    }
}

/// Opens one channel's QUIC connections, counting each.
#[derive(Clone)]
pub(crate) struct Connector {
    endpoint: quinn::Endpoint,
    /// `host:port`, resolved at each connection.
    addr: String,
    server_name: String,
    metrics: Arc<TransportMetrics>,
    slot: Arc<Slot>,
}

impl h3_util::client::H3Connector for Connector {
    type CONN = h3_quinn::Connection;
    type OS = h3_quinn::OpenStreams;
    type SS = h3_quinn::SendStream<Bytes>;
    type RS = h3_quinn::RecvStream;
    type BS = h3_quinn::BidiStream<Bytes>;

    async fn connect(&self) -> Result<Self::CONN, h3_util::Error> {
        let to = tokio::net::lookup_host(&self.addr)
            .await?
            .next()
            .ok_or_else(|| format!("{} resolves to no address", self.addr))?;
        // quinn runs each connection in a task that holds the span current
        // when it was made: made inside a call, it would keep that call's
        // span open (and unexported) for the connection's life. So it is
        // made in a task of its own, under no span.
        let (endpoint, name) = (self.endpoint.clone(), self.server_name.clone());
        let connecting = tokio::spawn(async move { endpoint.connect(to, &name) }).await??;
        let conn = connecting.await?;
        // The previous connection's last bytes, then the new one.
        self.slot.count(&self.metrics);
        *self.slot.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(Live {
            conn: conn.clone(),
            rx: 0,
            tx: 0,
            _open: self.metrics.connection_opened(),
        });
        Ok(h3_quinn::Connection::new(conn))
    }
}

/// A request body type's channels to the QUIC port.
pub(crate) struct H3Conns<B>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<h3_util::Error> + Send,
{
    channels: Vec<(h3_util::client::H3Channel<Connector, B>, Arc<Slot>)>,
    next: AtomicUsize,
    metrics: Arc<TransportMetrics>,
    /// `https://host:port`, the origin of every request.
    origin: String,
}

impl<B> std::fmt::Debug for H3Conns<B>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<h3_util::Error> + Send,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H3Conns")
            .field("origin", &self.origin)
            .field("channels", &self.channels.len())
            .finish()
    }
}

impl<B> H3Conns<B>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<h3_util::Error> + Send,
{
    /// `ep.pool_size` channels to order-service's QUIC port, on one UDP
    /// socket of their own. Nothing connects yet.
    pub(crate) fn new(ep: &Endpoints, metrics: Arc<TransportMetrics>) -> anyhow::Result<Self> {
        let addr = ep.h3_addr.clone();
        let (host, _) = addr.rsplit_once(':').ok_or_else(|| {
            anyhow::anyhow!("order-service's HTTP/3 address {addr:?} has no port")
        })?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let (trust, server_name) = match &ep.tls {
            Some(t) => (
                t.client.clone(),
                t.server_name.clone().unwrap_or_else(|| host.to_owned()),
            ),
            None => (tls::ClientTls::unverified()?, "localhost".to_owned()),
        };
        // The socket's family: the address's, or IPv4 for a name.
        let family = addr
            .parse::<SocketAddr>()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let endpoint = service_kit::h3_client::endpoint(&trust, family)?;
        let origin = format!("https://{addr}");
        let uri: http::Uri = origin.parse()?;
        let channels = (0..ep.pool_size.max(1))
            .map(|_| {
                let slot = Arc::new(Slot::default());
                let connector = Connector {
                    endpoint: endpoint.clone(),
                    addr: addr.clone(),
                    server_name: server_name.clone(),
                    metrics: metrics.clone(),
                    slot: slot.clone(),
                };
                (
                    h3_util::client::H3Channel::new(connector, uri.clone(), None),
                    slot,
                )
            })
            .collect();
        Ok(H3Conns {
            channels,
            next: AtomicUsize::new(0),
            metrics,
            origin,
        })
    }

    /// The absolute URI of `path_and_query` on the QUIC port.
    pub(crate) fn uri(&self, path_and_query: &str) -> String {
        format!("{}{path_and_query}", self.origin)
    }

    /// The next channel, round-robin, and its slot (to count after the call).
    pub(crate) fn pick(&self) -> (h3_util::client::H3Channel<Connector, B>, H3Counted) {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.channels.len();
        let (channel, slot) = &self.channels[i];
        (
            channel.clone(),
            H3Counted {
                slot: slot.clone(),
                metrics: self.metrics.clone(),
            },
        )
    }
}

impl H3Conns<http_body_util::Full<Bytes>> {
    /// Sends `out` on the next channel and reads the whole answer.
    pub(crate) async fn send(
        &self,
        out: &super::exchange::Outgoing<'_>,
    ) -> Result<super::exchange::Answer, UpstreamError> {
        let mut req = http::Request::builder()
            .method(out.method.clone())
            .uri(self.uri(out.path_and_query))
            .body(http_body_util::Full::new(out.body.clone()))
            .map_err(|e| UpstreamError::Protocol(format!("building the request: {e}")))?;
        req.headers_mut().extend(out.headers.clone());
        telemetry::propagation::inject_headers(req.headers_mut());
        let (channel, counted) = self.pick();
        let _on_wire = self.metrics.in_flight();
        let answer = tower::ServiceExt::oneshot(channel, req)
            .await
            .map_err(|e| failed(&self.origin, &*e))?;
        let (parts, body) = answer.into_parts();
        let body = super::exchange::read_body(body).await?;
        drop(counted);
        Ok(super::exchange::into_answer(parts, body))
    }
}

/// Counts a channel's bytes when dropped (after the call that used it).
pub(crate) struct H3Counted {
    slot: Arc<Slot>,
    metrics: Arc<TransportMetrics>,
}

impl Drop for H3Counted {
    fn drop(&mut self) {
        self.slot.count(&self.metrics);
    }
}

/// The error of an HTTP/3 call to `origin` that got no answer. A failed
/// QUIC handshake is named as the TLS failure it is: QUIC carries TLS's
/// alert in its close (crypto error 0x100 + the alert's code).
pub(crate) fn failed(origin: &str, e: &(dyn std::error::Error + 'static)) -> UpstreamError {
    let chain = crate::upstream::wire::chain(e);
    tls_failure(origin, &chain)
        .unwrap_or_else(|| super::exchange::unavailable("the HTTP/3 call failed", chain))
}

/// `detail`, a failed HTTP/3 call's error, named as the TLS failure it is
/// when QUIC's handshake failed; `None` otherwise.
pub(crate) fn tls_failure(origin: &str, detail: &str) -> Option<UpstreamError> {
    detail.contains("cryptographic handshake failed").then(|| {
        super::exchange::unavailable(
            &format!("the TLS handshake of QUIC with {origin} failed (a TLS alert)"),
            detail,
        )
    })
}
