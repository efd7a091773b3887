//! The percentile spectrum of some cells' latencies, from HDR histograms
//! merged over each cell's good rounds (user-service's of its upstream
//! calls, or the load generator's of its good answers end to end): a chart (latency against percentile, 0 to 99.99, on a log axis of
//! 1/(1 − percentile), one line per cell, as HdrHistogram's plotter and
//! wrk2 users draw it) and a table of its percentiles, with a reading
//! computed from them.

use hdrhistogram::Histogram;

use crate::experiment::Context;
use crate::measure::cell::Cell;
use crate::report::format as f;
use crate::report::svg::{self, LineChart, Series};
use crate::report::value::Value;
use crate::report::{Chart, Section, Table};

/// The percentiles the table shows, and the deepest the chart draws.
const SHOWN: [(f64, &str); 5] = [
    (0.5, "p50"),
    (0.9, "p90"),
    (0.99, "p99"),
    (0.999, "p99.9"),
    (0.9999, "p99.99"),
];

/// The deepest percentile worth a point: one the histogram holds at least
/// ten calls beyond (so p99.99 needs 100,000 calls).
fn deepest(h: &Histogram<u64>) -> f64 {
    let n = h.len() as f64;
    SHOWN
        .iter()
        .map(|&(q, _)| q)
        .filter(|q| n * (1.0 - q) >= 10.0 - 1e-6)
        .fold(0.5, f64::max)
}

/// The spectrum's points: (1/(1 − q), µs), from the median to
/// [`deepest`], 20 points a decade.
fn points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    let last = (1.0 / (1.0 - deepest(h))).log10();
    let steps = (last * 20.0).round() as u32;
    (0..=steps)
        .map(|i| {
            let x = 10f64.powf(f64::from(i) / 20.0).max(1.0);
            let q = 1.0 - 1.0 / x;
            (x, h.value_at_quantile(q) as f64)
        })
        .collect()
}

/// Which latency a spectrum draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Latency {
    /// user-service's round trips to order-service.
    Upstream,
    /// The load generator's good answers, end to end.
    EndToEnd,
}

impl Latency {
    fn of<'a>(self, cx: &'a Context, cell: &Cell) -> Option<&'a Histogram<u64>> {
        let map = match self {
            Latency::Upstream => &cx.data.hdr,
            Latency::EndToEnd => &cx.data.e2e_hdr,
        };
        map.get(cell).filter(|h| !h.is_empty())
    }

    fn axis(self) -> &'static str {
        match self {
            Latency::Upstream => "upstream round trip, µs (log)",
            Latency::EndToEnd => "end to end, µs (log)",
        }
    }

    fn source(self) -> &'static str {
        match self {
            Latency::Upstream => {
                "user-service's HDR histogram (k6 called order-service directly, or the run \
                 predates them)"
            }
            Latency::EndToEnd => {
                "the load generator's histogram of good answers (wrk and k6's gRPC client keep \
                 none, and runs before them have none)"
            }
        }
    }
}

/// Adds the spectrum of `cells` (named) to `s`: the chart in `file` and the
/// table, or a line saying why there is none.
pub fn add(
    s: &mut Section,
    cx: &Context,
    which: Latency,
    (file, title): (&str, &str),
    cells: &[(String, Cell)],
) {
    let have: Vec<(&String, &Histogram<u64>)> = cells
        .iter()
        .filter_map(|(n, c)| which.of(cx, c).map(|h| (n, h)))
        .collect();
    if have.is_empty() {
        s.para(format!("{title}: none, as no cell has {}.", which.source()));
        return;
    }
    s.chart(Chart {
        file: file.to_owned(),
        title: title.to_owned(),
        svg: svg::line_chart(&LineChart {
            title: title.to_owned(),
            x_label: "percentile: 1/(1 − p), log (10 = p90, 100 = p99, 1,000 = p99.9)".into(),
            y_label: which.axis().into(),
            x_log: true,
            y_log: true,
            series: have
                .iter()
                .map(|(n, h)| Series {
                    name: (*n).clone(),
                    points: points(h),
                })
                .collect(),
        }),
    });
    // The percentiles every line holds: a column is filled for every row.
    let common = have.iter().map(|(_, h)| deepest(h)).fold(1.0, f64::min);
    let shown: Vec<(f64, &str)> = SHOWN
        .iter()
        .copied()
        .filter(|(q, _)| *q <= common)
        .collect();
    let tail_label = shown.last().map_or("p50", |(_, l)| *l);
    let mut headers = vec!["transport".to_owned(), "calls".to_owned()];
    headers.extend(shown.iter().map(|(_, l)| format!("{l}, µs")));
    headers.push("max, µs".into());
    if common > 0.5 {
        headers.push(format!("{tail_label} / p50"));
    }
    let rows = have
        .iter()
        .map(|(n, h)| {
            let mut r = vec![
                Value::text((*n).clone()),
                Value::text(f::num(h.len() as f64)),
            ];
            r.extend(
                shown
                    .iter()
                    .map(|&(q, _)| Value::text(f::num(h.value_at_quantile(q) as f64))),
            );
            r.push(Value::text(f::num(h.max() as f64)));
            if common > 0.5 {
                r.push(Value::text(format!("{:.1}", tail(h, common))));
            }
            r
        })
        .collect();
    let absent: Vec<&str> = cells
        .iter()
        .filter(|(_, c)| which.of(cx, c).is_none())
        .map(|(n, _)| n.as_str())
        .collect();
    let mut text = reading(&have, common, tail_label);
    if !absent.is_empty() {
        text.push_str(&format!(
            " No histogram for {} (no good round, or none recorded).",
            absent.join(", ")
        ));
    }
    s.table(Table {
        caption: format!("{title}: percentiles of every good call over the good rounds"),
        headers,
        rows,
        reading: text,
    });
}

/// The value at percentile `q` over the median.
fn tail(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / h.value_at_quantile(0.5).max(1) as f64
}

/// Which line has the lowest and highest median, and the longest and
/// shortest tail relative to its median (at `q`, labelled `label`), from
/// the numbers.
fn reading(have: &[(&String, &Histogram<u64>)], q: f64, label: &str) -> String {
    let by = |key: &dyn Fn(&Histogram<u64>) -> f64| {
        let mut v: Vec<(&String, f64)> = have.iter().map(|(n, h)| (*n, key(h))).collect();
        v.sort_by(|a, b| a.1.total_cmp(&b.1));
        v
    };
    let medians = by(&|h| h.value_at_quantile(0.5) as f64);
    let mut out = match (medians.first(), medians.last()) {
        (Some(lo), Some(hi)) if medians.len() > 1 => format!(
            "Median from {} µs ({}) to {} µs ({}).",
            f::num(lo.1),
            lo.0,
            f::num(hi.1),
            hi.0
        ),
        (Some(only), _) => format!("Median {} µs ({}).", f::num(only.1), only.0),
        _ => String::new(),
    };
    if q <= 0.5 {
        out.push_str(" Too few calls for any percentile past the median.");
        return out;
    }
    let tails = by(&|h| tail(h, q));
    match (tails.first(), tails.last()) {
        (Some(lo), Some(hi)) if tails.len() > 1 => out.push_str(&format!(
            " The tail relative to the median ({label} / p50) is shortest over {} (×{:.1}) and \
             longest over {} (×{:.1}).",
            lo.0, lo.1, hi.0, hi.1
        )),
        (Some(only), _) => out.push_str(&format!(" {label} / p50 is ×{:.1}.", only.1)),
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values: impl Iterator<Item = u64>) -> Histogram<u64> {
        let mut h = telemetry::hdr::empty();
        for v in values {
            h.record(v).unwrap();
        }
        h
    }

    #[test]
    fn the_points_run_from_the_median_to_the_deepest_percentile_held() {
        // 100,000 calls: 1..=100,000 µs, so the value at q is about q × 1e5.
        let h = hist(1..=100_000);
        assert_eq!(deepest(&h), 0.9999);
        let pts = points(&h);
        assert_eq!(pts.first().unwrap().0, 1.0);
        assert!((pts.last().unwrap().0 - 10_000.0).abs() < 1e-6);
        let at_p99 = pts.iter().find(|p| (p.0 - 100.0).abs() < 1e-6).unwrap();
        assert!((at_p99.1 - 99_000.0).abs() < 100.0, "{at_p99:?}");
        // 1,000 calls hold p99 (10 beyond it), not p99.9.
        assert_eq!(deepest(&hist(1..=1_000)), 0.99);
    }

    #[test]
    fn the_reading_names_the_longest_and_shortest_tail_from_the_numbers() {
        let flat = hist(1..=10_000);
        let mut tailed = hist((1..=10_000).map(|v| v / 2 + 1));
        for _ in 0..50 {
            tailed.record(1_000_000).unwrap();
        }
        let (a, b) = ("flat".to_owned(), "tailed".to_owned());
        let r = reading(&[(&a, &flat), (&b, &tailed)], 0.999, "p99.9");
        assert!(r.contains("shortest over flat"), "{r}");
        assert!(r.contains("longest over tailed"), "{r}");
        assert!(r.starts_with("Median from"), "{r}");
    }
}
