//! What user-service measures about its calls to order-service, per transport,
//! and the Prometheus text it serves at `/metrics`.
//!
//! Everything is measured at the caller, inside user-service (the Java and
//! Spring Boot post showed that a load tool's own client can fake a 3x
//! difference). The state lives in one [`Metrics`] value per `Application`,
//! with its own registry, not in a process-global recorder, so that several
//! applications in one test process keep separate books.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use telemetry::metrics::{
    Collector, DescriptorEncoder, EncodeMetric as _, Histogram, Kind, Unit, encode_family,
};

use transports::Transport;

/// The counters of one transport.
#[derive(Debug)]
pub struct TransportMetrics {
    /// Round trips in seconds, from the moment a call asks for a connection
    /// slot to the last byte of the answer: waiting for a slot is part of
    /// what a caller pays for a small pool.
    latency: Histogram,
    /// Good calls' round trips, precisely (the lab's record).
    hdr: telemetry::hdr::Recorder,
    calls: AtomicU64,
    errors: AtomicU64,
    connections_opened: AtomicU64,
    connections_open: AtomicI64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    /// Calls handed to a connection and not yet answered. Its high-water mark
    /// is how the tests check that HTTP/1.1 never pipelines past the budget.
    in_flight: AtomicI64,
    in_flight_max: AtomicI64,
    /// TLS handshakes with order-service (all zero when TLS is off).
    tls: Arc<tls::HandshakeCounters>,
}

/// A point-in-time copy of one transport's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TransportSnapshot {
    pub calls: u64,
    pub errors: u64,
    pub connections_opened: u64,
    pub connections_open: i64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub in_flight: i64,
    pub in_flight_max: i64,
    /// TLS handshakes: full, resumed, failed.
    pub tls: tls::HandshakeCounts,
}

impl TransportMetrics {
    /// Zeroed counters.
    pub(crate) fn new() -> Self {
        TransportMetrics {
            latency: telemetry::metrics::latency_histogram(),
            hdr: telemetry::hdr::Recorder::default(),
            calls: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            connections_opened: AtomicU64::new(0),
            connections_open: AtomicI64::new(0),
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            in_flight: AtomicI64::new(0),
            in_flight_max: AtomicI64::new(0),
            tls: Arc::default(),
        }
    }

    /// The handshake counters a TLS connector of this transport records into.
    pub fn tls_counters(&self) -> &Arc<tls::HandshakeCounters> {
        &self.tls
    }

    /// Records one finished call and its round trip.
    pub fn record_call(&self, elapsed: Duration, ok: bool) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if ok {
            self.hdr.record(elapsed);
        } else {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        self.latency.observe(elapsed.as_secs_f64());
    }

    /// The good calls' round trips so far, emptied if `reset`.
    pub fn hdr(&self, reset: bool) -> hdrhistogram::Histogram<u64> {
        self.hdr.take(reset)
    }

    /// Counts a TCP connection opened; the returned guard counts it closed.
    pub fn connection_opened(self: &Arc<Self>) -> ConnectionGuard {
        self.connections_opened.fetch_add(1, Ordering::Relaxed);
        self.connections_open.fetch_add(1, Ordering::Relaxed);
        ConnectionGuard(self.clone())
    }

    pub(crate) fn add_read(&self, n: usize) {
        self.bytes_read.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn add_written(&self, n: usize) {
        self.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts a call on the wire until the guard is dropped.
    pub fn in_flight(self: &Arc<Self>) -> InFlightGuard {
        record_pool_wait();
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.in_flight_max.fetch_max(now, Ordering::Relaxed);
        InFlightGuard(self.clone())
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> TransportSnapshot {
        TransportSnapshot {
            calls: self.calls.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            connections_opened: self.connections_opened.load(Ordering::Relaxed),
            connections_open: self.connections_open.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            in_flight_max: self.in_flight_max.load(Ordering::Relaxed),
            tls: self.tls.snapshot(),
        }
    }
}

tokio::task_local! {
    /// When the current upstream call began, so that the moment it goes on
    /// the wire can be recorded as its wait for a connection slot.
    static CALL_START: Instant;
}

/// Runs `call`, an upstream call that began at `start`, so that its wait
/// for a connection slot is recorded when it goes on the wire.
pub(crate) async fn call_started<F: std::future::Future>(start: Instant, call: F) -> F::Output {
    CALL_START.scope(start, call).await
}

/// Records on the current `upstream.call` span how long the call waited for a
/// connection slot. Adapters call it (through [`TransportMetrics::in_flight`])
/// at the moment the request goes on the wire.
fn record_pool_wait() {
    if let Ok(start) = CALL_START.try_with(|s| *s) {
        tracing::Span::current().record("pool_wait_us", start.elapsed().as_micros() as u64);
    }
}

/// Counts a connection as closed when dropped (with the socket).
#[derive(Debug)]
pub struct ConnectionGuard(Arc<TransportMetrics>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.connections_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts a call as no longer in flight when dropped.
#[derive(Debug)]
pub struct InFlightGuard(Arc<TransportMetrics>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Every counter of one application.
#[derive(Debug)]
pub struct Metrics {
    transports: Vec<Arc<TransportMetrics>>,
    /// Requests this service served, per protocol and route, and the
    /// registry every series of `/metrics` is in.
    pub requests: Arc<telemetry::metrics::RequestMetrics>,
}

impl Metrics {
    /// Fresh counters for an application using `store`.
    pub fn new(store: &'static str, pool_size: usize) -> Self {
        let transports: Vec<Arc<TransportMetrics>> = Transport::ALL
            .iter()
            .map(|_| Arc::new(TransportMetrics::new()))
            .collect();
        let requests = Arc::new(telemetry::metrics::RequestMetrics::new("user"));
        let handshakes = tls::HandshakeCollector::new(
            "user_upstream",
            Transport::ALL
                .iter()
                .zip(&transports)
                .map(|(t, m)| {
                    let labels = vec![("via", t.name().to_owned()), ("store", store.to_owned())];
                    (labels, m.tls.clone())
                })
                .collect(),
        );
        requests.add_collector(UpstreamCollector {
            store,
            pool_size,
            transports: Transport::ALL
                .iter()
                .copied()
                .zip(transports.clone())
                .collect(),
            handshakes,
        });
        Metrics {
            transports,
            requests,
        }
    }

    /// The counters of one transport.
    pub fn transport(&self, t: Transport) -> &Arc<TransportMetrics> {
        &self.transports[t.index()]
    }

    /// A copy of one transport's counters.
    pub fn snapshot(&self, t: Transport) -> TransportSnapshot {
        self.transport(t).snapshot()
    }

    /// The Prometheus text exposition of every series: the upstream calls
    /// per transport, the requests served, the listeners, the process.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(64 * 1024);
        self.requests.render(&mut out);
        out
    }
}

/// The series of the calls to order-service, one per transport (`via`),
/// read at each scrape.
#[derive(Debug)]
struct UpstreamCollector {
    /// "postgres" or "memory": a label on every series, so that a run's
    /// numbers always say which store produced them.
    store: &'static str,
    /// The budget each transport was given.
    pool_size: usize,
    transports: Vec<(Transport, Arc<TransportMetrics>)>,
    handshakes: tls::HandshakeCollector,
}

impl Collector for UpstreamCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let store = self.store;
        encode_family(
            &mut encoder,
            "user_service_info",
            "Which store this instance runs on and its connection budget per transport",
            None,
            Kind::Gauge,
            [(
                [
                    ("store", store.to_owned()),
                    ("pool_size", self.pool_size.to_string()),
                ],
                1u64,
            )],
        )?;
        let snaps: Vec<_> = self
            .transports
            .iter()
            .map(|(t, m)| {
                let labels = [("via", t.name().to_owned()), ("store", store.to_owned())];
                (labels, m.snapshot())
            })
            .collect();
        let mut family = |name: &str,
                          help: &str,
                          unit: Option<Unit>,
                          kind: Kind,
                          value: fn(&TransportSnapshot) -> u64|
         -> Result<(), std::fmt::Error> {
            encode_family(
                &mut encoder,
                name,
                help,
                unit,
                kind,
                snaps.iter().map(|(l, s)| (l.clone(), value(s))),
            )
        };
        family(
            "user_upstream_calls",
            "Calls to order-service",
            None,
            Kind::Counter,
            |s| s.calls,
        )?;
        family(
            "user_upstream_errors",
            "Calls to order-service that failed (timeout, unavailable, bad answer)",
            None,
            Kind::Counter,
            |s| s.errors,
        )?;
        family(
            "user_upstream_connections_opened",
            "TCP connections opened to order-service",
            None,
            Kind::Counter,
            |s| s.connections_opened,
        )?;
        family(
            "user_upstream_connections_open",
            "TCP connections to order-service open now",
            None,
            Kind::Gauge,
            |s| u64::try_from(s.connections_open).unwrap_or(0),
        )?;
        family(
            "user_upstream_read",
            "Bytes read from order-service sockets, headers and framing included",
            Some(Unit::Bytes),
            Kind::Counter,
            |s| s.bytes_read,
        )?;
        family(
            "user_upstream_written",
            "Bytes written to order-service sockets, headers and framing included",
            Some(Unit::Bytes),
            Kind::Counter,
            |s| s.bytes_written,
        )?;
        family(
            "user_upstream_in_flight",
            "Calls on the wire to order-service now",
            None,
            Kind::Gauge,
            |s| u64::try_from(s.in_flight).unwrap_or(0),
        )?;
        family(
            "user_upstream_in_flight_max",
            "Most calls ever on the wire to order-service at once",
            None,
            Kind::Gauge,
            |s| u64::try_from(s.in_flight_max).unwrap_or(0),
        )?;
        let name = "user_upstream_duration";
        let mut histograms = encoder.encode_descriptor(
            name,
            "Round trip to order-service measured in user-service, slot wait included",
            Some(&Unit::Seconds),
            telemetry::metrics::MetricType::Histogram,
        )?;
        for ((labels, _), (_, m)) in snaps.iter().zip(&self.transports) {
            m.latency.encode(histograms.encode_family(labels)?)?;
        }
        self.handshakes.encode(encoder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_land_in_a_histogram_in_seconds() {
        let m = Metrics::new("memory", 4);
        let t = m.transport(Transport::Grpc);
        for ms in 1..=100 {
            t.record_call(Duration::from_millis(ms), ms != 100);
        }
        let s = m.snapshot(Transport::Grpc);
        assert_eq!(s.calls, 100);
        assert_eq!(s.errors, 1);
        assert_eq!(m.snapshot(Transport::H1Json), TransportSnapshot::default());
        let text = m.render();
        // 1..=100 ms: 50 calls of at most 50 ms, 70 of at most 70 ms.
        for line in [
            "# TYPE user_upstream_duration_seconds histogram",
            r#"user_upstream_duration_seconds_bucket{via="grpc",store="memory",le="0.05"} 50"#,
            r#"user_upstream_duration_seconds_bucket{via="grpc",store="memory",le="0.07"} 70"#,
            r#"user_upstream_duration_seconds_bucket{via="grpc",store="memory",le="+Inf"} 100"#,
            r#"user_upstream_duration_seconds_count{via="grpc",store="memory"} 100"#,
            r#"user_upstream_duration_seconds_sum{via="grpc",store="memory"} 5.05"#,
            r#"user_upstream_errors_total{via="grpc",store="memory"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line}\n{text}");
        }
    }

    #[test]
    fn guards_count_connections_and_calls_in_flight() {
        let m = Metrics::new("memory", 1);
        let t = m.transport(Transport::TcpProto);
        let c1 = t.connection_opened();
        let a = t.in_flight();
        let b = t.in_flight();
        drop((a, b));
        let _c = t.in_flight();
        drop(c1);
        let s = t.snapshot();
        assert_eq!((s.connections_opened, s.connections_open), (1, 0));
        assert_eq!((s.in_flight, s.in_flight_max), (1, 2));
    }

    #[test]
    fn the_exposition_has_a_series_per_transport() {
        let m = Metrics::new("postgres", 4);
        m.transport(Transport::H1Json).add_read(1234);
        let text = m.render();
        assert!(
            text.contains(
                "user_upstream_read_bytes_total{via=\"h1-json\",store=\"postgres\"} 1234"
            ),
            "{text}"
        );
        assert!(text.contains("user_service_info{store=\"postgres\",pool_size=\"4\"} 1"));
        for t in Transport::ALL {
            assert!(
                text.contains(&format!(
                    "user_upstream_duration_seconds_count{{via=\"{}\",store=\"postgres\"}} 0",
                    t.name()
                )),
                "{t:?} missing"
            );
        }
        // TLS off: the handshake counters are there, at zero.
        assert!(text.contains(
            "user_upstream_tls_handshakes_total{via=\"grpc\",store=\"postgres\",kind=\"full\"} 0"
        ));
        assert!(text.contains("# TYPE process_cpu_seconds_total counter"));
    }
}
