//! The REST adapters: `h1-json`, `h1-json-close`, `h2c-json`, `h1-proto` and
//! `h2c-proto`, all calling `GET /v2/orders` and differing only in the wire
//! and the body's encoding.
//!
//! The clients are built on hyper's low-level `client::conn` with connections
//! opened by [`wire::connect`], because the budget must be exact and a pooled
//! client (reqwest, hyper-util's legacy client) does not cap connections per
//! host:
//! - [`H1Pool`]: a semaphore of N slots; a slot holder takes an idle
//!   keep-alive connection or opens one, so there are never more than N
//!   connections nor N calls in flight. Callers beyond N wait for a slot, and
//!   the wait counts in the upstream time.
//! - [`H1Close`]: the same N slots, but every call opens its own connection
//!   and sends `Connection: close` (the Go post's default `http.Post`).
//! - [`H2Pool`]: N HTTP/2 connections (prior knowledge, no upgrade),
//!   round-robin, every call a stream on one of them.
//!
//! A pooled connection that broke while idle (order-service restarted) is
//! noticed when it is taken or when the request fails before an answer
//! arrives; the GET is then retried once on a fresh connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::header::{ACCEPT, ACCEPT_ENCODING, CONNECTION, CONTENT_ENCODING, CONTENT_TYPE, HOST};
use http::{HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use model::json::{OrderPageJson, Problem};
use prost::Message as _;
use tokio::sync::Semaphore;

use super::semconv::{self, Peer};
use super::{
    Endpoints, MAX_MESSAGE_BYTES, OrderQuery, OrderSource, Transport, UpstreamError, to_domain,
    wire,
};
use crate::metrics::TransportMetrics;

const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

/// What came back from one call.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Answer {
    /// The answer's `Content-Type`, if it has one.
    pub fn content_type(&self) -> Option<&HeaderValue> {
        self.headers.get(CONTENT_TYPE)
    }
}

/// One request to the REST port: a GET of the REST API, or a Connect call's
/// POST (see [`super::connect`]). Every call sent here reads only, so one
/// whose connection failed before any answer is sent again on a new one.
#[derive(Debug, Clone)]
pub(crate) struct Outgoing<'a> {
    pub method: Method,
    /// Origin form: `/v2/orders?…`.
    pub path_and_query: &'a str,
    /// Sent as they are; `Host` (HTTP/1.1) and the trace context are added.
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl<'a> Outgoing<'a> {
    /// A bodiless GET that accepts `accept`.
    fn get(path_and_query: &'a str, accept: &'static str) -> Self {
        let mut headers = http::HeaderMap::with_capacity(1);
        headers.insert(ACCEPT, HeaderValue::from_static(accept));
        Outgoing {
            method: Method::GET,
            path_and_query,
            headers,
            body: Bytes::new(),
        }
    }
}

/// Where the REST port is, and how to dial it (cleartext or TLS).
#[derive(Debug, Clone)]
struct Target {
    /// `host:port`, to connect to, and TLS when on.
    dial: wire::Dialer,
    /// The same `host:port`, as the `Host` header (HTTP/1.1) and `:authority` (HTTP/2).
    host: HeaderValue,
}

impl Target {
    fn new(
        url: &http::Uri,
        ep: &Endpoints,
        alpn: &[&[u8]],
        metrics: &TransportMetrics,
    ) -> anyhow::Result<Self> {
        let addr = wire::authority(url)?;
        Ok(Target {
            host: HeaderValue::from_str(&addr)?,
            dial: ep.dialer(addr, alpn, metrics),
        })
    }

    /// Opens a counted connection, TLS when on.
    async fn connect(&self, metrics: &Arc<TransportMetrics>) -> Result<wire::Conn, UpstreamError> {
        self.dial
            .connect(metrics)
            .await
            .map_err(|e| unavailable(&format!("cannot connect to {}", self.dial.addr), e))
    }
}

pub(crate) fn unavailable(what: &str, e: impl std::fmt::Display) -> UpstreamError {
    UpstreamError::Unavailable(format!("{what}: {e}"))
}

/// Reads a whole response body, up to the message limit.
pub(crate) async fn read_body<B>(body: B) -> Result<Bytes, UpstreamError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, MAX_MESSAGE_BYTES).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(UpstreamError::Protocol(
            format!("the answer is larger than {MAX_MESSAGE_BYTES} bytes"),
        )),
        Err(e) => Err(unavailable("the answer broke off", e)),
    }
}

pub(crate) fn into_answer(parts: http::response::Parts, body: Bytes) -> Answer {
    Answer {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

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
    fn new(target: Target, size: usize, metrics: Arc<TransportMetrics>) -> Self {
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
    async fn send(&self, out: &Outgoing<'_>) -> Result<Answer, UpstreamError> {
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
    fn new(target: Target, size: usize, metrics: Arc<TransportMetrics>) -> Self {
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

    fn on(target: Target, h2: bool, size: usize, metrics: Arc<TransportMetrics>) -> Self {
        if h2 {
            Pooled::H2(H2Pool::new(target, size, metrics))
        } else {
            Pooled::H1(H1Pool::new(target, size, metrics))
        }
    }

    pub(crate) async fn send(&self, out: &Outgoing<'_>) -> Result<Answer, UpstreamError> {
        match self {
            Pooled::H1(p) => p.send(out).await,
            Pooled::H2(p) => p.send(out).await,
        }
    }
}

/// The protocols a connection to the REST port offers by ALPN (with TLS).
fn alpn(h2: bool) -> &'static [&'static [u8]] {
    if h2 { tls::ALPN_H2 } else { tls::ALPN_HTTP1 }
}

/// The wire under a REST adapter.
#[derive(Debug)]
enum Wire {
    Pooled(Pooled),
    H1Close(H1Close),
    /// `h2c-proto-tuned`: the `h2` crate's connections, no hyper.
    H2Direct(super::tuned::Conns),
}

/// One REST adapter: a wire and an encoding.
#[derive(Debug)]
pub struct RestSource {
    transport: Transport,
    wire: Wire,
    proto: bool,
    /// Ask for gzip (`USER_UPSTREAM_GZIP`) and zstd (`USER_UPSTREAM_ZSTD`);
    /// not on the tuned twin.
    gzip: bool,
    zstd: bool,
    /// The instance called, for the call's span.
    peer: Peer,
    /// `scheme://host:port` of the REST port, for the span's `url.full`.
    origin: String,
}

impl RestSource {
    /// The adapter for one of the five REST transports.
    pub fn new(
        transport: Transport,
        ep: &Endpoints,
        metrics: Arc<TransportMetrics>,
    ) -> anyhow::Result<Self> {
        let h2 = matches!(
            transport,
            Transport::H2cJson | Transport::H2cProto | Transport::H2cProtoTuned
        );
        let target = Target::new(&ep.rest_url, ep, alpn(h2), &metrics)?;
        let n = ep.pool_size;
        let (wire, proto) = match transport {
            Transport::H1Json | Transport::H2cJson => {
                (Wire::Pooled(Pooled::on(target, h2, n, metrics)), false)
            }
            Transport::H1Proto | Transport::H2cProto => {
                (Wire::Pooled(Pooled::on(target, h2, n, metrics)), true)
            }
            Transport::H1JsonClose => (
                Wire::H1Close(H1Close {
                    target,
                    slots: Semaphore::new(n),
                    metrics,
                }),
                false,
            ),
            Transport::H2cProtoTuned => (
                Wire::H2Direct(super::tuned::Conns::new(target.dial, n, metrics)),
                true,
            ),
            other => anyhow::bail!("{other} is not a REST transport"),
        };
        Ok(RestSource {
            transport,
            peer: Peer::of_url(&ep.rest_url),
            origin: format!(
                "{}://{}",
                ep.rest_url.scheme_str().unwrap_or("http"),
                ep.rest_url.authority().map_or("", |a| a.as_str())
            ),
            gzip: ep.gzip && !matches!(wire, Wire::H2Direct(_)),
            zstd: ep.zstd && !matches!(wire, Wire::H2Direct(_)),
            wire,
            proto,
        })
    }

    async fn fetch(&self, q: &OrderQuery) -> Result<Vec<model::Order>, UpstreamError> {
        let mut pq = format!("/v2/orders?user_id={}&limit={}", q.user_id, q.limit);
        if !q.fields.is_all() {
            // Field names are [a-z_], and the comma is fine in a query.
            pq.push_str("&fields=");
            pq.push_str(&q.fields.to_csv());
        }
        self.peer.record();
        semconv::record_url(|| format!("{}{pq}", self.origin));
        let accept = if self.proto { PROTOBUF } else { JSON };
        let mut out = Outgoing::get(&pq, accept);
        let accept_encoding = match (self.zstd, self.gzip) {
            (true, true) => Some("zstd, gzip;q=0.5"),
            (true, false) => Some("zstd"),
            (false, true) => Some("gzip"),
            (false, false) => None,
        };
        if let Some(v) = accept_encoding {
            out.headers
                .insert(ACCEPT_ENCODING, HeaderValue::from_static(v));
        }
        let answer = match &self.wire {
            Wire::Pooled(p) => p.send(&out).await?,
            Wire::H1Close(p) => p.send(&out).await?,
            Wire::H2Direct(p) => p.get(&pq, accept).await?,
        };
        semconv::record_http_status(answer.status);
        super::parts::server_timing(&answer.headers);
        super::parts::decoding(|| inflate(answer).and_then(|a| decode(a, self.proto)))
    }
}

/// A gzip or zstd answer inflated, up to the message limit, so that a small
/// compressed body cannot grow without bound; any other answer as it is.
fn inflate(mut a: Answer) -> Result<Answer, UpstreamError> {
    use std::io::Read as _;
    let Some(enc) = a.headers.get(CONTENT_ENCODING) else {
        return Ok(a);
    };
    let enc = enc.as_bytes();
    if enc.eq_ignore_ascii_case(b"identity") {
        return Ok(a);
    }
    let mut out = Vec::with_capacity(a.body.len() * 4);
    let limit = MAX_MESSAGE_BYTES as u64 + 1;
    let (name, read) = if enc.eq_ignore_ascii_case(b"gzip") {
        (
            "gzip",
            flate2::read::GzDecoder::new(&a.body[..])
                .take(limit)
                .read_to_end(&mut out),
        )
    } else if enc.eq_ignore_ascii_case(b"zstd") {
        (
            "zstd",
            zstd::stream::read::Decoder::new(&a.body[..])
                .and_then(|d| d.take(limit).read_to_end(&mut out)),
        )
    } else {
        return Err(UpstreamError::Protocol(format!(
            "an answer in Content-Encoding {:?}, which was not asked for",
            String::from_utf8_lossy(enc)
        )));
    };
    read.map_err(|e| {
        UpstreamError::Protocol(format!("a {name} answer that does not inflate: {e}"))
    })?;
    if out.len() > MAX_MESSAGE_BYTES {
        return Err(UpstreamError::Protocol(format!(
            "the answer inflates past {MAX_MESSAGE_BYTES} bytes"
        )));
    }
    a.headers.remove(CONTENT_ENCODING);
    a.body = Bytes::from(out);
    Ok(a)
}

/// The orders of a 200, or the error an error answer describes.
fn decode(a: Answer, proto: bool) -> Result<Vec<model::Order>, UpstreamError> {
    if a.status != StatusCode::OK {
        let message = serde_json::from_slice::<Problem>(&a.body)
            .map(|e| e.detail)
            .unwrap_or_else(|_| String::from_utf8_lossy(&a.body).chars().take(200).collect());
        return Err(match a.status {
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::BAD_GATEWAY => {
                UpstreamError::Unavailable(message)
            }
            StatusCode::GATEWAY_TIMEOUT => UpstreamError::Timeout(message),
            s => UpstreamError::Rejected {
                status: s.to_string(),
                message,
            },
        });
    }
    let ct = a.content_type().and_then(|v| v.to_str().ok()).unwrap_or("");
    let wanted = if proto { PROTOBUF } else { JSON };
    if !ct.starts_with(wanted) {
        return Err(UpstreamError::Protocol(format!(
            "asked for {wanted}, got Content-Type {ct:?}"
        )));
    }
    // Decoding a 10,000-order body is real work: a span of its own shows it.
    let _decode = tracing::info_span!(
        target: telemetry::CODEC,
        "decode",
        format = if proto { "protobuf" } else { "json" },
        bytes = a.body.len()
    )
    .entered();
    if proto {
        let page = proto::order::v2::ListOrdersResponse::decode(a.body)
            .map_err(|e| UpstreamError::Protocol(format!("not a ListOrdersResponse: {e}")))?;
        to_domain(page.orders)
    } else {
        let page: OrderPageJson = serde_json::from_slice(&a.body)
            .map_err(|e| UpstreamError::Protocol(format!("not an order page: {e}")))?;
        to_domain(page.orders)
    }
}

impl OrderSource for RestSource {
    fn transport(&self) -> Transport {
        self.transport
    }

    fn list_orders<'a>(
        &'a self,
        q: &'a OrderQuery,
    ) -> BoxFuture<'a, Result<Vec<model::Order>, UpstreamError>> {
        Box::pin(self.fetch(q))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, ct: &str, body: &[u8]) -> Answer {
        let mut headers = http::HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_str(ct).unwrap());
        Answer {
            status: StatusCode::from_u16(status).unwrap(),
            headers,
            body: Bytes::copy_from_slice(body),
        }
    }

    fn gzipped(data: &[u8]) -> Vec<u8> {
        use std::io::Write as _;
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(data).unwrap();
        z.finish().unwrap()
    }

    fn encoded(enc: &str, body: &[u8]) -> Answer {
        let mut a = answer(200, JSON, body);
        a.headers
            .insert(CONTENT_ENCODING, HeaderValue::from_str(enc).unwrap());
        a
    }

    /// `inflate` refused the answer as a protocol error saying `says`.
    fn refused(a: Answer, says: &str) {
        let e = inflate(a).unwrap_err();
        assert!(
            matches!(&e, UpstreamError::Protocol(m) if m.contains(says)),
            "{e:?}"
        );
    }

    /// `enc`'s small body that inflates past the message limit is refused,
    /// and no more than the limit (and a byte) is ever inflated.
    fn refuses_a_bomb(enc: &str, compress: impl Fn(&[u8]) -> Vec<u8>) {
        let bomb = compress(&vec![0u8; MAX_MESSAGE_BYTES + 1]);
        assert!(
            bomb.len() < MAX_MESSAGE_BYTES / 100,
            "{enc}: {} B",
            bomb.len()
        );
        refused(encoded(enc, &bomb), "inflates past");
    }

    #[test]
    fn a_gzip_answer_is_inflated_and_a_bad_or_huge_one_refused() {
        let json = br#"{"orders":[]}"#;
        let a = inflate(encoded("gzip", &gzipped(json))).unwrap();
        assert_eq!(&a.body[..], json);
        assert!(a.headers.get(CONTENT_ENCODING).is_none());
        // No encoding, or identity: as it came.
        assert_eq!(&inflate(answer(200, JSON, json)).unwrap().body[..], json);
        assert_eq!(&inflate(encoded("identity", json)).unwrap().body[..], json);
        // Not gzip after all.
        refused(encoded("gzip", b"not gzip"), "does not inflate");
        // An encoding nobody asked for.
        refused(encoded("br", json), "not asked for");
        refuses_a_bomb("gzip", gzipped);
    }

    #[test]
    fn a_zstd_answer_is_inflated_and_a_bad_or_huge_one_refused() {
        let json = br#"{"orders":[]}"#;
        let a = inflate(encoded("zstd", &zstd::encode_all(&json[..], 1).unwrap())).unwrap();
        assert_eq!(&a.body[..], json);
        assert!(a.headers.get(CONTENT_ENCODING).is_none());
        refused(
            encoded("zstd", b"not zstd"),
            "zstd answer that does not inflate",
        );
        refuses_a_bomb("zstd", |b| zstd::encode_all(b, 3).unwrap());
    }

    #[test]
    fn error_answers_map_to_upstream_errors() {
        let body = br#"{"type":"/problems/unavailable","title":"Service unavailable","status":503,"detail":"db down","error":"unavailable"}"#;
        let problem = service_kit::problem::PROBLEM_JSON;
        assert_eq!(
            decode(answer(503, problem, body), false).unwrap_err(),
            UpstreamError::Unavailable("db down".into())
        );
        assert!(matches!(
            decode(answer(400, problem, body), true),
            Err(UpstreamError::Rejected { .. })
        ));
        assert!(matches!(
            decode(answer(504, JSON, b"late"), false),
            Err(UpstreamError::Timeout(_))
        ));
    }

    #[test]
    fn a_body_of_the_wrong_type_is_a_protocol_error() {
        assert!(matches!(
            decode(answer(200, JSON, b"{}"), true),
            Err(UpstreamError::Protocol(_))
        ));
        let empty = decode(
            answer(200, "application/json; charset=utf-8", br#"{"orders":[]}"#),
            false,
        )
        .unwrap();
        assert!(empty.is_empty());
    }
}
