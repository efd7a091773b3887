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

/// Builds both services in release mode, cargo's progress shown as it goes.
pub fn build(root: &Path) -> anyhow::Result<Binaries> {
    println!("building order-service and user-service (release)…");
    let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
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
