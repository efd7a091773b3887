//! HTTP/3: a service served over QUIC on a UDP socket, under the same
//! bounds as the TCP listeners ([`ConnLimits`], a [`ConnCap`]) and drained
//! alike at shutdown.
//!
//! QUIC carries each request on a stream of its own; a lost packet stalls
//! only the streams whose bytes it held, and the handshake (TLS 1.3, always
//! on) takes one round trip. What each bound becomes here:
//!
//! - address validation ([`Validation::Retry`], the default): a client's
//!   first Initial is answered with a Retry, a packet of about a hundred
//!   bytes holding a token, and the handshake begins only when the client
//!   sends its Initial again with that token, which proves it receives
//!   what is sent to its address. Before that, nothing larger than the
//!   Retry leaves for an address that may be spoofed (RFC 9000 §8.1 allows
//!   three times what came from it; quinn checks only that room is left
//!   before each datagram, so its handshake flight with PTO probes can pass
//!   the limit by up to a datagram). It costs a client's first connection
//!   a round trip, as TCP's handshake does before TLS's. After each
//!   handshake the listener gives its client NEW_TOKEN frames (quinn's:
//!   two, valid two weeks, each taken once, a reused one refused by its
//!   Bloom-filter log), and a later connection that presents one is valid
//!   at once: no Retry. The tokens are keyed per process, so a restart
//!   makes every client pay the round trip once more. [`Validation::Off`]
//!   skips the Retry on a network where addresses cannot be forged;
//! - the cap: a connection past it is refused before its handshake (QUIC's
//!   `CONNECTION_REFUSED`), as a TCP listener closes one as it comes;
//! - the handshake must end within [`tls::HANDSHAKE_TIMEOUT`];
//! - a request's head must be whole within the header-read timeout of its
//!   stream's opening, or the stream is stopped; its body within the
//!   body-read timeout of its head, or the body fails to read (the REST
//!   routes answer 408);
//! - a connection with no request in service for the idle timeout is
//!   closed, whatever the client sends meanwhile (QUIC's keep-alive pings
//!   included); QUIC's own idle timeout, the same, ends one that goes
//!   silent;
//! - requests in service at once: `max_streams` (QUIC's stream limit, as
//!   HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS); each stream may hold
//!   [`STREAM_WINDOW`] unread, the connection [`CONNECTION_WINDOW`], so a
//!   client that floods cannot make a service hold more;
//! - the process's budget of open streams
//!   ([`super::stream_budget::OPEN_STREAMS`]) counts HTTP/3's requests in
//!   service with HTTP/2's: past it the connection holding the most is
//!   closed (`H3_EXCESSIVE_LOAD`);
//! - an answer whose client takes nothing for the write timeout is reset
//!   (`H3_REQUEST_CANCELLED`), which frees what it held;
//! - a request's head larger than [`MAX_HEAD_BYTES`] is refused by h3.
//!
//! At the signal, new connections are refused (`CONNECTION_REFUSED`), each connection gets a
//! GOAWAY naming the last request it will serve, and the requests in
//! service finish; then the client is given [`LINGER`] to take the last
//! answers and close (a request's end means its answer is queued in QUIC,
//! not delivered). The drain ends `grace` plus [`DRAIN_SLACK`] after the
//! signal whatever clients do.
//!
//! [`DRAIN_SLACK`]: super::DRAIN_SLACK

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf as _, Bytes};
use http_body::Body as _;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{ConnCap, ConnLimits, DRAIN_SLACK, LINGER};

/// What one stream may hold unread: a request's body beyond it waits for
/// the service to read.
pub const STREAM_WINDOW: u32 = 1 << 20;
/// What one connection may hold unread, all its streams together.
pub const CONNECTION_WINDOW: u32 = 4 << 20;
/// The most of a request body's bytes, already received, handed on as one
/// frame.
const COALESCE_BYTES: usize = 64 << 10;
/// The largest request head (HTTP/3's SETTINGS_MAX_FIELD_SECTION_SIZE).
pub const MAX_HEAD_BYTES: u64 = 16 << 10;

/// The request body an HTTP/3 request arrives with.
pub type RequestBody = axum::body::Body;
/// What the service answers.
pub type Answer = http::Response<axum::body::Body>;

/// What an HTTP/3 listener serves: a service of [`RequestBody`] requests
/// to [`Answer`]s that never fails, cloned for each connection.
pub trait H3Service:
    tower::Service<http::Request<RequestBody>, Response = Answer, Error = Infallible, Future: Send>
    + Clone
    + Send
    + 'static
{
}

impl<S> H3Service for S where
    S: tower::Service<
            http::Request<RequestBody>,
            Response = Answer,
            Error = Infallible,
            Future: Send,
        > + Clone
        + Send
        + 'static
{
}

/// What a listener does with a client whose address it has not validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Validation {
    /// A Retry first (one round trip), so nothing larger than it goes to
    /// an address that may be spoofed; a client holding a NEW_TOKEN from
    /// an earlier connection skips it.
    #[default]
    Retry,
    /// The handshake at once; quinn's own limit of three times what came
    /// from the address (passed by up to a datagram).
    Off,
}

/// A bound UDP socket and the QUIC configuration it will serve with.
#[derive(Debug)]
pub struct H3Listener {
    endpoint: quinn::Endpoint,
    validation: Validation,
}

/// Why a QUIC listener could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum H3Error {
    #[error("binding the QUIC (HTTP/3) listener to UDP {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the TLS configuration cannot serve QUIC: {0}")]
    Crypto(String),
}

impl H3Listener {
    /// Binds UDP `addr` and readies QUIC with `tls` (ALPN `h3`), the
    /// bounds of `limits` and the client address `validation`.
    pub fn bind(
        addr: SocketAddr,
        tls: &tls::ServerTls,
        limits: &ConnLimits,
        validation: Validation,
    ) -> Result<Self, H3Error> {
        let crypto =
            quinn::crypto::rustls::QuicServerConfig::try_from(tls.rustls_config(tls::ALPN_H3))
                .map_err(|e| H3Error::Crypto(e.to_string()))?;
        let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        config.transport_config(Arc::new(transport(limits)));
        let endpoint = quinn::Endpoint::server(config, addr)
            .map_err(|source| H3Error::Bind { addr, source })?;
        Ok(H3Listener {
            endpoint,
            validation,
        })
    }

    /// The UDP address it listens on (port 0 resolved).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }
}

/// QUIC's transport settings for a listener under `limits`.
fn transport(limits: &ConnLimits) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(limits.max_streams.into())
        // h3's control and QPACK streams, with room for a spare.
        .max_concurrent_uni_streams(4u32.into())
        .stream_receive_window(STREAM_WINDOW.into())
        .receive_window(CONNECTION_WINDOW.into())
        .max_idle_timeout(limits.idle.try_into().ok());
    t
}

/// Serves `service` on `listener` until `shutdown` completes, then drains
/// as the module doc says. At most `cap` connections at once.
pub async fn serve_h3<S: H3Service>(
    listener: H3Listener,
    service: S,
    shutdown: impl Future<Output = ()> + Send,
    limits: ConnLimits,
    cap: ConnCap,
) -> std::io::Result<()> {
    let H3Listener {
        endpoint,
        validation,
    } = listener;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let incoming = tokio::select! {
            () = &mut shutdown => break,
            Some(done) = connections.join_next(), if !connections.is_empty() => {
                if let Err(e) = done && e.is_panic() {
                    tracing::error!(error = %e, "an HTTP/3 connection panicked");
                }
                continue;
            }
            incoming = endpoint.accept() => match incoming {
                Some(i) => i,
                None => break,
            },
        };
        // An address not yet validated gets a Retry and nothing else; the
        // client's next Initial carries the token that validates it.
        if validation == Validation::Retry && !incoming.remote_address_validated() {
            if let Err(e) = incoming.retry() {
                // Only when a Retry is not allowed (never for an address
                // not validated, says quinn): nothing is sent.
                e.into_incoming().ignore();
            }
            continue;
        }
        // Past the cap: refused, and counted by the cap (on /metrics).
        let Some(admitted) = cap.admit() else {
            incoming.refuse();
            continue;
        };
        let service = service.clone();
        let stop = stop_rx.clone();
        connections.spawn(async move {
            let _admitted = admitted;
            if let Err(e) = connection(incoming, service, limits, stop).await {
                tracing::debug!(error = %e, "HTTP/3 connection ended");
            }
        });
    }
    // Drain: new connections refused, a GOAWAY on each open one, the
    // requests in service finish within the bound.
    let _ = stop_tx.send(true);
    let deadline = tokio::time::sleep(limits.grace + DRAIN_SLACK);
    let mut deadline = std::pin::pin!(deadline);
    loop {
        tokio::select! {
            () = &mut deadline => {
                tracing::warn!(
                    left = connections.len(),
                    "HTTP/3 connections still open at the end of the drain: closed"
                );
                connections.shutdown().await;
                break;
            }
            done = connections.join_next() => if done.is_none() {
                break;
            },
            Some(incoming) = endpoint.accept() => incoming.refuse(),
        }
    }
    endpoint.close(quinn::VarInt::from_u32(H3_NO_ERROR), b"shutting down");
    let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
    Ok(())
}

/// HTTP/3's EXCESSIVE_LOAD code.
const H3_EXCESSIVE_LOAD: u32 = 0x107;

/// HTTP/3's NO_ERROR code.
const H3_NO_ERROR: u32 = 0x100;

async fn connection<S: H3Service>(
    incoming: quinn::Incoming,
    service: S,
    limits: ConnLimits,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let quic = tokio::time::timeout(tls::HANDSHAKE_TIMEOUT, incoming)
        .await
        .map_err(|_| "no QUIC handshake within the handshake timeout")??;
    requests(quic, service, limits, &mut stop).await
}

/// A connection's requests, each in a task of its own, until the
/// connection ends, idles past its bound, or drains.
async fn requests<S: H3Service>(
    quic: quinn::Connection,
    service: S,
    limits: ConnLimits,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut conn: h3::server::Connection<h3_quinn::Connection, Bytes> = h3::server::builder()
        .max_field_section_size(MAX_HEAD_BYTES)
        .build(h3_quinn::Connection::new(quic.clone()))
        .await?;
    let mut in_service = JoinSet::new();
    let mut quiet_since = Instant::now();
    let mut draining = false;
    // The process's budget of open streams, HTTP/2's and HTTP/3's alike.
    let share = super::stream_budget::Share::default();
    let evicted = std::future::poll_fn(|cx| {
        if share.evicted(cx) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    });
    let mut evicted = std::pin::pin!(evicted);
    loop {
        share.set(in_service.len());
        let idle_at = quiet_since + limits.idle;
        tokio::select! {
            () = &mut evicted => {
                tracing::debug!(
                    "closing an HTTP/3 connection: the process is over its budget of open streams and it holds the most"
                );
                quic.close(quinn::VarInt::from_u32(H3_EXCESSIVE_LOAD), b"too many open streams");
                return Ok(());
            }
            changed = stop.changed(), if !draining => {
                if changed.is_ok() && !*stop.borrow() {
                    continue;
                }
                draining = true;
                conn.shutdown(0).await?;
                if in_service.is_empty() {
                    break;
                }
            }
            accepted = conn.accept(), if !draining => match accepted? {
                Some(resolver) => {
                    let service = service.clone();
                    in_service.spawn(request(resolver, service, limits));
                }
                None => break,
            },
            Some(_) = in_service.join_next(), if !in_service.is_empty() => {
                if in_service.is_empty() {
                    if draining {
                        break;
                    }
                    quiet_since = Instant::now();
                }
            }
            () = tokio::time::sleep_until(idle_at), if in_service.is_empty() && !draining => {
                tracing::debug!("closing an HTTP/3 connection: no request within the idle timeout");
                break;
            }
        }
    }
    if draining {
        // Every answer is handed to QUIC, not yet delivered: closing now
        // would drop what the client has not acknowledged. The client,
        // which has its GOAWAY and its answers, closes; at most
        // [`LINGER`] is waited for that.
        let _ = tokio::time::timeout(LINGER, quic.closed()).await;
    }
    quic.close(quinn::VarInt::from_u32(H3_NO_ERROR), b"");
    Ok(())
}

type Resolver = h3::server::RequestResolver<h3_quinn::Connection, Bytes>;

/// One request: its head within the header-read timeout, the service's
/// answer, the answer written under the write timeout.
async fn request<S: H3Service>(resolver: Resolver, mut service: S, limits: ConnLimits) {
    let (head, stream) =
        match tokio::time::timeout(limits.header_read, resolver.resolve_request()).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "an HTTP/3 request's head could not be read");
                return;
            }
            Err(_) => {
                tracing::debug!(
                    "an HTTP/3 request's head did not arrive within the header-read timeout"
                );
                return;
            }
        };
    let (mut send, recv) = stream.split();
    let (parts, ()) = head.into_parts();
    // The body-read timeout, as on the TCP listeners: a body still coming
    // past it fails to read (the REST routes answer 408).
    let body = axum::body::Body::new(crate::deadline::DeadlineBody::new(
        Incoming::new(recv),
        limits.body_read,
    ));
    let request = http::Request::from_parts(parts, body);
    let Ok(answer) = tower::ServiceExt::oneshot(&mut service, request).await;
    let (parts, body) = answer.into_parts();
    if let Err(e) = write(&mut send, parts, body, limits.write).await {
        tracing::debug!(error = %e, "an HTTP/3 answer was not sent whole");
        send.stop_stream(h3::error::Code::H3_REQUEST_CANCELLED);
    }
}

type SendHalf = h3::server::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;

/// Writes an answer, each part within `write` of the last (the client must
/// take bytes for the answer to progress).
async fn write(
    send: &mut SendHalf,
    parts: http::response::Parts,
    body: axum::body::Body,
    write: Duration,
) -> Result<(), String> {
    let within =
        |what: &'static str| move |_| format!("the client took no {what} within the write timeout");
    tokio::time::timeout(
        write,
        send.send_response(http::Response::from_parts(parts, ())),
    )
    .await
    .map_err(within("answer head"))?
    .map_err(|e| e.to_string())?;
    let mut body = std::pin::pin!(body);
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = frame.map_err(|e| format!("the answer's body failed: {e}"))?;
        match frame.into_data() {
            Ok(mut data) => {
                if data.has_remaining() {
                    let bytes = data.copy_to_bytes(data.remaining());
                    tokio::time::timeout(write, send.send_data(bytes))
                        .await
                        .map_err(within("bytes"))?
                        .map_err(|e| e.to_string())?;
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    tokio::time::timeout(write, send.send_trailers(trailers))
                        .await
                        .map_err(within("trailers"))?
                        .map_err(|e| e.to_string())?;
                }
            }
        }
    }
    tokio::time::timeout(write, send.finish())
        .await
        .map_err(within("end of the answer"))?
        .map_err(|e| e.to_string())
}

type RecvHalf = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;

/// A request's body as it arrives on its stream. Dropped before its end
/// (an answer that did not need it, or not all of it), the rest is read
/// and thrown away in a task of its own, within the early answers' bounds
/// ([`super::leftover::DRAIN_BYTES`], [`super::leftover::DRAIN_TIME`]), as
/// on the TCP listeners: a client still sending (a GET's end of stream
/// among it) is not told to stop, which some clients (h3-util's) take as
/// the call failing even with the answer in hand. Past the bounds the
/// stream is dropped, and quinn stops what it did not read. (h3-quinn
/// 0.0.10 panics on an explicit stop while a read is pending, so none is
/// made.)
struct Incoming {
    stream: Option<RecvHalf>,
    data_done: bool,
    finished: bool,
    /// This one is the drain's: dropped, it reads no more.
    draining: bool,
    /// An error read after bytes handed on with it, for the next poll.
    error: Option<h3::error::StreamError>,
}

impl Incoming {
    fn new(stream: RecvHalf) -> Self {
        Incoming {
            stream: Some(stream),
            data_done: false,
            finished: false,
            draining: false,
            error: None,
        }
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        if self.finished || self.draining {
            return;
        }
        // A request whose end is already here (a GET's end of stream) is
        // read to it now, with no task and none of the drain's room, so
        // that even with that room taken by a flood its client is not told
        // to stop.
        if let Some(stream) = self.stream.as_mut() {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            for _ in 0..16 {
                match stream.poll_recv_data(&mut cx) {
                    std::task::Poll::Ready(Ok(Some(_))) => {}
                    std::task::Poll::Ready(Ok(None)) => return,
                    _ => break,
                }
            }
        }
        let (Some(stream), Ok(rt)) = (self.stream.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let rest = Incoming {
            stream: Some(stream),
            data_done: self.data_done,
            finished: false,
            draining: true,
            error: self.error.take(),
        };
        rt.spawn(async move {
            super::leftover::drain_if_room(rest).await;
        });
    }
}

impl http_body::Body for Incoming {
    type Data = Bytes;
    type Error = h3::error::StreamError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        use std::task::Poll;
        let this = &mut *self;
        let Some(stream) = this.stream.as_mut() else {
            return Poll::Ready(None);
        };
        if let Some(e) = this.error.take() {
            this.finished = true;
            return Poll::Ready(Some(Err(e)));
        }
        if !this.data_done {
            // Every chunk already here, copied into one frame: quinn's
            // chunks are slices of the datagrams they came in (a body held
            // while it waits would keep each such datagram alive), and a
            // client sending many streams at once sends each in pieces of
            // a few hundred bytes, which a handler collecting the body
            // would hold one allocation each. The frame is allocated at
            // its size once the chunks are in hand: grown as they came, it
            // held up to twice its bytes (4,000 streams sending 64 KiB each
            // took the debug build 115-129 MiB up at its peak; 62-63 so).
            let mut chunks: Vec<Bytes> = Vec::new();
            let mut len = 0;
            while len < COALESCE_BYTES {
                match stream.poll_recv_data(cx) {
                    Poll::Ready(Ok(Some(mut data))) => {
                        let chunk = data.copy_to_bytes(data.remaining());
                        len += chunk.len();
                        chunks.push(chunk);
                    }
                    Poll::Ready(Ok(None)) => {
                        this.data_done = true;
                        break;
                    }
                    Poll::Ready(Err(e)) if chunks.is_empty() => {
                        this.finished = true;
                        return Poll::Ready(Some(Err(e)));
                    }
                    // The bytes before it first; the error at the next poll.
                    Poll::Ready(Err(e)) => {
                        this.error = Some(e);
                        break;
                    }
                    Poll::Pending => break,
                }
            }
            let mut frame = bytes::BytesMut::with_capacity(len);
            for chunk in chunks {
                bytes::BufMut::put(&mut frame, chunk);
            }
            if !frame.is_empty() {
                return Poll::Ready(Some(Ok(http_body::Frame::data(frame.freeze()))));
            }
            if !this.data_done {
                return Poll::Pending;
            }
        }
        let trailers = std::task::ready!(stream.poll_recv_trailers(cx));
        this.finished = true;
        match trailers {
            Ok(Some(t)) => Poll::Ready(Some(Ok(http_body::Frame::trailers(t)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }
}
