//! `pitfall`: k6's own gRPC client calling order-service directly against
//! the same call timed inside user-service (the Spring Boot post's first, wrong
//! "gRPC is 3.3× slower").

use serde::{Deserialize, Serialize};

use crate::experiment::{Context, Experiment, Knobs};
use crate::experiments::tables::{method, scaled};
use crate::measure::cell::{Cell, K6_GRPC_DIRECT};
use crate::measure::figures::Metric;
use crate::measure::load::Generator;
use crate::measure::schedule::Schedule;
use crate::report::format as f;
use crate::report::value::Value;
use crate::report::{Section, Table};

pub struct Pitfall;

/// The same call made by user-service, k6 driving user-service: k6's CPU
/// per call here is what its own gRPC client is set against, whatever the
/// run's load generator.
fn via_user_service(orders: u32) -> Cell {
    Knobs::closed(transports::GRPC, orders).driven_by(Generator::K6)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PitfallPlan {
    /// Orders per call.
    pub sizes: Vec<u32>,
}

impl Experiment for Pitfall {
    type Plan = PitfallPlan;
    const NAME: &'static str = "pitfall";
    const ABOUT: &'static str = "k6's own gRPC client at order-service vs the call timed in user-service (the Spring Boot post)";

    fn target() -> Result<(), &'static str> {
        Err(
            "k6 calls order-service's gRPC port directly and its cells are compared with services it started",
        )
    }

    fn plan(knobs: &Knobs) -> PitfallPlan {
        PitfallPlan {
            sizes: knobs.sizes(&[1, 1000], &[1, 1000]),
        }
    }

    fn schedule(p: &PitfallPlan) -> Schedule {
        Schedule::Grid(
            p.sizes
                .iter()
                .flat_map(|&o| [Knobs::closed(K6_GRPC_DIRECT, o), via_user_service(o)])
                .collect(),
        )
    }

    fn describe(p: &PitfallPlan) -> String {
        format!("sizes {:?}", p.sizes)
    }

    fn section(p: &PitfallPlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

fn section(p: &PitfallPlan, cx: &Context) -> Section {
    let mut s = Section::new(
        "pitfall",
        "Pitfall: k6's own gRPC client vs the call timed inside user-service (the Spring Boot post)",
    );
    s.para(method(
        cx.timing,
        &format!(
            "Closed loop, {} VUs. Row one: `k6/grpc-direct.js`, k6's gRPC client calling \
             order-service's `order.v2.OrderService/ListOrders` directly, one connection per VU; k6 \
             has no generated stubs and converts every message through protobuf reflection into \
             JavaScript objects, on the load generator's CPU. Row two: the same `ListOrders` made by \
             user-service's compiled tonic client (`via=grpc`) and timed there, while k6 drives \
             user-service over HTTP/1.1 — the measurement the Spring Boot post switched to after its first, \
             wrong \"gRPC is 3.3× slower\"",
            Knobs::VUS
        ),
    ));
    s.para(compression(cx));
    for &o in &p.sizes {
        let direct = Knobs::closed(K6_GRPC_DIRECT, o);
        let via = via_user_service(o);
        let rows = vec![
            vec![
                "k6's gRPC client → order-service".into(),
                cx.fig(&direct, Metric::Rate),
                cx.fig(&direct, Metric::E2eP50),
                cx.fig(&direct, Metric::E2eP95),
                cx.fig(&direct, Metric::CpuLoad),
                cx.fig(&direct, Metric::CpuOrder),
            ],
            vec![
                "user-service's tonic client (grpc), timed in user-service".into(),
                cx.fig(&via, Metric::Rate),
                Value::range(scaled(cx.data.spread(&via, Metric::UpP50), 1e-3), "ms"),
                Value::range(scaled(cx.data.spread(&via, Metric::UpP95), 1e-3), "ms"),
                cx.fig(&via, Metric::CpuLoad),
                cx.fig(&via, Metric::CpuOrder),
            ],
        ];
        let lat = cx
            .data
            .ratio_of(&direct, Metric::E2eP50, &via, Metric::UpP50, 1e-3);
        s.table(Table {
            caption: format!("ListOrders of {}", f::orders(o)),
            headers: vec![
                "who calls and times it".into(),
                "calls/s".into(),
                "ListOrders p50 ms".into(),
                "ListOrders p95 ms".into(),
                "k6 CPU µs per call".into(),
                "order-service CPU µs per call".into(),
            ],
            rows,
            reading: {
                let cpu = cx.data.ratio(&direct, &via, Metric::CpuLoad);
                let why = match cpu.map(|c| c.median) {
                    Some(c) if c >= 10.0 => {
                        " With messages this big the direct test measures k6 converting them through reflection, not gRPC."
                    }
                    Some(_) => " k6's CPU alone does not explain this gap.",
                    None => "",
                };
                format!(
                    "At {}, k6's own client times the same ListOrders at {} the latency user-service measures, and k6 spends {} of the CPU per call it spends driving user-service.{why}",
                    f::orders(o),
                    f::ratio(lat),
                    f::ratio(cpu),
                )
            },
        });
    }
    s
}

/// What compression the direct rows negotiated: k6's gRPC client accepts
/// gzip, and order-service sends it only when told to (`ORDER_GRPC_GZIP`).
fn compression(cx: &Context) -> String {
    let direct: Vec<_> = cx
        .results
        .records
        .iter()
        .filter(|r| r.cell.via == K6_GRPC_DIRECT)
        .collect();
    if direct.iter().any(|r| r.load.counting.is_none()) || direct.is_empty() {
        return format!(
            "Compression of the direct rows: not recorded in this run ({}).",
            if direct.is_empty() {
                "no direct round"
            } else {
                "its k6 scripts predate the count"
            }
        );
    }
    let compressed: f64 = direct.iter().map(|r| r.load.compressed).sum();
    let good: f64 = direct.iter().map(|r| r.load.good).sum();
    if compressed == 0.0 {
        format!(
            "Compression: none. k6's gRPC client offers gzip (`grpc-accept-encoding`), and \
             order-service answered all {} good direct calls uncompressed (its gRPC gzip is off \
             unless ORDER_GRPC_GZIP is set); user-service's client offers none. Both rows move \
             the same plain protobuf.",
            f::num(good)
        )
    } else {
        format!(
            "Compression: order-service gzip-compressed {} of the {} good direct calls, which \
             user-service's calls are not: the direct row's cost includes gzip on both ends.",
            f::num(compressed),
            f::num(good)
        )
    }
}
