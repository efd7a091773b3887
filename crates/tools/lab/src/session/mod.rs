//! A whole run: plan it, measure it, and write its results directory.
//!
//! ```text
//! results/<timestamp>-<experiment>/
//!   run.json          what was asked, the knobs and every experiment's plan,
//!                     on what machine, and how it ended
//!   rounds/*.json     the raw record of every load round, written as it finishes
//!   probes/*.json     the rounds of probes; bench/*.json benchmark results
//!   failures.json     rounds that produced no numbers, and why
//!   logs/             the services' and k6's output; certs/ for TLS cells
//!   report.json       every table as typed values, and run.json inside
//!   report.md, report.html, *.svg
//! ```
//!
//! The session runs schedules by their shape, never by the experiment they
//! came from: every grid's cells first (a cell two experiments share is
//! measured once, rounds interleaved across all of them), then ladders,
//! then probes, then benchmarks on a machine the services have left.
//! Everything the report says is rebuilt from `run.json` and the raw
//! records, so `lab report DIR` can render an interrupted run again, or
//! render a run with newer analysis code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

use crate::analysis::Data;
use crate::experiment::{Context, Entry, Knobs};
use crate::experiments;
use crate::experiments::tables::everything;
use crate::measure::cell::{Cell, K6_GRPC_DIRECT, Load};
use crate::measure::figures::{Measures, Metric};
use crate::measure::judge::{BUSY_NEIGHBOUR_CORES, FAILED_BAD_SHARE_PCT, K6_SATURATED_CORES};
use crate::measure::k6;
use crate::measure::machine::{self, Machine};
use crate::measure::results::Results;
use crate::measure::runner::Lab;
use crate::measure::schedule::{Needs, Schedule};
use crate::measure::services::{self, Binaries, Databases, ServiceConfig};
use crate::measure::{Timing, human_duration, is_interrupted, write_json};
use crate::report::format as f;
use crate::report::value::Value;
use crate::report::{Report, Section, Table};

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

/// A content hash of a file: 64-bit SipHash-1-3 with zero keys (std's
/// `DefaultHasher`), as hex. Enough to tell two builds apart; not a
/// security measure.
fn content_hash(path: &Path) -> anyhow::Result<String> {
    use std::hash::Hasher as _;
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut h = std::hash::DefaultHasher::new();
    h.write(&bytes);
    Ok(format!("{:016x} ({} bytes)", h.finish(), bytes.len()))
}

/// What keeps a run from being resumed as it is: each difference between
/// the first part and now, in words.
fn resume_differences(before: &RunInfo, now: &RunInfo) -> Vec<String> {
    let mut diffs = Vec::new();
    let (b, n) = (&before.machine, &now.machine);
    if (b.git_commit.as_str(), b.git_dirty) != (n.git_commit.as_str(), n.git_dirty) {
        let dirty = |d: bool| if d { " with uncommitted changes" } else { "" };
        diffs.push(format!(
            "the commit: {}{} then, {}{} now",
            b.git_commit,
            dirty(b.git_dirty),
            n.git_commit,
            dirty(n.git_dirty)
        ));
    }
    for (name, then) in &before.binaries {
        let now = now.binaries.get(name).map_or("none", String::as_str);
        if then != now {
            diffs.push(format!("the {name} binary: {then} then, {now} now"));
        }
    }
    if before.plans != now.plans {
        let changed: Vec<&str> = before
            .plans
            .keys()
            .chain(now.plans.keys())
            .filter(|k| before.plans.get(*k) != now.plans.get(*k))
            .map(String::as_str)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        diffs.push(format!("the plan of {}", changed.join(", ")));
    }
    if before.store != now.store {
        diffs.push(format!(
            "the store: {} then, {} now",
            before.store, now.store
        ));
    }
    if b.k6 != n.k6 {
        diffs.push(format!("k6: {} then, {} now", b.k6, n.k6));
    }
    let host = |m: &Machine| {
        format!(
            "{} cores, {}, {:.1} GiB, Linux {}, {}",
            m.cores, m.cpu_model, m.memory_gib, m.kernel, m.rustc
        )
    };
    if host(b) != host(n) {
        diffs.push(format!("the machine: {} then, {} now", host(b), host(n)));
    }
    diffs
}

/// The cells that need HAProxy taken out of `cells`, each as skipped with
/// the way to install it.
pub fn without_haproxy(cells: Vec<(String, Cell)>) -> (Vec<(String, Cell)>, Vec<Skipped>) {
    let behind = |c: &Cell| {
        c.env.replicas.is_some_and(|r| {
            matches!(
                r.balance,
                crate::measure::cell::Balance::L4 | crate::measure::cell::Balance::L7
            )
        })
    };
    let (skip, keep): (Vec<_>, Vec<_>) = cells.into_iter().partition(|(_, c)| behind(c));
    let skipped = skip
        .into_iter()
        .map(|(experiment, c)| Skipped {
            experiment,
            what: c.label(),
            why: haproxy::INSTALL_HINT.to_owned(),
        })
        .collect();
    (keep, skipped)
}

/// The cells that ask for Postgres taken out of `cells`, each as skipped
/// with `why`.
pub fn without_postgres(
    cells: Vec<(String, Cell)>,
    why: &str,
) -> (Vec<(String, Cell)>, Vec<Skipped>) {
    let (skip, keep): (Vec<_>, Vec<_>) = cells
        .into_iter()
        .partition(|(_, c)| c.env.store == Some(crate::measure::cell::Store::Postgres));
    let skipped = skip
        .into_iter()
        .map(|(experiment, c)| Skipped {
            experiment,
            what: c.label(),
            why: why.to_owned(),
        })
        .collect();
    (keep, skipped)
}

/// A planned cell the run did not measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    pub experiment: String,
    pub what: String,
    pub why: String,
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

/// How a run ended.
#[derive(Debug)]
pub struct Outcome {
    pub dir: PathBuf,
    pub interrupted: bool,
    pub failures: usize,
}

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

fn validate(opts: &RunOptions) -> anyhow::Result<()> {
    if opts.resume.is_some() {
        for (given, flag) in [
            (opts.experiment.is_some(), "an experiment"),
            (opts.quick, "--quick"),
            (opts.rounds.is_some(), "--rounds"),
            (opts.duration_s.is_some(), "--duration"),
            (opts.warmup_s.is_some(), "--warmup"),
            (opts.transports.is_some(), "--transports"),
            (opts.sizes.is_some(), "--sizes"),
            (opts.target.is_some(), "--target"),
            (opts.out.is_some(), "--out"),
        ] {
            if given {
                bail!("--resume continues a run with its own plan: {flag} cannot be given with it");
            }
        }
    } else if opts.force {
        bail!("--force only applies to --resume");
    }
    if let Some(ts) = &opts.transports {
        for t in ts {
            if !transports::is_known(t) {
                bail!(
                    "unknown transport {t:?}; valid transports are: {}",
                    transports::ALL.join(", ")
                );
            }
        }
        if ts.is_empty() {
            bail!("--transports needs at least one transport");
        }
    }
    if let Some(sizes) = &opts.sizes
        && (sizes.is_empty() || sizes.iter().any(|&s| s > 10_000))
    {
        bail!("--sizes takes orders per call from 0 to 10000");
    }
    if opts.rounds == Some(0) {
        bail!("--rounds must be at least 1");
    }
    // k6 refuses scenarios shorter than a second.
    if opts.duration_s.is_some_and(|d| d < 1.0) {
        bail!("--duration must be at least 1 s (k6's shortest scenario)");
    }
    if opts.warmup_s.is_some_and(|w| w != 0.0 && w < 1.0) {
        bail!("--warmup must be 0 (none) or at least 1 s (k6's shortest scenario)");
    }
    if opts.target.is_some() {
        for (given, flag) in [
            (opts.database_url.is_some(), "--database-url"),
            (opts.pin, "--pin"),
            (opts.bin_dir.is_some(), "--bin-dir"),
        ] {
            if given {
                bail!(
                    "--target measures a stack the lab does not start: {flag} has nothing to act on"
                );
            }
        }
    }
    Ok(())
}

/// The store as the report names it, with no password.
fn store_label(url: Option<&str>) -> String {
    match url {
        None => "in memory (no database: the protocol-overhead upper bound)".to_owned(),
        Some(u) => format!("Postgres at {}", services::authority(u)),
    }
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

/// Runs an experiment end to end and writes its report.
pub fn run(opts: RunOptions, root: &Path, stop: Arc<AtomicBool>) -> anyhow::Result<Outcome> {
    crate::measure::procfs::require_procfs()?;
    validate(&opts)?;
    // A resumed run takes everything that shapes its plan from its first part.
    let earlier = match &opts.resume {
        Some(dir) => {
            let (info, results) =
                load(dir).with_context(|| format!("--resume {}", dir.display()))?;
            if info.target.is_some() {
                bail!(
                    "--resume {}: a run against --target cannot be resumed",
                    dir.display()
                );
            }
            if info.knobs.on_postgres && opts.database_url.is_none() {
                bail!(
                    "--resume {}: the run measured on Postgres ({}); give its --database-url again",
                    dir.display(),
                    info.store
                );
            }
            Some((dir.clone(), info, results))
        }
        None => None,
    };
    let experiment = match &earlier {
        Some((_, info, _)) => info.experiment.clone(),
        None => opts
            .experiment
            .clone()
            .unwrap_or_else(|| experiments::ALL.to_owned()),
    };
    let entries = experiments::expand(&experiment)?;
    let knobs = match &earlier {
        Some((_, info, _)) => Knobs {
            on_postgres: opts.database_url.is_some(),
            ..info.knobs.clone()
        },
        None => Knobs {
            quick: opts.quick,
            transports: opts.transports.clone(),
            sizes: opts.sizes.clone(),
            on_postgres: opts.database_url.is_some(),
        },
    };
    let Planned { plans, schedules } = plan(&entries, &knobs)?;
    let d = default_timing(knobs.quick);
    let timing = match &earlier {
        Some((_, info, _)) => info.timing,
        None => Timing {
            rounds: opts.rounds.unwrap_or(d.rounds),
            duration_s: opts.duration_s.unwrap_or(d.duration_s),
            warmup_s: opts.warmup_s.unwrap_or(d.warmup_s),
            restarted: opts.target.is_none(),
        },
    };
    if let Some(t) = &opts.target {
        t.check().context("--target")?;
        for e in &entries {
            if let Err(why) = e.target() {
                bail!(
                    "{} cannot run against a stack it did not start (--target): {why}; the experiments that can are {}",
                    e.name(),
                    experiments::all()
                        .iter()
                        .filter(|e| e.target().is_ok())
                        .map(|e| e.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
        for e in &entries {
            if e.calls_order_service() && (t.order_rest.is_none() || t.order_grpc.is_none()) {
                bail!(
                    "{} calls order-service directly: give its addresses with --target-order-rest and --target-order-grpc",
                    e.name()
                );
            }
        }
    }
    if !root.join("k6").join("closed-loop.js").is_file() {
        bail!(
            "{} is not the project's root (no k6/closed-loop.js); run the lab from the workspace or pass --root",
            root.display()
        );
    }
    let started_at = chrono::Utc::now();
    let results_root = opts.out.clone().unwrap_or_else(|| root.join("results"));
    let dir = match &earlier {
        Some((dir, ..)) => dir.clone(),
        None => results_root.join(format!(
            "{}-{experiment}",
            started_at.format("%Y%m%dT%H%M%SZ"),
        )),
    };
    std::fs::create_dir_all(dir.join("logs"))
        .with_context(|| format!("creating {}", dir.display()))?;
    std::fs::create_dir_all(dir.join("rounds"))?;
    match &earlier {
        Some(_) => println!("results: {} (resumed)", dir.display()),
        None => println!("results: {}", dir.display()),
    }

    let k6_bin = k6::find_or_install(root)?;
    let k6_version = k6::version(&k6_bin)?;
    println!("k6: {} ({k6_version})", k6_bin.display());
    let bins = match (&opts.target, &opts.bin_dir) {
        // Nothing is started: no binary is needed.
        (Some(_), _) => Binaries {
            order: PathBuf::new(),
            user: PathBuf::new(),
        },
        (None, Some(d)) => Binaries {
            order: d.join("order-service"),
            user: d.join("user-service"),
        },
        (None, None) => services::build(root)?,
    };
    if opts.target.is_none() {
        for b in [&bins.order, &bins.user] {
            if !b.is_file() {
                bail!("{} is missing", b.display());
            }
        }
    }
    let binaries = if opts.target.is_none() {
        [("order-service", &bins.order), ("user-service", &bins.user)]
            .into_iter()
            .map(|(n, p)| Ok((n.to_owned(), content_hash(p)?)))
            .collect::<anyhow::Result<BTreeMap<_, _>>>()?
    } else {
        BTreeMap::new()
    };
    let databases = opts
        .database_url
        .as_deref()
        .map(Databases::from_server_url)
        .transpose()?;
    let needs = schedules
        .iter()
        .fold(Needs::default(), |n, (_, s)| n.and(s.needs()));
    // Cells that ask for Postgres whatever the run's store: the run's
    // server, or the local default, if it answers.
    let mut postgres_missing = None;
    let store_databases = if needs.postgres && opts.target.is_none() {
        let url = opts
            .database_url
            .clone()
            .unwrap_or_else(|| services::DEFAULT_DATABASE_URL.to_owned());
        let found = services::reachable(&url)
            .and_then(|()| Databases::from_server_url(&url))
            .and_then(|db| services::seed_into(&bins, &db).map(|()| db));
        match found {
            Ok(db) => {
                println!(
                    "postgres: cells on Postgres use {}",
                    services::authority(&url)
                );
                Some(db)
            }
            Err(e) => {
                let why = format!(
                    "Postgres at {} cannot be used ({e:#}); start it, or pass --database-url",
                    services::authority(&url)
                );
                println!(
                    "postgres: {why}; the cells on Postgres are skipped, and listed in the report"
                );
                postgres_missing = Some(why);
                None
            }
        }
    } else {
        None
    };
    let svc = ServiceConfig {
        bins,
        databases,
        store_databases,
        target: opts.target.clone(),
        pin: opts.pin,
        log_dir: dir.join("logs"),
        certs: if needs.certs {
            let certs = tls::generate::write_lab_certs(&dir.join("certs"))
                .context("making the run's throwaway TLS certificates")?;
            println!(
                "tls: a throwaway CA and certificates in {}",
                dir.join("certs").display()
            );
            Some(certs)
        } else {
            None
        },
    };
    let haproxy_missing = needs.haproxy
        && match haproxy::binary() {
            Some(h) => {
                println!("haproxy: {}", h.display());
                false
            }
            None => {
                println!(
                    "haproxy: {}; the cells behind an L4 or L7 balancer are skipped, and listed in the report",
                    haproxy::INSTALL_HINT
                );
                true
            }
        };
    if svc.pin
        && std::process::Command::new("taskset")
            .arg("-V")
            .output()
            .is_err()
    {
        bail!("--pin needs taskset (util-linux)");
    }
    let mut info = RunInfo {
        experiment: experiment.clone(),
        experiments: entries.iter().map(|e| e.name().to_owned()).collect(),
        command: opts.command.clone(),
        knobs,
        plans,
        timing,
        store: match &opts.target {
            Some(_) => "the target's own (the lab does not know it)".to_owned(),
            None => store_label(opts.database_url.as_deref()),
        },
        pinning: svc.pinning(),
        machine: machine::describe(root, &k6_version),
        started_at: started_at.to_rfc3339(),
        elapsed_s: None,
        outcome: "running".to_owned(),
        service_env: BTreeMap::new(),
        target: opts.target.clone(),
        skipped: Vec::new(),
        binaries,
        parts: Vec::new(),
    };
    // What the first part measured, kept; what differs since, refused
    // unless forced.
    let mut forced = Vec::new();
    let mut kept = None;
    if let Some((dir, before, results)) = earlier {
        let diffs = resume_differences(&before, &info);
        if !diffs.is_empty() {
            if !opts.force {
                bail!(
                    "cannot resume {}: {} differ{} from when it started; pass --force to resume anyway (the report then says so)",
                    dir.display(),
                    diffs.join("; "),
                    if diffs.len() == 1 { "s" } else { "" }
                );
            }
            println!("resuming despite: {}", diffs.join("; "));
            forced = diffs;
        }
        info.started_at.clone_from(&before.started_at);
        info.command.clone_from(&before.command);
        info.machine = before.machine.clone();
        info.binaries.clone_from(&before.binaries);
        info.parts = if before.parts.is_empty() {
            // A run from before parts were recorded: its one part.
            vec![RunPart {
                started_at: before.started_at.clone(),
                elapsed_s: before.elapsed_s.unwrap_or(0.0),
                measured: results.records.len() as u32 + results.probes.len() as u32,
                outcome: before.outcome.clone(),
                forced: Vec::new(),
            }]
        } else {
            before.parts.clone()
        };
        kept = Some(results);
    }
    write_json(&dir.join("run.json"), &info)?;
    services::seed(&svc)?;

    // Every grid's cells, each measured once, under the first experiment
    // that asked for it; then ladders, probes, and benchmarks last, on a
    // machine the services have left.
    let mut seen = BTreeSet::new();
    let mut cells: Vec<(String, Cell)> = Vec::new();
    let (mut ladders, mut probes, mut benches) = (Vec::new(), Vec::new(), Vec::new());
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
            Schedule::Probe(p) => probes.push((name, p)),
            Schedule::Bench(b) => benches.push((name, b)),
        }
    }
    if haproxy_missing {
        let (keep, skipped) = without_haproxy(cells);
        cells = keep;
        info.skipped = skipped;
        write_json(&dir.join("run.json"), &info)?;
    }
    if let Some(why) = &postgres_missing {
        let (keep, skipped) = without_postgres(cells, why);
        cells = keep;
        info.skipped.extend(skipped);
        write_json(&dir.join("run.json"), &info)?;
    }
    let r = timing.rounds;
    let planned = cells.len() as u32 * r
        + ladders.iter().map(|(_, l)| l.planned(r)).sum::<u32>()
        + probes.len() as u32 * r;
    let per = timing.duration_s + timing.warmup_s + 1.5;
    let count = |n: usize, one: &str| match n {
        1 => format!("1 {one}"),
        n => format!("{n} {one}s"),
    };
    println!(
        "plan: {}, {}, {}, {}; {r} rounds each: up to {planned} measurements, about {}{}",
        count(cells.len(), "cell"),
        count(ladders.len(), "ladder"),
        count(probes.len(), "probe"),
        count(benches.len(), "benchmark"),
        human_duration(f64::from(planned) * per),
        if benches.is_empty() {
            ""
        } else {
            " before the benchmarks"
        }
    );
    let t0 = Instant::now();
    let mut lab = Lab::new(root.to_path_buf(), k6_bin, svc, timing, dir.clone(), stop);
    if let Some(results) = kept {
        let n = lab.keep(results);
        println!("resume: {n} measurements kept from earlier parts; the missing ones follow");
    }
    // Measurements held: rounds and probe rounds with their numbers.
    let held = |lab: &Lab| (lab.results.records.len() + lab.results.probes.len()) as u32;
    let kept_before = held(&lab);
    lab.plan_more(planned);

    let result = (|| -> anyhow::Result<()> {
        lab.run_cells(&cells)?;
        for (name, ladder) in &ladders {
            lab.run_ladder(name, ladder)?;
        }
        for (name, probe) in &probes {
            lab.run_probe(name, probe)?;
        }
        for (name, bench) in benches {
            lab.run_bench(&name, bench)?;
        }
        Ok(())
    })();
    let interrupted = match result {
        Ok(()) => false,
        Err(e) if is_interrupted(&e) => true,
        Err(e) => return Err(e),
    };
    let _ = std::fs::remove_dir_all(dir.join("tmp"));
    let (done, planned) = lab.progress();
    if let Some(first) = lab.results.records.first() {
        info.service_env.clone_from(&first.service_env);
    }
    info.outcome = if interrupted {
        format!("interrupted after {done} of {planned} planned measurements: a partial report")
    } else {
        format!("complete: {done} measurements")
    };
    info.parts.push(RunPart {
        started_at: started_at.to_rfc3339(),
        elapsed_s: t0.elapsed().as_secs_f64(),
        measured: held(&lab) - kept_before,
        outcome: info.outcome.clone(),
        forced,
    });
    info.elapsed_s = Some(info.parts.iter().map(|p| p.elapsed_s).sum());
    write_json(&dir.join("run.json"), &info)?;
    write_json(&dir.join("failures.json"), &lab.results.failures)?;
    let report = build_report(&info, &lab.results);
    report.write(&dir)?;
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

/// When each part of a resumed run ran, and what a forced resumption
/// overrode; `None` for a run made in one part.
fn parts_text(info: &RunInfo) -> Option<String> {
    if info.parts.len() < 2 {
        return None;
    }
    let parts: Vec<String> = info
        .parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let forced = if p.forced.is_empty() {
                String::new()
            } else {
                format!(
                    "; resumed with --force although {} differed",
                    p.forced.join("; ")
                )
            };
            format!(
                "part {} from {} for {}, {} measurements ({}){forced}",
                i + 1,
                p.started_at,
                human_duration(p.elapsed_s),
                p.measured,
                p.outcome
            )
        })
        .collect();
    Some(format!(
        "resumed: in {} parts; {}",
        info.parts.len(),
        parts.join("; ")
    ))
}

/// Renders a results directory's report again.
pub fn rerender(dir: &Path) -> anyhow::Result<()> {
    let (info, results) = load(dir)?;
    build_report(&info, &results).write(dir)
}

/// The whole report of a run.
pub fn build_report(info: &RunInfo, results: &Results) -> Report {
    let data = Data::new(results);
    let cx = Context {
        timing: &info.timing,
        data: &data,
        results,
        store: &info.store,
    };
    let m = &info.machine;
    let t = &info.timing;
    let mut report = Report {
        title: format!("Transport lab: {}", info.experiment),
        intro: vec![
            "user-service fetches a user's orders from order-service over the transport each \
             table names; k6 drives user-service's `GET /v1/users/{id}/orders` on the same machine. \
             **Upstream** figures are measured inside user-service around its call (the \
             `x-upstream-micros` header, recorded per request by k6), so the load tool's own client \
             is not in them (the Spring Boot post's pitfall); **end-to-end** figures are k6's. Only good \
             answers count (a 200 over the transport asked for with the expected body): rates, \
             latencies and CPU per request are theirs, and a round with more than 1% bad answers \
             is left out. CPU per request comes from /proc (utime + stime) over the window from \
             just before k6 starts to just after it exits, divided by the good answers; bytes and \
             connections from user-service's socket counters."
                .to_owned(),
            format!(
                "Every figure is the median of {} rounds, each round {} \
                 after a discarded warm-up. An absolute figure's parentheses hold the lowest and \
                 highest round. A ratio (`×1.52 (1.41–1.63)`) is computed round by round and its \
                 parentheses hold a 95% rerun interval: where the median of another run of the same \
                 plan on this machine should land, from the round-to-round noise of that metric \
                 pooled over the experiment's cells (or the pair's own, when larger). `lab compare` \
                 checks two runs against each other's intervals. A round is flagged when k6 used \
                 {K6_SATURATED_CORES} core or more (its numbers then measure k6 too), when other \
                 programs used {} cores or more during it, or when it saw errors. \
                 On a machine this small the three processes share {} cores: absolute rates are this \
                 machine's, the ratios are what travels.",
                t.rounds,
                if t.restarted {
                    "on freshly started services"
                } else {
                    "on the same running services (a target the lab did not start)"
                },
                BUSY_NEIGHBOUR_CORES,
                m.cores
            ),
        ],
        meta: vec![
            ("command".into(), format!("`{}`", info.command)),
            (
                "services".into(),
                match &info.target {
                    Some(t) => format!(
                        "{}; not started or restarted by the lab. CPU per process, RSS, \
                         TIME_WAIT sockets and other processes' load are n/a: the lab cannot read \
                         the services' processes",
                        t.describe()
                    ),
                    None => "started by the lab for every round, on free ports".to_owned(),
                },
            ),
            ("outcome".into(), info.outcome.clone()),
            (
                "machine".into(),
                format!(
                    "{} cores, {}, {:.1} GiB memory, Linux {}",
                    m.cores, m.cpu_model, m.memory_gib, m.kernel
                ),
            ),
            ("versions".into(), format!("{}; {}", m.rustc, m.k6)),
            (
                "git commit".into(),
                format!(
                    "{}{}",
                    m.git_commit,
                    if m.git_dirty {
                        " (with uncommitted changes)"
                    } else {
                        ""
                    }
                ),
            ),
            ("run's store".into(), info.store.clone()),
            (
                "settings".into(),
                format!(
                    "{} rounds × {} s measured after {} s warm-up; closed loop {} VUs with {} \
                     unless a section states its own load; {}{}",
                    t.rounds,
                    f::num(t.duration_s),
                    f::num(t.warmup_s),
                    Knobs::VUS,
                    match &info.target {
                        // The lab sets no setting of a stack it did not start.
                        Some(_) => "the target's own pool (not the plan's, which the sections name)"
                            .to_owned(),
                        None => format!("pool {}", Knobs::POOL),
                    },
                    if info.knobs.quick {
                        "quick plan"
                    } else {
                        "full plan"
                    },
                    info.pinning
                        .as_ref()
                        .map_or("; no CPU pinning".to_owned(), |p| format!("; pinned: {p}")),
                ),
            ),
            ("compression between the services".into(), compression(info, results)),
            (
                "services' environment".into(),
                if info.service_env.is_empty() {
                    "not recorded".to_owned()
                } else {
                    format!(
                        "cleared, then only: {} (values in each round's record)",
                        info.service_env
                            .keys()
                            .map(|k| format!("`{k}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
            ),
            (
                "started".into(),
                format!(
                    "{}{}",
                    info.started_at,
                    info.elapsed_s.map_or(String::new(), |s| format!(
                        ", took {}",
                        human_duration(s)
                    ))
                ),
            ),
        ],
        sections: Vec::new(),
        run: serde_json::to_value(info).unwrap_or_default(),
        ..Report::default()
    };
    if let Some(parts) = parts_text(info) {
        report.meta.push(("parts".into(), parts));
    }
    let vias = info.knobs.transports();
    if transports::TWINS
        .iter()
        .any(|(_, t)| vias.iter().any(|v| v == t))
    {
        // What differs between a tuned twin and its stock transport, stated
        // wherever both may sit side by side.
        report.intro.push(
            "`grpc-tuned`, `grpc-stream-tuned` and `h2c-proto-tuned` make the same calls as \
             `grpc`, `grpc-stream` and `h2c-proto`, to the same servers, on connections of the \
             `h2` crate the caller uses directly: no tonic `Channel` (no `Buffer` task) and no \
             hyper client task per call, and they advertise HTTP/2's largest frame size \
             (2^24 − 1 bytes, where the stock clients keep 16 KiB), so a large answer comes in \
             fewer DATA frames. The two gRPC ones also send their request as one DATA frame, \
             decode each answer from one `Bytes` rather than tonic's `BytesMut`, and send no \
             `user-agent` header. `grpc-bidi-tuned` is `grpc-bidi` with only that decoding \
             and the frame size changed: it keeps tonic's `Channel`. Windows are hyper's \
             defaults in all of them. The stock transports are what tonic and hyper give by \
             default."
                .to_owned(),
        );
    }
    if [transports::CONNECT_H1_PROTO, transports::CONNECT_H2C_PROTO]
        .iter()
        .any(|t| vias.iter().any(|v| v == t))
    {
        report.intro.push(
            "`connect-h1-proto` and `connect-h2c-proto` call `ListOrders` with the Connect \
             protocol: connect-rust's client POSTs a protobuf `ListOrdersRequest` to \
             order-service's REST port, where connect-rust's server answers from the same store. \
             They use the same connection pools as `h1-proto` and `h2c-proto`, and the answer's \
             bytes are the same. What differs is a POST with a body against a GET with a query \
             string, Connect's headers, and the protobuf runtime on both ends (buffa, not \
             prost). Neither end compresses."
                .to_owned(),
        );
    }
    let others: Vec<f64> = results
        .records
        .iter()
        .filter_map(|r| Metric::OtherCores.of(&Measures::of(r)))
        .collect();
    if info.target.is_some() {
        report.meta.push((
            "other load".into(),
            "n/a: the services of a target are not the lab's processes, so the rest of the \
             machine's load cannot be told from theirs"
                .into(),
        ));
    } else if let Some(o) = crate::stats::Spread::of(&others) {
        report.meta.push((
            "other load".into(),
            format!(
                "processes other than the two services and k6 used {:.2} cores in the median round (at most {:.2}); rounds at {} cores or more are flagged",
                o.median,
                o.max,
                BUSY_NEIGHBOUR_CORES
            ),
        ));
    }
    for (name, entry) in info.entries() {
        let section = match entry {
            None => Err(anyhow::anyhow!("this lab has no experiment named {name:?}")),
            Some(e) => info
                .plans
                .get(&name)
                .with_context(|| format!("run.json has no plan for {name}"))
                .and_then(|plan| e.section(plan, &cx)),
        };
        report.sections.push(section.unwrap_or_else(|e| {
            let mut s = Section::new(&name, &name);
            s.para(format!("This section could not be built: {e:#}."));
            s
        }));
    }
    report
        .sections
        .push(flags_section(&data, results, &info.skipped));
    report.sections.push(appendix(&cx));
    report
}

/// What the run's services were told about compression.
fn compression(info: &RunInfo, results: &Results) -> String {
    if results
        .records
        .iter()
        .any(|r| r.cell.env.gzip || r.cell.env.zstd)
    {
        return "gzip in the cells marked \"gzip\" only (ORDER_REST_GZIP, ORDER_GRPC_GZIP and \
                USER_UPSTREAM_GZIP on), zstd in those marked \"zstd\" only (ORDER_REST_ZSTD, \
                ORDER_GRPC_ZSTD and USER_UPSTREAM_ZSTD on), on the REST and gRPC transports; \
                none in every other cell"
            .to_owned();
    }
    if info.service_env.is_empty() {
        return "not recorded (a run from before the services' environment was kept)".to_owned();
    }
    match info
        .service_env
        .get("order-service ORDER_GRPC_GZIP")
        .map(String::as_str)
    {
        Some("true") => "order-service gzip-compressed its gRPC answers for clients that accept \
                         gzip (ORDER_GRPC_GZIP=true)"
            .to_owned(),
        _ => "none on any transport: order-service's gRPC gzip off (ORDER_GRPC_GZIP unset), \
              user-service's clients offer no encoding, order-service's REST compresses nothing"
            .to_owned(),
    }
}

fn flags_section(data: &Data, results: &Results, skipped: &[Skipped]) -> Section {
    let mut s = Section::new("flags", "Flagged rounds and failures");
    let rows: Vec<Vec<Value>> = data
        .flags
        .iter()
        .flat_map(|(c, fl)| {
            fl.iter()
                .map(move |x| vec![Value::text(c.label()), Value::Flag { reason: x.clone() }])
        })
        .collect();
    if rows.is_empty() {
        s.para("No round was flagged: k6 stayed under the saturation threshold and every answer was a 200 over the transport asked for.");
    } else {
        let n = rows.len();
        s.table(Table {
            caption: "Flagged rounds".into(),
            headers: vec!["cell".into(), "flag".into()],
            rows,
            reading: format!(
                "{n} round flags. A k6 flag means the load generator used a core or more, so that cell's rate is partly k6's limit; a busy-machine flag means other programs took CPU during the run, so its absolute figures are lower and noisier (ratios between cells of the same round suffer less)."
            ),
        });
    }
    let failed: Vec<Vec<Value>> = data
        .failed
        .iter()
        .flat_map(|(c, rounds)| {
            rounds.iter().map(move |(round, why)| {
                vec![
                    Value::text(c.label()),
                    Value::text(round.to_string()),
                    Value::Flag {
                        reason: why.clone(),
                    },
                ]
            })
        })
        .collect();
    if failed.is_empty() {
        s.para(format!(
            "No round was failed by its answers: in every round at most {FAILED_BAD_SHARE_PCT}% \
             of the answers not shed were bad, and some were good."
        ));
    } else {
        let n = failed.len();
        s.table(Table {
            caption: "Rounds failed by their answers (left out of every figure)".into(),
            headers: vec!["cell".into(), "round".into(), "why".into()],
            rows: failed,
            reading: format!(
                "{n} rounds had more than {FAILED_BAD_SHARE_PCT}% bad answers (or no good one): \
                 their figures are left out of every median and ratio, which then rest on the \
                 other rounds, or show n/a."
            ),
        });
    }
    if !skipped.is_empty() {
        s.table(Table {
            caption: "Planned cells not measured on this machine".into(),
            headers: vec!["experiment".into(), "cell".into(), "why".into()],
            rows: skipped
                .iter()
                .map(|k| {
                    vec![
                        Value::text(k.experiment.clone()),
                        Value::text(k.what.clone()),
                        Value::text(k.why.clone()),
                    ]
                })
                .collect(),
            reading: format!(
                "{} cells were skipped before the run: their figures are n/a.",
                skipped.len()
            ),
        });
    }
    if results.failures.is_empty() {
        s.para("No round failed to run.");
    } else {
        s.table(Table {
            caption: "Failed rounds (no numbers)".into(),
            headers: vec![
                "experiment".into(),
                "what".into(),
                "round".into(),
                "error".into(),
            ],
            rows: results
                .failures
                .iter()
                .map(|f| {
                    vec![
                        Value::text(f.experiment.clone()),
                        Value::text(f.what.clone()),
                        Value::text(f.round.to_string()),
                        Value::Flag {
                            reason: f.error.clone(),
                        },
                    ]
                })
                .collect(),
            reading: "These cells show n/a where the failed rounds left no value; the services' and k6's output is in logs/.".into(),
        });
    }
    s
}

fn appendix(cx: &Context) -> Section {
    let mut s = Section::new("cells", "Every cell");
    s.para("Every measured cell with every figure (median ±half the min–max range). Raw rounds: `rounds/*.json`.");
    let mut closed = Vec::new();
    let mut open = Vec::new();
    for c in cx.data.cells.keys() {
        // k6's direct gRPC cells have no user-service figures to show here.
        if c.via == K6_GRPC_DIRECT {
            continue;
        }
        match c.load {
            Load::Closed { .. } => closed.push((c.label(), c.clone())),
            Load::Open { .. } => open.push((c.label(), c.clone())),
        }
    }
    if !closed.is_empty() {
        s.table(everything(cx, "Closed-loop cells", &closed));
    }
    if !open.is_empty() {
        s.table(everything(cx, "Open-loop cells", &open));
    }
    if closed.is_empty() && open.is_empty() {
        s.para("No load cell was measured in this run.");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_label_never_shows_a_password() {
        assert!(store_label(None).starts_with("in memory"));
        assert_eq!(
            store_label(Some("postgres://u:secret@db:5432")),
            "Postgres at db:5432"
        );
    }

    #[test]
    fn without_haproxy_only_the_balanced_cells_are_skipped_and_said_why() {
        use crate::experiment::Experiment as _;
        let knobs = Knobs {
            quick: true,
            ..Knobs::default()
        };
        let p = crate::experiments::replicas::Replicas::plan(&knobs);
        let cells: Vec<(String, Cell)> = crate::experiments::replicas::cells(&p)
            .into_iter()
            .map(|c| ("replicas".to_owned(), c))
            .chain(std::iter::once((
                "payload".to_owned(),
                Knobs::closed("grpc", 1),
            )))
            .collect();
        let n = cells.len();
        let (keep, skipped) = without_haproxy(cells);
        assert_eq!(keep.len() + skipped.len(), n);
        assert!(keep.iter().any(|(e, _)| e == "payload"));
        assert!(
            keep.iter()
                .all(|(_, c)| c.env.replicas.is_none_or(|r| r.balance.by_client()))
        );
        assert_eq!(
            skipped.len(),
            3 * 2 * 2,
            "l4 and l7, healthy and slow, 3 transports"
        );
        assert!(
            skipped
                .iter()
                .all(|k| k.why.contains("apt-get install haproxy"))
        );
        let (info, results) = crate::synthetic::run(&["payload"], true, 2);
        let info = RunInfo { skipped, ..info };
        let md = build_report(&info, &results).markdown();
        assert!(
            md.contains("Planned cells not measured on this machine"),
            "{md}"
        );
    }

    #[test]
    fn the_report_states_how_the_tuned_twins_differ_only_when_the_run_has_them() {
        let (info, results) = crate::synthetic::run(&["payload"], true, 2);
        // Each of the differences: the client's tasks, the frame size, the
        // decoding, the header.
        let said = |info: &RunInfo| {
            let md = build_report(info, &results).markdown();
            let every = [
                "no tonic `Channel` (no `Buffer` task)",
                "HTTP/2's largest frame size",
                "rather than tonic's `BytesMut`",
                "no `user-agent` header",
            ];
            let n = every.iter().filter(|d| md.contains(**d)).count();
            assert!(
                n == 0 || n == every.len(),
                "only {n} of the differences stated"
            );
            n > 0
        };
        assert!(said(&info), "every transport, the twins among them");
        let mut stock = info.clone();
        stock.knobs.transports = Some(vec!["grpc".into(), "h2c-proto".into()]);
        assert!(!said(&stock));
        stock.knobs.transports = Some(vec!["grpc".into(), "grpc-tuned".into()]);
        assert!(said(&stock));
        stock.knobs.transports = Some(vec!["grpc-bidi-tuned".into()]);
        assert!(said(&stock));
    }

    #[test]
    fn the_report_states_what_connect_changes_only_when_the_run_has_it() {
        let (info, results) = crate::synthetic::run(&["payload"], true, 2);
        let said = |info: &RunInfo| {
            build_report(info, &results)
                .markdown()
                .contains("the protobuf runtime on both ends (buffa, not prost)")
        };
        assert!(said(&info), "every transport, Connect's among them");
        let mut some = info.clone();
        some.knobs.transports = Some(vec!["h1-proto".into(), "grpc".into()]);
        assert!(!said(&some));
        some.knobs.transports = Some(vec!["h1-proto".into(), "connect-h1-proto".into()]);
        assert!(said(&some));
    }

    #[test]
    fn a_resumption_names_every_difference_from_the_first_part() {
        let (before, _) = crate::synthetic::run(&["payload"], true, 2);
        assert!(resume_differences(&before, &before).is_empty());
        let mut now = before.clone();
        now.machine.cores = 8;
        now.machine.git_commit = "0123456789ab".into();
        now.store = "postgres at 127.0.0.1:5432".into();
        now.binaries
            .insert("user-service".into(), "another build".into());
        let mut before = before;
        before
            .binaries
            .insert("user-service".into(), "the first build".into());
        let diffs = resume_differences(&before, &now).join("\n");
        for what in [
            "the commit",
            "the user-service binary",
            "the store",
            "the machine: 2 cores",
        ] {
            assert!(diffs.contains(what), "{what} missing: {diffs}");
        }
    }

    #[test]
    fn bad_options_are_refused_before_anything_runs() {
        let mut o = RunOptions {
            transports: Some(vec!["carrier-pigeon".into()]),
            ..Default::default()
        };
        let e = validate(&o).unwrap_err().to_string();
        assert!(e.contains("grpc-bidi"), "{e}");
        o.transports = None;
        o.sizes = Some(vec![20000]);
        assert!(validate(&o).is_err());
        o.sizes = None;
        o.rounds = Some(0);
        assert!(validate(&o).is_err());
        o.rounds = None;
        o.warmup_s = Some(0.5);
        assert!(validate(&o).is_err());
        o.warmup_s = Some(0.0);
        assert!(validate(&o).is_ok());
        o.duration_s = Some(0.5);
        assert!(validate(&o).is_err());
    }
}
