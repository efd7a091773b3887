//! What user-service measures about its calls to order-service, per transport,
//! and the Prometheus text it serves at `/metrics`.
//!
//! Everything is measured at the caller, inside user-service (seed 001 showed
//! that a load tool's own client can fake a 3x difference). The state lives in
//! one [`Metrics`] value per `Application`, not in a process-global recorder,
//! so that several applications in one test process keep separate books.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::upstream::Transport;

/// The counters of one transport.
#[derive(Debug)]
pub struct TransportMetrics {
    /// Round trips in microseconds, from the moment a call asks for a
    /// connection slot to the last byte of the answer: waiting for a slot is
    /// part of what a caller pays for a small pool.
    latency: Mutex<Histogram<u64>>,
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
    /// Round trips recorded in the histogram (successful or not).
    pub latency_count: u64,
    pub p50_micros: u64,
    pub p90_micros: u64,
    pub p95_micros: u64,
    pub p99_micros: u64,
    pub max_micros: u64,
}

impl TransportMetrics {
    /// Zeroed counters.
    pub(crate) fn new() -> Self {
        TransportMetrics {
            // 1 µs to 1 hour at 3 significant figures: about 200 KiB per
            // transport, and values past the top saturate instead of failing.
            #[allow(clippy::expect_used)]
            latency: Mutex::new(
                Histogram::new_with_bounds(1, 3_600_000_000, 3)
                    .expect("constant histogram bounds are valid"),
            ),
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
        if !ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        let micros = u64::try_from(elapsed.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        self.latency
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .saturating_record(micros);
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
        crate::upstream::record_pool_wait();
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.in_flight_max.fetch_max(now, Ordering::Relaxed);
        InFlightGuard(self.clone())
    }

    /// A copy of the counters and the histogram's percentiles.
    pub fn snapshot(&self) -> TransportSnapshot {
        let h = self.latency.lock().unwrap_or_else(PoisonError::into_inner);
        let count = h.len();
        let q = |p: f64| {
            if count == 0 {
                0
            } else {
                h.value_at_quantile(p)
            }
        };
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
            latency_count: count,
            p50_micros: q(0.50),
            p90_micros: q(0.90),
            p95_micros: q(0.95),
            p99_micros: q(0.99),
            max_micros: if count == 0 { 0 } else { h.max() },
        }
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
    /// "postgres" or "memory": a label on every series, so that a run's
    /// numbers always say which store produced them.
    store: &'static str,
    /// The budget each transport was given.
    pool_size: usize,
    transports: Vec<Arc<TransportMetrics>>,
    /// Requests this service served, per protocol and route.
    pub requests: Arc<telemetry::metrics::RequestMetrics>,
}

impl Metrics {
    /// Fresh counters for an application using `store`.
    pub fn new(store: &'static str, pool_size: usize) -> Self {
        Metrics {
            store,
            pool_size,
            transports: Transport::ALL
                .iter()
                .map(|_| Arc::new(TransportMetrics::new()))
                .collect(),
            requests: Arc::new(telemetry::metrics::RequestMetrics::new("user")),
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

    /// The Prometheus text exposition of every counter.
    pub fn render(&self) -> String {
        let snaps: Vec<(Transport, TransportSnapshot)> = Transport::ALL
            .iter()
            .map(|t| (*t, self.snapshot(*t)))
            .collect();
        let store = self.store;
        let mut out = String::with_capacity(8 * 1024);
        let _ = writeln!(
            out,
            "# HELP user_service_info Which store this instance runs on and its connection budget per transport.\n\
             # TYPE user_service_info gauge\n\
             user_service_info{{store=\"{store}\",pool_size=\"{}\"}} 1",
            self.pool_size
        );
        let mut family =
            |name: &str, kind: &str, help: &str, value: &dyn Fn(&TransportSnapshot) -> String| {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
                for (t, s) in &snaps {
                    let _ = writeln!(
                        out,
                        "{name}{{via=\"{}\",store=\"{store}\"}} {}",
                        t.name(),
                        value(s)
                    );
                }
            };
        family(
            "user_upstream_calls_total",
            "counter",
            "Calls to order-service.",
            &|s| s.calls.to_string(),
        );
        family(
            "user_upstream_errors_total",
            "counter",
            "Calls to order-service that failed (timeout, unavailable, bad answer).",
            &|s| s.errors.to_string(),
        );
        family(
            "user_upstream_connections_opened_total",
            "counter",
            "TCP connections opened to order-service.",
            &|s| s.connections_opened.to_string(),
        );
        family(
            "user_upstream_connections_open",
            "gauge",
            "TCP connections to order-service open now.",
            &|s| s.connections_open.to_string(),
        );
        family(
            "user_upstream_bytes_read_total",
            "counter",
            "Bytes read from order-service sockets, headers and framing included.",
            &|s| s.bytes_read.to_string(),
        );
        family(
            "user_upstream_bytes_written_total",
            "counter",
            "Bytes written to order-service sockets, headers and framing included.",
            &|s| s.bytes_written.to_string(),
        );
        family(
            "user_upstream_in_flight",
            "gauge",
            "Calls on the wire to order-service now.",
            &|s| s.in_flight.to_string(),
        );
        family(
            "user_upstream_in_flight_max",
            "gauge",
            "Most calls ever on the wire to order-service at once.",
            &|s| s.in_flight_max.to_string(),
        );
        let _ = writeln!(
            out,
            "# HELP user_upstream_latency_micros Round trip to order-service measured in user-service, slot wait included.\n\
             # TYPE user_upstream_latency_micros summary"
        );
        for (t, s) in &snaps {
            let via = t.name();
            for (q, v) in [
                ("0.5", s.p50_micros),
                ("0.9", s.p90_micros),
                ("0.95", s.p95_micros),
                ("0.99", s.p99_micros),
                ("1", s.max_micros),
            ] {
                let _ = writeln!(
                    out,
                    "user_upstream_latency_micros{{via=\"{via}\",store=\"{store}\",quantile=\"{q}\"}} {v}"
                );
            }
            let _ = writeln!(
                out,
                "user_upstream_latency_micros_count{{via=\"{via}\",store=\"{store}\"}} {}",
                s.latency_count
            );
        }
        let tls_rows: Vec<_> = snaps
            .iter()
            .map(|(t, s)| (format!("via=\"{}\",store=\"{store}\"", t.name()), s.tls))
            .collect();
        tls::render_handshakes(&mut out, "user_upstream", &tls_rows);
        self.requests.render(&mut out);
        telemetry::metrics::render_process(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_recorded_round_trips() {
        let m = Metrics::new("memory", 4);
        let t = m.transport(Transport::Grpc);
        for ms in 1..=100 {
            t.record_call(Duration::from_millis(ms), ms != 100);
        }
        let s = m.snapshot(Transport::Grpc);
        assert_eq!(s.calls, 100);
        assert_eq!(s.errors, 1);
        assert!(
            (49_000..=51_000).contains(&s.p50_micros),
            "{}",
            s.p50_micros
        );
        assert!(
            (99_000..=100_100).contains(&s.max_micros),
            "{}",
            s.max_micros
        );
        assert_eq!(m.snapshot(Transport::H1Json), TransportSnapshot::default());
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
                "user_upstream_bytes_read_total{via=\"h1-json\",store=\"postgres\"} 1234"
            )
        );
        for t in Transport::ALL {
            assert!(
                text.contains(&format!(
                    "user_upstream_latency_micros{{via=\"{}\"",
                    t.name()
                )),
                "{t:?} missing"
            );
        }
    }
}
