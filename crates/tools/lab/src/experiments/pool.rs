//! `pool`: a connection budget of 1 or 4 per transport, open loop at
//! rising rates until the load generator falls behind its schedule (the
//! Spring Boot post's connection-budget table, where k6 dropped
//! iterations): a ladder per transport and pool that stops at its first
//! rate behind schedule.

use serde::{Deserialize, Serialize};

use crate::analysis::Data;
use crate::experiment::{Context, Experiment, Knobs};
use crate::experiments::tables::method;
use crate::measure::cell::{Cell, Env, Load};
use crate::measure::figures::Metric;
use crate::measure::schedule::{Ladder, Schedule, StopRule};
use crate::report::format as f;
use crate::report::svg::{self, LineChart, Series};
use crate::report::value::Value;
use crate::report::{Chart, Section, Table};

pub struct Pool;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolPlan {
    /// Orders per call.
    pub orders: u32,
    /// user-service's connections per transport.
    pub pools: Vec<u16>,
    pub vias: Vec<String>,
    /// The rates each transport and pool climbs, iterations per second.
    pub rates: Vec<u32>,
    pub max_vus: u32,
    /// A rate is behind schedule when more than this share of its
    /// requests could not be sent at their time (every connection busy:
    /// k6 drops them, the lab's engine sends them late). Named for k6's
    /// drops, which it was first.
    pub drop_threshold_pct: f64,
}

impl PoolPlan {
    /// The open-loop cell of one transport and pool at one rate.
    pub fn cell(&self, via: &str, pool: u16, rate: u32) -> Cell {
        Cell {
            via: via.to_owned(),
            orders: self.orders,
            fields: None,
            load: Load::Open {
                rate,
                max_vus: self.max_vus,
            },
            pool,
            users: 1,
            batch: false,
            think_ms: 0,
            generator: None,
            env: Env::default(),
        }
    }
}

/// Whether a pool cell fell behind more than the threshold (median of rounds).
fn dropped(p: &PoolPlan, data: &Data, cell: &Cell) -> bool {
    data.median(cell, Metric::BehindShare)
        .is_some_and(|v| v > p.drop_threshold_pct)
}

impl Experiment for Pool {
    type Plan = PoolPlan;
    const NAME: &'static str = "pool";
    const ABOUT: &'static str = "Pool 1 and 4, open loop at rising rates until the load falls behind its schedule (the Spring Boot post)";

    fn target() -> Result<(), &'static str> {
        Err(
            "it sets user-service's connection budget per cell (USER_POOL_SIZE), which needs a restart",
        )
    }

    fn plan(knobs: &Knobs) -> PoolPlan {
        let transports = knobs.transports();
        PoolPlan {
            orders: 100,
            pools: vec![1, 4],
            vias: [transports::H1_JSON, transports::H2C_JSON, transports::GRPC]
                .iter()
                .map(|s| (*s).to_owned())
                .filter(|v| transports.contains(v))
                .collect(),
            rates: if knobs.quick {
                vec![500, 1000, 2000]
            } else {
                vec![250, 500, 1000, 2000, 4000, 8000, 16000]
            },
            max_vus: if knobs.quick { 200 } else { 300 },
            drop_threshold_pct: 1.0,
        }
    }

    fn schedule(p: &PoolPlan) -> Schedule {
        let mut lines = Vec::new();
        for via in &p.vias {
            for &pool in &p.pools {
                lines.push(p.rates.iter().map(|&r| p.cell(via, pool, r)).collect());
            }
        }
        Schedule::Ladder(Ladder {
            lines,
            stop: StopRule {
                metric: Metric::BehindShare,
                above: p.drop_threshold_pct,
            },
        })
    }

    fn describe(p: &PoolPlan) -> String {
        format!("rates {:?}, pools {:?}", p.rates, p.pools)
    }

    fn section(p: &PoolPlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

fn section(p: &PoolPlan, cx: &Context) -> Section {
    let d = cx.data;
    let mut s = Section::new(
        "pool",
        "Pool: connection budget 1 vs 4, open loop at rising rates (the Spring Boot post's connection budget)",
    );
    s.para(method(
        cx.timing,
        &format!(
            "Open loop (requests started at a fixed rate on at most {} connections, each timed \
             from its scheduled send), {} orders per call, user-service pool of 1 or 4 TCP \
             connections per transport. Each transport and pool climbs the rates {} and stops at \
             the first rate whose median leaves more than {}% of its requests behind schedule \
             (every connection was busy at their time because answers came too slowly: k6 drops \
             such a request, the lab's engine sends it when a connection frees)",
            p.max_vus,
            p.orders,
            p.rates
                .iter()
                .map(|r| format!("{r}/s"))
                .collect::<Vec<_>>()
                .join(", "),
            p.drop_threshold_pct
        ),
    ));
    let measured: Vec<&Cell> = d
        .cells
        .keys()
        .filter(|c| matches!(c.load, Load::Open { .. }) && c.orders == p.orders)
        .collect();
    let mut rows = Vec::new();
    let mut summary_rows = Vec::new();
    let mut tails: Vec<(String, f64, f64)> = Vec::new();
    let mut series_drop = Vec::new();
    let mut series_p95 = Vec::new();
    for via in &p.vias {
        for &pool in &p.pools {
            let l = ladder(p, cx, &measured, via, pool);
            rows.extend(l.rows);
            summary_rows.push(l.summary);
            tails.extend(l.tail);
            series_drop.push(l.drops);
            series_p95.push(l.p95);
        }
    }
    let best = summary_rows
        .iter()
        .map(|r| r[0].clone() + ": " + &r[2])
        .collect::<Vec<_>>()
        .join("; ");
    let summary_rows: Vec<Vec<Value>> = summary_rows
        .into_iter()
        .map(|r| r.into_iter().map(Value::text).collect())
        .collect();
    s.table(Table {
        caption: "Where the load falls behind".into(),
        headers: vec![
            "transport · pool".into(),
            "highest rate on schedule".into(),
            "first rate behind schedule".into(),
        ],
        rows: summary_rows,
        reading: format!("First rates behind schedule — {best}."),
    });
    s.table(Table {
        caption: "Every rate".into(),
        headers: vec![
            "transport · pool · asked".into(),
            "achieved req/s".into(),
            "behind schedule %".into(),
            "shed by user-service %".into(),
            "p50 ms".into(),
            "p90 ms".into(),
            "p95 ms".into(),
            "p99 ms".into(),
            "upstream p95 µs".into(),
            "connections held".into(),
            "load generator cores".into(),
        ],
        rows,
        reading: tail_reading(&tails),
    });
    charts(&mut s, series_drop, series_p95);
    s
}

fn rate_of(c: &Cell) -> u32 {
    match c.load {
        Load::Open { rate, .. } => rate,
        Load::Closed { .. } => 0,
    }
}

/// One transport and pool climbing the rates: its rows of every rate, its
/// row of where it falls behind, how its median and tail grew up to the
/// highest rate on schedule, and its points on the two charts.
struct LadderRows {
    rows: Vec<Vec<Value>>,
    summary: Vec<String>,
    tail: Option<(String, f64, f64)>,
    drops: Series,
    p95: Series,
}

fn ladder(p: &PoolPlan, cx: &Context, measured: &[&Cell], via: &str, pool: u16) -> LadderRows {
    let d = cx.data;
    let mut cells: Vec<&Cell> = measured
        .iter()
        .copied()
        .filter(|c| c.via == via && c.pool == pool)
        .collect();
    cells.sort_by_key(|c| rate_of(c));
    let mut rows = Vec::new();
    let mut clean = None;
    let mut first_drop = None;
    for c in &cells {
        let r = rate_of(c);
        rows.push(vec![
            format!("{via} · pool {pool} · {r}/s").into(),
            cx.fig(c, Metric::Rate),
            cx.fig(c, Metric::BehindShare),
            cx.fig(c, Metric::ShedShare),
            cx.fig(c, Metric::E2eP50),
            cx.fig(c, Metric::E2eP90),
            cx.fig(c, Metric::E2eP95),
            cx.fig(c, Metric::E2eP99),
            cx.fig(c, Metric::UpP95),
            cx.fig(c, Metric::ConnectionsHeld),
            cx.fig(c, Metric::LoadCores),
        ]);
        if dropped(p, d, c) {
            if first_drop.is_none() {
                first_drop = Some(*c);
            }
        } else if first_drop.is_none() {
            clean = Some(*c);
        }
    }
    // From the lowest rate to the highest on schedule: how much the median
    // and the tail grew.
    let mut tail = None;
    if let (Some(lo), Some(hi)) = (cells.first(), clean)
        && *lo != hi
    {
        let growth = |m: Metric| Some(d.median(hi, m)? / d.median(lo, m)?);
        if let (Some(p50), Some(p99)) = (growth(Metric::E2eP50), growth(Metric::E2eP99)) {
            tail = Some((format!("{via} · pool {pool}"), p50, p99));
        }
    }
    let summary = vec![
        format!("{via} · pool {pool}"),
        clean.map_or("none".to_owned(), |c: &Cell| {
            format!(
                "{}/s (p95 {} ms)",
                rate_of(c),
                f::num(d.median(c, Metric::E2eP95).unwrap_or(f64::NAN))
            )
        }),
        first_drop.map_or(
            format!("none up to {}/s", cells.last().map_or(0, |c| rate_of(c))),
            |c: &Cell| {
                format!(
                    "{}/s: {} req/s achieved, {}% behind schedule, p95 {} ms",
                    rate_of(c),
                    f::num(d.median(c, Metric::Rate).unwrap_or(f64::NAN)),
                    f::num(d.median(c, Metric::BehindShare).unwrap_or(f64::NAN)),
                    f::num(d.median(c, Metric::E2eP95).unwrap_or(f64::NAN))
                )
            },
        ),
    ];
    let pts = |m: Metric| -> Vec<(f64, f64)> {
        cells
            .iter()
            .filter_map(|c| d.median(c, m).map(|v| (f64::from(rate_of(c)), v)))
            .collect()
    };
    LadderRows {
        rows,
        summary,
        tail,
        drops: Series {
            name: format!("{via} pool {pool}"),
            points: pts(Metric::BehindShare),
        },
        p95: Series {
            name: format!("{via} pool {pool}"),
            points: pts(Metric::E2eP95),
        },
    }
}

fn charts(s: &mut Section, series_drop: Vec<Series>, series_p95: Vec<Series>) {
    s.chart(Chart {
        file: "pool-drops.svg".into(),
        title: "Requests behind schedule against the asked rate".into(),
        svg: svg::line_chart(&LineChart {
            title: "Requests behind schedule against the asked rate".into(),
            x_label: "asked rate, requests/s (log)".into(),
            y_label: "behind schedule, % of asked".into(),
            x_log: true,
            y_log: false,
            series: series_drop,
        }),
    });
    s.chart(Chart {
        file: "pool-p95.svg".into(),
        title: "End-to-end p95 against the asked rate".into(),
        svg: svg::line_chart(&LineChart {
            title: "End-to-end p95 against the asked rate".into(),
            x_label: "asked rate, requests/s (log)".into(),
            y_label: "p95, ms (log)".into(),
            x_log: true,
            y_log: true,
            series: series_p95,
        }),
    });
}

/// Whether the tail grew before the median, from the measured growths of
/// each line's p50 and p99 up to its last rate on schedule (by 5% more, to
/// count).
fn tail_reading(tails: &[(String, f64, f64)]) -> String {
    if tails.is_empty() {
        return "No transport and pool has two rates on schedule: nothing to say about how its \
                latency grew."
            .to_owned();
    }
    let tail_first = tails
        .iter()
        .filter(|(_, p50, p99)| *p99 > p50 * 1.05)
        .count();
    let each = tails
        .iter()
        .map(|(n, p50, p99)| format!("{n} p50 ×{p50:.2}, p99 ×{p99:.2}"))
        .collect::<Vec<_>>()
        .join("; ");
    let verdict = if tail_first * 2 > tails.len() {
        format!(
            "on {tail_first} of {} the tail grew more than the median: saturation shows in the \
             tail first, as the Spring Boot post found",
            tails.len()
        )
    } else {
        format!(
            "on only {tail_first} of {} did the tail grow more than the median: the tail did \
             not run ahead of the median here",
            tails.len()
        )
    };
    format!("From the lowest rate to the highest on schedule: {each}; {verdict}.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::results::Results;
    use crate::report::Block;

    fn every_rate_reading(plan: &PoolPlan, timing: &crate::measure::Timing, r: &Results) -> String {
        let data = Data::new(r);
        let cx = Context {
            timing,
            data: &data,
            results: r,
            store: "in memory",
        };
        section(plan, &cx)
            .blocks
            .iter()
            .find_map(|b| match b {
                Block::Table(t) if t.caption == "Every rate" => Some(t.reading.clone()),
                _ => None,
            })
            .expect("an every-rate table")
    }

    #[test]
    fn the_reading_says_what_the_tail_did() {
        let (info, results) = crate::synthetic::run(&[Pool::NAME], true, 2);
        let plan: PoolPlan =
            serde_json::from_value(info.plans[Pool::NAME].clone()).expect("a pool plan");
        // The synthetic latencies do not depend on the rate: no tail first.
        let flat = every_rate_reading(&plan, &info.timing, &results);
        assert!(flat.contains("on only 0 of"), "{flat}");
        // The same run with a p99 that grows with the rate.
        let mut tail = results.clone();
        for r in &mut tail.records {
            if let (Load::Open { rate, .. }, Some(p)) = (r.cell.load, r.load.good_ms.as_mut()) {
                p.p99 *= f64::from(rate) / 100.0;
            }
        }
        let grown = every_rate_reading(&plan, &info.timing, &tail);
        assert!(
            grown.contains("saturation shows in the tail first"),
            "{grown}"
        );
        assert_ne!(flat, grown);
    }
}
