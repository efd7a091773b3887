//! Server spans named and described by the OpenTelemetry semantic
//! conventions, so that Jaeger (or any backend) groups and flags them as it
//! does any other service's.
//!
//! - HTTP: [`http_server`] (tower-http's `make_span_with`) opens the span
//!   named `{method}` with `http.request.method`, `url.path` and
//!   `network.protocol.version`; [`RouteLayer`] (an axum `route_layer`)
//!   renames it `{method} {route}` from the matched route template and adds
//!   `http.route`, or, on a Connect route, `{package.Service}/{Method}` with
//!   `rpc.system = "connect_rpc"`, `rpc.service` and `rpc.method`;
//!   [`OnHttpResponse`] (`on_response`) adds `http.response.status_code`
//!   and marks a 5xx as an error. A 4xx is the client's mistake, not the
//!   server's: its span status stays unset.
//! - gRPC: [`grpc_server`] (tonic's `trace_fn`) opens the span named
//!   `{package.Service}/{Method}` with `rpc.system = "grpc"`, `rpc.service`
//!   and `rpc.method`; [`GrpcStatusLayer`] adds `rpc.grpc.status_code` from
//!   the response headers (a trailers-only answer, as tonic sends errors)
//!   or else from the trailers, and marks the codes that are the server's
//!   fault as errors ([`grpc_server_error`]).
//! - Lookups that share one stream or connection: [`lookup`].
//! - [`error`]: the span's status Error with a message, for client spans too.
//!
//! The routed name cannot be given when the span is made: tower-http makes
//! the span before axum routes the request, and tracing-opentelemetry
//! ignores a later `otel.name` once the span has started (it starts when
//! first entered). The name is changed on the started OpenTelemetry span
//! instead ([`rename`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use opentelemetry::trace::TraceContextExt as _;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::http_failure::asked_for_the_unimplemented;
use crate::propagation::set_parent_from_headers;

/// The `tracing` name of every HTTP server span (its exported name is set
/// by the conventions, see the module doc).
const HTTP_SERVER: &str = "http.server";

/// `network.protocol.version` of an HTTP version.
fn protocol_version(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_09 => "0.9",
        http::Version::HTTP_10 => "1.0",
        http::Version::HTTP_2 => "2",
        http::Version::HTTP_3 => "3",
        _ => "1.1",
    }
}

/// An HTTP server span, child of the caller's span, named `{method}` until
/// [`RouteLayer`] knows the route. Used as tower-http's `make_span_with`.
pub fn http_server<B>(req: &http::Request<B>) -> tracing::Span {
    let method = req.method().as_str();
    let span = tracing::info_span!(
        HTTP_SERVER,
        otel.name = method,
        otel.kind = "server",
        otel.status_code = Empty,
        otel.status_description = Empty,
        http.request.method = method,
        http.route = Empty,
        http.response.status_code = Empty,
        url.path = req.uri().path(),
        network.protocol.version = protocol_version(req.version()),
        rpc.system = Empty,
        rpc.service = Empty,
        rpc.method = Empty,
    );
    set_parent_from_headers(&span, req.headers());
    span
}

/// `/package.Service/Method` as (`package.Service`, `Method`); a path of
/// another shape is all service.
fn rpc_parts(path: &str) -> (&str, &str) {
    let path = path.strip_prefix('/').unwrap_or(path);
    path.rsplit_once('/').unwrap_or((path, ""))
}

/// A gRPC server span, child of the caller's span, named
/// `{package.Service}/{Method}`. Used as tonic's `trace_fn`, which makes it
/// before anything else runs, so that the server's own deadline and every
/// layer are inside it.
pub fn grpc_server<B>(req: &http::Request<B>) -> tracing::Span {
    let path = req.uri().path();
    let (service, method) = rpc_parts(path);
    let span = tracing::info_span!(
        "grpc.server",
        otel.name = path.strip_prefix('/').unwrap_or(path),
        otel.kind = "server",
        otel.status_code = Empty,
        otel.status_description = Empty,
        rpc.system = "grpc",
        rpc.service = service,
        rpc.method = method,
        rpc.grpc.status_code = Empty,
        network.protocol.version = protocol_version(req.version()),
    );
    set_parent_from_headers(&span, req.headers());
    span
}

/// What carries a lookup that shares its stream or connection with others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupCarrier {
    /// One message of a `LookupOrders` bidi stream.
    Bidi,
    /// One length-prefixed frame on the raw-TCP port.
    Tcp,
}

impl LookupCarrier {
    /// (`rpc.system`, `rpc.service`): the stream's gRPC service, or the raw
    /// TCP protocol, which has no service of its own and is named as one.
    fn system_and_service(self) -> (&'static str, &'static str) {
        match self {
            LookupCarrier::Bidi => ("grpc", "order.v2.OrderService"),
            LookupCarrier::Tcp => ("order_tcp", "order.tcp"),
        }
    }

    /// The span name: `order.v2.OrderService/LookupOrders` or
    /// `order.tcp/LookupOrders`, the same as the caller's client span.
    pub fn span_name(self) -> &'static str {
        match self {
            LookupCarrier::Bidi => "order.v2.OrderService/LookupOrders",
            LookupCarrier::Tcp => "order.tcp/LookupOrders",
        }
    }
}

/// The server span of one lookup carried by a bidi stream message or a
/// raw-TCP frame: a call of its own, whose caller's context rides in the
/// message (the stream's headers belong to whoever opened it). Its
/// `rpc.grpc.status_code` is the lookup's (see [`record_grpc_status`]).
pub fn lookup(carrier: LookupCarrier, request_id: u64) -> tracing::Span {
    let (system, service) = carrier.system_and_service();
    tracing::info_span!(
        "lookup",
        otel.name = carrier.span_name(),
        otel.kind = "server",
        otel.status_code = Empty,
        otel.status_description = Empty,
        rpc.system = system,
        rpc.service = service,
        rpc.method = "LookupOrders",
        request_id,
        rpc.grpc.status_code = Empty,
    )
}

/// Sets the exported name of a span that has already started.
pub fn rename(span: &tracing::Span, name: String) {
    span.context().span().update_name(name);
}

/// Marks `span` as failed with `message` (its status Error). The code is
/// recorded before the description: a span not yet started keeps the last
/// status recorded, a started one the greater (an Error with a message is
/// greater than one without).
pub fn error(span: &tracing::Span, message: &str) {
    span.record("otel.status_code", "error");
    span.record("otel.status_description", message);
}

/// A tower layer, added with axum's `route_layer`, that names the current
/// [`http_server`] span after the matched route template.
#[derive(Debug, Clone, Default)]
pub struct RouteLayer {
    /// Route prefixes of Connect services (`/order.v2.OrderService/`): their
    /// spans are RPC spans. Shared, since the service is cloned per request.
    connect: Arc<[&'static str]>,
}

impl RouteLayer {
    /// HTTP routes only.
    pub fn new() -> Self {
        RouteLayer::default()
    }

    /// Routes under `prefix` are Connect calls.
    pub fn connect(mut self, prefix: &'static str) -> Self {
        self.connect = self.connect.iter().copied().chain([prefix]).collect();
        self
    }
}

impl<S> tower::Layer<S> for RouteLayer {
    type Service = Route<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Route {
            inner,
            connect: self.connect.clone(),
        }
    }
}

/// The service of [`RouteLayer`].
#[derive(Debug, Clone)]
pub struct Route<S> {
    inner: S,
    connect: Arc<[&'static str]>,
}

impl<S, B> tower::Service<http::Request<B>> for Route<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        // Called inside the server span: tower-http's trace layer, just
        // outside this one in the route's stack, enters it around the call.
        let span = tracing::Span::current();
        let ours = span.metadata().is_some_and(|m| m.name() == HTTP_SERVER);
        if let (true, Some(route)) = (ours, req.extensions().get::<axum::extract::MatchedPath>()) {
            let route = route.as_str();
            if self.connect.iter().any(|p| route.starts_with(p)) {
                let (service, method) = rpc_parts(route);
                span.record("rpc.system", "connect_rpc");
                span.record("rpc.service", service);
                span.record("rpc.method", method);
                rename(&span, format!("{service}/{method}"));
            } else {
                span.record("http.route", route);
                rename(&span, format!("{} {route}", req.method()));
            }
        }
        self.inner.call(req)
    }
}

/// tower-http's `on_response` for [`http_server`] spans: records the
/// status, marks a 5xx as an error, then logs as tower-http does by default
/// (at debug, inside the span).
#[derive(Debug, Clone, Default)]
pub struct OnHttpResponse(tower_http::trace::DefaultOnResponse);

impl<B> tower_http::trace::OnResponse<B> for OnHttpResponse {
    fn on_response(self, res: &http::Response<B>, latency: Duration, span: &tracing::Span) {
        let status = res.status();
        span.record("http.response.status_code", status.as_u16());
        if status.is_server_error() && !asked_for_the_unimplemented(status) {
            error(span, &status.to_string());
        }
        self.0.on_response(res, latency, span);
    }
}

/// Whether a gRPC code is the server's failure, by the conventions: UNKNOWN,
/// DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS. The
/// others (NOT_FOUND, INVALID_ARGUMENT, …) describe the request; on a client
/// span every code but OK is an error.
pub fn grpc_server_error(code: tonic::Code) -> bool {
    use tonic::Code as C;
    matches!(
        code,
        C::Unknown
            | C::DeadlineExceeded
            | C::Unimplemented
            | C::Internal
            | C::Unavailable
            | C::DataLoss
    )
}

/// Records a server span's gRPC status: `rpc.grpc.status_code`, and an
/// error with `message` when the code is the server's failure.
pub fn record_grpc_status(span: &tracing::Span, code: tonic::Code, message: &str) {
    span.record("rpc.grpc.status_code", code as i64);
    if grpc_server_error(code) {
        let message = if message.is_empty() {
            code.description()
        } else {
            message
        };
        error(span, message);
    }
}

/// `grpc-message` as sent: percent-encoded bytes, read as UTF-8.
pub fn percent_decoded(raw: &[u8]) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        match (
            raw[i],
            raw.get(i + 1).copied().and_then(hex),
            raw.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push(hi << 4 | lo);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The gRPC status in `headers` (or trailers), if they carry one.
fn grpc_status(headers: &http::HeaderMap) -> Option<(tonic::Code, String)> {
    let code = tonic::Code::from_bytes(headers.get("grpc-status")?.as_bytes());
    let message = headers
        .get("grpc-message")
        .map(|m| percent_decoded(m.as_bytes()))
        .unwrap_or_default();
    Some((code, message))
}

/// `grpc-timeout`, if the caller sent one as the gRPC over HTTP/2 spec
/// writes it: up to 8 digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`).
pub fn grpc_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    let v = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A tower layer under tonic's server (added with `Server::layer`) that
/// records each call's gRPC status on its [`grpc_server`] span.
///
/// The status is in the response headers when the call failed before any
/// message (tonic's trailers-only answer), otherwise in the trailers: the
/// response body then holds the span and records them as they pass, so that
/// the span also lasts as long as a stream. A call dropped unanswered was
/// cut by its deadline (the caller's `grpc-timeout` or the server's own
/// `timeout`, both enforced outside this layer): DEADLINE_EXCEEDED if it
/// had passed, else the caller went away (CANCELLED).
#[derive(Debug, Clone, Default)]
pub struct GrpcStatusLayer {
    server_timeout: Option<Duration>,
}

impl GrpcStatusLayer {
    /// For a server whose calls are bounded by `server_timeout` (tonic's
    /// `Server::timeout`), if any.
    pub fn new(server_timeout: Option<Duration>) -> Self {
        GrpcStatusLayer { server_timeout }
    }
}

impl<S> tower::Layer<S> for GrpcStatusLayer {
    type Service = GrpcStatus<S>;
    fn layer(&self, inner: S) -> Self::Service {
        GrpcStatus {
            inner,
            server_timeout: self.server_timeout,
        }
    }
}

/// The service of [`GrpcStatusLayer`].
#[derive(Debug, Clone)]
pub struct GrpcStatus<S> {
    inner: S,
    server_timeout: Option<Duration>,
}

impl<S, B, RB> tower::Service<http::Request<B>> for GrpcStatus<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
{
    type Response = http::Response<GrpcBody<RB>>;
    type Error = S::Error;
    type Future = GrpcFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let bound = match (grpc_timeout(req.headers()), self.server_timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let started = Instant::now();
        GrpcFuture {
            deadline: bound.map(|b| started + b),
            inner: Box::pin(self.inner.call(req)),
            span: None,
            answered: false,
        }
    }
}

/// The future of [`GrpcStatus`].
pub struct GrpcFuture<F> {
    inner: Pin<Box<F>>,
    /// The server span, taken when first polled: tonic calls its layers
    /// outside the span and polls them inside it.
    span: Option<tracing::Span>,
    deadline: Option<Instant>,
    answered: bool,
}

impl<F> std::fmt::Debug for GrpcFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcFuture")
            .field("answered", &self.answered)
            .finish_non_exhaustive()
    }
}

impl<F, RB, E> Future for GrpcFuture<F>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
{
    type Output = Result<http::Response<GrpcBody<RB>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let span = self.span.get_or_insert_with(tracing::Span::current).clone();
        let res = std::task::ready!(self.inner.as_mut().poll(cx));
        self.answered = true;
        Poll::Ready(res.map(|res| {
            let span = match grpc_status(res.headers()) {
                Some((code, message)) => {
                    record_grpc_status(&span, code, &message);
                    None
                }
                None => Some(span),
            };
            res.map(|inner| GrpcBody { inner, span })
        }))
    }
}

/// How early before its deadline, as this layer counts it, a dropped call
/// still counts as cut by its deadline: the deadline enforced outside the
/// layer started a moment before this layer saw the call.
const DEADLINE_SLACK: Duration = Duration::from_millis(2);

impl<F> Drop for GrpcFuture<F> {
    fn drop(&mut self) {
        let Some(span) = self.span.as_ref().filter(|_| !self.answered) else {
            return;
        };
        if self
            .deadline
            .is_some_and(|d| Instant::now() + DEADLINE_SLACK >= d)
        {
            record_grpc_status(
                span,
                tonic::Code::DeadlineExceeded,
                "the call's deadline passed before it was answered",
            );
        } else {
            record_grpc_status(span, tonic::Code::Cancelled, "");
        }
    }
}

pin_project_lite::pin_project! {
    /// A response body that records the gRPC status of its trailers on the
    /// span it holds (none when the status came in the headers).
    pub struct GrpcBody<B> {
        #[pin]
        inner: B,
        span: Option<tracing::Span>,
    }
}

impl<B> std::fmt::Debug for GrpcBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcBody").finish_non_exhaustive()
    }
}

impl<B: http_body::Body> http_body::Body for GrpcBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = std::task::ready!(this.inner.poll_frame(cx));
        if let Some(Ok(f)) = &frame
            && let Some(trailers) = f.trailers_ref()
            && let Some(span) = this.span.take()
        {
            match grpc_status(trailers) {
                Some((code, message)) => record_grpc_status(&span, code, &message),
                None => error(&span, "the trailers carry no grpc-status"),
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex, PoisonError};

    use tower::{Layer as _, Service as _};
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// Every value recorded on a span after its creation, as text.
    #[derive(Debug, Clone, Default)]
    struct Recorded(Arc<Mutex<Vec<(String, String)>>>);

    impl Recorded {
        fn take(&self) -> Vec<(String, String)> {
            std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
        }
    }

    impl tracing::field::Visit for Recorded {
        fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((f.name().to_owned(), format!("{v:?}")));
        }
    }

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recorded {
        fn on_record(
            &self,
            _: &tracing::span::Id,
            values: &tracing::span::Record<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            values.record(&mut self.clone());
        }
    }

    #[test]
    fn a_call_dropped_unanswered_is_deadline_exceeded_past_its_deadline_and_cancelled_before() {
        let recorded = Recorded::default();
        let subscriber = tracing_subscriber::registry().with(recorded.clone());
        tracing::subscriber::with_default(subscriber, || {
            for (timeout, wait, code, error) in [
                ("1m", Duration::from_millis(5), "4", true),
                ("10S", Duration::ZERO, "1", false),
            ] {
                let mut svc =
                    GrpcStatusLayer::new(Some(Duration::from_secs(30))).layer(tower::service_fn(
                        |_: http::Request<()>| {
                            std::future::pending::<
                                Result<http::Response<()>, std::convert::Infallible>,
                            >()
                        },
                    ));
                let req = http::Request::builder()
                    .uri("/order.v2.OrderService/ListOrders")
                    .header("grpc-timeout", timeout)
                    .body(())
                    .unwrap();
                let span = grpc_server(&req);
                let mut call = Box::pin(svc.call(req));
                let mut cx = Context::from_waker(std::task::Waker::noop());
                // tonic polls its layers inside the span.
                assert!(span.in_scope(|| call.as_mut().poll(&mut cx)).is_pending());
                std::thread::sleep(wait);
                drop(call);
                let got = recorded.take();
                assert!(
                    got.contains(&("rpc.grpc.status_code".to_owned(), code.to_owned())),
                    "{timeout}: {got:?}"
                );
                assert_eq!(
                    got.iter().any(|(k, _)| k == "otel.status_description"),
                    error,
                    "{timeout}: {got:?}"
                );
            }
        });
    }

    #[test]
    fn a_grpc_path_splits_into_service_and_method() {
        assert_eq!(
            rpc_parts("/order.v2.OrderService/ListOrders"),
            ("order.v2.OrderService", "ListOrders")
        );
        assert_eq!(rpc_parts("/nothing"), ("nothing", ""));
    }

    #[test]
    fn only_the_servers_own_failures_are_server_errors() {
        use tonic::Code as C;
        for c in [
            C::Unknown,
            C::DeadlineExceeded,
            C::Unimplemented,
            C::Internal,
            C::Unavailable,
            C::DataLoss,
        ] {
            assert!(grpc_server_error(c), "{c:?}");
        }
        for c in [
            C::Ok,
            C::Cancelled,
            C::InvalidArgument,
            C::NotFound,
            C::AlreadyExists,
            C::PermissionDenied,
            C::ResourceExhausted,
            C::FailedPrecondition,
            C::Aborted,
            C::OutOfRange,
            C::Unauthenticated,
        ] {
            assert!(!grpc_server_error(c), "{c:?}");
        }
    }

    #[test]
    fn grpc_status_and_message_are_read_as_sent() {
        let mut h = http::HeaderMap::new();
        assert_eq!(grpc_status(&h), None);
        h.insert("grpc-status", http::HeaderValue::from_static("14"));
        h.insert(
            "grpc-message",
            http::HeaderValue::from_static("store%20down%3A%20caf%C3%A9"),
        );
        assert_eq!(
            grpc_status(&h),
            Some((tonic::Code::Unavailable, "store down: café".to_owned()))
        );
    }

    #[test]
    fn grpc_timeouts_are_read_in_every_unit() {
        let t = |v: &'static str| {
            let mut h = http::HeaderMap::new();
            h.insert("grpc-timeout", http::HeaderValue::from_static(v));
            grpc_timeout(&h)
        };
        assert_eq!(t("2S"), Some(Duration::from_secs(2)));
        assert_eq!(t("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(t("1M"), Some(Duration::from_secs(60)));
        assert_eq!(t("7u"), Some(Duration::from_micros(7)));
        assert_eq!(t("x"), None);
        assert_eq!(t(""), None);
    }
}
