//! `open-loop`: latency at fixed arrival rates, as latency engineers
//! measure it. Every other latency table is a closed loop: each caller
//! waits for its answer before sending the next request, so a stall is
//! recorded once per caller instead of once per request that would have
//! arrived during it (coordinated omission). Here each transport's capacity
//! on this machine is found first (a closed loop of many callers: the rate
//! it keeps up), then the load generator starts requests at 25, 50, 75 and
//! 90% of that rate whatever the answers do, each timed from its scheduled
//! send (the lab's engine; k6 with `--load k6`). A stalled pair shows the
//! difference: order-service stopped for 200 ms mid-run, under a closed
//! loop and under an open one.

use serde::{Deserialize, Serialize};

use crate::experiment::{Context, Experiment, Knobs};
use crate::experiments::spectrum::{self, Latency};
use crate::experiments::tables::method;
use crate::measure::cell::{Cell, Env, Load};
use crate::measure::figures::{Measures, Metric};
use crate::measure::load::Generator;
use crate::measure::results::Results;
use crate::measure::schedule::{Schedule, Staged};
use crate::report::format as f;
use crate::report::value::Value;
use crate::report::{Section, Table};

pub struct OpenLoop;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenLoopPlan {
    pub vias: Vec<String>,
    pub sizes: Vec<u32>,
    /// Closed-loop callers of the capacity cells; also user-service's pool.
    pub capacity_vus: u32,
    /// The open loop's rates, in percent of each capacity.
    pub fractions_pct: Vec<u32>,
    /// The most connections of the open loop (k6: VUs, all made before
    /// the load).
    pub max_vus: u32,
    /// The stalled pair: order-service stopped this long mid-run.
    pub stall_ms: u32,
    pub stall_vias: Vec<String>,
    pub stall_orders: u32,
    /// The stalled open loop's arrival rate, in percent of the capacity;
    /// lowered to what half of `max_vus` can hold through the stall.
    pub stall_pct: u32,
}

impl OpenLoopPlan {
    /// The closed loop that finds a transport's capacity.
    pub fn capacity_cell(&self, via: &str, orders: u32) -> Cell {
        Cell::closed(via, orders, self.capacity_vus, self.capacity_vus as u16)
    }

    /// The open loop at `rate` requests/s.
    pub fn open_cell(&self, via: &str, orders: u32, rate: u32, env: Env) -> Cell {
        Cell {
            load: Load::Open {
                rate,
                max_vus: self.max_vus,
            },
            env,
            ..self.capacity_cell(via, orders)
        }
    }

    fn stalled(&self) -> Env {
        Env {
            stall_ms: Some(self.stall_ms),
            ..Env::default()
        }
    }

    /// The stalled closed loop of `via`.
    pub fn stall_closed(&self, via: &str) -> Cell {
        Cell {
            env: self.stalled(),
            ..self.capacity_cell(via, self.stall_orders)
        }
    }

    /// The stalled open loop of `via`, whose capacity is `capacity`: at
    /// [`OpenLoopPlan::stall_pct`] of it, or the rate whose requests due
    /// during the stall half the VUs can hold, whichever is lower (so that
    /// no VU is short while the stall lasts).
    pub fn stall_open(&self, via: &str, capacity: f64) -> Cell {
        let held = f64::from(self.max_vus) / 2.0 / (f64::from(self.stall_ms) / 1e3);
        let rate = (capacity * f64::from(self.stall_pct) / 100.0)
            .min(held)
            .round()
            .max(1.0) as u32;
        self.open_cell(via, self.stall_orders, rate, self.stalled())
    }

    /// The sizes whose capacity is found: the plan's, and the stall's.
    fn capacity_sizes(&self, via: &str) -> Vec<u32> {
        let mut sizes = if self.vias.iter().any(|v| v == via) {
            self.sizes.clone()
        } else {
            Vec::new()
        };
        if self.stall_vias.iter().any(|v| v == via) && !sizes.contains(&self.stall_orders) {
            sizes.push(self.stall_orders);
        }
        sizes
    }

    /// A transport's capacity: the median good-answer rate of its closed
    /// loop over the good rounds.
    pub fn capacity(&self, results: &Results, via: &str, orders: u32) -> Option<f64> {
        let cell = self.capacity_cell(via, orders);
        let mut rates: Vec<f64> = results
            .records
            .iter()
            .filter(|r| r.cell == cell)
            .map(Measures::of)
            .filter(|m| m.failed().is_none())
            .map(|m| m.rate)
            .collect();
        median(&mut rates)
    }

    /// The open-loop cell at `pct` of a capacity.
    pub fn at(&self, via: &str, orders: u32, capacity: f64, pct: u32) -> Cell {
        let rate = (capacity * f64::from(pct) / 100.0).round().max(1.0) as u32;
        self.open_cell(via, orders, rate, Env::default())
    }

    /// Every transport either part measures, in order.
    fn all_vias(&self) -> Vec<String> {
        let mut all = self.vias.clone();
        all.extend(
            self.stall_vias
                .iter()
                .filter(|v| !self.vias.contains(v))
                .cloned(),
        );
        all
    }

    /// Every open-loop cell the first stage's results make: the fractions,
    /// and the stalled open loops.
    pub fn open_cells(&self, results: &Results) -> Vec<Cell> {
        let mut cells = Vec::new();
        for via in &self.vias {
            for &o in &self.sizes {
                if let Some(cap) = self.capacity(results, via, o) {
                    cells.extend(self.fractions_pct.iter().map(|&p| self.at(via, o, cap, p)));
                }
            }
        }
        for via in &self.stall_vias {
            if let Some(cap) = self.capacity(results, via, self.stall_orders) {
                cells.push(self.stall_open(via, cap));
            }
        }
        cells
    }
}

impl Experiment for OpenLoop {
    type Plan = OpenLoopPlan;
    const NAME: &'static str = "open-loop";
    const ABOUT: &'static str =
        "Latency at 25-90% of each transport's capacity, open loop (no coordinated omission)";

    fn target() -> Result<(), &'static str> {
        Err(
            "its stalled cells stop order-service's process (SIGSTOP), which the lab must have started",
        )
    }

    fn plan(knobs: &Knobs) -> OpenLoopPlan {
        let transports = knobs.transports();
        let keep = |list: &[&str]| -> Vec<String> {
            list.iter()
                .map(|s| (*s).to_owned())
                .filter(|v| transports.contains(v))
                .collect()
        };
        OpenLoopPlan {
            vias: keep(&[
                transports::H1_JSON,
                transports::H1_PROTO,
                transports::H2C_PROTO,
                transports::GRPC,
                transports::GRPC_BIDI,
                transports::CONNECT_H1_PROTO,
            ]),
            sizes: knobs.sizes(&[1, 100], &[1, 100]),
            capacity_vus: 16,
            fractions_pct: vec![25, 50, 75, 90],
            max_vus: if knobs.quick { 200 } else { 400 },
            stall_ms: 200,
            stall_vias: keep(&[transports::H1_JSON, transports::GRPC]),
            stall_orders: 100,
            stall_pct: 50,
        }
    }

    fn schedule(p: &OpenLoopPlan) -> Schedule {
        let mut first = Vec::new();
        for via in p.all_vias() {
            for o in p.capacity_sizes(&via) {
                first.push(p.capacity_cell(&via, o));
            }
        }
        for via in &p.stall_vias {
            first.push(p.stall_closed(via));
        }
        let plan = p.clone();
        Schedule::Staged(Staged {
            first,
            then_count: p.vias.len() * p.sizes.len() * p.fractions_pct.len() + p.stall_vias.len(),
            then: Box::new(move |results| plan.open_cells(results)),
        })
    }

    fn describe(p: &OpenLoopPlan) -> String {
        format!(
            "capacity at {} VUs, then {:?}% of it; a {} ms stall",
            p.capacity_vus, p.fractions_pct, p.stall_ms
        )
    }

    fn section(p: &OpenLoopPlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

/// The median of `v` (the mean of the middle two when even), if any.
fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// A cell's median, or why there is none: no good round, or requests
/// never sent (k6 drops an iteration when no VU is free; the lab's engine
/// only what still waits for a connection when its grace period ends), so
/// that their waits would be missing from the figures.
fn figure(cx: &Context, cell: &Cell, m: Metric) -> Result<f64, String> {
    if let Some(d) = cx
        .data
        .median(cell, Metric::DroppedShare)
        .filter(|d| *d > 0.0)
    {
        let who = cx
            .generator(cell)
            .map_or("the load generator", |g| g.name());
        return Err(format!(
            "{who} dropped {d:.1}% of the requests (no VU free): the requests not sent are not in \
             the figures"
        ));
    }
    cx.data
        .median(cell, m)
        .ok_or_else(|| "no good round".to_owned())
}

/// How the open loop's requests were sent, in the words of the generator
/// that sent them.
fn how_sent(p: &OpenLoopPlan, generator: Generator) -> String {
    match generator {
        Generator::K6 => format!(
            "k6's `constant-arrival-rate`, all {} VUs made before the load, so that each request \
             is sent at its scheduled time and its latency counts from then; a cell in which k6 \
             dropped iterations (no VU free) shows no figures, with the reason: the requests it \
             did not send would be missing from them",
            p.max_vus
        ),
        _ => format!(
            "the lab's engine on a fixed schedule (request i due at i/rate), on at most {} \
             connections, each request timed from its due time (wrk2's method): one that finds \
             every connection busy waits for the next to free and is timed from its due time \
             too, so nothing is left out; how late the engine wrote its requests is stated under \
             each table",
            p.max_vus
        ),
    }
}

/// How late the engine wrote the requests of `cells` (the worst median
/// p50 and p99 over them), and the share that waited for a connection;
/// `None` for rounds of a generator that does not say.
fn lag_reading(cx: &Context, cells: &[Cell]) -> Option<String> {
    let worst = |m: Metric| {
        cells
            .iter()
            .filter_map(|c| cx.data.median(c, m))
            .reduce(f64::max)
    };
    let (p50, p99) = (worst(Metric::LagP50)?, worst(Metric::LagP99)?);
    let behind = worst(Metric::BehindShare).unwrap_or(0.0);
    Some(format!(
        " The engine wrote each request at most {} µs (p50) and {} µs (p99) after its due time \
         in the median round of any cell, and every latency above includes that; {}.",
        f::num(p50),
        f::num(p99),
        if behind > 0.0 {
            format!(
                "in the worst cell {}% of the requests waited for a free connection (timed from \
                 their due time)",
                f::num(behind)
            )
        } else {
            "no request waited for a connection".to_owned()
        }
    ))
}

fn section(p: &OpenLoopPlan, cx: &Context) -> Section {
    let generator = cx
        .results
        .records
        .iter()
        .find(|r| r.experiment == OpenLoop::NAME && matches!(r.cell.load, Load::Open { .. }))
        .map_or(Generator::Loadgen, |r| r.generator);
    let mut s = Section::new(
        "open-loop",
        "Open loop: latency at fixed fractions of each transport's capacity (no coordinated omission)",
    );
    s.para(method(
        cx.timing,
        &format!(
            "First each transport's capacity on this machine: a closed loop of {vus} callers \
             (each sends its next request when answered; user-service's pool {vus}), whose \
             good-answer rate is the capacity, the load generator included (it shares the \
             machine). Then an open loop at {pcts} of that rate: {sent}. Store: {store}",
            vus = p.capacity_vus,
            pcts = p
                .fractions_pct
                .iter()
                .map(|p| format!("{p}%"))
                .collect::<Vec<_>>()
                .join(", "),
            sent = how_sent(p, generator),
            store = cx.store,
        ),
    ));
    for &o in &p.sizes {
        fractions_table(&mut s, p, cx, o);
        if let Some(&top) = p.fractions_pct.last() {
            let cells: Vec<(String, Cell)> = p
                .vias
                .iter()
                .filter_map(|v| {
                    p.capacity(cx.results, v, o)
                        .map(|cap| (v.clone(), p.at(v, o, cap, top)))
                })
                .collect();
            spectrum::add(
                &mut s,
                cx,
                Latency::EndToEnd,
                (
                    &format!("open-loop-spectrum-{o}.svg"),
                    &format!(
                        "End-to-end percentile spectrum at {top}% of capacity, {}",
                        f::orders(o)
                    ),
                ),
                &cells,
            );
        }
    }
    stall_table(&mut s, p, cx);
    let pairs: Vec<(String, Cell)> = p
        .stall_vias
        .iter()
        .flat_map(|v| {
            let open = p
                .capacity(cx.results, v, p.stall_orders)
                .map(|cap| (format!("{v} open"), p.stall_open(v, cap)));
            std::iter::once((format!("{v} closed"), p.stall_closed(v))).chain(open)
        })
        .collect();
    spectrum::add(
        &mut s,
        cx,
        Latency::EndToEnd,
        (
            "open-loop-stall-spectrum.svg",
            &format!(
                "End-to-end percentile spectrum with a {} ms stall",
                p.stall_ms
            ),
        ),
        &pairs,
    );
    s
}

fn fractions_table(s: &mut Section, p: &OpenLoopPlan, cx: &Context, orders: u32) {
    let open: Vec<Cell> = p
        .vias
        .iter()
        .filter_map(|via| Some((via, p.capacity(cx.results, via, orders)?)))
        .flat_map(|(via, cap)| {
            p.fractions_pct
                .iter()
                .map(move |&pct| p.at(via, orders, cap, pct))
        })
        .collect();
    let mut headers = vec!["transport".to_owned(), "capacity, req/s".to_owned()];
    headers.extend(
        p.fractions_pct
            .iter()
            .map(|pct| format!("{pct}%: p50 / p99, ms")),
    );
    headers.push("p99 ≥ 2 × p50 from".into());
    let mut growth = Vec::new();
    let mut doubling = Vec::new();
    let rows = p
        .vias
        .iter()
        .map(|via| {
            let mut r = vec![Value::text(via.clone())];
            let Some(cap) = p.capacity(cx.results, via, orders) else {
                r.extend((0..p.fractions_pct.len() + 2).map(|_| Value::missing("no good round")));
                return r;
            };
            r.push(Value::text(f::num(cap)));
            let mut p99s = Vec::new();
            let mut doubled = None;
            for &pct in &p.fractions_pct {
                let cell = p.at(via, orders, cap, pct);
                match (
                    figure(cx, &cell, Metric::E2eP50),
                    figure(cx, &cell, Metric::E2eP99),
                ) {
                    (Ok(p50), Ok(p99)) => {
                        r.push(Value::text(format!("{} / {}", f::num(p50), f::num(p99))));
                        p99s.push((pct, p99));
                        if doubled.is_none() && p99 >= 2.0 * p50 {
                            doubled = Some(pct);
                        }
                    }
                    (Err(why), _) | (_, Err(why)) => r.push(Value::missing(why)),
                }
            }
            r.push(match (doubled, p99s.len() == p.fractions_pct.len()) {
                (Some(pct), _) => Value::text(format!("{pct}%")),
                (None, true) => Value::text("not up to 90%"),
                (None, false) => Value::missing("a fraction is missing"),
            });
            if let (Some(lo), Some(hi)) = (p99s.first(), p99s.last())
                && p99s.len() > 1
            {
                growth.push((via.clone(), lo.0, hi.0, hi.1 / lo.1));
            }
            if let Some(pct) = doubled {
                doubling.push((via.clone(), pct));
            }
            r
        })
        .collect();
    s.table(Table {
        caption: format!(
            "Open-loop latency at {} (end to end, ms, median of rounds)",
            f::orders(orders)
        ),
        headers,
        rows,
        reading: fractions_reading(&growth, &doubling)
            + &lag_reading(cx, &open).unwrap_or_default(),
    });
}

/// How each line's p99 grew from its lowest to its highest measured
/// fraction, and where p99 first reached twice p50.
fn fractions_reading(growth: &[(String, u32, u32, f64)], doubling: &[(String, u32)]) -> String {
    if growth.is_empty() {
        return "No transport has two fractions measured: nothing to say about how its tail grew."
            .into();
    }
    let mut g = growth.to_vec();
    g.sort_by(|a, b| a.3.total_cmp(&b.3));
    let parts: Vec<String> = g
        .iter()
        .map(|(v, lo, hi, x)| format!("{v} ×{x:.1} ({lo}% → {hi}%)"))
        .collect();
    let mut out = if g.len() == 1 {
        format!("p99 grew with load: {}.", parts[0])
    } else {
        format!(
            "p99 grew with load least over {} and most over {}: {}.",
            g[0].0,
            g[g.len() - 1].0,
            parts.join(", ")
        )
    };
    if doubling.is_empty() {
        out.push_str(" No transport's p99 reached twice its p50 up to 90% of capacity.");
    } else {
        let mut d = doubling.to_vec();
        d.sort_by_key(|x| x.1);
        let parts: Vec<String> = d.iter().map(|(v, p)| format!("{v} at {p}%")).collect();
        out.push_str(&format!(
            " p99 first reached twice p50: {}.",
            parts.join(", ")
        ));
    }
    out
}

fn stall_table(s: &mut Section, p: &OpenLoopPlan, cx: &Context) {
    let headers = [
        "transport",
        "loop",
        "stopped, ms",
        "requests",
        "p50, ms",
        "p99, ms",
        "max, ms",
    ]
    .map(str::to_owned)
    .to_vec();
    let mut rows = Vec::new();
    let mut seen = Vec::new();
    for via in &p.stall_vias {
        let closed = p.stall_closed(via);
        let open = p
            .capacity(cx.results, via, p.stall_orders)
            .map(|cap| p.stall_open(via, cap));
        let rate = |c: &Cell| match c.load {
            Load::Open { rate, .. } => rate,
            Load::Closed { .. } => 0,
        };
        let mut pair = vec![(format!("closed, {} VUs", p.capacity_vus), closed)];
        if let Some(open) = open {
            pair.push((format!("open, {} req/s", rate(&open)), open));
        }
        for (name, cell) in &pair {
            let stopped: Vec<f64> = cx
                .results
                .records
                .iter()
                .filter(|r| &r.cell == cell)
                .filter_map(|r| r.stalled_ms)
                .collect();
            let mut r = vec![Value::text(via.clone()), Value::text(name.clone())];
            r.push(match stopped.iter().copied().reduce(f64::max) {
                Some(ms) => Value::text(f::num(ms)),
                None => Value::missing("no round"),
            });
            let mut requests: Vec<f64> = cx
                .results
                .records
                .iter()
                .filter(|r| &r.cell == cell)
                .map(|r| Measures::of(r).requests)
                .collect();
            r.push(match median(&mut requests) {
                Some(n) => Value::text(f::num(n)),
                None => Value::missing("no round"),
            });
            let mut p99 = None;
            for m in [Metric::E2eP50, Metric::E2eP99, Metric::E2eMax] {
                match figure(cx, cell, m) {
                    Ok(v) => {
                        if m == Metric::E2eP99 {
                            p99 = Some(v);
                        }
                        r.push(Value::text(f::num(v)));
                    }
                    Err(why) => r.push(Value::missing(why)),
                }
            }
            seen.push((via.clone(), name.starts_with("open"), p99));
            rows.push(r);
        }
    }
    s.table(Table {
        caption: format!(
            "A {} ms stall of order-service mid-run, {}: what each loop records",
            p.stall_ms,
            f::orders(p.stall_orders)
        ),
        headers,
        rows,
        reading: stall_reading(p.stall_ms, &seen),
    });
}

/// Whether each loop's p99 shows the stall (at least half its length),
/// from the numbers.
fn stall_reading(stall_ms: u32, seen: &[(String, bool, Option<f64>)]) -> String {
    let half = f64::from(stall_ms) / 2.0;
    let mut out = Vec::new();
    for (via, open, p99) in seen {
        let loop_name = if *open { "open" } else { "closed" };
        out.push(match p99 {
            Some(v) if *v >= half => {
                format!(
                    "{via}'s {loop_name} loop shows it in its p99 ({} ms)",
                    f::num(*v)
                )
            }
            Some(v) => format!(
                "{via}'s {loop_name} loop hides it from its p99 ({} ms)",
                f::num(*v)
            ),
            None => format!("{via}'s {loop_name} loop has no p99"),
        });
    }
    if out.is_empty() {
        return "No stalled cell was measured.".into();
    }
    format!(
        "With order-service stopped for {stall_ms} ms: {}. A closed loop's callers wait out a \
         stall and send nothing meanwhile, so it counts once per caller; an open loop keeps \
         sending, so every request due during it waits.",
        out.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_cells_are_fractions_of_the_measured_capacity() {
        let knobs = Knobs {
            quick: true,
            transports: Some(vec!["grpc".into()]),
            sizes: Some(vec![100]),
            ..Knobs::default()
        };
        let p = OpenLoop::plan(&knobs);
        let cap = p.capacity_cell("grpc", 100);
        let mut results = Results::default();
        for (round, rate) in [(1, 900.0), (2, 1000.0), (3, 1100.0)] {
            let mut r = crate::synthetic::record("open-loop", &cap, round);
            r.load.good_rate = rate;
            results.records.push(r);
        }
        let got = p.capacity(&results, "grpc", 100).unwrap();
        assert!((got - 1000.0).abs() < 1.0, "{got}");
        let cells = p.open_cells(&results);
        let rates: Vec<(u32, bool)> = cells
            .iter()
            .map(|c| match c.load {
                Load::Open { rate, .. } => (rate, c.env.stall_ms.is_some()),
                Load::Closed { .. } => (0, false),
            })
            .collect();
        // The fractions, then the stalled open loop at 50%: 500/s, which
        // half of 200 VUs hold through 200 ms (500 × 0.2 = 100).
        assert_eq!(
            rates,
            [
                (250, false),
                (500, false),
                (750, false),
                (900, false),
                (500, true)
            ]
        );
        // At a capacity of 4,000/s, 50% would need 400 VUs through the
        // stall: the rate is lowered to what half of them hold.
        match p.stall_open("grpc", 4000.0).load {
            Load::Open { rate, .. } => assert_eq!(rate, 500),
            Load::Closed { .. } => panic!("an open loop"),
        }
        assert!(p.open_cells(&Results::default()).is_empty());
    }

    #[test]
    fn the_fractions_reading_ranks_growth_and_names_where_p99_doubled() {
        let r = fractions_reading(
            &[
                ("grpc".into(), 25, 90, 1.5),
                ("h1-json".into(), 25, 90, 4.0),
            ],
            &[("h1-json".into(), 75), ("grpc".into(), 90)],
        );
        assert!(r.contains("least over grpc and most over h1-json"), "{r}");
        assert!(r.contains("h1-json at 75%, grpc at 90%"), "{r}");
        let none = fractions_reading(&[("grpc".into(), 25, 90, 1.2)], &[]);
        assert!(none.contains("No transport's p99 reached twice"), "{none}");
    }

    #[test]
    fn the_stall_reading_says_which_loop_showed_it() {
        let r = stall_reading(
            200,
            &[
                ("grpc".into(), false, Some(3.0)),
                ("grpc".into(), true, Some(180.0)),
            ],
        );
        assert!(r.contains("closed loop hides it from its p99 (3"), "{r}");
        assert!(r.contains("open loop shows it in its p99 (180"), "{r}");
    }
}
