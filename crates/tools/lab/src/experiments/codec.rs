//! The `codec` experiment: serialization alone, without any network.
//!
//! It runs the criterion benchmark `crates/libs/model/benches/codec.rs` (serde_json
//! against prost, typed v2 and all-strings v1, from and to the wire type and
//! the domain type) with its output directory inside the run's results
//! (`criterion/`), reads criterion's own estimates back, and keeps them in
//! `bench/codec.json`. The report's tables then sit beside the end-to-end ones, so
//! a reader can see how much of a transport's difference the encoding alone
//! explains.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::bail;
use serde::{Deserialize, Serialize};

use crate::experiment::{Context, Experiment, Knobs};
use crate::measure::human_duration;
use crate::measure::is_interrupted;
use crate::measure::schedule::{Bench, Schedule};
use crate::report::format::{self as f, MISSING};
use crate::report::value::{Form, Value};
use crate::report::{Section, Table};
use crate::stats::{Noise, Spread, paired_ratios, rerun_interval};

pub struct Codec;

/// Which sizes, and how long criterion runs each benchmark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodecPlan {
    /// Orders per page: the payload experiment's sizes.
    pub sizes: Vec<u32>,
    pub quick: bool,
}

impl Experiment for Codec {
    type Plan = CodecPlan;
    const NAME: &'static str = "codec";
    const ABOUT: &'static str = "Serialization alone, no network: the criterion benchmark (the type-fix and RestTemplate posts)";

    fn target() -> Result<(), &'static str> {
        Err("it is a benchmark of this machine's code, not of services")
    }

    fn plan(knobs: &Knobs) -> CodecPlan {
        CodecPlan {
            sizes: crate::experiments::payload::plan(knobs).sizes,
            quick: knobs.quick,
        }
    }

    fn schedule(p: &CodecPlan) -> Schedule {
        let p = p.clone();
        Schedule::Bench(Bench {
            run: Box::new(move |b| {
                let run = run(&b.root, &b.out, &p.sizes, p.quick, b.rounds, &b.stop)?;
                Ok(serde_json::to_value(run)?)
            }),
        })
    }

    fn describe(p: &CodecPlan) -> String {
        let (w, m) = timing(p.quick);
        format!(
            "criterion at sizes {:?}, {} s warm-up + {} s per benchmark, once per round (about {} a round)",
            p.sizes,
            f::num(w),
            f::num(m),
            human_duration((w + m) * 12.0 * p.sizes.len() as f64)
        )
    }

    fn section(p: &CodecPlan, cx: &Context) -> Section {
        match cx.bench::<CodecRun>(Codec::NAME) {
            Ok(run) => section(run.as_ref(), &p.sizes),
            Err(e) => {
                let mut s = section(None, &p.sizes);
                s.para(format!("The benchmark's result could not be read: {e:#}."));
                s
            }
        }
    }
}

/// The encodings the benchmark compares, in table order, with their labels.
pub const FORMATS: [(&str, &str); 4] = [
    ("json", "JSON"),
    ("proto-v2", "protobuf v2 (typed)"),
    ("proto-v1", "protobuf v1 (all strings)"),
    ("proto-buffa", "protobuf v2 on buffa (Connect's runtime)"),
];

/// One benchmark's result, as criterion estimated it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodecRecord {
    /// `encode` or `decode`.
    pub op: String,
    /// `json`, `proto-v2`, `proto-v1` or `proto-buffa` (the same bytes as
    /// `proto-v2`, on connect-rust's runtime).
    pub format: String,
    /// `wire` (the wire type alone) or `domain` (with the conversion).
    pub stage: String,
    pub orders: u32,
    /// Median time per iteration, and criterion's 95% confidence interval
    /// of that median, in nanoseconds.
    pub median_ns: f64,
    pub lower_ns: f64,
    pub upper_ns: f64,
    /// Which run of the benchmark (1-based): the experiment runs criterion
    /// once per round, as the end-to-end cells are measured once per round.
    #[serde(default = "first_round")]
    pub round: u32,
}

fn first_round() -> u32 {
    1
}

/// What a `codec` run left: its command line, the estimates, or why it failed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CodecRun {
    pub command: String,
    pub warm_up_s: f64,
    pub measurement_s: f64,
    pub records: Vec<CodecRecord>,
    /// Set when the benchmark could not run or its output could not be read.
    pub error: Option<String>,
}

impl CodecRun {
    /// The rounds the records cover (1 for a run made before rounds).
    pub fn rounds(&self) -> u32 {
        self.records.iter().map(|r| r.round).max().unwrap_or(1)
    }

    fn get(
        &self,
        op: &str,
        format: &str,
        stage: &str,
        orders: u32,
        round: u32,
    ) -> Option<&CodecRecord> {
        self.records.iter().find(|r| {
            r.op == op
                && r.format == format
                && r.stage == stage
                && r.orders == orders
                && r.round == round
        })
    }

    /// One benchmark's medians, round by round.
    fn series(&self, op: &str, format: &str, stage: &str, orders: u32) -> Vec<Option<f64>> {
        (1..=self.rounds())
            .map(|k| self.get(op, format, stage, orders, k).map(|r| r.median_ns))
            .collect()
    }

    /// The median over rounds of one benchmark.
    fn median(&self, op: &str, format: &str, stage: &str, orders: u32) -> Option<f64> {
        Spread::of_rounds(&self.series(op, format, stage, orders)).map(|s| s.median)
    }

    /// Encode plus decode, both with the domain conversion (what one hop
    /// costs a caller and a callee together), round by round.
    fn round_trips(&self, format: &str, orders: u32) -> Vec<Option<f64>> {
        self.series("encode", format, "domain", orders)
            .into_iter()
            .zip(self.series("decode", format, "domain", orders))
            .map(|(e, d)| Some(e? + d?))
            .collect()
    }

    /// The median round trip over rounds.
    fn round_trip(&self, format: &str, orders: u32) -> Option<f64> {
        Spread::of_rounds(&self.round_trips(format, orders)).map(|s| s.median)
    }

    /// A round trip over JSON's, round by round, with its 95% rerun
    /// interval: the noise of round trips is pooled over every format and
    /// size of the run, as the end-to-end ratios pool theirs over an
    /// experiment's cells ([`crate::stats::rerun_interval`]).
    fn round_trip_ratio(&self, format: &str, base: &str, orders: u32) -> Option<Spread> {
        let sizes: BTreeSet<u32> = self.records.iter().map(|r| r.orders).collect();
        let rows: Vec<Vec<Option<f64>>> = sizes
            .iter()
            .flat_map(|&n| FORMATS.iter().map(move |(fmt, _)| (n, *fmt)))
            .map(|(n, fmt)| self.round_trips(fmt, n))
            .collect();
        let noise = Noise::pooled(&rows);
        rerun_interval(
            &paired_ratios(
                &self.round_trips(format, orders),
                &self.round_trips(base, orders),
            ),
            Noise::pair(noise, noise),
        )
    }
}

/// Criterion's warm-up and measurement seconds per benchmark.
pub fn timing(quick: bool) -> (f64, f64) {
    if quick { (0.5, 1.0) } else { (1.0, 3.0) }
}

/// A regex that criterion matches against `group/function/param` ids to
/// keep only the given sizes.
pub fn size_filter(sizes: &[u32]) -> String {
    let alts: Vec<String> = sizes.iter().map(u32::to_string).collect();
    format!("/({})$", alts.join("|"))
}

/// Runs the benchmark `rounds` times (at least once) with `cargo bench`,
/// criterion writing under `out/criterion/r1`, `r2`..., and reads its
/// estimates. A failure is recorded in the returned run (and reported), not
/// raised: the end-to-end cells of the same run stay usable. Ctrl-C
/// (`stop`) is the exception: it is returned as [`Interrupted`].
pub fn run(
    root: &Path,
    out: &Path,
    sizes: &[u32],
    quick: bool,
    rounds: u32,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<CodecRun> {
    let (warm_up_s, measurement_s) = timing(quick);
    let filter = size_filter(sizes);
    let args: Vec<String> = [
        "bench",
        "-p",
        "model",
        "--bench",
        "codec",
        "--",
        "--warm-up-time",
        &f::num(warm_up_s),
        "--measurement-time",
        &f::num(measurement_s),
        "--noplot",
        &filter,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let mut run = CodecRun {
        command: format!("cargo {}", args.join(" ")),
        warm_up_s,
        measurement_s,
        ..CodecRun::default()
    };
    let rounds = rounds.max(1);
    for round in 1..=rounds {
        // A directory per round: criterion would otherwise compare each
        // round with the last instead of starting afresh.
        let home = out.join("criterion").join(format!("r{round}"));
        let log = out.join("logs").join(format!("codec-r{round}.log"));
        println!("codec round {round}/{rounds}");
        let read = match crate::measure::criterion::run(root, &args, &home, &log, "codec", stop) {
            Ok(()) => read_estimates(&home).and_then(|r| {
                if r.is_empty() {
                    bail!("criterion wrote no estimates under {}", home.display())
                }
                Ok(r)
            }),
            Err(e) if is_interrupted(&e) => return Err(e),
            Err(e) => Err(e),
        };
        match read {
            Ok(records) => run
                .records
                .extend(records.into_iter().map(|r| CodecRecord { round, ..r })),
            Err(e) => {
                // The rounds already read stay in the report.
                eprintln!("codec: {e:#}");
                run.error = Some(format!("round {round}: {e:#}"));
                break;
            }
        }
    }
    Ok(run)
}

/// Every codec estimate criterion wrote under `home`.
pub fn read_estimates(home: &Path) -> anyhow::Result<Vec<CodecRecord>> {
    let mut out: Vec<CodecRecord> = crate::measure::criterion::read(home)?
        .into_iter()
        .filter_map(|e| {
            let (format, stage) = e.function.as_deref()?.split_once('/')?;
            Some(CodecRecord {
                op: e.group,
                format: format.to_owned(),
                stage: stage.to_owned(),
                orders: e.value.as_deref()?.parse().ok()?,
                median_ns: e.median_ns,
                lower_ns: e.lower_ns,
                upper_ns: e.upper_ns,
                round: 1,
            })
        })
        .collect();
    out.sort_by(|a, b| {
        (a.orders, &a.op, &a.format, &a.stage).cmp(&(b.orders, &b.op, &b.format, &b.stage))
    });
    Ok(out)
}

/// A benchmark's median over rounds with the rounds' range; with one
/// round, with criterion's 95% confidence interval of its median.
fn cell(run: &CodecRun, op: &str, format: &str, stage: &str, n: u32) -> Value {
    let Some(s) = Spread::of_rounds(&run.series(op, format, stage, n)) else {
        return Value::missing("the benchmark left no estimate for this size");
    };
    let s = match (s.n, run.get(op, format, stage, n, 1)) {
        (1, Some(r)) => Spread {
            min: r.lower_ns,
            max: r.upper_ns,
            ..s
        },
        _ => s,
    };
    Value::figure(Some(s), "ns", Form::Time)
}

/// A time in nanoseconds with no spread.
fn time(ns: Option<f64>) -> Value {
    match ns {
        None => Value::missing("the benchmark left no estimate for this size"),
        Some(v) => Value::figure(Some(Spread::single(v)), "ns", Form::Time),
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// The report section: one table per size.
fn section(run: Option<&CodecRun>, sizes: &[u32]) -> Section {
    let mut s = Section::new("codec", "Serialization alone (criterion)");
    s.para(
        "The encoding without any network: serde_json against prost for the same orders, typed \
         (`order.v2`) and all-strings (`order.v1`), timed by criterion in one process. `wire` is \
         the wire type alone (the type-fix post's \"use the generated message directly\"); `domain` adds \
         the conversion each service does between its domain type and the wire type, as \
         order-service and user-service do on every call (the RestTemplate post's micro-test). The round trip \
         is encode plus decode, both with the conversion: what one hop costs its two ends. The \
         benchmark runs once per round, as the end-to-end cells do: a cell is the median of the \
         rounds' medians ± half their range (with one round, ± half criterion's 95% confidence \
         interval), and a ratio is computed round by round with its 95% rerun interval.",
    );
    let Some(run) = run else {
        s.para(
            "Not measured in this run: the results directory has no bench/codec.json (the run \
             stopped before the benchmark, or predates it).",
        );
        return s;
    };
    s.para(format!(
        "Command: `{}` ({} s warm-up, {} s measurement per benchmark), run {} time(s), once \
         per round; criterion's files are in this run's `criterion/r1`, `r2`… directories.",
        run.command,
        f::num(run.warm_up_s),
        f::num(run.measurement_s),
        run.rounds()
    ));
    if let Some(e) = &run.error {
        s.para(format!(
            "The benchmark failed ({e}): the tables hold the rounds that finished before, if any."
        ));
    }
    for &n in sizes {
        let mut t = Table {
            caption: format!("Serialization of {}, time per page", f::orders(n)),
            headers: [
                "encoding",
                "encode, wire",
                "encode, domain",
                "decode, wire",
                "decode, domain",
                "round trip, domain",
            ]
            .iter()
            .map(|h| (*h).to_owned())
            .collect(),
            ..Table::default()
        };
        for (format, label) in FORMATS {
            let rt = run.round_trip(format, n);
            let rt_cell = match (format, run.round_trip_ratio(format, "json", n)) {
                ("json", _) => Value::parts(vec![time(rt), Value::Baseline]),
                (_, r) => Value::parts(vec![time(rt), Value::ratio(r)]),
            };
            t.rows.push(vec![
                label.into(),
                cell(run, "encode", format, "wire", n),
                cell(run, "encode", format, "domain", n),
                cell(run, "decode", format, "wire", n),
                cell(run, "decode", format, "domain", n),
                rt_cell,
            ]);
        }
        t.reading = reading(run, n);
        s.table(t);
    }
    s
}

/// The table's one line, from its own numbers.
fn reading(run: &CodecRun, n: u32) -> String {
    // The table's own ratios (medians of the rounds' ratios), two decimals
    // as every ratio in the report.
    let v2 = run
        .round_trip_ratio("proto-v2", "json", n)
        .map(|s| s.median);
    let v1 = run
        .round_trip_ratio("proto-v1", "json", n)
        .map(|s| s.median);
    let direct = ratio(
        run.median("encode", "proto-v2", "domain", n),
        run.median("encode", "proto-v2", "wire", n),
    );
    let runtime = run
        .round_trip_ratio("proto-buffa", "proto-v2", n)
        .map(|s| s.median);
    let runtime = match runtime {
        Some(r) if r < 1.0 => format!(
            " The same typed messages on buffa take ×{r:.2} of prost's round trip: the runtime \
             alone makes a Connect transport's codec {:.0}% cheaper.",
            (1.0 - r) * 100.0
        ),
        Some(r) => format!(
            " The same typed messages on buffa take ×{r:.2} of prost's round trip: the runtime \
             alone makes a Connect transport's codec {:.0}% dearer.",
            (r - 1.0) * 100.0
        ),
        None => String::new(),
    };
    match (v2, v1, direct) {
        (Some(v2), Some(v1), Some(direct)) => format!(
            "With conversions, a typed protobuf round trip takes ×{v2:.2} of JSON's and the \
             all-strings v1 ×{v1:.2}; encoding v2 from the domain type costs {direct:.2}× encoding the \
             generated message directly.{runtime}",
        ),
        _ => format!("{MISSING}: the benchmark left no estimates for this size."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, group: &str, function: &str, n: u32, median: f64) {
        let d = dir
            .join(group)
            .join(function.replace('/', "_"))
            .join(n.to_string())
            .join("new");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("benchmark.json"),
            format!(
                r#"{{"group_id":"{group}","function_id":"{function}","value_str":"{n}","throughput":null,"full_id":"x","directory_name":"x","title":"x"}}"#
            ),
        )
        .unwrap();
        std::fs::write(
            d.join("estimates.json"),
            format!(
                r#"{{"mean":{{"point_estimate":1.0,"standard_error":0.1,"confidence_interval":{{"confidence_level":0.95,"lower_bound":0.9,"upper_bound":1.1}}}},"median":{{"point_estimate":{median},"standard_error":0.1,"confidence_interval":{{"confidence_level":0.95,"lower_bound":{},"upper_bound":{}}}}}}}"#,
                median * 0.98,
                median * 1.02
            ),
        )
        .unwrap();
    }

    fn first_table(s: &Section) -> &Table {
        s.tables().next().expect("a table")
    }

    #[test]
    fn estimates_are_read_back_and_tabled_with_ratios_to_json() {
        let dir = std::env::temp_dir().join(format!("lab-codec-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (op, base) in [("encode", 1000.0), ("decode", 2000.0)] {
            for (k, (format, _)) in FORMATS.iter().enumerate() {
                for (j, stage) in ["wire", "domain"].iter().enumerate() {
                    let v = base * (1.0 + k as f64) * (1.0 + j as f64);
                    write(&dir, op, &format!("{format}/{stage}"), 1000, v);
                }
            }
        }
        // An older run's files are ignored.
        std::fs::create_dir_all(dir.join("encode/json_wire/1000/base")).unwrap();
        let records = read_estimates(&dir).unwrap();
        assert_eq!(records.len(), 16);
        let run = CodecRun {
            command: "cargo bench".into(),
            warm_up_s: 1.0,
            measurement_s: 1.0,
            records,
            error: None,
        };
        // JSON: encode domain 2,000 + decode domain 4,000; v2: 4,000 + 8,000.
        assert_eq!(run.round_trip("json", 1000), Some(6000.0));
        assert_eq!(run.round_trip("proto-v2", 1000), Some(12000.0));
        let s = section(Some(&run), &[1000]);
        let t = first_table(&s);
        assert_eq!(t.rows.len(), 4);
        assert_eq!(t.rows[0][1].to_string(), "1.00 µs ±2%");
        // One round: criterion's interval as ±, and no rerun interval.
        assert_eq!(t.rows[1][5].to_string(), "12.0 µs · ×2.00");
        assert!(t.reading.contains("×2.00 of JSON's"), "{}", t.reading);
        // buffa: 8,000 + 16,000 against prost's 12,000.
        assert!(
            t.reading.contains("×2.00 of prost's") && t.reading.contains("100% dearer"),
            "{}",
            t.reading
        );
        let report = crate::report::Report {
            sections: vec![s.clone()],
            ..crate::report::Report::default()
        };
        assert_eq!(report.empty_cells(), Vec::<String>::new());

        // A second round, a little slower for some benchmarks: cells become
        // medians over rounds ± half their range, and the ratio gets an
        // interval around its median.
        let mut two = run.clone();
        two.records.extend(run.records.iter().map(|r| {
            let k = if r.format == "proto-v2" && r.op == "encode" {
                1.1
            } else {
                1.0
            };
            CodecRecord {
                round: 2,
                median_ns: r.median_ns * k,
                ..r.clone()
            }
        }));
        assert_eq!(two.rounds(), 2);
        let s = section(Some(&two), &[1000]);
        let t = first_table(&s);
        // encode, domain for v2: 4,000 and 4,400 ns.
        assert_eq!(t.rows[1][2].to_string(), "4.20 µs ±5%");
        let ratio = t.rows[1][5].ratios();
        assert_eq!(ratio.len(), 1, "{}", t.rows[1][5]);
        // Round 1: 12,000 / 6,000; round 2: 12,400 / 6,000.
        assert!((ratio[0].0 - 2.03).abs() < 0.006, "{ratio:?}");
        assert!(ratio[0].1 < 2.0 && ratio[0].2 > 2.07, "{ratio:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_benchmark_leaves_visible_gaps() {
        let run = CodecRun {
            error: Some("cargo bench failed".into()),
            ..CodecRun::default()
        };
        let s = section(Some(&run), &[1]);
        let t = first_table(&s);
        assert!(t.rows.iter().all(|r| r[1].is_empty()));
        assert!(t.reading.contains(MISSING));
    }

    #[test]
    fn the_size_filter_matches_whole_sizes_only() {
        assert_eq!(size_filter(&[1, 1000]), "/(1|1000)$");
    }
}
