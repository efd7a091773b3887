//! What several sections build their tables with: the method line, the
//! baseline, a one-line ranking, latency bars and the everything-table.

use crate::experiment::Context;
use crate::measure::Timing;
use crate::measure::cell::{Cell, Store};
use crate::measure::figures::Metric;
use crate::measure::judge::LOAD_SATURATED_CORES;
use crate::report::format::{self as f, MISSING};
use crate::report::svg::{self, BarChart};
use crate::report::value::Value;
use crate::report::{Chart, Table};
use crate::stats::Spread;

/// The REST baseline every "×" of the payload tables is relative to.
pub const BASELINE: &str = transports::H1_JSON;

/// A section's method line: its load, then the rounds and what a cell and
/// a ratio mean.
pub fn method(timing: &Timing, load: &str) -> String {
    format!(
        "{load}; {} rounds of {} s after a {} s warm-up, {}. \
         Cells: median (min–max) over the rounds; `×` is a ratio computed round by round, with \
         its 95% rerun interval.",
        timing.rounds,
        f::num(timing.duration_s),
        f::num(timing.warmup_s),
        if timing.restarted {
            "both services restarted every round"
        } else {
            "on a running stack the lab did not start, never restarted between rounds"
        }
    )
}

/// [`BASELINE`] when it was measured, else the first transport.
pub fn baseline(transports: &[String]) -> &str {
    if transports.iter().any(|t| t == BASELINE) {
        BASELINE
    } else {
        transports.first().map_or(BASELINE, String::as_str)
    }
}

/// The stack under the HTTP/3 transports (the versions in Cargo.lock).
pub const QUIC_STACK: &str = "quinn 0.11 (rustls, ring), h3 0.0.8 with h3-quinn 0.0.10, and h3-util 0.0.6 (tonic-h3's channel) for gRPC";

/// What a section with QUIC transports among `vias` must say of them: the
/// stack, and the variables they do not share with the other rows
/// (encryption, what their byte counts hold, the address validation that
/// costs a new client's first connection a round trip). `None` without
/// them.
pub fn quic_note<S: AsRef<str>>(vias: &[S]) -> Option<String> {
    let quic: Vec<&str> = vias
        .iter()
        .map(AsRef::as_ref)
        .filter(|v| transports::is_quic(v))
        .collect();
    (!quic.is_empty()).then(|| {
        format!(
            "{} run over QUIC ({QUIC_STACK}: young crates, 0.0.x), which always encrypts (TLS \
             1.3): their rows pay for encryption that the cleartext rows do not. Their bytes are \
             UDP payload, QUIC's headers, encryption and acknowledgements included, where a TCP \
             transport's count leaves TCP's headers and acknowledgements to the kernel. \
             order-service answers a new client's first connection with a Retry (address \
             validation) before its handshake: one round trip more on the connections \
             user-service opens before it holds a token (at its start, and after an \
             order-service restart); pooled calls do not see it.",
            quic.join(", ")
        )
    })
}

/// A ratio's side of 1, from its rerun interval: "lower", "higher" or
/// "indistinguishable"; no verdict from a single round, which has no
/// interval.
pub fn verdict(r: &Spread) -> &'static str {
    if r.n < 2 {
        "one round: no verdict"
    } else if r.max < 1.0 {
        "lower"
    } else if r.min > 1.0 {
        "higher"
    } else {
        "indistinguishable"
    }
}

/// A spread multiplied by `k` (a unit change).
pub fn scaled(s: Option<Spread>, k: f64) -> Option<Spread> {
    s.map(|s| Spread {
        median: s.median * k,
        min: s.min * k,
        max: s.max * k,
        q1: s.q1 * k,
        q3: s.q3 * k,
        n: s.n,
    })
}

pub fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

/// "best X (×r vs base), worst Y" for one column of cells.
pub fn rank_reading(cx: &Context, cells: &[(String, Cell)], m: Metric, base: &Cell) -> String {
    let mut vals: Vec<(&str, &Cell, f64)> = cells
        .iter()
        .filter_map(|(n, c)| cx.data.median(c, m).map(|v| (n.as_str(), c, v)))
        .collect();
    if vals.len() < 2 {
        return "too few cells measured to compare".to_owned();
    }
    vals.sort_by(|a, b| a.2.total_cmp(&b.2));
    if m.higher_is_better() {
        vals.reverse();
    }
    let (best, bc, bv) = vals[0];
    let (worst, wc, wv) = vals[vals.len() - 1];
    // The base as the table names it (two rows may share a transport).
    let base_name = cells
        .iter()
        .find(|(_, c)| c == base)
        .map_or(base.via.as_str(), |(n, _)| n.as_str());
    let vs = |c: &Cell| {
        cx.data
            .ratio(c, base, m)
            .map(|r| format!(" (×{:.2} {base_name})", r.median))
            .unwrap_or_default()
    };
    format!(
        "best **{best}** {} {}{}, worst **{worst}** {} {}{}",
        f::num(bv),
        m.unit(),
        if bc == base { String::new() } else { vs(bc) },
        f::num(wv),
        m.unit(),
        if wc == base { String::new() } else { vs(wc) },
    )
}

/// Grouped bars of p50/p90/p95/p99 per cell.
pub fn latency_chart(cx: &Context, file: &str, title: &str, cells: &[(String, Cell)]) -> Chart {
    let ms = [
        Metric::E2eP50,
        Metric::E2eP90,
        Metric::E2eP95,
        Metric::E2eP99,
    ];
    Chart {
        file: file.to_owned(),
        title: title.to_owned(),
        svg: svg::bar_chart(&BarChart {
            title: title.to_owned(),
            y_label: "ms".into(),
            y_log: false,
            groups: cells.iter().map(|(n, _)| n.clone()).collect(),
            series: vec!["p50".into(), "p90".into(), "p95".into(), "p99".into()],
            values: cells
                .iter()
                .map(|(_, c)| ms.iter().map(|m| cx.data.median(c, *m)).collect())
                .collect(),
            stacked: false,
        }),
    }
}

/// Every measured figure of some cells, compactly.
pub fn everything(cx: &Context, caption: &str, cells: &[(String, Cell)]) -> Table {
    use Metric::*;
    let cols: [(Metric, &str); 23] = [
        (Rate, "req/s"),
        (Dropped, "dropped"),
        (E2eP50, "p50 ms"),
        (E2eP90, "p90 ms"),
        (E2eP95, "p95 ms"),
        (E2eP99, "p99 ms"),
        (E2eMax, "max ms"),
        (UpP50, "up p50 µs"),
        (UpP95, "up p95 µs"),
        (UpP99, "up p99 µs"),
        (UpMax, "up max µs"),
        (ConnectionsOpened, "conns opened"),
        (ConnectionsHeld, "conns held"),
        (BytesOut, "B out/call"),
        (BytesIn, "B in/call"),
        (CpuUser, "CPU user µs/req"),
        (CpuOrder, "CPU order µs/req"),
        (CpuLoad, "CPU generator µs/req"),
        (RssUser, "RSS user MiB"),
        (RssOrder, "RSS order MiB"),
        (RssLoad, "RSS generator MiB"),
        (LoadCores, "generator cores"),
        (OtherCores, "others' cores"),
    ];
    let mut cols = cols.to_vec();
    // On a local Postgres its CPU is a column of its own (absent in memory).
    if cells
        .iter()
        .any(|(_, c)| cx.data.median(c, CpuPostgres).is_some())
    {
        cols.insert(17, (CpuPostgres, "CPU Postgres µs/req"));
    }
    let mut headers = vec!["cell".to_owned()];
    headers.extend(cols.iter().map(|(_, h)| (*h).to_owned()));
    headers.push("bad · shed answers, all rounds".to_owned());
    headers.push("failed rounds".to_owned());
    let rows = cells
        .iter()
        .map(|(n, c)| {
            let mut r = vec![Value::text(n.clone())];
            r.extend(cols.iter().map(|(m, _)| {
                // A cell in memory has no database whose CPU to count.
                let in_memory = match c.env.store {
                    Some(Store::Memory) => true,
                    Some(Store::Postgres | Store::OwnPostgres) => false,
                    None => cx.store.starts_with("in memory"),
                };
                if *m == CpuPostgres && in_memory {
                    Value::text("none: in memory")
                } else {
                    cx.pm(c, *m)
                }
            }));
            r.push(match cx.data.answers.get(c) {
                Some(a) => Value::parts(vec![
                    Value::single(a.bad, "answers"),
                    Value::single(a.shed, "answers"),
                ]),
                None => Value::missing("no round of this cell"),
            });
            let failed = cx.data.failed.get(c).map_or(0, Vec::len);
            r.push(Value::single(failed as f64, "rounds"));
            r
        })
        .collect();
    let load_max = cells
        .iter()
        .filter_map(|(_, c)| cx.data.spread(c, LoadCores).map(|s| s.max))
        .fold(0.0, f64::max);
    let rss = cells
        .iter()
        .filter_map(|(n, c)| cx.data.median(c, RssOrder).map(|v| (n, v)))
        .fold(None, |acc: Option<(&String, f64)>, x| match acc {
            Some(a) if a.1 >= x.1 => Some(a),
            _ => Some(x),
        });
    Table {
        caption: caption.to_owned(),
        headers,
        rows,
        reading: format!(
            "The load generator used at most {:.2} cores in any round{}; order-service's peak RSS was largest under {} ({} MiB{}).",
            load_max,
            if load_max >= LOAD_SATURATED_CORES {
                " — flagged rounds measure the load generator as much as the services"
            } else {
                ", so the load generator was not the bottleneck"
            },
            rss.map_or(MISSING.to_owned(), |r| r.0.clone()),
            rss.map_or(MISSING.to_owned(), |r| f::num(r.1)),
            if cx.store.starts_with("in memory") {
                ", the in-memory data set included"
            } else {
                ""
            },
        ),
    }
}

/// What the kernels on both sides of a packet path reported in the rounds
/// of `experiment` (read back from a socket across the path, and from the
/// namespace's settings, when each round started): whether each side's
/// congestion control was the one its cell asked for, slow start after
/// idle, and the initial window. Computed from the round records.
pub fn path_facts(cx: &crate::experiment::Context, experiment: &str) -> String {
    use std::collections::BTreeSet;
    let mut rounds = 0;
    let mut matched = 0;
    let mut ssai = BTreeSet::new();
    let mut initcwnd = BTreeSet::new();
    let mut seen_cc = BTreeSet::new();
    for r in cx
        .results
        .records
        .iter()
        .filter(|r| r.experiment == experiment)
    {
        let Some(path) = r.cell.env.path else {
            continue;
        };
        let sides = ["user-service side", "order-service side"];
        let get = |side: &str, what: &str| r.service_env.get(&format!("path {side} {what}"));
        let ccs: Vec<&String> = sides
            .iter()
            .filter_map(|s| get(s, "tcp_congestion_control"))
            .collect();
        if ccs.is_empty() {
            continue;
        }
        rounds += 1;
        if ccs.len() == 2 && ccs.iter().all(|c| c.as_str() == path.cc.name()) {
            matched += 1;
        }
        seen_cc.extend(ccs.into_iter().cloned());
        for s in sides {
            ssai.extend(get(s, "tcp_slow_start_after_idle").cloned());
            initcwnd.extend(get(s, "initcwnd").cloned());
        }
    }
    if rounds == 0 {
        return format!(
            "What the kernels on the path reported was not recorded ({}).",
            f::MISSING
        );
    }
    let list = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(" or ");
    let ssai = match ssai
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["1"] => "on".to_owned(),
        ["0"] => "off".to_owned(),
        _ => format!("varied ({})", list(&ssai)),
    };
    format!(
        "As both kernels reported when each round started: the congestion control a socket across the path ran ({}) was the one its column names on both sides in {matched} of {rounds} rounds; slow start after idle {ssai}; initial window {} segments.",
        list(&seen_cc),
        list(&initcwnd)
    )
}
