//! The statistics' tests: quantiles, pooled noise, and the rerun interval's
//! coverage checked by simulation.

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
    // Missing rounds are left out the same way.
    assert_eq!(Spread::of_rounds(&[None, Some(2.0)]).map(|s| s.n), Some(1));
    assert!(Spread::of_rounds(&[None, None]).is_none());
}

#[test]
fn ratios_pair_rounds_and_skip_gaps_and_zeros() {
    let a = [Some(10.0), Some(9.0), None, Some(4.0)];
    let b = [Some(5.0), Some(3.0), Some(1.0), Some(0.0)];
    assert_eq!(paired_ratios(&a, &b), vec![2.0, 3.0]);
}

#[test]
fn pooled_noise_removes_each_cells_level_and_each_rounds_drift() {
    // Two cells at very different levels, both 10% up in round 2: all
    // of that is level and drift, no noise.
    let rows = vec![
        vec![Some(100.0), Some(110.0), Some(100.0)],
        vec![Some(5.0), Some(5.5), Some(5.0)],
    ];
    let n = Noise::pooled(&rows).expect("degrees of freedom");
    assert!(n.var < 1e-20, "{n:?}");
    assert_eq!(n.df, 2.0);
    // One cell moving against the other is noise.
    let rows = vec![
        vec![Some(100.0), Some(110.0), Some(100.0)],
        vec![Some(5.0), Some(5.0), Some(5.5)],
    ];
    assert!(Noise::pooled(&rows).expect("df").var > 1e-3);
}

#[test]
fn pooled_noise_needs_two_rounds_of_some_cell() {
    assert!(Noise::pooled(&[vec![Some(1.0)], vec![None, Some(2.0)]]).is_none());
    // A lone cell of two rounds has one level and one drift to fit:
    // nothing is left over.
    assert!(Noise::pooled(&[vec![Some(1.0), Some(2.0)]]).is_none());
    // Zeros cannot be logged and do not count.
    let n = Noise::pooled(&[
        vec![Some(1.0), Some(2.0), Some(0.0)],
        vec![Some(1.0), Some(1.5), Some(3.0)],
    ]);
    assert_eq!(n.map(|n| n.df), Some(1.0));
}

#[test]
fn student_t_matches_the_tables() {
    assert_eq!(t95(1.0), 12.706);
    assert_eq!(t95(2.9), 4.303);
    for (df, t) in [(11.0, 2.201), (20.0, 2.086), (30.0, 2.042), (120.0, 1.980)] {
        assert!((t95(df) - t).abs() < 1e-3, "df {df}: {} vs {t}", t95(df));
    }
    assert!(t95(0.0) > 12.0);
}

#[test]
fn the_rerun_interval_widens_with_noise_and_narrows_with_rounds() {
    let tight = Noise {
        var: 0.0001,
        df: 40.0,
    };
    let loose = Noise::pair(
        Some(Noise {
            var: 0.01,
            df: 40.0,
        }),
        Some(Noise {
            var: 0.01,
            df: 50.0,
        }),
    );
    let (tight, loose) = (Some(tight), loose);
    let r = [2.0, 2.0, 2.0];
    let a = rerun_interval(&r, tight).expect("interval");
    let b = rerun_interval(&r, loose).expect("interval");
    assert_eq!(a.median, 2.0);
    assert!(a.min < 2.0 && a.max > 2.0);
    assert!(b.min < a.min && b.max > a.max);
    // Symmetric on the log scale.
    assert!((a.max / 2.0 - 2.0 / a.min).abs() < 1e-9);
    // sqrt(2 · 1.346 · 2 · 0.01 / 3) · t(40) = 0.2715
    assert!(
        (b.max.ln() - 2f64.ln() - 0.1340 * t95(40.0)).abs() < 1e-3,
        "{b:?}"
    );
    let more = rerun_interval(&[2.0; 5], loose).expect("interval");
    // No pool: the pair's own rounds, with their few degrees of freedom.
    let own = rerun_interval(&[1.9, 2.1], None).expect("interval");
    assert!(own.min < 1.0 && own.max > 4.0, "{own:?}");
    assert!(more.max < b.max);
}

#[test]
fn a_pair_noisier_than_the_pool_states_its_own_noise() {
    let tight = Noise {
        var: 1e-6,
        df: 40.0,
    };
    let wide = rerun_interval(&[1.0, 2.0, 1.5], Some(tight)).expect("interval");
    assert!(wide.min < 1.0 && wide.max > 2.0, "{wide:?}");
}

/// A seeded normal generator (xorshift and Box–Muller), so that the
/// calibration test is the same every time.
struct Normal(u64);

impl Normal {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    fn next(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// One simulated run: `cells` cells at fixed levels, `rounds` rounds,
/// each round drifting the whole machine, each value with its own
/// log-normal noise.
fn simulate(g: &mut Normal, cells: usize, rounds: usize, sigma: f64) -> Vec<Vec<Option<f64>>> {
    let drift: Vec<f64> = (0..rounds).map(|_| 0.2 * g.next()).collect();
    (0..cells)
        .map(|c| {
            (0..rounds)
                .map(|k| Some((c as f64 * 0.3 + drift[k] + sigma * g.next()).exp() * 100.0))
                .collect()
        })
        .collect()
}

/// The interval does what it says: over many pairs of simulated runs,
/// about 95% of the second run's medians land inside the first run's
/// intervals, with 2 rounds (a quick run) as with 3 (the default).
#[test]
fn rerun_intervals_cover_about_95_percent_of_reruns() {
    let mut g = Normal(0x9e37_79b9_7f4a_7c15);
    for rounds in [2, 3, 5] {
        let (mut inside, mut total) = (0, 0);
        for _ in 0..400 {
            let a = simulate(&mut g, 12, rounds, 0.05);
            let b = simulate(&mut g, 12, rounds, 0.05);
            let noise = Noise::pooled(&a);
            for c in 1..a.len() {
                let ratios = |run: &[Vec<Option<f64>>]| paired_ratios(&run[c], &run[0]);
                let stated =
                    rerun_interval(&ratios(&a), Noise::pair(noise, noise)).expect("interval");
                let rerun = Spread::of(&ratios(&b)).expect("median").median;
                inside += usize::from(stated.min <= rerun && rerun <= stated.max);
                total += 1;
            }
        }
        let share = inside as f64 / total as f64;
        eprintln!("{rounds} rounds: {:.1}% inside", share * 100.0);
        assert!(
            (0.93..=0.985).contains(&share),
            "{rounds} rounds: {:.1}% inside",
            share * 100.0
        );
    }
}

#[test]
fn ratios_that_cannot_be_logged_keep_their_observed_range() {
    let s = rerun_interval(&[0.0, 1.0, 2.0], Some(Noise { var: 0.1, df: 9.0 }));
    assert_eq!(s.map(|s| (s.min, s.max)), Some((0.0, 2.0)));
    let one = rerun_interval(&[3.0], None).expect("one round");
    assert_eq!((one.min, one.max), (3.0, 3.0));
    assert!(rerun_interval(&[], None).is_none());
}

#[test]
fn the_relative_half_range_is_half_the_rounds_range() {
    let s = Spread::of(&[90.0, 100.0, 110.0]).expect("values");
    assert!((s.relative_half_range() - 0.1).abs() < 1e-12);
}
