//! The hop's section: time per call and its ratio to the floor, the paired
//! ratios, and the hop's targets judged from them.

use super::{FLOOR, Hop, HopPlan, HopRun, pairs_planned};
use crate::experiment::Experiment;
use crate::report::format::{self as f, MISSING};
use crate::report::value::Value;
use crate::report::{Section, Table};
use crate::stats::{Spread, paired_ratios};

pub(super) fn section(p: &HopPlan, run: Option<&HopRun>) -> Section {
    let mut s = Section::new(
        Hop::NAME,
        "The hop alone: each transport without k6 (criterion)",
    );
    s.para(format!(
        "Each transport's user-service adapter called directly, against order-service in the \
         same process (in memory, its own 2-thread runtime) on loopback: no k6, no front-end \
         request, no re-encoding for a client. A call is checked (every order asked for). Each \
         caller is a task, as user-service makes a call inside a request's task. With 8 \
         callers the time per call is an iteration's time over 8 (the inverse of the \
         throughput). `×` is the ratio to {FLOOR}, the raw-TCP floor, round by round, with its \
         95% rerun interval. {}",
        match run {
            Some(r) => format!(
                "{} round{} of `{}`; criterion's files are in this run's `criterion-hop/` directory.",
                r.rounds(),
                if r.rounds() == 1 { "" } else { "s" },
                r.command
            ),
            None => "The benchmark did not run.".to_owned(),
        }
    ));
    if let Some(note) = crate::experiments::tables::quic_note(&p.vias) {
        s.para(note);
    }
    let Some(run) = run else {
        return s;
    };
    if let Some(e) = &run.error {
        s.para(format!("The benchmark failed: {e}"));
    }
    for &callers in &p.callers {
        let mut t = Table {
            caption: format!(
                "µs per call, {} (× {FLOOR})",
                if callers == 1 {
                    "1 caller".to_owned()
                } else {
                    format!("{callers} callers at once")
                }
            ),
            headers: std::iter::once("transport".to_owned())
                .chain(p.sizes.iter().map(|&n| f::orders(n)))
                .collect(),
            ..Table::default()
        };
        for via in &p.vias {
            let mut row = vec![via.clone().into()];
            for &n in &p.sizes {
                let fig = Value::range(Spread::of_rounds(&run.series(callers, via, n)), "µs");
                let ratio = if via == FLOOR {
                    Value::Baseline
                } else {
                    Value::ratio(run.ratio(p, callers, via, n))
                };
                row.push(Value::parts(vec![fig, ratio]));
            }
            t.rows.push(row);
        }
        t.reading = reading(p, run, callers);
        s.table(t);
    }
    if pairs_planned(p) {
        s.table(paired(p, run));
    }
    if p.callers.contains(&1) {
        s.table(targets(p, run));
    }
    s
}

/// Why a transport has no paired ratio.
fn no_pair(run: &HopRun) -> String {
    match &run.pairs_error {
        Some(e) => format!("the paired measurement failed: {e}"),
        None if run.pairs_command.is_none() => "the paired measurement did not run".to_owned(),
        None => "no blocks for it".to_owned(),
    }
}

/// The paired ratios, 1 caller: each transport's blocks over the floor's
/// adjacent blocks, the median per round, summarised over the rounds.
pub(super) fn paired(p: &HopPlan, run: &HopRun) -> Table {
    let mut t = Table {
        caption: format!(
            "Paired ratios, 1 caller: each transport's blocks alternating with {FLOOR}'s (×, \
             median of the rounds' medians, 95% rerun interval)"
        ),
        headers: std::iter::once("transport".to_owned())
            .chain(p.sizes.iter().map(|&n| f::orders(n)))
            .chain(
                p.sizes
                    .iter()
                    .map(|&n| format!("blocks × calls, {}", f::orders(n))),
            )
            .collect(),
        ..Table::default()
    };
    for via in p.vias.iter().filter(|v| *v != FLOOR) {
        let mut row = vec![via.clone().into()];
        for &n in &p.sizes {
            row.push(match run.paired(via, n) {
                Some(r) => Value::ratio(Some(r)),
                None => Value::missing(no_pair(run)),
            });
        }
        for &n in &p.sizes {
            row.push(match run.pair_shape(via, n) {
                Some((blocks, calls)) => format!("{blocks} × {calls}").into(),
                None => Value::missing(no_pair(run)),
            });
        }
        t.rows.push(row);
    }
    t.reading = paired_reading(p, run);
    t
}

/// How far paired ratios and criterion's ratios of the same run differ.
fn paired_reading(p: &HopPlan, run: &HopRun) -> String {
    let mut spans: Vec<(String, f64, f64)> = Vec::new();
    for via in p.vias.iter().filter(|v| *v != FLOOR) {
        for &n in &p.sizes {
            // criterion's ratio round by round, lowest to highest round.
            let rounds = Spread::of(&paired_ratios(
                &run.series(1, via, n),
                &run.series(1, FLOOR, n),
            ));
            if let (Some(a), Some(b)) = (run.paired_range(via, n), rounds) {
                spans.push((
                    format!("{via} at {}", f::orders(n)),
                    a.max - a.min,
                    b.max - b.min,
                ));
            }
        }
    }
    if spans.is_empty() {
        return format!("{MISSING}: {}.", no_pair(run));
    }
    let med = |f: &dyn Fn(&(String, f64, f64)) -> f64| {
        Spread::of(&spans.iter().map(f).collect::<Vec<_>>()).map_or(f64::NAN, |s| s.median)
    };
    let (paired_w, crit_w) = (med(&|s| s.1), med(&|s| s.2));
    format!(
        "Across the rounds, a paired ratio's lowest and highest round are {} apart (median over \
         the transports and sizes); criterion's ratios of the same run, round by round, {} \
         apart{}.",
        f::num(paired_w),
        f::num(crit_w),
        if run.rounds() < 2 {
            " (one round: no spread to compare)".to_owned()
        } else if paired_w < crit_w {
            format!(
                ": pairing the blocks narrows the spread ×{}",
                f::num(crit_w / paired_w.max(1e-9))
            )
        } else {
            ": pairing did not narrow it in this run".to_owned()
        }
    )
}

/// A ceiling on one caller's time per call, as a ratio to the floor: the
/// best of `vias` (those in the plan) at `orders` must be at most `limit`.
struct Target {
    vias: &'static [&'static str],
    orders: u32,
    limit: f64,
}

const TYPED_PROTOBUF: [&str; 9] = [
    transports::H1_PROTO,
    transports::H2C_PROTO,
    transports::H2C_PROTO_TUNED,
    transports::GRPC,
    transports::GRPC_TUNED,
    transports::GRPC_STREAM,
    transports::GRPC_STREAM_TUNED,
    transports::GRPC_BIDI,
    transports::GRPC_BIDI_TUNED,
];

/// The targets the hop is held to, 1 caller, as ratios to the floor: the
/// best gRPC call, and the better of HTTP/2 with a protobuf body and its
/// tuned twin, within ×2 at 1 order; HTTP/1.1 with protobuf within ×1.3;
/// and every typed-protobuf transport (not `grpc-v1`, whose strings are the
/// point) within ×1.15 at 1,000.
fn target_list() -> Vec<Target> {
    let grpc: &'static [&'static str] = &[
        transports::GRPC,
        transports::GRPC_TUNED,
        transports::GRPC_STREAM,
        transports::GRPC_STREAM_TUNED,
        transports::GRPC_BIDI,
        transports::GRPC_BIDI_TUNED,
    ];
    let mut t = vec![
        Target {
            vias: grpc,
            orders: 1,
            limit: 2.0,
        },
        Target {
            vias: &[transports::H2C_PROTO, transports::H2C_PROTO_TUNED],
            orders: 1,
            limit: 2.0,
        },
        Target {
            vias: &[transports::H1_PROTO],
            orders: 1,
            limit: 1.3,
        },
    ];
    for via in &TYPED_PROTOBUF {
        t.push(Target {
            vias: std::slice::from_ref(via),
            orders: 1_000,
            limit: 1.15,
        });
    }
    t
}

/// Each target with the measured paired ratio (the best transport's, by
/// median) and whether it is met: by the median of the rounds, and by every
/// round.
pub(super) fn targets(p: &HopPlan, run: &HopRun) -> Table {
    let mut t = Table {
        caption: format!("Targets, 1 caller (paired ratios, × {FLOOR})"),
        headers: ["target", "best", "measured", "met"]
            .map(String::from)
            .to_vec(),
        ..Table::default()
    };
    let (mut met, mut missed, mut unknown) = (0, 0, 0);
    // Stock transports that missed a target their tuned twin met.
    let mut twin_met = Vec::new();
    for target in target_list() {
        if !p.sizes.contains(&target.orders) {
            continue;
        }
        let name = format!(
            "{} at {}: ≤ ×{}",
            if target.vias.len() == 1 {
                target.vias[0].to_owned()
            } else {
                format!("best of {}", target.vias.join(", "))
            },
            f::orders(target.orders),
            f::num(target.limit)
        );
        let best = target
            .vias
            .iter()
            .filter(|v| p.vias.iter().any(|w| w == *v))
            .filter_map(|v| Some((*v, run.paired(v, target.orders)?)))
            .min_by(|a, b| a.1.median.total_cmp(&b.1.median));
        let Some((via, r)) = best else {
            unknown += 1;
            let in_run = target.vias.iter().any(|v| p.vias.iter().any(|w| w == *v));
            let why = if in_run {
                no_pair(run)
            } else {
                "not in this run".to_owned()
            };
            t.rows.push(vec![
                name.into(),
                Value::missing(why.clone()),
                Value::missing(why.clone()),
                Value::missing(why),
            ]);
            continue;
        };
        // Every round, from the rounds as they fell (the ratio shown
        // carries its rerun interval).
        let every_round = run
            .paired_range(via, target.orders)
            .is_some_and(|rounds| rounds.max <= target.limit);
        let verdict = if every_round {
            met += 1;
            "yes, every round"
        } else if r.median <= target.limit {
            met += 1;
            "yes by the median; a round reaches past it"
        } else {
            missed += 1;
            if let [stock] = target.vias
                && let Some(twin) = transports::twin_of(stock)
                && p.vias.iter().any(|w| w == twin)
                && let Some(tr) = run.paired(twin, target.orders)
                && tr.median <= target.limit
            {
                twin_met.push(format!(
                    "{stock} ×{} against {twin} ×{} at {}",
                    f::num(r.median),
                    f::num(tr.median),
                    f::orders(target.orders)
                ));
            }
            "no"
        };
        // To three decimals, so that a miss by less than the table's
        // rounding still reads as one.
        let verdict = if verdict == "no" {
            format!("no: ×{:.3} over ×{}", r.median, f::num(target.limit))
        } else {
            verdict.to_owned()
        };
        t.rows.push(vec![
            name.into(),
            via.into(),
            Value::ratio(Some(r)),
            verdict.into(),
        ]);
    }
    // A ratio is only as fixed as the floor it divides by, which moves
    // from machine to machine: say what it was.
    let floor: Vec<String> = p
        .sizes
        .iter()
        .filter_map(|&n| {
            Some(format!(
                "{} µs at {}",
                f::num(run.floor_us(n)?),
                f::orders(n)
            ))
        })
        .collect();
    t.reading = format!(
        "{met} of {} targets met by the median{}{}.{}{}",
        met + missed + unknown,
        if missed > 0 {
            format!(", {missed} missed")
        } else {
            String::new()
        },
        if unknown > 0 {
            format!(", {unknown} not measured in this run")
        } else {
            String::new()
        },
        if twin_met.is_empty() {
            String::new()
        } else {
            format!(
                " Missed by a stock transport and met by its tuned twin ({}): the same call \
                 to the same server, so the difference lies in how tonic or hyper builds and \
                 sets up the client or decodes by default, not in the protocol.",
                twin_met.join("; ")
            )
        },
        if floor.is_empty() {
            String::new()
        } else {
            format!(
                " The floor's own call in these blocks took {} (median): a ratio to it moves \
                 with it from one machine to another.",
                floor.join(" and ")
            )
        }
    );
    t
}

/// The fastest and slowest transport over the floor, per size.
fn reading(p: &HopPlan, run: &HopRun, callers: u32) -> String {
    let parts: Vec<String> = p
        .sizes
        .iter()
        .map(|&n| {
            let mut r: Vec<(&String, f64)> = p
                .vias
                .iter()
                .filter(|v| *v != FLOOR)
                .filter_map(|v| Some((v, run.ratio(p, callers, v, n)?.median)))
                .collect();
            r.sort_by(|a, b| a.1.total_cmp(&b.1));
            match (r.first(), r.last()) {
                (Some(lo), Some(hi)) => format!(
                    "at {}: closest to the floor {} (×{}), furthest {} (×{})",
                    f::orders(n),
                    lo.0,
                    f::num(lo.1),
                    hi.0,
                    f::num(hi.1)
                ),
                _ => format!("at {}: {MISSING} (no ratio to {FLOOR})", f::orders(n)),
            }
        })
        .collect();
    format!("{}.", parts.join("; "))
}
