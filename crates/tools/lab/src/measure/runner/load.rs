//! The load of a round: the generator that drives it (the lab's engine by
//! default, k6 with `--load k6` and in the cells where k6 is the subject,
//! wrk in the generator experiment), its command line made from the cell,
//! and what it leaves: its summary, its CPU and its peak memory.
//!
//! Whichever it is, the generator is a child process of the lab's, started
//! (pinned, with `--pin`) and waited for here; its CPU is read from the
//! lab's `cutime`/`cstime` (the CPU of reaped children), which counts all
//! of its threads to its exit and nothing else: no other child is reaped
//! while it runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context as _, bail};

use super::Lab;
use super::answer::{many_users, request_path};
use crate::measure::Interrupted;
use crate::measure::cell::{Cell, K6_GRPC_DIRECT, Load};
use crate::measure::load::{Generator, Summary};
use crate::measure::procfs;
use crate::measure::services::{ChildGuard, Running};
use crate::measure::{engine, k6, wrk};

/// A round's stretch of load: the discarded warm-up or the measured run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Warmup,
    Measured,
}

/// What a generator left of a run.
pub(super) struct LoadRun {
    pub(super) generator: Generator,
    pub(super) summary: Summary,
    /// Its own summary, whole.
    pub(super) raw: serde_json::Value,
    /// The engine's exact histogram of good answers (µs, encoded).
    pub(super) e2e_hdr: Option<String>,
    pub(super) cpu_us: f64,
    pub(super) peak_rss_kb: u64,
}

impl Lab {
    /// The CPU the generator is pinned to with `--pin`: a core of its own
    /// when there are three or more, else CPU 0 beside order-service (the
    /// lighter of the two services on the lab's small calls).
    pub fn generator_cpu(&self) -> u32 {
        if self.cores >= 3 { 2 } else { 0 }
    }

    /// Runs the cell's generator for `duration_s`: in `phase`, with the
    /// length of a good answer the lab checked (`expected`). A warm-up is
    /// always a closed loop, so that an overload rate leaves no backlog.
    pub(super) fn generate(
        &self,
        cell: &Cell,
        running: &Running,
        (expected, duration_s): (Option<&str>, f64),
        phase: Phase,
        tmp: &Path,
    ) -> anyhow::Result<LoadRun> {
        let generator = cell.generator_under(self.generators.default);
        let name = match phase {
            Phase::Warmup => "warmup",
            Phase::Measured => "measured",
        };
        let load = match (phase, cell.load) {
            (Phase::Warmup, Load::Open { .. }) => Load::Closed { vus: 8 },
            (_, load) => load,
        };
        match generator {
            Generator::Loadgen => {
                let out = tmp.join(format!("{name}.loadgen.json"));
                let _ = std::fs::remove_file(&out);
                let mut cmd = self.command(Generator::Loadgen)?;
                cmd.arg("--url")
                    .arg(format!("{}{}", running.user_base_url(), request_path(cell)))
                    .args(["--duration", &format!("{duration_s}")])
                    .args(["--grace", "5", "--timeout", "60"])
                    .args(["--header", &format!("x-via={}", cell.via)]);
                if many_users(cell) > 0 {
                    let calls = if cell.batch { 1 } else { cell.users };
                    cmd.args(["--header", &format!("x-upstream-calls={calls}")]);
                }
                if let Some(len) = expected {
                    cmd.args(["--length", len]);
                }
                match load {
                    Load::Closed { vus } => {
                        cmd.args(["--connections", &vus.to_string()]);
                        if cell.think_ms > 0 {
                            cmd.args(["--think-ms", &cell.think_ms.to_string()]);
                        }
                    }
                    Load::Open { rate, max_vus } => {
                        cmd.args(["--connections", &max_vus.to_string()])
                            .args(["--rate", &rate.to_string()]);
                    }
                }
                cmd.arg("--summary").arg(&out);
                let (cpu_us, peak_rss_kb) = self.supervise(cmd, Generator::Loadgen)?;
                let text = std::fs::read_to_string(&out).with_context(|| {
                    format!(
                        "loadgen wrote no summary at {} (see {})",
                        out.display(),
                        self.log_of(Generator::Loadgen).display()
                    )
                })?;
                let s: loadgen::tally::Summary =
                    serde_json::from_str(&text).context("loadgen's summary")?;
                let (summary, e2e_hdr) = engine::summary(&s)?;
                Ok(LoadRun {
                    generator,
                    summary,
                    raw: serde_json::from_str(&text)?,
                    e2e_hdr,
                    cpu_us,
                    peak_rss_kb,
                })
            }
            Generator::K6 => {
                let mut env = self.k6_env(cell, running, load);
                if let Some(len) = expected {
                    env.push(("EXPECTED_LENGTH".to_owned(), len.to_owned()));
                }
                env.push(("DURATION".to_owned(), k6::secs_arg(duration_s)));
                let script = match load {
                    Load::Open { .. } => "open-loop.js",
                    Load::Closed { .. } if cell.via == K6_GRPC_DIRECT => "grpc-direct.js",
                    Load::Closed { .. } => "closed-loop.js",
                };
                self.run_k6(script, env, &tmp.join(format!("{name}.k6.json")))
            }
            Generator::Wrk => {
                let Load::Closed { vus } = load else {
                    bail!("wrk runs closed loops only (it has no open loop)");
                };
                if cell.think_ms > 0 {
                    bail!("wrk has no think time");
                }
                let hook = wrk::write_hook(tmp)?;
                let out = tmp.join(format!("{name}.wrk.out"));
                let mut cmd = self.command(Generator::Wrk)?;
                // wrk counts its duration in whole seconds.
                let secs = duration_s.ceil().max(1.0) as u64;
                cmd.args(["-t1", &format!("-c{vus}"), &format!("-d{secs}s")])
                    .args(["--timeout", "60s", "-s"])
                    .arg(&hook)
                    .arg(format!("{}{}", running.user_base_url(), request_path(cell)))
                    .stdout(Stdio::from(std::fs::File::create(&out)?));
                let (cpu_us, peak_rss_kb) = self.supervise(cmd, Generator::Wrk)?;
                let text = std::fs::read_to_string(&out)?;
                let summary = wrk::parse(&text)
                    .with_context(|| format!("reading wrk's output ({})", out.display()))?;
                Ok(LoadRun {
                    generator,
                    summary,
                    raw: serde_json::Value::String(text),
                    e2e_hdr: None,
                    cpu_us,
                    peak_rss_kb,
                })
            }
        }
    }

    /// Where a generator's output goes.
    fn log_of(&self, g: Generator) -> PathBuf {
        self.services.log_dir.join(format!("{}.log", g.name()))
    }

    /// A generator's command: pinned with `--pin`, its output appended to
    /// its log, nothing on its standard input.
    fn command(&self, g: Generator) -> anyhow::Result<Command> {
        let bin = self.generators.path(g)?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_of(g))?;
        let mut cmd = if self.services.pin {
            let mut c = Command::new("taskset");
            c.args(["-c", &self.generator_cpu().to_string()]).arg(bin);
            c
        } else {
            Command::new(bin)
        };
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log));
        Ok(cmd)
    }

    /// Runs a generator's command to its end (killed on Ctrl-C); returns
    /// its CPU (µs, every thread, to its exit) and peak RSS (kB). With
    /// `--pin`, the kernel's word that it runs where it was put is checked.
    fn supervise(&self, cmd: Command, g: Generator) -> anyhow::Result<(f64, u64)> {
        let before = procfs::self_ticks()?;
        let mut child = ChildGuard::spawn(cmd, g.name())?;
        let pid = child.pid();
        let mut peak_rss_kb = 0;
        let mut pin_checked = !self.services.pin;
        let mut polls = 0u32;
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
            // After a poll's sleep taskset has set the mask and exec'd.
            if !pin_checked
                && polls > 0
                && let Ok(allowed) = procfs::cpus_allowed(pid)
            {
                let want = self.generator_cpu().to_string();
                if allowed != want {
                    child.kill();
                    bail!(
                        "--pin asked for {} on CPU {want}, but the kernel allows it CPUs {allowed}",
                        g.name()
                    );
                }
                pin_checked = true;
            }
            polls += 1;
            std::thread::sleep(Duration::from_millis(50));
        };
        let after = procfs::self_ticks()?;
        if !status.success() {
            bail!(
                "{} failed ({status}); its output is in {}",
                g.name(),
                self.log_of(g).display()
            );
        }
        Ok((
            (after.children - before.children) as f64 * 1e6 / self.ticks_per_second,
            peak_rss_kb,
        ))
    }

    /// k6's environment for a cell under `load`.
    fn k6_env(&self, cell: &Cell, running: &Running, load: Load) -> Vec<(String, String)> {
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
        match load {
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

    /// Runs one k6 script to its end.
    fn run_k6(
        &self,
        script: &str,
        env: Vec<(String, String)>,
        summary_path: &Path,
    ) -> anyhow::Result<LoadRun> {
        let _ = std::fs::remove_file(summary_path);
        let mut cmd = self.command(Generator::K6)?;
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
            .env("K6_NO_USAGE_REPORT", "true");
        let (cpu_us, peak_rss_kb) = self.supervise(cmd, Generator::K6)?;
        let text = std::fs::read_to_string(summary_path).with_context(|| {
            format!(
                "k6 wrote no summary at {} (see {})",
                summary_path.display(),
                self.log_of(Generator::K6).display()
            )
        })?;
        Ok(LoadRun {
            generator: Generator::K6,
            summary: k6::parse_summary(&text)?,
            raw: serde_json::from_str(&text)?,
            e2e_hdr: None,
            cpu_us,
            peak_rss_kb,
        })
    }
}
