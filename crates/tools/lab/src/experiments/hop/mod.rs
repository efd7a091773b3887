//! The `hop` experiment: the hop alone, without k6 or a front-end request.
//!
//! It runs the criterion benchmark `crates/services/user-service/benches/hop.rs`
//! once per round, as `codec` runs its own: each transport's user-service
//! adapter calling an in-process order-service (in memory) on loopback, at 1
//! and 1,000 orders, with 1 caller and with 8 at once. The report gives the
//! time per call and its ratio to the raw-TCP floor (`tcp-proto`), round by
//! round with a rerun interval whose noise is pooled over the run's cells.
//!
//! Each round then runs the benchmark's paired mode (`HOP_PAIRS`): one
//! caller, each transport timed in short blocks alternating with blocks of
//! the floor, so that the two share the machine's state of the moment. The
//! hop's targets are judged from these paired ratios, which a shared
//! machine's drift over seconds does not move as it moves criterion's
//! figures, measured one transport after another.

use serde::{Deserialize, Serialize};

use crate::stats::{Noise, Spread, paired_ratios, rerun_interval};
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

/// One transport's paired blocks against the floor in one round: each
/// ratio is a block of its calls over the adjacent block of the floor's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairRecord {
    pub via: String,
    pub orders: u32,
    /// Calls per block (each side).
    pub calls: u32,
    pub ratios: Vec<f64>,
    /// µs per call, block by block, the floor's and the transport's.
    pub floor_us: Vec<f64>,
    pub via_us: Vec<f64>,
    pub round: u32,
}

/// What the paired mode writes (`HOP_PAIRS`).
#[derive(Deserialize)]
struct PairsFile {
    pairs: Vec<PairEntry>,
}

#[derive(Deserialize)]
struct PairEntry {
    via: String,
    orders: u32,
    calls: u32,
    ratios: Vec<f64>,
    floor_us: Vec<f64>,
    via_us: Vec<f64>,
}

/// What a hop run left.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HopRun {
    pub command: String,
    pub records: Vec<HopRecord>,
    pub error: Option<String>,
    /// The paired mode's blocks, round by round (absent from runs made
    /// before it existed).
    #[serde(default)]
    pub pairs: Vec<PairRecord>,
    #[serde(default)]
    pub pairs_command: Option<String>,
    #[serde(default)]
    pub pairs_error: Option<String>,
}

impl HopRun {
    /// The paired ratio of `via` to the floor: each round's median over its
    /// blocks, summarised over the rounds (median, lowest and highest
    /// round).
    fn paired(&self, via: &str, orders: u32) -> Option<Spread> {
        let medians: Vec<f64> = self
            .pairs
            .iter()
            .filter(|p| p.via == via && p.orders == orders)
            .filter_map(|p| Some(Spread::of(&p.ratios)?.median))
            .collect();
        Spread::of(&medians)
    }

    /// The floor's µs per call at `orders` in its paired blocks: the median
    /// over every block of every transport and round.
    fn floor_us(&self, orders: u32) -> Option<f64> {
        let blocks: Vec<f64> = self
            .pairs
            .iter()
            .filter(|p| p.orders == orders)
            .flat_map(|p| p.floor_us.iter().copied())
            .collect();
        Some(Spread::of(&blocks)?.median)
    }

    /// Blocks and calls per block of `via` at `orders`, over the rounds.
    fn pair_shape(&self, via: &str, orders: u32) -> Option<(usize, u32)> {
        let mine: Vec<&PairRecord> = self
            .pairs
            .iter()
            .filter(|p| p.via == via && p.orders == orders)
            .collect();
        let calls = mine.iter().map(|p| p.calls).min()?;
        Some((mine.iter().map(|p| p.ratios.len()).sum(), calls))
    }

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

/// The paired mode's pairs of blocks per transport and size, and the aimed
/// length of a block in ms.
pub fn pair_blocks(quick: bool) -> (u32, f64) {
    if quick { (30, 15.0) } else { (80, 15.0) }
}

/// Whether the plan has something to pair: the floor, another transport,
/// and one caller.
fn pairs_planned(p: &HopPlan) -> bool {
    p.callers.contains(&1) && p.vias.iter().any(|v| v == FLOOR) && p.vias.len() > 1
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
        let (blocks, ms) = pair_blocks(p.quick);
        let paired = if pairs_planned(p) {
            ((p.vias.len() - 1) * p.sizes.len()) as f64 * f64::from(blocks) * 2.0 * ms / 1e3
        } else {
            0.0
        };
        format!(
            "criterion, {n} benchmarks of {} s warm-up + {} s, then each transport paired with \
             the floor in {blocks} pairs of ~{} ms blocks, once per round (about {} a round)",
            f::num(w),
            f::num(m),
            f::num(ms),
            human_duration((w + m) * n as f64 + paired)
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
        if pairs_planned(p) && run.pairs_error.is_none() {
            println!("hop round {round}/{rounds}: each transport paired with {FLOOR}");
            let file = home.join("pairs.json");
            let (blocks, ms) = pair_blocks(p.quick);
            let env = [
                ("HOP_PAIRS", file.display().to_string()),
                ("HOP_PAIRS_VIAS", p.vias.join(",")),
                (
                    "HOP_PAIRS_SIZES",
                    p.sizes
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                ),
                ("HOP_PAIRS_BLOCKS", blocks.to_string()),
                ("HOP_PAIRS_BLOCK_MS", f::num(ms)),
            ];
            run.pairs_command = Some(format!(
                "{} cargo bench -p user-service --bench hop",
                env.iter()
                    .filter(|(k, _)| *k != "HOP_PAIRS")
                    .map(|(k, v)| format!("{k}={v}"))
                    .chain(std::iter::once("HOP_PAIRS=FILE".to_owned()))
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
            let log = out.join("logs").join(format!("hop-pairs-r{round}.log"));
            let args: Vec<String> = ["bench", "-p", "user-service", "--bench", "hop"]
                .map(String::from)
                .to_vec();
            let read = match crate::measure::criterion::run_with_env(
                root, &args, &env, &home, &log, "hop", stop,
            ) {
                Ok(()) => read_pairs(&file, round),
                Err(e) if is_interrupted(&e) => return Err(e),
                Err(e) => Err(e),
            };
            match read {
                Ok(found) => run.pairs.extend(found),
                Err(e) => {
                    eprintln!("hop pairs: {e:#}");
                    run.pairs_error = Some(format!("round {round}: {e:#}"));
                }
            }
        }
    }
    Ok(run)
}

/// The paired mode's file, as records of `round`.
fn read_pairs(file: &std::path::Path, round: u32) -> anyhow::Result<Vec<PairRecord>> {
    use anyhow::Context as _;
    let text =
        std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let doc: PairsFile =
        serde_json::from_slice(&text).with_context(|| format!("parsing {}", file.display()))?;
    Ok(doc
        .pairs
        .into_iter()
        .map(|e| PairRecord {
            via: e.via,
            orders: e.orders,
            calls: e.calls,
            ratios: e.ratios,
            floor_us: e.floor_us,
            via_us: e.via_us,
            round,
        })
        .collect())
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
fn paired(p: &HopPlan, run: &HopRun) -> Table {
    let mut t = Table {
        caption: format!(
            "Paired ratios, 1 caller: each transport's blocks alternating with {FLOOR}'s (×, \
             median of the rounds' medians, lowest–highest round)"
        ),
        headers: std::iter::once("transport".to_owned())
            .chain(p.sizes.iter().map(|&n| f::orders(n)))
            .chain(p.sizes.iter().map(|&n| format!("blocks × calls, {}", f::orders(n))))
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
            if let (Some(a), Some(b)) = (run.paired(via, n), rounds) {
                spans.push((format!("{via} at {}", f::orders(n)), a.max - a.min, b.max - b.min));
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
fn targets(p: &HopPlan, run: &HopRun) -> Table {
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
            let why = if in_run { no_pair(run) } else { "not in this run".to_owned() };
            t.rows.push(vec![
                name.into(),
                Value::missing(why.clone()),
                Value::missing(why.clone()),
                Value::missing(why),
            ]);
            continue;
        };
        let verdict = if r.max <= target.limit {
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
        .filter_map(|&n| Some(format!("{} µs at {}", f::num(run.floor_us(n)?), f::orders(n))))
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
        let mut run = HopRun {
            pairs_command: Some("cargo bench".into()),
            ..HopRun::default()
        };
        // Blocks whose median is `r`, with an outlier either side that the
        // median ignores.
        let pair = |via: &str, orders: u32, r: f64, round: u32| PairRecord {
            via: via.into(),
            orders,
            calls: 10,
            ratios: vec![r * 0.5, r, r, r * 3.0, r],
            floor_us: vec![40.0; 5],
            via_us: vec![40.0 * r; 5],
            round,
        };
        for round in 1..=3 {
            // ×2.5 and ×1.5 at 1 order: the best gRPC call (bidi) is within ×2.
            run.pairs.push(pair("grpc", 1, 2.5, round));
            run.pairs.push(pair("grpc-bidi", 1, 1.5, round));
            // ×1.5: over h1-proto's ×1.3.
            run.pairs.push(pair("h1-proto", 1, 1.5, round));
            // ×1.1 and ×1.2 at 1,000; in the third round grpc reaches ×1.2.
            let g = if round == 3 { 1.2 } else { 1.1 };
            run.pairs.push(pair("grpc", 1_000, g, round));
            run.pairs.push(pair("grpc-bidi", 1_000, 1.2, round));
            // criterion's figures say otherwise: they are not what is judged.
            run.records.push(rec(1, "h1-proto", 1, 40.0, round));
            run.records.push(rec(1, FLOOR, 1, 40.0, round));
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
        assert!(matches!(&row("h1-proto at 1 order")[3], Value::Text { text } if text == "no: ×1.500 over ×1.30"));
        assert!(
            matches!(&row("grpc at 1,000")[3], Value::Text { text } if text.starts_with("yes by the median"))
        );
        assert!(matches!(&best[3], Value::Text { text } if text == "yes, every round"));
        assert!(matches!(&row("grpc-bidi at 1,000")[3], Value::Text { text } if text.starts_with("no: ×1.200")));
        // Not in the plan: no figure, and said so.
        assert!(
            matches!(&row("best of h2c-proto,")[1], Value::Missing { reason } if reason == "not in this run")
        );
        // In the run but without blocks: the reason says so.
        assert!(matches!(&row("h1-proto at 1,000")[1], Value::Missing { reason } if reason == "no blocks for it"));
        assert!(t.reading.starts_with("2 of 12 "), "{}", t.reading);
        assert!(t.reading.contains("8 not measured"), "{}", t.reading);
        // The paired table reads the same blocks: grpc at 1,000 spans
        // 1.1–1.2 over the rounds.
        let pt = paired(&p, &run);
        let grpc = pt.rows.iter().find(|r| matches!(&r[0], Value::Text { text } if text == "grpc")).unwrap();
        assert_eq!(grpc[2].ratios(), vec![(1.1, 1.1, 1.2)]);
        assert!(matches!(&grpc[3], Value::Text { text } if text == "15 × 10"));
        assert!(t.reading.contains("2 missed"), "{}", t.reading);
        // The floor's µs, from its blocks: 40 µs in every block above.
        assert!(
            t.reading.contains("took 40.0 µs at 1 order and 40.0 µs at 1,000 orders"),
            "{}",
            t.reading
        );
        // grpc-bidi missed at 1,000, but no twin of it ran: nothing said of one.
        assert!(!t.reading.contains("twin"), "{}", t.reading);
    }

    #[test]
    fn a_stock_miss_is_set_beside_its_twin_when_the_twin_met_it() {
        let vias = [
            transports::GRPC,
            transports::GRPC_TUNED,
            transports::GRPC_STREAM,
            transports::GRPC_STREAM_TUNED,
            FLOOR,
        ];
        let p = HopPlan {
            vias: vias.iter().map(|v| (*v).to_owned()).collect(),
            sizes: vec![1_000],
            callers: vec![1],
            quick: true,
        };
        let mut run = HopRun {
            pairs_command: Some("cargo bench".into()),
            ..HopRun::default()
        };
        let pair = |via: &str, r: f64, round: u32| PairRecord {
            via: via.into(),
            orders: 1_000,
            calls: 10,
            ratios: vec![r; 3],
            floor_us: vec![2_000.0; 3],
            via_us: vec![2_000.0 * r; 3],
            round,
        };
        for round in 1..=2 {
            // grpc misses and its twin meets; both stream transports miss.
            run.pairs.push(pair("grpc", 1.2, round));
            run.pairs.push(pair("grpc-tuned", 1.05, round));
            run.pairs.push(pair("grpc-stream", 1.3, round));
            run.pairs.push(pair("grpc-stream-tuned", 1.16, round));
        }
        let t = targets(&p, &run);
        // The other typed-protobuf transports' targets were not in this run.
        assert!(t.reading.starts_with("1 of 9 targets met by the median, 3 missed"), "{}", t.reading);
        assert!(
            t.reading
                .contains("met by its tuned twin (grpc ×1.20 against grpc-tuned ×1.05 at 1,000 orders)"),
            "{}",
            t.reading
        );
        assert!(!t.reading.contains("grpc-stream ×"), "{}", t.reading);
    }
}
