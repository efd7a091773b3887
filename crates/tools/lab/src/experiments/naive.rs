//! `naive`: a new connection per call against pooled keep-alive under
//! concurrency: connections opened and sockets left in TIME_WAIT (the Go post).

use serde::{Deserialize, Serialize};

use crate::experiment::{Context, Experiment, Knobs};
use crate::experiments::tables::method;
use crate::measure::cell::Cell;
use crate::measure::figures::Metric;
use crate::measure::schedule::Schedule;
use crate::report::format::{self as f, MISSING};
use crate::report::value::{NO_ROUND, Value};
use crate::report::{Section, Table};
use crate::stats::Spread;

pub struct Naive;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NaivePlan {
    /// Concurrency, and the pool that goes with it.
    pub vus: u32,
    pub orders: u32,
}

impl NaivePlan {
    fn cell(&self, via: &str) -> Cell {
        Cell::closed(via, self.orders, self.vus, self.vus as u16)
    }
}

impl Experiment for Naive {
    type Plan = NaivePlan;
    const NAME: &'static str = "naive";
    const ABOUT: &'static str =
        "New connection per call vs pooled keep-alive: churn and TIME_WAIT (the Go post)";

    fn target() -> Result<(), &'static str> {
        Err("it counts sockets left in TIME_WAIT on order-service's port from this machine's /proc")
    }

    fn plan(knobs: &Knobs) -> NaivePlan {
        NaivePlan {
            vus: if knobs.quick { 32 } else { 64 },
            orders: 1,
        }
    }

    fn schedule(p: &NaivePlan) -> Schedule {
        Schedule::Grid(vec![
            p.cell(transports::H1_JSON_CLOSE),
            p.cell(transports::H1_JSON),
        ])
    }

    fn describe(p: &NaivePlan) -> String {
        format!("{} VUs", p.vus)
    }

    fn section(p: &NaivePlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

fn section(p: &NaivePlan, cx: &Context) -> Section {
    let mut s = Section::new(
        "naive",
        "Naive: a new connection per call vs pooled keep-alive (the Go post)",
    );
    let ports = crate::measure::procfs::ephemeral_ports();
    s.para(method(
        cx.timing,
        &format!(
            "Closed loop, {} VUs, {} order per call, pool {} (h1-json may hold that many \
             keep-alive connections; h1-json-close opens one per call, as Go's default \
             `http.Post` did in the Go post). TIME_WAIT sockets are counted from /proc/net/tcp on \
             order-service's REST port (either end), new during the measured run; Linux keeps \
             each for 60 s. Ephemeral ports on this machine: {}",
            p.vus,
            p.orders,
            p.vus,
            ports.map_or("unknown".to_owned(), |n| f::num(f64::from(n)))
        ),
    ));
    let (close, pooled) = (
        p.cell(transports::H1_JSON_CLOSE),
        p.cell(transports::H1_JSON),
    );
    let secs = cx.timing.duration_s;
    let rows = [("h1-json-close", &close), ("h1-json", &pooled)]
        .iter()
        .map(|(n, c)| {
            let opened_per_s = cx
                .data
                .spread(c, Metric::ConnectionsOpened)
                .map(|s| Spread {
                    median: s.median / secs,
                    min: s.min / secs,
                    max: s.max / secs,
                    q1: s.q1 / secs,
                    q3: s.q3 / secs,
                    n: s.n,
                });
            let steady = opened_per_s.map(|s| s.median * 60.0);
            vec![
                (*n).into(),
                cx.fig(c, Metric::Rate),
                cx.fig(c, Metric::E2eP50),
                cx.fig(c, Metric::E2eP99),
                cx.fig(c, Metric::UpP50),
                cx.fig(c, Metric::UpP95),
                cx.fig(c, Metric::ConnectionsOpened),
                Value::range(opened_per_s, "connections/s"),
                cx.fig(c, Metric::ConnectionsHeld),
                cx.fig(c, Metric::TimeWait),
                steady.map_or(Value::missing(NO_ROUND), |v| {
                    let mut parts = vec![Value::single(v, "sockets")];
                    if let Some(p) = ports {
                        parts.push(Value::text(format!(
                            "{:.0}% of the ports",
                            100.0 * v / f64::from(p)
                        )));
                    }
                    Value::parts(parts)
                }),
            ]
        })
        .collect();
    let opened = cx.data.median(&close, Metric::ConnectionsOpened);
    let tw = cx.data.median(&close, Metric::TimeWait);
    let pooled_opened = cx.data.median(&pooled, Metric::ConnectionsOpened);
    s.table(Table {
        caption: "Connection churn".into(),
        headers: vec![
            "transport".into(),
            "req/s".into(),
            "p50 ms".into(),
            "p99 ms".into(),
            "upstream p50 µs".into(),
            "upstream p95 µs".into(),
            "connections opened".into(),
            "opened per second".into(),
            "held at the end".into(),
            "new TIME_WAIT sockets".into(),
            "TIME_WAIT at steady state (60 s × opened/s)".into(),
        ],
        rows,
        reading: format!(
            "In {} s h1-json-close opened {} connections and left {} sockets in TIME_WAIT; pooled h1-json opened {} and served {} of its rate ({} its upstream p50).",
            f::num(secs),
            opened.map_or(MISSING.to_owned(), f::num),
            tw.map_or(MISSING.to_owned(), f::num),
            pooled_opened.map_or(MISSING.to_owned(), f::num),
            f::ratio(cx.data.ratio(&pooled, &close, Metric::Rate)),
            f::ratio(cx.data.ratio(&pooled, &close, Metric::UpP50)),
        ),
    });
    s
}
