//! What a load generator counted in one run, whichever generator it was:
//! the lab's own engine (`loadgen`, the default), k6 (`--load k6`, and the
//! cells where k6 is the subject), or wrk (the `generator` experiment's
//! yardstick). Each generator's own output is turned into a [`Summary`]
//! by its module ([`crate::measure::engine`], [`crate::measure::k6`],
//! [`crate::measure::wrk`]); everything the report says is read from it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What drives a round's load.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Generator {
    /// The lab's own engine (`loadgen`): HTTP/1.1 on one thread, the lab's
    /// answer checks, open loop timed from each intended send.
    #[default]
    Loadgen,
    /// k6 and the scripts in `k6/`, as users run them.
    K6,
    /// wrk (Debian's), the yardstick of the `generator` experiment: the
    /// least a load generator can cost, and no answer checks.
    #[value(skip)]
    Wrk,
}

impl Generator {
    /// The generator of rounds recorded before the lab had its own.
    pub fn before_engine() -> Generator {
        Generator::K6
    }

    /// What it is, in a report's words.
    pub fn describe(self) -> &'static str {
        match self {
            Generator::Loadgen => {
                "the lab's own load engine (`loadgen`: keep-alive connections on one thread, \
                 every answer checked, an open loop timed from each request's intended send)"
            }
            Generator::K6 => "k6 (the scripts in `k6/`)",
            Generator::Wrk => "wrk (one thread; statuses checked, nothing else)",
        }
    }

    /// Why a run used it beside the run's own generator.
    pub fn why_in_a_run(self) -> &'static str {
        match self {
            Generator::Loadgen | Generator::Wrk => "the generator experiment's side-by-side cells",
            Generator::K6 => {
                "its own gRPC client is the pitfall experiment's subject, and the generator \
                 experiment measures it beside the others"
            }
        }
    }

    /// Its name in tables and progress lines.
    pub fn name(self) -> &'static str {
        match self {
            Generator::Loadgen => "loadgen",
            Generator::K6 => "k6",
            Generator::Wrk => "wrk",
        }
    }
}

/// The load generators a run may use, where they are.
#[derive(Debug, Clone, Default)]
pub struct Generators {
    /// The run's generator (`--load`), for every cell that names none.
    pub default: Generator,
    /// The lab's engine, when a cell uses it.
    pub loadgen: Option<PathBuf>,
    /// k6, when a cell uses it.
    pub k6: Option<PathBuf>,
    /// wrk, when a cell uses it.
    pub wrk: Option<PathBuf>,
}

impl Generators {
    /// Where `g` is.
    pub fn path(&self, g: Generator) -> anyhow::Result<&Path> {
        let p = match g {
            Generator::Loadgen => &self.loadgen,
            Generator::K6 => &self.k6,
            Generator::Wrk => &self.wrk,
        };
        p.as_deref()
            .ok_or_else(|| anyhow::anyhow!("{} was not found before the run", g.name()))
    }
}

/// Percentiles of one latency distribution, in its own unit (ms for
/// round trips, µs for user-service's upstream time and the parts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: f64,
    pub avg: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    /// p99.9: `None` in summaries written before the lab asked for it.
    #[serde(default)]
    pub p999: Option<f64>,
    pub max: f64,
}

/// Where the good answers' round trips went (the `part_*_micros` Trends and
/// the `parts_*` counters of an answer's `x-upstream-parts`), in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PartsSummary {
    pub store: Percentiles,
    pub encode: Percentiles,
    pub total: Percentiles,
    pub decode: Percentiles,
    pub wire: Percentiles,
    /// Good answers that carried their parts.
    pub reported: f64,
    /// Of those, the ones whose store + encode fit in order-service's total,
    /// and whose total + decode fit in the round trip.
    pub server_ok: f64,
    pub client_ok: f64,
}

/// What the lab takes from a load generator's run. The names are k6's
/// where k6 named the figure first (a VU is a caller, or in an open loop a
/// connection; an iteration is one request).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// How long the test ran, graceful stop included.
    pub run_seconds: f64,
    /// HTTP requests made and their rate over the run.
    pub requests: f64,
    pub request_rate: f64,
    /// Iterations: one request each (before the many-users route, N
    /// requests sent at once when the summary's `lab_lookups` was N > 1).
    pub iterations: f64,
    pub iteration_rate: f64,
    /// Open loop: iterations never sent. k6 drops an iteration when every
    /// VU is busy at its time; the lab's engine makes it wait for a
    /// connection instead (counted late, in [`Schedule::waited`]) and only
    /// what is still waiting when the run's grace period ends is dropped.
    pub dropped: f64,
    /// Answers that were not a 200 over the transport asked for.
    pub bad_answers: f64,
    /// `http_req_duration` in ms (for grpc-direct: `grpc_req_duration`).
    pub duration_ms: Percentiles,
    /// `iteration_duration` in ms: the time of an iteration, k6's own work included.
    pub iteration_ms: Percentiles,
    /// `upstream_micros` in µs (absent for scripts that do not record it).
    pub upstream_us: Option<Percentiles>,
    /// Most VUs in use.
    pub vus_max: f64,
    /// Where the round trips went, when the answers carried their parts.
    #[serde(default)]
    pub parts: Option<PartsSummary>,
    /// The counting rules the script followed (its `lab_counting`), or
    /// `None` for a summary written before them: its requests all counted
    /// and the good answers below are inferred (requests − bad).
    #[serde(default)]
    pub counting: Option<String>,
    /// Good answers: a 200 over the transport asked for with the expected
    /// body (gRPC direct: status OK with the orders asked for), and their
    /// rate over the run.
    #[serde(default)]
    pub good: f64,
    #[serde(default)]
    pub good_rate: f64,
    /// Answers shed by user-service at its concurrency limit (503 with
    /// Retry-After): neither good nor bad.
    #[serde(default)]
    pub shed: f64,
    /// The latency of good answers, ms (grpc-direct: every call's, as k6
    /// gives no per-call timing for gRPC).
    #[serde(default)]
    pub good_ms: Option<Percentiles>,
    /// Sets whose every answer was good: how many, and the longest answer
    /// of each, ms.
    #[serde(default)]
    pub good_sets: f64,
    #[serde(default)]
    pub good_set_ms: Option<Percentiles>,
    /// Bodies parsed and their orders counted (the first good answer of
    /// each VU; the others are checked by their length).
    #[serde(default)]
    pub parsed_bodies: f64,
    /// gRPC answers order-service sent compressed (grpc-direct).
    #[serde(default)]
    pub compressed: f64,
    /// Requests still in flight when the grace period after the run ended
    /// (the lab's engine): neither good nor bad, and not in `requests`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unfinished: f64,
    /// How the lab's engine kept an open loop's schedule; `None` for a
    /// closed loop and for other generators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// How an open loop's schedule was kept (the lab's engine).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// Requests due before the run's end.
    pub due: f64,
    /// Sent later than due because every connection was busy and the cap
    /// allowed no new one: the open loop's overload signal (k6 would have
    /// dropped them). Their latency still runs from their due time.
    pub waited: f64,
    /// How late each request was written after its due time, µs: the
    /// timer's and the event loop's own delay, and any wait for a
    /// connection. Every latency of the run includes it.
    pub lag_us: Percentiles,
}

impl Schedule {
    /// The share of the due requests that waited for a connection, %.
    pub fn waited_pct(&self) -> Option<f64> {
        (self.due > 0.0).then(|| 100.0 * self.waited / self.due)
    }
}

/// How a run's calls ended when something broke: the engine's count by
/// status, or the k6 scripts' `not_good_*` and `slow_answers` counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Endings {
    /// Answers that were not good, by the status user-service gave ("0":
    /// none at all; "other": any status not named), statuses with none left
    /// out.
    pub not_good: Vec<(String, f64)>,
    /// Answers slower than a second, good or not.
    pub slow: f64,
}

/// The statuses not-good answers are counted under, and the rest (the
/// engine's and the k6 scripts' alike).
pub const NOT_GOOD: [&str; 6] = ["0", "500", "502", "503", "504", "other"];

impl Summary {
    /// The summary with its good answers: as counted, under the counting
    /// rules; inferred for a summary from before them (a round recorded by
    /// an older lab), where every answer but the bad ones counted and the
    /// latencies were every answer's.
    pub fn counted(&self) -> Summary {
        if self.counting.is_some() {
            return self.clone();
        }
        let good = (self.requests - self.bad_answers).max(0.0);
        Summary {
            good,
            good_rate: if self.requests > 0.0 {
                self.request_rate * good / self.requests
            } else {
                0.0
            },
            good_ms: (self.requests > 0.0).then_some(self.duration_ms),
            good_sets: (self.iterations - self.bad_answers).max(0.0),
            good_set_ms: (self.iterations > 0.0).then_some(self.iteration_ms),
            ..self.clone()
        }
    }
}
