//! The raw record of one round of one cell, as the results directory keeps
//! it (`rounds/*.json`): the load generator's summary, user-service's counters, every
//! process's CPU and memory, sockets, the delay proxy's and the replicas'
//! figures. Everything the report says of a round is derived from it
//! ([`crate::measure::figures`]), so a newer lab can read an older run.

use serde::{Deserialize, Serialize};

use crate::measure::cell::Cell;
use crate::measure::load::{Endings, Generator, Summary};
use crate::measure::procfs::TcpStates;
use crate::measure::prom::Upstream;

/// CPU time of each process over the measured part of a round, in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Cpu {
    pub order_us: f64,
    pub user_us: f64,
    /// The load generator's, whichever it was.
    #[serde(alias = "k6_us")]
    pub load_us: f64,
}

/// Peak resident set of each process, in kB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Rss {
    pub order_kb: f64,
    pub user_kb: f64,
    /// The load generator's.
    #[serde(alias = "k6_kb")]
    pub load_kb: f64,
}

/// Everything recorded about one round of one cell: the raw JSON of the
/// results directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RoundRecord {
    pub experiment: String,
    pub cell: Cell,
    /// 1-based.
    pub round: u32,
    pub started_at: String,
    /// The measured duration asked of the load generator, in seconds.
    pub duration_s: f64,
    /// What drove the load (rounds recorded before the lab had its own
    /// engine were k6's).
    #[serde(default = "Generator::before_engine")]
    pub generator: Generator,
    /// What the load generator counted.
    #[serde(alias = "k6")]
    pub load: Summary,
    /// user-service's counters for `cell.via` before and after.
    pub upstream_before: Upstream,
    pub upstream_after: Upstream,
    pub cpu: Cpu,
    pub rss: Rss,
    /// Sockets on order-service's REST port before and after the measured run.
    pub tcp_before: TcpStates,
    pub tcp_after: TcpStates,
    /// Cores of the machine, to express CPU as a share of it.
    pub cores: u32,
    /// CPU the rest of the machine used during the measured run (other
    /// programs, the lab itself), in µs: a busy neighbour slows every cell.
    #[serde(default)]
    pub other_cpu_us: f64,
    /// Whether each process was pinned, and where (`--pin`).
    pub pinning: Option<String>,
    /// Why this round's numbers should be read with care.
    pub flags: Vec<String>,
    /// The delay proxy's figures over the measured run (cells with an RTT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyRecord>,
    /// The packet path's figures over the measured run (cells on one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathRecord>,
    /// The wall time the CPU figures were counted over, s (`None` in rounds
    /// recorded before it was kept: the measured duration stands in).
    #[serde(default)]
    pub window_s: Option<f64>,
    /// The local Postgres server's CPU over the window, µs, with
    /// `--database-url` on this machine.
    #[serde(default)]
    pub postgres_us: Option<f64>,
    /// The environment each service was started with (everything else is
    /// cleared): `order-service NAME` and `user-service NAME` to its value.
    #[serde(default)]
    pub service_env: std::collections::BTreeMap<String, String>,
    /// The load generator's own summary, whole: the engine's JSON, k6's
    /// summary data as its handleSummary wrote it, or wrk's hook line.
    #[serde(alias = "k6_summary")]
    pub load_raw: serde_json::Value,
    /// The lab's engine's histogram of the good answers' latencies, µs,
    /// exact ([`telemetry::hdr`]'s encoding); for k6, the summary's
    /// buckets stand in ([`RoundRecord::e2e_histogram`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_hdr: Option<String>,
    /// With several replicas: what each did over the measured run, in
    /// replica order (the slow one last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<Vec<ReplicaRecord>>,
    /// HAProxy's CPU over the window, µs, when it balanced the cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balancer_cpu_us: Option<f64>,
    /// The services were a target the lab did not start: their processes,
    /// CPU, memory and sockets are not this machine's to read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_proc: bool,
    /// user-service's HDR histogram of the measured run's good upstream
    /// calls, µs ([`telemetry::hdr`]'s encoding); none for k6 calling
    /// order-service directly, or rounds recorded before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_hdr: Option<String>,
    /// In a stalled cell, how long order-service was stopped, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalled_ms: Option<f64>,
    /// In a cell with a fault, what happened when, and order-service's own
    /// count of the lookups it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<FaultRecord>,
}

impl RoundRecord {
    /// The good answers' latencies end to end, µs: the engine's exact
    /// histogram, or k6's buckets (each value within 2.4%); `None` for
    /// rounds that have neither (wrk, k6's gRPC client).
    pub fn e2e_histogram(&self) -> Option<hdrhistogram::Histogram<u64>> {
        match &self.e2e_hdr {
            Some(text) => telemetry::hdr::decode(text).ok(),
            None if self.generator == Generator::K6 => {
                crate::measure::k6::good_histogram(&self.load_raw)
            }
            None => None,
        }
    }

    /// How the round's calls ended, by status, and how many were slow;
    /// `None` when its generator's summary cannot say.
    pub fn endings(&self) -> Option<Endings> {
        match self.generator {
            Generator::K6 => crate::measure::k6::endings(&self.load_raw).ok(),
            Generator::Loadgen => {
                serde_json::from_value::<loadgen::tally::Summary>(self.load_raw.clone())
                    .ok()
                    .map(|s| crate::measure::engine::endings(&s))
            }
            Generator::Wrk => None,
        }
    }
}

/// A fault during a measured run, as the lab saw it: times in ms from the
/// load's start (user-service's first call counted).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultRecord {
    /// When the fault began (the signal sent, the path silenced, the
    /// connections reset).
    pub at_ms: f64,
    /// When it ended: the process started again and ready, the path
    /// carrying again (a reset ends as it begins).
    pub end_ms: f64,
    /// A restart: from SIGTERM to the process's exit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_ms: Option<f64>,
    /// A restart whose drain passed its limit and was killed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub killed_after_drain: bool,
    /// A reset: how many connections `ss -K` aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_sockets: Option<u32>,
    /// user-service's counters of the cell's transport every
    /// [`SAMPLE_MS`](crate::measure::runner::fault::SAMPLE_MS) from the
    /// load's start: `[ms, calls, errors]`, both counts cumulative.
    pub timeline: Vec<[f64; 3]>,
    /// order-service's lookups answered well over the run, every replica's
    /// together; `None` when a process that counted them was killed or
    /// restarted (its counts went with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_answered: Option<f64>,
    /// order-service's lookups answered with an error status over the run
    /// (a store unavailable, a deadline passed), counted as `order_answered`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_refused: Option<f64>,
}

/// One replica over a measured run, from its own `/metrics` and /proc.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicaRecord {
    /// The address its clients reach it at.
    pub addr: String,
    /// Calls for orders it answered well, every transport's route.
    pub calls: f64,
    /// Its CPU over the window, µs.
    pub cpu_us: f64,
    /// Connections open on its listeners at the end of the run.
    pub connections: f64,
}

/// What the packet path between the services did during a measured run,
/// and what each side's kernel retransmitted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PathRecord {
    /// Packets user-service's side sent across, and order-service's side.
    pub packets_up: f64,
    pub packets_down: f64,
    /// Packets the path lost (its loss model) and dropped at a full queue,
    /// both directions.
    pub lost: f64,
    pub queue_drops: f64,
    /// TCP segments each side's kernel retransmitted.
    pub retrans_user: f64,
    pub retrans_order: f64,
    /// Mean lateness of a delayed packet, µs (the emulation's own error):
    /// from its delivery time to the return of its write (an early one
    /// counts 0; rounds before this was timed after the write took it when
    /// the packet left the emulator's heap).
    pub late_mean_us: f64,
    /// CPU of the lab's process, where the path's threads run, µs.
    pub cpu_us: f64,
    /// The seed the path's losses and jitter drew from (`lab run --seed`
    /// replays it); `None` in rounds from before each round drew its own,
    /// which all drew from seed 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Packets dropped while a fault silenced the path, both directions.
    #[serde(default)]
    pub silenced: f64,
    /// Packets the emulator could not write into the other side's TUN
    /// device, both directions.
    #[serde(default)]
    pub write_errors: f64,
    /// Packets the kernels dropped at their TUN device's queue before the
    /// emulator read them (it fell behind), both directions; `None` where
    /// not counted (older rounds, or the count could not be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_drops: Option<f64>,
    /// Delayed packets whose write returned before their delivery time.
    #[serde(default)]
    pub early: f64,
    /// The lateness under which 99% of the delayed packets were written,
    /// µs, as the upper edge of a power-of-two bucket (an overstatement by
    /// at most ×2); `None` in older rounds or with no delayed packet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_p99_us: Option<f64>,
}

impl PathRecord {
    /// Why the emulator may have been part of what the round measured:
    /// its lateness p99 past [`PATH_LATE_P99_US`], or packets dropped at a
    /// TUN queue it did not read in time.
    pub fn fell_behind(&self) -> Option<String> {
        let drops = self.device_drops.unwrap_or(0.0);
        let late = self.late_p99_us.filter(|l| *l > PATH_LATE_P99_US);
        match (drops > 0.0, late) {
            (false, None) => None,
            (true, None) => Some(format!(
                "the packet path fell behind: {drops:.0} packets dropped at a TUN queue before the emulator read them"
            )),
            (false, Some(l)) => Some(format!(
                "the packet path fell behind: 99% of its delayed packets written within {l:.0} µs of their time, over {PATH_LATE_P99_US:.0} µs"
            )),
            (true, Some(l)) => Some(format!(
                "the packet path fell behind: {drops:.0} packets dropped at a TUN queue before the emulator read them, and 99% of its delayed packets written within {l:.0} µs of their time"
            )),
        }
    }
}

/// The lateness p99 of the packet path's writes past which a round is
/// flagged: about a millisecond, a twentieth of the 20 ms round trip the
/// experiments emulate. The p99 is read as a power-of-two bucket's upper
/// edge, so this is the edge of 1,024 µs: flagged from a bucket of 2,048,
/// a true p99 of 1,024 µs or more.
pub const PATH_LATE_P99_US: f64 = 1024.0;

/// What the delay proxy between the services did during a measured run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ProxyRecord {
    /// The one-way delay asked of each direction, µs.
    pub one_way_us: f64,
    /// Chunks written (both directions) and connections accepted.
    pub chunks: f64,
    pub connections: f64,
    /// How much later than asked chunks were written, µs: the mean over the
    /// measured run, the maximum over the whole round (warm-up included).
    pub late_mean_us: f64,
    pub late_max_us: f64,
    /// Chunks, FINs and resets that waited for the proxy's hold (a fault's
    /// silence) to end.
    #[serde(default)]
    pub held: f64,
    /// CPU of the lab's process, where the proxy's threads run, µs.
    pub cpu_us: f64,
}
