//! The services' release binaries, built with cargo (or given with
//! `--bin-dir`, which skips this).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

/// The release binaries of both services.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub order: PathBuf,
    pub user: PathBuf,
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

/// Builds both services in release mode, cargo's progress shown as it goes.
pub fn build(root: &Path) -> anyhow::Result<Binaries> {
    println!("building order-service and user-service (release)…");
    let status = cargo()
        .current_dir(root)
        .args([
            "build",
            "--release",
            "-p",
            "order-service",
            "-p",
            "user-service",
        ])
        .status()
        .context("running cargo build (is cargo on PATH?)")?;
    if !status.success() {
        bail!("cargo build --release -p order-service -p user-service failed ({status})");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let bins = Binaries {
        order: target.join("release").join("order-service"),
        user: target.join("release").join("user-service"),
    };
    for b in [&bins.order, &bins.user] {
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
