//! What a service measures about the requests it serves and about its own
//! process, and its `/metrics` in the Prometheus text format.
//!
//! The series live in a [`RequestMetrics`] value per application, each with
//! its own [`prometheus_client`] registry rather than a process-global
//! recorder, so that tests running several services in one process keep
//! separate books. [`RecordLayer`] records every HTTP and gRPC request
//! passing through a tower stack; raw-TCP servers call
//! [`RequestMetrics::record`] themselves. Counters kept elsewhere (TLS
//! handshakes, connection caps, a store's pool) join the same exposition as
//! [`Collector`]s, read at each scrape.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

pub use prometheus_client::collector::Collector;
pub use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
};
pub use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
pub use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
pub use prometheus_client::registry::Unit;

/// The `Content-Type` of `/metrics`: the Prometheus text format 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Upper bounds, in seconds, of every latency histogram's buckets: 1, 1.5,
/// 2, 3, 5 and 7 in each decade from 20 µs to 700 ms, then 1, 2, 5 and 10 s.
/// Fine enough that `histogram_quantile` over a loopback call of 100 µs is
/// off by at most half a bucket, wide enough for timeouts.
pub const LATENCY_BUCKETS: [f64; 32] = [
    20e-6, 30e-6, 50e-6, 70e-6, //
    100e-6, 150e-6, 200e-6, 300e-6, 500e-6, 700e-6, //
    1e-3, 1.5e-3, 2e-3, 3e-3, 5e-3, 7e-3, //
    10e-3, 15e-3, 20e-3, 30e-3, 50e-3, 70e-3, //
    100e-3, 150e-3, 200e-3, 300e-3, 500e-3, 700e-3, //
    1.0, 2.0, 5.0, 10.0,
];

/// A latency histogram on [`LATENCY_BUCKETS`].
pub fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The canonical name of a gRPC status code, as the gRPC specification
/// spells it (`OK`, `UNAVAILABLE`, …); `UNKNOWN` for a number it does not
/// define.
pub fn grpc_code_name(code: i32) -> &'static str {
    match code {
        0 => "OK",
        1 => "CANCELLED",
        2 => "UNKNOWN",
        3 => "INVALID_ARGUMENT",
        4 => "DEADLINE_EXCEEDED",
        5 => "NOT_FOUND",
        6 => "ALREADY_EXISTS",
        7 => "PERMISSION_DENIED",
        8 => "RESOURCE_EXHAUSTED",
        9 => "FAILED_PRECONDITION",
        10 => "ABORTED",
        11 => "OUT_OF_RANGE",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        15 => "DATA_LOSS",
        16 => "UNAUTHENTICATED",
        _ => "UNKNOWN",
    }
}

/// Whether a gRPC code is the server's failure rather than the caller's:
/// UNKNOWN, DEADLINE_EXCEEDED, INTERNAL, UNAVAILABLE, DATA_LOSS.
pub fn grpc_code_is_server_error(code: i32) -> bool {
    matches!(code, 2 | 4 | 13 | 14 | 15)
}

/// How a request ended: the HTTP status it got (none on raw TCP, or when
/// the connection failed before one was sent), the gRPC code it got (none
/// outside gRPC), and whether that is a failure on the server's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub http: Option<u16>,
    pub grpc: Option<i32>,
    pub error: bool,
}

impl Outcome {
    /// An HTTP answer; 5xx is the server's failure.
    pub fn http(status: u16) -> Self {
        Outcome {
            http: Some(status),
            grpc: None,
            error: status >= 500,
        }
    }

    /// A gRPC code outside HTTP (a raw-TCP or multiplexed lookup).
    pub fn grpc(code: i32) -> Self {
        Outcome {
            http: None,
            grpc: Some(code),
            error: grpc_code_is_server_error(code),
        }
    }

    /// No answer at all: the service below failed.
    pub fn failed() -> Self {
        Outcome {
            http: None,
            grpc: None,
            error: true,
        }
    }
}

/// The labels of `{prefix}_requests_total`: the HTTP status (`code`) and
/// the gRPC code (`grpc_code`) apart, each empty where it does not apply.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    protocol: String,
    route: String,
    code: String,
    grpc_code: String,
}

/// The labels of the per-route error counter and latency histogram.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    protocol: String,
    route: String,
}

/// Makes the latency histogram of a new label set.
type MakeHistogram = fn() -> Histogram;

/// Rate, errors and duration per protocol and route, and the registry of
/// everything else a service's `/metrics` shows.
#[derive(Debug)]
pub struct RequestMetrics {
    requests: Family<RequestLabels, Counter>,
    errors: Family<RouteLabels, Counter>,
    durations: Family<RouteLabels, Histogram, MakeHistogram>,
    registry: Mutex<Registry>,
}

impl RequestMetrics {
    /// Empty books; every request metric's name starts with `{prefix}_`.
    /// The process's CPU time and memory are registered too.
    pub fn new(prefix: &'static str) -> Self {
        let requests = Family::<RequestLabels, Counter>::default();
        let errors = Family::<RouteLabels, Counter>::default();
        let durations = Family::<RouteLabels, Histogram, MakeHistogram>::new_with_constructor(
            latency_histogram as MakeHistogram,
        );
        let mut registry = Registry::default();
        registry.register(
            format!("{prefix}_requests"),
            "Requests served, by protocol, route, HTTP status (code) and gRPC code (grpc_code)",
            requests.clone(),
        );
        registry.register(
            format!("{prefix}_request_errors"),
            "Requests that failed on the server's side (HTTP 5xx, gRPC UNKNOWN, DEADLINE_EXCEEDED, INTERNAL, UNAVAILABLE, DATA_LOSS, or no answer)",
            errors.clone(),
        );
        registry.register_with_unit(
            format!("{prefix}_request_duration"),
            "Time to the response headers (the whole answer for unary calls)",
            Unit::Seconds,
            durations.clone(),
        );
        registry.register_collector(Box::new(ProcessCollector));
        RequestMetrics {
            requests,
            errors,
            durations,
            registry: Mutex::new(registry),
        }
    }

    /// Adds series read at each scrape, such as a listener's TLS handshake
    /// counters, to the same `/metrics`.
    pub fn add_collector(&self, collector: impl Collector) {
        self.registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .register_collector(Box::new(collector));
    }

    /// Records one request: its protocol (`http1`, `h2c`, `h2`, `grpc`,
    /// `grpc-web`, `connect`, `tcp`), route, outcome, and how long it took.
    pub fn record(&self, protocol: &str, route: &str, outcome: Outcome, took: Duration) {
        let labels = RequestLabels {
            protocol: protocol.to_owned(),
            route: route.to_owned(),
            code: outcome.http.map(|c| c.to_string()).unwrap_or_default(),
            grpc_code: outcome
                .grpc
                .map(|c| grpc_code_name(c).to_owned())
                .unwrap_or_default(),
        };
        self.requests.get_or_create(&labels).inc();
        let route = RouteLabels {
            protocol: labels.protocol,
            route: labels.route,
        };
        let errors = self.errors.get_or_create(&route);
        if outcome.error {
            errors.inc();
        }
        self.durations
            .get_or_create(&route)
            .observe(took.as_secs_f64());
    }

    /// Appends the Prometheus text of every registered series.
    pub fn render(&self, out: &mut String) {
        let registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(out, &registry);
    }
}

/// Writes one family of constant samples read at a scrape: a counter or a
/// gauge, one sample per label set. `unit`, when given, ends the name.
pub fn encode_family<L, N>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    kind: Kind,
    samples: impl IntoIterator<Item = (L, N)>,
) -> Result<(), std::fmt::Error>
where
    L: EncodeLabelSet,
    N: EncodeCounterValue + EncodeGaugeValue,
{
    let metric_type = match kind {
        Kind::Counter => MetricType::Counter,
        Kind::Gauge => MetricType::Gauge,
    };
    let mut family = encoder.encode_descriptor(name, help, unit.as_ref(), metric_type)?;
    for (labels, value) in samples {
        let metric = family.encode_family(&labels)?;
        match kind {
            Kind::Counter => ConstCounter::new(value).encode(metric)?,
            Kind::Gauge => ConstGauge::new(value).encode(metric)?,
        }
    }
    Ok(())
}

/// What [`encode_family`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// No labels, for a family of one sample.
pub type NoLabels = [(&'static str, String); 0];

/// The process's CPU time and memory in the standard Prometheus names.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = process_stats();
        encode_family(
            &mut encoder,
            "process_cpu",
            "User and system CPU time",
            Some(Unit::Seconds),
            Kind::Counter,
            [(NoLabels::default(), s.cpu_seconds)],
        )?;
        encode_family(
            &mut encoder,
            "process_resident_memory",
            "Resident memory now",
            Some(Unit::Bytes),
            Kind::Gauge,
            [(NoLabels::default(), s.resident_bytes as f64)],
        )?;
        encode_family(
            &mut encoder,
            "process_max_resident_memory",
            "Peak resident memory since start",
            Some(Unit::Bytes),
            Kind::Gauge,
            [(NoLabels::default(), s.max_resident_bytes as f64)],
        )
    }
}

/// This process's CPU time and memory, from `/proc/self` (Linux).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub max_resident_bytes: u64,
}

/// Reads `/proc/self`; zeros where it cannot be read.
pub fn process_stats() -> ProcessStats {
    let ticks = 100.0; // USER_HZ on Linux.
    let cpu_seconds = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the parenthesised command name; utime and stime
            // are the 14th and 15th fields of the line.
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = f.get(11)?.parse().ok()?;
            let stime: f64 = f.get(12)?.parse().ok()?;
            Some((utime + stime) / ticks)
        })
        .unwrap_or(0.0);
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |k| k * 1024)
    };
    ProcessStats {
        cpu_seconds,
        resident_bytes: kib("VmRSS:"),
        max_resident_bytes: kib("VmHWM:"),
    }
}

/// The protocol label of an HTTP request: `grpc`, `grpc-web`, `connect`,
/// `h2` (HTTP/2 over TLS), `h2c` (HTTP/2 in clear) or `http1`. A Connect
/// call says so in `Connect-Protocol-Version` (unary) or in its streaming
/// content type. A request that came over TLS carries [`tls::OverTls`].
pub fn protocol_of<B>(req: &http::Request<B>) -> &'static str {
    let ct = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .map(http::HeaderValue::as_bytes)
        .unwrap_or_default();
    if req.headers().contains_key("connect-protocol-version")
        || ct.starts_with(b"application/connect+")
    {
        "connect"
    } else if ct.starts_with(b"application/grpc-web") {
        "grpc-web"
    } else if ct.starts_with(b"application/grpc") {
        "grpc"
    } else if req.version() == http::Version::HTTP_2 {
        if req.extensions().get::<tls::OverTls>().is_some() {
            "h2"
        } else {
            "h2c"
        }
    } else {
        "http1"
    }
}

/// How a response ended, as far as its headers tell. gRPC errors of unary
/// calls come as trailers-only responses, so their code is in the headers; a
/// gRPC answer whose code is still to come in the trailers started well, and
/// counts as OK (a stream that fails later counts as the OK it started as).
pub fn outcome_of<B>(res: &http::Response<B>) -> Outcome {
    let http = res.status().as_u16();
    let grpc = if let Some(code) = res.headers().get("grpc-status") {
        // A code that is not a number is not one the spec defines: UNKNOWN.
        Some(code.to_str().ok().and_then(|c| c.parse().ok()).unwrap_or(2))
    } else if res
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
    {
        Some(0)
    } else {
        None
    };
    Outcome {
        http: Some(http),
        grpc,
        error: res.status().is_server_error() || grpc.is_some_and(grpc_code_is_server_error),
    }
}

/// The label of a path no route or method matched.
pub const UNMATCHED: &str = "unmatched";

/// The `route` label of a request: its matched route template, else its
/// path if the server is known to serve it, else [`UNMATCHED`], so that a
/// client sending made-up paths cannot grow the series without bound. With
/// no list of the paths served (`known` is `None`), a path is taken as
/// served unless nothing answered to it (HTTP 404, gRPC UNIMPLEMENTED).
fn route_label(
    matched: Option<String>,
    path: String,
    outcome: Outcome,
    known: Option<&HashSet<String>>,
) -> String {
    match (matched, known) {
        (Some(route), _) => route,
        (None, Some(known)) if known.contains(&path) => path,
        (None, Some(_)) => UNMATCHED.to_owned(),
        (None, None) if outcome.http == Some(404) || outcome.grpc == Some(12) => {
            UNMATCHED.to_owned()
        }
        (None, None) => path,
    }
}

/// A tower layer that records every request in a [`RequestMetrics`]. On an
/// axum router, add it with `route_layer` so that it sees the matched route.
/// On a gRPC server, give it the methods served ([`RecordLayer::serving`]):
/// a call answered before routing (shed, past its deadline) is then labelled
/// by its path only if that path is a method.
#[derive(Debug, Clone)]
pub struct RecordLayer {
    metrics: Arc<RequestMetrics>,
    known: Option<Arc<HashSet<String>>>,
}

impl RecordLayer {
    /// Records into `metrics`.
    pub fn new(metrics: Arc<RequestMetrics>) -> Self {
        RecordLayer {
            metrics,
            known: None,
        }
    }

    /// The same, labelling by path only the `paths` given (gRPC methods as
    /// `/package.Service/Method`); every other path is [`UNMATCHED`].
    pub fn serving(mut self, paths: impl IntoIterator<Item = String>) -> Self {
        self.known = Some(Arc::new(paths.into_iter().collect()));
        self
    }
}

impl<S> tower::Layer<S> for RecordLayer {
    type Service = Record<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Record {
            inner,
            metrics: self.metrics.clone(),
            known: self.known.clone(),
        }
    }
}

/// The service of [`RecordLayer`].
#[derive(Debug, Clone)]
pub struct Record<S> {
    inner: S,
    metrics: Arc<RequestMetrics>,
    known: Option<Arc<HashSet<String>>>,
}

impl<S, B, RB> tower::Service<http::Request<B>> for Record<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    S::Error: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let started = Instant::now();
        let protocol = protocol_of(&req);
        // Under axum's `route_layer` the matched template (`/v2/orders/{id}`)
        // is known: a bounded label. A gRPC path is a method the service
        // has, unless the answer says it has none: see `route_label`.
        let matched = req
            .extensions()
            .get::<axum::extract::MatchedPath>()
            .map(|p| p.as_str().to_owned());
        let path = req.uri().path().to_owned();
        let metrics = self.metrics.clone();
        let known = self.known.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await;
            let outcome = match &res {
                Ok(r) => outcome_of(r),
                Err(_) => Outcome::failed(),
            };
            let route = route_label(matched, path, outcome, known.as_deref());
            metrics.record(protocol, &route, outcome, started.elapsed());
            res
        })
    }
}

#[cfg(test)]
mod tests;
