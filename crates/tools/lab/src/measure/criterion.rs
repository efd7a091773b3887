//! Running a criterion benchmark of the workspace (`cargo bench`) into a
//! results directory, and reading criterion's own estimates back: what the
//! `codec` and `hop` experiments share.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde::Deserialize;

use crate::measure::Interrupted;

/// One benchmark's median and criterion's 95% confidence interval of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimated {
    pub group: String,
    pub function: Option<String>,
    pub value: Option<String>,
    pub median_ns: f64,
    pub lower_ns: f64,
    pub upper_ns: f64,
}

/// `cargo ARGS` (a `cargo bench …`) with criterion writing under `home`,
/// each finished benchmark's time echoed with `tag`, its messages in `log`;
/// Ctrl-C (`stop`) kills it and returns [`Interrupted`].
pub fn run(
    root: &Path,
    args: &[String],
    home: &Path,
    log: &Path,
    tag: &str,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<()> {
    run_with_env(root, args, &[], home, log, tag, stop)
}

/// [`run`], with variables set for the benchmark binary (the hop
/// benchmark's paired mode reads its own).
pub fn run_with_env(
    root: &Path,
    args: &[String],
    env: &[(&str, String)],
    home: &Path,
    log: &Path,
    tag: &str,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<()> {
    println!(
        "{tag}: building and running the criterion benchmark (cargo {})",
        args.join(" ")
    );
    let log_file =
        std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut child = crate::measure::services::build::cargo()
        .args(args)
        .current_dir(root)
        .env("CRITERION_HOME", home)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(log_file)
        .spawn()
        .context("starting cargo bench (is cargo on PATH?)")?;
    let stdout = child.stdout.take().context("cargo bench's stdout")?;
    let tag_echo = tag.to_owned();
    let echo = std::thread::spawn(move || {
        let mut id = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let starts_with_id = line.chars().next().is_some_and(|c| !c.is_whitespace());
            if starts_with_id && !line.starts_with("Benchmarking") {
                id = line
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
            }
            if let Some((_, t)) = line.split_once("time:") {
                println!("{tag_echo}: {id:<28} {}", t.trim());
            }
        }
    });
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if stop.load(Ordering::SeqCst) {
            let _ = child.kill();
            let _ = child.wait();
            let _ = echo.join();
            bail!(Interrupted);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = echo.join();
    if !status.success() {
        bail!(
            "cargo {} failed ({status}); its messages are in {}",
            args.join(" "),
            log.display()
        );
    }
    Ok(())
}

/// What criterion writes beside each benchmark's estimates.
#[derive(Deserialize)]
struct BenchmarkId {
    group_id: String,
    function_id: Option<String>,
    value_str: Option<String>,
}

#[derive(Deserialize)]
struct Estimates {
    median: Estimate,
}

#[derive(Deserialize)]
struct Estimate {
    point_estimate: f64,
    confidence_interval: Interval,
}

#[derive(Deserialize)]
struct Interval {
    lower_bound: f64,
    upper_bound: f64,
}

/// Every `new/benchmark.json` + `new/estimates.json` pair under `home`.
pub fn read(home: &Path) -> anyhow::Result<Vec<Estimated>> {
    let mut found = Vec::new();
    let mut stack: Vec<PathBuf> = vec![home.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?;
        for e in entries.filter_map(Result::ok) {
            let p = e.path();
            if p.is_dir() {
                // `base/` and `change/` hold older runs and comparisons.
                if p.file_name().is_some_and(|n| n != "base" && n != "report") {
                    stack.push(p);
                }
            } else if p.file_name().is_some_and(|n| n == "benchmark.json")
                && p.parent()
                    .and_then(Path::file_name)
                    .is_some_and(|n| n == "new")
            {
                found.push(p);
            }
        }
    }
    let mut out = Vec::new();
    for p in found {
        let read = |p: &Path| {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
        };
        let id: BenchmarkId =
            serde_json::from_str(&read(&p)?).with_context(|| format!("parsing {}", p.display()))?;
        let est_path = p.with_file_name("estimates.json");
        let est: Estimates = serde_json::from_str(&read(&est_path)?)
            .with_context(|| format!("parsing {}", est_path.display()))?;
        out.push(Estimated {
            group: id.group_id,
            function: id.function_id,
            value: id.value_str,
            median_ns: est.median.point_estimate,
            lower_ns: est.median.confidence_interval.lower_bound,
            upper_ns: est.median.confidence_interval.upper_bound,
        });
    }
    Ok(out)
}
