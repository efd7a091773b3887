//! Running rounds: fresh services, warm-up, the load generator's measured
//! run, and every reading taken before and after it; and the schedules made of rounds
//! (grids, ladders, probes, benchmarks).
//!
//! One round of one cell goes:
//! 1. start order-service and user-service on fresh ports in the cell's
//!    environment (delay proxy, TLS), wait for `/readyz`;
//! 2. warm up with the cell's load generator (closed loop, same transport
//!    and payload), discarded;
//! 3. read `/metrics` of user-service, `/proc` of both services, TIME_WAIT
//!    sockets on order-service's REST port, and the lab's own children CPU;
//! 4. run the load generator for the measured duration, polling its peak
//!    RSS;
//! 5. read everything again, stop the services, keep the record.
//!
//! # Layout
//! This file holds the [`Lab`] and the schedules it runs (grids, ladders,
//! probes, benchmarks) round by round; its parts add to [`Lab`]:
//! - [`round`]: one round of one cell, its readings before and after, and
//!   its record.
//! - [`load`]: the load generator of a round (the lab's engine, k6 or
//!   wrk): its command line, CPU and peak memory.
//! - [`answer`]: the lab's own check of a cell's answer before its round,
//!   which gives the load generator the length of a good one.
//! - [`stall`]: order-service stopped and continued during a stalled
//!   cell's measured run.
//! - [`scrape`]: the services' counters read during a round.
//! - [`fault`]: a fault injected during a measured run, and user-service's
//!   counters sampled through it.

pub mod answer;
pub mod fault;
pub mod load;
pub mod round;
mod scrape;
mod stall;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::bail;

use crate::measure::cell::Cell;
use crate::measure::figures::Measures;
use crate::measure::load::Generators;
use crate::measure::procfs;
use crate::measure::record::RoundRecord;
use crate::measure::results::{BenchRecord, Failure, ProbeRecord, Results};
use crate::measure::schedule::{Bench, BenchContext, Ladder, Probe, Staged};
use crate::measure::services::ServiceConfig;
use crate::measure::{Interrupted, Timing, human_duration, is_interrupted, write_json};
use crate::stats::Spread;

/// The lab in the middle of a run.
#[derive(Debug)]
pub struct Lab {
    pub root: PathBuf,
    pub generators: Generators,
    pub services: ServiceConfig,
    pub timing: Timing,
    pub out: PathBuf,
    pub stop: Arc<AtomicBool>,
    pub cores: u32,
    ticks_per_second: f64,
    pub results: Results,
    seq: u32,
    progress: Progress,
}

#[derive(Debug)]
struct Progress {
    done: u32,
    planned: u32,
    started: Instant,
}

impl Lab {
    pub fn new(
        root: PathBuf,
        generators: Generators,
        services: ServiceConfig,
        timing: Timing,
        out: PathBuf,
        stop: Arc<AtomicBool>,
    ) -> Lab {
        Lab {
            root,
            generators,
            services,
            timing,
            out,
            stop,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            ticks_per_second: procfs::clock_ticks_per_second() as f64,
            results: Results::default(),
            seq: 0,
            progress: Progress {
                done: 0,
                planned: 0,
                started: Instant::now(),
            },
        }
    }

    /// Takes the measurements of earlier parts of a resumed run: their
    /// rounds, probes and benchmarks are not measured again. Their failures
    /// are dropped, as what failed is measured again. Returns how many
    /// measurements were kept.
    pub fn keep(&mut self, earlier: Results) -> u32 {
        // New round files are numbered after the kept ones.
        self.seq = std::fs::read_dir(self.rounds_dir())
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.split('-').next()?.parse::<u32>().ok()
            })
            .max()
            .unwrap_or(0);
        let n = (earlier.records.len() + earlier.probes.len()) as u32;
        self.results = Results {
            failures: Vec::new(),
            ..earlier
        };
        self.progress.done += n;
        n
    }

    /// Whether a round of a cell is already measured (a resumed run).
    fn measured(&self, cell: &Cell, round: u32) -> bool {
        self.results
            .records
            .iter()
            .any(|r| r.round == round && r.cell == *cell)
    }

    /// Adds `n` measurements to the plan the progress line counts against.
    pub fn plan_more(&mut self, n: u32) {
        self.progress.planned += n;
    }

    /// Removes `n` measurements from the plan (a pool ladder stopped early).
    pub fn plan_less(&mut self, n: u32) {
        self.progress.planned = self.progress.planned.saturating_sub(n);
    }

    /// Measurements done so far and planned.
    pub fn progress(&self) -> (u32, u32) {
        (self.progress.done, self.progress.planned)
    }

    fn check_stop(&self) -> anyhow::Result<()> {
        if self.stop.load(Ordering::SeqCst) {
            bail!(Interrupted);
        }
        Ok(())
    }

    fn rounds_dir(&self) -> PathBuf {
        self.out.join("rounds")
    }

    /// Runs every cell R times, rounds interleaved (round 1 of every cell,
    /// then round 2...), so that a drift of the machine over time spreads
    /// across cells instead of biasing the last ones. A failed round is
    /// recorded and the run goes on; an interruption stops it.
    pub fn run_cells(&mut self, cells: &[(String, Cell)]) -> anyhow::Result<()> {
        for round in 1..=self.timing.rounds {
            for (experiment, cell) in cells {
                let experiment = experiment.as_str();
                if self.measured(cell, round) {
                    continue;
                }
                self.check_stop()?;
                match self.measure(experiment, cell, round) {
                    Ok(rec) => self.results.records.push(rec),
                    Err(e) => self.failed(experiment, &cell.label(), round, e)?,
                }
            }
        }
        Ok(())
    }

    /// Runs a probe once per round on freshly started services.
    pub fn run_probe(&mut self, experiment: &str, probe: &Probe) -> anyhow::Result<()> {
        for round in 1..=self.timing.rounds {
            if self
                .results
                .probes
                .iter()
                .any(|p| p.experiment == experiment && p.round == round)
            {
                continue;
            }
            self.check_stop()?;
            let started = Instant::now();
            let header = format!("{experiment} probe round {round}");
            let result = (|| -> anyhow::Result<serde_json::Value> {
                let running = self.start(Some(probe.pool), &probe.env, &header)?;
                let rec = (probe.run)(&running, round, &self.stop);
                running.stop();
                rec
            })();
            self.progress.done += 1;
            match result {
                Ok(data) => {
                    let rec = ProbeRecord {
                        experiment: experiment.to_owned(),
                        round,
                        data,
                    };
                    write_json(&Results::probe_path(&self.out, experiment, round), &rec)?;
                    println!(
                        "[{}/{}] {experiment}: probe round {round}/{} in {:.1} s{}",
                        self.progress.done,
                        self.progress.planned,
                        self.timing.rounds,
                        started.elapsed().as_secs_f64(),
                        self.eta()
                    );
                    self.results.probes.push(rec);
                }
                Err(e) => self.failed(experiment, "probe", round, e)?,
            }
        }
        Ok(())
    }

    /// Climbs a ladder: rung by rung, every line still climbing measured
    /// for all its rounds, and a line left behind after the first rung
    /// whose median meets the stop rule.
    pub fn run_ladder(&mut self, experiment: &str, ladder: &Ladder) -> anyhow::Result<()> {
        let rounds = self.timing.rounds;
        let mut climbing: Vec<usize> = (0..ladder.lines.len()).collect();
        let top = ladder.lines.iter().map(Vec::len).max().unwrap_or(0);
        for rung in 0..top {
            climbing.retain(|&l| ladder.lines[l].len() > rung);
            if climbing.is_empty() {
                break;
            }
            let cells: Vec<(String, Cell)> = climbing
                .iter()
                .map(|&l| (experiment.to_owned(), ladder.lines[l][rung].clone()))
                .collect();
            self.run_cells(&cells)?;
            let stopped = stopping(ladder, rung, &climbing, &self.results.records);
            for &l in &stopped {
                let left = ladder.lines[l].len().saturating_sub(rung + 1) as u32;
                self.plan_less(left * rounds);
            }
            climbing.retain(|l| !stopped.contains(l));
        }
        if !climbing.is_empty() {
            println!(
                "{experiment}: {} of {} lines reached their top rung without meeting the stop rule",
                climbing.len(),
                ladder.lines.len()
            );
        }
        Ok(())
    }

    /// Runs a staged grid: the first stage's cells, then those made from
    /// what they measured (fewer than planned: the plan is lowered).
    pub fn run_staged(&mut self, experiment: &str, staged: &Staged) -> anyhow::Result<()> {
        let named = |cells: Vec<Cell>| -> Vec<(String, Cell)> {
            cells
                .into_iter()
                .map(|c| (experiment.to_owned(), c))
                .collect()
        };
        self.run_cells(&named(staged.first.clone()))?;
        let then = (staged.then)(&self.results);
        self.plan_less(staged.then_count.saturating_sub(then.len()) as u32 * self.timing.rounds);
        println!(
            "{experiment}: {} cells made from the first stage's {}",
            then.len(),
            staged.first.len()
        );
        self.run_cells(&named(then))
    }

    /// Runs a benchmark; a failure is recorded, not raised (the load cells
    /// of the run stay usable), except an interruption.
    pub fn run_bench(&mut self, experiment: &str, bench: Bench) -> anyhow::Result<()> {
        if self.results.bench_of(experiment).is_some() {
            return Ok(());
        }
        self.check_stop()?;
        let cx = BenchContext {
            root: self.root.clone(),
            out: self.out.clone(),
            rounds: self.timing.rounds,
            stop: self.stop.clone(),
        };
        match (bench.run)(&cx) {
            Ok(data) => {
                let rec = BenchRecord {
                    experiment: experiment.to_owned(),
                    data,
                };
                write_json(&Results::bench_path(&self.out, experiment), &rec)?;
                self.results.benches.push(rec);
            }
            Err(e) => self.failed(experiment, "benchmark", 0, e)?,
        }
        Ok(())
    }

    /// Records what produced no numbers (`round` 0: not a round's) and
    /// lets the run go on; an interruption is passed up instead.
    fn failed(
        &mut self,
        experiment: &str,
        what: &str,
        round: u32,
        e: anyhow::Error,
    ) -> anyhow::Result<()> {
        if is_interrupted(&e) {
            return Err(e);
        }
        let when = if round > 0 {
            format!(" round {round}")
        } else {
            String::new()
        };
        println!("  !! {experiment}: {what}{when} failed: {e:#}");
        self.results.failures.push(Failure {
            experiment: experiment.to_owned(),
            what: what.to_owned(),
            round,
            error: format!("{e:#}"),
        });
        Ok(())
    }

    fn eta(&self) -> String {
        let p = &self.progress;
        if p.done == 0 || p.planned <= p.done {
            return String::new();
        }
        let per = p.started.elapsed().as_secs_f64() / f64::from(p.done);
        let left = per * f64::from(p.planned - p.done);
        format!("  (about {} left)", human_duration(left))
    }
}

/// The lines of `climbing` whose rung `rung` meets the ladder's stop rule
/// (the median over the rounds recorded so far).
pub fn stopping(
    ladder: &Ladder,
    rung: usize,
    climbing: &[usize],
    records: &[RoundRecord],
) -> Vec<usize> {
    climbing
        .iter()
        .copied()
        .filter(|&l| {
            let Some(cell) = ladder.lines.get(l).and_then(|line| line.get(rung)) else {
                return false;
            };
            let values: Vec<f64> = records
                .iter()
                .filter(|r| &r.cell == cell)
                .filter_map(|r| ladder.stop.metric.of(&Measures::of(r)))
                .collect();
            Spread::of(&values).is_some_and(|s| s.median > ladder.stop.above)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::cell::Load;

    #[test]
    fn a_ladder_line_stops_at_the_first_rung_whose_median_meets_the_rule() {
        use crate::measure::figures::Metric;
        use crate::measure::schedule::StopRule;
        let open = |via: &str, rate: u32| Cell {
            load: Load::Open { rate, max_vus: 100 },
            ..Cell::closed(via, 100, 8, 1)
        };
        let ladder = Ladder {
            lines: vec![
                vec![open("h1-json", 500), open("h1-json", 1000)],
                vec![open("grpc", 500), open("grpc", 1000)],
            ],
            stop: StopRule {
                metric: Metric::BehindShare,
                above: 1.0,
            },
        };
        // Rung 0: h1-json drops 5% in two rounds of three (median 5%), grpc
        // 5% in one (median 0%).
        let mut records = Vec::new();
        for (via, drops) in [("h1-json", [5.0, 5.0, 0.0]), ("grpc", [5.0, 0.0, 0.0])] {
            for (round, d) in drops.iter().enumerate() {
                let mut r = crate::synthetic::record("pool", &open(via, 500), round as u32 + 1);
                r.load.iterations = 100.0 - d;
                r.load.dropped = *d;
                records.push(r);
            }
        }
        assert_eq!(stopping(&ladder, 0, &[0, 1], &records), vec![0]);
        // A rung not measured yet stops nothing.
        assert!(stopping(&ladder, 1, &[0, 1], &records).is_empty());
    }
}
