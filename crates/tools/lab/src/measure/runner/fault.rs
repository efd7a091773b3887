//! A fault during a measured run ([`Env::fault`]): injected
//! [`Fault::ONSET_S`] after the load began, while k6 goes on, and watched
//! from both sides. A sampler reads user-service's counters of the cell's
//! transport every [`SAMPLE_MS`] from the load's start to its end (the
//! timeline the recovery is read from); the injector breaks what the fault
//! names and, for a process, starts it again and waits until it is ready.
//! order-service's own counts of the lookups it answered are read just
//! before and after the run, so that the report can set what order-service
//! did against what user-service got.
//!
//! [`Env::fault`]: crate::measure::cell::Env::fault

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use nix::sys::signal::Signal;

use crate::measure::cell::Fault;
use crate::measure::prom;
use crate::measure::record::FaultRecord;
use crate::measure::services::{ChildGuard, Running, process};

/// How often user-service's counters are read during a fault's run, ms.
pub const SAMPLE_MS: u64 = 100;

/// The longest a graceful stop may take before the process is killed.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// What the injector needs besides the running services.
pub(super) struct Watch<'a> {
    pub fault: Fault,
    pub running: &'a Running,
    /// user-service's metrics and the cell's transport.
    pub metrics: (SocketAddr, String),
    pub via: &'a str,
    pub log_dir: &'a Path,
    pub header: &'a str,
    pub stop: &'a Arc<AtomicBool>,
}

/// order-service's count of lookups answered well, every replica's
/// together; `None` when one cannot be read.
pub(super) fn order_answered(running: &Running) -> Option<f64> {
    if running.replicas.is_empty() {
        let r = crate::measure::http::get(
            running.ports.order_rest_addr(),
            "/metrics",
            Duration::from_secs(5),
        )
        .ok()?;
        let text = String::from_utf8_lossy(&r.body);
        return Some(prom::ReplicaCounters::of(&prom::parse(&text).ok()?).answered);
    }
    running
        .replicas
        .iter()
        .map(|rep| {
            let r = crate::measure::http::get(rep.rest, &rep.metrics_path, Duration::from_secs(5))
                .ok()?;
            let text = String::from_utf8_lossy(&r.body);
            Some(prom::ReplicaCounters::of(&prom::parse(&text).ok()?).answered)
        })
        .sum()
}

impl Watch<'_> {
    /// Waits for the load to begin, samples until `done`, and injects the
    /// fault on the way; the record of what happened when.
    pub fn run(&self, done: &AtomicBool) -> anyhow::Result<FaultRecord> {
        let calls = || -> anyhow::Result<(f64, f64)> {
            let (addr, path) = &self.metrics;
            let r = crate::measure::http::get(*addr, path, Duration::from_secs(5))?;
            let u = prom::Upstream::of(&prom::parse(&String::from_utf8_lossy(&r.body))?, self.via)?;
            Ok((u.calls, u.errors))
        };
        let before = calls()?.0;
        let waiting = Instant::now();
        while calls()?.0 <= before {
            anyhow::ensure!(
                waiting.elapsed() < Duration::from_secs(30),
                "the load did not begin within 30 s: no fault"
            );
            if done.load(Ordering::SeqCst) {
                bail!("the load ended before it was seen to begin: no fault");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let t0 = Instant::now();
        let ms = |t: Instant| t.duration_since(t0).as_secs_f64() * 1e3;
        std::thread::scope(|s| {
            let sampler = s.spawn(|| -> anyhow::Result<Vec<[f64; 3]>> {
                let mut timeline = Vec::new();
                let mut next = t0;
                loop {
                    let at = Instant::now();
                    // A scrape that fails (user-service busy past 5 s) leaves
                    // a gap, not a zero.
                    if let Ok((c, e)) = calls() {
                        timeline.push([ms(at), c, e]);
                    }
                    if done.load(Ordering::SeqCst) {
                        return Ok(timeline);
                    }
                    next += Duration::from_millis(SAMPLE_MS);
                    if let Some(d) = next.checked_duration_since(Instant::now()) {
                        std::thread::sleep(d);
                    }
                }
            });
            std::thread::sleep(Duration::from_secs_f64(Fault::ONSET_S));
            let injected = self.inject(t0);
            let timeline = sampler
                .join()
                .map_err(|_| anyhow::anyhow!("the fault's sampler panicked"))??;
            let mut rec = injected?;
            rec.timeline = timeline;
            Ok(rec)
        })
    }

    /// Breaks what the fault names and, for a process, starts it again.
    fn inject(&self, t0: Instant) -> anyhow::Result<FaultRecord> {
        let ms = |t: Instant| t.duration_since(t0).as_secs_f64() * 1e3;
        let mut rec = FaultRecord::default();
        match self.fault {
            Fault::Kill { down_ms } => {
                let i = usize::from(self.running.replicas.len() > 1);
                let guard = self.running.replica(i).context("no replica to kill")?;
                guard.signal(Signal::SIGKILL)?;
                rec.at_ms = ms(Instant::now());
                guard
                    .wait_exit(Duration::from_secs(5))?
                    .context("the killed replica did not exit within 5 s")?;
                std::thread::sleep(Duration::from_millis(u64::from(down_ms)));
                self.start_again(guard, i)?;
                rec.end_ms = ms(Instant::now());
            }
            Fault::Restart => {
                let guard = &self.running.order;
                guard.signal(Signal::SIGTERM)?;
                let asked = Instant::now();
                rec.at_ms = ms(asked);
                if guard.wait_exit(DRAIN_LIMIT)?.is_none() {
                    guard.signal(Signal::SIGKILL)?;
                    guard.wait_exit(Duration::from_secs(5))?;
                    rec.killed_after_drain = true;
                }
                rec.drain_ms = Some(asked.elapsed().as_secs_f64() * 1e3);
                self.start_again(guard, 0)?;
                rec.end_ms = ms(Instant::now());
            }
            Fault::Silence { ms: length } => {
                let on = self
                    .running
                    .path
                    .as_ref()
                    .context("a silent path needs the packet path")?;
                on.path.silence(true);
                rec.at_ms = ms(Instant::now());
                std::thread::sleep(Duration::from_millis(u64::from(length)));
                on.path.silence(false);
                rec.end_ms = ms(Instant::now());
            }
            Fault::Reset => {
                rec.at_ms = ms(Instant::now());
                rec.reset_sockets = Some(self.reset()?);
                rec.end_ms = rec.at_ms;
            }
        }
        Ok(rec)
    }

    /// Starts replica `i` (order-service for 0) again with its own command
    /// and waits until it answers `/readyz`.
    fn start_again(&self, guard: &ChildGuard, i: usize) -> anyhow::Result<()> {
        let log = process::log_file(
            self.log_dir,
            guard.name(),
            &format!("{}, started again after the fault", self.header),
        )?;
        guard.start_again(&log)?;
        let rest = match self.running.replicas.get(i) {
            Some(r) => r.rest,
            None => self.running.ports.order_rest_addr(),
        };
        process::wait_ready(guard, rest, None, self.log_dir, self.stop)
    }

    /// Resets every TCP connection user-service holds to order-service's
    /// ports (`ss -K`, which aborts each socket: the kernel sends the peer
    /// a RST); how many were reset.
    fn reset(&self) -> anyhow::Result<u32> {
        let p = &self.running.ports;
        let filter = format!(
            "( dport = :{} or dport = :{} or dport = :{} )",
            p.order_rest, p.order_grpc, p.order_tcp
        );
        let out = std::process::Command::new("ss")
            .args(["-K", "-t", "-n", "state", "established", &filter])
            .output()
            .context("running ss -K (iproute2)")?;
        anyhow::ensure!(
            out.status.success(),
            "ss -K failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        // A header, then one line per socket it closed.
        let text = String::from_utf8_lossy(&out.stdout);
        Ok(text
            .lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .count() as u32)
    }
}
