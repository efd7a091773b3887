//! The figures of one round, derived from its [`RoundRecord`]: rates,
//! latencies, bytes, CPU and memory per good answer ([`Measures`]), and the
//! [`Metric`]s a table reads from them, each with its unit. A figure with
//! no sample is `None`, never 0. Whether a round counts at all is judged
//! in [`crate::measure::judge`].

use serde::{Deserialize, Serialize};

use crate::measure::cell::MAX_REPLICAS;
use crate::measure::load;
use crate::measure::record::{Cpu, ReplicaRecord, RoundRecord, Rss};

/// The figures of one round, derived from its [`RoundRecord`]. Rates,
/// latencies and CPU per request count good answers only (a 200 over the
/// transport asked for with the expected body); a figure with no sample is
/// `None`, never 0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Measures {
    /// Every answer k6 got, good or not.
    pub requests: f64,
    pub good: f64,
    pub bad_answers: f64,
    pub shed: f64,
    /// Sets of lookups whose every answer was good.
    pub sets: f64,
    /// Good answers, and good sets, per second.
    pub rate: f64,
    pub set_rate: f64,
    pub dropped: f64,
    /// Open loop (the lab's engine): requests sent late because every
    /// connection was busy at their time.
    #[serde(default)]
    pub waited: f64,
    /// Requests still in flight when the run's grace period ended.
    #[serde(default)]
    pub unfinished: f64,
    /// Open loop (the lab's engine): how late each request was written
    /// after its due time, µs.
    #[serde(default)]
    pub lag_us: Option<load::Percentiles>,
    /// Requests that ended (k6: iterations; open loop: with the dropped
    /// and unfinished ones, what was asked).
    pub iterations: f64,
    pub e2e_ms: Option<load::Percentiles>,
    pub set_ms: Option<load::Percentiles>,
    pub upstream_us: Option<load::Percentiles>,
    /// Where the round trips went, when the cell recorded it.
    pub parts: Option<load::PartsSummary>,
    pub upstream_calls: f64,
    pub upstream_errors: f64,
    pub connections_opened: f64,
    pub connections_held: f64,
    pub bytes_out_per_call: Option<f64>,
    pub bytes_in_per_call: Option<f64>,
    pub cpu: Cpu,
    pub rss: Rss,
    pub time_wait_new: f64,
    pub time_wait_after: f64,
    /// The wall time CPU is counted over, s: from the readings before k6
    /// started to those after it exited.
    pub window_s: f64,
    /// k6's CPU over the window, in cores.
    pub load_cores: f64,
    /// All three processes' CPU as a share of the machine.
    pub machine_busy: f64,
    /// Other processes' CPU during the window, in cores.
    pub other_cores: f64,
    /// The Postgres server's CPU over the window, µs (a run with a local
    /// database).
    pub postgres_us: Option<f64>,
    /// The delay proxy's lateness (mean, µs) and CPU (cores); `None`
    /// without a proxy.
    pub proxy_late_us: Option<f64>,
    pub proxy_cores: Option<f64>,
    /// The packet path: TCP segments both sides retransmitted per 1,000
    /// upstream calls, packets it lost (its loss model) per 1,000 calls,
    /// mean lateness of a delayed packet (µs) and its CPU (cores); `None`
    /// off a packet path.
    #[serde(default)]
    pub path_retrans_per_1k: Option<f64>,
    #[serde(default)]
    pub path_lost_per_1k: Option<f64>,
    #[serde(default)]
    pub path_late_us: Option<f64>,
    #[serde(default)]
    pub path_cores: Option<f64>,
    /// TLS handshakes user-service made to order-service during the
    /// measured run, full and resumed, per 1,000 upstream calls.
    pub tls_full_per_1k: Option<f64>,
    pub tls_resumed_per_1k: Option<f64>,
    /// With several replicas: each one's share of the calls, CPU and
    /// connections.
    pub replicas: Option<ReplicaMeasures>,
    /// HAProxy's CPU over the window, cores, when it balanced the cell.
    pub balancer_cores: Option<f64>,
    /// The services' processes were not the lab's (`--target`): their
    /// CPU, memory and sockets are missing.
    pub no_proc: bool,
    /// The round broke something on purpose ([`Env::fault`]): its failed
    /// answers are what it measures, not a reason to leave it out.
    ///
    /// [`Env::fault`]: crate::measure::cell::Env::fault
    pub fault: bool,
}

/// Each replica's share of a round, in replica order.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReplicaMeasures {
    pub n: usize,
    /// Share of the calls the replicas answered, %; `None` when they
    /// answered none.
    pub share_pct: [Option<f64>; MAX_REPLICAS],
    pub cores: [f64; MAX_REPLICAS],
    pub connections: [f64; MAX_REPLICAS],
    /// The largest replica's calls over the fair share of them (1 is
    /// even; n is all on one), from the counts themselves.
    pub imbalance: Option<f64>,
}

impl ReplicaMeasures {
    fn of(rs: &[ReplicaRecord], window_s: f64) -> ReplicaMeasures {
        let n = rs.len().min(MAX_REPLICAS);
        let total: f64 = rs.iter().map(|r| r.calls).sum();
        let mut m = ReplicaMeasures {
            n,
            share_pct: [None; MAX_REPLICAS],
            cores: [0.0; MAX_REPLICAS],
            connections: [0.0; MAX_REPLICAS],
            imbalance: None,
        };
        let largest = rs.iter().take(n).map(|r| r.calls).fold(0.0, f64::max);
        m.imbalance = (total > 0.0).then(|| largest * n as f64 / total);
        for (i, r) in rs.iter().take(n).enumerate() {
            m.share_pct[i] = (total > 0.0).then(|| 100.0 * r.calls / total);
            m.cores[i] = r.cpu_us / 1e6 / window_s;
            m.connections[i] = r.connections;
        }
        m
    }

    /// The largest share over the fair one (1 is even; n is all on one).
    pub fn imbalance(&self) -> Option<f64> {
        self.imbalance
    }
}

impl Measures {
    /// Derives a round's figures.
    pub fn of(r: &RoundRecord) -> Measures {
        let d = r.upstream_after.since(&r.upstream_before);
        let per_call = |x: f64| (d.calls > 0.0).then(|| x / d.calls);
        let window = r.window_s.unwrap_or(r.duration_s).max(1e-9);
        let total_cpu = r.cpu.order_us + r.cpu.user_us + r.cpu.load_us;
        let k = &r.load.counted();
        Measures {
            requests: k.requests,
            good: k.good,
            bad_answers: k.bad_answers,
            shed: k.shed,
            sets: k.good_sets,
            rate: k.good_rate,
            set_rate: if k.run_seconds > 0.0 {
                k.good_sets / k.run_seconds
            } else {
                0.0
            },
            dropped: k.dropped,
            waited: k.schedule.map_or(0.0, |s| s.waited),
            unfinished: k.unfinished,
            lag_us: k.schedule.map(|s| s.lag_us),
            iterations: k.iterations,
            e2e_ms: k.good_ms,
            set_ms: k.good_set_ms,
            upstream_us: k.upstream_us,
            parts: k.parts,
            upstream_calls: d.calls,
            upstream_errors: d.errors,
            connections_opened: d.connections_opened,
            connections_held: d.connections_open,
            bytes_out_per_call: per_call(d.bytes_written),
            bytes_in_per_call: per_call(d.bytes_read),
            cpu: r.cpu,
            rss: r.rss,
            time_wait_new: (f64::from(r.tcp_after.time_wait) - f64::from(r.tcp_before.time_wait))
                .max(0.0),
            time_wait_after: f64::from(r.tcp_after.time_wait),
            window_s: window,
            load_cores: r.cpu.load_us / 1e6 / window,
            machine_busy: total_cpu / 1e6 / window / f64::from(r.cores.max(1)),
            other_cores: r.other_cpu_us / 1e6 / window,
            postgres_us: r.postgres_us,
            proxy_late_us: r.proxy.map(|p| p.late_mean_us),
            proxy_cores: r.proxy.map(|p| p.cpu_us / 1e6 / window),
            path_retrans_per_1k: r
                .path
                .and_then(|p| per_call(p.retrans_user + p.retrans_order))
                .map(|x| x * 1000.0),
            path_lost_per_1k: r.path.and_then(|p| per_call(p.lost)).map(|x| x * 1000.0),
            path_late_us: r.path.map(|p| p.late_mean_us),
            path_cores: r.path.map(|p| p.cpu_us / 1e6 / window),
            tls_full_per_1k: per_call(d.tls_full).map(|x| x * 1000.0),
            tls_resumed_per_1k: per_call(d.tls_resumed).map(|x| x * 1000.0),
            replicas: r
                .replicas
                .as_deref()
                .map(|rs| ReplicaMeasures::of(rs, window)),
            balancer_cores: r.balancer_cpu_us.map(|us| us / 1e6 / window),
            no_proc: r.no_proc,
            fault: r.cell.env.fault.is_some(),
        }
    }

    /// Bad answers as a share of the answers that were not shed, %.
    pub fn bad_share_pct(&self) -> f64 {
        let judged = self.requests - self.shed;
        if judged > 0.0 {
            100.0 * self.bad_answers / judged
        } else {
            0.0
        }
    }

    /// Per good answer (one lookup).
    fn per_request(&self, us: f64) -> Option<f64> {
        (self.good > 0.0).then(|| us / self.good)
    }

    /// Per good set of lookups.
    fn per_iteration(&self, us: f64) -> Option<f64> {
        (self.sets > 0.0).then(|| us / self.sets)
    }
}

/// Replica `i`'s measures, when the round had that many replicas.
fn replica(m: &Measures, i: u8) -> Option<&ReplicaMeasures> {
    m.replicas.as_ref().filter(|r| usize::from(i) < r.n)
}

/// A figure a table can show; each knows how to read itself from
/// [`Measures`] and what its unit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Rate,
    IterationRate,
    Dropped,
    /// Open loop: the share of the requests asked for that were never
    /// sent, %: k6's dropped iterations, or what the lab's engine still
    /// had waiting when its grace period ended.
    DroppedShare,
    /// Open loop: the share of the requests asked for that could not be
    /// sent at their time for want of a free connection (k6: a VU), %.
    /// k6 drops them; the lab's engine sends them late, timed from their
    /// due time. The pool ladder's overload signal.
    BehindShare,
    /// Open loop (the lab's engine): how late requests were written after
    /// their due time, p50 and p99, µs.
    LagP50,
    LagP99,
    E2eP50,
    E2eP90,
    E2eP95,
    E2eP99,
    E2eMax,
    IterP50,
    IterP95,
    UpP50,
    UpP95,
    UpP99,
    UpMax,
    ConnectionsOpened,
    ConnectionsHeld,
    BytesOut,
    BytesIn,
    BytesTotal,
    UpstreamCallsPerIteration,
    BytesPerIteration,
    CpuOrder,
    CpuUser,
    CpuServices,
    CpuLoad,
    CpuServicesPerIteration,
    RssOrder,
    RssUser,
    RssLoad,
    TimeWait,
    LoadCores,
    OtherCores,
    BadAnswers,
    /// Bad answers as a share of the answers not shed, %.
    BadShare,
    /// Answers shed by user-service at its limit (503 with Retry-After),
    /// and their share of every answer, %.
    Shed,
    ShedShare,
    /// The local Postgres server's CPU per good answer, µs.
    CpuPostgres,
    /// The delay proxy: mean lateness of a chunk (µs), and its CPU (cores).
    ProxyLate,
    ProxyCores,
    /// user-service's call at p99.9, µs (summaries that have it).
    UpP999,
    /// The packet path: segments retransmitted and packets lost per 1,000
    /// upstream calls, mean lateness of a delayed packet (µs), CPU (cores).
    Retrans,
    PathLost,
    PathLate,
    PathCores,
    /// TLS handshakes to order-service per 1,000 upstream calls.
    TlsFullPer1k,
    TlsResumedPer1k,
    /// Replica i's (0-based) share of the calls, %; its CPU, cores; the
    /// connections open on it at the end of the run.
    ReplicaShare(u8),
    ReplicaCores(u8),
    ReplicaConnections(u8),
    /// The largest replica share over the fair share.
    Imbalance,
    /// HAProxy's CPU, cores.
    BalancerCores,
    /// The whole machine's CPU as a share of it, %.
    MachineBusy,
    /// A part of the round trip (see [`Part`]): its median and its mean, µs.
    PartP50(Part),
    PartMean(Part),
    /// The share of answers whose parts pass a check, %: store + encode
    /// within order-service's total; total + decode within the round trip.
    ServerCheck,
    ClientCheck,
}

/// A part of one call's round trip, as `x-upstream-parts` splits it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// order-service's store call.
    Store,
    /// order-service's conversion and serialization of the answer.
    Encode,
    /// order-service's whole time, from the request read to the answer
    /// handed over.
    Total,
    /// user-service's decode-and-convert.
    Decode,
    /// What the others leave of the round trip: the wire and its framing.
    Wire,
}

impl Part {
    fn of(self, p: &load::PartsSummary) -> &load::Percentiles {
        match self {
            Part::Store => &p.store,
            Part::Encode => &p.encode,
            Part::Total => &p.total,
            Part::Decode => &p.decode,
            Part::Wire => &p.wire,
        }
    }
}

impl Metric {
    /// Reads the figure; `None` when it does not exist for this round (no
    /// sample of it), never a 0 that stands for nothing.
    pub fn of(self, m: &Measures) -> Option<f64> {
        use Metric::*;
        let per_iteration = |x: f64| (m.iterations > 0.0).then(|| x / m.iterations);
        if m.no_proc && self.needs_proc() {
            return None;
        }
        Some(match self {
            Rate => m.rate,
            IterationRate => m.set_rate,
            Dropped => m.dropped,
            DroppedShare => {
                let asked = m.iterations + m.dropped + m.unfinished;
                if asked > 0.0 {
                    100.0 * m.dropped / asked
                } else {
                    return None;
                }
            }
            BehindShare => {
                let asked = m.iterations + m.dropped + m.unfinished;
                if asked > 0.0 {
                    100.0 * (m.dropped + m.waited) / asked
                } else {
                    return None;
                }
            }
            LagP50 => m.lag_us?.p50,
            LagP99 => m.lag_us?.p99,
            E2eP50 => m.e2e_ms?.p50,
            E2eP90 => m.e2e_ms?.p90,
            E2eP95 => m.e2e_ms?.p95,
            E2eP99 => m.e2e_ms?.p99,
            E2eMax => m.e2e_ms?.max,
            IterP50 => m.set_ms?.p50,
            IterP95 => m.set_ms?.p95,
            UpP50 => m.upstream_us?.p50,
            UpP95 => m.upstream_us?.p95,
            UpP99 => m.upstream_us?.p99,
            UpMax => m.upstream_us?.max,
            ConnectionsOpened => m.connections_opened,
            ConnectionsHeld => m.connections_held,
            BytesOut => m.bytes_out_per_call?,
            BytesIn => m.bytes_in_per_call?,
            BytesTotal => m.bytes_out_per_call? + m.bytes_in_per_call?,
            // What one started set costs on the wire, good or not: a
            // property of the variant, not of its answers.
            UpstreamCallsPerIteration => per_iteration(m.upstream_calls)?,
            BytesPerIteration => {
                per_iteration((m.bytes_in_per_call? + m.bytes_out_per_call?) * m.upstream_calls)?
            }
            CpuOrder => return m.per_request(m.cpu.order_us),
            CpuUser => return m.per_request(m.cpu.user_us),
            CpuServices => return m.per_request(m.cpu.order_us + m.cpu.user_us),
            CpuLoad => return m.per_request(m.cpu.load_us),
            CpuPostgres => return m.per_request(m.postgres_us?),
            CpuServicesPerIteration => return m.per_iteration(m.cpu.order_us + m.cpu.user_us),
            RssOrder => m.rss.order_kb / 1024.0,
            RssUser => m.rss.user_kb / 1024.0,
            RssLoad => m.rss.load_kb / 1024.0,
            TimeWait => m.time_wait_new,
            LoadCores => m.load_cores,
            OtherCores => m.other_cores,
            BadAnswers => m.bad_answers,
            BadShare => m.bad_share_pct(),
            Shed => m.shed,
            ShedShare => {
                if m.requests > 0.0 {
                    100.0 * m.shed / m.requests
                } else {
                    return None;
                }
            }
            ProxyLate => return m.proxy_late_us,
            ProxyCores => return m.proxy_cores,
            UpP999 => return m.upstream_us?.p999,
            Retrans => return m.path_retrans_per_1k,
            PathLost => return m.path_lost_per_1k,
            PathLate => return m.path_late_us,
            PathCores => return m.path_cores,
            TlsFullPer1k => return m.tls_full_per_1k,
            TlsResumedPer1k => return m.tls_resumed_per_1k,
            ReplicaShare(i) => return replica(m, i)?.share_pct[usize::from(i)],
            ReplicaCores(i) => replica(m, i)?.cores[usize::from(i)],
            ReplicaConnections(i) => replica(m, i)?.connections[usize::from(i)],
            Imbalance => return m.replicas?.imbalance(),
            BalancerCores => return m.balancer_cores,
            MachineBusy => 100.0 * m.machine_busy,
            PartP50(p) => p.of(m.parts.as_ref()?).p50,
            PartMean(p) => p.of(m.parts.as_ref()?).avg,
            ServerCheck | ClientCheck => {
                let parts = m.parts.as_ref()?;
                if parts.reported <= 0.0 {
                    return None;
                }
                let ok = if self == ServerCheck {
                    parts.server_ok
                } else {
                    parts.client_ok
                };
                // The ratio first: all answers passing is exactly 100.
                100.0 * (ok / parts.reported)
            }
        })
    }

    /// The unit shown beside the figure.
    pub fn unit(self) -> &'static str {
        use Metric::*;
        match self {
            Rate | IterationRate => "req/s",
            Dropped | ConnectionsOpened | ConnectionsHeld | TimeWait | BadAnswers | Shed => "",
            DroppedShare | BehindShare | BadShare | ShedShare => "%",
            LagP50 | LagP99 => "µs",
            E2eP50 | E2eP90 | E2eP95 | E2eP99 | E2eMax | IterP50 | IterP95 => "ms",
            UpP50 | UpP95 | UpP99 | UpP999 | UpMax | ProxyLate | PathLate => "µs",
            Retrans | PathLost => "per 1,000 calls",
            BytesOut | BytesIn | BytesTotal | BytesPerIteration => "B",
            UpstreamCallsPerIteration => "calls",
            CpuOrder | CpuUser | CpuServices | CpuLoad | CpuPostgres | CpuServicesPerIteration => {
                "µs"
            }
            RssOrder | RssUser | RssLoad => "MiB",
            LoadCores | OtherCores | ProxyCores | PathCores => "cores",
            TlsFullPer1k | TlsResumedPer1k => "per 1,000 calls",
            ReplicaShare(_) | MachineBusy => "%",
            ReplicaCores(_) | BalancerCores => "cores",
            ReplicaConnections(_) => "",
            Imbalance => "× fair",
            PartP50(_) | PartMean(_) => "µs",
            ServerCheck | ClientCheck => "%",
        }
    }

    /// Whether it is read from the services' processes in /proc (so is
    /// missing for a target the lab did not start).
    pub fn needs_proc(self) -> bool {
        use Metric::*;
        matches!(
            self,
            CpuOrder
                | CpuUser
                | CpuServices
                | CpuServicesPerIteration
                | RssOrder
                | RssUser
                | TimeWait
                | OtherCores
                | ReplicaCores(_)
                | MachineBusy
        )
    }

    /// Whether a bigger figure is better (for the one-line readings).
    pub fn higher_is_better(self) -> bool {
        matches!(self, Metric::Rate | Metric::IterationRate)
    }
}

#[cfg(test)]
mod tests;
