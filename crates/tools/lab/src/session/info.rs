//! What a run is and was: the options `lab run` was given, `run.json`'s
//! description of the run ([`RunInfo`]) with its parts and skipped cells,
//! how it ended, and reading a results directory back ([`load`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::experiment::{Entry, Knobs};
use crate::experiments;
use crate::measure::Timing;
use crate::measure::machine::Machine;
use crate::measure::results::Results;
use crate::measure::services;

/// What `lab run` was asked.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// An experiment's name, or `all` (the default).
    pub experiment: Option<String>,
    pub quick: bool,
    pub rounds: Option<u32>,
    pub duration_s: Option<f64>,
    pub warmup_s: Option<f64>,
    pub database_url: Option<String>,
    pub out: Option<PathBuf>,
    pub pin: bool,
    /// Prebuilt `order-service` and `user-service` here: no cargo build.
    pub bin_dir: Option<PathBuf>,
    pub transports: Option<Vec<String>>,
    pub sizes: Option<Vec<u32>>,
    /// `--path`: what emulates the network between the services.
    pub path: crate::experiment::PathChoice,
    /// `--cc`: TCP's congestion control on a packet path.
    pub cc: netpath::CongestionControl,
    /// `--seed`: every packet path's seed; `None`, a fresh one per round.
    pub seed: Option<u64>,
    /// `--load`: the load generator of every cell that names none.
    pub load: crate::measure::load::Generator,
    /// Measure this already-running stack: nothing is built, started or
    /// restarted.
    pub target: Option<services::Target>,
    /// Continue the interrupted run in this results directory: its plan,
    /// its rounds kept, the missing ones measured.
    pub resume: Option<PathBuf>,
    /// Resume even when the commit, the binaries, the plan or the store
    /// differ from the first part's; the report says so.
    pub force: bool,
    /// The command line, for the report.
    pub command: String,
}

/// `run.json`: the run's description.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInfo {
    /// What `lab run` was asked for: an experiment's name or `all`.
    pub experiment: String,
    /// The experiments it stood for, in report order.
    pub experiments: Vec<String>,
    pub command: String,
    pub knobs: Knobs,
    /// Each experiment's plan, as it made it from the knobs.
    pub plans: BTreeMap<String, serde_json::Value>,
    pub timing: Timing,
    /// "in memory" or the Postgres host (no password).
    pub store: String,
    pub pinning: Option<String>,
    pub machine: Machine,
    pub started_at: String,
    pub elapsed_s: Option<f64>,
    /// "complete", or how far an interrupted run got.
    pub outcome: String,
    /// The environment the services were started with, from the first
    /// round (everything else is cleared; ports and paths vary by round).
    #[serde(default)]
    pub service_env: BTreeMap<String, String>,
    /// The stack measured, when the lab did not start it (`--target`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<services::Target>,
    /// `--seed`: the one seed of every packet path; absent, each round drew
    /// its own (its record's `path.seed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_seed: Option<u64>,
    /// Cells the run planned but could not measure on this machine, and why
    /// (HAProxy missing, say): listed in the report, not failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
    /// A content hash of each service binary the run measured, so that a
    /// resumed run can tell whether they are the same.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub binaries: BTreeMap<String, String>,
    /// Each part of the run: one, or more when it was resumed
    /// (`lab run --resume`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<RunPart>,
}

impl RunInfo {
    /// The experiments of the run with their plans, in report order.
    pub fn entries(&self) -> Vec<(String, Option<&'static dyn Entry>)> {
        self.experiments
            .iter()
            .map(|n| (n.clone(), experiments::find(n)))
            .collect()
    }
}

/// One stretch of a run, from its start (or resumption) to its end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunPart {
    pub started_at: String,
    pub elapsed_s: f64,
    /// Measurements this part made.
    pub measured: u32,
    /// "complete", or how far it got.
    pub outcome: String,
    /// What differed from the first part when `--force` resumed anyway.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forced: Vec<String>,
}

/// A planned cell the run did not measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    pub experiment: String,
    pub what: String,
    pub why: String,
}

/// How a run ended.
#[derive(Debug)]
pub struct Outcome {
    pub dir: PathBuf,
    pub interrupted: bool,
    pub failures: usize,
}

/// Reads a results directory back.
pub fn load(dir: &Path) -> anyhow::Result<(RunInfo, Results)> {
    let path = dir.join("run.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let info: RunInfo = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a run.json this lab reads (runs made before experiments had plans of their own cannot be re-rendered)",
            path.display()
        )
    })?;
    Ok((info, Results::load(dir)?))
}
