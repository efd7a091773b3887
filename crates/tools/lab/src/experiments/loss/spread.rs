//! The loss experiment's replicas: gRPC across the lossy path to one
//! order-service (on one connection or four) and to several replicas,
//! balanced by user-service (a connection to each crosses the path) or by
//! HAProxy L7 beside them (one connection crosses it). A lost packet
//! stalls the connection it was on, whatever is behind the far end; the
//! table shows whether the tail follows the connections that cross the
//! path or the servers behind it.

use super::plan::{Arm, Case, LossPlan, Spread};
use super::readings::times;
use crate::experiment::Context;
use crate::experiments::tables::scaled;
use crate::measure::cell::{Balance, Cell};
use crate::measure::figures::Metric;
use crate::report::Table;
use crate::report::format::{self as f};
use crate::report::value::Value;

/// One row: a name and its cell in each of the spread's two cases.
struct Row {
    name: String,
    cells: [Cell; 2],
    /// How many connections user-service's calls cross the path on, by
    /// design (the table also shows what user-service held).
    crossing: Crossing,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Crossing {
    One,
    Several,
}

fn rows(p: &LossPlan, s: &Spread, orders: u32) -> Vec<Row> {
    let cases: [Case; 2] = p.spread_cases(s);
    let mut v: Vec<Row> = p
        .arms
        .iter()
        .filter(|a| a.via == s.via)
        .map(|a: &Arm| Row {
            name: format!("{}, one order-service", a.name()),
            cells: cases.map(|c| p.cell(a, orders, &c)),
            crossing: if a.pooled() {
                Crossing::Several
            } else {
                Crossing::One
            },
        })
        .collect();
    for &b in &s.balances {
        let (how, crossing) = match b {
            Balance::L7 => ("through HAProxy L7 beside them", Crossing::One),
            Balance::L4 => ("through HAProxy L4 beside them", Crossing::One),
            Balance::Direct => ("to the first only", Crossing::One),
            Balance::Client | Balance::ClientP2c => ("balanced by user-service", Crossing::Several),
        };
        v.push(Row {
            name: format!("{} ×1, {} replicas {how}", s.via, s.n),
            cells: cases.map(|c| p.spread_cell(s, b, orders, &c)),
            crossing,
        });
    }
    v
}

/// The table of `orders` per call, if the plan has a spread.
pub(super) fn spread_table(p: &LossPlan, cx: &Context, orders: u32) -> Option<Table> {
    let s = p.spread.as_ref()?;
    let d = cx.data;
    let [clean, lossy] = p.spread_cases(s).map(|c| c.name());
    let rows = rows(p, s, orders);
    let body = rows
        .iter()
        .map(|r| {
            let [c0, c1] = &r.cells;
            let growth = |m: Metric| {
                Value::parts(vec![
                    Value::range(scaled(d.spread(c1, m), 1e-3), "ms"),
                    Value::ratio(d.ratio(c1, c0, m)),
                ])
            };
            vec![
                Value::text(r.name.clone()),
                Value::range(d.spread(c1, Metric::ConnectionsHeld), ""),
                Value::range(d.spread(c0, Metric::Rate), "req/s"),
                Value::parts(vec![
                    Value::range(d.spread(c1, Metric::Rate), "req/s"),
                    Value::ratio(d.ratio(c1, c0, Metric::Rate)),
                ]),
                Value::range(scaled(d.spread(c0, Metric::UpP99), 1e-3), "ms"),
                growth(Metric::UpP99),
                growth(Metric::UpP999),
            ]
        })
        .collect();
    Some(Table {
        caption: format!(
            "{} across the lossy path to one order-service or to {} replicas, {}",
            s.via,
            s.n,
            f::orders(orders)
        ),
        headers: vec![
            "how user-service reaches order-service".to_owned(),
            format!("upstream connections held, {lossy}"),
            format!("good answers/s, {clean}"),
            format!("good answers/s, {lossy}"),
            format!("upstream p99, {clean}"),
            format!("upstream p99, {lossy}"),
            format!("upstream p99.9, {lossy}"),
        ],
        rows: body,
        reading: reading(cx, &rows, &lossy),
    })
}

/// Whether the p99's growth with loss follows the connections that cross
/// the path or the servers behind it: the mean growth of the rows on one
/// crossing connection against those on several, and where each balancer
/// falls.
fn reading(cx: &Context, rows: &[Row], lossy: &str) -> String {
    let change = |r: &Row, m: Metric| {
        let clean = cx.data.median(&r.cells[0], m)?;
        let lossy = cx.data.median(&r.cells[1], m)?;
        (clean > 0.0).then_some(lossy / clean)
    };
    let of = |c: Crossing| -> Vec<(&Row, f64, Option<f64>)> {
        rows.iter()
            .filter(|r| r.crossing == c)
            .filter_map(|r| Some((r, change(r, Metric::UpP99)?, change(r, Metric::Rate))))
            .collect()
    };
    let (one, several) = (of(Crossing::One), of(Crossing::Several));
    if one.is_empty() || several.is_empty() {
        return format!(
            "The p99's growth at {lossy} was not measured both on one connection across the path and on several ({}).",
            f::MISSING
        );
    }
    let list = |v: &[(&Row, f64, Option<f64>)]| {
        v.iter()
            .map(|(r, g, rate)| {
                let kept = rate.map_or(String::new(), |k| format!(", rate {}", times(k)));
                format!("{} ({}{kept})", times(*g), r.name)
            })
            .collect::<Vec<_>>()
            .join(" and ")
    };
    let mean = |v: &[(&Row, f64, Option<f64>)]| v.iter().map(|x| x.1).sum::<f64>() / v.len() as f64;
    let (m1, ms) = (mean(&one), mean(&several));
    let verdict = if m1 > ms {
        format!(
            "the tail follows the connections that cross the lossy path, not the servers behind it: a balancer beside the replicas leaves one connection exposed (p99 {} on average against {})",
            times(m1),
            times(ms)
        )
    } else {
        format!(
            "spreading calls over more connections across the path did not shorten the tail here (p99 {} on average against {} on one connection)",
            times(ms),
            times(m1)
        )
    };
    format!(
        "From no loss to {lossy}, the p99 grew on one connection across the path {}; on several, {}. So {verdict}.",
        list(&one),
        list(&several)
    )
}
