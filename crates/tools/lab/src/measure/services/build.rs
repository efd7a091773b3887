//! The services' release binaries and the lab's load engine, built with
//! cargo (or given with `--bin-dir`, which skips this).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

/// The release binaries of both services and of the load engine.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub order: PathBuf,
    pub user: PathBuf,
    pub loadgen: PathBuf,
}

impl Binaries {
    /// The binaries in `dir` (a `--bin-dir`, or cargo's output).
    pub fn in_dir(dir: &Path) -> Binaries {
        Binaries {
            order: dir.join("order-service"),
            user: dir.join("user-service"),
            loadgen: dir.join("loadgen"),
        }
    }
}

/// The variables `cargo run` sets for the lab itself. Build scripts read
/// some of them (ring's asks to rerun when `CARGO_PKG_NAME` or
/// `CARGO_MANIFEST_DIR` changes), so a nested build that kept them would
/// see `lab` where the lab's own build saw nothing, and rebuild ring and
/// everything above it, then the lab's next build would rebuild them back.
fn set_by_cargo_run(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || [
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_MANIFEST_LINKS",
            "CARGO_CRATE_NAME",
            "CARGO_BIN_NAME",
            "CARGO_PRIMARY_PACKAGE",
        ]
        .contains(&name)
}

/// `cargo` (the one running us, if any) without the variables `cargo run`
/// or `cargo test` set for the lab, so that a nested build shares its
/// compiled dependencies with the builds made from a shell.
pub fn cargo() -> Command {
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_run) {
            cargo.env_remove(name);
        }
    }
    cargo
}

/// Builds both services and the load engine in release mode, cargo's
/// progress shown as it goes; with `engine_only` (a `--target`, whose
/// services are not the lab's to start), the engine alone.
pub fn build(root: &Path, engine_only: bool) -> anyhow::Result<Binaries> {
    let packages: &[&str] = if engine_only {
        &["loadgen"]
    } else {
        &["order-service", "user-service", "loadgen"]
    };
    println!("building {} (release)…", packages.join(", "));
    let mut cmd = cargo();
    cmd.current_dir(root).args(["build", "--release"]);
    for p in packages {
        cmd.args(["-p", p]);
    }
    let status = cmd
        .status()
        .context("running cargo build (is cargo on PATH?)")?;
    if !status.success() {
        bail!(
            "cargo build --release -p {} failed ({status})",
            packages.join(" -p ")
        );
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let bins = Binaries::in_dir(&target.join("release"));
    let mut built = vec![&bins.loadgen];
    if !engine_only {
        built.extend([&bins.order, &bins.user]);
    }
    for b in built {
        if !b.is_file() {
            bail!("the build succeeded but {} is missing", b.display());
        }
    }
    Ok(bins)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variables_cargo_run_sets_for_the_lab_are_not_passed_on() {
        for v in [
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "CARGO_MANIFEST_DIR",
        ] {
            assert!(set_by_cargo_run(v), "{v}");
        }
        for v in [
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO",
            "PATH",
            "RUSTFLAGS",
        ] {
            assert!(!set_by_cargo_run(v), "{v}");
        }
    }
}
