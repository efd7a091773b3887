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
//! gross regression, whatever the intervals say. Either gate also fails
//! when a ratio of A is missing from B (its cell n/a, its row gone: a
//! transport that stopped answering well), naming each, in every section B
//! has and planned as A did; a section B lacks, or whose plans differ in
//! which cells they hold or (with `--across-plans`) in their settings, is
//! compared on what both measured.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::report::value::Value;
use crate::report::{Block, Report};

mod alike;
pub use alike::{Alike, alike};

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

/// The exit status of `lab compare --fail-outside` past its bound.
pub const OUTSIDE_THE_BOUND: u8 = 3;

/// The exit status of `lab compare` refusing two runs that were not
/// measured alike (timing or store), without `--across-plans`.
pub const NOT_ALIKE: u8 = 4;

/// `lab compare`'s refusal: the two runs measured every cell differently.
#[derive(Debug)]
pub struct NotAlike(pub String);

impl std::fmt::Display for NotAlike {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotAlike {}

/// How many ratios were paired, and how many of B's medians lay outside
/// A's stated intervals, each named.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub paired: usize,
    pub outside: Vec<String>,
    /// Every paired ratio's move from A's median to B's, as a factor of at
    /// least 1 either way, with its name.
    pub moves: Vec<(f64, String)>,
    /// A's ratios that B does not state (n/a, or the row gone), named;
    /// only in sections B has and planned as A did.
    pub missing: Vec<String>,
}

impl Tally {
    /// The share outside, in percent (`None` with nothing paired).
    pub fn outside_pct(&self) -> Option<f64> {
        (self.paired > 0).then(|| self.outside.len() as f64 * 100.0 / self.paired as f64)
    }

    /// The failure of a gate for A's ratios that B does not state, if any.
    fn missing_fails(&self) -> Result<(), String> {
        if self.missing.is_empty() {
            return Ok(());
        }
        let mut out = format!(
            "fail: {} of A's ratios are missing from B (n/a there, or the row gone: a cell that \
             stopped answering well?):",
            self.missing.len()
        );
        for m in &self.missing {
            out.push_str("\n  ");
            out.push_str(m);
        }
        Err(out)
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
        self.missing_fails()?;
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
        self.missing_fails()?;
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

/// The comparison of two reports, as text, like with like.
pub fn compare(a: &Report, b: &Report, worst: usize) -> String {
    compare_tally(a, b, worst, false).0
}

/// [`compare`], and its [`Tally`]. Sections whose experiments were planned
/// with different settings are left out unless `across` (`--across-plans`).
pub fn compare_tally(a: &Report, b: &Report, worst: usize, across: bool) -> (String, Tally) {
    compare_alike(a, b, &alike(&a.run, &b.run), worst, across)
}

/// [`compare_tally`] with the runs' [`Alike`] already worked out.
fn compare_alike(
    a: &Report,
    b: &Report,
    same_way: &Alike,
    worst: usize,
    across: bool,
) -> (String, Tally) {
    let left_out = |section: &str| !across && same_way.apart.contains_key(section);
    let (mut ra, mut rb) = (ratios(a), ratios(b));
    ra.retain(|k, _| !left_out(&k.0));
    rb.retain(|k, _| !left_out(&k.0));
    // A's ratios B should state too: in a section B has, planned the same
    // way with the same cells (a section whose plans hold other cells, or
    // other settings compared anyway, is compared on what both measured).
    let b_sections: std::collections::BTreeSet<&str> =
        b.sections.iter().map(|s| s.id.as_str()).collect();
    let owed = |section: &str| {
        b_sections.contains(section)
            && !same_way.narrowed.contains_key(section)
            && !same_way.apart.contains_key(section)
    };
    let mut p = pair(&ra, &rb, owed);
    let mut out = String::new();
    write_alike(&mut out, same_way, across);
    write_agreement(&mut out, &p, ra.len(), rb.len());
    p.misses.sort_by(|x, y| y.0.total_cmp(&x.0));
    let tally = Tally {
        paired: p.paired,
        outside: p.misses.iter().map(|(_, m)| m.clone()).collect(),
        moves: p.moves,
        missing: p.missing,
    };
    write_worst(&mut out, &tally.missing, &p.misses, worst);
    (out, tally)
}

/// What pairing A's ratios with B's found: the counts the comparison's
/// summary prints, and the named lists its [`Tally`] and its worst-first
/// lists are made of.
#[derive(Default)]
struct Pairing<'a> {
    /// Ratios both reports state.
    paired: usize,
    /// Pairs with B's median inside A's stated interval.
    b_in_a: usize,
    /// Pairs with A's median inside B's stated interval.
    a_in_b: usize,
    /// Pairs whose two intervals overlap.
    overlap: usize,
    /// B's medians outside A's interval: how far outside (relative to A's
    /// median) and the line naming the pair; in A's order, unsorted.
    misses: Vec<(f64, String)>,
    /// Every pair's move from A's median to B's, as in [`Tally::moves`].
    moves: Vec<(f64, String)>,
    /// How far B's medians sit from A's, in A's half-intervals.
    reach: Vec<f64>,
    /// A's intervals' half-widths, in percent (geometric).
    widths: Vec<f64>,
    /// Per section: (paired, B inside A).
    by_section: BTreeMap<&'a str, (usize, usize)>,
    /// A's ratios that B does not state though it owes them, named.
    missing: Vec<String>,
}

/// Pairs every ratio of A with B's at the same place. A ratio B lacks is
/// named as missing when `owed` says its section should have it, and is
/// otherwise passed over.
fn pair<'a>(
    ra: &'a BTreeMap<Key, Stated>,
    rb: &BTreeMap<Key, Stated>,
    owed: impl Fn(&str) -> bool,
) -> Pairing<'a> {
    let mut p = Pairing::default();
    for (k, x) in ra {
        let Some(y) = rb.get(k) else {
            if owed(&k.0) {
                p.missing.push(format!(
                    "{} / {} / {} / {}: A ×{:.2}, B n/a",
                    k.0, k.1, k.2, k.3, x.median
                ));
            }
            continue;
        };
        p.add(k, x, y);
    }
    p
}

impl<'a> Pairing<'a> {
    /// Counts one pair, A's ratio `x` and B's `y` at `k`: whether each
    /// median lies in the other's interval and the intervals overlap, how
    /// far B's median moved and reached, and, when it lies outside A's
    /// interval, by how much.
    fn add(&mut self, k: &'a Key, x: &Stated, y: &Stated) {
        self.paired += 1;
        let bia = x.contains(y.median);
        let e = self.by_section.entry(k.0.as_str()).or_default();
        e.0 += 1;
        e.1 += usize::from(bia);
        self.b_in_a += usize::from(bia);
        self.a_in_b += usize::from(y.contains(x.median));
        self.overlap += usize::from(x.overlaps(y));
        if x.median > 0.0 && y.median > 0.0 {
            let f = (y.median / x.median).max(x.median / y.median);
            self.moves.push((
                f,
                format!(
                    "{} / {} / {} / {}: A ×{:.2}, B ×{:.2}",
                    k.0, k.1, k.2, k.3, x.median, y.median
                ),
            ));
        }
        if let Some(d) = x.reach(y.median) {
            self.reach.push(d);
            self.widths.push(((x.max / x.min).sqrt() - 1.0) * 100.0);
        }
        if !bia {
            self.misses.push(miss(k, x, y));
        }
    }
}

/// B's median `y` outside A's interval `x`: how far outside, relative to
/// A's median, and the line that names the pair with both intervals.
fn miss(k: &Key, x: &Stated, y: &Stated) -> (f64, String) {
    // How far outside A's range, relative to A's median.
    let gap = if y.median > x.max {
        y.median - x.max
    } else {
        x.min - y.median
    } / x.median.abs().max(1e-9);
    (
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
    )
}

/// The comparison's opening lines: whether the two runs were measured
/// alike, and if not, where not (every cell, a section's settings, or only
/// which cells a section's plans hold) and what was done about it.
fn write_alike(out: &mut String, same_way: &Alike, across: bool) {
    for w in &same_way.run_wide {
        let _ = writeln!(
            out,
            "NOT LIKE WITH LIKE: {w}. Every cell was measured differently, so A's intervals \
             do not describe B; the ratios are compared anyway (--across-plans)."
        );
    }
    if same_way == &Alike::default() {
        let _ = writeln!(out, "same machine, commit, timing and plans");
    }
    for w in &same_way.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    for (section, why) in &same_way.apart {
        let _ = if across {
            writeln!(
                out,
                "NOT LIKE WITH LIKE: {section} was planned with other settings ({why}); \
                 compared anyway (--across-plans)"
            )
        } else {
            writeln!(
                out,
                "left out: {section}, planned with other settings ({why}); --across-plans \
                 compares it anyway"
            )
        };
    }
    for (section, lists) in &same_way.narrowed {
        let _ = writeln!(
            out,
            "{section}: its plans differ only in which cells they hold ({lists}); compared on \
             the cells both runs measured"
        );
    }
}

/// The summary of the pairing: how many ratios were paired (of `a_len` in
/// A and `b_len` in B), how often each median lies in the other's interval,
/// how far B's medians reach and how wide A's intervals are, and B's
/// medians inside A's intervals per section.
fn write_agreement(out: &mut String, p: &Pairing<'_>, a_len: usize, b_len: usize) {
    let paired = p.paired;
    let pct = |n: usize| {
        if paired == 0 {
            0.0
        } else {
            n as f64 * 100.0 / paired as f64
        }
    };
    let _ = writeln!(
        out,
        "{paired} ratios in both reports ({} only in A, {} only in B)",
        a_len - paired,
        b_len.saturating_sub(paired)
    );
    let _ = writeln!(
        out,
        "(a ratio's stated spread is a 95% rerun interval: about 95% should be inside)"
    );
    let _ = writeln!(
        out,
        "B's median inside A's stated spread: {} ({:.0}%)",
        p.b_in_a,
        pct(p.b_in_a)
    );
    let _ = writeln!(
        out,
        "A's median inside B's stated spread: {} ({:.0}%)",
        p.a_in_b,
        pct(p.a_in_b)
    );
    let _ = writeln!(
        out,
        "the two spreads overlap:            {} ({:.0}%)",
        p.overlap,
        pct(p.overlap)
    );
    if let Some(r) = crate::stats::Spread::of(&p.reach) {
        // For a normal error and a calibrated 95% interval, the median
        // distance is 0.674σ against an edge at 1.96σ.
        let _ = writeln!(
            out,
            "B's distance from A's median, in A's half-intervals: median {:.2} over {} ratios \
             (0.34 when the intervals are calibrated; less: they are wider than the noise)",
            r.median, r.n
        );
    }
    if let Some(w) = crate::stats::Spread::of(&p.widths) {
        let _ = writeln!(
            out,
            "A's intervals are ±{:.0}% wide in the median ratio (a quarter of them ±{:.0}% or less, \
             a quarter ±{:.0}% or more)",
            w.median, w.q1, w.q3
        );
    }
    let _ = writeln!(out, "\nper section, B's median inside A's spread:");
    for (section, (n, inside)) in &p.by_section {
        let _ = writeln!(
            out,
            "  {section:<12} {inside:>4} of {n:<4} ({:.0}%)",
            *inside as f64 * 100.0 / (*n).max(1) as f64
        );
    }
}

/// The comparison's closing lists, `worst` lines each at most: A's ratios
/// missing from B, then B's medians furthest outside A's intervals
/// (`misses`, already sorted furthest first), each with its count.
fn write_worst(out: &mut String, missing: &[String], misses: &[(f64, String)], worst: usize) {
    if !missing.is_empty() {
        let _ = writeln!(
            out,
            "\nA's ratios missing from B (n/a there, or the row gone), {}:",
            missing.len()
        );
        for m in missing.iter().take(worst) {
            let _ = writeln!(out, "  {m}");
        }
    }
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
/// the tally. Two runs timed differently, or on different stores, are
/// refused ([`NotAlike`]) unless `across`.
/// With `only` not empty, only the tables whose `section / caption` holds
/// one of its texts (case aside) are compared: a named set of ratios.
pub fn run(
    a: &Path,
    b: &Path,
    worst: usize,
    across: bool,
    only: &[String],
) -> anyhow::Result<(String, Tally)> {
    let (pa, pb) = (report_json(a)?, report_json(b)?);
    let (mut ra, mut rb) = (Report::read_json(&pa)?, Report::read_json(&pb)?);
    keep_only(&mut ra, only);
    keep_only(&mut rb, only);
    let same_way = alike(&ra.run, &rb.run);
    if !across && !same_way.run_wide.is_empty() {
        return Err(NotAlike(format!(
            "not compared: {}. A's intervals describe reruns of A's plan only; run B with A's \
             --rounds, --duration, --warmup and store, or pass --across-plans to compare anyway \
             (then only --max-move means much)",
            same_way.run_wide.join("; ")
        ))
        .into());
    }
    let (text, tally) = compare_alike(&ra, &rb, &same_way, worst, across);
    let named = if only.is_empty() {
        String::new()
    } else {
        format!(
            "only the tables whose section or caption holds {}\n",
            only.iter()
                .map(|o| format!("{o:?}"))
                .collect::<Vec<_>>()
                .join(" or ")
        )
    };
    Ok((
        format!("A: {}\nB: {}\n{named}{text}", pa.display(), pb.display()),
        tally,
    ))
}

/// Drops every table whose `section / caption` holds none of `only`'s
/// texts (case aside); keeps them all when `only` is empty.
fn keep_only(r: &mut Report, only: &[String]) {
    if only.is_empty() {
        return;
    }
    let needles: Vec<String> = only.iter().map(|o| o.to_lowercase()).collect();
    for s in &mut r.sections {
        let id = s.id.clone();
        s.blocks.retain(|b| match b {
            Block::Table(t) => {
                let name = format!("{id} / {}", t.caption).to_lowercase();
                needles.iter().any(|n| name.contains(n.as_str()))
            }
            _ => true,
        });
    }
}

#[cfg(test)]
mod tests;
