//! `lab merge`: the k6 summaries of several runners of one distributed test
//! (a k6-operator TestRun with `parallelism`, whose runners each print
//! their JSON summary at the end of their log) combined into one.
//!
//! k6-operator does not aggregate end-of-test summaries. Counts add up:
//! requests, good, bad and shed answers, iterations and dropped ones; rates
//! add up too, since the runners ran at the same time. Percentiles do not:
//! a summary holds no histogram. For a mixture of the runners' latencies,
//! each quantile lies between the lowest and the highest of the runners'
//! own, so that range is what is given, never a made-up merged value.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::measure::k6::parse_summary;
use crate::measure::load::{Percentiles, Summary};

/// The summary in a runner's log (or a summary file): the JSON object that
/// starts at the last line holding only `{`.
pub fn summary_in(text: &str) -> anyhow::Result<Summary> {
    if let Ok(s) = parse_summary(text) {
        return Ok(s);
    }
    let start = text
        .rmatch_indices("\n{\n")
        .next()
        .map(|(i, _)| i + 1)
        .or_else(|| text.starts_with("{\n").then_some(0))
        .context("no JSON summary in it (did the runner set SUMMARY_JSON=stdout?)")?;
    parse_summary(&text[start..])
}

/// Which figure of a runner's percentiles.
type Pick = fn(&Percentiles) -> f64;

/// The range of one percentile over the runners.
fn range(ps: &[Option<Percentiles>], pick: Pick) -> Option<(f64, f64)> {
    let v: Vec<f64> = ps.iter().flatten().map(pick).collect();
    if v.is_empty() {
        return None;
    }
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((lo, hi))
}

/// The merged report of the summaries in `files`, as text.
pub fn run(files: &[PathBuf]) -> anyhow::Result<String> {
    anyhow::ensure!(!files.is_empty(), "give the runners' logs or summary files");
    let mut runners = Vec::new();
    for f in files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let s = summary_in(&text).with_context(|| format!("reading {}", f.display()))?;
        runners.push((f.clone(), s));
    }
    Ok(render(&runners))
}

fn name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

fn render(runners: &[(PathBuf, Summary)]) -> String {
    let sum = |f: fn(&Summary) -> f64| runners.iter().map(|(_, s)| f(s)).sum::<f64>();
    let mut out = String::new();
    let _ = writeln!(out, "{} runners merged", runners.len());
    let _ = writeln!(out, "  requests        {:.0}", sum(|s| s.requests));
    let _ = writeln!(
        out,
        "  good answers    {:.0} ({:.1}/s together)",
        sum(|s| s.good),
        sum(|s| s.good_rate)
    );
    let _ = writeln!(
        out,
        "  bad · shed      {:.0} · {:.0}",
        sum(|s| s.bad_answers),
        sum(|s| s.shed)
    );
    let _ = writeln!(
        out,
        "  iterations      {:.0} (dropped {:.0})",
        sum(|s| s.iterations),
        sum(|s| s.dropped)
    );
    let good: Vec<Option<Percentiles>> = runners.iter().map(|(_, s)| s.good_ms).collect();
    let up: Vec<Option<Percentiles>> = runners.iter().map(|(_, s)| s.upstream_us).collect();
    let line = |out: &mut String, what: &str, ps: &[Option<Percentiles>], unit: &str| {
        let picks: [(&str, Pick); 3] = [("p50", |p| p.p50), ("p95", |p| p.p95), ("p99", |p| p.p99)];
        let parts: Vec<String> = picks
            .iter()
            .map(|(n, f)| match range(ps, *f) {
                Some((lo, hi)) => format!("{n} {lo:.2}–{hi:.2}"),
                None => format!("{n} n/a (no runner recorded it)"),
            })
            .collect();
        let _ = writeln!(out, "  {what} {unit}  {}", parts.join("  "));
    };
    line(&mut out, "end-to-end", &good, "ms");
    line(&mut out, "upstream", &up, "µs");
    let _ = writeln!(
        out,
        "  (percentiles: the range of the runners' own; each merged percentile lies in it, \
         but a summary holds no histogram to compute it)"
    );
    for (f, s) in runners {
        let _ = writeln!(
            out,
            "  {}: {:.0} good ({:.1}/s), {:.0} bad, good p99 {}",
            name(f),
            s.good,
            s.good_rate,
            s.bad_answers,
            s.good_ms
                .map_or_else(|| "n/a".to_owned(), |p| format!("{:.2} ms", p.p99))
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(good: f64, p99: f64) -> String {
        format!(
            r#"{{"lab_counting":"good-answers-1","state":{{"testRunDurationMs":60000}},"metrics":{{
"http_reqs":{{"values":{{"count":{good},"rate":{rate}}}}},
"iterations":{{"values":{{"count":{good},"rate":{rate}}}}},
"good_answers":{{"values":{{"count":{good},"rate":{rate}}}}},
"http_req_duration":{{"values":{{"count":{good},"avg":1,"med":1,"p(90)":2,"p(95)":2,"p(99)":{p99},"max":9}}}},
"good_duration":{{"values":{{"count":{good},"avg":1,"med":1,"p(90)":2,"p(95)":2,"p(99)":{p99},"max":9}}}},
"iteration_duration":{{"values":{{"count":{good},"avg":1,"med":1,"p(90)":2,"p(95)":2,"p(99)":{p99},"max":9}}}},
"vus_max":{{"values":{{"value":8}}}}}}}}"#,
            rate = good / 60.0
        )
    }

    #[test]
    fn counts_add_up_and_percentiles_are_given_as_the_runners_range() {
        let dir = std::env::temp_dir().join(format!("lab-merge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = dir.join("runner-1.log");
        let b = dir.join("runner-2.log");
        // A runner's log: k6's lines, then the JSON summary.
        std::fs::write(
            &a,
            format!(
                "time=... level=info msg=starting\n{}\n",
                summary(600.0, 3.0).replacen('{', "{\n", 1)
            ),
        )
        .unwrap();
        std::fs::write(&b, summary(300.0, 5.0)).unwrap();
        let out = run(&[a, b]).unwrap();
        assert!(out.contains("2 runners merged"), "{out}");
        assert!(out.contains("requests        900"), "{out}");
        assert!(
            out.contains("good answers    900 (15.0/s together)"),
            "{out}"
        );
        assert!(out.contains("p99 3.00–5.00"), "{out}");
        let e = run(&[dir.join("missing.log")]).unwrap_err();
        assert!(format!("{e:#}").contains("missing.log"), "{e:#}");
        std::fs::write(dir.join("empty.log"), "no summary here\n").unwrap();
        let e = run(&[dir.join("empty.log")]).unwrap_err();
        assert!(format!("{e:#}").contains("SUMMARY_JSON=stdout"), "{e:#}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
