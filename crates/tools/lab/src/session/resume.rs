//! Resuming an interrupted run (`lab run --resume DIR`): its first part read
//! back, what differs since (the commit, the binaries, the plan, the store,
//! k6, the machine) refused unless forced, and what it measured kept, so
//! that only the missing rounds are measured.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use super::info::{RunInfo, RunOptions, RunPart, load};
use crate::measure::machine::Machine;
use crate::measure::results::Results;
use crate::measure::services::Binaries;

/// The first part of a resumed run: where it is, what it was, what it
/// measured.
pub struct Earlier {
    pub dir: PathBuf,
    pub info: RunInfo,
    pub results: Results,
}

/// The run `--resume` names, read back (`None` without `--resume`). A
/// resumed run takes everything that shapes its plan from its first part;
/// a run against a target cannot be resumed, and one on Postgres needs its
/// `--database-url` again.
pub fn earlier(opts: &RunOptions) -> anyhow::Result<Option<Earlier>> {
    let Some(dir) = &opts.resume else {
        return Ok(None);
    };
    let (info, results) = load(dir).with_context(|| format!("--resume {}", dir.display()))?;
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
    Ok(Some(Earlier {
        dir: dir.clone(),
        info,
        results,
    }))
}

/// Carries the first part over into this part's `info`: its start, command,
/// machine, binaries and parts. What differs since is refused unless
/// `force`, and then returned, to be recorded with this part. Returns that
/// and the measurements the first part kept.
pub fn take_over(
    info: &mut RunInfo,
    earlier: Earlier,
    force: bool,
) -> anyhow::Result<(Vec<String>, Results)> {
    let Earlier {
        dir,
        info: before,
        results,
    } = earlier;
    let mut forced = Vec::new();
    let diffs = resume_differences(&before, info);
    if !diffs.is_empty() {
        if !force {
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
    Ok((forced, results))
}

/// A content hash of each service binary the run measures (none for a
/// target), so that a resumed run can tell whether they are the same.
pub fn binary_hashes(bins: &Binaries, target: bool) -> anyhow::Result<BTreeMap<String, String>> {
    if target {
        return Ok(BTreeMap::new());
    }
    // The load engine too, when it is there (a run under k6 alone has
    // none): another engine is another instrument.
    [
        ("order-service", &bins.order),
        ("user-service", &bins.user),
        ("loadgen", &bins.loadgen),
    ]
    .into_iter()
    .filter(|(n, p)| *n != "loadgen" || p.is_file())
    .map(|(n, p)| Ok((n.to_owned(), content_hash(p)?)))
    .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
