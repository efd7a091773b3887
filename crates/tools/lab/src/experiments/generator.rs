//! `generator`: what the load generator itself costs, measured like the
//! services. The same cell (user-service's REST at 1 order, a closed loop
//! of 8 keep-alive connections) driven by the lab's engine, by k6 and by
//! wrk (the yardstick: the least a generator can cost, and no answer
//! checks); then a cross-check, the same transports under the engine and
//! under k6 at sizes where k6 stays under half a core, whose ratios to
//! `h1-json` should agree if neither generator is what is measured.

use serde::{Deserialize, Serialize};

use crate::experiment::{Context, Experiment, Knobs};
use crate::experiments::tables::{BASELINE, method};
use crate::measure::cell::Cell;
use crate::measure::figures::Metric;
use crate::measure::judge::LOAD_SATURATED_CORES;
use crate::measure::load::Generator;
use crate::measure::schedule::Schedule;
use crate::report::format as f;
use crate::report::value::Value;
use crate::report::{Section, Table};

pub struct GeneratorExperiment;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GeneratorPlan {
    /// The cost cell: this transport at this size, a closed loop of
    /// `callers` (user-service's pool as large).
    pub via: String,
    pub orders: u32,
    pub callers: u32,
    /// The generators measured on it, the yardstick last.
    pub generators: Vec<Generator>,
    /// The cross-check: these transports (the baseline first) at these
    /// sizes, under the engine and under k6.
    pub cross_vias: Vec<String>,
    pub cross_sizes: Vec<u32>,
}

impl GeneratorPlan {
    /// The cost cell under `g`.
    pub fn cost_cell(&self, g: Generator) -> Cell {
        Cell::closed(&self.via, self.orders, self.callers, self.callers as u16).driven_by(g)
    }

    /// A cross-check cell.
    pub fn cross_cell(&self, via: &str, orders: u32, g: Generator) -> Cell {
        Knobs::closed(via, orders).driven_by(g)
    }

    fn cells(&self) -> Vec<Cell> {
        let mut cells: Vec<Cell> = self.generators.iter().map(|&g| self.cost_cell(g)).collect();
        for &o in &self.cross_sizes {
            for via in &self.cross_vias {
                for g in [Generator::Loadgen, Generator::K6] {
                    cells.push(self.cross_cell(via, o, g));
                }
            }
        }
        cells
    }
}

impl Experiment for GeneratorExperiment {
    type Plan = GeneratorPlan;
    const NAME: &'static str = "generator";
    const ABOUT: &'static str = "What the load generator costs: the lab's engine, k6 and wrk on one cell, and the engine's ratios checked against k6's";

    fn target() -> Result<(), &'static str> {
        Err("it reads the services' CPU per request beside the generator's, from /proc")
    }

    fn plan(knobs: &Knobs) -> GeneratorPlan {
        let transports = knobs.transports();
        let keep: Vec<String> = [
            transports::H1_JSON,
            transports::H1_PROTO,
            transports::H2C_PROTO,
            transports::GRPC,
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .filter(|v| transports.contains(v))
        .collect();
        GeneratorPlan {
            via: keep
                .first()
                .cloned()
                .unwrap_or_else(|| transports::H1_JSON.to_owned()),
            orders: 1,
            callers: Knobs::VUS,
            generators: vec![Generator::Loadgen, Generator::K6, Generator::Wrk],
            cross_vias: keep,
            cross_sizes: knobs.sizes(&[100, 1000], &[100, 1000]),
        }
    }

    fn schedule(p: &GeneratorPlan) -> Schedule {
        Schedule::Grid(p.cells())
    }

    fn describe(p: &GeneratorPlan) -> String {
        format!(
            "{} at {} by {}; cross-check at {:?} orders",
            p.via,
            f::orders(p.orders),
            p.generators
                .iter()
                .map(|g| g.name())
                .collect::<Vec<_>>()
                .join(", "),
            p.cross_sizes
        )
    }

    fn section(p: &GeneratorPlan, cx: &Context) -> Section {
        let mut s = Section::new(
            "generator",
            "Generator: what the load generator costs, and whether it bends the ratios",
        );
        s.para(method(
            cx.timing,
            &format!(
                "One cell, {} at {}, a closed loop of {} keep-alive connections (user-service's \
                 pool {}), driven in turn by {}. Each generator's CPU is its process's (every \
                 thread, to its exit) over the measured window, divided by its good answers; wrk \
                 checks statuses only, the lab's engine and k6 every answer. The rate within half \
                 a core is half a second of CPU a second divided by that cost. Then a \
                 cross-check: {} at {} orders under the lab's engine and under k6, each \
                 transport's rate and end-to-end p50 as ratios to {}'s under the same \
                 generator",
                p.via,
                f::orders(p.orders),
                p.callers,
                p.callers,
                p.generators
                    .iter()
                    .map(|g| g.describe())
                    .collect::<Vec<_>>()
                    .join("; "),
                p.cross_vias.join(", "),
                p.cross_sizes
                    .iter()
                    .map(|o| o.to_string())
                    .collect::<Vec<_>>()
                    .join(" and "),
                BASELINE
            ),
        ));
        s.table(cost_table(p, cx));
        s.table(cross_table(p, cx));
        s
    }
}

/// The cost of each generator on the cost cell.
fn cost_table(p: &GeneratorPlan, cx: &Context) -> Table {
    let yardstick = p.cost_cell(Generator::Wrk);
    let mut rows = Vec::new();
    let mut costs: Vec<(Generator, f64)> = Vec::new();
    for &g in &p.generators {
        let cell = p.cost_cell(g);
        let cost = cx.data.median(&cell, Metric::CpuLoad);
        if let Some(c) = cost {
            costs.push((g, c));
        }
        rows.push(vec![
            Value::text(g.name()),
            cx.fig(&cell, Metric::Rate),
            cx.fig(&cell, Metric::CpuLoad),
            if g == Generator::Wrk {
                Value::text("×1 (the yardstick)")
            } else {
                Value::ratio(cx.data.ratio_of(
                    &cell,
                    Metric::CpuLoad,
                    &yardstick,
                    Metric::CpuLoad,
                    1.0,
                ))
            },
            cx.fig(&cell, Metric::LoadCores),
            match cost {
                Some(c) if c > 0.0 => {
                    Value::single((LOAD_SATURATED_CORES * 1e6 / c).round(), "req/s")
                }
                _ => Value::missing("no CPU per request measured"),
            },
            cx.fig(&cell, Metric::CpuUser),
            cx.fig(&cell, Metric::CpuOrder),
        ]);
    }
    let of = |g: Generator| costs.iter().find(|(x, _)| *x == g).map(|(_, c)| *c);
    let reading = match (of(Generator::Loadgen), of(Generator::Wrk)) {
        (Some(e), Some(w)) if w > 0.0 => {
            let mut r = format!(
                "The lab's engine spent {} µs of CPU per good answer, ×{:.2} of wrk's {} µs",
                f::num(e),
                e / w,
                f::num(w)
            );
            if let Some(k) = of(Generator::K6) {
                r.push_str(&format!(
                    "; k6 spent {} µs, ×{:.1} of the engine's",
                    f::num(k),
                    k / e
                ));
            }
            r.push_str(&format!(
                ". Within half a core the engine sustains about {} req/s{}.",
                f::num((LOAD_SATURATED_CORES * 1e6 / e).round()),
                of(Generator::K6).map_or(String::new(), |k| format!(
                    ", k6 about {}",
                    f::num((LOAD_SATURATED_CORES * 1e6 / k).round())
                ))
            ));
            r
        }
        _ => "The engine's or wrk's cost was not measured: nothing to compare.".to_owned(),
    };
    Table {
        caption: format!(
            "Cost per request of each generator ({} at {}, {} connections)",
            p.via,
            f::orders(p.orders),
            p.callers
        ),
        headers: [
            "generator",
            "good answers/s",
            "generator CPU µs/req",
            "× wrk's CPU/req",
            "generator cores",
            "rate within half a core",
            "user-service CPU µs/req",
            "order-service CPU µs/req",
        ]
        .map(str::to_owned)
        .to_vec(),
        rows,
        reading,
    }
}

/// The figures the cross-check sets side by side: a rate (the headline of
/// the closed-loop tables) and a latency the generator itself times.
const CROSS: [(Metric, &str); 2] = [(Metric::Rate, "rate"), (Metric::E2eP50, "end-to-end p50")];

/// Each transport's rate and end-to-end p50 against the baseline's under
/// both generators, and how far the two generators' ratios are apart.
fn cross_table(p: &GeneratorPlan, cx: &Context) -> Table {
    let mut rows = Vec::new();
    // Per figure: each pair's engine ratio ÷ k6 ratio, where k6 stayed
    // under the line.
    let mut gaps: Vec<Vec<(String, f64)>> = vec![Vec::new(); CROSS.len()];
    let mut over = Vec::new();
    let Some(base) = p.cross_vias.first() else {
        return Table {
            caption: "Cross-check".into(),
            headers: vec!["transport".into()],
            rows,
            reading: "No transport was planned for the cross-check.".into(),
        };
    };
    for &o in &p.cross_sizes {
        let k6_cores = p
            .cross_vias
            .iter()
            .filter_map(|v| {
                cx.data
                    .median(&p.cross_cell(v, o, Generator::K6), Metric::LoadCores)
            })
            .fold(0.0, f64::max);
        let under = k6_cores < LOAD_SATURATED_CORES;
        if !under {
            over.push(format!("{} ({:.2} cores)", f::orders(o), k6_cores));
        }
        for via in p.cross_vias.iter().filter(|v| *v != base) {
            let mut row = vec![Value::text(format!("{via} · {}", f::orders(o)))];
            for (i, (m, _)) in CROSS.iter().enumerate() {
                let ratio = |g: Generator| {
                    cx.data
                        .ratio(&p.cross_cell(via, o, g), &p.cross_cell(base, o, g), *m)
                };
                let (e, k) = (ratio(Generator::Loadgen), ratio(Generator::K6));
                let gap = match (e, k) {
                    (Some(e), Some(k)) if k.median > 0.0 => {
                        let g = e.median / k.median;
                        if under {
                            gaps[i].push((format!("{via} at {}", f::orders(o)), g));
                        }
                        Value::text(format!("×{g:.2}"))
                    }
                    _ => Value::missing("a ratio is missing"),
                };
                row.extend([Value::ratio(e), Value::ratio(k), gap]);
            }
            row.push(Value::single(k6_cores, "cores"));
            rows.push(row);
        }
    }
    let mut said = Vec::new();
    for (i, (_, name)) in CROSS.iter().enumerate() {
        let g = &gaps[i];
        if let Some((what, worst)) = g
            .iter()
            .max_by(|a, b| (a.1.ln().abs()).total_cmp(&b.1.ln().abs()))
        {
            let within = g.iter().map(|(_, x)| (x - 1.0).abs()).fold(0.0, f64::max);
            said.push(format!(
                "their {name} ratios agreed within {:.0}% ({} pairs; the farthest apart {what}, \
                 ×{:.2})",
                100.0 * within,
                g.len(),
                worst
            ));
        }
    }
    let reading = if said.is_empty() {
        format!(
            "No pair of ratios where k6 stayed under {LOAD_SATURATED_CORES} core: nothing to \
             cross-check."
        )
    } else {
        format!(
            "Where k6 stayed under {LOAD_SATURATED_CORES} core, the two generators' ratios to \
             {base}: {}{}.",
            said.join("; "),
            if over.is_empty() {
                String::new()
            } else {
                format!(
                    "; left out, where k6 used half a core or more: {}",
                    over.join(", ")
                )
            }
        )
    };
    let mut headers = vec!["transport · size".to_owned()];
    for (_, name) in CROSS {
        headers.extend([
            format!("{name}: the lab's engine"),
            format!("{name}: k6"),
            format!("{name}: engine ÷ k6"),
        ]);
    }
    headers.push("k6's most cores in the size".to_owned());
    Table {
        caption: format!(
            "Cross-check: rate and end-to-end p50 as ratios to {base}'s, under each generator"
        ),
        headers,
        rows,
        reading,
    }
}
