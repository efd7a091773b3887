//! Running rounds: fresh services, warm-up, the measured k6 run, and every
//! reading taken before and after it; and the schedules made of rounds
//! (grids, ladders, probes, benchmarks).
//!
//! One round of one cell goes:
//! 1. start order-service and user-service on fresh ports in the cell's
//!    environment (delay proxy, TLS), wait for `/readyz`;
//! 2. warm up with k6 (closed loop, same transport and payload), discarded;
//! 3. read `/metrics` of user-service, `/proc` of both services, TIME_WAIT
//!    sockets on order-service's REST port, and the lab's own children CPU;
//! 4. run k6 for the measured duration, polling its peak RSS;
//! 5. read everything again, stop the services, keep the record.
//!
//! k6's CPU is read from the lab's `cutime`/`cstime` (the CPU of reaped
//! children), which counts all of k6's threads to its exit and nothing else:
//! no other child is reaped while k6 runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::measure::cell::{Cell, K6_GRPC_DIRECT, Load};
use crate::measure::figures::Measures;
use crate::measure::judge::flags_of;
use crate::measure::k6;
use crate::measure::procfs;
use crate::measure::prom;
use crate::measure::record::{Cpu, ProxyRecord, ReplicaRecord, RoundRecord, Rss};
use crate::measure::results::{BenchRecord, Failure, ProbeRecord, Results};
use crate::measure::schedule::{Bench, BenchContext, Ladder, Probe};
use crate::measure::services::{self, ChildGuard, Running, ServiceConfig};
use crate::measure::{Interrupted, Timing, human_duration, is_interrupted, write_json};
use crate::stats::Spread;

/// The lab in the middle of a run.
#[derive(Debug)]
pub struct Lab {
    pub root: PathBuf,
    pub k6: PathBuf,
    pub services: ServiceConfig,
    pub timing: Timing,
    pub out: PathBuf,
    pub stop: Arc<AtomicBool>,
    pub cores: u32,
    ticks_per_second: f64,
    pub results: Results,
    seq: u32,
    progress: Progress,
}

#[derive(Debug)]
struct Progress {
    done: u32,
    planned: u32,
    started: Instant,
}

impl Lab {
    pub fn new(
        root: PathBuf,
        k6: PathBuf,
        services: ServiceConfig,
        timing: Timing,
        out: PathBuf,
        stop: Arc<AtomicBool>,
    ) -> Lab {
        Lab {
            root,
            k6,
            services,
            timing,
            out,
            stop,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            ticks_per_second: procfs::clock_ticks_per_second() as f64,
            results: Results::default(),
            seq: 0,
            progress: Progress {
                done: 0,
                planned: 0,
                started: Instant::now(),
            },
        }
    }

    /// Takes the measurements of earlier parts of a resumed run: their
    /// rounds, probes and benchmarks are not measured again. Their failures
    /// are dropped, as what failed is measured again. Returns how many
    /// measurements were kept.
    pub fn keep(&mut self, earlier: Results) -> u32 {
        // New round files are numbered after the kept ones.
        self.seq = std::fs::read_dir(self.rounds_dir())
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.split('-').next()?.parse::<u32>().ok()
            })
            .max()
            .unwrap_or(0);
        let n = (earlier.records.len() + earlier.probes.len()) as u32;
        self.results = Results {
            failures: Vec::new(),
            ..earlier
        };
        self.progress.done += n;
        n
    }

    /// Whether a round of a cell is already measured (a resumed run).
    fn measured(&self, cell: &Cell, round: u32) -> bool {
        self.results
            .records
            .iter()
            .any(|r| r.round == round && r.cell == *cell)
    }

    /// Adds `n` measurements to the plan the progress line counts against.
    pub fn plan_more(&mut self, n: u32) {
        self.progress.planned += n;
    }

    /// Removes `n` measurements from the plan (a pool ladder stopped early).
    pub fn plan_less(&mut self, n: u32) {
        self.progress.planned = self.progress.planned.saturating_sub(n);
    }

    /// Measurements done so far and planned.
    pub fn progress(&self) -> (u32, u32) {
        (self.progress.done, self.progress.planned)
    }

    fn check_stop(&self) -> anyhow::Result<()> {
        if self.stop.load(Ordering::SeqCst) {
            bail!(Interrupted);
        }
        Ok(())
    }

    fn rounds_dir(&self) -> PathBuf {
        self.out.join("rounds")
    }

    /// Runs every cell R times, rounds interleaved (round 1 of every cell,
    /// then round 2...), so that a drift of the machine over time spreads
    /// across cells instead of biasing the last ones. A failed round is
    /// recorded and the run goes on; an interruption stops it.
    pub fn run_cells(&mut self, cells: &[(String, Cell)]) -> anyhow::Result<()> {
        for round in 1..=self.timing.rounds {
            for (experiment, cell) in cells {
                let experiment = experiment.as_str();
                if self.measured(cell, round) {
                    continue;
                }
                self.check_stop()?;
                match self.measure(experiment, cell, round) {
                    Ok(rec) => self.results.records.push(rec),
                    Err(e) => self.failed(experiment, &cell.label(), round, e)?,
                }
            }
        }
        Ok(())
    }

    /// Runs a probe once per round on freshly started services.
    pub fn run_probe(&mut self, experiment: &str, probe: &Probe) -> anyhow::Result<()> {
        for round in 1..=self.timing.rounds {
            if self
                .results
                .probes
                .iter()
                .any(|p| p.experiment == experiment && p.round == round)
            {
                continue;
            }
            self.check_stop()?;
            let started = Instant::now();
            let header = format!("{experiment} probe round {round}");
            let result = (|| -> anyhow::Result<serde_json::Value> {
                let running = self.start(Some(probe.pool), &probe.env, &header)?;
                let rec = (probe.run)(&running, round, &self.stop);
                running.stop();
                rec
            })();
            self.progress.done += 1;
            match result {
                Ok(data) => {
                    let rec = ProbeRecord {
                        experiment: experiment.to_owned(),
                        round,
                        data,
                    };
                    write_json(&Results::probe_path(&self.out, experiment, round), &rec)?;
                    println!(
                        "[{}/{}] {experiment}: probe round {round}/{} in {:.1} s{}",
                        self.progress.done,
                        self.progress.planned,
                        self.timing.rounds,
                        started.elapsed().as_secs_f64(),
                        self.eta()
                    );
                    self.results.probes.push(rec);
                }
                Err(e) => self.failed(experiment, "probe", round, e)?,
            }
        }
        Ok(())
    }

    /// Climbs a ladder: rung by rung, every line still climbing measured
    /// for all its rounds, and a line left behind after the first rung
    /// whose median meets the stop rule.
    pub fn run_ladder(&mut self, experiment: &str, ladder: &Ladder) -> anyhow::Result<()> {
        let rounds = self.timing.rounds;
        let mut climbing: Vec<usize> = (0..ladder.lines.len()).collect();
        let top = ladder.lines.iter().map(Vec::len).max().unwrap_or(0);
        for rung in 0..top {
            climbing.retain(|&l| ladder.lines[l].len() > rung);
            if climbing.is_empty() {
                break;
            }
            let cells: Vec<(String, Cell)> = climbing
                .iter()
                .map(|&l| (experiment.to_owned(), ladder.lines[l][rung].clone()))
                .collect();
            self.run_cells(&cells)?;
            let stopped = stopping(ladder, rung, &climbing, &self.results.records);
            for &l in &stopped {
                let left = ladder.lines[l].len().saturating_sub(rung + 1) as u32;
                self.plan_less(left * rounds);
            }
            climbing.retain(|l| !stopped.contains(l));
        }
        if !climbing.is_empty() {
            println!(
                "{experiment}: {} of {} lines reached their top rung without meeting the stop rule",
                climbing.len(),
                ladder.lines.len()
            );
        }
        Ok(())
    }

    /// Runs a benchmark; a failure is recorded, not raised (the load cells
    /// of the run stay usable), except an interruption.
    pub fn run_bench(&mut self, experiment: &str, bench: Bench) -> anyhow::Result<()> {
        if self.results.bench_of(experiment).is_some() {
            return Ok(());
        }
        self.check_stop()?;
        let cx = BenchContext {
            root: self.root.clone(),
            out: self.out.clone(),
            rounds: self.timing.rounds,
            stop: self.stop.clone(),
        };
        match (bench.run)(&cx) {
            Ok(data) => {
                let rec = BenchRecord {
                    experiment: experiment.to_owned(),
                    data,
                };
                write_json(&Results::bench_path(&self.out, experiment), &rec)?;
                self.results.benches.push(rec);
            }
            Err(e) => self.failed(experiment, "benchmark", 0, e)?,
        }
        Ok(())
    }

    /// Records what produced no numbers (`round` 0: not a round's) and
    /// lets the run go on; an interruption is passed up instead.
    fn failed(
        &mut self,
        experiment: &str,
        what: &str,
        round: u32,
        e: anyhow::Error,
    ) -> anyhow::Result<()> {
        if is_interrupted(&e) {
            return Err(e);
        }
        let when = if round > 0 {
            format!(" round {round}")
        } else {
            String::new()
        };
        println!("  !! {experiment}: {what}{when} failed: {e:#}");
        self.results.failures.push(Failure {
            experiment: experiment.to_owned(),
            what: what.to_owned(),
            round,
            error: format!("{e:#}"),
        });
        Ok(())
    }

    fn eta(&self) -> String {
        let p = &self.progress;
        if p.done == 0 || p.planned <= p.done {
            return String::new();
        }
        let per = p.started.elapsed().as_secs_f64() / f64::from(p.done);
        let left = per * f64::from(p.planned - p.done);
        format!("  (about {} left)", human_duration(left))
    }

    /// One round of one cell.
    pub fn measure(
        &mut self,
        experiment: &str,
        cell: &Cell,
        round: u32,
    ) -> anyhow::Result<RoundRecord> {
        self.seq += 1;
        let seq = self.seq;
        let header = format!("#{seq} {experiment}: {} round {round}", cell.label());
        let started_at = chrono::Utc::now().to_rfc3339();
        let t0 = Instant::now();
        let result = self.measure_inner(experiment, cell, round, &header, started_at);
        self.progress.done += 1;
        let rec = result?;
        let path = self
            .rounds_dir()
            .join(format!("{seq:04}-{}-r{round}.json", cell.id()));
        write_json(&path, &rec)?;
        let m = Measures::of(&rec);
        let flags = if rec.flags.is_empty() {
            String::new()
        } else {
            format!("  [{}]", rec.flags.join("; "))
        };
        let dropped = if matches!(cell.load, Load::Open { .. }) {
            format!(", dropped {:.0}", m.dropped)
        } else {
            String::new()
        };
        let or_na = |v: Option<f64>, digits: usize| {
            v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.digits$}"))
        };
        println!(
            "[{}/{}] {experiment}: {} r{round}/{}: {:.0} good answers/s{dropped}, p95 {} ms, upstream p95 {} µs ({:.1} s){flags}{}",
            self.progress.done,
            self.progress.planned,
            cell.label(),
            self.timing.rounds,
            m.rate,
            or_na(m.e2e_ms.map(|p| p.p95), 2),
            or_na(m.upstream_us.map(|p| p.p95), 0),
            t0.elapsed().as_secs_f64(),
            self.eta()
        );
        Ok(rec)
    }

    fn measure_inner(
        &mut self,
        experiment: &str,
        cell: &Cell,
        round: u32,
        header: &str,
        started_at: String,
    ) -> anyhow::Result<RoundRecord> {
        let running = self.start(Some(cell.pool), &cell.env, header)?;
        let rec = self.drive(experiment, cell, round, &running, started_at);
        running.stop();
        rec
    }

    /// Fresh services for a round, or the target, which is never restarted.
    fn start(
        &self,
        pool: Option<u16>,
        env: &crate::measure::cell::Env,
        header: &str,
    ) -> anyhow::Result<Running> {
        if let Some(t) = &self.services.target {
            return Running::of_target(t);
        }
        // The ports are picked free, then released until the services bind
        // them: anything binding a port in between (another program, or the
        // delay proxy's own listeners) can take one. Such a start is tried
        // again on fresh ports, twice at most.
        let mut tries = 0;
        loop {
            match services::start(&self.services, pool, env, header, &self.stop) {
                Err(e) if tries < 2 && format!("{e:#}").contains("Address already in use") => {
                    tries += 1;
                    println!(
                        "  a port was taken before a service bound it; starting again on fresh ports"
                    );
                }
                other => return other,
            }
        }
    }

    fn k6_env(&self, cell: &Cell, running: &Running) -> Vec<(String, String)> {
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
        match cell.load {
            Load::Closed { vus } => env.push(("VUS".to_owned(), vus.to_string())),
            Load::Open { rate, max_vus } => {
                env.push(("RATE".to_owned(), rate.to_string()));
                env.push(("PRE_VUS".to_owned(), max_vus.min(50).to_string()));
                env.push(("MAX_VUS".to_owned(), max_vus.to_string()));
            }
        }
        env
    }

    fn drive(
        &mut self,
        experiment: &str,
        cell: &Cell,
        round: u32,
        running: &Running,
        started_at: String,
    ) -> anyhow::Result<RoundRecord> {
        let tmp = self.out.join("tmp");
        std::fs::create_dir_all(&tmp)?;
        let mut base_env = self.k6_env(cell, running);
        if let Some(len) = expected_length(cell, running)? {
            base_env.push(("EXPECTED_LENGTH".to_owned(), len));
        }

        // Warm-up: always a closed loop, so that an overload rate does not
        // leave a backlog behind it. Its numbers are discarded.
        if self.timing.warmup_s > 0.0 {
            let mut env = base_env.clone();
            env.retain(|(k, _)| !matches!(k.as_str(), "VUS" | "RATE" | "PRE_VUS" | "MAX_VUS"));
            let vus = match cell.load {
                Load::Closed { vus } => vus,
                Load::Open { .. } => 8,
            };
            env.push(("VUS".into(), vus.to_string()));
            env.push(("DURATION".into(), secs_arg(self.timing.warmup_s)));
            let warm = self.run_k6(script_of(cell), env, &tmp.join("warmup.json"))?;
            if warm.summary.requests > 0.0 && warm.summary.bad_answers >= warm.summary.requests {
                bail!(
                    "every warm-up request failed over {} (see {}/user-service.log)",
                    cell.via,
                    self.services.log_dir.display()
                );
            }
        }

        let (metrics_addr, metrics_path) = running.user_metrics()?;
        let order_port = running.ports.order_rest;
        // /proc shows the services only when the lab started them.
        let on_proc = running.on_proc();
        let ticks = |pid: u32| -> anyhow::Result<u64> {
            if on_proc {
                Ok(procfs::cpu_ticks(pid)?.own)
            } else {
                Ok(0)
            }
        };
        let tcp = || -> anyhow::Result<procfs::TcpStates> {
            if on_proc {
                procfs::tcp_states(order_port)
            } else {
                Ok(procfs::TcpStates::default())
            }
        };
        let scrape = |what: &str| -> anyhow::Result<prom::Upstream> {
            let r = crate::measure::http::get(metrics_addr, &metrics_path, Duration::from_secs(5))
                .with_context(|| format!("scraping user-service's metrics {what}"))?;
            if r.status != 200 {
                bail!("user-service /metrics answered {}", r.status);
            }
            let text = String::from_utf8_lossy(&r.body);
            prom::Upstream::of(&prom::parse(&text)?, &cell.via)
        };
        // k6's direct gRPC calls do not pass through user-service.
        let direct = cell.via == K6_GRPC_DIRECT;
        let upstream_before = if direct {
            prom::Upstream::default()
        } else {
            scrape("before")?
        };
        let tcp_before = tcp()?;
        let replicas_before = ReplicaReading::of(running)?;
        // The window every CPU figure is counted over: from these readings
        // to the ones after k6 has exited.
        let window = Instant::now();
        let postgres = self
            .services
            .databases_for(&cell.env)
            .ok()
            .flatten()
            .is_some_and(|d| d.is_local());
        let postgres_before =
            postgres.then(|| procfs::ticks_of_named(Path::new("/proc"), "postgres"));
        let order_before = ticks(running.order_pid())?;
        let user_before = ticks(running.user_pid())?;
        let machine_before = procfs::machine_busy_ticks()?;
        // The proxy's threads run in the lab's process, otherwise idle but
        // for polling k6: its own CPU is theirs.
        let proxy_before = running.proxy.as_ref().map(|p| p.stats());
        let lab_before = procfs::self_ticks()?.own;

        let script = match cell.load {
            Load::Closed { .. } => script_of(cell),
            Load::Open { .. } => "open-loop.js",
        };
        let mut env = base_env;
        env.push(("DURATION".into(), secs_arg(self.timing.duration_s)));
        let run = self.run_k6(script, env, &tmp.join("measured.json"))?;

        let machine_after = procfs::machine_busy_ticks()?;
        let window_s = window.elapsed().as_secs_f64();
        let postgres_ticks = postgres_before.map(|before| {
            procfs::ticks_between(
                &before,
                &procfs::ticks_of_named(Path::new("/proc"), "postgres"),
            )
        });
        let lab_after = procfs::self_ticks()?.own;
        let proxy_after = running.proxy.as_ref().map(|p| p.stats());
        let order_after = ticks(running.order_pid())?;
        let user_after = ticks(running.user_pid())?;
        let tcp_after = tcp()?;
        let replicas_after = ReplicaReading::of(running)?;
        let upstream_after = if direct {
            prom::Upstream::default()
        } else {
            scrape("after")?
        };
        let (order_rss, user_rss) = if on_proc {
            (
                procfs::peak_rss_kb(running.order_pid())?,
                procfs::peak_rss_kb(running.user_pid())?,
            )
        } else {
            (0, 0)
        };

        let us = |ticks: u64| ticks as f64 * 1e6 / self.ticks_per_second;
        let replicas: Option<Vec<ReplicaRecord>> = (!running.replicas.is_empty()).then(|| {
            running
                .replicas
                .iter()
                .enumerate()
                .map(|(i, r)| ReplicaRecord {
                    addr: r.public.to_string(),
                    calls: replicas_after.counters[i].answered
                        - replicas_before.counters[i].answered,
                    cpu_us: us(replicas_after.ticks[i].saturating_sub(replicas_before.ticks[i])),
                    connections: replicas_after.counters[i].connections,
                })
                .collect()
        });
        let balancer_cpu_us = match (replicas_before.balancer, replicas_after.balancer) {
            (Some(b), Some(a)) => Some(us(a.saturating_sub(b))),
            _ => None,
        };
        // With replicas, order-service's CPU is every replica's together.
        let order_us = match &replicas {
            Some(rs) => rs.iter().map(|r| r.cpu_us).sum(),
            None => us(order_after - order_before),
        };
        let cpu = Cpu {
            order_us,
            user_us: us(user_after - user_before),
            k6_us: run.cpu_us,
        };
        let machine_us = us(machine_after - machine_before);
        let proxy = match (&running.proxy, proxy_before, proxy_after) {
            (Some(p), Some(before), Some(after)) => {
                let d = after.since(&before);
                Some(ProxyRecord {
                    one_way_us: p.config().delay.as_secs_f64() * 1e6,
                    chunks: d.chunks as f64,
                    connections: d.connections as f64,
                    late_mean_us: d.mean_late().as_secs_f64() * 1e6,
                    late_max_us: d.late_ns_max as f64 / 1e3,
                    cpu_us: us(lab_after - lab_before),
                })
            }
            _ => None,
        };
        let proxy_us = proxy.map_or(0.0, |p| p.cpu_us);
        let postgres_us = postgres_ticks.map(us);
        let mut rec = RoundRecord {
            experiment: experiment.to_owned(),
            cell: cell.clone(),
            round,
            started_at,
            duration_s: self.timing.duration_s,
            k6: run.summary,
            upstream_before,
            upstream_after,
            cpu,
            rss: Rss {
                order_kb: order_rss as f64,
                user_kb: user_rss as f64,
                k6_kb: run.peak_rss_kb as f64,
            },
            tcp_before,
            tcp_after,
            cores: self.cores,
            other_cpu_us: (machine_us
                - cpu.order_us
                - cpu.user_us
                - cpu.k6_us
                - proxy_us
                - balancer_cpu_us.unwrap_or(0.0)
                - postgres_us.unwrap_or(0.0))
            .max(0.0),
            pinning: self.services.pinning(),
            flags: Vec::new(),
            proxy,
            window_s: Some(window_s),
            postgres_us,
            service_env: running.env.clone(),
            k6_summary: run.raw,
            replicas,
            balancer_cpu_us,
            no_proc: !on_proc,
        };
        rec.flags = flags_of(&rec);
        Ok(rec)
    }

    /// Runs one k6 script to its end; returns its summary, CPU and peak RSS.
    fn run_k6(
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

struct K6Run {
    summary: k6::Summary,
    raw: serde_json::Value,
    cpu_us: f64,
    peak_rss_kb: u64,
}

/// The Content-Length of a good answer of the cell, from one answer the lab
/// asks for and checks itself before the round: a 200 over the transport
/// asked for, whose JSON holds exactly the fixed user's orders (parsed and
/// counted here, against the data set). k6 then holds every answer to that
/// length instead of parsing bodies on the load generator's CPU. `None` for
/// cells k6 sends straight to order-service.
/// k6's `USERS`: 0 for one user's orders, else the users of one request.
fn many_users(cell: &Cell) -> u32 {
    if cell.users > 1 { cell.users } else { 0 }
}

/// The data set's other users 1..=n, as k6's `USERS=n` asks for them.
fn other_users(n: u32) -> Vec<String> {
    (1..=n)
        .map(|i| dataset::other_user_id(i).to_string())
        .collect()
}

/// The orders a good answer holds: the fixed user's, or the sum over the
/// other users asked of their first `orders`, from the data set.
fn orders_in_answer(cell: &Cell) -> usize {
    if many_users(cell) == 0 {
        return cell.orders as usize;
    }
    let counts: std::collections::HashMap<_, _> = dataset::users()
        .into_iter()
        .map(|u| (u.id, u.order_count))
        .collect();
    (1..=cell.users)
        .map(|i| {
            let have = counts.get(&dataset::other_user_id(i)).copied().unwrap_or(0);
            have.min(cell.orders.max(1)) as usize
        })
        .sum()
}

fn expected_length(cell: &Cell, running: &Running) -> anyhow::Result<Option<String>> {
    if cell.via == K6_GRPC_DIRECT {
        return Ok(None);
    }
    let mut path = if many_users(cell) == 0 {
        format!(
            "/v1/users/{}/orders?limit={}&via={}",
            crate::measure::cell::fixed_user(cell.orders),
            cell.orders.max(1),
            cell.via
        )
    } else {
        format!(
            "/v1/orders?users={}&limit={}&via={}&batch={}",
            other_users(cell.users).join(","),
            cell.orders.max(1),
            cell.via,
            cell.batch
        )
    };
    if let Some(f) = &cell.fields {
        path.push_str(&format!("&fields={f}"));
    }
    let what = format!("the lab's own check of {}", cell.label());
    let r = crate::measure::http::get(running.user_rest_addr()?, &path, Duration::from_secs(30))
        .with_context(|| what.clone())?;
    if r.status != 200 || r.header("x-via") != Some(cell.via.as_str()) {
        bail!(
            "{what}: user-service answered {} over {:?}: {}",
            r.status,
            r.header("x-via"),
            String::from_utf8_lossy(&r.body)
        );
    }
    let body: serde_json::Value =
        serde_json::from_slice(&r.body).with_context(|| format!("{what}: not JSON"))?;
    let orders = if many_users(cell) == 0 {
        body.get("orders")
            .and_then(serde_json::Value::as_array)
            .map(Vec::len)
            .with_context(|| format!("{what}: no orders array"))?
    } else {
        let calls = if cell.batch { 1 } else { cell.users };
        if r.header("x-upstream-calls") != Some(calls.to_string().as_str()) {
            bail!(
                "{what}: {:?} calls to order-service, {calls} expected",
                r.header("x-upstream-calls")
            );
        }
        let lookups = body
            .get("lookups")
            .and_then(serde_json::Value::as_array)
            .with_context(|| format!("{what}: no lookups array"))?;
        let named: Vec<&str> = lookups
            .iter()
            .filter_map(|l| l.get("user_id").and_then(serde_json::Value::as_str))
            .collect();
        if named != other_users(cell.users) {
            bail!("{what}: the answer names other users than those asked, or in another order");
        }
        lookups
            .iter()
            .filter_map(|l| l.get("orders").and_then(serde_json::Value::as_array))
            .map(Vec::len)
            .sum()
    };
    let want = orders_in_answer(cell);
    if orders != want {
        bail!("{what}: {orders} orders, {want} expected");
    }
    let len = r
        .header("content-length")
        .with_context(|| format!("{what}: no Content-Length"))?;
    Ok(Some(len.to_owned()))
}

/// The lines of `climbing` whose rung `rung` meets the ladder's stop rule
/// (the median over the rounds recorded so far).
pub fn stopping(
    ladder: &Ladder,
    rung: usize,
    climbing: &[usize],
    records: &[RoundRecord],
) -> Vec<usize> {
    climbing
        .iter()
        .copied()
        .filter(|&l| {
            let Some(cell) = ladder.lines.get(l).and_then(|line| line.get(rung)) else {
                return false;
            };
            let values: Vec<f64> = records
                .iter()
                .filter(|r| &r.cell == cell)
                .filter_map(|r| ladder.stop.metric.of(&Measures::of(r)))
                .collect();
            Spread::of(&values).is_some_and(|s| s.median > ladder.stop.above)
        })
        .collect()
}

/// The closed-loop script of a cell.
fn script_of(cell: &Cell) -> &'static str {
    if cell.via == K6_GRPC_DIRECT {
        "grpc-direct.js"
    } else {
        "closed-loop.js"
    }
}

/// What the replicas and their balancer had done at one moment: each
/// replica's counters and CPU ticks, and HAProxy's ticks.
struct ReplicaReading {
    counters: Vec<prom::ReplicaCounters>,
    ticks: Vec<u64>,
    balancer: Option<u64>,
}

impl ReplicaReading {
    fn of(running: &Running) -> anyhow::Result<ReplicaReading> {
        let mut r = ReplicaReading {
            counters: Vec::new(),
            ticks: Vec::new(),
            balancer: None,
        };
        for rep in &running.replicas {
            r.counters
                .push(scrape_replica(rep.rest, &rep.metrics_path)?);
            // A target's replicas are not this machine's processes.
            r.ticks.push(if rep.pid == 0 {
                0
            } else {
                procfs::cpu_ticks(rep.pid)?.own
            });
        }
        if let Some(h) = &running.balancer {
            r.balancer = Some(procfs::cpu_ticks(h.pid())?.own);
        }
        Ok(r)
    }
}

/// One replica's counters, from its own /metrics.
fn scrape_replica(rest: std::net::SocketAddr, path: &str) -> anyhow::Result<prom::ReplicaCounters> {
    let r = crate::measure::http::get(rest, path, Duration::from_secs(5))
        .with_context(|| format!("scraping the order-service replica at {rest}"))?;
    if r.status != 200 {
        bail!(
            "the order-service replica at {rest} answered /metrics with {}",
            r.status
        );
    }
    Ok(prom::ReplicaCounters::of(&prom::parse(
        &String::from_utf8_lossy(&r.body),
    )?))
}

/// A duration as k6 reads it, in milliseconds.
pub fn secs_arg(s: f64) -> String {
    format!("{}ms", (s * 1000.0).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ladder_line_stops_at_the_first_rung_whose_median_meets_the_rule() {
        use crate::measure::figures::Metric;
        use crate::measure::schedule::StopRule;
        let open = |via: &str, rate: u32| Cell {
            load: Load::Open { rate, max_vus: 100 },
            ..Cell::closed(via, 100, 8, 1)
        };
        let ladder = Ladder {
            lines: vec![
                vec![open("h1-json", 500), open("h1-json", 1000)],
                vec![open("grpc", 500), open("grpc", 1000)],
            ],
            stop: StopRule {
                metric: Metric::DroppedShare,
                above: 1.0,
            },
        };
        // Rung 0: h1-json drops 5% in two rounds of three (median 5%), grpc
        // 5% in one (median 0%).
        let mut records = Vec::new();
        for (via, drops) in [("h1-json", [5.0, 5.0, 0.0]), ("grpc", [5.0, 0.0, 0.0])] {
            for (round, d) in drops.iter().enumerate() {
                let mut r = crate::synthetic::record("pool", &open(via, 500), round as u32 + 1);
                r.k6.iterations = 100.0 - d;
                r.k6.dropped = *d;
                records.push(r);
            }
        }
        assert_eq!(stopping(&ladder, 0, &[0, 1], &records), vec![0]);
        // A rung not measured yet stops nothing.
        assert!(stopping(&ladder, 1, &[0, 1], &records).is_empty());
    }

    #[test]
    fn durations_are_given_to_k6_in_milliseconds() {
        assert_eq!(secs_arg(2.0), "2000ms");
        assert_eq!(secs_arg(0.5), "500ms");
    }
}
