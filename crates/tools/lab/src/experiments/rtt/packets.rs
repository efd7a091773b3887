//! The rtt section's tables that only a packet path has: the path's own
//! figures per RTT, what the delay proxy hides (the same calls through both),
//! and idle-then-burst.

use super::plan::{HIDDEN_RTT_MS, IDLE_ORDERS, IDLE_VIAS, IDLE_VUS, RttPlan, over_grid};
use crate::experiment::{Context, PathChoice};
use crate::experiments::tables::scaled;
use crate::measure::cell::Cell;
use crate::measure::figures::Metric;
use crate::report::Table;
use crate::report::format::{self as f};
use crate::report::value::Value;

/// The packet path at each RTT: how late it delivered packets (the
/// emulation's own error), its CPU, and what the kernels retransmitted.
pub(super) fn path_table(r: &RttPlan, cx: &Context) -> Table {
    let at = |ms: u32, m: Metric| over_grid(r, cx, ms, m);
    let rows = r
        .rtts_ms
        .iter()
        .map(|&ms| {
            vec![
                format!("RTT {ms} ms").into(),
                Value::single(f64::from(ms) / 2.0, "ms"),
                Value::range(at(ms, Metric::PathLate), Metric::PathLate.unit()),
                Value::range(at(ms, Metric::PathCores), Metric::PathCores.unit()),
                Value::range(at(ms, Metric::Retrans), Metric::Retrans.unit()),
            ]
        })
        .collect();
    let worst = r
        .rtts_ms
        .iter()
        .filter_map(|&ms| at(ms, Metric::PathLate).map(|s| (ms, s.max)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let retrans = r
        .rtts_ms
        .iter()
        .filter_map(|&ms| at(ms, Metric::Retrans).map(|s| s.max))
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    Table {
        caption: "The packet path: how late it delivered packets, its CPU, and the kernels' retransmissions".into(),
        headers: vec![
            "RTT".into(),
            "one-way delay asked, ms".into(),
            "mean lateness per delayed packet, µs (cells × rounds)".into(),
            "path CPU, cores".into(),
            "segments retransmitted, both sides".into(),
        ],
        rows,
        reading: match worst {
            Some((ms, late)) => format!(
                "The emulated round trip is the asked one plus up to twice the lateness: the worst cell's mean was {} µs (at RTT {ms} ms). {}",
                f::num(late),
                match retrans {
                    None => format!("Retransmissions were not recorded ({}).", f::MISSING),
                    Some(0.0) => "No segment was retransmitted: the path lost nothing.".to_owned(),
                    Some(x) => format!(
                        "The path lost nothing here (its loss model is off), yet up to {} segments per 1,000 calls were retransmitted: Linux also resends when an acknowledgement is late (a tail loss probe, a timer), so this is the floor to read the loss experiment's counts against.",
                        f::num(x)
                    ),
                }
            ),
            None => format!("The path's lateness was not recorded ({}).", f::MISSING),
        },
    }
}

/// Pooled connections idle between calls, then a large answer, against the
/// same calls back to back: slow start after idle, as the kernel runs it.
pub(super) fn idle_table(r: &RttPlan, cx: &Context) -> Table {
    let d = cx.data;
    let in_rtts = |c: &Cell| {
        d.median(c, Metric::UpP50)
            .map(|us| us / 1000.0 / f64::from(HIDDEN_RTT_MS))
    };
    let mut rows = Vec::new();
    let mut said = Vec::new();
    for via in IDLE_VIAS {
        let (warm, idle) = (r.idle_cell(via, 0), r.idle_cell(via, r.idle_ms));
        if let (Some(a), Some(b)) = (in_rtts(&warm), in_rtts(&idle)) {
            said.push(format!(
                "{via} {} round trips after idle against {} back to back",
                f::num(b),
                f::num(a)
            ));
        }
        rows.push(vec![
            Value::text(via),
            Value::range(scaled(d.spread(&warm, Metric::UpP50), 1e-3), "ms"),
            Value::range(scaled(d.spread(&idle, Metric::UpP50), 1e-3), "ms"),
            Value::ratio(d.ratio(&idle, &warm, Metric::UpP50)),
            Value::range(scaled(d.spread(&idle, Metric::UpP95), 1e-3), "ms"),
        ]);
    }
    Table {
        caption: format!(
            "Idle, then a burst: {IDLE_VUS} callers on {} pooled connections, {} per call, each caller idle {} ms between calls or not at all; packet path, RTT {HIDDEN_RTT_MS} ms, {}",
            r.hidden_pool(),
            f::orders(IDLE_ORDERS),
            r.idle_ms,
            r.cc
        ),
        headers: vec![
            "transport".into(),
            "upstream p50, back to back, ms".into(),
            "upstream p50, after idle, ms".into(),
            "after idle / back to back".into(),
            "upstream p95, after idle, ms".into(),
        ],
        rows,
        reading: if said.is_empty() {
            format!("Not measured both idle and back to back ({}).", f::MISSING)
        } else {
            format!(
                "At p50: {}. With slow start after idle on (what the kernels reported is above), a connection idle past its retransmission timeout starts its window again from the initial one; how much that costs is the algorithm's: `--cc bbr` measures the other.",
                said.join("; ")
            )
        },
    }
}

/// The same calls through the delay proxy and across the packet path at
/// [`HIDDEN_RTT_MS`]: what terminating TCP on both sides hides.
pub(super) fn hidden_table(r: &RttPlan, cx: &Context) -> Table {
    let d = cx.data;
    let pool = r.hidden_pool();
    let mut rows = Vec::new();
    let mut gaps: Vec<(String, u32, f64)> = Vec::new();
    for &orders in &r.hidden_orders {
        for via in &r.hidden_vias {
            let proxy = r.cell_on(PathChoice::Proxy, via, pool, orders, HIDDEN_RTT_MS);
            let packets = r.cell_on(PathChoice::Packets, via, pool, orders, HIDDEN_RTT_MS);
            let in_rtts = |c: &Cell| {
                d.median(c, Metric::UpP50)
                    .map(|us| us / 1000.0 / f64::from(HIDDEN_RTT_MS))
            };
            if let (Some(a), Some(b)) = (in_rtts(&proxy), in_rtts(&packets)) {
                gaps.push((via.clone(), orders, b - a));
            }
            let cold = if via == transports::H1_JSON_CLOSE {
                "cold: a new connection per call"
            } else {
                "warm: pooled connections"
            };
            rows.push(vec![
                Value::text(format!("{via} ({cold})")),
                Value::text(f::orders(orders)),
                Value::range(scaled(d.spread(&proxy, Metric::UpP50), 1e-3), "ms"),
                Value::range(scaled(d.spread(&packets, Metric::UpP50), 1e-3), "ms"),
                Value::ratio(d.ratio(&packets, &proxy, Metric::UpP50)),
                Value::range(d.spread(&packets, Metric::Rate), "req/s"),
                Value::ratio(d.ratio(&packets, &proxy, Metric::Rate)),
            ]);
        }
    }
    let widest = gaps.iter().max_by(|a, b| a.2.total_cmp(&b.2));
    Table {
        caption: format!(
            "What the delay proxy hides: the same calls through it and across the packet path, RTT {HIDDEN_RTT_MS} ms, pool {pool}, {} VUs",
            r.vus
        ),
        headers: vec![
            "transport".into(),
            "orders per call".into(),
            "upstream p50, proxy, ms".into(),
            "upstream p50, packets, ms".into(),
            "packets / proxy".into(),
            "rate, packets".into(),
            "rate packets / proxy".into(),
        ],
        rows,
        reading: match widest {
            Some((via, orders, gap)) => format!(
                "The proxy terminates TCP on both sides, so a connection's handshake is a fixed extra round trip and its answer leaves at loopback speed; across packets, each new or idle connection grows its congestion window from 10 segments. The widest gap: {via} at {} took {} more round trips at p50 across packets than through the proxy.",
                f::orders(*orders),
                f::num(*gap)
            ),
            None => format!("Not measured on both paths ({}).", f::MISSING),
        },
    }
}
