//! The machine and versions a run happened on, recorded in every report:
//! numbers from a 2-core VM and from a 32-core workstation are not the same
//! numbers.

use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::measure::procfs;

/// Where and with what a run was made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub cores: u32,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
    pub rustc: String,
    /// k6's version, or "not used" (runs before the lab's own engine
    /// always used it).
    pub k6: String,
    /// The lab's load engine's version, or "not used".
    #[serde(default = "not_used")]
    pub loadgen: String,
    pub git_commit: String,
    /// Uncommitted changes in the work tree when the run started.
    pub git_dirty: bool,
}

fn not_used() -> String {
    "not used".to_owned()
}

/// The CPUs the lab may use.
pub fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

fn first_line(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_owned()
    })
}

/// Describes this machine; what cannot be read is written "unknown". The
/// load generators' versions are filled in once they are found.
pub fn describe(root: &Path) -> Machine {
    let unknown = || "unknown".to_owned();
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| procfs::parse_cpu_model(&t))
        .unwrap_or_else(unknown);
    let memory_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| procfs::parse_mem_total_kb(&t).ok())
        .map_or(0.0, |kb| kb as f64 / 1024.0 / 1024.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| unknown());
    let rustc = first_line(Command::new("rustc").arg("--version")).unwrap_or_else(unknown);
    let git = |args: &[&str]| first_line(Command::new("git").current_dir(root).args(args));
    let git_commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(unknown);
    let git_dirty = Command::new("git")
        .current_dir(root)
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    Machine {
        cores: cores(),
        cpu_model,
        memory_gib,
        kernel,
        rustc,
        k6: not_used(),
        loadgen: not_used(),
        git_commit,
        git_dirty,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_is_described() {
        let m = describe(Path::new("."));
        assert!(m.cores >= 1);
        assert!(m.memory_gib > 0.0);
        assert_eq!(
            (m.k6.as_str(), m.loadgen.as_str()),
            ("not used", "not used")
        );
        assert!(!m.kernel.is_empty());
    }
}
