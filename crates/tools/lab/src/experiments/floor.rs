//! `floor`: every transport's upstream cost as a ratio to raw TCP
//! (`tcp-proto`), the least this hop can cost for the same bytes. Its cells
//! are the payload grid's.

use crate::experiment::{Context, Experiment, Knobs};
use crate::experiments::payload::{self, PayloadPlan};
use crate::experiments::tables::{capitalise, method};
use crate::measure::figures::Metric;
use crate::measure::schedule::Schedule;
use crate::report::format as f;
use crate::report::value::Value;
use crate::report::{Section, Table};

/// The floor of the hop.
pub const FLOOR: &str = transports::TCP_PROTO;

pub struct Floor;

impl Experiment for Floor {
    /// The payload experiment's transports and sizes: the same cells.
    type Plan = PayloadPlan;
    const NAME: &'static str = "floor";
    const ABOUT: &'static str = "Every transport's upstream cost as a ratio to raw TCP";

    fn target() -> Result<(), &'static str> {
        Ok(())
    }

    fn plan(knobs: &Knobs) -> PayloadPlan {
        payload::plan(knobs)
    }

    fn schedule(p: &PayloadPlan) -> Schedule {
        Schedule::Grid(p.cells())
    }

    fn describe(p: &PayloadPlan) -> String {
        format!("sizes {:?}, the payload grid", p.sizes)
    }

    fn section(p: &PayloadPlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

fn section(p: &PayloadPlan, cx: &Context) -> Section {
    let mut s = Section::new(
        "floor",
        "Floor: every transport's upstream cost as a ratio to raw TCP (tcp-proto)",
    );
    s.para(method(
        cx.timing,
        &format!(
            "The payload experiment's cells (closed loop, {} VUs, pool {}); `tcp-proto` is \
             length-prefixed protobuf on a persistent TCP connection, no HTTP: the least this hop \
             can cost for the same bytes on this machine",
            Knobs::VUS,
            Knobs::POOL
        ),
    ));
    let cell = Knobs::closed;
    if !p.transports.iter().any(|t| t == FLOOR) {
        s.para("tcp-proto was not among the transports measured: no floor to compare with.");
        return s;
    }
    for (m, caption) in [
        (Metric::UpP50, "Upstream p50 as a multiple of tcp-proto's"),
        (Metric::UpP95, "Upstream p95 as a multiple of tcp-proto's"),
        (
            Metric::CpuServices,
            "CPU per request (user + order) as a multiple of tcp-proto's",
        ),
    ] {
        let mut headers = vec!["transport".to_owned()];
        headers.extend(p.sizes.iter().map(|&o| f::orders(o)));
        let rows = p
            .transports
            .iter()
            .map(|via| {
                let label = if via == FLOOR {
                    format!("{via} ({})", m.unit())
                } else {
                    via.clone()
                };
                let mut r = vec![Value::text(label)];
                for &o in &p.sizes {
                    if via == FLOOR {
                        r.push(cx.fig(&cell(via, o), m));
                    } else {
                        r.push(cx.ratio(&cell(via, o), &cell(FLOOR, o), m));
                    }
                }
                r
            })
            .collect();
        let mut reading = Vec::new();
        for &o in [p.sizes.first(), p.sizes.last()].into_iter().flatten() {
            let mut ratios: Vec<(&str, f64)> = p
                .transports
                .iter()
                .filter(|v| *v != FLOOR)
                .filter_map(|v| {
                    cx.data
                        .ratio(&cell(v, o), &cell(FLOOR, o), m)
                        .map(|r| (v.as_str(), r.median))
                })
                .collect();
            ratios.sort_by(|a, b| a.1.total_cmp(&b.1));
            if let (Some(lo), Some(hi)) = (ratios.first(), ratios.last()) {
                reading.push(format!(
                    "at {} the closest to the floor is **{}** (×{:.2}), the farthest **{}** (×{:.2})",
                    f::orders(o),
                    lo.0,
                    lo.1,
                    hi.0,
                    hi.1
                ));
            }
            if p.sizes.len() == 1 {
                break;
            }
        }
        s.table(Table {
            caption: caption.to_owned(),
            headers,
            rows,
            reading: if reading.is_empty() {
                "too few cells measured to compare".to_owned()
            } else {
                capitalise(&reading.join("; ")) + "."
            },
        });
    }
    s
}
