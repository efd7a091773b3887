//! One round of one cell: fresh services (or the target), the lab's own
//! check of an answer, a discarded warm-up, the readings before, the load
//! generator's measured run, the readings after, and the [`RoundRecord`] they make,
//! flagged and written to its round file.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use super::Lab;
use super::answer::expected_length;
use super::load::Phase;
use crate::measure::cell::{Cell, Env, K6_GRPC_DIRECT, Load};
use crate::measure::figures::Measures;
use crate::measure::judge::flags_of;
use crate::measure::procfs;
use crate::measure::prom;
use crate::measure::record::{Cpu, PathRecord, ProxyRecord, ReplicaRecord, RoundRecord, Rss};
use crate::measure::services::{self, Running};
use crate::measure::write_json;

impl Lab {
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
        // The round's histograms as HdrHistogram's plotter reads them,
        // beside the rounds (which hold them: user-service's encoded, the
        // engine's encoded, or k6's in its summary's buckets).
        let upstream = rec
            .upstream_hdr
            .as_deref()
            .map(telemetry::hdr::decode)
            .transpose()?;
        let e2e = rec.e2e_histogram();
        for (h, what) in [(upstream, "upstream"), (e2e, "e2e")] {
            let Some(h) = h else { continue };
            let dir = self.out.join("hdr");
            std::fs::create_dir_all(&dir)?;
            let name = format!("{seq:04}-{}-r{round}.{what}.hgrm", cell.id());
            std::fs::write(dir.join(name), telemetry::hdr::percentile_distribution(&h))?;
        }
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
        let rec = self.drive(experiment, cell, round, (&running, header), started_at);
        running.stop();
        rec
    }

    /// Fresh services for a round, or the target, which is never restarted.
    pub(super) fn start(
        &self,
        pool: Option<u16>,
        env: &Env,
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

    /// A round on running services: the length of a good answer, the
    /// warm-up, the readings before, the measured run of the load
    /// generator, the readings after, and the record they make.
    fn drive(
        &mut self,
        experiment: &str,
        cell: &Cell,
        round: u32,
        (running, header): (&Running, &str),
        started_at: String,
    ) -> anyhow::Result<RoundRecord> {
        let tmp = self.out.join("tmp");
        std::fs::create_dir_all(&tmp)?;
        let expected = expected_length(cell, running)?;
        if self.timing.warmup_s > 0.0 {
            self.warm_up(cell, running, expected.as_deref(), &tmp)?;
        }

        let gauges = Gauges {
            cell,
            running,
            metrics: running.user_metrics()?,
            // /proc shows the services only when the lab started them.
            on_proc: running.on_proc(),
        };
        let postgres = self
            .services
            .databases_for(&cell.env)
            .ok()
            .flatten()
            .is_some_and(|d| d.is_local());
        let before = gauges.before(postgres)?;
        // A fault's run holds the time before it, the fault and the time
        // after, whatever the run's timing.
        let duration_s = cell.env.fault.map_or(self.timing.duration_s, |f| {
            f.min_duration_s().max(self.timing.duration_s)
        });
        let measured = |lab: &Self| {
            lab.generate(
                cell,
                running,
                (expected.as_deref(), duration_s),
                Phase::Measured,
                &tmp,
            )
        };
        let stall = match cell.env.stall_ms {
            Some(_) if !gauges.on_proc => {
                bail!("a stalled cell needs the services the lab started (not a target)")
            }
            Some(ms) => Some(super::stall::Stall::start(
                running.order_pid(),
                (gauges.metrics.clone(), cell.via.clone()),
                Duration::from_secs_f64(self.timing.duration_s / 2.0),
                Duration::from_millis(u64::from(ms)),
            )),
            None => None,
        };
        let (run, fault) = match cell.env.fault {
            None => (measured(self), None),
            Some(_) if !gauges.on_proc => {
                bail!("a cell with a fault needs the services the lab started (not a target)")
            }
            Some(fault) => {
                let watch = super::fault::Watch {
                    fault,
                    running,
                    metrics: gauges.metrics.clone(),
                    via: &cell.via,
                    log_dir: &self.services.log_dir,
                    header,
                    stop: &self.stop,
                    own_postgres: self.services.own_postgres.as_ref().map(|(pg, _)| &**pg),
                };
                let (run, watched) = watch.around(|| measured(self));
                (run, Some(watched?))
            }
        };
        let stalled_ms = match stall {
            Some(s) => Some(s.finish()?.as_secs_f64() * 1e3),
            None => None,
        };
        let run = run?;
        let after = gauges.after(&before)?;
        let rss = gauges.peak_rss()?;

        let split = self.split_cpu(running, run.cpu_us, &before, &after);
        let mut rec = RoundRecord {
            experiment: experiment.to_owned(),
            cell: cell.clone(),
            round,
            started_at,
            duration_s,
            generator: run.generator,
            load: run.summary,
            upstream_before: before.upstream,
            upstream_after: after.upstream,
            cpu: split.cpu,
            rss: Rss {
                order_kb: rss.0 as f64,
                user_kb: rss.1 as f64,
                load_kb: run.peak_rss_kb as f64,
            },
            tcp_before: before.tcp,
            tcp_after: after.tcp,
            cores: self.cores,
            other_cpu_us: split.other_us,
            pinning: self.services.pinning(self.cores),
            flags: Vec::new(),
            proxy: split.proxy,
            path: split.path,
            window_s: Some(after.at.duration_since(before.at).as_secs_f64()),
            postgres_us: split.postgres_us,
            service_env: running.env.clone(),
            load_raw: run.raw,
            e2e_hdr: run.e2e_hdr,
            replicas: split.replicas,
            balancer_cpu_us: split.balancer_us,
            no_proc: !gauges.on_proc,
            upstream_hdr: after.hdr.clone(),
            stalled_ms,
            fault,
        };
        rec.flags = flags_of(&rec);
        Ok(rec)
    }

    /// The warm-up: the cell's generator in a closed loop (so that an
    /// overload rate leaves no backlog behind it). Its numbers are
    /// discarded, but a warm-up whose every request failed stops the round.
    fn warm_up(
        &self,
        cell: &Cell,
        running: &Running,
        expected: Option<&str>,
        tmp: &Path,
    ) -> anyhow::Result<()> {
        let warm = self.generate(
            cell,
            running,
            (expected, self.timing.warmup_s),
            Phase::Warmup,
            tmp,
        )?;
        let s = &warm.summary;
        if s.requests > 0.0 && s.bad_answers >= s.requests {
            bail!(
                "every warm-up request failed over {} (see {}/user-service.log)",
                cell.via,
                self.services.log_dir.display()
            );
        }
        Ok(())
    }

    /// The CPU of every process over the window, from the readings at its
    /// two ends: each service's, the replicas' and the balancer's, the delay
    /// proxy's (the lab's own), the local Postgres's, and what is left for
    /// the rest of the machine.
    fn split_cpu(
        &self,
        running: &Running,
        load_us: f64,
        before: &Reading,
        after: &Reading,
    ) -> CpuSplit {
        let us = |ticks: u64| ticks as f64 * 1e6 / self.ticks_per_second;
        let replicas: Option<Vec<ReplicaRecord>> = (!running.replicas.is_empty()).then(|| {
            running
                .replicas
                .iter()
                .enumerate()
                .map(|(i, r)| ReplicaRecord {
                    addr: r.public.to_string(),
                    calls: after.replicas.counters[i].answered
                        - before.replicas.counters[i].answered,
                    cpu_us: us(after.replicas.ticks[i].saturating_sub(before.replicas.ticks[i])),
                    connections: after.replicas.counters[i].connections,
                })
                .collect()
        });
        let balancer_cpu_us = match (before.replicas.balancer, after.replicas.balancer) {
            (Some(b), Some(a)) => Some(us(a.saturating_sub(b))),
            _ => None,
        };
        // With replicas, order-service's CPU is every replica's together.
        let order_us = match &replicas {
            Some(rs) => rs.iter().map(|r| r.cpu_us).sum(),
            // A restarted order-service's ticks start again from 0.
            None => us(after.order.saturating_sub(before.order)),
        };
        let cpu = Cpu {
            order_us,
            user_us: us(after.user.saturating_sub(before.user)),
            load_us,
        };
        let machine_us = us(after.machine - before.machine);
        let proxy = match (&running.proxy, before.proxy, after.proxy) {
            (Some(p), Some(b), Some(a)) => {
                let d = a.since(&b);
                Some(ProxyRecord {
                    one_way_us: p.config().delay.as_secs_f64() * 1e6,
                    chunks: d.chunks as f64,
                    connections: d.connections as f64,
                    late_mean_us: d.mean_late().as_secs_f64() * 1e6,
                    late_max_us: d.late_ns_max as f64 / 1e3,
                    held: d.held as f64,
                    cpu_us: us(after.lab - before.lab),
                })
            }
            _ => None,
        };
        let path = match (before.path, after.path) {
            (Some(b), Some(a)) => {
                let up = a.stats[0].since(&b.stats[0]);
                let down = a.stats[1].since(&b.stats[1]);
                let both = up.plus(&down);
                let timed = both.timed.max(1) as f64;
                let device_drops = match (b.device_drops, a.device_drops) {
                    (Some(b), Some(a)) => {
                        Some((a[0].saturating_sub(b[0]) + a[1].saturating_sub(b[1])) as f64)
                    }
                    _ => None,
                };
                Some(PathRecord {
                    packets_up: up.packets as f64,
                    packets_down: down.packets as f64,
                    lost: (up.lost + down.lost) as f64,
                    queue_drops: (up.queue_drops + down.queue_drops) as f64,
                    retrans_user: a.retrans_user.saturating_sub(b.retrans_user) as f64,
                    retrans_order: a.retrans_order.saturating_sub(b.retrans_order) as f64,
                    late_mean_us: both.late_ns as f64 / 1e3 / timed,
                    cpu_us: us(after.lab - before.lab),
                    seed: Some(a.seed),
                    silenced: both.silenced as f64,
                    write_errors: both.write_errors as f64,
                    device_drops,
                    early: both.early as f64,
                    late_p99_us: both.late_quantile_us(0.99).map(|l| l as f64),
                })
            }
            _ => None,
        };
        // The proxy's or the path's threads are the lab's CPU.
        let proxy_us = proxy.map_or(0.0, |p| p.cpu_us) + path.map_or(0.0, |p| p.cpu_us);
        let postgres_us = match (&before.postgres, &after.postgres) {
            (Some(b), Some(a)) => Some(us(procfs::ticks_between(b, a))),
            _ => None,
        };
        CpuSplit {
            cpu,
            other_us: (machine_us
                - cpu.order_us
                - cpu.user_us
                - cpu.load_us
                - proxy_us
                - balancer_cpu_us.unwrap_or(0.0)
                - postgres_us.unwrap_or(0.0))
            .max(0.0),
            proxy,
            path,
            postgres_us,
            replicas,
            balancer_us: balancer_cpu_us,
        }
    }
}

/// A round's CPU, process by process, as its record keeps it.
#[derive(Debug, Clone, Copy)]
struct PathReading {
    stats: [netpath::DirectionStats; 2],
    /// Each TUN queue's drops so far, `None` when unreadable.
    device_drops: Option<[u64; 2]>,
    seed: u64,
    retrans_user: u64,
    retrans_order: u64,
}

struct CpuSplit {
    cpu: Cpu,
    /// The rest of the machine: other programs, the lab itself.
    other_us: f64,
    proxy: Option<ProxyRecord>,
    path: Option<PathRecord>,
    postgres_us: Option<f64>,
    replicas: Option<Vec<ReplicaRecord>>,
    balancer_us: Option<f64>,
}

/// Where a round's readings come from: user-service's metrics, the
/// services' processes in /proc (when the lab started them), the sockets
/// on order-service's REST port, the replicas and their balancer, the
/// machine, and the lab's own process.
struct Gauges<'a> {
    cell: &'a Cell,
    running: &'a Running,
    metrics: (SocketAddr, String),
    on_proc: bool,
}

/// What was read at one end of the measured run.
struct Reading {
    /// After the run: the measured calls' HDR histogram, encoded.
    hdr: Option<String>,
    upstream: prom::Upstream,
    tcp: procfs::TcpStates,
    replicas: ReplicaReading,
    /// When the window every CPU figure is counted over opened or closed.
    at: Instant,
    /// Each local Postgres process's ticks, when the cell's store is a
    /// local Postgres.
    postgres: Option<BTreeMap<u32, u64>>,
    order: u64,
    user: u64,
    machine: u64,
    /// The delay proxy's counters, when there is one.
    proxy: Option<delay_proxy::StatsSnapshot>,
    /// The packet path's counters and each side's retransmissions, when
    /// the cell runs on one.
    path: Option<PathReading>,
    /// The lab's own CPU ticks: the proxy's threads run in its process,
    /// otherwise idle but for polling the load generator.
    lab: u64,
}

impl Gauges<'_> {
    fn ticks(&self, pid: u32) -> anyhow::Result<u64> {
        if self.on_proc {
            Ok(procfs::cpu_ticks(pid)?.own)
        } else {
            Ok(0)
        }
    }

    fn path(&self) -> anyhow::Result<Option<PathReading>> {
        let Some(p) = &self.running.path else {
            return Ok(None);
        };
        Ok(Some(PathReading {
            stats: p.path.stats(),
            device_drops: p.path.device_drops().ok(),
            seed: p.path.config().seed,
            retrans_user: crate::measure::services::path::retransmitted(self.running.user_pid())?,
            retrans_order: crate::measure::services::path::retransmitted(self.running.order_pid())?,
        }))
    }

    fn tcp(&self) -> anyhow::Result<procfs::TcpStates> {
        if self.on_proc {
            procfs::tcp_states(self.running.order_pid(), self.running.ports.order_rest)
        } else {
            Ok(procfs::TcpStates::default())
        }
    }

    /// user-service's counters for the cell's transport; none when k6
    /// calls order-service directly (no user-service hop).
    fn upstream(&self, what: &str) -> anyhow::Result<prom::Upstream> {
        if self.cell.via == K6_GRPC_DIRECT {
            return Ok(prom::Upstream::default());
        }
        let (addr, path) = &self.metrics;
        let r = crate::measure::http::get(*addr, path, Duration::from_secs(5))
            .with_context(|| format!("scraping user-service's metrics {what}"))?;
        if r.status != 200 {
            bail!("user-service /metrics answered {}", r.status);
        }
        let text = String::from_utf8_lossy(&r.body);
        prom::Upstream::of(&prom::parse(&text)?, &self.cell.via)
    }

    /// user-service's HDR histogram of the cell's transport
    /// ([`telemetry::hdr`]), taken and emptied; `None` when k6 calls
    /// order-service directly, or user-service has none (a target older
    /// than `/metrics/hdr`).
    fn upstream_hdr(&self) -> anyhow::Result<Option<String>> {
        if self.cell.via == K6_GRPC_DIRECT {
            return Ok(None);
        }
        let (addr, metrics) = &self.metrics;
        let path = format!("{metrics}/hdr?via={}&reset=true", self.cell.via);
        let r = crate::measure::http::get(*addr, &path, Duration::from_secs(5))
            .context("reading user-service's HDR histogram")?;
        if r.status == 404 {
            return Ok(None);
        }
        if r.status != 200 {
            bail!("user-service {path} answered {}", r.status);
        }
        let text = String::from_utf8_lossy(&r.body).trim().to_owned();
        telemetry::hdr::decode(&text).context("user-service's HDR histogram")?;
        Ok(Some(text))
    }

    /// The readings just before the load generator starts; the CPU window opens between the
    /// sockets and the processes.
    fn before(&self, postgres: bool) -> anyhow::Result<Reading> {
        // Emptied: the warm-up's calls are not the measured run's.
        self.upstream_hdr()?;
        let upstream = self.upstream("before")?;
        let tcp = self.tcp()?;
        let replicas = ReplicaReading::of(self.running)?;
        let at = Instant::now();
        let postgres = postgres.then(|| procfs::ticks_of_named(Path::new("/proc"), "postgres"));
        let order = self.ticks(self.running.order_pid())?;
        let user = self.ticks(self.running.user_pid())?;
        let machine = procfs::machine_busy_ticks()?;
        let proxy = self.running.proxy.as_ref().map(|p| p.stats());
        let path = self.path()?;
        let lab = procfs::self_ticks()?.own;
        Ok(Reading {
            hdr: None,
            upstream,
            tcp,
            replicas,
            at,
            postgres,
            order,
            user,
            machine,
            proxy,
            path,
            lab,
        })
    }

    /// The readings just after the load generator has exited, in the reverse order: the
    /// CPU window closes first.
    fn after(&self, before: &Reading) -> anyhow::Result<Reading> {
        let machine = procfs::machine_busy_ticks()?;
        let at = Instant::now();
        let postgres = before
            .postgres
            .as_ref()
            .map(|_| procfs::ticks_of_named(Path::new("/proc"), "postgres"));
        let lab = procfs::self_ticks()?.own;
        let proxy = self.running.proxy.as_ref().map(|p| p.stats());
        let path = self.path()?;
        let order = self.ticks(self.running.order_pid())?;
        let user = self.ticks(self.running.user_pid())?;
        let tcp = self.tcp()?;
        let replicas = ReplicaReading::of(self.running)?;
        let upstream = self.upstream("after")?;
        let hdr = self.upstream_hdr()?;
        Ok(Reading {
            hdr,
            upstream,
            tcp,
            replicas,
            at,
            postgres,
            order,
            user,
            machine,
            proxy,
            path,
            lab,
        })
    }

    /// Each service's peak resident set, kB (0 when not the lab's).
    fn peak_rss(&self) -> anyhow::Result<(u64, u64)> {
        if self.on_proc {
            Ok((
                procfs::peak_rss_kb(self.running.order_pid())?,
                procfs::peak_rss_kb(self.running.user_pid())?,
            ))
        } else {
            Ok((0, 0))
        }
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
        for (i, rep) in running.replicas.iter().enumerate() {
            r.counters
                .push(super::scrape::replica(rep.rest, &rep.metrics_path)?);
            // A target's replicas are not this machine's processes.
            let pid = running.replica_pid(i);
            r.ticks.push(if pid == 0 {
                0
            } else {
                procfs::cpu_ticks(pid)?.own
            });
        }
        if let Some(h) = &running.balancer {
            r.balancer = Some(procfs::cpu_ticks(h.pid())?.own);
        }
        Ok(r)
    }
}
