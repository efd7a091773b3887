//! `lab run`, step by step: the options checked, the plan made (or taken
//! from the first part of a resumed run), everything a round needs prepared
//! ([`super::preflight`]), `run.json` written, the [`Work`] measured by the
//! runner, and the run's outcome, `run.json` again and the report written,
//! whether it completed or was interrupted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use anyhow::Context as _;

use super::generators;
use super::info::{Outcome, RunInfo, RunOptions, RunPart, Skipped};
use super::plan::{self, Planned, Work};
use super::preflight;
use super::report::build_report;
use super::resume;
use crate::experiments;
use crate::measure::cell::Cell;
use crate::measure::machine;
use crate::measure::results::Results;
use crate::measure::runner::Lab;
use crate::measure::schedule::Needs;
use crate::measure::services::{self, Databases, ServiceConfig};
use crate::measure::{human_duration, is_interrupted, write_json};

/// Runs an experiment end to end and writes its report.
pub fn run(mut opts: RunOptions, root: &Path, stop: Arc<AtomicBool>) -> anyhow::Result<Outcome> {
    crate::measure::procfs::require_procfs()?;
    preflight::validate(&opts)?;
    let earlier = resume::earlier(&opts)?;
    let before = earlier.as_ref().map(|e| &e.info);
    // A resumed run keeps its first part's --seed (--resume takes none).
    if let Some(b) = before {
        opts.seed = b.path_seed;
    }
    let experiment = match before {
        Some(info) => info.experiment.clone(),
        None => opts
            .experiment
            .clone()
            .unwrap_or_else(|| experiments::ALL.to_owned()),
    };
    let entries = experiments::expand(&experiment)?;
    let knobs = plan::knobs(&opts, before);
    let Planned { plans, schedules } = plan::plan(&entries, &knobs)?;
    preflight::check_rate_caps(
        schedules
            .iter()
            .flat_map(|(name, s)| s.cells().into_iter().map(move |c| (name.as_str(), c))),
    )?;
    let timing = plan::timing(&opts, &knobs, before);
    if let Some(t) = &opts.target {
        preflight::check_target(t, &entries)?;
    }
    preflight::check_root(root)?;
    let started_at = chrono::Utc::now();
    let dir = results_dir(
        &opts,
        earlier.as_ref().map(|e| e.dir.as_path()),
        root,
        &experiment,
        started_at,
    )?;

    let bins = preflight::binaries(&opts, root)?;
    let bins_for_generators = bins.clone();
    let binaries = resume::binary_hashes(&bins, opts.target.is_some())?;
    let needs = schedules
        .iter()
        .fold(Needs::default(), |n, (_, s)| n.and(s.needs()));
    let (svc, postgres_missing, own_postgres_missing) = services_of(&opts, bins, needs, &dir)?;
    let haproxy_missing = preflight::haproxy_missing(needs);
    preflight::check_taskset(svc.pin)?;
    let mut info = RunInfo {
        experiment: experiment.clone(),
        experiments: entries.iter().map(|e| e.name().to_owned()).collect(),
        command: opts.command.clone(),
        knobs,
        plans,
        timing,
        store: match &opts.target {
            Some(_) => "the target's own (the lab does not know it)".to_owned(),
            None => preflight::store_label(opts.database_url.as_deref()),
        },
        pinning: svc.pinning(machine::cores()),
        machine: machine::describe(root),
        started_at: started_at.to_rfc3339(),
        elapsed_s: None,
        outcome: "running".to_owned(),
        service_env: BTreeMap::new(),
        target: opts.target.clone(),
        path_seed: opts.seed,
        skipped: Vec::new(),
        binaries,
        parts: Vec::new(),
    };
    // What the first part measured, kept; what differs since, refused
    // unless forced.
    let (forced, kept) = match earlier {
        Some(e) => {
            let (forced, kept) = resume::take_over(&mut info, e, opts.force)?;
            (forced, Some(kept))
        }
        None => (Vec::new(), None),
    };
    write_json(&dir.join("run.json"), &info)?;
    services::seed(&svc)?;

    let mut work = Work::of(schedules);
    let used = generators::used(&work, info.knobs.load);
    let found = generators::find(&used, info.knobs.load, root, &bins_for_generators)?;
    info.machine.k6 = found.k6_version;
    info.machine.loadgen = found.loadgen_version;
    let (keep, skipped) = generators::without_missing(work.cells, &found.generators);
    work.cells = keep;
    info.skipped.extend(skipped);
    let missing = Missing {
        haproxy: haproxy_missing,
        postgres: postgres_missing,
        own_postgres: own_postgres_missing,
    };
    work.cells = runnable(work.cells, &missing, &mut info);
    write_json(&dir.join("run.json"), &info)?;
    let planned = work.announce(&timing);
    let t0 = Instant::now();
    let mut lab = Lab::new(
        root.to_path_buf(),
        found.generators,
        svc,
        timing,
        dir.clone(),
        stop,
    );
    if let Some(results) = kept {
        let n = lab.keep(results);
        println!("resume: {n} measurements kept from earlier parts; the missing ones follow");
    }
    let kept_before = held(&lab.results);
    lab.plan_more(planned);
    let interrupted = match measure(&mut lab, work) {
        Ok(()) => false,
        Err(e) if is_interrupted(&e) => true,
        Err(e) => return Err(e),
    };
    let _ = std::fs::remove_dir_all(dir.join("tmp"));
    let part = RunPart {
        started_at: started_at.to_rfc3339(),
        elapsed_s: t0.elapsed().as_secs_f64(),
        measured: held(&lab.results) - kept_before,
        outcome: String::new(),
        forced,
    };
    finish(&mut info, part, &lab, interrupted, &dir)?;
    println!(
        "{} in {}: {}",
        if interrupted { "stopped" } else { "done" },
        human_duration(t0.elapsed().as_secs_f64()),
        dir.join("report.md").display()
    );
    println!("          {}", dir.join("report.html").display());
    println!("          {}", dir.join("report.json").display());
    Ok(Outcome {
        dir,
        interrupted,
        failures: lab.results.failures.len(),
    })
}

/// The run's results directory, made with its `logs` and `rounds`: the
/// resumed run's `earlier` one, or a new one named by the start and the
/// experiment under `--out` (`results/` by default).
fn results_dir(
    opts: &RunOptions,
    earlier: Option<&Path>,
    root: &Path,
    experiment: &str,
    started_at: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<PathBuf> {
    let dir = match earlier {
        Some(d) => d.to_path_buf(),
        None => opts
            .out
            .clone()
            .unwrap_or_else(|| root.join("results"))
            .join(format!(
                "{}-{experiment}",
                started_at.format("%Y%m%dT%H%M%SZ"),
            )),
    };
    std::fs::create_dir_all(dir.join("logs"))
        .with_context(|| format!("creating {}", dir.display()))?;
    std::fs::create_dir_all(dir.join("rounds"))?;
    match earlier {
        Some(_) => println!("results: {} (resumed)", dir.display()),
        None => println!("results: {}", dir.display()),
    }
    Ok(dir)
}

/// What this machine lacks that some cells need.
struct Missing {
    haproxy: bool,
    /// Why the run's Postgres server cannot be used, if it cannot.
    postgres: Option<String>,
    /// Why the lab's own Postgres server could not be made, if it could not.
    own_postgres: Option<String>,
}

/// `cells` without those this machine cannot run, each left out with why
/// in `info.skipped`: QUIC through the lab's TCP middles, a reset without
/// its tool, HAProxy, Postgres or the lab's own Postgres missing, no
/// packet path, a congestion control the kernel lacks.
fn runnable(
    mut cells: Vec<(String, Cell)>,
    missing: &Missing,
    info: &mut RunInfo,
) -> Vec<(String, Cell)> {
    let mut out = |(keep, skipped): (Vec<(String, Cell)>, Vec<Skipped>)| {
        info.skipped.extend(skipped);
        keep
    };
    cells = out(preflight::without_quic_through_tcp(cells));
    cells = out(preflight::without_reset(cells));
    if missing.haproxy {
        cells = out(preflight::without_haproxy(cells));
    }
    if let Some(why) = &missing.postgres {
        cells = out(preflight::without_postgres(cells, why));
    }
    if let Some(why) = &missing.own_postgres {
        cells = out(preflight::without_own_postgres(cells, why));
    }
    if let Some(why) = preflight::packet_path_missing(&cells) {
        cells = out(preflight::without_packet_path(cells, &why));
    }
    for (cc, why) in preflight::unusable_algorithms(&cells) {
        cells = out(preflight::without_algorithm(cells, cc, &why));
    }
    cells
}

/// Measurements held: rounds and probe rounds with their numbers.
fn held(results: &Results) -> u32 {
    (results.records.len() + results.probes.len()) as u32
}

/// How the run starts its services: the binaries, the run's store and the
/// one of cells on Postgres, pinning, logs, and the run's throwaway TLS
/// certificates when a cell needs them, and the lab's own Postgres when a
/// cell restarts it; and why the cells on Postgres, and those on the lab's
/// own, cannot be measured, when they cannot.
fn services_of(
    opts: &RunOptions,
    bins: services::Binaries,
    needs: Needs,
    dir: &Path,
) -> anyhow::Result<(ServiceConfig, Option<String>, Option<String>)> {
    let databases = opts
        .database_url
        .as_deref()
        .map(Databases::from_server_url)
        .transpose()?;
    let (store_databases, postgres_missing) = preflight::store_databases(opts, &bins, needs);
    let (own_postgres, own_postgres_missing) = preflight::own_postgres(opts, &bins, needs);
    let certs = if needs.certs {
        let certs = tls::generate::write_lab_certs(&dir.join("certs"))
            .context("making the run's throwaway TLS certificates")?;
        println!(
            "tls: a throwaway CA and certificates in {}",
            dir.join("certs").display()
        );
        Some(certs)
    } else {
        None
    };
    let config = ServiceConfig {
        bins,
        databases,
        store_databases,
        own_postgres,
        target: opts.target.clone(),
        pin: opts.pin,
        path_seed: opts.seed,
        log_dir: dir.join("logs"),
        certs,
    };
    Ok((config, postgres_missing, own_postgres_missing))
}

/// Measures the work in its order: every grid's cells, the ladders, the
/// staged grids, the probes, the benchmarks. An interruption stops it with
/// its error.
fn measure(lab: &mut Lab, work: Work) -> anyhow::Result<()> {
    lab.run_cells(&work.cells)?;
    for (name, ladder) in &work.ladders {
        lab.run_ladder(name, ladder)?;
    }
    for (name, staged) in &work.staged {
        lab.run_staged(name, staged)?;
    }
    for (name, probe) in &work.probes {
        lab.run_probe(name, probe)?;
    }
    for (name, bench) in work.benches {
        lab.run_bench(&name, bench)?;
    }
    Ok(())
}

/// Records how the run ended (the outcome, given to this `part` too; the
/// services' environment from the first round) and writes `run.json`,
/// `failures.json` and the report.
fn finish(
    info: &mut RunInfo,
    mut part: RunPart,
    lab: &Lab,
    interrupted: bool,
    dir: &Path,
) -> anyhow::Result<()> {
    let (done, planned) = lab.progress();
    if let Some(first) = lab.results.records.first() {
        info.service_env.clone_from(&first.service_env);
    }
    info.outcome = if interrupted {
        format!("interrupted after {done} of {planned} planned measurements: a partial report")
    } else {
        format!("complete: {done} measurements")
    };
    part.outcome = info.outcome.clone();
    info.parts.push(part);
    info.elapsed_s = Some(info.parts.iter().map(|p| p.elapsed_s).sum());
    write_json(&dir.join("run.json"), info)?;
    write_json(&dir.join("failures.json"), &lab.results.failures)?;
    let report = build_report(info, &lab.results);
    report.write(dir)
}
