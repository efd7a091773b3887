//! One HTTP exchange with order-service's REST port, as every adapter that
//! calls it makes one: what goes out ([`Outgoing`]), where to ([`Target`]),
//! and what comes back ([`Answer`]), read whole up to the message limit.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderValue, Method, StatusCode};
use http_body_util::{BodyExt as _, Limited};

use crate::metrics::TransportMetrics;
use crate::upstream::endpoints::Endpoints;
use crate::upstream::port::{MAX_MESSAGE_BYTES, UpstreamError};
use crate::upstream::wire;

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
/// POST (see [`crate::upstream::connect`]). Every call sent here reads only, so one
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
    pub(crate) fn get(path_and_query: &'a str, accept: &'static str) -> Self {
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
pub(crate) struct Target {
    /// `host:port`, to connect to, and TLS when on.
    pub(crate) dial: wire::Dialer,
    /// The same `host:port`, as the `Host` header (HTTP/1.1) and `:authority` (HTTP/2).
    pub(crate) host: HeaderValue,
}

impl Target {
    /// The REST port at `url`, dialed as `ep` says, offering `alpn`.
    pub(crate) fn new(
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
    pub(crate) async fn connect(
        &self,
        metrics: &Arc<TransportMetrics>,
    ) -> Result<wire::Conn, UpstreamError> {
        self.dial
            .connect(metrics)
            .await
            .map_err(|e| unavailable(&format!("cannot connect to {}", self.dial.addr), e))
    }
}

/// Order-service unavailable: `what` failed, because of `e`.
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

/// An answer from its head and its whole body.
pub(crate) fn into_answer(parts: http::response::Parts, body: Bytes) -> Answer {
    Answer {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// The protocols a connection to the REST port offers by ALPN (with TLS).
pub(crate) fn alpn(h2: bool) -> &'static [&'static [u8]] {
    if h2 { tls::ALPN_H2 } else { tls::ALPN_HTTP1 }
}
