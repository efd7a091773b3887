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

use anyhow::Context as _;
use nix::sys::signal::Signal;

use super::scrape::{load_began, replica as scrape_replica, upstream_now};
use crate::measure::cell::Fault;
use crate::measure::record::FaultRecord;
use crate::measure::services::{ChildGuard, OwnPostgres, Running, process};

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
    /// The lab's own Postgres, which a [`Fault::PostgresRestart`] restarts.
    pub own_postgres: Option<&'a OwnPostgres>,
}

/// order-service's counts of lookups answered well and answered with an
/// error, every replica's together; `None` when one cannot be read.
fn order_counts(running: &Running) -> Option<(f64, f64)> {
    let one = |rest, path: &str| {
        scrape_replica(rest, path)
            .ok()
            .map(|c| (c.answered, c.refused))
    };
    if running.replicas.is_empty() {
        return one(running.ports.order_rest_addr(), "/metrics");
    }
    running
        .replicas
        .iter()
        .map(|rep| one(rep.rest, &rep.metrics_path))
        .try_fold((0.0, 0.0), |(a, r), c| c.map(|(ca, cr)| (a + ca, r + cr)))
}

impl Watch<'_> {
    /// Runs `load` (k6's measured run) with the fault injected during it:
    /// its result, and the fault's record with order-service's count of
    /// the lookups it answered meanwhile (read only where the process that
    /// counts them lives through the fault).
    pub fn around<T>(&self, load: impl FnOnce() -> T) -> (T, anyhow::Result<FaultRecord>) {
        let counted = !matches!(self.fault, Fault::Kill { .. } | Fault::Restart);
        let before = if counted {
            order_counts(self.running)
        } else {
            None
        };
        let done = AtomicBool::new(false);
        let (out, watched) = std::thread::scope(|s| {
            let w = s.spawn(|| self.run(&done));
            let out = load();
            done.store(true, Ordering::SeqCst);
            let watched = w
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the fault's thread panicked")));
            (out, watched)
        });
        let watched = watched.map(|mut rec| {
            let during = before
                .and_then(|(a0, r0)| order_counts(self.running).map(|(a, r)| (a - a0, r - r0)));
            rec.order_answered = during.map(|d| d.0);
            rec.order_refused = during.map(|d| d.1);
            rec
        });
        (out, watched)
    }

    /// Waits for the load to begin, samples until `done`, and injects the
    /// fault on the way; the record of what happened when.
    fn run(&self, done: &AtomicBool) -> anyhow::Result<FaultRecord> {
        load_began(&self.metrics, self.via, "fault", || {
            done.load(Ordering::SeqCst)
        })?;
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
                    if let Ok(u) = upstream_now(&self.metrics, self.via) {
                        timeline.push([ms(at), u.calls, u.errors]);
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
                // The packet path drops every packet; the delay proxy,
                // where there is none, holds every byte.
                let silence = |on: bool| match (&self.running.path, &self.running.proxy) {
                    (Some(p), _) => {
                        p.path.silence(on);
                        Ok(())
                    }
                    (None, Some(proxy)) => {
                        proxy.hold(on);
                        Ok(())
                    }
                    (None, None) => Err(anyhow::anyhow!(
                        "a silence needs the packet path or the delay proxy between the services"
                    )),
                };
                silence(true)?;
                rec.at_ms = ms(Instant::now());
                std::thread::sleep(Duration::from_millis(u64::from(length)));
                silence(false)?;
                rec.end_ms = ms(Instant::now());
            }
            Fault::Reset => {
                rec.at_ms = ms(Instant::now());
                rec.reset_sockets = Some(self.reset()?);
                rec.end_ms = rec.at_ms;
            }
            Fault::PostgresRestart => {
                let pg = self
                    .own_postgres
                    .context("a Postgres restart needs the lab's own Postgres server")?;
                rec.at_ms = ms(Instant::now());
                pg.restart()?;
                rec.end_ms = ms(Instant::now());
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
