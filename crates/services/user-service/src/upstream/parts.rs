//! Where one call's time went: order-service's own account (its store, its
//! encoding, its total), this side's decoding, and what remains of the round
//! trip, the wire and its framing.
//!
//! order-service gives its account when `ORDER_SERVER_TIMING` is on: a
//! `Server-Timing` header over HTTP, the same in gRPC trailers, a `timing`
//! field in a bidi or raw-TCP answer. This side records it, and its own
//! decode-and-convert time, when `USER_UPSTREAM_BREAKDOWN` is on: each
//! adapter reports into the call's [`Recording`], which exists only inside
//! [`record`], so that with the setting off nothing is timed.

use std::cell::RefCell;
use std::time::{Duration, Instant};

/// One call's parts. `store`, `encode` and `total` are order-service's, on
/// its clock; `decode` and `upstream` are this side's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallParts {
    pub store: Duration,
    pub encode: Duration,
    pub total: Duration,
    /// Decoding the answer and converting it to the domain's orders
    /// (inflating it first, when it was compressed).
    pub decode: Duration,
    /// The round trip, as `x-upstream-micros` reports it (slot wait included).
    pub upstream: Duration,
}

impl CallParts {
    /// What is left of the round trip: the wire, its framing, the other
    /// side's scheduling, and the wait for a connection slot.
    /// `None` when the parts add up to more than the round trip.
    pub fn wire(&self) -> Option<Duration> {
        self.upstream
            .checked_sub(self.total)?
            .checked_sub(self.decode)
    }

    /// The `x-upstream-parts` header: every part in µs, to the nanosecond.
    pub fn header(&self) -> String {
        let us = |d: Duration| d.as_nanos() as f64 / 1_000.0;
        format!(
            "store={:.3},encode={:.3},total={:.3},decode={:.3},upstream={:.3}",
            us(self.store),
            us(self.encode),
            us(self.total),
            us(self.decode),
            us(self.upstream)
        )
    }
}

/// order-service's account of one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerParts {
    pub store: Duration,
    pub encode: Duration,
    pub total: Duration,
}

impl ServerParts {
    /// From a `timing` field of a lookup's answer.
    pub fn of(t: &proto::order::v2::ServerTiming) -> ServerParts {
        ServerParts {
            store: Duration::from_nanos(t.store_nanos),
            encode: Duration::from_nanos(t.encode_nanos),
            total: Duration::from_nanos(t.total_nanos),
        }
    }

    /// From a `Server-Timing` value (`store;dur=0.012, encode;dur=0.004,
    /// total;dur=0.031`, durations in ms): `None` unless all three are there.
    pub fn parse(value: &str) -> Option<ServerParts> {
        let (mut store, mut encode, mut total) = (None, None, None);
        for metric in value.split(',') {
            let mut params = metric.split(';').map(str::trim);
            let name = params.next()?;
            let dur = params
                .find_map(|p| p.strip_prefix("dur="))
                .and_then(|d| d.parse::<f64>().ok())
                .filter(|d| d.is_finite() && *d >= 0.0)
                .map(|ms| Duration::from_nanos((ms * 1e6).round() as u64));
            match name {
                "store" => store = dur,
                "encode" => encode = dur,
                "total" => total = dur,
                _ => {}
            }
        }
        Some(ServerParts {
            store: store?,
            encode: encode?,
            total: total?,
        })
    }
}

/// What one call's adapter reports while the call runs.
#[derive(Debug, Default)]
pub(crate) struct Recording {
    server: Option<ServerParts>,
    decode: Duration,
    arrived: Option<Instant>,
}

tokio::task_local! {
    static RECORDING: RefCell<Recording>;
}

/// Runs `call` with a recording open: its output, order-service's account
/// (if it gave one) and this side's decode time, codec time included.
pub async fn record<T>(
    call: impl std::future::Future<Output = T>,
) -> (T, Option<ServerParts>, Duration) {
    RECORDING
        .scope(RefCell::new(Recording::default()), async move {
            let (out, codec) = proto::timing::decoding(call).await;
            let r = RECORDING.with(|r| std::mem::take(&mut *r.borrow_mut()));
            (out, r.server, r.decode + codec)
        })
        .await
}

/// Whether a recording is open: the adapters skip their timing otherwise.
pub(crate) fn recording() -> bool {
    RECORDING.try_with(|_| ()).is_ok()
}

/// Records order-service's account of the call.
pub(crate) fn server(parts: ServerParts) {
    let _ = RECORDING.try_with(|r| r.borrow_mut().server = Some(parts));
}

/// Records order-service's account from a `server-timing` header or
/// trailer, if the map has one.
pub(crate) fn server_timing(headers: &http::HeaderMap) {
    if !recording() {
        return;
    }
    if let Some(parts) = headers
        .get("server-timing")
        .and_then(|v| v.to_str().ok())
        .and_then(ServerParts::parse)
    {
        server(parts);
    }
}

/// Adds decode-and-convert time.
pub(crate) fn decoded(took: Duration) {
    let _ = RECORDING.try_with(|r| r.borrow_mut().decode += took);
}

/// Times `f` as decode-and-convert work, when a recording is open.
pub(crate) fn decoding<T>(f: impl FnOnce() -> T) -> T {
    if !recording() {
        return f();
    }
    let t0 = Instant::now();
    let out = f();
    decoded(t0.elapsed());
    out
}

/// Marks the answer's last byte as arrived: decoding starts now, and ends at
/// [`converted`] (for a client that decodes out of this crate's sight).
pub(crate) fn arrived() {
    let _ = RECORDING.try_with(|r| r.borrow_mut().arrived = Some(Instant::now()));
}

/// Ends the decoding begun at [`arrived`].
pub(crate) fn converted() {
    let _ = RECORDING.try_with(|r| {
        let mut r = r.borrow_mut();
        if let Some(at) = r.arrived.take() {
            r.decode += at.elapsed();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_timing_value_parses_in_any_order_with_other_metrics() {
        let p =
            ServerParts::parse("total;dur=0.031, cache;desc=\"x\", store;dur=0.0125,encode;dur=1")
                .unwrap();
        assert_eq!(p.store, Duration::from_nanos(12_500));
        assert_eq!(p.encode, Duration::from_millis(1));
        assert_eq!(p.total, Duration::from_micros(31));
    }

    #[test]
    fn a_server_timing_value_without_every_part_is_none() {
        assert_eq!(ServerParts::parse("store;dur=1, total;dur=2"), None);
        assert_eq!(
            ServerParts::parse("store;dur=x, encode;dur=1, total;dur=2"),
            None
        );
        assert_eq!(
            ServerParts::parse("store;dur=-1, encode;dur=1, total;dur=2"),
            None
        );
        assert_eq!(ServerParts::parse(""), None);
    }

    #[test]
    fn the_wire_is_what_the_parts_leave_of_the_round_trip() {
        let mut p = CallParts {
            store: Duration::from_micros(10),
            encode: Duration::from_micros(5),
            total: Duration::from_micros(30),
            decode: Duration::from_micros(20),
            upstream: Duration::from_micros(100),
        };
        assert_eq!(p.wire(), Some(Duration::from_micros(50)));
        assert_eq!(
            p.header(),
            "store=10.000,encode=5.000,total=30.000,decode=20.000,upstream=100.000"
        );
        p.upstream = Duration::from_micros(49);
        assert_eq!(p.wire(), None);
    }

    #[tokio::test]
    async fn adapters_report_only_inside_a_recording() {
        server(ServerParts::parse("store;dur=1, encode;dur=1, total;dur=2").unwrap());
        assert!(!recording());
        let ((), got, decode) = record(async {
            assert!(recording());
            let mut h = http::HeaderMap::new();
            h.insert(
                "server-timing",
                "store;dur=0.5, encode;dur=0.25, total;dur=1"
                    .parse()
                    .unwrap(),
            );
            server_timing(&h);
            decoded(Duration::from_micros(7));
        })
        .await;
        assert_eq!(got.unwrap().total, Duration::from_millis(1));
        assert_eq!(decode, Duration::from_micros(7));
    }
}
