//! A run's plan: the knobs and timing it runs with (from the options, or
//! from its first part when resumed), every experiment's plan and
//! schedule, and the schedules sorted by shape into the [`Work`] the run
//! measures, in the order it measures it.

use std::collections::{BTreeMap, BTreeSet};

use super::info::{RunInfo, RunOptions};
use crate::experiment::{Entry, Knobs};
use crate::measure::cell::Cell;
use crate::measure::schedule::{Bench, Ladder, Probe, Schedule, Staged};
use crate::measure::{Timing, human_duration};

/// What a measurement takes beyond its warm-up and its measured run:
/// starting and stopping the services, k6's start, the readings before and
/// after. On this project's 2-core machine a fresh clone's `all --quick`
/// took 3.45 s per measurement before its benchmarks (398 measurements in
/// 22 min 52 s) and `taster` 3.38 s (24 in 1 min 21 s), each of 3 s.
pub const ROUND_OVERHEAD_S: f64 = 0.45;

/// The default timing of a quick or a full run.
pub fn default_timing(quick: bool) -> Timing {
    if quick {
        Timing {
            rounds: 2,
            duration_s: 2.0,
            warmup_s: 1.0,
            restarted: true,
        }
    } else {
        Timing {
            rounds: 3,
            duration_s: 15.0,
            warmup_s: 5.0,
            restarted: true,
        }
    }
}

/// The knobs of a run: from the options, or from the first part of a
/// resumed run (only the store may be given again).
pub fn knobs(opts: &RunOptions, earlier: Option<&RunInfo>) -> Knobs {
    match earlier {
        Some(info) => Knobs {
            on_postgres: opts.database_url.is_some(),
            ..info.knobs.clone()
        },
        None => Knobs {
            transports: opts.transports.clone(),
            sizes: opts.sizes.clone(),
            path: opts.path,
            cc: opts.cc,
            load: opts.load,
            on_postgres: opts.database_url.is_some(),
            ..crate::experiments::knobs(opts.experiment.as_deref().unwrap_or_default(), opts.quick)
        },
    }
}

/// The timing of a run: the options' over the plan's default, or the
/// first part's when resumed.
pub fn timing(opts: &RunOptions, knobs: &Knobs, earlier: Option<&RunInfo>) -> Timing {
    let d = default_timing(knobs.quick);
    match earlier {
        Some(info) => info.timing,
        None => Timing {
            rounds: opts.rounds.unwrap_or(d.rounds),
            duration_s: opts.duration_s.unwrap_or(d.duration_s),
            warmup_s: opts.warmup_s.unwrap_or(d.warmup_s),
            restarted: opts.target.is_none(),
        },
    }
}

/// The measurements `lab run EXPERIMENT [--quick]` plans with its default
/// timing, and about how long they take (benchmarks left out): what the
/// run prints at its start, without starting it.
pub fn estimate(experiment: &str, quick: bool) -> anyhow::Result<(u32, f64)> {
    let opts = RunOptions {
        path: Default::default(),
        cc: Default::default(),
        seed: None,
        experiment: Some(experiment.to_owned()),
        quick,
        ..RunOptions::default()
    };
    let knobs = knobs(&opts, None);
    let timing = timing(&opts, &knobs, None);
    let planned = plan(&crate::experiments::expand(experiment)?, &knobs)?;
    let work = Work::of(planned.schedules);
    Ok((work.planned(&timing), work.estimate_s(&timing)))
}

/// The plans and schedules of some experiments.
pub struct Planned {
    pub plans: BTreeMap<String, serde_json::Value>,
    /// Each experiment's name and schedule, in report order.
    pub schedules: Vec<(String, Schedule)>,
}

/// Plans every experiment from the knobs.
pub fn plan(entries: &[&'static dyn Entry], knobs: &Knobs) -> anyhow::Result<Planned> {
    let mut plans = BTreeMap::new();
    let mut schedules = Vec::new();
    for e in entries {
        let plan = e.plan(knobs)?;
        schedules.push((e.name().to_owned(), e.schedule(&plan)?));
        plans.insert(e.name().to_owned(), plan);
    }
    Ok(Planned { plans, schedules })
}

/// A run's schedules sorted by shape, in the order they are measured:
/// every grid's cells, each once under the first experiment that asked for
/// it (rounds interleaved across all of them); then ladders, probes, and
/// benchmarks last, on a machine the services have left.
pub struct Work {
    pub cells: Vec<(String, Cell)>,
    pub ladders: Vec<(String, Ladder)>,
    pub staged: Vec<(String, Staged)>,
    pub probes: Vec<(String, Probe)>,
    pub benches: Vec<(String, Bench)>,
}

impl Work {
    /// Sorts each experiment's schedule by its shape.
    pub fn of(schedules: Vec<(String, Schedule)>) -> Work {
        let mut seen = BTreeSet::new();
        let mut cells: Vec<(String, Cell)> = Vec::new();
        let (mut ladders, mut probes, mut benches) = (Vec::new(), Vec::new(), Vec::new());
        let mut staged = Vec::new();
        for (name, schedule) in schedules {
            match schedule {
                Schedule::Grid(grid) => {
                    for c in grid {
                        if seen.insert(c.clone()) {
                            cells.push((name.clone(), c));
                        }
                    }
                }
                Schedule::Ladder(l) => ladders.push((name, l)),
                Schedule::Staged(s) => staged.push((name, s)),
                Schedule::Probe(p) => probes.push((name, p)),
                Schedule::Bench(b) => benches.push((name, b)),
            }
        }
        Work {
            cells,
            ladders,
            staged,
            probes,
            benches,
        }
    }

    /// The measurements planned: rounds and probe rounds, a ladder
    /// counting every rung.
    pub fn planned(&self, timing: &Timing) -> u32 {
        let r = timing.rounds;
        self.cells.len() as u32 * r
            + self.ladders.iter().map(|(_, l)| l.planned(r)).sum::<u32>()
            + self.staged.iter().map(|(_, s)| s.planned(r)).sum::<u32>()
            + self.probes.len() as u32 * r
    }

    /// About how long the measurements take, in seconds, benchmarks left
    /// out: each one's warm-up and measured run, and the services' start
    /// and stop around them.
    pub fn estimate_s(&self, timing: &Timing) -> f64 {
        // A cell with a fault runs longer than the timing's duration.
        let longer: f64 = self
            .cells
            .iter()
            .filter_map(|(_, c)| c.env.fault)
            .map(|f| (f.min_duration_s() - timing.duration_s).max(0.0))
            .sum();
        f64::from(self.planned(timing)) * (timing.duration_s + timing.warmup_s + ROUND_OVERHEAD_S)
            + longer * f64::from(timing.rounds)
    }

    /// Prints what the run will measure and about how long it takes;
    /// returns the measurements planned (rounds and probe rounds; a ladder
    /// counts every rung).
    pub fn announce(&self, timing: &Timing) -> u32 {
        let r = timing.rounds;
        let planned = self.planned(timing);
        let count = |n: usize, one: &str| match n {
            1 => format!("1 {one}"),
            n => format!("{n} {one}s"),
        };
        println!(
            "plan: {}, {}, {}, {}, {}; {r} rounds each: up to {planned} measurements, about {}{}",
            count(self.cells.len(), "cell"),
            count(self.ladders.len(), "ladder"),
            count(self.staged.len(), "staged grid"),
            count(self.probes.len(), "probe"),
            count(self.benches.len(), "benchmark"),
            human_duration(self.estimate_s(timing)),
            if self.benches.is_empty() {
                ""
            } else {
                " before the benchmarks"
            }
        );
        planned
    }
}
