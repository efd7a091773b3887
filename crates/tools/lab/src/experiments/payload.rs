//! `payload`: every transport × orders per call (the Spring Boot post's
//! payload table, the Go post's very large data), closed loop at the shared
//! load.

use serde::{Deserialize, Serialize};

use crate::experiment::{Context, Experiment, Knobs};
use crate::experiments::tables::{
    baseline, capitalise, everything, latency_chart, method, rank_reading,
};
use crate::measure::cell::Cell;
use crate::measure::figures::Metric;
use crate::measure::schedule::Schedule;
use crate::report::format as f;
use crate::report::svg::{self, LineChart, Series};
use crate::report::value::Value;
use crate::report::{Chart, Section, Table};

pub struct Payload;

/// Which transports at which sizes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PayloadPlan {
    pub transports: Vec<String>,
    /// Orders per call.
    pub sizes: Vec<u32>,
}

/// The payload grid (also the factorial's, the floor's and the tls
/// experiment's cleartext cells): every transport at every size.
pub fn plan(knobs: &Knobs) -> PayloadPlan {
    PayloadPlan {
        transports: knobs.transports(),
        sizes: knobs.sizes(&[1, 1000], &[1, 10, 100, 1000, 10000]),
    }
}

impl PayloadPlan {
    pub fn cells(&self) -> Vec<Cell> {
        let mut v = Vec::new();
        for &orders in &self.sizes {
            for via in &self.transports {
                v.push(Knobs::closed(via, orders));
            }
        }
        v
    }
}

impl Experiment for Payload {
    type Plan = PayloadPlan;
    const NAME: &'static str = "payload";
    const ABOUT: &'static str =
        "Every transport × 1/10/100/1,000/10,000 orders per call (the Spring Boot and Go posts)";

    fn target() -> Result<(), &'static str> {
        Ok(())
    }

    fn plan(knobs: &Knobs) -> PayloadPlan {
        plan(knobs)
    }

    fn schedule(p: &PayloadPlan) -> Schedule {
        Schedule::Grid(p.cells())
    }

    fn describe(p: &PayloadPlan) -> String {
        format!("sizes {:?}", p.sizes)
    }

    fn section(p: &PayloadPlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

/// What QUIC costs in CPU per call on loopback: each HTTP/3 transport's
/// CPU per request (both services) against the same call over HTTP/2, at
/// every size, from the ratio and its rerun interval. `None` without such
/// a pair in the plan.
fn quic_cpu_reading(p: &PayloadPlan, cx: &Context) -> Option<String> {
    let pairs: Vec<(&str, &str)> = transports::QUIC_TWINS
        .into_iter()
        .filter(|(q, t)| p.transports.iter().any(|v| v == q) && p.transports.iter().any(|v| v == t))
        .collect();
    if pairs.is_empty() {
        return None;
    }
    let mut said = Vec::new();
    for (q, t) in pairs {
        let per_size: Vec<String> = p
            .sizes
            .iter()
            .map(|&o| {
                let r = cx.data.ratio(
                    &Knobs::closed(q, o),
                    &Knobs::closed(t, o),
                    Metric::CpuServices,
                );
                format!("{} at {}", f::ratio(r), f::orders(o))
            })
            .collect();
        said.push(format!("{q} {} {t}'s", per_size.join(", ")));
    }
    Some(format!(
        "On loopback, QUIC's CPU per call (user-space packets and TLS 1.3 on both ends) against \
         the same call over cleartext HTTP/2: {}.",
        said.join("; ")
    ))
}

/// The payload section: the method, one table per headline metric, the
/// full figures at every size, the latency spectra and charts at the
/// smallest and largest size, and throughput against payload.
fn section(p: &PayloadPlan, cx: &Context) -> Section {
    let mut s = Section::new(
        "payload",
        "Payload: every transport × orders per call (the Spring Boot post's payload table, the Go post's large data)",
    );
    let base = baseline(&p.transports);
    add_method(&mut s, p, cx, base);
    for (m, caption) in [
        (Metric::Rate, "Throughput, req/s (higher is better)"),
        (
            Metric::UpP95,
            "Upstream p95, µs: user-service's round trip to order-service",
        ),
        (
            Metric::E2eMax,
            "End-to-end max, ms (the Spring Boot post's tail)",
        ),
        (
            Metric::CpuServices,
            "CPU per request, µs: user-service + order-service",
        ),
    ] {
        s.table(metric_table(p, cx, base, m, caption));
    }
    for &o in &p.sizes {
        let cells = column(p, o);
        s.table(everything(
            cx,
            &format!(
                "Everything at {} (median ±half the min–max range)",
                f::orders(o)
            ),
            &cells,
        ));
    }
    add_spectra(&mut s, p, cx);
    // Throughput against payload.
    if p.sizes.len() > 1 {
        s.chart(throughput_chart(p, cx));
    }
    add_latency_charts(&mut s, p, cx);
    s
}

/// The section's opening paragraphs: how the cells were measured (load,
/// pool, store and the baseline every ratio is against), and the note on
/// QUIC when the plan has an HTTP/3 transport.
fn add_method(s: &mut Section, p: &PayloadPlan, cx: &Context, base: &str) {
    s.para(method(
        cx.timing,
        &format!(
            "Closed loop, {} VUs; user-service's pool is {} connections per transport, so no call \
             waits for a slot (the pool experiment studies the budget); store: {}. \
             Baseline: **{base}**{}",
            Knobs::VUS,
            Knobs::POOL,
            cx.store,
            if base == transports::H1_JSON {
                " (REST: HTTP/1.1 + JSON)"
            } else {
                ""
            }
        ),
    ));
    if let Some(note) = super::tables::quic_note(&p.transports) {
        s.para(note);
    }
}

/// Every transport's closed-loop cell at `o` orders per call, named by its
/// transport: one column of the grid, as the shared tables and charts take
/// it.
fn column(p: &PayloadPlan, o: u32) -> Vec<(String, Cell)> {
    p.transports
        .iter()
        .map(|v| (v.clone(), Knobs::closed(v, o)))
        .collect()
}

/// One metric's table: a row per transport, a column per size, each figure
/// against the baseline at the same size, with the reading below it.
fn metric_table(p: &PayloadPlan, cx: &Context, base: &str, m: Metric, caption: &str) -> Table {
    let cell = Knobs::closed;
    let mut headers = vec!["transport".to_owned()];
    headers.extend(p.sizes.iter().map(|&o| f::orders(o)));
    let rows = p
        .transports
        .iter()
        .map(|via| {
            let mut r = vec![Value::text(via.clone())];
            for &o in &p.sizes {
                r.push(cx.fig_vs(&cell(via, o), &cell(base, o), m));
            }
            r
        })
        .collect();
    Table {
        caption: caption.to_owned(),
        headers,
        rows,
        reading: metric_reading(p, cx, base, m),
    }
}

/// The reading under one metric's table: how the transports rank at the
/// smallest and the largest size (once when the plan has one size), and,
/// for CPU per request, what QUIC costs against HTTP/2.
fn metric_reading(p: &PayloadPlan, cx: &Context, base: &str, m: Metric) -> String {
    let mut reading = Vec::new();
    for &o in [p.sizes.first(), p.sizes.last()].into_iter().flatten() {
        let cells = column(p, o);
        reading.push(format!(
            "at {}: {}",
            f::orders(o),
            rank_reading(cx, &cells, m, &Knobs::closed(base, o))
        ));
        if p.sizes.len() == 1 {
            break;
        }
    }
    let mut reading = capitalise(&reading.join("; ")) + ".";
    if m == Metric::CpuServices
        && let Some(q) = quic_cpu_reading(p, cx)
    {
        reading.push(' ');
        reading.push_str(&q);
    }
    reading
}

/// The upstream and end-to-end percentile spectra at the smallest and the
/// largest size (once when the plan has one size).
fn add_spectra(s: &mut Section, p: &PayloadPlan, cx: &Context) {
    use crate::experiments::spectrum::{self, Latency};
    for &o in [p.sizes.first(), p.sizes.last()].into_iter().flatten() {
        spectrum::add(
            s,
            cx,
            Latency::Upstream,
            (
                &format!("payload-spectrum-{o}.svg"),
                &format!("Upstream percentile spectrum at {}", f::orders(o)),
            ),
            &column(p, o),
        );
        spectrum::add(
            s,
            cx,
            Latency::EndToEnd,
            (
                &format!("payload-e2e-spectrum-{o}.svg"),
                &format!("End-to-end percentile spectrum at {}", f::orders(o)),
            ),
            &column(p, o),
        );
        if p.sizes.len() == 1 {
            break;
        }
    }
}

/// Throughput against orders per call, a line per transport, both axes on
/// a log scale; a size with no median leaves its point out. Only worth
/// drawing with more than one size.
fn throughput_chart(p: &PayloadPlan, cx: &Context) -> Chart {
    let series = p
        .transports
        .iter()
        .map(|via| Series {
            name: via.clone(),
            points: p
                .sizes
                .iter()
                .filter_map(|&o| {
                    cx.data
                        .median(&Knobs::closed(via, o), Metric::Rate)
                        .map(|v| (f64::from(o), v))
                })
                .collect(),
        })
        .collect();
    Chart {
        file: "payload-throughput.svg".into(),
        title: "Throughput against payload (closed loop)".into(),
        svg: svg::line_chart(&LineChart {
            title: "Throughput against payload".into(),
            x_label: "orders per call (log)".into(),
            y_label: "req/s (log)".into(),
            x_log: true,
            y_log: true,
            series,
        }),
    }
}

/// The end-to-end latency percentiles per transport, charted at the
/// smallest and the largest size (once when the plan has one size).
fn add_latency_charts(s: &mut Section, p: &PayloadPlan, cx: &Context) {
    for &o in [p.sizes.first(), p.sizes.last()].into_iter().flatten() {
        let cells = column(p, o);
        s.chart(latency_chart(
            cx,
            &format!("payload-latency-{o}.svg"),
            &format!(
                "End-to-end latency percentiles per transport, {}",
                f::orders(o)
            ),
            &cells,
        ));
        if p.sizes.len() == 1 {
            break;
        }
    }
}
