//! The measurement layer: starting the services (and the delay proxy between
//! them), driving the load generator, reading `/proc` and `/metrics`, describing the machine,
//! and keeping the raw record of every round. It knows cells, rounds and
//! schedules; it knows no experiment by name.
//!
//! # Layout
//! - [`cell`]: a cell (transport, payload, load, pool) and its
//!   [`cell::Env`] (delay proxy, TLS, replicas, compression, store).
//! - [`record`]: the raw [`record::RoundRecord`] of one round, as its
//!   round file keeps it.
//! - [`figures`]: the [`figures::Measures`] derived from a record and the
//!   [`figures::Metric`]s tables read from them.
//! - [`judge`]: the thresholds a round is flagged or failed by.
//! - [`services`]: building, starting (with a cell's environment: delay
//!   proxy, TLS), readiness and stopping of the services.
//! - [`schedule`]: what an experiment asks to run: a grid, a ladder, a probe
//!   or a benchmark, and what the run must prepare for it.
//! - [`runner`]: runs schedules round by round.
//! - [`results`]: everything a run has measured, and the results directory's
//!   files.
//! - [`load`]: what a load generator counted ([`load::Summary`]), whichever
//!   it was: the lab's own engine ([`engine`], the default), k6 ([`k6`]) or
//!   wrk ([`wrk`], the generator experiment's yardstick).
//! - [`prom`], [`procfs`], [`http`], [`machine`]: the other instruments.

pub mod cell;
pub mod criterion;
pub mod engine;
pub mod figures;
pub mod http;
pub mod judge;
pub mod k6;
pub mod load;
pub mod machine;
pub mod procfs;
pub mod prom;
pub mod record;
pub mod results;
pub mod runner;
pub mod schedule;
pub mod services;
pub mod wrk;

use std::path::Path;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// The error a run stops with when Ctrl-C (or SIGTERM) arrived.
#[derive(Debug, Clone, Copy)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// Whether an error is (or wraps) an interruption.
pub fn is_interrupted(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<Interrupted>())
}

/// Timing of every round.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub rounds: u32,
    /// The measured part of a round, in seconds.
    pub duration_s: f64,
    /// The discarded warm-up before it, in seconds.
    pub warmup_s: f64,
    /// Whether the services were started afresh for every round (not with
    /// `--target`, which measures a stack the lab did not start).
    #[serde(default = "yes")]
    pub restarted: bool,
}

fn yes() -> bool {
    true
}

/// Writes pretty JSON, creating the folder.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// "2 min 05 s" style.
pub fn human_duration(secs: f64) -> String {
    let s = secs.round() as u64;
    if s >= 3600 {
        let m = (s + 30) / 60;
        format!("{} h {:02} min", m / 60, m % 60)
    } else if s >= 60 {
        format!("{} min {:02} s", s / 60, s % 60)
    } else {
        format!("{s} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_minutes_and_seconds() {
        assert_eq!(human_duration(125.0), "2 min 05 s");
        assert_eq!(human_duration(9.4), "9 s");
        assert_eq!(human_duration(27_300.75), "7 h 35 min");
        assert_eq!(human_duration(3_599.0), "59 min 59 s");
    }

    #[test]
    fn interruptions_are_recognised_through_context() {
        let e = anyhow::Error::new(Interrupted).context("measuring");
        assert!(is_interrupted(&e));
        assert!(!is_interrupted(&anyhow::anyhow!("other")));
    }
}
