//! What a run counted, as it goes ([`Tally`]) and as it is written out
//! ([`Summary`], the JSON the lab reads). Latencies go into HDR histograms
//! (1 µs to an hour, 3 significant digits), never into averages of
//! averages: every percentile of a run, and of several runs merged, is
//! there.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::check::Verdict;
use crate::http1::{Failure, Head};

/// The counting rules the engine follows, named as the k6 scripts name
/// theirs: only good answers count (see [`crate::check`]).
pub const COUNTING: &str = "good-answers-1";

/// The statuses not-good answers are counted under ("0": no answer at
/// all), as the k6 scripts count them; any other is "other".
pub const NOT_GOOD: [u16; 5] = [0, 500, 502, 503, 504];

/// What one request came to.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// A whole answer, judged.
    Answer(Head, Verdict),
    /// No whole answer.
    Failed(Failure),
}

/// The parts of an answer's round trip, as user-service reports them
/// (`x-upstream-parts`), each a histogram of nanoseconds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Parts {
    pub store: String,
    pub encode: String,
    pub total: String,
    pub decode: String,
    pub wire: String,
    /// Good answers that carried their parts.
    pub reported: u64,
    /// Of those, the ones whose store + encode fit in order-service's
    /// total, and whose total + decode fit in the round trip.
    pub server_ok: u64,
    pub client_ok: u64,
}

/// How the open loop kept its schedule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScheduleKept {
    /// Requests due before the end of the run.
    pub due: u64,
    /// Of those, sent (late or not).
    pub sent: u64,
    /// Due but never sent: still waiting for a free connection when the
    /// grace period after the run ended.
    pub unsent: u64,
    /// Sent later than due because every connection was busy with an
    /// earlier request (and the cap allowed no new one).
    pub waited: u64,
    /// How late each request was written, from its due time, µs (HDR):
    /// the timer's own lateness, the event loop's, and any wait for a
    /// connection.
    pub lag_hdr: String,
}

/// A whole run, as the engine writes it (`--summary`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// `loadgen` and its version.
    pub engine: String,
    /// [`COUNTING`].
    pub counting: String,
    /// `closed` or `open`.
    pub mode: String,
    /// Callers of the closed loop; most connections of the open one.
    pub connections: u32,
    /// The open loop's rate, requests per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// From the start to the last request's end, s.
    pub run_seconds: f64,
    /// Requests that ended, with an answer or without.
    pub requests: u64,
    pub good: u64,
    pub bad: u64,
    pub shed: u64,
    /// Requests still in flight when the grace period ran out: neither
    /// good nor bad, not counted in `requests`.
    pub unfinished: u64,
    /// Requests that got no whole answer, by why.
    pub failures: BTreeMap<String, u64>,
    /// Requests that were not good, by the status answered ("0": none;
    /// "other": a status not in [`NOT_GOOD`]).
    pub not_good: BTreeMap<String, u64>,
    /// Requests slower than `slow_ms`, good or not.
    pub slow: u64,
    pub slow_ms: u64,
    /// Good answers' latencies, µs (HDR, the encoding of
    /// `telemetry::hdr::encode`); `None` with no good answer.
    pub good_hdr: Option<String>,
    /// Every ended request's latency, µs.
    pub all_hdr: Option<String>,
    /// `x-upstream-micros` of the good answers that carried it, µs.
    pub upstream_hdr: Option<String>,
    /// The good answers' `x-upstream-parts`, when they carried them.
    pub parts: Option<Parts>,
    /// The open loop's schedule; `None` for a closed loop.
    pub schedule: Option<ScheduleKept>,
    /// Connections opened over the run, and the most open at once.
    pub connections_opened: u64,
    pub connections_most: u64,
}

fn histogram() -> Histogram<u64> {
    telemetry::hdr::empty()
}

fn ns_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds")
}

fn encoded(h: &Histogram<u64>) -> Option<String> {
    (!h.is_empty()).then(|| telemetry::hdr::encode(h))
}

/// The running count of a run.
#[derive(Debug)]
pub struct Tally {
    good: u64,
    bad: u64,
    shed: u64,
    failures: BTreeMap<&'static str, u64>,
    not_good: BTreeMap<String, u64>,
    slow: u64,
    slow_us: u64,
    good_us: Histogram<u64>,
    all_us: Histogram<u64>,
    upstream_us: Histogram<u64>,
    parts: [Histogram<u64>; 5],
    parts_reported: u64,
    parts_server_ok: u64,
    parts_client_ok: u64,
    lag_us: Histogram<u64>,
    pub due: u64,
    pub sent: u64,
    pub waited: u64,
    pub connections_opened: u64,
    pub connections_open: u64,
    pub connections_most: u64,
    /// When the last request ended, ns.
    pub last_end_ns: u64,
}

impl Tally {
    /// An empty tally; answers slower than `slow_ms` are counted slow.
    pub fn new(slow_ms: u64) -> Tally {
        Tally {
            good: 0,
            bad: 0,
            shed: 0,
            failures: BTreeMap::new(),
            not_good: BTreeMap::new(),
            slow: 0,
            slow_us: slow_ms * 1000,
            good_us: histogram(),
            all_us: histogram(),
            upstream_us: histogram(),
            parts: std::array::from_fn(|_| ns_histogram()),
            parts_reported: 0,
            parts_server_ok: 0,
            parts_client_ok: 0,
            lag_us: histogram(),
            due: 0,
            sent: 0,
            waited: 0,
            connections_opened: 0,
            connections_open: 0,
            connections_most: 0,
            last_end_ns: 0,
        }
    }

    /// Requests that ended so far.
    pub fn requests(&self) -> u64 {
        self.good + self.bad + self.shed
    }

    /// A connection opened (`true`) or closed.
    pub fn connection(&mut self, opened: bool) {
        if opened {
            self.connections_opened += 1;
            self.connections_open += 1;
            self.connections_most = self.connections_most.max(self.connections_open);
        } else {
            self.connections_open = self.connections_open.saturating_sub(1);
        }
    }

    /// An open-loop request written `lag_ns` after it was due.
    pub fn sent_late(&mut self, lag_ns: u64) {
        self.sent += 1;
        self.lag_us.saturating_record((lag_ns / 1000).max(1));
    }

    /// One request that ended at `end_ns`, `latency_ns` after it started
    /// (closed loop) or was due (open loop).
    pub fn record(&mut self, outcome: &Outcome, latency_ns: u64, end_ns: u64) {
        let us = (latency_ns / 1000).max(1);
        self.last_end_ns = self.last_end_ns.max(end_ns);
        self.all_us.saturating_record(us);
        if us > self.slow_us {
            self.slow += 1;
        }
        let status = match outcome {
            Outcome::Failed(f) => {
                *self.failures.entry(f.name()).or_default() += 1;
                self.bad += 1;
                0
            }
            Outcome::Answer(head, verdict) => match verdict {
                Verdict::Good => {
                    self.good += 1;
                    self.good_us.saturating_record(us);
                    if let Some(up) = head.upstream_micros {
                        self.upstream_us.saturating_record(up.max(1));
                    }
                    if let Some(p) = &head.upstream_parts {
                        self.parts(p);
                    }
                    return;
                }
                Verdict::Shed => {
                    self.shed += 1;
                    head.status
                }
                Verdict::Bad => {
                    self.bad += 1;
                    head.status
                }
            },
        };
        let key = if NOT_GOOD.contains(&status) {
            status.to_string()
        } else {
            "other".to_owned()
        };
        *self.not_good.entry(key).or_default() += 1;
    }

    /// One answer's `x-upstream-parts` (`store=…,encode=…,total=…,
    /// decode=…,upstream=…`, µs with fractions): a malformed value counts
    /// as reported and fails both checks, as in the k6 scripts.
    fn parts(&mut self, value: &str) {
        self.parts_reported += 1;
        let mut got: BTreeMap<&str, f64> = BTreeMap::new();
        for kv in value.split(',') {
            if let Some((k, v)) = kv.split_once('=') {
                got.insert(k.trim(), v.trim().parse().unwrap_or(f64::NAN));
            }
        }
        let part = |k: &str| got.get(k).copied().filter(|x| x.is_finite() && *x >= 0.0);
        let (Some(store), Some(encode), Some(total), Some(decode), Some(upstream)) = (
            part("store"),
            part("encode"),
            part("total"),
            part("decode"),
            part("upstream"),
        ) else {
            return;
        };
        // Each part is rounded to the nanosecond on its own.
        if store + encode <= total + 0.002 {
            self.parts_server_ok += 1;
        }
        if total + decode <= upstream + 0.001 {
            self.parts_client_ok += 1;
        }
        let wire = (upstream - total - decode).max(0.0);
        for (h, us) in self
            .parts
            .iter_mut()
            .zip([store, encode, total, decode, wire])
        {
            h.saturating_record((us * 1000.0).round() as u64);
        }
    }

    /// The run's summary.
    pub fn summary(
        &self,
        run: RunShape,
        run_seconds: f64,
        unfinished: u64,
        unsent: u64,
    ) -> Summary {
        let parts = (self.parts_reported > 0).then(|| Parts {
            store: telemetry::hdr::encode(&self.parts[0]),
            encode: telemetry::hdr::encode(&self.parts[1]),
            total: telemetry::hdr::encode(&self.parts[2]),
            decode: telemetry::hdr::encode(&self.parts[3]),
            wire: telemetry::hdr::encode(&self.parts[4]),
            reported: self.parts_reported,
            server_ok: self.parts_server_ok,
            client_ok: self.parts_client_ok,
        });
        Summary {
            engine: format!("loadgen {}", env!("CARGO_PKG_VERSION")),
            counting: COUNTING.to_owned(),
            mode: if run.rate.is_some() { "open" } else { "closed" }.to_owned(),
            connections: run.connections,
            rate: run.rate,
            run_seconds,
            requests: self.requests(),
            good: self.good,
            bad: self.bad,
            shed: self.shed,
            unfinished,
            failures: self
                .failures
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect(),
            not_good: self.not_good.clone(),
            slow: self.slow,
            slow_ms: self.slow_us / 1000,
            good_hdr: encoded(&self.good_us),
            all_hdr: encoded(&self.all_us),
            upstream_hdr: encoded(&self.upstream_us),
            parts,
            schedule: run.rate.map(|_| ScheduleKept {
                due: self.due,
                sent: self.sent,
                unsent,
                waited: self.waited,
                lag_hdr: telemetry::hdr::encode(&self.lag_us),
            }),
            connections_opened: self.connections_opened,
            connections_most: self.connections_most,
        }
    }
}

/// The shape of a run, for its summary.
#[derive(Debug, Clone, Copy)]
pub struct RunShape {
    pub connections: u32,
    pub rate: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, verdict: Verdict) -> Outcome {
        Outcome::Answer(
            Head {
                status,
                upstream_micros: Some(300),
                upstream_parts: Some(
                    "store=10.5,encode=20,total=40,decode=5.25,upstream=100".into(),
                ),
                ..Head::default()
            },
            verdict,
        )
    }

    #[test]
    fn only_good_answers_make_the_good_histograms() {
        let mut t = Tally::new(1000);
        t.record(&answer(200, Verdict::Good), 2_000_000, 10);
        t.record(&answer(500, Verdict::Bad), 1_500_000_000, 20);
        t.record(&answer(503, Verdict::Shed), 1_000, 30);
        t.record(&Outcome::Failed(Failure::Timeout), 60_000_000_000, 40);
        let s = t.summary(
            RunShape {
                connections: 1,
                rate: None,
            },
            1.0,
            0,
            0,
        );
        assert_eq!((s.requests, s.good, s.bad, s.shed), (4, 1, 2, 1));
        assert_eq!(s.slow, 2, "the 1.5 s answer and the timeout");
        assert_eq!(s.not_good.get("0"), Some(&1));
        assert_eq!(s.not_good.get("500"), Some(&1));
        assert_eq!(s.not_good.get("503"), Some(&1));
        assert_eq!(s.failures.get("timeout"), Some(&1));
        let good = telemetry::hdr::decode(s.good_hdr.as_deref().unwrap()).unwrap();
        assert_eq!(good.len(), 1);
        assert!((1998..=2002).contains(&good.value_at_quantile(0.5)));
        let all = telemetry::hdr::decode(s.all_hdr.as_deref().unwrap()).unwrap();
        assert_eq!(all.len(), 4);
        let up = telemetry::hdr::decode(s.upstream_hdr.as_deref().unwrap()).unwrap();
        assert_eq!((up.len(), up.max()), (1, 300));
        let parts = s.parts.expect("parts");
        assert_eq!(
            (parts.reported, parts.server_ok, parts.client_ok),
            (1, 1, 1)
        );
        let wire = telemetry::hdr::decode(&parts.wire).unwrap();
        // 100 − 40 − 5.25 µs, in ns.
        assert!((54_700..=54_800).contains(&wire.max()), "{}", wire.max());
        assert!(s.schedule.is_none(), "a closed loop has no schedule");
    }

    #[test]
    fn malformed_parts_count_as_reported_and_fail_both_checks() {
        let mut t = Tally::new(1000);
        let bad = Outcome::Answer(
            Head {
                status: 200,
                upstream_parts: Some("store=x,total=1".into()),
                ..Head::default()
            },
            Verdict::Good,
        );
        t.record(&bad, 1_000, 1);
        let p = t
            .summary(
                RunShape {
                    connections: 1,
                    rate: None,
                },
                1.0,
                0,
                0,
            )
            .parts
            .expect("reported");
        assert_eq!((p.reported, p.server_ok, p.client_ok), (1, 0, 0));
    }
}
