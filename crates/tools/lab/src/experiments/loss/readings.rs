//! The readings of the loss tables, each computed from the numbers.

use super::plan::{Arm, Case, LossPlan};
use crate::experiment::Context;
use crate::measure::figures::Metric;
use crate::report::format::{self as f};
use netpath::CongestionControl;

/// How much a tail grows from no loss to `case`, per arm.
pub(super) fn growth<'p>(
    p: &'p LossPlan,
    cx: &Context,
    orders: u32,
    case: &Case,
    m: Metric,
) -> Vec<(&'p Arm, f64)> {
    let Some(base) = p.lossless(case.cc) else {
        return Vec::new();
    };
    p.arms
        .iter()
        .filter_map(|a| {
            let lossy = cx.data.median(&p.cell(a, orders, case), m)?;
            let clean = cx.data.median(&p.cell(a, orders, base), m)?;
            (clean > 0.0).then_some((a, lossy / clean))
        })
        .collect()
}

/// A bare ratio: `×1.52`.
pub(super) fn times(v: f64) -> String {
    format!("×{v:.2}")
}

pub(super) fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Whether one connection's tail grows faster with loss than a pool's,
/// and from what loss rate on (random loss, the run's algorithm).
pub(super) fn tail_reading(p: &LossPlan, cx: &Context, orders: u32, m: Metric) -> String {
    let which = if m == Metric::UpP99 { "p99" } else { "p99.9" };
    let mut said = Vec::new();
    let mut from = None;
    for case in p
        .cases
        .iter()
        .filter(|c| c.loss_pcm > 0 && !c.bursty && c.cc == p.main_cc())
    {
        let g = growth(p, cx, orders, case, m);
        let one: Vec<f64> = g
            .iter()
            .filter(|(a, _)| a.one_connection())
            .map(|x| x.1)
            .collect();
        let pool: Vec<f64> = g.iter().filter(|(a, _)| a.pooled()).map(|x| x.1).collect();
        let (Some(o), Some(q)) = (mean(&one), mean(&pool)) else {
            continue;
        };
        said.push(format!(
            "at {} one connection's {which} grew {} and a pool's {}",
            case.name(),
            times(o),
            times(q)
        ));
        if o > q && from.is_none() {
            from = Some(case.name());
        }
    }
    if said.is_empty() {
        return format!(
            "Growth of the {which} with loss not measured on both one connection and a pool ({}).",
            f::MISSING
        );
    }
    let verdict = match from {
        Some(c) => format!("one connection's {which} grows faster than a pool's from {c} on"),
        None => format!(
            "one connection's {which} did not grow faster than a pool's at any loss measured"
        ),
    };
    format!(
        "Against the same transport without loss (mean over the arms): {}; {verdict}.",
        said.join("; ")
    )
}

/// The median call at the highest random loss under the run's algorithm,
/// against none.
pub(super) fn p50_reading(p: &LossPlan, cx: &Context, orders: u32) -> String {
    let Some(worst) = p
        .cases
        .iter()
        .filter(|c| c.loss_pcm > 0 && !c.bursty && c.cc == p.main_cc())
        .max_by_key(|c| c.loss_pcm)
    else {
        return "No random loss under the run's algorithm was measured.".to_owned();
    };
    let mut g = growth(p, cx, orders, worst, Metric::UpP50);
    // As shown (two decimals), ties kept in the plan's order.
    g.sort_by(|a, b| ((a.1 * 100.0).round()).total_cmp(&(b.1 * 100.0).round()));
    match (g.first(), g.last()) {
        (Some(lo), Some(hi)) => format!(
            "At {}, the median call took from {} ({}) to {} ({}) its time without loss: loss reaches the median, not only the tail, when a retransmission's wait is longer than the call.",
            worst.name(),
            times(lo.1),
            lo.0.name(),
            times(hi.1),
            hi.0.name()
        ),
        _ => format!("Not measured with and without loss ({}).", f::MISSING),
    }
}

/// Where the kernels retransmitted most, per call.
pub(super) fn retrans_reading(p: &LossPlan, cx: &Context, orders: u32) -> String {
    let mut most: Option<(String, String, f64)> = None;
    let mut lossless_max: f64 = 0.0;
    for case in &p.cases {
        for arm in p.arms.iter().filter(|a| !a.quic()) {
            let Some(v) = cx.data.median(&p.cell(arm, orders, case), Metric::Retrans) else {
                continue;
            };
            if case.loss_pcm == 0 {
                lossless_max = lossless_max.max(v);
            } else if most.as_ref().is_none_or(|m| v > m.2) {
                most = Some((arm.name(), case.name(), v));
            }
        }
    }
    match most {
        Some((arm, case, v)) => format!(
            "The most: {arm} at {case}, {} segments per 1,000 calls (a call's answer is several segments, so more retransmissions per call mean more of its segments were lost, not more loss); without loss, at most {}.",
            f::num(v),
            f::num(lossless_max)
        ),
        None => format!("Retransmissions were not recorded ({}).", f::MISSING),
    }
}

/// Whether the ranking of the arms by rate at the same loss differs
/// between cubic and bbr.
pub(super) fn cc_reading(p: &LossPlan, cx: &Context, orders: u32) -> String {
    let pair: Vec<&Case> = p
        .cases
        .iter()
        .filter(|c| c.loss_pcm > 0 && !c.bursty)
        .collect();
    let both = |cc: CongestionControl| {
        pair.iter()
            .copied()
            .find(|c| c.cc == cc && pair.iter().any(|o| o.cc != cc && o.loss_pcm == c.loss_pcm))
    };
    let (Some(cubic), Some(bbr)) = (both(CongestionControl::Cubic), both(CongestionControl::Bbr))
    else {
        return "No loss rate was measured under both cubic and bbr.".to_owned();
    };
    let rank = |case: &Case| -> Option<Vec<String>> {
        // QUIC's arms run under quinn's own algorithm: not ranked here.
        let mut v: Vec<(String, f64)> = p
            .arms
            .iter()
            .filter(|a| !a.quic())
            .map(|a| {
                Some((
                    a.name(),
                    cx.data.median(&p.cell(a, orders, case), Metric::Rate)?,
                ))
            })
            .collect::<Option<_>>()?;
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        Some(v.into_iter().map(|x| x.0).collect())
    };
    let (Some(rc), Some(rb)) = (rank(cubic), rank(bbr)) else {
        return format!("The cubic/bbr pair is incomplete ({}).", f::MISSING);
    };
    let gain: Vec<f64> = p
        .arms
        .iter()
        .filter(|a| !a.quic())
        .filter_map(|a| {
            cx.data
                .ratio(
                    &p.cell(a, orders, bbr),
                    &p.cell(a, orders, cubic),
                    Metric::Rate,
                )
                .map(|r| r.median)
        })
        .collect();
    format!(
        "At {}% loss, by rate: under cubic {}; under bbr {}: the ranking {} with the algorithm{}.",
        f64::from(cubic.loss_pcm) / 1000.0,
        rc.join(" > "),
        rb.join(" > "),
        if rc == rb {
            "does not change"
        } else {
            "changes"
        },
        match mean(&gain) {
            Some(g) => format!(", and bbr's rate is {} cubic's on average", times(g)),
            None => String::new(),
        }
    )
}

/// Whether HTTP/3's tail beats one HTTP/2 connection's, the same call on
/// one connection each (`grpc-h3` ×1 against `grpc` ×1, `h3-proto` ×1
/// against `h2c-proto` ×1), at each random loss both ran at: from the
/// ratio of their tails and its rerun interval. `None` without such a
/// pair in the plan.
pub(super) fn quic_reading(p: &LossPlan, cx: &Context, orders: u32, m: Metric) -> Option<String> {
    let which = if m == Metric::UpP99 { "p99" } else { "p99.9" };
    let pairs: Vec<(&Arm, &Arm)> = [
        (transports::GRPC_H3, transports::GRPC),
        (transports::H3_PROTO, transports::H2C_PROTO),
    ]
    .into_iter()
    .filter_map(|(q, h)| {
        let find = |via: &str| p.arms.iter().find(|a| a.via == via && a.pool == 1);
        Some((find(q)?, find(h)?))
    })
    .collect();
    if pairs.is_empty() {
        return None;
    }
    let mut said = Vec::new();
    for case in p
        .cases
        .iter()
        .filter(|c| !c.bursty && pairs.iter().all(|(q, h)| q.runs_in(c) && h.runs_in(c)))
    {
        for (q, h) in &pairs {
            let r = cx
                .data
                .ratio(&p.cell(q, orders, case), &p.cell(h, orders, case), m);
            said.push(match r {
                Some(r) => format!(
                    "at {} {}'s {which} was {} {}'s, {}",
                    case.name(),
                    q.name(),
                    f::ratio(Some(r)),
                    h.name(),
                    crate::experiments::tables::verdict(&r)
                ),
                None => format!(
                    "at {} {} against {}: {}",
                    case.name(),
                    q.name(),
                    h.name(),
                    f::MISSING
                ),
            });
        }
    }
    if said.is_empty() {
        return Some(format!(
            "HTTP/3 and one HTTP/2 connection were not measured at the same loss ({}).",
            f::MISSING
        ));
    }
    Some(format!(
        "HTTP/3 against one HTTP/2 connection, the same call (HTTP/3 encrypted, HTTP/2 not): {}.",
        said.join("; ")
    ))
}
