//! A listener's cap on open connections. Past it a new connection is
//! accepted and closed at once (before TLS, before a byte is read), counted,
//! and logged at most once a second, so that a flood of connections can
//! neither exhaust the process's file descriptors nor fill its log.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The cap of one listener, shared by its accept loop and its `/metrics`.
#[derive(Debug, Clone)]
pub struct ConnCap {
    listener: &'static str,
    max: usize,
    open: Arc<AtomicUsize>,
    refused: Arc<AtomicU64>,
    last_log: Arc<Mutex<Option<Instant>>>,
}

/// One admitted connection: the slot is free again when it drops.
#[derive(Debug)]
pub struct Admitted(Arc<AtomicUsize>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ConnCap {
    /// At most `max` connections open at once on `listener` ("rest", "grpc").
    pub fn new(listener: &'static str, max: usize) -> Self {
        ConnCap {
            listener,
            max: max.max(1),
            open: Arc::default(),
            refused: Arc::default(),
            last_log: Arc::default(),
        }
    }

    /// A slot for a new connection, or `None` (counted and logged) when
    /// every slot is taken: the caller closes the connection.
    pub fn admit(&self) -> Option<Admitted> {
        let taken = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            });
        if taken.is_ok() {
            return Some(Admitted(self.open.clone()));
        }
        let refused = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        let mut last = self.last_log.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            *last = Some(Instant::now());
            tracing::warn!(
                listener = self.listener,
                max = self.max,
                refused_so_far = refused,
                "connection refused: the listener is at its cap of open connections"
            );
        }
        None
    }

    /// Which listener this is.
    pub fn listener(&self) -> &'static str {
        self.listener
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Connections refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The cap.
    pub fn max(&self) -> usize {
        self.max
    }
}

/// One cap per listener, each `(name, max)`, and the collector of them all
/// for the service's `/metrics` under `prefix` (see [`CapsCollector`]). Both
/// services cap their listeners this way.
pub fn listener_caps<const N: usize>(
    prefix: &'static str,
    listeners: [(&'static str, usize); N],
) -> ([ConnCap; N], CapsCollector) {
    let caps = listeners.map(|(name, max)| ConnCap::new(name, max));
    let all = caps.to_vec();
    (caps, CapsCollector { prefix, caps: all })
}

/// These caps as `{prefix}_connections_open` and
/// `{prefix}_connections_refused_total`, by listener, read at each scrape.
#[derive(Debug, Clone)]
pub struct CapsCollector {
    prefix: &'static str,
    caps: Vec<ConnCap>,
}

impl prometheus_client::collector::Collector for CapsCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use telemetry::metrics::{Kind, encode_family};
        let by_listener = |value: fn(&ConnCap) -> u64| {
            self.caps
                .iter()
                .map(move |c| ([("listener", c.listener)], value(c)))
        };
        encode_family(
            &mut encoder,
            &format!("{}_connections_open", self.prefix),
            "Connections open now, per listener",
            None,
            Kind::Gauge,
            by_listener(|c| c.open() as u64),
        )?;
        encode_family(
            &mut encoder,
            &format!("{}_connections_refused", self.prefix),
            "Connections closed at once because the listener was at its cap",
            None,
            Kind::Counter,
            by_listener(ConnCap::refused),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_cap_a_connection_is_refused_and_counted_and_a_slot_frees_on_drop() {
        let cap = ConnCap::new("rest", 2);
        let a = cap.admit().expect("first");
        let _b = cap.admit().expect("second");
        assert!(cap.admit().is_none());
        assert!(cap.admit().is_none());
        assert_eq!((cap.open(), cap.refused()), (2, 2));
        drop(a);
        assert!(cap.admit().is_some(), "a slot freed");
        let metrics = telemetry::metrics::RequestMetrics::new("order");
        metrics.add_collector(CapsCollector {
            prefix: "order",
            caps: vec![cap],
        });
        let mut out = String::new();
        metrics.render(&mut out);
        for line in [
            "# TYPE order_connections_refused_total counter",
            "order_connections_refused_total{listener=\"rest\"} 2",
            "# TYPE order_connections_open gauge",
            "order_connections_open{listener=\"rest\"} 1",
        ] {
            assert!(out.contains(line), "missing {line}\n{out}");
        }
    }
}
