//! `streaming`: N lookups as N unary calls, on the shared bidi stream, or
//! as one server stream (seed 002).

use serde::{Deserialize, Serialize};

use crate::experiment::{Context, Experiment, Knobs};
use crate::experiments::tables::{method, rank_reading};
use crate::measure::cell::{Cell, Metric};
use crate::measure::schedule::Schedule;
use crate::report::svg::{self, BarChart};
use crate::report::value::Value;
use crate::report::{Chart, Section, Table};

pub struct Streaming;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamingPlan {
    /// Lookups per iteration.
    pub n: u32,
    pub vus: u32,
    pub pool: u16,
}

impl StreamingPlan {
    /// The variants: what each is called and its cell.
    fn variants(&self) -> Vec<(String, Cell)> {
        let n = self.n;
        let c = |via: &str, orders: u32, lookups: u32| {
            let mut c = Cell::closed(via, orders, self.vus, self.pool);
            c.lookups = lookups;
            c
        };
        vec![
            (
                format!("{n} unary REST calls (h1-json)"),
                c(transports::H1_JSON, 1, n),
            ),
            (
                format!("{n} unary gRPC calls (grpc)"),
                c(transports::GRPC, 1, n),
            ),
            (
                format!("{n} lookups on the shared bidi stream (grpc-bidi)"),
                c(transports::GRPC_BIDI, 1, n),
            ),
            (
                format!("one server stream of {n} (grpc-stream)"),
                c(transports::GRPC_STREAM, n, 1),
            ),
            (
                format!("one unary call of {n} (grpc)"),
                c(transports::GRPC, n, 1),
            ),
        ]
    }
}

impl Experiment for Streaming {
    type Plan = StreamingPlan;
    const NAME: &'static str = "streaming";
    const ABOUT: &'static str =
        "N lookups as N unary calls vs one server stream vs the bidi stream (seed 002)";

    fn plan(knobs: &Knobs) -> StreamingPlan {
        StreamingPlan {
            n: if knobs.quick { 20 } else { 100 },
            vus: 4,
            pool: Knobs::POOL,
        }
    }

    fn schedule(p: &StreamingPlan) -> Schedule {
        Schedule::Grid(p.variants().into_iter().map(|(_, c)| c).collect())
    }

    fn describe(p: &StreamingPlan) -> String {
        format!("N = {}, {} VUs", p.n, p.vus)
    }

    fn section(p: &StreamingPlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

fn section(p: &StreamingPlan, cx: &Context) -> Section {
    let n = p.n;
    let mut s = Section::new(
        "streaming",
        "Streaming: N lookups as N unary calls, on one bidi stream, or as one server stream (seed 002)",
    );
    s.para(method(
        cx.timing,
        &format!(
            "Closed loop, {} VUs; each k6 iteration needs {n} orders of the same user. \
             \"{n} unary\" and \"bidi\" variants send {n} requests to user-service at once \
             (`http.batch`), each fetching 1 order: user-service then makes {n} unary calls \
             (its pool of {} connections, multiplexed for gRPC) or puts {n} lookups on its \
             long-lived `LookupOrders` bidi streams. \"One server stream\" asks once for {n} \
             orders over `StreamOrders` (one message per order); \"one unary call\" asks once \
             over `ListOrders` (one message). Seed 002's service looped over the backend; here the \
             {n} lookups leave together, which is how a service fanning out would do it. A set is \
             one iteration",
            p.vus, p.pool
        ),
    ));
    let variants = p.variants();
    let base = &variants[1].1;
    let rows = variants
        .iter()
        .map(|(name, c)| {
            let vs = |m| {
                if c == base {
                    Value::Baseline
                } else {
                    cx.ratio(c, base, m)
                }
            };
            vec![
                name.clone().into(),
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
    let cells: Vec<(String, Cell)> = variants.clone();
    s.table(Table {
        caption: format!("{n} orders per set"),
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
            let r = rank_reading(cx, &cells, Metric::IterP50, base);
            format!("Time per set: {r}.")
        },
    });
    s.chart(latency_chart_iter(cx, n, &variants));
    s
}

fn latency_chart_iter(cx: &Context, n: u32, v: &[(String, Cell)]) -> Chart {
    let title = format!("Time per set of {n} lookups");
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
        }),
    }
}

