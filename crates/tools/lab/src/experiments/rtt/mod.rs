//! The `rtt` experiment: the same calls with 0, 1, 5 and 20 ms of round-trip
//! time between user-service and order-service, at a fixed pool.
//!
//! Every post the lab reproduces measured on one host, where a round trip
//! is nearly free, and the Spring Boot post noted that this favours
//! HTTP/1.1. Here user-service and order-service run on either side of a
//! packet-level path ([`netpath`]: two network namespaces, packets held
//! RTT/2 each way, the kernels' own TCP with cubic), or, with `--path
//! proxy`, user-service dials order-service through the lab's in-process
//! [`delay_proxy`], which holds every byte RTT/2 in each direction. On
//! packets a second table runs the same calls through both, and shows what
//! terminating TCP hides. With more callers than connections,
//! HTTP/1.1 has at most `pool` calls in flight, so its rate is capped near
//! `pool / RTT`, while HTTP/2, gRPC and raw TCP multiplex every caller over
//! the same connections. RTT 0 goes through the proxy too (with no delay),
//! so every column pays the proxy's own cost and the ratios compare like
//! with like.
//!
//! [`RttPlan`] says which cells; [`cells`] lists them; `section` writes
//! the report's tables, readings and chart.
//!
//! # Layout
//! - this file: the experiment, its cells, the section, its readings and
//!   the proxy's table.
//! - `plan`: [`RttPlan`], its constants and cells, and the per-RTT figure
//!   the proxy's and the path's tables read.
//! - `packets`: the tables only a packet path has (the path's figures,
//!   what the delay proxy hides, idle then a burst).

mod packets;
mod plan;

use packets::{hidden_table, idle_table, path_table};
use plan::over_grid;
pub use plan::{HIDDEN_RTT_MS, IDLE_MS, IDLE_ORDERS, IDLE_VIAS, IDLE_VUS, RttPlan};

use crate::experiment::{Context, Experiment, Knobs, PathChoice};
use crate::experiments::tables::{method, scaled};
use crate::measure::cell::Cell;
use crate::measure::figures::Metric;
use crate::measure::schedule::Schedule;
use crate::report::format::{self as f};
use crate::report::svg::{self, LineChart, Series};
use crate::report::value::Value;
use crate::report::{Chart, Section, Table};

/// The transport every `×` of the rtt tables is relative to, at the same
/// RTT.
pub const BASELINE: &str = transports::H1_JSON;

pub struct Rtt;

impl Experiment for Rtt {
    type Plan = RttPlan;
    const NAME: &'static str = "rtt";
    const ABOUT: &'static str = "Round-trip time 0, 1, 5, 20 ms between the services, on a packet path (or the delay proxy)";

    /// `--transports` replaces the transports when given (every transport
    /// works through the proxy); `--sizes` the orders per call.
    fn target() -> Result<(), &'static str> {
        Err("it puts a path it makes between user-service and order-service")
    }

    fn plan(knobs: &Knobs) -> RttPlan {
        use transports::{GRPC, GRPC_H3, H1_JSON, H2C_JSON, TCP_PROTO};
        // The taster: its own transports, one round trip beside loopback,
        // 1 order per call whatever --sizes says (the quick pool).
        let defaults: &[&str] = if knobs.taster {
            &Knobs::TASTER_TRANSPORTS
        } else if knobs.quick {
            &[H1_JSON, H2C_JSON, GRPC]
        } else {
            &[H1_JSON, H2C_JSON, GRPC, TCP_PROTO]
        };
        let mut vias: Vec<String> = knobs
            .transports
            .clone()
            .unwrap_or_else(|| defaults.iter().map(|s| (*s).to_owned()).collect());
        // gRPC over HTTP/3 beside gRPC on the packet path (QUIC cannot go
        // through the delay proxy, which carries TCP).
        if !knobs.taster && knobs.transports.is_none() && knobs.path == PathChoice::Packets {
            vias.push(GRPC_H3.to_owned());
        }
        // What the proxy hides (not in the taster): every transport of the
        // grid on warm, pooled connections but QUIC's (the proxy's side of
        // the comparison cannot carry it), and a new connection per call
        // (cold).
        let hidden_vias = if knobs.taster || knobs.path == PathChoice::Proxy {
            Vec::new()
        } else {
            let mut h: Vec<String> = vias
                .iter()
                .filter(|v| !transports::is_quic(v))
                .cloned()
                .collect();
            if !h.iter().any(|v| v == transports::H1_JSON_CLOSE) {
                h.push(transports::H1_JSON_CLOSE.to_owned());
            }
            h
        };
        RttPlan {
            rtts_ms: if knobs.taster {
                vec![0, 20]
            } else {
                vec![0, 1, 5, 20]
            },
            vias,
            pools: if knobs.quick { vec![4] } else { vec![1, 4] },
            vus: 16,
            orders: if knobs.taster {
                vec![1]
            } else {
                knobs.sizes(&[1], &[1])
            },
            path: knobs.path,
            cc: knobs.cc,
            hidden_vias,
            hidden_orders: vec![1, 1000],
            idle_ms: if knobs.taster || knobs.path == PathChoice::Proxy {
                0
            } else {
                IDLE_MS
            },
        }
    }

    fn schedule(p: &RttPlan) -> Schedule {
        Schedule::Grid(cells(p))
    }

    fn describe(p: &RttPlan) -> String {
        format!(
            "RTT {:?} ms on {}, {} at pool {:?}, {} VUs{}",
            p.rtts_ms,
            p.path_words(),
            p.vias.join(", "),
            p.pools,
            p.vus,
            if p.hidden_vias.is_empty() {
                String::new()
            } else {
                format!(
                    "; proxy against packets at {} ms: {}",
                    HIDDEN_RTT_MS,
                    p.hidden_vias.join(", ")
                )
            }
        )
    }

    fn section(p: &RttPlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

/// Every cell of the experiment.
pub fn cells(r: &RttPlan) -> Vec<Cell> {
    let mut v = Vec::new();
    for &pool in &r.pools {
        for &orders in &r.orders {
            for &rtt in &r.rtts_ms {
                for via in &r.vias {
                    v.push(r.cell(via, pool, orders, rtt));
                }
            }
        }
    }
    for path in [PathChoice::Packets, PathChoice::Proxy] {
        for c in r.hidden_cells(path) {
            if !v.contains(&c) {
                v.push(c);
            }
        }
    }
    if r.idle_ms > 0 {
        for via in IDLE_VIAS {
            v.push(r.idle_cell(via, 0));
            v.push(r.idle_cell(via, r.idle_ms));
        }
    }
    v
}

fn base(r: &RttPlan) -> &str {
    if r.vias.iter().any(|v| v == BASELINE) {
        BASELINE
    } else {
        r.vias.first().map_or(BASELINE, String::as_str)
    }
}

/// The rtt section of the report.
fn section(r: &RttPlan, cx: &Context) -> Section {
    let d = cx.data;
    let mut s = Section::new(
        "rtt",
        "Round-trip time: 0 to 20 ms between the services, at a fixed pool",
    );
    let base = base(r);
    let carrier = match r.path {
        PathChoice::Packets => format!(
            "user-service and order-service run in two network namespaces joined by a packet \
             path that holds every packet RTT/2 in each direction, the kernels' own TCP between \
             them with {} congestion control (RTT 0 crosses the path too, so every column \
             pays its cost)",
            r.cc
        ),
        PathChoice::Proxy => "user-service dials order-service through the lab's delay proxy, \
             which holds every byte RTT/2 in each direction (RTT 0 passes through it too, so \
             every column pays the proxy's own cost)"
            .to_owned(),
    };
    s.para(method(
        cx.timing,
        &format!(
            "Closed loop, {} VUs; {carrier}. A pool of {} connection(s) per \
             transport: HTTP/1.1 carries at most that many calls at once and the other callers \
             wait for one (the wait counts as upstream time); HTTP/2, gRPC and raw TCP \
             multiplex all {} callers over the same connections. Baseline: **{base}** at the \
             same RTT",
            r.vus,
            r.pools
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" or "),
            r.vus
        ),
    ));
    let mut series = Vec::new();
    for &pool in &r.pools {
        for &orders in &r.orders {
            let cell = |via: &str, rtt: u32| r.cell(via, pool, orders, rtt);
            let what = format!("pool {pool}, {}", f::orders(orders));
            let mut headers = vec!["transport".to_owned()];
            headers.extend(r.rtts_ms.iter().map(|ms| format!("RTT {ms} ms")));
            // Upstream time in ms: at 20 ms of RTT µs would only add digits.
            for (m, k, caption) in [
                (
                    Metric::Rate,
                    1.0,
                    format!("Throughput against RTT, req/s (higher is better), {what}"),
                ),
                (
                    Metric::UpP50,
                    1e-3,
                    format!("Upstream p50 against RTT, ms: user-service's call, {what}"),
                ),
                (
                    Metric::UpP95,
                    1e-3,
                    format!("Upstream p95 against RTT, ms, {what}"),
                ),
            ] {
                let rows = r
                    .vias
                    .iter()
                    .map(|via| {
                        let mut row = vec![Value::text(via.clone())];
                        for &ms in &r.rtts_ms {
                            let c = cell(via, ms);
                            let unit = if k == 1.0 { m.unit() } else { "ms" };
                            let v = Value::range(scaled(d.spread(&c, m), k), unit);
                            row.push(Value::parts(vec![
                                v,
                                if via == base {
                                    Value::Baseline
                                } else {
                                    Value::ratio(d.ratio(&c, &cell(base, ms), m))
                                },
                            ]));
                        }
                        row
                    })
                    .collect();
                let reading = if m == Metric::Rate {
                    rate_reading(r, cx, pool, orders, base)
                } else {
                    latency_reading(r, cx, pool, orders, m)
                };
                s.table(Table {
                    caption,
                    headers: headers.clone(),
                    rows,
                    reading,
                });
            }
            for via in &r.vias {
                series.push(Series {
                    name: format!("{via} pool {pool}"),
                    points: r
                        .rtts_ms
                        .iter()
                        .filter_map(|&ms| {
                            d.median(&cell(via, ms), Metric::Rate)
                                .map(|v| (f64::from(ms), v))
                        })
                        .collect(),
                });
            }
        }
    }
    match r.path {
        PathChoice::Proxy => s.table(proxy_table(r, cx)),
        PathChoice::Packets => {
            s.para(crate::experiments::tables::path_facts(cx, Rtt::NAME));
            s.table(path_table(r, cx));
        }
    }
    if !r.hidden_vias.is_empty() {
        s.table(hidden_table(r, cx));
    }
    if r.idle_ms > 0 {
        s.table(idle_table(r, cx));
    }
    s.chart(Chart {
        file: "rtt-throughput.svg".into(),
        title: "Throughput against round-trip time".into(),
        svg: svg::line_chart(&LineChart {
            title: "Throughput against round-trip time".into(),
            x_label: "RTT between the services, ms".into(),
            y_label: "req/s (log)".into(),
            x_log: false,
            y_log: true,
            series,
        }),
    });
    s
}

/// How the rates diverge: each transport's ratio to the baseline at the
/// lowest and highest RTT, and HTTP/1.1 against its `pool / RTT` ceiling.
fn rate_reading(r: &RttPlan, cx: &Context, pool: u16, orders: u32, base: &str) -> String {
    let d = cx.data;
    let (Some(&lo), Some(&hi)) = (r.rtts_ms.first(), r.rtts_ms.last()) else {
        return "No RTT was planned.".to_owned();
    };
    let cell = |via: &str, rtt: u32| r.cell(via, pool, orders, rtt);
    let others: Vec<String> = r
        .vias
        .iter()
        .filter(|v| *v != base)
        .map(|v| {
            format!(
                "{v} {} → {}",
                f::ratio(d.ratio(&cell(v, lo), &cell(base, lo), Metric::Rate)),
                f::ratio(d.ratio(&cell(v, hi), &cell(base, hi), Metric::Rate))
            )
        })
        .collect();
    let mut out = format!(
        "Against {base}'s rate, from RTT {lo} ms to {hi} ms: {}",
        if others.is_empty() {
            "no other transport measured".to_owned()
        } else {
            others.join(", ")
        }
    );
    let fall = d.ratio(&cell(base, hi), &cell(base, lo), Metric::Rate);
    out.push_str(&format!(
        ". {base} at {hi} ms kept {} of its rate at {lo} ms",
        f::ratio(fall)
    ));
    if hi > 0 && base.starts_with("h1-") {
        let ceiling = f64::from(pool) * 1000.0 / f64::from(hi);
        out.push_str(&format!(
            "; with {pool} connection(s) and one call per connection, HTTP/1.1 cannot pass {} req/s at {hi} ms, and measured {}",
            f::num(ceiling),
            d.median(&cell(base, hi), Metric::Rate)
                .map_or_else(|| f::MISSING.to_owned(), f::num)
        ));
    }
    out + "."
}

/// Upstream time in round trips at the highest RTT: about 1 when calls are
/// multiplexed, about callers / pool when they queue for a connection.
fn latency_reading(r: &RttPlan, cx: &Context, pool: u16, orders: u32, m: Metric) -> String {
    let d = cx.data;
    let Some(&hi) = r.rtts_ms.iter().filter(|&&ms| ms > 0).max() else {
        return "Only RTT 0 was measured: no round trips to count.".to_owned();
    };
    let in_rtts: Vec<String> = r
        .vias
        .iter()
        .map(|v| {
            let c = r.cell(v, pool, orders, hi);
            let x = d.median(&c, m).map(|us| us / 1000.0 / f64::from(hi));
            format!("{v} {}", x.map_or_else(|| f::MISSING.to_owned(), f::num))
        })
        .collect();
    format!(
        "At {hi} ms, in round trips: {} ({} callers on {pool} connection(s): a call that queues behind others on HTTP/1.1 waits up to {} round trips; multiplexed, about 1).",
        in_rtts.join(", "),
        r.vus,
        f::num(f64::from(r.vus) / f64::from(pool))
    )
}

/// What the proxy did at each RTT: how late it released bytes (the
/// emulation's own error) and the CPU it took.
fn proxy_table(r: &RttPlan, cx: &Context) -> Table {
    let at = |ms: u32, m: Metric| over_grid(r, cx, ms, m);
    let rows: Vec<Vec<Value>> = r
        .rtts_ms
        .iter()
        .map(|&ms| {
            vec![
                format!("RTT {ms} ms").into(),
                Value::single(f64::from(ms) / 2.0, "ms"),
                Value::range(at(ms, Metric::ProxyLate), Metric::ProxyLate.unit()),
                Value::range(at(ms, Metric::ProxyCores), Metric::ProxyCores.unit()),
            ]
        })
        .collect();
    let worst = r
        .rtts_ms
        .iter()
        .filter_map(|&ms| at(ms, Metric::ProxyLate).map(|s| (ms, s.max)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    Table {
        caption: "The delay proxy: how late it released bytes, and its CPU".into(),
        headers: vec![
            "RTT".into(),
            "one-way delay asked, ms".into(),
            "mean lateness per chunk, µs (cells × rounds)".into(),
            "proxy CPU, cores".into(),
        ],
        rows,
        reading: match worst {
            Some((ms, late)) => format!(
                "The emulated round trip is the asked one plus up to twice the lateness: the worst cell's mean was {} µs (at RTT {ms} ms); on a busy 2-core machine the proxy's threads wait for a core like everything else.",
                f::num(late)
            ),
            None => format!("The proxy's lateness was not recorded ({}).", f::MISSING),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_plan_has_every_rtt_for_each_transport() {
        let quick = Knobs {
            quick: true,
            ..Knobs::default()
        };
        let r = Rtt::plan(&quick);
        let c = cells(&r);
        // The grid on packets (its three transports and grpc-h3), then the
        // proxy-against-packets cells (the three and h1-json-close, not
        // QUIC, which the proxy cannot carry; the packet cells of the three
        // at 1 order shared with the grid), then idle-then-burst.
        assert_eq!(c.len(), 4 * 4 + 4 * 2 * 2 - 3 + 2 * 2);
        assert_eq!(r.vias.last().map(String::as_str), Some("grpc-h3"));
        assert!(!r.hidden_vias.iter().any(|v| v == "grpc-h3"));
        assert!(
            c.iter()
                .filter(|c| c.via == "grpc-h3")
                .all(|c| c.env.path.is_some() && c.env.rtt_ms.is_none())
        );
        assert_eq!(c.iter().filter(|c| c.think_ms == IDLE_MS).count(), 2);
        assert!(c.iter().all(|c| c.pool == 4));
        assert!(
            c.iter()
                .any(|c| c.env.path.is_some_and(|p| p.rtt_ms == 20) && c.via == "h2c-json")
        );
        let proxied = c.iter().filter(|c| c.env.rtt_ms.is_some()).count();
        assert_eq!(proxied, 4 * 2);
        assert!(
            c.iter()
                .any(|c| c.env.rtt_ms == Some(20) && c.via == "h1-json-close" && c.orders == 1000)
        );
        let full = Rtt::plan(&Knobs::default());
        // Five transports (grpc-h3 among them) × 4 RTTs × 2 pools; the
        // comparison's five (four and h1-json-close) × 2 sizes × 2 ways,
        // less the four shared; idle.
        assert_eq!(cells(&full).len(), 5 * 4 * 2 + 5 * 2 * 2 - 4 + 2 * 2);
        // On the proxy, no comparison.
        let on_proxy = Rtt::plan(&Knobs {
            quick: true,
            path: PathChoice::Proxy,
            ..Knobs::default()
        });
        assert!(cells(&on_proxy).iter().all(|c| c.env.rtt_ms.is_some()));
        assert_eq!(cells(&on_proxy).len(), 4 * 3);
    }

    #[test]
    fn named_transports_replace_the_defaults() {
        let t = vec!["tcp-proto".to_owned()];
        let r = Rtt::plan(&Knobs {
            quick: true,
            transports: Some(t.clone()),
            sizes: None,
            ..Knobs::default()
        });
        assert_eq!(r.vias, t);
        assert_eq!(base(&r), "tcp-proto");
    }

    #[test]
    fn the_section_has_every_transport_at_every_round_trip_time() {
        use crate::report::Block;
        let (info, results) = crate::synthetic::run(&[Rtt::NAME], true, 2);
        let report = crate::session::build_report(&info, &results);
        let empty = report.empty_cells();
        assert!(empty.is_empty(), "empty cells:\n{}", empty.join("\n"));
        let rtt = report
            .sections
            .iter()
            .find(|s| s.id == "rtt")
            .expect("an rtt section");
        let plan = Rtt::plan(&info.knobs);
        let tables: Vec<&Table> = rtt.tables().collect();
        let rate = tables
            .iter()
            .find(|t| t.caption.starts_with("Throughput against RTT"))
            .expect("a throughput table");
        assert_eq!(rate.headers.len(), 1 + plan.rtts_ms.len());
        assert!(rate.headers.contains(&"RTT 20 ms".to_owned()));
        assert_eq!(rate.rows.len(), plan.vias.len());
        for row in &rate.rows {
            let base = row[0].label() == BASELINE;
            for c in &row[1..] {
                assert!(base || c.ratios().len() == 1, "{row:?}");
            }
        }
        assert!(rate.reading.contains("h2c-json"), "{}", rate.reading);
        // Behind 20 ms, HTTP/1.1 with 4 connections for 16 callers queues:
        // the synthetic h1-json waits 4 round trips, the others 1.
        let up = tables
            .iter()
            .find(|t| t.caption.starts_with("Upstream p50 against RTT"))
            .expect("an upstream table");
        assert!(up.reading.contains("h1-json 4.0"), "{}", up.reading);
        assert!(
            tables
                .iter()
                .any(|t| t.caption.starts_with("The packet path")),
            "no path table"
        );
        let hidden = tables
            .iter()
            .find(|t| t.caption.starts_with("What the delay proxy hides"))
            .expect("a proxy-against-packets table");
        // Every transport of the grid warm but QUIC's, and a new connection
        // per call, at 1 and 1,000 orders.
        assert_eq!(hidden.rows.len(), plan.hidden_vias.len() * 2);
        assert_eq!(
            hidden.rows.len(),
            plan.vias.len() * 2,
            "grpc-h3 out, h1-json-close in"
        );
        for via in plan.hidden_vias.iter().map(String::as_str) {
            assert!(
                hidden
                    .rows
                    .iter()
                    .any(|r| r[0].label().starts_with(&format!("{via} ("))),
                "{via} is not in the proxy-against-packets table"
            );
        }
        let idle = tables
            .iter()
            .find(|t| t.caption.starts_with("Idle, then a burst"))
            .expect("an idle-then-burst table");
        assert_eq!(idle.rows.len(), 2);
        assert!(idle.caption.ends_with("cubic"), "{}", idle.caption);
        assert!(
            hidden.reading.contains("more round trips"),
            "{}",
            hidden.reading
        );
        assert!(
            rtt.blocks
                .iter()
                .any(|b| matches!(b, Block::Chart(c) if c.file == "rtt-throughput.svg"))
        );
        // Every cell has its round trip in its environment: the run needs
        // no certificates, and the launcher gets a delay proxy per cell.
        let schedule = Rtt::schedule(&plan);
        assert!(!schedule.needs().certs);
        assert!(
            schedule
                .cells()
                .iter()
                .all(|c| c.env.rtt_ms.is_some() || c.env.path.is_some())
        );
    }
}
