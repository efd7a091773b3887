//! What a service measures about the requests it serves and about its own
//! process, as Prometheus text.
//!
//! The state lives in a [`RequestMetrics`] value per application rather than
//! in a process-global recorder, so that tests running several services in
//! one process keep separate books. [`RecordLayer`] records every HTTP and
//! gRPC request passing through a tower stack; raw-TCP servers call
//! [`RequestMetrics::record`] themselves.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Requests of one protocol and route.
#[derive(Debug)]
struct RouteStats {
    by_status: BTreeMap<String, u64>,
    errors: u64,
    /// Durations in microseconds.
    latency: Histogram<u64>,
    sum_micros: u64,
}

impl RouteStats {
    fn new() -> Self {
        RouteStats {
            by_status: BTreeMap::new(),
            errors: 0,
            // 1 µs to 10 min at 3 significant digits; `saturating_record` keeps
            // anything longer at the top instead of failing.
            latency: Histogram::new_with_bounds(1, 600_000_000, 3)
                .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable!())),
            sum_micros: 0,
        }
    }
}

/// Rate, errors and duration per protocol and route.
#[derive(Debug)]
pub struct RequestMetrics {
    /// Metric name prefix, such as `order`.
    prefix: &'static str,
    routes: Mutex<BTreeMap<(String, String), RouteStats>>,
    /// More text appended by [`RequestMetrics::render`]: counters kept
    /// elsewhere (TLS handshakes) that belong on the same `/metrics`.
    sections: Sections,
}

/// Writes one extra section of `/metrics`.
type Section = Box<dyn Fn(&mut String) + Send + Sync>;

/// Renderers of extra `/metrics` sections.
#[derive(Default)]
struct Sections(Mutex<Vec<Section>>);

impl std::fmt::Debug for Sections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().unwrap_or_else(PoisonError::into_inner).len();
        write!(f, "Sections({n})")
    }
}

impl RequestMetrics {
    /// Empty books; every metric name starts with `{prefix}_`.
    pub fn new(prefix: &'static str) -> Self {
        RequestMetrics {
            prefix,
            routes: Mutex::new(BTreeMap::new()),
            sections: Sections::default(),
        }
    }

    /// Adds a section that [`RequestMetrics::render`] writes after the
    /// request metrics, such as a listener's TLS handshake counters.
    pub fn add_section(&self, render: impl Fn(&mut String) + Send + Sync + 'static) {
        self.sections
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::new(render));
    }

    /// Records one request: its protocol (`http1`, `h2c`, `grpc`, `grpc-web`,
    /// `tcp`), route, status (HTTP code or gRPC code name), whether it failed
    /// on the server's side, and how long it took.
    pub fn record(&self, protocol: &str, route: &str, status: &str, error: bool, took: Duration) {
        let mut routes = self.routes.lock().unwrap_or_else(PoisonError::into_inner);
        let s = routes
            .entry((protocol.to_owned(), route.to_owned()))
            .or_insert_with(RouteStats::new);
        *s.by_status.entry(status.to_owned()).or_default() += 1;
        if error {
            s.errors += 1;
        }
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        s.latency.saturating_record(micros.max(1));
        s.sum_micros = s.sum_micros.saturating_add(micros);
    }

    /// How many requests of `protocol` and `route` were recorded.
    pub fn count(&self, protocol: &str, route: &str) -> u64 {
        let routes = self.routes.lock().unwrap_or_else(PoisonError::into_inner);
        routes
            .get(&(protocol.to_owned(), route.to_owned()))
            .map_or(0, |s| s.latency.len())
    }

    /// The Prometheus text of the request metrics.
    pub fn render(&self, out: &mut String) {
        let p = self.prefix;
        let routes = self.routes.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = writeln!(
            out,
            "# HELP {p}_requests_total Requests served, by protocol, route and status.\n\
             # TYPE {p}_requests_total counter"
        );
        for ((proto, route), s) in routes.iter() {
            for (status, n) in &s.by_status {
                let _ = writeln!(
                    out,
                    "{p}_requests_total{{protocol=\"{proto}\",route=\"{route}\",status=\"{status}\"}} {n}"
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP {p}_request_errors_total Requests that failed on the server's side (5xx, gRPC internal/unavailable/deadline).\n\
             # TYPE {p}_request_errors_total counter"
        );
        for ((proto, route), s) in routes.iter() {
            let _ = writeln!(
                out,
                "{p}_request_errors_total{{protocol=\"{proto}\",route=\"{route}\"}} {}",
                s.errors
            );
        }
        let _ = writeln!(
            out,
            "# HELP {p}_request_duration_seconds Time to the response headers (the whole answer for unary calls).\n\
             # TYPE {p}_request_duration_seconds summary"
        );
        for ((proto, route), s) in routes.iter() {
            let labels = format!("protocol=\"{proto}\",route=\"{route}\"");
            for q in [0.5, 0.9, 0.95, 0.99, 1.0] {
                let v = s.latency.value_at_quantile(q) as f64 / 1e6;
                let _ = writeln!(
                    out,
                    "{p}_request_duration_seconds{{{labels},quantile=\"{q}\"}} {v}"
                );
            }
            let _ = writeln!(
                out,
                "{p}_request_duration_seconds_sum{{{labels}}} {}\n{p}_request_duration_seconds_count{{{labels}}} {}",
                s.sum_micros as f64 / 1e6,
                s.latency.len()
            );
        }
        drop(routes);
        for render in self
            .sections
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            render(out);
        }
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

/// Appends one gauge or counter sample, with its HELP and TYPE lines.
pub fn sample(out: &mut String, name: &str, kind: &str, help: &str, labels: &str, value: f64) {
    let labels = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{labels} {value}"
    );
}

/// Appends the process metrics in the standard Prometheus names.
pub fn render_process(out: &mut String) {
    let s = process_stats();
    sample(
        out,
        "process_cpu_seconds_total",
        "counter",
        "User and system CPU time.",
        "",
        s.cpu_seconds,
    );
    sample(
        out,
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory now.",
        "",
        s.resident_bytes as f64,
    );
    sample(
        out,
        "process_max_resident_memory_bytes",
        "gauge",
        "Peak resident memory since start.",
        "",
        s.max_resident_bytes as f64,
    );
}

/// The protocol label of an HTTP request: `grpc`, `grpc-web`, `connect`,
/// `h2c` or `http1`. A Connect call says so in `Connect-Protocol-Version`
/// (unary) or in its streaming content type.
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
        "h2c"
    } else {
        "http1"
    }
}

/// The status label of a response, and whether it is a server-side failure.
/// gRPC errors of unary calls come as trailers-only responses, so their code
/// is in the headers; a stream that fails later counts as the OK it started as.
pub fn status_of<B>(res: &http::Response<B>) -> (String, bool) {
    if let Some(code) = res.headers().get("grpc-status") {
        let code = code.to_str().unwrap_or("2");
        // INTERNAL, UNAVAILABLE, DEADLINE_EXCEEDED, UNKNOWN, DATA_LOSS.
        let error = matches!(code, "13" | "14" | "4" | "2" | "15");
        return (format!("grpc-{code}"), error);
    }
    let grpc = res
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    if grpc {
        // Headers sent, status to come in the trailers: the call started well.
        return ("grpc-0".to_owned(), false);
    }
    let s = res.status();
    (s.as_u16().to_string(), s.is_server_error())
}

/// A tower layer that records every request in a [`RequestMetrics`]. On an
/// axum router, add it with `route_layer` so that it sees the matched route.
#[derive(Debug, Clone)]
pub struct RecordLayer {
    metrics: Arc<RequestMetrics>,
}

impl RecordLayer {
    /// Records into `metrics`.
    pub fn new(metrics: Arc<RequestMetrics>) -> Self {
        RecordLayer { metrics }
    }
}

impl<S> tower::Layer<S> for RecordLayer {
    type Service = Record<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Record {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The service of [`RecordLayer`].
#[derive(Debug, Clone)]
pub struct Record<S> {
    inner: S,
    metrics: Arc<RequestMetrics>,
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
        // is known: a bounded label. gRPC paths are bounded by the services.
        let route = req
            .extensions()
            .get::<axum::extract::MatchedPath>()
            .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned());
        let metrics = self.metrics.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let res = fut.await;
            let (status, error) = match &res {
                Ok(r) => status_of(r),
                Err(_) => ("failed".to_owned(), true),
            };
            metrics.record(protocol, &route, &status, error, started.elapsed());
            res
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_render_as_prometheus_text() {
        let m = RequestMetrics::new("order");
        m.record("h2c", "/v2/orders", "200", false, Duration::from_millis(2));
        m.record("h2c", "/v2/orders", "503", true, Duration::from_millis(4));
        let mut out = String::new();
        m.render(&mut out);
        assert!(out.contains(
            "order_requests_total{protocol=\"h2c\",route=\"/v2/orders\",status=\"200\"} 1"
        ));
        assert!(
            out.contains("order_request_errors_total{protocol=\"h2c\",route=\"/v2/orders\"} 1")
        );
        assert!(out.contains(
            "order_request_duration_seconds_count{protocol=\"h2c\",route=\"/v2/orders\"} 2"
        ));
        assert_eq!(m.count("h2c", "/v2/orders"), 2);
    }

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let s = process_stats();
        assert!(s.resident_bytes > 0);
        assert!(s.max_resident_bytes >= s.resident_bytes);
    }
}
