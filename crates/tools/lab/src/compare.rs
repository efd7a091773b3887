//! `lab compare A B`: does a second run agree with the first within the
//! intervals the first one's report states?
//!
//! Both runs are read from their `report.json`, where every table cell is a
//! typed value, and every ratio (a median with its 95% rerun interval) of
//! every table is paired by section, caption, row, column and its place in
//! the cell. Before the numbers it says where the two runs differ in what
//! should not differ: the machine, the commit, the plans, the timing. For each pair it checks whether B's
//! median lies inside A's stated range, whether A's lies inside B's, and
//! whether the two ranges overlap. The summary is the honest answer to "is
//! this reproducible?"; the list of the pairs that disagree most says where
//! it is not. The intervals are 95% ones ([`crate::stats::rerun_interval`]):
//! a calibrated report has about 95% of B's medians inside A's intervals,
//! and the misses spread over sections rather than piling up in one.
//!
//! With `--fail-outside PCT` it is a gate: more than PCT% of B's medians
//! outside A's intervals (or no ratio in common) exits with
//! [`OUTSIDE_THE_BOUND`], listing every ratio outside. With `--max-move X`,
//! so does any ratio whose median moved by more than ×X either way: a
//! gross regression, whatever the intervals say.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::bail;
use serde::Deserialize as _;

use crate::report::value::Value;
use crate::report::{Block, Report};
use crate::session::RunInfo;

/// A ratio as a report states it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stated {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// Two decimals, as every ratio is printed: a value this close to an edge
/// reads as on it.
const PRINTED: f64 = 0.005;

impl Stated {
    fn contains(&self, v: f64) -> bool {
        v >= self.min - PRINTED && v <= self.max + PRINTED
    }

    /// How far `v` is from the median, in half-widths of the interval on
    /// the side it lies (log scale, as the intervals are made): 1 is the
    /// edge. `None` for a ratio with no interval.
    fn reach(&self, v: f64) -> Option<f64> {
        if self.min <= 0.0 || v <= 0.0 || self.median <= 0.0 {
            return None;
        }
        let half = if v >= self.median {
            (self.max / self.median).ln()
        } else {
            (self.median / self.min).ln()
        };
        (half > 0.0).then(|| (v / self.median).ln().abs() / half)
    }

    fn overlaps(&self, o: &Stated) -> bool {
        self.min <= o.max + PRINTED && o.min <= self.max + PRINTED
    }
}

/// Where a ratio sits: section / caption / row / column (and its index
/// when a cell holds several).
type Key = (String, String, String, String, usize);

fn ratios(report: &Report) -> BTreeMap<Key, Stated> {
    let mut out = BTreeMap::new();
    for s in &report.sections {
        for b in &s.blocks {
            let Block::Table(t) = b else { continue };
            for row in &t.rows {
                let name = row.first().map_or("", Value::label).to_owned();
                for (i, cell) in row.iter().enumerate().skip(1) {
                    for (k, (median, min, max)) in cell.ratios().into_iter().enumerate() {
                        // A ratio of a cell to itself agrees by definition.
                        if min == max && (median - 1.0).abs() < 1e-9 {
                            continue;
                        }
                        let col = t.headers.get(i).cloned().unwrap_or_else(|| i.to_string());
                        out.insert(
                            (s.id.clone(), t.caption.clone(), name.clone(), col, k),
                            Stated { median, min, max },
                        );
                    }
                }
            }
        }
    }
    out
}

/// Where two runs differ in what a comparison assumes is the same.
pub fn differences(a: &serde_json::Value, b: &serde_json::Value) -> Vec<String> {
    let (Ok(a), Ok(b)) = (RunInfo::deserialize(a), RunInfo::deserialize(b)) else {
        return vec![
            "a report.json lacks its run's description: machines, commits and plans unchecked"
                .into(),
        ];
    };
    let mut out = Vec::new();
    let (ma, mb) = (&a.machine, &b.machine);
    let machine = |m: &crate::measure::machine::Machine| {
        format!(
            "{} cores, {}, {:.1} GiB, Linux {}",
            m.cores, m.cpu_model, m.memory_gib, m.kernel
        )
    };
    if machine(ma) != machine(mb) {
        out.push(format!(
            "different machines: A {}; B {}",
            machine(ma),
            machine(mb)
        ));
    }
    if (&ma.rustc, &ma.k6) != (&mb.rustc, &mb.k6) {
        out.push(format!(
            "different versions: A {}, {}; B {}, {}",
            ma.rustc, ma.k6, mb.rustc, mb.k6
        ));
    }
    if ma.git_commit != mb.git_commit {
        out.push(format!(
            "different commits: A {}, B {}",
            ma.git_commit, mb.git_commit
        ));
    }
    for (name, m) in [("A", ma), ("B", mb)] {
        if m.git_dirty {
            out.push(format!("{name} ran with uncommitted changes"));
        }
    }
    if a.timing != b.timing {
        out.push(format!(
            "different timing: A {} rounds × {} s after {} s, B {} rounds × {} s after {} s",
            a.timing.rounds,
            a.timing.duration_s,
            a.timing.warmup_s,
            b.timing.rounds,
            b.timing.duration_s,
            b.timing.warmup_s
        ));
    }
    if a.store != b.store {
        out.push(format!("different stores: A {}, B {}", a.store, b.store));
    }
    if a.pinning != b.pinning {
        out.push("different CPU pinning".to_owned());
    }
    if a.knobs.path != b.knobs.path {
        out.push(format!(
            "different network emulation: A {}, B {} (a different environment for rtt, compression and tls)",
            a.knobs.path.name(),
            b.knobs.path.name()
        ));
    }
    // The congestion control each kernel reported on the packet path, else
    // the one the run asked for.
    let cc = |i: &RunInfo| {
        let seen: std::collections::BTreeSet<&String> = i
            .service_env
            .iter()
            .filter(|(k, _)| k.starts_with("path ") && k.ends_with(" tcp_congestion_control"))
            .map(|(_, v)| v)
            .collect();
        if seen.is_empty() {
            i.knobs.cc.name().to_owned()
        } else {
            seen.into_iter().cloned().collect::<Vec<_>>().join("+")
        }
    };
    if cc(&a) != cc(&b) {
        out.push(format!(
            "different TCP congestion control on the packet path: A {}, B {} (a different environment: its cells compare only under the same algorithm)",
            cc(&a),
            cc(&b)
        ));
    }
    for (name, plan) in &a.plans {
        match b.plans.get(name) {
            Some(other) if other != plan => out.push(format!("different plans for {name}")),
            Some(_) => {}
            None => out.push(format!("{name} is in A only")),
        }
    }
    for name in b.plans.keys().filter(|n| !a.plans.contains_key(*n)) {
        out.push(format!("{name} is in B only"));
    }
    out
}

/// The exit status of `lab compare --fail-outside` past its bound.
pub const OUTSIDE_THE_BOUND: u8 = 3;

/// How many ratios were paired, and how many of B's medians lay outside
/// A's stated intervals, each named.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub paired: usize,
    pub outside: Vec<String>,
    /// Every paired ratio's move from A's median to B's, as a factor of at
    /// least 1 either way, with its name.
    pub moves: Vec<(f64, String)>,
}

impl Tally {
    /// The share outside, in percent (`None` with nothing paired).
    pub fn outside_pct(&self) -> Option<f64> {
        (self.paired > 0).then(|| self.outside.len() as f64 * 100.0 / self.paired as f64)
    }

    /// Against a bound of `limit` percent outside: the line that says it
    /// held, or the one (with every ratio outside) that says it did not.
    pub fn verdict(&self, limit: f64) -> Result<String, String> {
        let Some(pct) = self.outside_pct() else {
            return Err(
                "fail: the two reports share no ratio, so nothing was compared (different \
                 experiments or plans?)"
                    .into(),
            );
        };
        let head = format!(
            "{} of {} of B's medians ({pct:.1}%) lie outside A's stated intervals; the bound is {limit}%",
            self.outside.len(),
            self.paired
        );
        if pct <= limit {
            return Ok(format!("pass: {head}"));
        }
        let mut out = format!("fail: {head}. Outside:");
        for m in &self.outside {
            out.push_str("\n  ");
            out.push_str(m);
        }
        Err(out)
    }
}

impl Tally {
    /// Against a bound of ×`limit` on any ratio's move (either way): the
    /// line that says it held, or the one (with every ratio past it) that
    /// says it did not.
    pub fn verdict_moves(&self, limit: f64) -> Result<String, String> {
        if self.paired == 0 {
            return Err(
                "fail: the two reports share no ratio, so nothing was compared (different \
                 experiments or plans?)"
                    .into(),
            );
        }
        let mut past: Vec<&(f64, String)> = self.moves.iter().filter(|(f, _)| *f > limit).collect();
        past.sort_by(|x, y| y.0.total_cmp(&x.0));
        let most = self.moves.iter().map(|(f, _)| *f).fold(1.0, f64::max);
        if past.is_empty() {
            return Ok(format!(
                "pass: no ratio of {} moved by more than ×{limit} (the most: ×{most:.2})",
                self.paired
            ));
        }
        let mut out = format!(
            "fail: {} of {} ratios moved by more than ×{limit}:",
            past.len(),
            self.paired
        );
        for (f, m) in past {
            out.push_str(&format!("\n  ×{f:.2}  {m}"));
        }
        Err(out)
    }
}

/// The comparison of two reports, as text.
pub fn compare(a: &Report, b: &Report, worst: usize) -> String {
    compare_tally(a, b, worst).0
}

/// [`compare`], and its [`Tally`].
pub fn compare_tally(a: &Report, b: &Report, worst: usize) -> (String, Tally) {
    let (ra, rb) = (ratios(a), ratios(b));
    let mut paired = 0;
    let (mut b_in_a, mut a_in_b, mut overlap) = (0, 0, 0);
    let mut misses: Vec<(f64, String)> = Vec::new();
    let mut moves: Vec<(f64, String)> = Vec::new();
    // How far B's medians sit from A's, in A's half-intervals.
    let mut reach: Vec<f64> = Vec::new();
    // A's intervals' half-widths, in percent (geometric).
    let mut widths: Vec<f64> = Vec::new();
    // Per section: (paired, B inside A).
    let mut by_section: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (k, x) in &ra {
        let Some(y) = rb.get(k) else { continue };
        paired += 1;
        let bia = x.contains(y.median);
        let e = by_section.entry(k.0.as_str()).or_default();
        e.0 += 1;
        e.1 += usize::from(bia);
        b_in_a += usize::from(bia);
        a_in_b += usize::from(y.contains(x.median));
        overlap += usize::from(x.overlaps(y));
        if x.median > 0.0 && y.median > 0.0 {
            let f = (y.median / x.median).max(x.median / y.median);
            moves.push((
                f,
                format!(
                    "{} / {} / {} / {}: A ×{:.2}, B ×{:.2}",
                    k.0, k.1, k.2, k.3, x.median, y.median
                ),
            ));
        }
        if let Some(d) = x.reach(y.median) {
            reach.push(d);
            widths.push(((x.max / x.min).sqrt() - 1.0) * 100.0);
        }
        if !bia {
            // How far outside A's range, relative to A's median.
            let gap = if y.median > x.max {
                y.median - x.max
            } else {
                x.min - y.median
            } / x.median.abs().max(1e-9);
            misses.push((
                gap,
                format!(
                    "{} / {} / {} / {}: A ×{:.2} ({:.2}–{:.2}), B ×{:.2} ({:.2}–{:.2}), {:.0}% outside",
                    k.0,
                    k.1,
                    k.2,
                    k.3,
                    x.median,
                    x.min,
                    x.max,
                    y.median,
                    y.min,
                    y.max,
                    gap * 100.0
                ),
            ));
        }
    }
    let pct = |n: usize| {
        if paired == 0 {
            0.0
        } else {
            n as f64 * 100.0 / paired as f64
        }
    };
    let mut out = String::new();
    let diffs = differences(&a.run, &b.run);
    if diffs.is_empty() {
        let _ = writeln!(out, "same machine, commit, timing and plans");
    } else {
        for d in &diffs {
            let _ = writeln!(out, "warning: {d}");
        }
    }
    let _ = writeln!(
        out,
        "{paired} ratios in both reports ({} only in A, {} only in B)",
        ra.len() - paired,
        rb.len().saturating_sub(paired)
    );
    let _ = writeln!(
        out,
        "(a ratio's stated spread is a 95% rerun interval: about 95% should be inside)"
    );
    let _ = writeln!(
        out,
        "B's median inside A's stated spread: {b_in_a} ({:.0}%)",
        pct(b_in_a)
    );
    let _ = writeln!(
        out,
        "A's median inside B's stated spread: {a_in_b} ({:.0}%)",
        pct(a_in_b)
    );
    let _ = writeln!(
        out,
        "the two spreads overlap:            {overlap} ({:.0}%)",
        pct(overlap)
    );
    if let Some(r) = crate::stats::Spread::of(&reach) {
        // For a normal error and a calibrated 95% interval, the median
        // distance is 0.674σ against an edge at 1.96σ.
        let _ = writeln!(
            out,
            "B's distance from A's median, in A's half-intervals: median {:.2} over {} ratios \
             (0.34 when the intervals are calibrated; less: they are wider than the noise)",
            r.median, r.n
        );
    }
    if let Some(w) = crate::stats::Spread::of(&widths) {
        let _ = writeln!(
            out,
            "A's intervals are ±{:.0}% wide in the median ratio (a quarter of them ±{:.0}% or less, \
             a quarter ±{:.0}% or more)",
            w.median, w.q1, w.q3
        );
    }
    let _ = writeln!(out, "\nper section, B's median inside A's spread:");
    for (section, (n, inside)) in &by_section {
        let _ = writeln!(
            out,
            "  {section:<12} {inside:>4} of {n:<4} ({:.0}%)",
            *inside as f64 * 100.0 / (*n).max(1) as f64
        );
    }
    misses.sort_by(|x, y| y.0.total_cmp(&x.0));
    let tally = Tally {
        paired,
        outside: misses.iter().map(|(_, m)| m.clone()).collect(),
        moves,
    };
    if !misses.is_empty() {
        let _ = writeln!(
            out,
            "\nB's medians furthest outside A's spread (of {}):",
            misses.len()
        );
        for (_, m) in misses.iter().take(worst) {
            let _ = writeln!(out, "  {m}");
        }
    }
    (out, tally)
}

/// A run's `report.json`: the file itself, or the one in a results
/// directory.
fn report_json(p: &Path) -> anyhow::Result<PathBuf> {
    if p.is_dir() {
        let f = p.join("report.json");
        if !f.is_file() {
            bail!(
                "{} has no report.json; `lab report {}` writes it from the run's rounds",
                p.display(),
                p.display()
            );
        }
        return Ok(f);
    }
    Ok(p.to_path_buf())
}

/// `lab compare`: both runs' `report.json` read and compared; the text and
/// the tally.
pub fn run(a: &Path, b: &Path, worst: usize) -> anyhow::Result<(String, Tally)> {
    let (pa, pb) = (report_json(a)?, report_json(b)?);
    let (ra, rb) = (Report::read_json(&pa)?, Report::read_json(&pb)?);
    let (text, tally) = compare_tally(&ra, &rb, worst);
    Ok((
        format!("A: {}\nB: {}\n{text}", pa.display(), pb.display()),
        tally,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Section, Table};

    fn ratio(median: f64, low: f64, high: f64) -> Value {
        Value::Ratio { median, low, high }
    }

    fn report(cells: &[Value]) -> Report {
        let mut s = Section::new("payload", "Payload");
        s.table(Table {
            caption: "Throughput".into(),
            headers: vec!["transport".into(), "1 order".into()],
            rows: cells
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    vec![
                        Value::text(format!("t{i}")),
                        Value::parts(vec![Value::single(100.0, "req/s"), c.clone()]),
                    ]
                })
                .collect(),
            reading: String::new(),
        });
        Report {
            sections: vec![s],
            ..Report::default()
        }
    }

    #[test]
    fn agreement_is_counted_and_the_worst_miss_named() {
        let a = report(&[
            Value::Baseline,
            ratio(1.5, 1.4, 1.6),
            ratio(0.5, 0.45, 0.55),
        ]);
        let b = report(&[
            Value::Baseline,
            ratio(1.55, 1.5, 1.7),
            ratio(0.8, 0.75, 0.85),
        ]);
        let text = compare(&a, &b, 5);
        // The baselines are left out: two ratios paired.
        assert!(text.contains("\n2 ratios in both reports"), "{text}");
        assert!(text.contains("inside A's stated spread: 1 (50%)"), "{text}");
        assert!(text.contains("overlap:            1 (50%)"), "{text}");
        assert!(
            text.contains("t2 / 1 order: A ×0.50 (0.45–0.55), B ×0.80"),
            "{text}"
        );
        assert!(!text.contains("t1 / 1 order: A"), "{text}");
        assert!(text.contains("payload         1 of 2    (50%)"), "{text}");
        // t1: 0.51 of A's upper half-interval; t2: 4.9 of it; median 2.72.
        assert!(
            text.contains("half-intervals: median 2.72 over 2 ratios"),
            "{text}"
        );
        // Half-widths ±6.9% and ±10.6%.
        assert!(text.contains("intervals are ±9% wide"), "{text}");
        // Neither report says which run it was.
        assert!(text.contains("warning: a report.json lacks"), "{text}");
    }

    #[test]
    fn the_bound_passes_identical_runs_and_fails_a_regression_naming_it() {
        let a = report(&[
            Value::Baseline,
            ratio(1.5, 1.4, 1.6),
            ratio(0.5, 0.45, 0.55),
            ratio(2.0, 1.9, 2.1),
        ]);
        let (_, same) = compare_tally(&a, &a.clone(), 5);
        assert_eq!(same.paired, 3);
        assert!(same.verdict(0.0).is_ok(), "{:?}", same.verdict(0.0));
        // One transport got ×1.5 slower against the baseline.
        let b = report(&[
            Value::Baseline,
            ratio(1.5, 1.4, 1.6),
            ratio(0.75, 0.7, 0.8),
            ratio(2.0, 1.9, 2.1),
        ]);
        let (_, t) = compare_tally(&a, &b, 5);
        let fail = t.verdict(10.0).unwrap_err();
        assert!(
            fail.starts_with("fail: 1 of 3 of B's medians (33.3%)"),
            "{fail}"
        );
        assert!(fail.contains("t2 / 1 order: A ×0.50"), "{fail}");
        assert!(t.verdict(34.0).is_ok());
        // Nothing in common: a failure, not a pass.
        let (_, none) = compare_tally(&a, &Report::default(), 5);
        assert!(none.verdict(100.0).unwrap_err().contains("share no ratio"));
        assert!(
            none.verdict_moves(1.5)
                .unwrap_err()
                .contains("share no ratio")
        );
        // The ×1.5 move passes a bound of ×1.6 and fails one of ×1.4.
        let ok = t.verdict_moves(1.6).unwrap();
        assert!(ok.contains("the most: ×1.50"), "{ok}");
        let moved = t.verdict_moves(1.4).unwrap_err();
        assert!(moved.starts_with("fail: 1 of 3 ratios moved"), "{moved}");
        assert!(
            moved.contains("×1.50  payload / Throughput / t2 / 1 order: A ×0.50, B ×0.75"),
            "{moved}"
        );
        assert!(same.verdict_moves(1.0).is_ok());
    }

    #[test]
    fn runs_from_other_machines_commits_or_plans_are_named() {
        let (a, _) = crate::synthetic::run(&["payload", "naive"], true, 2);
        let mut b = a.clone();
        assert!(differences(&to(&a), &to(&b)).is_empty());
        b.machine.cores = 4;
        b.machine.git_commit = "0123456789ab".into();
        b.knobs.quick = false;
        b.plans.insert(
            "payload".into(),
            serde_json::json!({"transports": ["grpc"], "sizes": [1]}),
        );
        b.plans.remove("naive");
        b.knobs.cc = netpath::CongestionControl::Bbr;
        let d = differences(&to(&a), &to(&b)).join("\n");
        for needle in [
            "different TCP congestion control on the packet path: A cubic, B bbr",
            "different machines",
            "different commits",
            "different plans for payload",
            "naive is in A only",
        ] {
            assert!(d.contains(needle), "{needle}: {d}");
        }
    }

    fn to(info: &RunInfo) -> serde_json::Value {
        serde_json::to_value(info).expect("serialises")
    }
}
