//! Medians and spreads over repeated rounds.
//!
//! Every figure the report quotes is the median of R rounds with the range
//! it came from. With few rounds (R = 2 or 3 in a quick run) the min–max
//! range is the honest spread; the interquartile range is kept too for
//! longer runs. A ratio is computed round by round (rounds are interleaved,
//! so round k of every cell ran under the same conditions), then summarised
//! the same way, so its spread is the spread of the ratio itself.

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

    /// Half the min–max range relative to the median: the "±" a reader can
    /// expect from a rerun. Zero when the median is zero.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_middle_mean() {
        let s = Spread::of(&[4.0, 1.0, 3.0, 2.0]).expect("values");
        assert_eq!(s.median, 2.5);
        assert_eq!((s.min, s.max), (1.0, 4.0));
        assert_eq!((s.q1, s.q3), (1.75, 3.25));
        assert_eq!(s.n, 4);
    }

    #[test]
    fn one_value_is_its_own_spread() {
        let s = Spread::of(&[7.0]).expect("values");
        assert_eq!(
            (s.median, s.min, s.max, s.q1, s.q3),
            (7.0, 7.0, 7.0, 7.0, 7.0)
        );
    }

    #[test]
    fn non_finite_values_are_left_out_and_none_means_no_spread() {
        assert_eq!(Spread::of(&[f64::NAN, 2.0]).expect("one left").n, 1);
        assert!(Spread::of(&[]).is_none());
        assert!(Spread::of(&[f64::INFINITY]).is_none());
    }

    #[test]
    fn ratios_pair_rounds_and_skip_gaps_and_zeros() {
        let a = [Some(10.0), Some(9.0), None, Some(4.0)];
        let b = [Some(5.0), Some(3.0), Some(1.0), Some(0.0)];
        assert_eq!(paired_ratios(&a, &b), vec![2.0, 3.0]);
    }

    #[test]
    fn the_relative_half_range_is_what_a_rerun_may_move() {
        let s = Spread::of(&[90.0, 100.0, 110.0]).expect("values");
        assert!((s.relative_half_range() - 0.1).abs() < 1e-12);
    }
}
