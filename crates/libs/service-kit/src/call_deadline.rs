//! A call's deadline, as its caller sent it (`grpc-timeout`, or Connect's
//! `Connect-Timeout-Ms`), enforced by the server: past it, the work stops
//! and the caller is told, rather than the server encoding and sending an
//! answer nobody waits for.
//!
//! - gRPC ([`GrpcDeadlineLayer`], on the tonic listeners): an answer not
//!   ready by the deadline is `DEADLINE_EXCEEDED`, trailers-only; an answer
//!   whose body is still going at the deadline ends there with trailers
//!   `grpc-status: 4` (a server stream, a bidi stream, or a large unary
//!   message tonic is still encoding). tonic times the answer's head out
//!   itself, as `CANCELLED`; this layer, inside it, ends the call
//!   [`MARGIN`] earlier, so that the caller learns the reason.
//! - Connect ([`ConnectDeadlineLayer`], on the Connect routes of the REST
//!   port): connect-rust already answers `deadline_exceeded` when decoding
//!   or the handler runs past the deadline, and ends streams at it; a unary
//!   answer, though, is encoded while its body is sent, after the handler.
//!   A unary answer whose head is ready only past the deadline is
//!   `deadline_exceeded` (HTTP 504); one still being sent at the deadline
//!   is cut there (HTTP/2:
//!   the stream reset; HTTP/1.1: the connection closed): its status has
//!   gone, and a Connect unary answer has no trailers to carry another.
//!   The caller, whose deadline it is, reports `deadline_exceeded` itself.
//! - REST ([`RestDeadlineLayer`], on the REST API's routes): HTTP has no
//!   deadline of its own, so the caller sends its time left in milliseconds
//!   as [`REST_TIMEOUT_HEADER`] (`x-request-timeout-ms`, digits as Connect
//!   writes them). Past it the handler's future is dropped (the store query
//!   with it) and the answer is a 504 problem `deadline_exceeded`; an
//!   answer still being sent at the deadline is cut there, as Connect's.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{self, HeaderMap, HeaderValue, Request, Response};
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How much earlier than tonic's own timer a gRPC call's answer is
/// refused, so that the caller gets `DEADLINE_EXCEEDED` rather than
/// tonic's `CANCELLED`.
pub const MARGIN: Duration = Duration::from_millis(1);

pub use telemetry::spans::grpc_timeout;

/// A `Connect-Timeout-Ms` value: up to 10 digits, as the Connect protocol
/// writes it.
pub fn connect_timeout(headers: &HeaderMap) -> Option<Duration> {
    millis(headers, "connect-timeout-ms")
}

/// Header `name`'s value as milliseconds: 1 to 10 digits, nothing else.
fn millis(headers: &HeaderMap, name: &str) -> Option<Duration> {
    let v = headers.get(name)?.to_str().ok()?;
    if v.is_empty() || v.len() > 10 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok().map(Duration::from_millis)
}

/// The header a REST caller sends its deadline in: its time left, in
/// milliseconds.
pub const REST_TIMEOUT_HEADER: &str = "x-request-timeout-ms";

/// An `x-request-timeout-ms` value, read as [`connect_timeout`] reads
/// Connect's: up to 10 digits.
pub fn rest_timeout(headers: &HeaderMap) -> Option<Duration> {
    millis(headers, REST_TIMEOUT_HEADER)
}

/// What a body still going at its deadline does.
#[derive(Debug, Clone, Copy)]
enum AtDeadline {
    /// Ends with gRPC trailers `grpc-status: 4`.
    GrpcTrailers,
    /// Fails, which cuts the answer.
    Cut,
}

/// The error a Connect answer cut at its deadline fails with.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the call's deadline passed while its answer was being sent")]
pub struct DeadlinePassed;

/// A response body that stops at a deadline.
pub struct DeadlineBody<B> {
    inner: B,
    /// The deadline, and its timer (which, polled for the first time past
    /// the deadline, may still answer pending once).
    deadline: Option<(Instant, Pin<Box<Sleep>>)>,
    at: AtDeadline,
    done: bool,
}

impl<B> DeadlineBody<B> {
    fn new(inner: B, deadline: Option<Instant>, at: AtDeadline) -> Self {
        DeadlineBody {
            inner,
            deadline: deadline.map(|d| (d, Box::pin(tokio::time::sleep_until(d)))),
            at,
            done: false,
        }
    }
}

fn deadline_trailers() -> HeaderMap {
    let mut t = HeaderMap::new();
    t.insert("grpc-status", HeaderValue::from_static("4"));
    t.insert(
        "grpc-message",
        HeaderValue::from_static("the%20call%27s%20deadline%20passed"),
    );
    t
}

impl<B> Body for DeadlineBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Some((at, timer)) = self.deadline.as_mut()
            && (Instant::now() >= *at || timer.as_mut().poll(cx).is_ready())
        {
            self.done = true;
            return Poll::Ready(Some(match self.at {
                AtDeadline::GrpcTrailers => Ok(Frame::trailers(deadline_trailers())),
                AtDeadline::Cut => Err(Box::new(DeadlinePassed)),
            }));
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(r)) => Poll::Ready(Some(r.map_err(Into::into))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Enforces each gRPC call's `grpc-timeout` (see the module's doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcDeadlineLayer;

impl<S> tower::Layer<S> for GrpcDeadlineLayer {
    type Service = GrpcDeadline<S>;
    fn layer(&self, inner: S) -> GrpcDeadline<S> {
        GrpcDeadline { inner }
    }
}

#[derive(Debug, Clone)]
pub struct GrpcDeadline<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqBody, ResBody> tower::Service<Request<ReqBody>> for GrpcDeadline<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + Unpin + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let deadline =
            grpc_timeout(req.headers()).map(|t| Instant::now() + t.saturating_sub(MARGIN));
        let answer = self.inner.call(req);
        Box::pin(async move {
            let wrap = |res: Response<ResBody>| {
                res.map(|b| {
                    tonic::body::Body::new(DeadlineBody::new(b, deadline, AtDeadline::GrpcTrailers))
                })
            };
            let Some(at) = deadline else {
                return answer.await.map(wrap);
            };
            match tokio::time::timeout_at(at, answer).await {
                Ok(r) if Instant::now() < at => r.map(wrap),
                // The head came at the deadline: the body, not encoded
                // yet, is dropped.
                Ok(_) | Err(_) => Ok(tonic::Status::deadline_exceeded(
                    "the call's deadline passed before its answer was ready",
                )
                .into_http()),
            }
        })
    }
}

/// Connect's `deadline_exceeded` for a unary call: HTTP 504 and the code
/// in a JSON body.
fn deadline_exceeded() -> Response<axum::body::Body> {
    let mut res = Response::new(axum::body::Body::from(
        r#"{"code":"deadline_exceeded","message":"the call's deadline passed before its answer was sent"}"#,
    ));
    *res.status_mut() = http::StatusCode::GATEWAY_TIMEOUT;
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

/// Cuts a Connect unary answer still being sent at its caller's deadline
/// (see the module's doc). Streams and the gRPC protocol are left to
/// connect-rust's own deadline policy.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConnectDeadlineLayer;

impl<S> tower::Layer<S> for ConnectDeadlineLayer {
    type Service = ConnectDeadline<S>;
    fn layer(&self, inner: S) -> ConnectDeadline<S> {
        ConnectDeadline { inner }
    }
}

#[derive(Debug, Clone)]
pub struct ConnectDeadline<S> {
    inner: S,
}

/// Whether a request is a Connect unary call (`application/json`,
/// `application/proto`, with or without parameters), rather than a
/// Connect stream (`application/connect+…`) or gRPC.
fn connect_unary(headers: &HeaderMap) -> bool {
    let ct = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = ct.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
        || essence.eq_ignore_ascii_case("application/proto")
}

impl<S, ReqBody, ResBody> tower::Service<Request<ReqBody>> for ConnectDeadline<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + Unpin + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<axum::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let deadline = connect_unary(req.headers())
            .then(|| connect_timeout(req.headers()))
            .flatten()
            .map(|t| Instant::now() + t);
        let answer = self.inner.call(req);
        Box::pin(async move {
            let res = answer.await?;
            if deadline.is_some_and(|at| Instant::now() >= at) && res.status().is_success() {
                // Past the deadline before a byte of the answer went out:
                // said as Connect says it, the body (not encoded yet)
                // dropped.
                return Ok(deadline_exceeded());
            }
            // An error (connect-rust's own `deadline_exceeded` among them)
            // goes out whole: it is short, and it says why.
            let deadline = deadline.filter(|_| res.status().is_success());
            Ok(res.map(|b| axum::body::Body::new(DeadlineBody::new(b, deadline, AtDeadline::Cut))))
        })
    }
}

/// A REST request's deadline, from [`REST_TIMEOUT_HEADER`], enforced (see
/// the module's doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct RestDeadlineLayer;

impl<S> tower::Layer<S> for RestDeadlineLayer {
    type Service = RestDeadline<S>;
    fn layer(&self, inner: S) -> RestDeadline<S> {
        RestDeadline { inner }
    }
}

#[derive(Debug, Clone)]
pub struct RestDeadline<S> {
    inner: S,
}

/// The 504 problem of a REST call past its deadline.
fn rest_deadline_exceeded(ms: u128) -> Response<axum::body::Body> {
    use axum::response::IntoResponse as _;
    crate::problem::DEADLINE_EXCEEDED
        .response(
            http::StatusCode::GATEWAY_TIMEOUT,
            format!("the caller's deadline ({ms} ms) passed before the answer was ready"),
            None,
        )
        .into_response()
}

impl<S, ReqBody, ResBody> tower::Service<Request<ReqBody>> for RestDeadline<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + Unpin + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<axum::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let timeout = rest_timeout(req.headers());
        let answer = self.inner.call(req);
        Box::pin(async move {
            let Some(timeout) = timeout else {
                return Ok(answer.await?.map(axum::body::Body::new));
            };
            let at = Instant::now() + timeout;
            let ms = timeout.as_millis();
            // Past the deadline the handler's future is dropped: the work
            // stops.
            let Ok(res) = tokio::time::timeout_at(at, answer).await else {
                return Ok(rest_deadline_exceeded(ms));
            };
            let res = res?;
            if Instant::now() >= at && res.status().is_success() {
                return Ok(rest_deadline_exceeded(ms));
            }
            let deadline = Some(at).filter(|_| res.status().is_success());
            Ok(res.map(|b| axum::body::Body::new(DeadlineBody::new(b, deadline, AtDeadline::Cut))))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(name: &'static str, v: &'static str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(name, HeaderValue::from_static(v));
        m
    }

    #[test]
    fn timeouts_are_read_as_their_specs_write_them() {
        assert_eq!(
            grpc_timeout(&h("grpc-timeout", "1m")),
            Some(Duration::from_millis(1))
        );
        assert_eq!(
            grpc_timeout(&h("grpc-timeout", "2S")),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            grpc_timeout(&h("grpc-timeout", "3H")),
            Some(Duration::from_secs(10_800))
        );
        assert_eq!(
            grpc_timeout(&h("grpc-timeout", "500u")),
            Some(Duration::from_micros(500))
        );
        for bad in ["", "m", "1", "123456789m", "1x", "-1m", "1.5S"] {
            let mut m = HeaderMap::new();
            m.insert("grpc-timeout", HeaderValue::from_str(bad).unwrap());
            assert_eq!(grpc_timeout(&m), None, "{bad:?}");
        }
        assert_eq!(
            connect_timeout(&h("connect-timeout-ms", "250")),
            Some(Duration::from_millis(250))
        );
        for bad in ["", "12345678901", "1s", "-5"] {
            let mut m = HeaderMap::new();
            m.insert("connect-timeout-ms", HeaderValue::from_str(bad).unwrap());
            assert_eq!(connect_timeout(&m), None, "{bad:?}");
        }
        assert_eq!(connect_timeout(&HeaderMap::new()), None);
    }

    #[test]
    fn only_connect_unary_calls_are_cut() {
        assert!(connect_unary(&h("content-type", "application/json")));
        assert!(connect_unary(&h("content-type", "application/proto")));
        assert!(connect_unary(&h(
            "content-type",
            "application/json; charset=utf-8"
        )));
        assert!(!connect_unary(&h(
            "content-type",
            "application/connect+proto"
        )));
        assert!(!connect_unary(&h("content-type", "application/grpc")));
    }
}
