//! Bytes per call on the wire, each way (seed 001 §6).
//!
//! Byte counts do not depend on load, so this experiment sends a few calls
//! one at a time instead of running k6:
//! - through user-service, for every transport it has, reading its socket
//!   counters (`user_upstream_bytes_*_total`) before and after;
//! - from the lab's own HTTP/1.1 client straight to order-service, for
//!   gRPC-web (user-service has no gRPC-web adapter) and, as a cross-check of
//!   the two ways of counting, for REST JSON and REST protobuf.
//!
//! A few calls go first uncounted, so that one-off connection costs (the
//! HTTP/2 preface and SETTINGS, a fresh HPACK table) are left out: the
//! figures are the steady state of a reused connection. `h1-json-close`
//! opens a connection per call by design, so its count includes that.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use prost::Message as _;
use serde::{Deserialize, Serialize};

use crate::http::Conn;
use crate::prom;
use crate::runner::Interrupted;
use crate::services::Running;

/// Calls counted per transport and size.
pub const COUNTED_CALLS: u32 = 10;
/// Calls sent first and not counted.
pub const WARM_CALLS: u32 = 3;

/// Who counted the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// user-service's socket counters, on its call to order-service.
    UserService,
    /// The lab's client, calling order-service directly.
    LabClient,
}

/// Bytes per call of one transport at one size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireRow {
    pub source: Source,
    /// A user-service transport name, or `grpc-web`, `rest-json`, `rest-proto`
    /// for the lab client.
    pub transport: String,
    pub orders: u32,
    pub calls: u32,
    /// Request bytes per call (caller to order-service).
    pub out_per_call: f64,
    /// Response bytes per call.
    pub in_per_call: f64,
}

/// One round of the wire-size experiment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireRecord {
    pub round: u32,
    pub rows: Vec<WireRow>,
}

/// The data set's user owning exactly `orders` orders (0, 1, 10, 100, 1,000
/// or 10,000); for any other count, the 10,000-order user.
pub fn user_for(orders: u32) -> String {
    let n = if [0, 1, 10, 100, 1000, 10000].contains(&orders) {
        orders
    } else {
        10000
    };
    format!("00000000-0000-0000-0000-{n:012}")
}

const TIMEOUT: Duration = Duration::from_secs(30);

/// Measures every transport at every size against running services.
pub fn probe(
    running: &Running,
    sizes: &[u32],
    transports: &[&str],
    round: u32,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<WireRecord> {
    let mut rows = Vec::new();
    let user_addr = running.ports.user_rest_addr();
    for &via in transports {
        for &orders in sizes {
            if stop.load(Ordering::SeqCst) {
                bail!(Interrupted);
            }
            rows.push(
                through_user_service(user_addr, via, orders)
                    .with_context(|| format!("bytes per call over {via} at {orders} orders"))?,
            );
        }
    }
    for &orders in sizes {
        for kind in [Direct::RestJson, Direct::RestProto, Direct::GrpcWeb] {
            if stop.load(Ordering::SeqCst) {
                bail!(Interrupted);
            }
            rows.push(
                direct(running, kind, orders)
                    .with_context(|| format!("{} at {orders} orders", kind.name()))?,
            );
        }
    }
    Ok(WireRecord { round, rows })
}

fn through_user_service(
    addr: std::net::SocketAddr,
    via: &str,
    orders: u32,
) -> anyhow::Result<WireRow> {
    let path = format!(
        "/v1/users/{}/orders?limit={}&via={via}",
        user_for(orders),
        orders.max(1)
    );
    let mut conn = Conn::open(addr, TIMEOUT)?;
    let call = |conn: &mut Conn| -> anyhow::Result<()> {
        let r = conn.request("GET", &path, &[], &[])?;
        if r.status != 200 {
            bail!(
                "user-service answered {}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            );
        }
        Ok(())
    };
    for _ in 0..WARM_CALLS {
        call(&mut conn)?;
    }
    let scrape = |conn: &mut Conn| -> anyhow::Result<prom::Upstream> {
        let r = conn.request("GET", "/metrics", &[], &[])?;
        prom::Upstream::of(&prom::parse(&String::from_utf8_lossy(&r.body))?, via)
    };
    let before = scrape(&mut conn)?;
    for _ in 0..COUNTED_CALLS {
        call(&mut conn)?;
    }
    let d = scrape(&mut conn)?.since(&before);
    if d.calls < 1.0 {
        bail!("user-service counted no call over {via}");
    }
    Ok(WireRow {
        source: Source::UserService,
        transport: via.to_owned(),
        orders,
        calls: d.calls as u32,
        out_per_call: d.bytes_written / d.calls,
        in_per_call: d.bytes_read / d.calls,
    })
}

/// What the lab's client sends straight to order-service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direct {
    RestJson,
    RestProto,
    GrpcWeb,
}

impl Direct {
    fn name(self) -> &'static str {
        match self {
            Direct::RestJson => "rest-json",
            Direct::RestProto => "rest-proto",
            Direct::GrpcWeb => "grpc-web",
        }
    }
}

fn direct(running: &Running, kind: Direct, orders: u32) -> anyhow::Result<WireRow> {
    let user = user_for(orders);
    let limit = orders.max(1);
    let (addr, method, path, headers, body): (_, _, String, Vec<(&str, &str)>, Vec<u8>) = match kind
    {
        Direct::RestJson | Direct::RestProto => (
            running.ports.order_rest_addr(),
            "GET",
            format!("/v2/orders?user_id={user}&limit={limit}"),
            vec![(
                "accept",
                if kind == Direct::RestJson {
                    "application/json"
                } else {
                    "application/x-protobuf"
                },
            )],
            Vec::new(),
        ),
        Direct::GrpcWeb => {
            let msg = proto::order::v2::ListOrdersRequest {
                user_id: user.clone(),
                page_size: limit as i32,
                ..Default::default()
            }
            .encode_to_vec();
            (
                running.ports.order_grpc_addr(),
                "POST",
                "/order.v2.OrderService/ListOrders".to_owned(),
                vec![
                    ("content-type", "application/grpc-web+proto"),
                    ("accept", "application/grpc-web+proto"),
                    ("x-grpc-web", "1"),
                ],
                grpc_frame(0, &msg),
            )
        }
    };
    let mut conn = Conn::open(addr, TIMEOUT)?;
    let (mut out, mut inn) = (0u64, 0u64);
    for i in 0..WARM_CALLS + COUNTED_CALLS {
        let r = conn.request(method, &path, &headers, &body)?;
        if r.status != 200 {
            bail!("order-service answered {}", r.status);
        }
        if kind == Direct::GrpcWeb {
            let got = grpc_web_orders(&r.body)?;
            if got != orders as usize {
                bail!("gRPC-web returned {got} orders, {orders} expected");
            }
        }
        if i >= WARM_CALLS {
            out += r.bytes_written;
            inn += r.bytes_read;
        }
    }
    let n = f64::from(COUNTED_CALLS);
    Ok(WireRow {
        source: Source::LabClient,
        transport: kind.name().to_owned(),
        orders,
        calls: COUNTED_CALLS,
        out_per_call: out as f64 / n,
        in_per_call: inn as f64 / n,
    })
}

/// A gRPC length-prefixed message: flag byte, big-endian length, payload.
pub fn grpc_frame(flag: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(payload.len() + 5);
    v.push(flag);
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// The orders in a gRPC-web `ListOrders` answer body, after checking its
/// trailer frame says `grpc-status: 0`.
pub fn grpc_web_orders(body: &[u8]) -> anyhow::Result<usize> {
    let mut rest = body;
    let mut orders = 0;
    let mut status = None;
    while !rest.is_empty() {
        if rest.len() < 5 {
            bail!("a gRPC-web frame header is cut short");
        }
        let flag = rest[0];
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        let payload = rest
            .get(5..5 + len)
            .context("a gRPC-web frame is cut short")?;
        if flag & 0x80 != 0 {
            let text = String::from_utf8_lossy(payload);
            status = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("grpc-status:"))
                .map(|s| s.trim().to_owned());
        } else {
            orders += proto::order::v2::ListOrdersResponse::decode(payload)
                .context("a gRPC-web data frame is not a ListOrdersResponse")?
                .orders
                .len();
        }
        rest = &rest[5 + len..];
    }
    match status.as_deref() {
        Some("0") => Ok(orders),
        Some(s) => bail!("gRPC-web answered grpc-status {s}"),
        None => bail!("the gRPC-web answer has no trailer frame"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixed_users_spell_their_order_counts() {
        assert_eq!(user_for(100), "00000000-0000-0000-0000-000000000100");
        assert_eq!(user_for(10000), "00000000-0000-0000-0000-000000010000");
        assert_eq!(user_for(50), "00000000-0000-0000-0000-000000010000");
    }

    #[test]
    fn grpc_web_bodies_are_decoded_and_their_status_checked() {
        let msg = proto::order::v2::ListOrdersResponse {
            orders: vec![Default::default(), Default::default()],
            next_page_token: String::new(),
        }
        .encode_to_vec();
        let mut body = grpc_frame(0, &msg);
        body.extend(grpc_frame(0x80, b"grpc-status:0\r\ngrpc-message:\r\n"));
        assert_eq!(grpc_web_orders(&body).expect("valid"), 2);

        let mut bad = grpc_frame(0, &msg);
        bad.extend(grpc_frame(0x80, b"grpc-status: 5\r\n"));
        assert!(grpc_web_orders(&bad).is_err());
        assert!(grpc_web_orders(&grpc_frame(0, &msg)).is_err());
        assert!(grpc_web_orders(&body[..body.len() - 3]).is_err());
    }
}
