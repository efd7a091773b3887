//! `lab compare A B`: does a second run agree with the first within the
//! spreads the first one's report states?
//!
//! Both results directories are rendered again from their raw JSON, and
//! every ratio cell (`×1.52 (1.48–1.55)`) of every table is paired by
//! section, caption, row and column. For each pair it checks whether B's
//! median lies inside A's stated range, whether A's lies inside B's, and
//! whether the two ranges overlap. The summary is the honest answer to "is
//! this reproducible?"; the list of the pairs that disagree most says where
//! it is not. The intervals are 95% ones ([`crate::stats::rerun_interval`]):
//! a calibrated report has about 95% of B's medians inside A's intervals,
//! and the misses spread over sections rather than piling up in one.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::report::{Block, Report};

/// A ratio as a report cell states it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stated {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Stated {
    fn contains(&self, v: f64) -> bool {
        // The cells print two decimals: a value that rounds onto the edge
        // is inside.
        v >= self.min - 0.005 && v <= self.max + 0.005
    }

    /// How far `v` is from the median, in half-widths of the interval on
    /// the side it lies (log scale, as the intervals are made): 1 is the
    /// edge. `None` for a cell with no interval.
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
        self.min <= o.max + 0.005 && o.min <= self.max + 0.005
    }
}

/// Every ratio in a cell's text: `×m` or `×m (lo–hi)`.
pub fn ratios_in(cell: &str) -> Vec<Stated> {
    let mut out = Vec::new();
    for part in cell.split('×').skip(1) {
        let num_end = part
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
            .unwrap_or(part.len());
        let Ok(median) = part[..num_end].parse::<f64>() else {
            continue;
        };
        let rest = &part[num_end..];
        let range = rest
            .strip_prefix(" (")
            .and_then(|r| r.split_once(')'))
            .and_then(|(inner, _)| inner.split_once('–'))
            .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
        let (min, max) = range.unwrap_or((median, median));
        out.push(Stated { median, min, max });
    }
    out
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
                let name = row.first().cloned().unwrap_or_default();
                for (i, cell) in row.iter().enumerate().skip(1) {
                    for (k, r) in ratios_in(cell).into_iter().enumerate() {
                        // A baseline's ×1 agrees with itself by definition.
                        if r.min == r.max && (r.median - 1.0).abs() < 1e-9 {
                            continue;
                        }
                        let col = t.headers.get(i).cloned().unwrap_or_else(|| i.to_string());
                        out.insert((s.id.clone(), t.caption.clone(), name.clone(), col, k), r);
                    }
                }
            }
        }
    }
    out
}

/// The comparison of two reports, as text.
pub fn compare(a: &Report, b: &Report, worst: usize) -> String {
    let (ra, rb) = (ratios(a), ratios(b));
    let mut paired = 0;
    let (mut b_in_a, mut a_in_b, mut overlap) = (0, 0, 0);
    let mut misses: Vec<(f64, String)> = Vec::new();
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
    out
}

/// `lab compare`: both directories rendered again and compared.
pub fn run(a: &Path, b: &Path, worst: usize) -> anyhow::Result<String> {
    let report = |d: &Path| -> anyhow::Result<Report> {
        let (info, results) = crate::session::load(d)?;
        Ok(crate::session::build_report(&info, &results))
    };
    let (ra, rb) = (report(a)?, report(b)?);
    Ok(format!(
        "A: {}\nB: {}\n{}",
        a.display(),
        b.display(),
        compare(&ra, &rb, worst)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Section, Table};

    #[test]
    fn ratios_are_read_from_the_cells_the_report_writes() {
        assert_eq!(
            ratios_in("5,102 (4,611–5,594) · ×1.04 (0.95–1.13)"),
            vec![Stated {
                median: 1.04,
                min: 0.95,
                max: 1.13
            }]
        );
        assert_eq!(
            ratios_in("×0.47"),
            vec![Stated {
                median: 0.47,
                min: 0.47,
                max: 0.47
            }]
        );
        assert!(ratios_in("1,234 ±3%").is_empty());
        assert_eq!(ratios_in("×2.00 (1.90–2.10) and ×3.00").len(), 2);
    }

    fn report(cells: &[&str]) -> Report {
        let mut s = Section::new("payload", "Payload");
        s.table(Table {
            caption: "Throughput".into(),
            headers: vec!["transport".into(), "1 order".into()],
            rows: cells
                .iter()
                .enumerate()
                .map(|(i, c)| vec![format!("t{i}"), (*c).to_owned()])
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
        let a = report(&["×1", "×1.50 (1.40–1.60)", "×0.50 (0.45–0.55)"]);
        let b = report(&["×1", "×1.55 (1.50–1.70)", "×0.80 (0.75–0.85)"]);
        let text = compare(&a, &b, 5);
        // The baselines are left out: two ratios paired.
        assert!(text.starts_with("2 ratios in both reports"), "{text}");
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
    }
}
