//! k6 run for a round: the closed- or open-loop script of a cell, its
//! environment (the cell, user-service's address, the length of a good
//! answer), and k6's summary, CPU and peak memory when it exits.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context as _, bail};

use super::Lab;
use super::answer::many_users;
use crate::measure::Interrupted;
use crate::measure::cell::{Cell, K6_GRPC_DIRECT, Load};
use crate::measure::k6;
use crate::measure::procfs;
use crate::measure::services::{ChildGuard, Running};

impl Lab {
    pub(super) fn k6_env(&self, cell: &Cell, running: &Running) -> Vec<(String, String)> {
        let mut env = vec![
            ("BASE_URL".to_owned(), running.user_base_url()),
            ("VIA".to_owned(), cell.via.clone()),
            ("ORDERS".to_owned(), cell.orders.to_string()),
            ("USERS".to_owned(), many_users(cell).to_string()),
            ("BATCH".to_owned(), cell.batch.to_string()),
            ("FIELDS".to_owned(), cell.fields.clone().unwrap_or_default()),
            ("GRACEFUL_STOP".to_owned(), "5s".to_owned()),
            // The lab judges its rounds itself, and its pool ladder
            // overloads on purpose: k6's pass/fail thresholds stay off.
            ("THRESHOLDS".to_owned(), "off".to_owned()),
            (
                "GRPC_ADDR".to_owned(),
                running
                    .order_addrs()
                    .map(|(_, grpc)| grpc.to_string())
                    .unwrap_or_default(),
            ),
        ];
        if cell.think_ms > 0 {
            env.push(("THINK_MS".to_owned(), cell.think_ms.to_string()));
        }
        match cell.load {
            Load::Closed { vus } => env.push(("VUS".to_owned(), vus.to_string())),
            Load::Open { rate, max_vus } => {
                env.push(("RATE".to_owned(), rate.to_string()));
                // Every VU made before the load starts: none is created
                // mid-run, late, while the schedule waits for it.
                env.push(("PRE_VUS".to_owned(), max_vus.to_string()));
                env.push(("MAX_VUS".to_owned(), max_vus.to_string()));
            }
        }
        env
    }

    /// Runs one k6 script to its end; returns its summary, CPU and peak RSS.
    pub(super) fn run_k6(
        &self,
        script: &str,
        env: Vec<(String, String)>,
        summary_path: &Path,
    ) -> anyhow::Result<K6Run> {
        let _ = std::fs::remove_file(summary_path);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.services.log_dir.join("k6.log"))?;
        let mut cmd = Command::new(&self.k6);
        cmd.current_dir(self.root.join("k6"))
            .args(["run", "--quiet", "--no-color", "--no-usage-report"])
            // k6's REST API would take port 6565, which another k6 may hold.
            .args(["--address", "127.0.0.1:0"]);
        for (k, v) in &env {
            cmd.arg("-e").arg(format!("{k}={v}"));
        }
        cmd.arg("-e")
            .arg(format!("SUMMARY_JSON={}", summary_path.display()))
            .arg(script)
            .env("K6_NO_USAGE_REPORT", "true")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log));

        let before = procfs::self_ticks()?;
        let mut child = ChildGuard::spawn(cmd, "k6")?;
        let pid = child.pid();
        let mut peak_rss_kb = 0;
        let status = loop {
            if self.stop.load(Ordering::SeqCst) {
                child.kill();
                bail!(Interrupted);
            }
            if let Some(st) = child.try_wait()? {
                break st;
            }
            // VmHWM only grows, so the last reading before the exit is
            // within one poll of the peak.
            if let Ok(kb) = procfs::peak_rss_kb(pid) {
                peak_rss_kb = peak_rss_kb.max(kb);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let after = procfs::self_ticks()?;
        if !status.success() {
            bail!(
                "k6 {script} failed ({status}); its output is in {}",
                self.services.log_dir.join("k6.log").display()
            );
        }
        let text = std::fs::read_to_string(summary_path).with_context(|| {
            format!(
                "k6 wrote no summary at {} (see {})",
                summary_path.display(),
                self.services.log_dir.join("k6.log").display()
            )
        })?;
        let summary = k6::parse_summary(&text)?;
        let raw = serde_json::from_str(&text)?;
        Ok(K6Run {
            summary,
            raw,
            cpu_us: (after.children - before.children) as f64 * 1e6 / self.ticks_per_second,
            peak_rss_kb,
        })
    }
}

/// What k6 left of a run.
pub(super) struct K6Run {
    pub(super) summary: k6::Summary,
    pub(super) raw: serde_json::Value,
    pub(super) cpu_us: f64,
    pub(super) peak_rss_kb: u64,
}

/// The closed-loop script of a cell.
pub(super) fn script_of(cell: &Cell) -> &'static str {
    if cell.via == K6_GRPC_DIRECT {
        "grpc-direct.js"
    } else {
        "closed-loop.js"
    }
}

/// A duration as k6 reads it, in milliseconds.
pub fn secs_arg(s: f64) -> String {
    format!("{}ms", (s * 1000.0).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_given_to_k6_in_milliseconds() {
        assert_eq!(secs_arg(2.0), "2000ms");
        assert_eq!(secs_arg(0.5), "500ms");
    }
}
