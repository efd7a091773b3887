//! What one round of a fault's cell yields: how its calls ended (the load
//! generator's count), how long the service took to come back (user-service's
//! timeline), and the counts of both sides set against each other.

use crate::measure::record::{FaultRecord, RoundRecord};

/// The window the rate before the fault is read over starts this long
/// after the load began (the first calls open connections), ms.
pub const SETTLE_MS: f64 = 1_000.0;
/// The window a recovered rate is read over, ms.
pub const RATE_WINDOW_MS: f64 = 1_000.0;
/// A rate within this share of the rate before counts as recovered.
pub const RECOVERED: f64 = 0.9;

/// One round's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    /// Good calls per second before the fault (user-service's count);
    /// `None` when fewer than two samples fell before it.
    pub before_rate: Option<f64>,
    /// Calls that were not good (the load generator's count), and by the
    /// status user-service gave.
    pub failed: f64,
    pub by_status: Vec<(String, f64)>,
    /// Calls slower than 1 s, good or not, and the longest call, ms.
    pub slow: f64,
    pub longest_ms: f64,
    /// From the fault's end to the first good answer after it, ms, to the
    /// timeline's resolution; `None`: none came within the run.
    pub first_good_ms: Option<f64>,
    /// From the fault's end to the start of the first second whose good
    /// rate is within 10% of the rate before, ms; `None`: not within the run.
    pub back_ms: Option<f64>,
    /// From the first failed call user-service counted to the last, ms (to
    /// the timeline's resolution; 0 when none failed): how long callers
    /// met errors, whatever the closed loop's speed made their number.
    pub failing_ms: f64,
    /// How long the fault lasted, ms.
    pub fault_ms: f64,
    /// What the run lasted after the fault's end, ms (what a `None` above
    /// waited for).
    pub after_ms: f64,
    /// The load generator's requests less user-service's calls (0: every request made one
    /// call, counted once).
    pub unmatched: f64,
    /// order-service's lookups answered well less the good calls
    /// user-service counted: answers made and never used. `None` when the
    /// process that counted them did not live through the fault.
    pub unused: Option<f64>,
    /// order-service's lookups answered with an error; `None` as `unused`.
    pub refused: Option<f64>,
}

/// The good calls (calls less errors) at each sample: `(ms, good)`.
fn good(timeline: &[[f64; 3]]) -> Vec<(f64, f64)> {
    timeline.iter().map(|s| (s[0], s[1] - s[2])).collect()
}

/// Good calls per second between the samples nearest `from` and `to`
/// (the first at or after `from`, the last at or before `to`), or `None`
/// with fewer than two samples between them.
fn rate(g: &[(f64, f64)], from: f64, to: f64) -> Option<f64> {
    let a = g.iter().find(|(t, _)| *t >= from)?;
    let b = g.iter().rev().find(|(t, _)| *t <= to)?;
    (b.0 > a.0).then(|| (b.1 - a.1) / (b.0 - a.0) * 1e3)
}

/// The fault's recovery from user-service's timeline: the rate before,
/// the first good answer after the end, and the rate back within 10%.
pub fn recovery(f: &FaultRecord) -> (Option<f64>, Option<f64>, Option<f64>) {
    let g = good(&f.timeline);
    let before = rate(&g, SETTLE_MS, f.at_ms).filter(|r| *r > 0.0);
    // The good count at the fault's end, then the first sample past it.
    let at_end = g
        .iter()
        .rev()
        .find(|(t, _)| *t <= f.end_ms)
        .map_or(0.0, |s| s.1);
    let first_good = g
        .iter()
        .find(|(t, n)| *t > f.end_ms && *n > at_end)
        .map(|(t, _)| t - f.end_ms);
    let back = before.and_then(|before| {
        g.iter()
            .filter(|(t, _)| *t >= f.end_ms)
            .find(|(t, _)| {
                // A hair below the line counts: a rate read back from JSON may
                // have moved in its last digit.
                rate(&g, *t, t + RATE_WINDOW_MS)
                    .is_some_and(|r| r >= RECOVERED * before * (1.0 - 1e-9))
                    && g.last().is_some_and(|l| l.0 >= t + RATE_WINDOW_MS)
            })
            .map(|(t, _)| (t - f.end_ms).max(0.0))
    });
    (before, first_good, back)
}

/// From the first sample whose error count rose to the last, plus one
/// sample's span, ms; 0 when none rose.
pub fn failing_ms(timeline: &[[f64; 3]]) -> f64 {
    let rose: Vec<f64> = timeline
        .windows(2)
        .filter(|w| w[1][2] > w[0][2])
        .map(|w| w[1][0])
        .collect();
    match (rose.first(), rose.last()) {
        (Some(a), Some(b)) => b - a + crate::measure::runner::fault::SAMPLE_MS as f64,
        _ => 0.0,
    }
}

/// A round's figures; `None` for a round without a fault's record.
pub fn of(r: &RoundRecord) -> Option<Figures> {
    let f = r.fault.as_ref()?;
    let (before, first_good_ms, back_ms) = recovery(f);
    let endings = r.endings().unwrap_or_default();
    let calls = r.upstream_after.calls - r.upstream_before.calls;
    let got = calls - (r.upstream_after.errors - r.upstream_before.errors);
    Some(Figures {
        before_rate: before,
        failed: r.load.bad_answers + r.load.shed,
        by_status: endings.not_good,
        slow: endings.slow,
        longest_ms: r.load.duration_ms.max,
        first_good_ms,
        back_ms,
        failing_ms: failing_ms(&f.timeline),
        fault_ms: f.end_ms - f.at_ms,
        after_ms: f.timeline.last().map_or(0.0, |l| l[0] - f.end_ms),
        unmatched: r.load.requests - calls,
        unused: f.order_answered.map(|a| a - got),
        refused: f.order_refused,
    })
}
