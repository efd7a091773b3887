//! `streaming`: one front-end request for N users' first orders, which
//! user-service fetches as N unary calls (REST or gRPC), N lookups on its
//! bidi streams, one batch call, or one server stream (the bidi-stream post).

use serde::{Deserialize, Serialize};

use crate::experiment::{Context, Experiment, Knobs};
use crate::experiments::tables::{method, rank_reading};
use crate::measure::cell::Cell;
use crate::measure::figures::Metric;
use crate::measure::schedule::Schedule;
use crate::report::svg::{self, BarChart};
use crate::report::value::Value;
use crate::report::{Chart, Section, Table};

pub struct Streaming;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamingPlan {
    /// Users per request, each asked for its first order.
    pub n: u32,
    pub vus: u32,
    pub pool: u16,
}

/// One way user-service fetches the N orders.
struct Variant {
    /// The table's name for it.
    name: String,
    /// Exactly what user-service does, for the method text.
    does: String,
    cell: Cell,
}

impl StreamingPlan {
    /// The variants, the baseline (N unary gRPC calls) second. Every one
    /// is the same front-end request for the same N first orders; only the
    /// calls behind it differ.
    fn variants(&self) -> Vec<Variant> {
        let (n, pool) = (self.n, self.pool);
        let v = |name: String, does: String, via: &str, batch: bool| Variant {
            name,
            does,
            cell: Cell::closed(via, 1, self.vus, self.pool).many_users(n, batch),
        };
        vec![
            v(
                format!("{n} unary REST calls (h1-json)"),
                format!(
                    "{n} `GET /v2/orders` calls at once over HTTP/1.1 with JSON bodies; at most {pool} \
                     are on the wire at a time (one per pooled connection), the others wait for a \
                     connection"
                ),
                transports::H1_JSON,
                false,
            ),
            v(
                format!("{n} unary gRPC calls (grpc)"),
                format!(
                    "{n} `ListOrders` calls at once, each an HTTP/2 stream multiplexed over its \
                     {pool} channels"
                ),
                transports::GRPC,
                false,
            ),
            v(
                format!("{n} lookups on the bidi streams (grpc-bidi)"),
                format!(
                    "{n} `LookupOrdersRequest` messages at once on its long-lived `LookupOrders` \
                     streams (one per connection, {pool} connections), answers matched by request id"
                ),
                transports::GRPC_BIDI,
                false,
            ),
            v(
                "one batch call (grpc)".to_owned(),
                format!(
                    "one `BatchListOrders` call carrying the {n} queries, answered in one message"
                ),
                transports::GRPC,
                true,
            ),
            v(
                "one server stream (grpc-stream)".to_owned(),
                format!(
                    "one `BatchStreamOrders` call carrying the {n} queries, answered with one message \
                     per user"
                ),
                transports::GRPC_STREAM,
                true,
            ),
        ]
    }
}

impl Experiment for Streaming {
    type Plan = StreamingPlan;
    const NAME: &'static str = "streaming";
    const ABOUT: &'static str = "One request for N users' first orders, fetched as N unary calls, N bidi lookups, one batch call or one server stream (the bidi-stream post)";

    fn target() -> Result<(), &'static str> {
        Ok(())
    }

    fn plan(knobs: &Knobs) -> StreamingPlan {
        StreamingPlan {
            n: if knobs.quick { 20 } else { 100 },
            vus: 4,
            pool: Knobs::POOL,
        }
    }

    fn schedule(p: &StreamingPlan) -> Schedule {
        Schedule::Grid(p.variants().into_iter().map(|v| v.cell).collect())
    }

    fn describe(p: &StreamingPlan) -> String {
        format!("N = {}, {} VUs", p.n, p.vus)
    }

    fn section(p: &StreamingPlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

/// What the method text says the variants do, one sentence each.
fn method_text(p: &StreamingPlan, cx: &Context) -> String {
    let n = p.n;
    let ways: Vec<String> = p
        .variants()
        .iter()
        .map(|v| format!("**{}**: {}", v.name, v.does))
        .collect();
    method(
        cx.timing,
        &format!(
            "Closed loop, {} VUs. Every request is one `GET /v1/orders` asking user-service for \
             the first order of {n} distinct users (the data set's other users 1 to {n}), and a set \
             is that request: its answer is the same bytes in every variant, held by the load \
             generator to one \
             length and by user-service's `x-upstream-calls` header to the calls the variant makes. \
             Only what user-service does behind it differs: {}. order-service's store: {}; it \
             reads a batch's {n} queries from it concurrently, as it does {n} separate calls. The bidi-stream \
             post's service looped over the backend one call at a time; here the {n} calls leave together, \
             as a service fanning out would send them",
            p.vus,
            ways.join("; "),
            cx.store,
        ),
    )
}

fn section(p: &StreamingPlan, cx: &Context) -> Section {
    let n = p.n;
    let mut s = Section::new(
        "streaming",
        "Streaming: N users' orders as N unary calls, N bidi lookups, one batch call or one server stream (the bidi-stream post)",
    );
    s.para(method_text(p, cx));
    let variants = p.variants();
    let base = &variants[1].cell;
    let rows = variants
        .iter()
        .map(|v| {
            let c = &v.cell;
            let vs = |m| {
                if c == base {
                    Value::Baseline
                } else {
                    cx.ratio(c, base, m)
                }
            };
            vec![
                v.name.clone().into(),
                cx.fig(c, Metric::IterationRate),
                cx.fig(c, Metric::IterP50),
                vs(Metric::IterP50),
                cx.fig(c, Metric::IterP95),
                cx.fig(c, Metric::UpstreamCallsPerIteration),
                cx.fig(c, Metric::BytesPerIteration),
                cx.fig(c, Metric::CpuServicesPerIteration),
                vs(Metric::CpuServicesPerIteration),
            ]
        })
        .collect();
    let cells: Vec<(String, Cell)> = variants
        .iter()
        .map(|v| (v.name.clone(), v.cell.clone()))
        .collect();
    s.table(Table {
        caption: format!("The first order of {n} users, one request per set"),
        headers: vec![
            "variant".into(),
            "sets/s".into(),
            "time per set p50 ms".into(),
            format!("× {n} unary gRPC"),
            "time per set p95 ms".into(),
            "upstream calls per set".into(),
            "wire bytes per set".into(),
            "CPU user+order µs/set".into(),
            format!("× {n} unary gRPC"),
        ],
        rows,
        reading: {
            let time = rank_reading(cx, &cells, Metric::IterP50, base);
            let cpu = rank_reading(cx, &cells, Metric::CpuServicesPerIteration, base);
            format!("Time per set: {time}. CPU per set: {cpu}.")
        },
    });
    s.chart(latency_chart_iter(cx, n, &cells));
    s
}

fn latency_chart_iter(cx: &Context, n: u32, v: &[(String, Cell)]) -> Chart {
    let title = format!("Time per set: the first order of {n} users");
    Chart {
        file: "streaming-latency.svg".into(),
        title: title.clone(),
        svg: svg::bar_chart(&BarChart {
            title,
            y_label: "ms".into(),
            y_log: false,
            groups: v
                .iter()
                .map(|(name, _)| name.split(" (").next().unwrap_or(name).to_owned())
                .collect(),
            series: vec!["p50".into(), "p95".into()],
            values: v
                .iter()
                .map(|(_, c)| {
                    vec![
                        cx.data.median(c, Metric::IterP50),
                        cx.data.median(c, Metric::IterP95),
                    ]
                })
                .collect(),
            stacked: false,
        }),
    }
}
