//! The analysis of a run: its rounds indexed by cell, a metric's values
//! round by round, its spread, ratios between cells with their rerun
//! intervals, and the round-to-round noise those intervals are made from.
//!
//! It reads what the measurement layer recorded ([`crate::measure`]) with
//! the arithmetic of [`crate::stats`], and knows no experiment by name.
//! Nothing in the measurement layer reads it: the layers go one way.

use std::collections::BTreeMap;

use crate::measure::cell::Cell;
use crate::measure::figures::{Measures, Metric};
use crate::measure::results::Results;
use crate::stats::{Noise, Spread, paired_ratios, rerun_interval};

/// Fewer degrees of freedom than this and an experiment's pooled noise is
/// too unsure of itself (Student's t above 2.3): the whole run's is used.
pub const MIN_POOLED_DF: f64 = 8.0;

/// The rounds of every cell, by round number.
#[derive(Debug, Clone, Default)]
pub struct Data {
    pub rounds: u32,
    pub cells: BTreeMap<Cell, Vec<Option<Measures>>>,
    /// Flags of each cell's rounds, "r2: the load generator (k6) used 0.95 cores...".
    pub flags: BTreeMap<Cell, Vec<String>>,
    /// Failed rounds (too many bad answers, or no good one): left out of
    /// every median and ratio. Round number and why.
    pub failed: BTreeMap<Cell, Vec<(u32, String)>>,
    /// Every round's answers of each cell, failed rounds included: bad,
    /// shed, and all (the errors a table shows per cell).
    pub answers: BTreeMap<Cell, Answers>,
    /// The experiment each cell was measured for (the first by name when
    /// several): its round-to-round noise is pooled with that experiment's
    /// other cells.
    pub experiment: BTreeMap<Cell, String>,
    /// Each cell's good upstream calls over its good rounds, as
    /// user-service's HDR histograms recorded them (µs), merged; cells
    /// without one (k6 calling order-service directly, older runs) have
    /// none.
    pub hdr: BTreeMap<Cell, hdrhistogram::Histogram<u64>>,
    /// Each cell's good answers as the load generator timed them end to
    /// end, over its good rounds (µs: the engine's exact, or k6's to 2.4%:
    /// [`RoundRecord::e2e_histogram`]).
    ///
    /// [`RoundRecord::e2e_histogram`]: crate::measure::record::RoundRecord::e2e_histogram
    pub e2e_hdr: BTreeMap<Cell, hdrhistogram::Histogram<u64>>,
}

/// A cell's answers over all its rounds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Answers {
    pub all: f64,
    pub bad: f64,
    pub shed: f64,
}

impl Data {
    /// Indexes a run's results. A failed round ([`Measures::failed`]) keeps
    /// no value: it shows as a gap, and its failure as a flag.
    pub fn new(results: &Results) -> Data {
        let rounds = results.rounds();
        let mut cells: BTreeMap<Cell, Vec<Option<Measures>>> = BTreeMap::new();
        let mut flags: BTreeMap<Cell, Vec<String>> = BTreeMap::new();
        let mut experiment: BTreeMap<Cell, String> = BTreeMap::new();
        let mut failed: BTreeMap<Cell, Vec<(u32, String)>> = BTreeMap::new();
        let mut answers: BTreeMap<Cell, Answers> = BTreeMap::new();
        let mut hdr: BTreeMap<Cell, hdrhistogram::Histogram<u64>> = BTreeMap::new();
        let mut e2e_hdr: BTreeMap<Cell, hdrhistogram::Histogram<u64>> = BTreeMap::new();
        for r in &results.records {
            // A cell measured under several names (a shared cell) pools
            // with the first name in order, whatever order the rounds were
            // read back in.
            let e = experiment
                .entry(r.cell.clone())
                .or_insert_with(|| r.experiment.clone());
            if r.experiment < *e {
                e.clone_from(&r.experiment);
            }
            let slot = cells
                .entry(r.cell.clone())
                .or_insert_with(|| vec![None; rounds as usize]);
            let m = Measures::of(r);
            let a = answers.entry(r.cell.clone()).or_default();
            a.all += m.requests;
            a.bad += m.bad_answers;
            a.shed += m.shed;
            if let Some(why) = m.failed() {
                failed
                    .entry(r.cell.clone())
                    .or_default()
                    .push((r.round, why));
            } else if let Some(s) = slot.get_mut(r.round.saturating_sub(1) as usize) {
                *s = Some(m);
                // A histogram that does not decode is left out, as a
                // round without one.
                if let Some(h) = r
                    .upstream_hdr
                    .as_deref()
                    .and_then(|t| telemetry::hdr::decode(t).ok())
                {
                    let merged = hdr
                        .entry(r.cell.clone())
                        .or_insert_with(telemetry::hdr::empty);
                    // Same bounds on both sides: the add cannot fail.
                    let _ = merged.add(&h);
                }
                if let Some(h) = r.e2e_histogram() {
                    let merged = e2e_hdr
                        .entry(r.cell.clone())
                        .or_insert_with(telemetry::hdr::empty);
                    let _ = merged.add(&h);
                }
            }
            for fl in &r.flags {
                flags
                    .entry(r.cell.clone())
                    .or_default()
                    .push(format!("r{}: {fl}", r.round));
            }
        }
        Data {
            rounds,
            cells,
            flags,
            failed,
            answers,
            experiment,
            hdr,
            e2e_hdr,
        }
    }

    /// A metric of a cell, round by round (`None` where a round is missing).
    pub fn values(&self, cell: &Cell, m: Metric) -> Vec<Option<f64>> {
        self.cells
            .get(cell)
            .map(|v| v.iter().map(|r| r.as_ref().and_then(|x| m.of(x))).collect())
            .unwrap_or_default()
    }

    pub fn spread(&self, cell: &Cell, m: Metric) -> Option<Spread> {
        Spread::of_rounds(&self.values(cell, m))
    }

    /// `a / b`, round by round: its median and 95% rerun interval
    /// ([`rerun_interval`]).
    pub fn ratio(&self, a: &Cell, b: &Cell, m: Metric) -> Option<Spread> {
        self.ratio_of(a, m, b, m, 1.0)
    }

    /// `a.ma / (b.mb · scale)`, round by round, with its rerun interval.
    pub fn ratio_of(
        &self,
        a: &Cell,
        ma: Metric,
        b: &Cell,
        mb: Metric,
        scale: f64,
    ) -> Option<Spread> {
        let den: Vec<Option<f64>> = self
            .values(b, mb)
            .into_iter()
            .map(|v| v.map(|x| x * scale))
            .collect();
        let pair = Noise::pair(self.noise(a, ma), self.noise(b, mb));
        rerun_interval(&paired_ratios(&self.values(a, ma), &den), pair)
    }

    /// The round-to-round noise of `m` pooled over every cell of the
    /// experiment `cell` belongs to ([`Noise::pooled`]), or over every cell
    /// of the run when the experiment alone leaves fewer than
    /// [`MIN_POOLED_DF`] degrees of freedom (a small experiment whose other
    /// cells were measured for another: `schema`'s six-field pair, the
    /// `pitfall` pair). Cells of one experiment share a load shape and
    /// their noise is alike; the whole run mixes quiet cells with noisy
    /// ones, so it is the fallback, not the rule.
    pub fn noise(&self, cell: &Cell, m: Metric) -> Option<Noise> {
        let exp = self.experiment.get(cell)?;
        let pool = |same: bool| {
            let rows: Vec<Vec<Option<f64>>> = self
                .experiment
                .iter()
                .filter(|(_, e)| !same || *e == exp)
                .map(|(c, _)| self.values(c, m))
                .collect();
            Noise::pooled(&rows)
        };
        match pool(true) {
            Some(n) if n.df >= MIN_POOLED_DF => Some(n),
            _ => pool(false),
        }
    }

    /// `combine` of several cells' values, round by round (rounds where any
    /// is missing are left out).
    pub fn combine(
        &self,
        cells: &[&Cell],
        m: Metric,
        combine: impl Fn(&[f64]) -> Option<f64>,
    ) -> Option<Spread> {
        let cols: Vec<Vec<Option<f64>>> = cells.iter().map(|c| self.values(c, m)).collect();
        let mut out = Vec::new();
        for r in 0..self.rounds as usize {
            let row: Option<Vec<f64>> = cols.iter().map(|c| c.get(r).copied().flatten()).collect();
            if let Some(v) = row.and_then(|row| combine(&row)) {
                out.push(v);
            }
        }
        Spread::of(&out)
    }

    pub fn has(&self, cell: &Cell) -> bool {
        self.cells.contains_key(cell)
    }

    /// The median of a metric, for readings.
    pub fn median(&self, cell: &Cell, m: Metric) -> Option<f64> {
        self.spread(cell, m).map(|s| s.median)
    }
}
