//! `wire-size`: bytes per call on the wire, each way (the Spring Boot
//! post's wire-size table).
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

use crate::experiment::{Context, Experiment, Knobs};
use crate::experiments::tables::BASELINE;
use crate::measure::Interrupted;
use crate::measure::cell::{Env, fixed_user as user_for};
use crate::measure::http::Conn;
use crate::measure::prom;
use crate::measure::schedule::{Probe, Schedule};
use crate::measure::services::Running;
use crate::report::format::{self as f, MISSING};
use crate::report::value::Value;
use crate::report::{Section, Table};
use crate::stats::{Spread, paired_ratios, rerun_interval};

pub struct WireSize;

/// Which transports at which sizes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WirePlan {
    pub transports: Vec<String>,
    pub sizes: Vec<u32>,
}

impl Experiment for WireSize {
    type Plan = WirePlan;
    const NAME: &'static str = "wire-size";
    const ABOUT: &'static str =
        "Bytes per call: REST JSON, REST protobuf, gRPC, gRPC-web (the Spring Boot post)";

    fn target() -> Result<(), &'static str> {
        Ok(())
    }

    fn calls_order_service() -> bool {
        true
    }

    fn plan(knobs: &Knobs) -> WirePlan {
        WirePlan {
            transports: knobs.transports(),
            sizes: knobs.sizes(&[1, 100, 1000], &[1, 100, 1000]),
        }
    }

    fn schedule(p: &WirePlan) -> Schedule {
        let p = p.clone();
        Schedule::Probe(Probe {
            // One call at a time: one connection is enough.
            pool: 1,
            env: Env::default(),
            run: Box::new(move |running, round, stop| {
                let transports: Vec<&str> = p.transports.iter().map(String::as_str).collect();
                Ok(serde_json::to_value(probe(
                    running,
                    &p.sizes,
                    &transports,
                    round,
                    stop,
                )?)?)
            }),
        })
    }

    fn describe(p: &WirePlan) -> String {
        format!(
            "sizes {:?}, {COUNTED_CALLS} calls one at a time per transport",
            p.sizes
        )
    }

    fn section(p: &WirePlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

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
    let user_addr = running.user_rest_addr()?;
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
            running.order_addrs()?.0,
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
                running.order_addrs()?.1,
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

fn section(p: &WirePlan, cx: &Context) -> Section {
    let mut s = Section::new(
        "wire-size",
        "Wire size: bytes per call, each way (the Spring Boot post's wire-size table)",
    );
    s.para(format!(
        "Not a load test: after {} uncounted calls, {} calls one at a time per transport and size, \
         {} rounds. user-service rows are its own socket counters on the call to order-service \
         (headers and framing included, steady state of a reused connection). user-service has no \
         gRPC-web adapter, so the **grpc-web** row is the lab's own HTTP/1.1 client calling \
         order-service's `ListOrders` with `application/grpc-web+proto`, counted on its socket the \
         same way; the lab client's REST JSON and REST protobuf rows are the cross-check that the \
         two ways of counting agree. `×` is relative to h1-json's total (request + response).",
        WARM_CALLS, COUNTED_CALLS, cx.timing.rounds
    ));
    if let Some(note) = super::tables::quic_note(&p.transports) {
        s.para(note);
    }
    let records: Vec<WireRecord> = match cx.probes::<WireRecord>(WireSize::NAME) {
        Ok(r) => r.into_iter().map(|(_, r)| r).collect(),
        Err(e) => {
            s.para(format!(
                "The probe's records could not be read ({e:#}): {MISSING}."
            ));
            Vec::new()
        }
    };
    let rounds = cx.results.rounds();
    let mut rows_spec: Vec<(String, Source, String)> = p
        .transports
        .iter()
        .map(|t| (t.clone(), Source::UserService, t.clone()))
        .collect();
    for (t, label) in [
        ("grpc-web", "grpc-web (lab client → order-service)"),
        ("rest-json", "REST JSON (lab client → order-service)"),
        ("rest-proto", "REST protobuf (lab client → order-service)"),
    ] {
        rows_spec.push((label.to_owned(), Source::LabClient, t.to_owned()));
    }
    let values = |src: Source, t: &str, o: u32, out: bool| -> Vec<Option<f64>> {
        (1..=rounds)
            .map(|r| {
                records
                    .iter()
                    .filter(|w| w.round == r)
                    .flat_map(|w| w.rows.iter())
                    .find(|row| row.source == src && row.transport == t && row.orders == o)
                    .map(|row| {
                        if out {
                            row.out_per_call
                        } else {
                            row.in_per_call
                        }
                    })
            })
            .collect()
    };
    let total = |src: Source, t: &str, o: u32| -> Vec<Option<f64>> {
        values(src, t, o, true)
            .into_iter()
            .zip(values(src, t, o, false))
            .map(|(a, b)| Some(a? + b?))
            .collect()
    };
    let spread = |v: Vec<Option<f64>>| Spread::of_rounds(&v);
    let mut headers = vec!["transport".to_owned()];
    for &o in &p.sizes {
        headers.push(format!("{}: request B", f::orders(o)));
        headers.push(format!("{}: response B", f::orders(o)));
        headers.push(format!("{}: × h1-json", f::orders(o)));
    }
    let rows = rows_spec
        .iter()
        .map(|(label, src, t)| {
            let mut r = vec![Value::text(label.clone())];
            for &o in &p.sizes {
                r.push(Value::range(spread(values(*src, t, o, true)), "B"));
                r.push(Value::range(spread(values(*src, t, o, false)), "B"));
                r.push(Value::ratio(rerun_interval(
                    &paired_ratios(&total(*src, t, o), &total(Source::UserService, BASELINE, o)),
                    None,
                )));
            }
            r
        })
        .collect();
    let mid = p
        .sizes
        .iter()
        .copied()
        .find(|&o| o == 100)
        .or_else(|| p.sizes.last().copied())
        .unwrap_or(100);
    let med = |src: Source, t: &str| spread(total(src, t, mid)).map(|s| s.median);
    let base_total = med(Source::UserService, BASELINE);
    let ratio = |src: Source, t: &str| match (med(src, t), base_total) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let mut parts = Vec::new();
    for (src, t, name) in [
        (
            Source::UserService,
            "h2c-json",
            "REST JSON on HTTP/2 (h2c-json)",
        ),
        (Source::UserService, "h1-proto", "REST protobuf (h1-proto)"),
        (Source::UserService, "grpc", "gRPC"),
        (Source::LabClient, "grpc-web", "gRPC-web"),
    ] {
        if let Some(r) = ratio(src, t) {
            parts.push(format!("{name} ×{r:.2}"));
        }
    }
    let verdict = match (
        ratio(Source::UserService, "h2c-json"),
        ratio(Source::UserService, "h1-proto"),
    ) {
        (Some(h2), Some(pb)) if pb < h2 => {
            " The saving follows the encoding (protobuf), not HTTP/2.".to_owned()
        }
        (Some(_), Some(_)) => " HTTP/2 saves more than protobuf here.".to_owned(),
        _ => String::new(),
    };
    let reading = match base_total {
        Some(b) => format!(
            "At {}, per call: REST JSON (h1-json) {} B; {}.{verdict}",
            f::orders(mid),
            f::num(b),
            parts.join("; ")
        ),
        None => format!(
            "h1-json was not measured: no baseline at {}.",
            f::orders(mid)
        ),
    };
    s.table(Table {
        caption: "Bytes per call on the wire".into(),
        headers,
        rows,
        reading,
    });
    s
}

#[cfg(test)]
mod tests {
    use super::*;

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
