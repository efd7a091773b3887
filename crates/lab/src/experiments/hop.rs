//! The `hop` experiment: the hop alone, without k6 or a front-end request.
//!
//! It runs the criterion benchmark `crates/user-service/benches/hop.rs`
//! once per round, as `codec` runs its own: each transport's user-service
//! adapter calling an in-process order-service (in memory) on loopback, at 1
//! and 1,000 orders, with 1 caller and with 8 at once. The report gives the
//! time per call and its ratio to the raw-TCP floor (`tcp-proto`), round by
//! round with a rerun interval whose noise is pooled over the run's cells.

use serde::{Deserialize, Serialize};

use crate::analysis::stats::{Noise, Spread, paired_ratios, rerun_interval};
use crate::experiment::{Context, Experiment, Knobs};
use crate::measure::schedule::{Bench, Schedule};
use crate::measure::{human_duration, is_interrupted};
use crate::report::format::{self as f, MISSING};
use crate::report::value::Value;
use crate::report::{Section, Table};

pub struct Hop;

/// The floor every transport is compared with.
pub const FLOOR: &str = transports::TCP_PROTO;

/// What the hop experiment measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HopPlan {
    pub vias: Vec<String>,
    pub sizes: Vec<u32>,
    pub callers: Vec<u32>,
    pub quick: bool,
}

/// One benchmark's median per iteration (an iteration is one call per
/// caller, the callers at once), and criterion's interval of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HopRecord {
    pub callers: u32,
    pub via: String,
    pub orders: u32,
    pub median_ns: f64,
    pub lower_ns: f64,
    pub upper_ns: f64,
    pub round: u32,
}

/// What a hop run left.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HopRun {
    pub command: String,
    pub records: Vec<HopRecord>,
    pub error: Option<String>,
}

impl HopRun {
    fn rounds(&self) -> u32 {
        self.records.iter().map(|r| r.round).max().unwrap_or(1)
    }

    /// µs of wall time per call, round by round: an iteration's time over
    /// its callers (with 8, the inverse of the throughput).
    fn series(&self, callers: u32, via: &str, orders: u32) -> Vec<Option<f64>> {
        (1..=self.rounds())
            .map(|k| {
                self.records
                    .iter()
                    .find(|r| {
                        r.callers == callers && r.via == via && r.orders == orders && r.round == k
                    })
                    .map(|r| r.median_ns / 1e3 / f64::from(callers))
            })
            .collect()
    }

    fn ratio(&self, p: &HopPlan, callers: u32, via: &str, orders: u32) -> Option<Spread> {
        let rows: Vec<Vec<Option<f64>>> = p
            .vias
            .iter()
            .flat_map(|v| p.sizes.iter().map(move |&n| (v, n)))
            .map(|(v, n)| self.series(callers, v, n))
            .collect();
        let noise = Noise::pooled(&rows);
        rerun_interval(
            &paired_ratios(
                &self.series(callers, via, orders),
                &self.series(callers, FLOOR, orders),
            ),
            Noise::pair(noise, noise),
        )
    }
}

/// criterion's warm-up and measurement seconds per benchmark.
pub fn timing(quick: bool) -> (f64, f64) {
    if quick { (0.3, 1.0) } else { (1.0, 3.0) }
}

impl Experiment for Hop {
    type Plan = HopPlan;
    const NAME: &'static str = "hop";
    const ABOUT: &'static str = "The hop alone: each transport's adapter against an in-process order-service, no k6 (criterion)";

    fn target() -> Result<(), &'static str> {
        Err("it is a benchmark of this machine's code, not of services")
    }

    fn plan(knobs: &Knobs) -> HopPlan {
        HopPlan {
            vias: knobs.transports(),
            sizes: vec![1, 1_000],
            callers: vec![1, 8],
            quick: knobs.quick,
        }
    }

    fn schedule(p: &HopPlan) -> Schedule {
        let p = p.clone();
        Schedule::Bench(Bench {
            run: Box::new(move |b| {
                let run = run(&b.root, &b.out, &p, b.rounds, &b.stop)?;
                Ok(serde_json::to_value(run)?)
            }),
        })
    }

    fn describe(p: &HopPlan) -> String {
        let (w, m) = timing(p.quick);
        let n = p.vias.len() * p.sizes.len() * p.callers.len();
        format!(
            "criterion, {n} benchmarks of {} s warm-up + {} s, once per round (about {} a round)",
            f::num(w),
            f::num(m),
            human_duration((w + m) * n as f64)
        )
    }

    fn section(p: &HopPlan, cx: &Context) -> Section {
        match cx.bench::<HopRun>(Hop::NAME) {
            Ok(run) => section(p, run.as_ref()),
            Err(e) => {
                let mut s = Section::new(Hop::NAME, "The hop alone (criterion)");
                s.para(format!("The benchmark's result could not be read: {e:#}."));
                s
            }
        }
    }
}

/// A regex criterion matches against `group/function/value` ids.
fn filter(p: &HopPlan) -> String {
    format!(
        "^hop/({})/({})/({})$",
        p.callers
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join("|"),
        p.vias.join("|"),
        p.sizes
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join("|")
    )
}

/// Runs the benchmark once per round under `out/criterion-hop/rK` and reads
/// its estimates; a failure is recorded in the run, an interruption raised.
pub fn run(
    root: &std::path::Path,
    out: &std::path::Path,
    p: &HopPlan,
    rounds: u32,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> anyhow::Result<HopRun> {
    let (w, m) = timing(p.quick);
    let args: Vec<String> = [
        "bench",
        "-p",
        "user-service",
        "--bench",
        "hop",
        "--",
        "--warm-up-time",
        &f::num(w),
        "--measurement-time",
        &f::num(m),
        "--noplot",
        &filter(p),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let mut run = HopRun {
        command: format!("cargo {}", args.join(" ")),
        ..HopRun::default()
    };
    for round in 1..=rounds.max(1) {
        let home = out.join("criterion-hop").join(format!("r{round}"));
        let log = out.join("logs").join(format!("hop-r{round}.log"));
        println!("hop round {round}/{rounds}");
        let read = match crate::measure::criterion::run(root, &args, &home, &log, "hop", stop) {
            Ok(()) => crate::measure::criterion::read(&home),
            Err(e) if is_interrupted(&e) => return Err(e),
            Err(e) => Err(e),
        };
        match read {
            Ok(found) => run.records.extend(found.into_iter().filter_map(|e| {
                Some(HopRecord {
                    callers: e.group.strip_prefix("hop/")?.parse().ok()?,
                    via: e.function?,
                    orders: e.value?.parse().ok()?,
                    median_ns: e.median_ns,
                    lower_ns: e.lower_ns,
                    upper_ns: e.upper_ns,
                    round,
                })
            })),
            Err(e) => {
                eprintln!("hop: {e:#}");
                run.error = Some(format!("round {round}: {e:#}"));
                break;
            }
        }
    }
    Ok(run)
}

fn section(p: &HopPlan, run: Option<&HopRun>) -> Section {
    let mut s = Section::new(Hop::NAME, "The hop alone: each transport without k6 (criterion)");
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
    if p.callers.contains(&1) {
        s.table(targets(p, run));
    }
    s
}

/// A ceiling on one caller's time per call, as a ratio to the floor: the
/// best of `vias` (those in the plan) at `orders` must be at most `limit`.
struct Target {
    vias: &'static [&'static str],
    orders: u32,
    limit: f64,
}

const TYPED_PROTOBUF: [&str; 7] = [
    transports::H1_PROTO,
    transports::H2C_PROTO,
    transports::H2C_PROTO_TUNED,
    transports::GRPC,
    transports::GRPC_TUNED,
    transports::GRPC_STREAM,
    transports::GRPC_BIDI,
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
        transports::GRPC_BIDI,
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

/// Each target with the measured ratio (the best transport's, by median)
/// and whether it is met: by the median, and by the whole rerun interval.
fn targets(p: &HopPlan, run: &HopRun) -> Table {
    let mut t = Table {
        caption: format!("Targets, 1 caller (× {FLOOR})"),
        headers: ["target", "best", "measured", "met"]
            .map(String::from)
            .to_vec(),
        ..Table::default()
    };
    let (mut met, mut missed, mut unknown) = (0, 0, 0);
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
            .filter_map(|v| Some((*v, run.ratio(p, 1, v, target.orders)?)))
            .min_by(|a, b| a.1.median.total_cmp(&b.1.median));
        let Some((via, r)) = best else {
            unknown += 1;
            t.rows.push(vec![
                name.into(),
                Value::missing("not in this run"),
                Value::missing(NO_RATIO),
                Value::missing(NO_RATIO),
            ]);
            continue;
        };
        let verdict = if r.max <= target.limit {
            met += 1;
            "yes, the whole interval"
        } else if r.median <= target.limit {
            met += 1;
            "yes by the median; the interval reaches past it"
        } else {
            missed += 1;
            "no"
        };
        t.rows.push(vec![
            name.into(),
            via.into(),
            Value::ratio(Some(r)),
            verdict.into(),
        ]);
    }
    t.reading = format!(
        "{met} of {} targets met by the median{}{}.",
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
        }
    );
    t
}

/// Why a target has no figure.
const NO_RATIO: &str = "no ratio to the floor";

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

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(callers: u32, via: &str, orders: u32, us: f64, round: u32) -> HopRecord {
        HopRecord {
            callers,
            via: via.into(),
            orders,
            median_ns: us * 1e3 * f64::from(callers),
            lower_ns: 0.0,
            upper_ns: 0.0,
            round,
        }
    }

    #[test]
    fn times_are_per_call_and_ratios_are_to_the_floor() {
        let p = HopPlan {
            vias: vec!["grpc".into(), FLOOR.into()],
            sizes: vec![1],
            callers: vec![1, 8],
            quick: true,
        };
        let mut run = HopRun::default();
        for round in 1..=2 {
            for callers in [1, 8] {
                run.records.push(rec(callers, "grpc", 1, 100.0, round));
                run.records.push(rec(callers, FLOOR, 1, 40.0, round));
            }
        }
        assert_eq!(run.series(8, "grpc", 1), vec![Some(100.0), Some(100.0)]);
        let r = run.ratio(&p, 1, "grpc", 1).unwrap();
        assert!((r.median - 2.5).abs() < 1e-9, "{r:?}");
        let s = section(&p, Some(&run));
        let md = s
            .blocks
            .iter()
            .find_map(|b| match b {
                crate::report::Block::Table(t) => Some(t.reading.clone()),
                _ => None,
            })
            .unwrap();
        assert!(md.contains("grpc (×2.50)"), "{md}");
        assert!(filter(&p).contains("grpc|tcp-proto"));
    }

    #[test]
    fn targets_are_judged_from_the_ratios() {
        let p = HopPlan {
            vias: vec![
                transports::GRPC.into(),
                transports::GRPC_BIDI.into(),
                transports::H1_PROTO.into(),
                FLOOR.into(),
            ],
            sizes: vec![1, 1_000],
            callers: vec![1],
            quick: true,
        };
        let mut run = HopRun::default();
        for round in 1..=3 {
            // ×2.5 and ×1.5 at 1 order: the best gRPC call (bidi) is within ×2.
            run.records.push(rec(1, "grpc", 1, 100.0, round));
            run.records.push(rec(1, "grpc-bidi", 1, 60.0, round));
            // ×1.5: over h1-proto's ×1.3.
            run.records.push(rec(1, "h1-proto", 1, 60.0, round));
            run.records.push(rec(1, FLOOR, 1, 40.0, round));
            // ×1.1 and ×1.2 at 1,000.
            run.records.push(rec(1, "grpc", 1_000, 1100.0, round));
            run.records.push(rec(1, "grpc-bidi", 1_000, 1200.0, round));
            run.records.push(rec(1, FLOOR, 1_000, 1000.0, round));
        }
        let t = targets(&p, &run);
        let row = |name: &str| {
            t.rows
                .iter()
                .find(|r| matches!(&r[0], Value::Text { text } if text.starts_with(name)))
                .unwrap_or_else(|| panic!("no row {name}"))
                .clone()
        };
        let best = row("best of grpc,");
        assert!(matches!(&best[1], Value::Text { text } if text == "grpc-bidi"));
        assert!(matches!(&best[3], Value::Text { text } if text.starts_with("yes")));
        assert!(matches!(&row("h1-proto at 1 order")[3], Value::Text { text } if text == "no"));
        assert!(
            matches!(&row("grpc at 1,000")[3], Value::Text { text } if text.starts_with("yes"))
        );
        assert!(matches!(&row("grpc-bidi at 1,000")[3], Value::Text { text } if text == "no"));
        // Not in the plan: no figure, and said so.
        assert!(matches!(&row("best of h2c-proto,")[1], Value::Missing { .. }));
        assert!(t.reading.starts_with("2 of 10 "), "{}", t.reading);
        assert!(t.reading.contains("6 not measured"), "{}", t.reading);
        assert!(t.reading.contains("2 missed"), "{}", t.reading);
    }
}
