//! Medians and spreads over repeated rounds: arithmetic on plain numbers.
//!
//! It knows no cell, round record or report, so every layer may use it:
//! the runner (a ladder's stop rule reads a median), the analysis, the
//! experiments and the report. It sits below all of them.
//!
//! Every absolute figure the report quotes is the median of R rounds with
//! the range (lowest–highest round) it came from.
//!
//! Ratios are stated differently, because a ratio is what a reader carries
//! away and checks against a rerun. A ratio is computed round by round
//! (rounds are interleaved, so round k of every cell ran under the same
//! conditions), and its stated spread is a 95% *rerun interval*: where the
//! median of another run of the same plan should land. The range of the
//! rounds cannot be that: even with perfectly independent rounds, the
//! median of a second set of 3 rounds falls outside the first set's
//! min–max 40% of the time (and more with 2 rounds). See
//! [`rerun_interval`] for how the interval is made.

use serde::{Deserialize, Serialize};

/// The median of some rounds with their spread.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// First and third quartiles (linear interpolation).
    pub q1: f64,
    pub q3: f64,
    /// Rounds that had a value.
    pub n: usize,
}

impl Spread {
    /// Summarises the finite values; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(Spread {
            median: quantile(&v, 0.5),
            min: v[0],
            max: v[v.len() - 1],
            q1: quantile(&v, 0.25),
            q3: quantile(&v, 0.75),
            n: v.len(),
        })
    }

    /// One value with no spread.
    pub fn single(v: f64) -> Spread {
        Spread {
            median: v,
            min: v,
            max: v,
            q1: v,
            q3: v,
            n: 1,
        }
    }

    /// Summarises rounds as the lab keeps them, `None` where a round is
    /// missing.
    pub fn of_rounds(rounds: &[Option<f64>]) -> Option<Spread> {
        let v: Vec<f64> = rounds.iter().copied().flatten().collect();
        Spread::of(&v)
    }

    /// Half the min–max range of the rounds relative to the median (the
    /// "±" of wide tables). Zero when the median is zero.
    pub fn relative_half_range(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.max - self.min) / 2.0 / self.median.abs()
        }
    }
}

/// The q-quantile of sorted values, interpolating linearly between ranks.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let pos = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let lo = pos.floor() as usize;
            let hi = pos.ceil() as usize;
            let frac = pos - lo as f64;
            sorted[lo] + (sorted[hi] - sorted[lo]) * frac
        }
    }
}

/// Round-by-round ratios `a[k] / b[k]` of two cells (only rounds both have,
/// and only where `b[k]` is not zero).
pub fn paired_ratios(a: &[Option<f64>], b: &[Option<f64>]) -> Vec<f64> {
    a.iter()
        .zip(b)
        .filter_map(|(x, y)| match (x, y) {
            (Some(x), Some(y)) if *y != 0.0 => Some(x / y),
            _ => None,
        })
        .collect()
}

/// Round-to-round noise of a metric's logarithm, pooled over many cells.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Noise {
    /// Residual variance of one cell's log value in one round.
    pub var: f64,
    /// Its degrees of freedom.
    pub df: f64,
}

impl Noise {
    /// Pools the round-to-round variation of `ln(value)` over cells. `rows`
    /// holds one cell each, one entry per round (`None`, zero or negative
    /// values are left out). The fit is additive on the log scale, a level
    /// per cell plus an effect per round (what every cell of that round
    /// shared, a drift of the machine, which a paired ratio cancels), and
    /// the noise is the residual variance. `None` when there are not enough
    /// rounds to leave any degree of freedom.
    pub fn pooled(rows: &[Vec<Option<f64>>]) -> Option<Noise> {
        let rounds = rows.iter().map(Vec::len).max().unwrap_or(0);
        let logs: Vec<Vec<Option<f64>>> = rows
            .iter()
            .map(|r| {
                let mut l: Vec<Option<f64>> = r
                    .iter()
                    .map(|v| v.filter(|x| x.is_finite() && *x > 0.0).map(f64::ln))
                    .collect();
                l.resize(rounds, None);
                l
            })
            .filter(|r| r.iter().flatten().count() >= 2)
            .collect();
        let cols: Vec<usize> = (0..rounds)
            .filter(|&k| logs.iter().any(|r| r[k].is_some()))
            .collect();
        let n: usize = logs.iter().map(|r| r.iter().flatten().count()).sum();
        let df = n as f64 - logs.len() as f64 - (cols.len() as f64 - 1.0).max(0.0);
        if df < 1.0 {
            return None;
        }
        let mut level = vec![0.0; logs.len()];
        let mut round = vec![0.0; rounds];
        // Alternating means: exact in a few sweeps for a complete table,
        // and converging for one with missing rounds.
        for _ in 0..50 {
            for (c, r) in logs.iter().enumerate() {
                let (sum, cnt) = r
                    .iter()
                    .enumerate()
                    .filter_map(|(k, v)| v.map(|v| v - round[k]))
                    .fold((0.0, 0.0), |(s, n), v| (s + v, n + 1.0));
                level[c] = sum / cnt;
            }
            for &k in &cols {
                let (sum, cnt) = logs
                    .iter()
                    .enumerate()
                    .filter_map(|(c, r)| r[k].map(|v| v - level[c]))
                    .fold((0.0, 0.0), |(s, n), v| (s + v, n + 1.0));
                round[k] = sum / cnt;
            }
        }
        let ss: f64 = logs
            .iter()
            .enumerate()
            .flat_map(|(c, r)| {
                let (level, round) = (&level, &round);
                r.iter()
                    .enumerate()
                    .filter_map(move |(k, v)| v.map(|v| (v - level[c] - round[k]).powi(2)))
            })
            .sum();
        Some(Noise { var: ss / df, df })
    }

    /// The noise of `ln(a/b)` for two cells with independent residuals: the
    /// variances add, and the degrees of freedom are the fewer of the two.
    pub fn pair(a: Option<Noise>, b: Option<Noise>) -> Option<Noise> {
        let (a, b) = (a?, b?);
        Some(Noise {
            var: a.var + b.var,
            df: a.df.min(b.df),
        })
    }
}

/// Student's t at 97.5% (a two-sided 95% interval) for `df` degrees of
/// freedom (rounded down; at least 1).
pub fn t95(df: f64) -> f64 {
    const TABLE: [f64; 10] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    ];
    let d = df.floor().max(1.0);
    if d <= 10.0 {
        return TABLE[d as usize - 1];
    }
    // Cornish–Fisher expansion around the normal quantile: within 0.001 of
    // the exact value from 11 degrees of freedom up.
    let z: f64 = 1.959_964;
    z + (z.powi(3) + z) / (4.0 * d)
        + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * d * d)
        + (3.0 * z.powi(7) + 19.0 * z.powi(5) + 17.0 * z.powi(3) - 15.0 * z) / (384.0 * d.powi(3))
}

/// The variance of the median of `n` normal draws, in units of `σ²/n`
/// (1 for one or two draws, where the median is the mean; π/2 for many).
fn median_variance_factor(n: usize) -> f64 {
    match n {
        0..=2 => 1.0,
        3 => 1.346,
        4 => 1.193,
        5 => 1.434,
        _ => std::f64::consts::FRAC_PI_2,
    }
}

/// A ratio's rounds summarised as its median and a 95% rerun interval:
/// the range the median of another run of the same plan should fall in.
///
/// On the log scale, the round-by-round ratios of a pair of cells vary with
/// a variance `s²`: the larger of what this pair's own rounds show and what
/// `pair` predicts (the pooled noise of each cell's metric, summed: see
/// [`Noise::pair`]). With few rounds a pair's own
/// variance is a poor estimate, and pooling over every cell of the
/// experiment is what gives the interval its degrees of freedom; taking
/// the larger keeps a cell that is noisier than its neighbours honest. The
/// difference between two runs' medians of `n` rounds then has variance
/// `2·f(n)·s²/n` (`f` the median's variance factor), and the interval is
/// the median times `exp(±t·√(that))`, `t` being Student's at 95%.
///
/// Zero or negative ratios cannot be put on a log scale: those keep the
/// rounds' own min–max, as does a ratio with one round and no pool.
pub fn rerun_interval(ratios: &[f64], pair: Option<Noise>) -> Option<Spread> {
    let observed = Spread::of(ratios)?;
    let v: Vec<f64> = ratios.iter().copied().filter(|x| x.is_finite()).collect();
    if v.iter().any(|x| *x <= 0.0) || observed.median <= 0.0 {
        return Some(observed);
    }
    let n = v.len();
    let logs: Vec<f64> = v.iter().map(|x| x.ln()).collect();
    let own = (n >= 2).then(|| {
        let mean = logs.iter().sum::<f64>() / n as f64;
        logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n as f64 - 1.0)
    });
    let (var, df) = match (pair, own) {
        (Some(p), Some(o)) => (p.var.max(o), p.df),
        (Some(p), None) => (p.var, p.df),
        (None, Some(o)) => (o, n as f64 - 1.0),
        (None, None) => return Some(observed),
    };
    let half = t95(df) * (2.0 * median_variance_factor(n) * var / n as f64).sqrt();
    if half < 1e-9 {
        // Rounds that agree to the last few bits (byte counts): no spread,
        // rather than one that rounding noise of the inputs could make.
        return Some(Spread {
            min: observed.median,
            max: observed.median,
            ..observed
        });
    }
    let centre = observed.median.ln();
    Some(Spread {
        min: (centre - half).exp(),
        max: (centre + half).exp(),
        ..observed
    })
}

#[cfg(test)]
mod tests;
