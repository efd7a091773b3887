//! The lab's own load engine (the `loadgen` crate's binary): its summary
//! turned into the lab's [`Summary`], its exact histogram of good answers,
//! and how its calls ended.

use hdrhistogram::Histogram;

use crate::measure::load::{Endings, NOT_GOOD, PartsSummary, Percentiles, Schedule, Summary};

/// The percentiles of `h`, its values divided by `per_unit` (1000 turns
/// µs into ms, or ns into µs); `None` when it is empty.
pub fn percentiles(h: &Histogram<u64>, per_unit: f64) -> Option<Percentiles> {
    if h.is_empty() {
        return None;
    }
    let at = |q: f64| h.value_at_quantile(q) as f64 / per_unit;
    Some(Percentiles {
        count: h.len() as f64,
        avg: h.mean() / per_unit,
        p50: at(0.5),
        p90: at(0.9),
        p95: at(0.95),
        p99: at(0.99),
        p999: Some(at(0.999)),
        max: h.max() as f64 / per_unit,
    })
}

fn decoded(text: Option<&str>) -> anyhow::Result<Option<Histogram<u64>>> {
    text.map(telemetry::hdr::decode).transpose()
}

/// The lab's summary of an engine run, and its good answers' histogram as
/// it came (µs, encoded), which the round keeps whole.
pub fn summary(s: &loadgen::tally::Summary) -> anyhow::Result<(Summary, Option<String>)> {
    let secs = s.run_seconds.max(1e-9);
    let good_ms = decoded(s.good_hdr.as_deref())?.and_then(|h| percentiles(&h, 1000.0));
    let all_ms = decoded(s.all_hdr.as_deref())?.and_then(|h| percentiles(&h, 1000.0));
    let upstream_us = decoded(s.upstream_hdr.as_deref())?.and_then(|h| percentiles(&h, 1.0));
    let parts = match &s.parts {
        None => None,
        Some(p) => {
            // Recorded in ns: µs with their fractions.
            let part = |t: &str| -> anyhow::Result<Percentiles> {
                Ok(percentiles(&telemetry::hdr::decode(t)?, 1000.0).unwrap_or_default())
            };
            Some(PartsSummary {
                store: part(&p.store)?,
                encode: part(&p.encode)?,
                total: part(&p.total)?,
                decode: part(&p.decode)?,
                wire: part(&p.wire)?,
                reported: p.reported as f64,
                server_ok: p.server_ok as f64,
                client_ok: p.client_ok as f64,
            })
        }
    };
    let schedule = match &s.schedule {
        None => None,
        Some(k) => Some(Schedule {
            due: k.due as f64,
            waited: k.waited as f64,
            lag_us: percentiles(&telemetry::hdr::decode(&k.lag_hdr)?, 1.0).unwrap_or_default(),
        }),
    };
    let requests = s.requests as f64;
    let out = Summary {
        run_seconds: s.run_seconds,
        requests,
        request_rate: requests / secs,
        iterations: requests,
        iteration_rate: requests / secs,
        dropped: s.schedule.as_ref().map_or(0.0, |k| k.unsent as f64),
        bad_answers: s.bad as f64,
        duration_ms: all_ms.unwrap_or_default(),
        iteration_ms: all_ms.unwrap_or_default(),
        upstream_us,
        vus_max: s.connections_most as f64,
        parts,
        counting: Some(s.counting.clone()),
        good: s.good as f64,
        good_rate: s.good as f64 / secs,
        shed: s.shed as f64,
        good_ms,
        good_sets: s.good as f64,
        good_set_ms: good_ms,
        parsed_bodies: 0.0,
        compressed: 0.0,
        unfinished: s.unfinished as f64,
        schedule,
    };
    Ok((out, s.good_hdr.clone()))
}

/// How an engine run's calls ended, by status, and how many were slower
/// than a second.
pub fn endings(s: &loadgen::tally::Summary) -> Endings {
    Endings {
        not_good: NOT_GOOD
            .iter()
            .filter_map(|k| {
                let n = *s.not_good.get(*k)?;
                (n > 0).then(|| ((*k).to_owned(), n as f64))
            })
            .collect(),
        slow: s.slow as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_whole_histogram_in_the_unit_asked() {
        let mut h = telemetry::hdr::empty();
        for us in 1..=1000 {
            h.record(us).unwrap();
        }
        let p = percentiles(&h, 1000.0).unwrap();
        assert_eq!(p.count, 1000.0);
        assert!((p.p50 - 0.5).abs() < 0.001, "{p:?}");
        assert!((p.p99 - 0.99).abs() < 0.001, "{p:?}");
        assert!((p.max - 1.0).abs() < 0.001, "{p:?}");
        assert!((p.avg - 0.5005).abs() < 0.001, "{p:?}");
        assert!(percentiles(&telemetry::hdr::empty(), 1.0).is_none());
    }
}
