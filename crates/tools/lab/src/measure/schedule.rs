//! What an experiment asks the lab to run, in five shapes the runner knows:
//! a [`Schedule::Grid`] of load cells, a rising [`Ladder`] with a stop rule,
//! [`Staged`] cells (a first stage, then cells made from what it measured),
//! a [`Probe`] (services started, then the experiment's own calls, not a
//! load test) and a [`Bench`] (a benchmark run on a machine the services
//! have left). The runner runs each shape the same way whatever experiment
//! it came from.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::measure::cell::{Balance, Cell, Env, Store};
use crate::measure::figures::Metric;
use crate::measure::results::Results;
use crate::measure::services::Running;

/// One experiment's schedule.
pub enum Schedule {
    /// Load cells, each measured once per round, rounds interleaved with
    /// every other grid's cells of the run (a cell two experiments share is
    /// measured once).
    Grid(Vec<Cell>),
    /// Lines of cells climbing a load, rung by rung.
    Ladder(Ladder),
    /// Cells, then cells made from what they measured.
    Staged(Staged),
    /// The experiment's own calls against freshly started services, once
    /// per round.
    Probe(Probe),
    /// A benchmark, after every load cell of the run.
    Bench(Bench),
}

impl std::fmt::Debug for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Schedule::Grid(c) => write!(f, "Grid({} cells)", c.len()),
            Schedule::Ladder(l) => write!(f, "Ladder({} lines)", l.lines.len()),
            Schedule::Staged(s) => {
                write!(f, "Staged({} cells, then {})", s.first.len(), s.then_count)
            }
            Schedule::Probe(p) => write!(f, "Probe(pool {}, {:?})", p.pool, p.env),
            Schedule::Bench(_) => f.write_str("Bench"),
        }
    }
}

impl Schedule {
    /// Every load cell the schedule may measure (a ladder's every rung).
    pub fn cells(&self) -> Vec<Cell> {
        match self {
            Schedule::Grid(c) => c.clone(),
            Schedule::Ladder(l) => l.lines.iter().flatten().cloned().collect(),
            // The second stage's cells share the first's environments.
            Schedule::Staged(s) => s.first.clone(),
            Schedule::Probe(_) | Schedule::Bench(_) => Vec::new(),
        }
    }

    /// What the run must prepare for this schedule.
    pub fn needs(&self) -> Needs {
        let mut envs: Vec<Env> = self.cells().iter().map(|c| c.env).collect();
        if let Schedule::Probe(p) = self {
            envs.push(p.env);
        }
        Needs {
            certs: envs.iter().any(|e| e.tls),
            haproxy: envs.iter().any(|e| {
                e.replicas
                    .is_some_and(|r| matches!(r.balance, Balance::L4 | Balance::L7))
            }),
            postgres: envs.iter().any(|e| e.store == Some(Store::Postgres)),
            own_postgres: envs.iter().any(|e| e.store == Some(Store::OwnPostgres)),
        }
    }

    /// Measurements the schedule plans at most, over `rounds` rounds.
    pub fn planned(&self, rounds: u32) -> u32 {
        match self {
            Schedule::Grid(c) => c.len() as u32 * rounds,
            Schedule::Ladder(l) => l.planned(rounds),
            Schedule::Staged(s) => s.planned(rounds),
            Schedule::Probe(_) => rounds,
            Schedule::Bench(_) => 0,
        }
    }

    /// A short phrase for the plan line: "12 cells", "6 ladders", "a probe".
    pub fn describe(&self) -> String {
        match self {
            Schedule::Grid(c) => format!("{} cells", c.len()),
            Schedule::Ladder(l) => format!(
                "a ladder of {} lines, up to {} rungs each",
                l.lines.len(),
                l.lines.iter().map(Vec::len).max().unwrap_or(0)
            ),
            Schedule::Staged(s) => format!(
                "{} cells, then {} made from what they measured",
                s.first.len(),
                s.then_count
            ),
            Schedule::Probe(_) => "a probe per round".to_owned(),
            Schedule::Bench(_) => "a benchmark".to_owned(),
        }
    }
}

/// What a run prepares before its first round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// A throwaway CA and server certificate (cells with TLS).
    pub certs: bool,
    /// HAProxy (cells with replicas behind an L4 or L7 balancer).
    pub haproxy: bool,
    /// A Postgres server (cells that ask for it whatever the run's store).
    pub postgres: bool,
    /// A Postgres server of the lab's own (cells that restart it).
    pub own_postgres: bool,
}

impl Needs {
    /// What two schedules need together.
    pub fn and(self, o: Needs) -> Needs {
        Needs {
            certs: self.certs || o.certs,
            haproxy: self.haproxy || o.haproxy,
            postgres: self.postgres || o.postgres,
            own_postgres: self.own_postgres || o.own_postgres,
        }
    }
}

/// Lines that climb: rung `i` of every line still climbing is measured
/// (all its rounds, interleaved) before rung `i + 1`, and a line stops
/// after the first rung where [`StopRule`] holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Ladder {
    pub lines: Vec<Vec<Cell>>,
    pub stop: StopRule,
}

impl Ladder {
    /// Measurements at most, over `rounds` rounds: every rung of every line.
    pub fn planned(&self, rounds: u32) -> u32 {
        self.lines.iter().map(Vec::len).sum::<usize>() as u32 * rounds
    }
}

/// Cells measured in two stages: the first stage's cells, every round;
/// then the cells [`Staged::then`] makes from the run's results, every
/// round (an open loop at fractions of the capacity a closed loop found).
pub struct Staged {
    pub first: Vec<Cell>,
    /// The second stage's cells, from the results once the first stage is
    /// measured. A function of the records alone, so that the report finds
    /// the same cells again (and a resumed run measures the same ones).
    #[allow(clippy::type_complexity)]
    pub then: Box<dyn Fn(&Results) -> Vec<Cell>>,
    /// How many cells the second stage makes at most.
    pub then_count: usize,
}

impl Staged {
    /// Measurements at most, over `rounds` rounds: both stages.
    pub fn planned(&self, rounds: u32) -> u32 {
        (self.first.len() + self.then_count) as u32 * rounds
    }
}

/// A line stops climbing after a rung whose median over rounds of `metric`
/// is above `above`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StopRule {
    pub metric: Metric,
    pub above: f64,
}

/// The experiment's own calls against running services.
pub struct Probe {
    /// user-service's connection budget per transport.
    pub pool: u16,
    pub env: Env,
    /// One round: the services are running; return the round's record.
    #[allow(clippy::type_complexity)]
    pub run: Box<dyn Fn(&Running, u32, &Arc<AtomicBool>) -> anyhow::Result<serde_json::Value>>,
}

/// A benchmark, run once with everything it needs.
pub struct Bench {
    #[allow(clippy::type_complexity)]
    pub run: Box<dyn FnOnce(&BenchContext) -> anyhow::Result<serde_json::Value>>,
}

/// What a benchmark gets from the run.
#[derive(Debug, Clone)]
pub struct BenchContext {
    /// The workspace root (for `cargo bench`).
    pub root: PathBuf,
    /// The results directory; its `logs/` exists.
    pub out: PathBuf,
    pub rounds: u32,
    pub stop: Arc<AtomicBool>,
}
