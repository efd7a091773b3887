//! wrk, the `generator` experiment's yardstick: Debian's wrk 4, one thread,
//! keep-alive connections in a closed loop, and no Lua run per request, so
//! that it costs what a load generator can least cost. It checks statuses
//! only (its answers are not held to the lab's counting rules), so it is a
//! measure of cost, never of the services. A Lua `done` hook (run once, at
//! the end) prints its figures as one JSON line, which is read here.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde::Deserialize;

use crate::measure::load::{Percentiles, Summary};

/// The counting rules of a wrk summary: statuses only.
pub const COUNTING: &str = "statuses-only";

/// The marker of the line the `done` hook prints.
const MARK: &str = "LAB-WRK ";

/// The hook: wrk calls `done` once, after the run; no `request` or
/// `response` function is defined, so every request stays on wrk's C path.
pub const DONE_LUA: &str = r#"-- the lab's wrk hook: figures out as one JSON line, nothing per request
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'LAB-WRK {"requests":%d,"duration_us":%d,"status_errors":%d,"connect":%d,"read":%d,"write":%d,"timeout":%d,' ..
    '"mean_us":%.3f,"p50_us":%d,"p90_us":%d,"p95_us":%d,"p99_us":%d,"p999_us":%d,"max_us":%d}\n',
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
    latency.mean, latency:percentile(50), latency:percentile(90), latency:percentile(95),
    latency:percentile(99), latency:percentile(99.9), latency.max))
end
"#;

/// wrk on PATH (`$LAB_WRK` first).
pub fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LAB_WRK").map(PathBuf::from)
        && p.is_file()
    {
        return Some(p);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("wrk"))
        .find(|p| p.is_file())
}

/// Writes the hook where wrk can read it.
pub fn write_hook(dir: &Path) -> anyhow::Result<PathBuf> {
    let p = dir.join("lab-wrk-done.lua");
    std::fs::write(&p, DONE_LUA).with_context(|| format!("writing {}", p.display()))?;
    Ok(p)
}

#[derive(Debug, Deserialize)]
struct Done {
    requests: u64,
    duration_us: u64,
    status_errors: u64,
    connect: u64,
    read: u64,
    write: u64,
    timeout: u64,
    mean_us: f64,
    p50_us: u64,
    p90_us: u64,
    p95_us: u64,
    p99_us: u64,
    p999_us: u64,
    max_us: u64,
}

/// The lab's summary of a wrk run, from its output (the hook's line).
/// wrk's good answers are those of a 2xx or 3xx status: unchecked.
pub fn parse(output: &str) -> anyhow::Result<Summary> {
    let line = output
        .lines()
        .find_map(|l| l.strip_prefix(MARK))
        .context("wrk printed no LAB-WRK line (did it run its done hook?)")?;
    let d: Done = serde_json::from_str(line).context("wrk's LAB-WRK line")?;
    if d.duration_us == 0 {
        bail!("wrk reports a run of no time");
    }
    let secs = d.duration_us as f64 / 1e6;
    let requests = d.requests as f64;
    let failed = (d.connect + d.read + d.write + d.timeout) as f64;
    let good = (requests - d.status_errors as f64).max(0.0);
    let ms = |us: u64| us as f64 / 1000.0;
    let latency = Percentiles {
        count: requests,
        avg: d.mean_us / 1000.0,
        p50: ms(d.p50_us),
        p90: ms(d.p90_us),
        p95: ms(d.p95_us),
        p99: ms(d.p99_us),
        p999: Some(ms(d.p999_us)),
        max: ms(d.max_us),
    };
    Ok(Summary {
        run_seconds: secs,
        requests: requests + failed,
        request_rate: (requests + failed) / secs,
        iterations: requests + failed,
        iteration_rate: (requests + failed) / secs,
        bad_answers: d.status_errors as f64 + failed,
        duration_ms: latency,
        iteration_ms: latency,
        counting: Some(COUNTING.to_owned()),
        good,
        good_rate: good / secs,
        good_ms: (good > 0.0).then_some(latency),
        good_sets: good,
        good_set_ms: (good > 0.0).then_some(latency),
        ..Summary::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hooks_line_gives_counts_rates_and_latencies() {
        let out = "Running 2s test @ http://x\n  1 threads and 8 connections\nLAB-WRK {\"requests\":1000,\"duration_us\":2000000,\"status_errors\":10,\"connect\":0,\"read\":2,\"write\":0,\"timeout\":0,\"mean_us\":410.5,\"p50_us\":400,\"p90_us\":600,\"p95_us\":700,\"p99_us\":900,\"p999_us\":1500,\"max_us\":2000}\n";
        let s = parse(out).unwrap();
        assert_eq!((s.requests, s.good, s.bad_answers), (1002.0, 990.0, 12.0));
        assert_eq!(s.good_rate, 495.0);
        assert_eq!(s.counting.as_deref(), Some(COUNTING));
        let p = s.good_ms.unwrap();
        assert_eq!((p.p50, p.p99, p.max), (0.4, 0.9, 2.0));
        assert!(parse("no hook").is_err());
    }
}
