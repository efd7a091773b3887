//! `schema`: the legacy all-strings `order.v1` against the typed
//! `order.v2`, all 16 fields against a six-field selection (the type-fix post).

use serde::{Deserialize, Serialize};

use crate::experiment::{Context, Experiment, Knobs};
use crate::experiments::tables::method;
use crate::measure::cell::{Cell, SIX_FIELDS};
use crate::measure::figures::Metric;
use crate::measure::schedule::Schedule;
use crate::report::format::{self as f, MISSING};
use crate::report::value::Value;
use crate::report::{Section, Table};

pub struct Schema;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchemaPlan {
    /// Orders per call.
    pub sizes: Vec<u32>,
}

impl Experiment for Schema {
    type Plan = SchemaPlan;
    const NAME: &'static str = "schema";
    const ABOUT: &'static str =
        "Legacy all-strings v1 vs typed v2, all fields vs six (the type-fix post)";

    fn target() -> Result<(), &'static str> {
        Ok(())
    }

    fn plan(knobs: &Knobs) -> SchemaPlan {
        SchemaPlan {
            sizes: knobs.sizes(&[1000], &[10, 1000]),
        }
    }

    fn schedule(p: &SchemaPlan) -> Schedule {
        let mut v = Vec::new();
        for &orders in &p.sizes {
            for via in [transports::GRPC_V1, transports::GRPC] {
                for fields in [None, Some(SIX_FIELDS.to_owned())] {
                    let mut c: Cell = Knobs::closed(via, orders);
                    c.fields = fields;
                    v.push(c);
                }
            }
        }
        Schedule::Grid(v)
    }

    fn describe(p: &SchemaPlan) -> String {
        format!("sizes {:?}", p.sizes)
    }

    fn section(p: &SchemaPlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

fn section(p: &SchemaPlan, cx: &Context) -> Section {
    let mut s = Section::new(
        "schema",
        "Schema: legacy all-strings v1 vs typed v2, all fields vs six (the type-fix post)",
    );
    s.para(method(
        cx.timing,
        &format!(
            "Closed loop, {} VUs, pool {}. `grpc-v1` calls the legacy `order.v1` API (every field a \
             string: prices as \"12.50\", booleans as \"true\"); `grpc` the typed `order.v2`. The \
             six fields are `{SIX_FIELDS}` (of 16). v1 has no field selection: all fields cross \
             the wire and user-service drops the others, which is the point of the comparison",
            Knobs::VUS,
            Knobs::POOL
        ),
    ));
    for &o in &p.sizes {
        let mk = |via: &str, six: bool| {
            let mut c = Knobs::closed(via, o);
            if six {
                c.fields = Some(SIX_FIELDS.to_owned());
            }
            c
        };
        let base = mk("grpc", false);
        let variants = [
            ("v2 typed (grpc), all fields", mk("grpc", false)),
            ("v2 typed (grpc), 6 fields", mk("grpc", true)),
            ("v1 all-strings (grpc-v1), all fields", mk("grpc-v1", false)),
            ("v1 all-strings (grpc-v1), 6 fields", mk("grpc-v1", true)),
        ];
        let rows = variants
            .iter()
            .map(|(n, c)| {
                let vs = |m| {
                    if c == &base {
                        Value::Baseline
                    } else {
                        cx.ratio(c, &base, m)
                    }
                };
                vec![
                    (*n).into(),
                    cx.fig(c, Metric::Rate),
                    cx.fig(c, Metric::UpP50),
                    vs(Metric::UpP50),
                    cx.fig(c, Metric::UpP95),
                    cx.fig(c, Metric::BytesIn),
                    vs(Metric::BytesIn),
                    cx.fig(c, Metric::CpuServices),
                    vs(Metric::CpuServices),
                ]
            })
            .collect();
        let r = |a: &Cell, m| {
            cx.data
                .ratio(a, &base, m)
                .map_or(MISSING.to_owned(), |s| format!("×{:.2}", s.median))
        };
        let change = |m| {
            cx.data
                .ratio(&variants[1].1, &base, m)
                .map_or(MISSING.to_owned(), |s| {
                    format!("{:+.0}%", (s.median - 1.0) * 100.0)
                })
        };
        s.table(Table {
            caption: format!("At {}", f::orders(o)),
            headers: vec![
                "API, selection".into(),
                "req/s".into(),
                "upstream p50 µs".into(),
                "× v2 all".into(),
                "upstream p95 µs".into(),
                "response B/call".into(),
                "× v2 all".into(),
                "CPU user+order µs/req".into(),
                "× v2 all".into(),
            ],
            rows,
            reading: format!(
                "v1 takes {} of v2's upstream p50 and {} of its CPU at {}; selecting six fields changes v2's bytes by {}, its upstream p50 by {} and its CPU by {} (v1's bytes do not change: it has no selection).",
                r(&variants[2].1, Metric::UpP50),
                r(&variants[2].1, Metric::CpuServices),
                f::orders(o),
                change(Metric::BytesIn),
                change(Metric::UpP50),
                change(Metric::CpuServices),
            ),
        });
    }
    s
}
