//! `breakdown`: where one call's time goes, per transport and size.
//! order-service gives its own account of each answer (its store, its
//! encoding, its total) and user-service adds its decoding; what remains of
//! the round trip is the wire and its framing.

use serde::{Deserialize, Serialize};

use crate::experiment::{Context, Experiment, Knobs};
use crate::experiments::tables::method;
use crate::measure::cell::{Cell, Env};
use crate::measure::figures::{Metric, Part};
use crate::measure::schedule::Schedule;
use crate::report::format::{self as f, MISSING};
use crate::report::svg::{self, BarChart};
use crate::report::value::Value;
use crate::report::{Chart, Section, Table};

pub struct Breakdown;

/// One caller on one connection: each call's parts without queueing behind
/// another's.
pub const VUS: u32 = 1;
pub const POOL: u16 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BreakdownPlan {
    pub transports: Vec<String>,
    pub sizes: Vec<u32>,
}

impl BreakdownPlan {
    /// A transport at a size, one caller, parts timed.
    pub fn cell(via: &str, orders: u32) -> Cell {
        Cell::closed(via, orders, VUS, POOL).with_env(Env {
            breakdown: true,
            ..Env::default()
        })
    }

    pub fn cells(&self) -> Vec<Cell> {
        let mut v = Vec::new();
        for &n in &self.sizes {
            for via in &self.transports {
                v.push(Self::cell(via, n));
            }
        }
        v
    }
}

/// The parts a round trip is split into, in the order they are stacked,
/// with their names in the report. "order-service, other" is its total
/// less its store and encoding: reading the request, routing, framing.
const SHARES: [(&str, Share); 5] = [
    ("store", Share::Part(Part::Store)),
    ("encode", Share::Part(Part::Encode)),
    ("order-service, other", Share::ServerOther),
    ("wire and framing", Share::Part(Part::Wire)),
    ("decode", Share::Part(Part::Decode)),
];

#[derive(Debug, Clone, Copy)]
enum Share {
    Part(Part),
    ServerOther,
}

/// The mean of one share over the rounds' medians of the per-round means,
/// µs: means add up, so the five shares make the mean round trip.
fn mean_of(cx: &Context, cell: &Cell, s: Share) -> Option<f64> {
    let mean = |p| cx.data.median(cell, Metric::PartMean(p));
    match s {
        Share::Part(p) => mean(p),
        Share::ServerOther => {
            Some((mean(Part::Total)? - mean(Part::Store)? - mean(Part::Encode)?).max(0.0))
        }
    }
}

/// Each share's percentage of the mean round trip; `None` without parts.
fn shares(cx: &Context, cell: &Cell) -> Option<Vec<f64>> {
    let means: Vec<f64> = SHARES
        .iter()
        .map(|(_, s)| mean_of(cx, cell, *s))
        .collect::<Option<_>>()?;
    let sum: f64 = means.iter().sum();
    (sum > 0.0).then(|| means.iter().map(|m| 100.0 * m / sum).collect())
}

impl Experiment for Breakdown {
    type Plan = BreakdownPlan;
    const NAME: &'static str = "breakdown";
    const ABOUT: &'static str = "Where one call's time goes: order-service's store, encoding and total, the wire, user-service's decoding";

    fn target() -> Result<(), &'static str> {
        Err(
            "it turns on order-service's timing and user-service's breakdown, which only the lab's own services allow",
        )
    }

    fn plan(knobs: &Knobs) -> BreakdownPlan {
        BreakdownPlan {
            transports: knobs.transports(),
            sizes: knobs.sizes(&[1, 1000], &[1, 100, 1000]),
        }
    }

    fn schedule(p: &BreakdownPlan) -> Schedule {
        Schedule::Grid(p.cells())
    }

    fn describe(p: &BreakdownPlan) -> String {
        format!(
            "{} transports, sizes {:?}, one caller, each call's parts timed",
            p.transports.len(),
            p.sizes
        )
    }

    fn section(p: &BreakdownPlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

fn section(p: &BreakdownPlan, cx: &Context) -> Section {
    let mut s = Section::new(Breakdown::NAME, "Where each call's time goes");
    s.para(method(
        cx.timing,
        &format!(
            "Closed loop, {VUS} VU, user-service's pool {POOL} connection per transport, on the \
             run's store ({}). order-service times each answer (`ORDER_SERVER_TIMING`): its \
             store calls; its encoding, from the store's answer to the encoded answer \
             (conversion and serialization); its total, its own time from the request read to \
             the encoded answer handed to the server below it (over gRPC, the time to the \
             response plus the time producing each frame; waits between frames are the wire's). It sends them \
             in a `Server-Timing` header, a gRPC trailer, or a field of a bidi or raw-TCP \
             answer. user-service (`USER_UPSTREAM_BREAKDOWN`) adds its decode-and-convert \
             time; the wire and its framing are what the parts leave of the round trip. \
             These cells carry the account's bytes (14–76 per answer); no byte count in \
             this report is taken from them",
            cx.store
        ),
    ));
    s.table(medians_table(p, cx));
    s.table(shares_table(p, cx));
    for &n in &p.sizes {
        s.chart(chart(p, cx, n));
    }
    s
}

fn medians_table(p: &BreakdownPlan, cx: &Context) -> Table {
    let cols: [(Metric, &str); 8] = [
        (Metric::PartP50(Part::Store), "store"),
        (Metric::PartP50(Part::Encode), "encode"),
        (Metric::PartP50(Part::Total), "order-service total"),
        (Metric::PartP50(Part::Wire), "wire and framing"),
        (Metric::PartP50(Part::Decode), "decode"),
        (Metric::UpP50, "round trip"),
        (Metric::ServerCheck, "store + encode ≤ total"),
        (Metric::ClientCheck, "total + decode ≤ round trip"),
    ];
    let mut headers = vec!["transport, size".to_owned()];
    headers.extend(cols.iter().map(|(_, h)| (*h).to_owned()));
    let mut rows = Vec::new();
    for &n in &p.sizes {
        for via in &p.transports {
            let cell = BreakdownPlan::cell(via, n);
            let mut r = vec![Value::text(format!("{via}, {}", f::orders(n)))];
            r.extend(cols.iter().map(|(m, _)| cx.fig(&cell, *m)));
            rows.push(r);
        }
    }
    Table {
        caption: "Each part's median per call, µs, and the share of answers that pass each check"
            .into(),
        headers,
        rows,
        reading: checks_reading(p, cx),
    }
}

/// How many answers passed both checks, at worst.
fn checks_reading(p: &BreakdownPlan, cx: &Context) -> String {
    let mut worst: Option<(f64, String, &str)> = None;
    let mut seen = 0;
    for cell in p.cells() {
        for (m, check) in [
            (Metric::ServerCheck, "store + encode ≤ total"),
            (Metric::ClientCheck, "total + decode ≤ round trip"),
        ] {
            // The worst round of the cell.
            let Some(v) = cx
                .data
                .values(&cell, m)
                .into_iter()
                .flatten()
                .reduce(f64::min)
            else {
                continue;
            };
            seen += 1;
            if worst.as_ref().is_none_or(|(w, _, _)| v < *w) {
                worst = Some((
                    v,
                    format!("{}, {}", cell.via, f::orders(cell.orders)),
                    check,
                ));
            }
        }
    }
    match worst {
        None => format!("{MISSING}: no cell reported its parts."),
        Some((v, _, _)) if v >= 100.0 => format!(
            "Every answer of every round passed both checks ({seen} cell-checks): the parts \
             fit inside order-service's total and the total and decoding inside the round trip."
        ),
        Some((v, cell, check)) => format!(
            "Not every answer passed: at worst {}% of a round's answers passed \"{check}\" \
             ({cell}). A part's clock that overlaps another's (a store call running \
             while the answer is encoded) would do this.",
            f::num(v)
        ),
    }
}

fn shares_table(p: &BreakdownPlan, cx: &Context) -> Table {
    let mut headers = vec!["transport, size".to_owned()];
    headers.extend(SHARES.iter().map(|(name, _)| format!("{name}, %")));
    headers.push("mean round trip, µs".into());
    let mut rows = Vec::new();
    for &n in &p.sizes {
        for via in &p.transports {
            let cell = BreakdownPlan::cell(via, n);
            let mut r = vec![Value::text(format!("{via}, {}", f::orders(n)))];
            match shares(cx, &cell) {
                Some(sh) => {
                    r.extend(sh.iter().map(|v| Value::single(*v, "%")));
                    let sum: f64 = SHARES
                        .iter()
                        .filter_map(|(_, s)| mean_of(cx, &cell, *s))
                        .sum();
                    r.push(Value::single(sum, "µs"));
                }
                None => r.extend(
                    (0..=SHARES.len()).map(|_| Value::missing("this cell reported no parts")),
                ),
            }
            rows.push(r);
        }
    }
    Table {
        caption: "Shares of the mean round trip, % (means add up; medians do not)".into(),
        headers,
        rows,
        reading: shares_reading(p, cx),
    }
}

/// Per size: the part that takes most of the round trip, and the range of
/// the wire's share over the transports.
fn shares_reading(p: &BreakdownPlan, cx: &Context) -> String {
    let wire = SHARES
        .iter()
        .position(|(name, _)| *name == "wire and framing")
        .unwrap_or(3);
    let parts: Vec<String> = p
        .sizes
        .iter()
        .map(|&n| {
            let got: Vec<(&String, Vec<f64>)> = p
                .transports
                .iter()
                .filter_map(|via| shares(cx, &BreakdownPlan::cell(via, n)).map(|s| (via, s)))
                .collect();
            if got.is_empty() {
                return format!("at {}: {MISSING}", f::orders(n));
            }
            // The largest share, by the number of transports it leads in.
            let mut leads = [0usize; SHARES.len()];
            for (_, s) in &got {
                let top = (0..s.len())
                    .max_by(|&a, &b| s[a].total_cmp(&s[b]))
                    .unwrap_or(0);
                leads[top] += 1;
            }
            let top = (0..leads.len()).max_by_key(|&i| leads[i]).unwrap_or(0);
            // Compared to 0.01 points, the first transport winning a tie,
            // so that a reading does not hang on float noise.
            let key = |s: &[f64]| (s[wire] * 100.0).round() as i64;
            let lo = got
                .iter()
                .min_by_key(|(_, s)| key(s))
                .map(|(v, s)| (*v, s[wire]));
            let hi = got
                .iter()
                .rev()
                .max_by_key(|(_, s)| key(s))
                .map(|(v, s)| (*v, s[wire]));
            let wire_part = match (lo, hi) {
                (Some((lv, l)), Some((hv, h))) if f::num(l) != f::num(h) => format!(
                    "the wire and its framing take {}% ({lv}) to {}% ({hv}) of the round trip",
                    f::num(l),
                    f::num(h)
                ),
                (Some((_, l)), _) => format!(
                    "the wire and its framing take {}% of the round trip on every transport",
                    f::num(l)
                ),
                _ => String::new(),
            };
            format!(
                "at {}, {} is the largest part for {} of {} transports, and {wire_part}",
                f::orders(n),
                SHARES[top].0,
                leads[top],
                got.len(),
            )
        })
        .collect();
    format!(
        "{}.",
        crate::experiments::tables::capitalise(&parts.join("; "))
    )
}

fn chart(p: &BreakdownPlan, cx: &Context, n: u32) -> Chart {
    let title = format!("Where a call's time goes at {}: mean µs", f::orders(n));
    Chart {
        file: format!("breakdown-{n}.svg"),
        title: title.clone(),
        svg: svg::bar_chart(&BarChart {
            title,
            y_label: "µs".into(),
            y_log: false,
            groups: p.transports.clone(),
            series: SHARES.iter().map(|(name, _)| (*name).to_owned()).collect(),
            values: p
                .transports
                .iter()
                .map(|via| {
                    let cell = BreakdownPlan::cell(via, n);
                    SHARES.iter().map(|(_, s)| mean_of(cx, &cell, *s)).collect()
                })
                .collect(),
            stacked: true,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_plan_covers_every_transport_at_one_and_a_thousand_orders() {
        let p = Breakdown::plan(&Knobs {
            quick: true,
            ..Knobs::default()
        });
        assert_eq!(p.transports, transports::ALL);
        assert_eq!(p.sizes, [1, 1000]);
        assert!(p.cells().iter().all(|c| c.env.breakdown && c.pool == POOL));
    }
}
