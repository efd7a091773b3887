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

use crate::experiment::{Context, Experiment, Knobs};
use crate::measure::schedule::{Bench, Schedule};
use crate::measure::{human_duration, is_interrupted};
use crate::report::Section;
use crate::report::format::{self as f};
use crate::stats::{Noise, Spread, paired_ratios, rerun_interval};

mod report;
#[cfg(test)]
mod tests;

use report::section;

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
    /// Each round's median paired ratio of `via` to the floor at `orders`
    /// (`None` for a round without its blocks).
    fn paired_rounds(&self, via: &str, orders: u32) -> Vec<Option<f64>> {
        let rounds = self.pairs.iter().map(|p| p.round).max().unwrap_or(0);
        (1..=rounds)
            .map(|k| {
                let blocks: Vec<f64> = self
                    .pairs
                    .iter()
                    .filter(|p| p.via == via && p.orders == orders && p.round == k)
                    .flat_map(|p| p.ratios.iter().copied())
                    .collect();
                Spread::of(&blocks).map(|s| s.median)
            })
            .collect()
    }

    /// The paired ratio of `via` to the floor: each round's median over its
    /// blocks, summarised over the rounds as their median with a 95% rerun
    /// interval, the round-to-round noise pooled over every transport and
    /// size ([`rerun_interval`]), as every other ratio of the report.
    fn paired(&self, via: &str, orders: u32) -> Option<Spread> {
        let cells: std::collections::BTreeSet<(&str, u32)> = self
            .pairs
            .iter()
            .map(|p| (p.via.as_str(), p.orders))
            .collect();
        let rows: Vec<Vec<Option<f64>>> = cells
            .into_iter()
            .map(|(v, n)| self.paired_rounds(v, n))
            .collect();
        let ratios: Vec<f64> = self
            .paired_rounds(via, orders)
            .into_iter()
            .flatten()
            .collect();
        rerun_interval(&ratios, Noise::pooled(&rows))
    }

    /// [`Self::paired`]'s rounds as they fell: median, lowest and highest
    /// round.
    fn paired_range(&self, via: &str, orders: u32) -> Option<Spread> {
        let ratios: Vec<f64> = self
            .paired_rounds(via, orders)
            .into_iter()
            .flatten()
            .collect();
        Spread::of(&ratios)
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
    let text = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
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
