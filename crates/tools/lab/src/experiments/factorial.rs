//! `factorial`: {HTTP/1.1, HTTP/2} × {JSON, protobuf} at the shared load,
//! split into the main effects of the wire and the encoding and their
//! interaction (the Spring Boot post's open question). Its cells are the payload
//! grid's.

use serde::{Deserialize, Serialize};

use crate::experiment::{Context, Experiment, Knobs};
use crate::experiments::tables::method;
use crate::measure::figures::Metric;
use crate::measure::schedule::Schedule;
use crate::report::format as f;
use crate::report::value::Value;
use crate::report::{Section, Table};

pub struct Factorial;

/// The 2×2: transport, wire, encoding.
const FACTORIAL: [(&str, &str, &str); 4] = [
    (transports::H1_JSON, "HTTP/1.1", "JSON"),
    (transports::H1_PROTO, "HTTP/1.1", "protobuf"),
    (transports::H2C_JSON, "HTTP/2", "JSON"),
    (transports::H2C_PROTO, "HTTP/2", "protobuf"),
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FactorialPlan {
    /// Orders per call.
    pub sizes: Vec<u32>,
}

impl Experiment for Factorial {
    type Plan = FactorialPlan;
    const NAME: &'static str = "factorial";
    const ABOUT: &'static str =
        "{HTTP/1.1, HTTP/2} × {JSON, protobuf}: how much is wire, how much encoding";

    fn target() -> Result<(), &'static str> {
        Ok(())
    }

    fn plan(knobs: &Knobs) -> FactorialPlan {
        FactorialPlan {
            sizes: knobs.sizes(&[1, 1000], &[1, 1000]),
        }
    }

    fn schedule(p: &FactorialPlan) -> Schedule {
        Schedule::Grid(
            p.sizes
                .iter()
                .flat_map(|&o| {
                    FACTORIAL
                        .iter()
                        .map(move |(via, _, _)| Knobs::closed(via, o))
                })
                .collect(),
        )
    }

    fn describe(p: &FactorialPlan) -> String {
        format!("sizes {:?}", p.sizes)
    }

    fn section(p: &FactorialPlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

fn section(p: &FactorialPlan, cx: &Context) -> Section {
    let mut s = Section::new(
        "factorial",
        "Factorial: {HTTP/1.1, HTTP/2} × {JSON, protobuf} — wire or encoding? (the Spring Boot post's open question)",
    );
    s.para(method(
        cx.timing,
        &format!(
            "Closed loop, {} VUs, pool {}; the four REST transports differ only in the wire \
             (h1 / h2c) and the body (JSON / protobuf) of the same `GET /v2/orders`",
            Knobs::VUS,
            Knobs::POOL
        ),
    ));
    s.para(
        "Effects in the usual 2×2 sense: **wire** = mean of the HTTP/2 cells − mean of the \
         HTTP/1.1 cells; **encoding** = mean of protobuf − mean of JSON; **interaction** = half \
         of (protobuf's effect on HTTP/2 − its effect on HTTP/1.1). The change from h1-json to \
         h2c-proto is exactly wire + encoding; the shares compare the two effects' sizes \
         (|wire| / (|wire| + |encoding|)), so they stay meaningful when the two pull opposite \
         ways, which the signs show. Computed round by round.",
    );
    let cell = Knobs::closed;
    for &o in &p.sizes {
        let [h1j, h1p, h2j, h2p] = FACTORIAL.map(|(v, _, _)| cell(v, o));
        s.table(Table {
            caption: format!("Upstream p50, µs, at {}", f::orders(o)),
            headers: vec!["wire \\ body".into(), "JSON".into(), "protobuf".into()],
            rows: vec![
                vec![
                    "HTTP/1.1".into(),
                    cx.fig(&h1j, Metric::UpP50),
                    cx.fig(&h1p, Metric::UpP50),
                ],
                vec![
                    "HTTP/2 (h2c)".into(),
                    cx.fig(&h2j, Metric::UpP50),
                    cx.fig(&h2p, Metric::UpP50),
                ],
            ],
            reading: format!(
                "h2c-proto takes {} of h1-json's upstream p50; h1-proto {}, h2c-json {}.",
                f::ratio(cx.data.ratio(&h2p, &h1j, Metric::UpP50)),
                f::ratio(cx.data.ratio(&h1p, &h1j, Metric::UpP50)),
                f::ratio(cx.data.ratio(&h2j, &h1j, Metric::UpP50)),
            ),
        });
        let cells = [&h1j, &h1p, &h2j, &h2p];
        let wire = |v: &[f64]| Some(((v[2] + v[3]) - (v[0] + v[1])) / 2.0);
        let enc = |v: &[f64]| Some(((v[1] + v[3]) - (v[0] + v[2])) / 2.0);
        let inter = |v: &[f64]| Some(((v[3] - v[2]) - (v[1] - v[0])) / 2.0);
        // Each main effect's part of the two effects' combined size: always
        // 0–100%, also when the wire and the encoding pull opposite ways.
        let share = |wire_side: bool| {
            move |v: &[f64]| {
                let a = (((v[2] + v[3]) - (v[0] + v[1])) / 2.0).abs();
                let b = (((v[1] + v[3]) - (v[0] + v[2])) / 2.0).abs();
                let total = a + b;
                // Effects too small to split are given no share.
                (total > 1e-9 * v[0].abs().max(1.0))
                    .then(|| if wire_side { a / total } else { b / total })
            }
        };
        let mut rows = Vec::new();
        let mut reading = String::new();
        for (m, name) in [
            (Metric::UpP50, "upstream p50, µs"),
            (Metric::UpP95, "upstream p95, µs"),
            (Metric::CpuServices, "CPU user+order, µs/req"),
            (Metric::Rate, "throughput, req/s"),
            (Metric::BytesIn, "response bytes/call"),
        ] {
            let sw = cx.data.combine(&cells, m, share(true));
            let se = cx.data.combine(&cells, m, share(false));
            if m == Metric::UpP50 {
                reading = format!(
                    "At {}, h1-json → h2c-proto changed the upstream p50 by {} µs: the wire (HTTP/2 instead of HTTP/1.1) {} µs, the encoding (protobuf instead of JSON) {} µs, interaction {} µs; the encoding is {} of the two effects' combined size.",
                    f::orders(o),
                    f::signed(cx.data.combine(&cells, m, |v| Some(v[3] - v[0]))),
                    f::signed(cx.data.combine(&cells, m, wire)),
                    f::signed(cx.data.combine(&cells, m, enc)),
                    f::signed(cx.data.combine(&cells, m, inter)),
                    f::percent(se),
                );
            }
            rows.push(vec![
                name.into(),
                cx.fig(&h1j, m),
                Value::signed(cx.data.combine(&cells, m, wire), m.unit()),
                Value::signed(cx.data.combine(&cells, m, enc), m.unit()),
                Value::signed(cx.data.combine(&cells, m, inter), m.unit()),
                Value::share(sw),
                Value::share(se),
            ]);
        }
        s.table(Table {
            caption: format!("Effects at {}", f::orders(o)),
            headers: vec![
                "figure".into(),
                "h1-json".into(),
                "wire: HTTP/2 − HTTP/1.1".into(),
                "encoding: protobuf − JSON".into(),
                "interaction".into(),
                "wire's share of |wire|+|encoding|".into(),
                "encoding's share".into(),
            ],
            rows,
            reading,
        });
    }
    s
}
