//! When a round's figures are to be read with care, or not at all: the
//! thresholds, the flags a round is recorded with ([`flags_of`], kept in its
//! round file and shown in the report), and a round failed by its answers
//! ([`Measures::failed`]: left out of every median and ratio).

use crate::measure::figures::Measures;
use crate::measure::record::RoundRecord;

/// The share of a core at which the load generator may be part of what a
/// round measures: on a 2-core machine, half a core taken by it is half a
/// core the services did not have.
pub const LOAD_SATURATED_CORES: f64 = 0.5;

/// Other processes' CPU, in cores, above which a round is flagged as run on
/// a busy machine.
pub const BUSY_NEIGHBOUR_CORES: f64 = 0.25;

/// The whole machine's CPU share (every process, HAProxy and the rest
/// included) past which a round with several replicas is flagged: the
/// replicas then compete for cores, which can skew their shares.
pub const MACHINE_SATURATED: f64 = 0.95;

/// The share of a round's answers (shed ones aside) that may be bad before
/// the round is failed: left out of medians and ratios.
pub const FAILED_BAD_SHARE_PCT: f64 = 1.0;

/// Why a round should be read with care.
pub fn flags_of(rec: &RoundRecord) -> Vec<String> {
    let m = Measures::of(rec);
    let mut flags = Vec::new();
    // Where the generator is the subject (the generator experiment's
    // cells, k6's own gRPC client) its cost is what is measured, not a flaw.
    if m.load_cores >= LOAD_SATURATED_CORES && !rec.cell.generator_is_subject() {
        flags.push(format!(
            "the load generator ({}) used {:.2} cores: it may be the bottleneck",
            rec.generator.name(),
            m.load_cores
        ));
    }
    if !rec.no_proc && m.other_cores >= BUSY_NEIGHBOUR_CORES {
        flags.push(format!(
            "other processes used {:.2} cores during the run: a busy machine",
            m.other_cores
        ));
    }
    if let Some(why) = rec.path.as_ref().and_then(|p| p.fell_behind()) {
        flags.push(why);
    }
    if m.bad_answers > 0.0 {
        flags.push(format!(
            "{:.0} bad answers ({:.2}% of those not shed)",
            m.bad_answers,
            m.bad_share_pct()
        ));
    }
    if m.shed > 0.0 {
        flags.push(format!(
            "{:.0} answers shed by user-service at its concurrency limit (503)",
            m.shed
        ));
    }
    if m.upstream_errors > 0.0 {
        flags.push(format!("{:.0} upstream errors", m.upstream_errors));
    }
    if m.requests == 0.0 {
        flags.push("no request completed".to_owned());
    }
    // Several replicas, user-service, k6 (and HAProxy) share the cores: a
    // saturated machine can skew the replicas' shares by itself.
    let cores = f64::from(rec.cores.max(1));
    let busy = m.machine_busy + (m.other_cores + m.balancer_cores.unwrap_or(0.0)) / cores;
    if m.replicas.is_some() && busy >= MACHINE_SATURATED {
        flags.push(format!(
            "the machine was {:.0}% busy: CPU contention may skew the replicas' shares",
            100.0 * busy
        ));
    }
    flags
}

impl Measures {
    /// Why the round is failed, if it is: more than
    /// [`FAILED_BAD_SHARE_PCT`] of its answers bad, or none good. A round
    /// with a fault is never failed by its answers: they are its figures.
    pub fn failed(&self) -> Option<String> {
        if self.fault {
            return None;
        }
        if self.good <= 0.0 {
            return Some(format!(
                "no good answer ({} bad, {} shed)",
                self.bad_answers, self.shed
            ));
        }
        let share = self.bad_share_pct();
        (share > FAILED_BAD_SHARE_PCT).then(|| {
            format!(
                "{} bad answers of {} ({share:.1}%, over {FAILED_BAD_SHARE_PCT}%)",
                self.bad_answers,
                self.requests - self.shed
            )
        })
    }
}
