//! Everything a run has measured, and where it lives in the results
//! directory:
//!
//! ```text
//! rounds/NNNN-<cell id>-r<R>.json   one round of one load cell (a RoundRecord)
//! probes/<experiment>-r<R>.json     one round of a probe (a ProbeRecord)
//! bench/<experiment>.json           a benchmark's result (a BenchRecord)
//! failures.json                     rounds that produced no numbers, and why
//! ```
//!
//! Each kind has its own folder, and each probe or benchmark file carries
//! the experiment it belongs to inside it: reading a directory back needs
//! no knowledge of which experiments exist.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::measure::record::RoundRecord;

/// A round that did not produce numbers, and why.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Failure {
    pub experiment: String,
    pub what: String,
    pub round: u32,
    pub error: String,
}

/// One round of a probe: what the experiment's probe returned, as JSON the
/// experiment reads back itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeRecord {
    pub experiment: String,
    pub round: u32,
    pub data: serde_json::Value,
}

/// A benchmark's result, as JSON the experiment reads back itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchRecord {
    pub experiment: String,
    pub data: serde_json::Value,
}

/// Everything a run has measured so far.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Results {
    pub records: Vec<RoundRecord>,
    pub probes: Vec<ProbeRecord>,
    pub benches: Vec<BenchRecord>,
    pub failures: Vec<Failure>,
}

impl Results {
    /// The probe rounds of one experiment, in round order.
    pub fn probes_of(&self, experiment: &str) -> Vec<&ProbeRecord> {
        let mut v: Vec<&ProbeRecord> = self
            .probes
            .iter()
            .filter(|p| p.experiment == experiment)
            .collect();
        v.sort_by_key(|p| p.round);
        v
    }

    /// The benchmark result of one experiment.
    pub fn bench_of(&self, experiment: &str) -> Option<&BenchRecord> {
        self.benches.iter().find(|b| b.experiment == experiment)
    }

    /// The highest round number anything was measured in.
    pub fn rounds(&self) -> u32 {
        self.records
            .iter()
            .map(|r| r.round)
            .chain(self.probes.iter().map(|p| p.round))
            .max()
            .unwrap_or(0)
    }

    /// Where a probe round is written.
    pub fn probe_path(dir: &Path, experiment: &str, round: u32) -> PathBuf {
        dir.join("probes")
            .join(format!("{experiment}-r{round}.json"))
    }

    /// Where a benchmark result is written.
    pub fn bench_path(dir: &Path, experiment: &str) -> PathBuf {
        dir.join("bench").join(format!("{experiment}.json"))
    }

    /// Reads a results directory's measurements back (folders that are
    /// missing hold nothing).
    pub fn load(dir: &Path) -> anyhow::Result<Results> {
        let mut results = Results {
            records: read_all(&dir.join("rounds"))?,
            probes: read_all(&dir.join("probes"))?,
            benches: read_all(&dir.join("bench"))?,
            failures: Vec::new(),
        };
        if let Ok(text) = std::fs::read_to_string(dir.join("failures.json")) {
            results.failures = serde_json::from_str::<Vec<Failure>>(&text)
                .with_context(|| format!("parsing {}", dir.join("failures.json").display()))?;
        }
        Ok(results)
    }
}

/// Every `*.json` of a folder, in file-name order, parsed as `T`.
fn read_all<T: serde::de::DeserializeOwned>(dir: &Path) -> anyhow::Result<Vec<T>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            serde_json::from_str(&text).with_context(|| format!("parsing {}", p.display()))
        })
        .collect()
}
