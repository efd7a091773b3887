//! The faults section: a table per fault (each transport's failed and slow
//! calls, recovery, and both sides' counts), an overview of every fault,
//! and readings computed from them.

use super::figures::{self, Figures, RECOVERED};
use super::plan::{Case, FaultsPlan, not_measured};
use crate::experiment::{Context, PathChoice};
use crate::experiments::tables::method;
use crate::measure::cell::{Cell, Fault};
use crate::measure::runner::fault::SAMPLE_MS;
use crate::report::format as f;
use crate::report::value::Value;
use crate::report::{Section, Table};
use crate::stats::Spread;

/// Every round's figures of a cell.
fn rounds(cx: &Context, cell: &Cell) -> Vec<Figures> {
    cx.results
        .records
        .iter()
        .filter(|r| r.cell == *cell)
        .filter_map(figures::of)
        .collect()
}

fn spread(rs: &[Figures], f: impl Fn(&Figures) -> f64) -> Option<Spread> {
    Spread::of(&rs.iter().map(f).collect::<Vec<_>>())
}

/// A recovery time in seconds over the rounds; a round where it did not
/// happen within the run makes the cell say so (the longest wait it had).
fn recovery(rs: &[Figures], f: impl Fn(&Figures) -> Option<f64>) -> Value {
    if rs.is_empty() {
        return Value::missing("no round of this cell");
    }
    if let Some(r) = rs.iter().find(|r| f(r).is_none()) {
        return Value::text(format!(
            "not within the {} s after",
            f::num((r.after_ms / 1e3).floor())
        ));
    }
    Value::range(spread(rs, |r| f(r).unwrap_or(0.0) / 1e3), "s")
}

/// The statuses of the not-good calls, summed over the rounds and shown
/// per round.
fn statuses(rs: &[Figures]) -> Value {
    if rs.is_empty() {
        return Value::missing("no round of this cell");
    }
    let mut total: Vec<(String, f64)> = Vec::new();
    for r in rs {
        for (s, n) in &r.by_status {
            match total.iter_mut().find(|(t, _)| t == s) {
                Some(t) => t.1 += n,
                None => total.push((s.clone(), *n)),
            }
        }
    }
    if total.is_empty() {
        return Value::text("none");
    }
    let per = rs.len() as f64;
    Value::text(
        total
            .iter()
            .map(|(s, n)| {
                let s = if s == "0" { "no answer" } else { s };
                format!("{s}: {}", f::num(n / per))
            })
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// What stands for order-service's count where it cannot be had.
fn unused_missing(fault: Fault) -> Value {
    match fault {
        // By design: not a figure that failed to be measured.
        Fault::Kill { .. } | Fault::Restart => {
            Value::text("not counted: the process that counted them was killed or restarted")
        }
        _ => Value::missing("order-service's /metrics could not be read before or after the run"),
    }
}

fn table(p: &FaultsPlan, cx: &Context, case: &Case, orders: u32) -> (Table, Vec<Row>) {
    let mut t = Table {
        caption: format!("{}; {}", case.title(p.path), f::orders(orders)),
        headers: [
            "transport",
            "settings",
            "good calls/s before",
            "failed calls",
            "by status",
            "calls failing for, s",
            "calls > 1 s",
            "longest call, s",
            "first good answer after the end, s",
            "rate back within 10%, s",
            "requests − user-service calls",
            "order-service answers unused",
            "order-service error answers",
        ]
        .map(String::from)
        .to_vec(),
        ..Table::default()
    };
    let mut rows = Vec::new();
    for via in &p.vias {
        if not_measured(via, case, p.path).is_some() {
            continue;
        }
        for rec in p.settings(case) {
            let cell = p.cell(via, orders, case, rec);
            let rs = rounds(cx, &cell);
            let counted = |pick: fn(&Figures) -> Option<f64>| {
                if rs.iter().all(|r| pick(r).is_some()) && !rs.is_empty() {
                    Value::range(spread(&rs, |r| pick(r).unwrap_or(0.0)), "calls")
                } else {
                    unused_missing(case.fault)
                }
            };
            let unused = counted(|r| r.unused);
            let refused = counted(|r| r.refused);
            t.rows.push(vec![
                Value::text(via.clone()),
                Value::text(if rec { "recommended" } else { "defaults" }),
                match Spread::of(&rs.iter().filter_map(|r| r.before_rate).collect::<Vec<_>>()) {
                    None if !rs.is_empty() => Value::missing(
                        "fewer than two samples of user-service's counters before the fault",
                    ),
                    s => Value::range(s, "/s"),
                },
                Value::range(spread(&rs, |r| r.failed), "calls"),
                statuses(&rs),
                Value::range(spread(&rs, |r| r.failing_ms / 1e3), "s"),
                Value::range(spread(&rs, |r| r.slow), "calls"),
                Value::range(spread(&rs, |r| r.longest_ms / 1e3), "s"),
                recovery(&rs, |r| r.first_good_ms),
                recovery(&rs, |r| r.back_ms),
                Value::range(spread(&rs, |r| r.unmatched), "calls"),
                unused,
                refused,
            ]);
            rows.push(Row::of(via, rec, &rs));
        }
    }
    t.reading = reading(&rows);
    (t, rows)
}

/// A transport's medians in one case, for the readings.
#[derive(Debug, Clone)]
struct Row {
    via: String,
    recommended: bool,
    failed: Option<f64>,
    /// The median time back within 10%, or `None` when some round never
    /// got back.
    back_s: Option<f64>,
    measured: bool,
}

impl Row {
    fn of(via: &str, recommended: bool, rs: &[Figures]) -> Row {
        let back = if rs.iter().all(|r| r.back_ms.is_some()) {
            spread(rs, |r| r.back_ms.unwrap_or(0.0) / 1e3).map(|s| s.median)
        } else {
            None
        };
        Row {
            via: via.to_owned(),
            recommended,
            failed: spread(rs, |r| r.failed).map(|s| s.median),
            back_s: back,
            measured: !rs.is_empty(),
        }
    }
}

/// The reading of one case: with the defaults, fewest and most failed
/// calls, soonest and latest back to the rate (or never within the run);
/// then what the recommended settings changed most.
fn reading(rows: &[Row]) -> String {
    let defaults: Vec<&Row> = rows.iter().filter(|r| !r.recommended).collect();
    match (compare(&defaults), settings_reading(rows)) {
        (d, None) => d,
        (d, Some(s)) => format!("{d} {s}"),
    }
}

/// What the recommended settings changed most in one case: the largest
/// cut in failed calls, and in the time back to the rate, each with its
/// transport; or that they changed neither.
fn settings_reading(rows: &[Row]) -> Option<String> {
    let pairs: Vec<(&Row, &Row)> = rows
        .iter()
        .filter(|r| !r.recommended && r.measured)
        .filter_map(|d| {
            rows.iter()
                .find(|r| r.recommended && r.measured && r.via == d.via)
                .map(|r| (d, r))
        })
        .collect();
    if pairs.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    if let Some((d, r)) = most(&pairs, |d, r| Some(d.failed? - r.failed?)) {
        out.push(format!(
            "cut {}'s failed calls most ({})",
            d.via,
            failed_change(d, r)
        ));
    }
    // A call that fails fast is followed at once by the next in a closed
    // loop: failing sooner can mean failing more often.
    if let Some((d, r)) = most(&pairs, |d, r| Some(r.failed? - d.failed?)) {
        out.push(format!(
            "added most to {}'s failed calls ({}: calls that fail sooner, each followed at once by the next)",
            d.via,
            failed_change(d, r)
        ));
    }
    // Never back counts as the whole run after.
    if let Some((d, r)) = most(&pairs, |d, r| {
        Some(d.back_s.unwrap_or(f64::INFINITY) - r.back_s?)
    }) {
        let was = d.back_s.map_or_else(
            || "not within the run".to_owned(),
            |a| format!("{} s", f::num(a)),
        );
        let b = r.back_s.unwrap_or_default();
        out.push(format!(
            "brought {} back to its rate soonest ({was} to {} s)",
            d.via,
            f::num(b)
        ));
    }
    Some(if out.is_empty() {
        "The recommended settings cut no transport's failed calls and brought none back sooner."
            .to_owned()
    } else {
        format!("The recommended settings {}.", out.join("; "))
    })
}

/// The pair (defaults, recommended) whose `change` is largest, when it is
/// above 0.
fn most<'r>(
    pairs: &[(&'r Row, &'r Row)],
    change: impl Fn(&Row, &Row) -> Option<f64>,
) -> Option<(&'r Row, &'r Row)> {
    pairs
        .iter()
        .filter_map(|&(d, r)| Some((d, r, change(d, r)?)))
        .filter(|c| c.2 > 0.0)
        .max_by(|a, b| a.2.total_cmp(&b.2))
        .map(|(d, r, _)| (d, r))
}

/// "A to B" of two rows' failed calls.
fn failed_change(d: &Row, r: &Row) -> String {
    format!(
        "{} to {}",
        d.failed.map_or_else(|| "?".to_owned(), f::count),
        r.failed.map_or_else(|| "?".to_owned(), f::count)
    )
}

/// Transports set against each other in one case (one kind of settings).
fn compare(rows: &[&Row]) -> String {
    let measured: Vec<&Row> = rows.iter().copied().filter(|r| r.measured).collect();
    if measured.is_empty() {
        return "No transport was measured here.".to_owned();
    }
    let by_failed = |best: bool| {
        measured
            .iter()
            .filter_map(|r| r.failed.map(|v| (r, v)))
            .min_by(|a, b| {
                let o = a.1.total_cmp(&b.1);
                if best { o } else { o.reverse() }
            })
    };
    let mut out = Vec::new();
    if let (Some((lo, lv)), Some((hi, hv))) = (by_failed(true), by_failed(false)) {
        if lv == hv {
            out.push(format!(
                "Every transport failed {} calls (median)",
                f::count(lv)
            ));
        } else {
            out.push(format!(
                "Fewest failed calls: {} ({}); most: {} ({})",
                lo.via,
                f::count(lv),
                hi.via,
                f::count(hv)
            ));
        }
    }
    let back: Vec<(&Row, f64)> = measured
        .iter()
        .filter_map(|r| r.back_s.map(|b| (*r, b)))
        .collect();
    let never: Vec<&str> = measured
        .iter()
        .filter(|r| r.back_s.is_none())
        .map(|r| r.via.as_str())
        .collect();
    if let (Some(first), Some(last)) = (
        back.iter().min_by(|a, b| a.1.total_cmp(&b.1)),
        back.iter().max_by(|a, b| a.1.total_cmp(&b.1)),
    ) {
        out.push(format!(
            "{} was back within {:.0}% of its rate soonest ({} s after the end), {} latest ({} s)",
            first.0.via,
            (1.0 - RECOVERED) * 100.0,
            f::num(first.1),
            last.0.via,
            f::num(last.1)
        ));
    }
    if !never.is_empty() {
        out.push(format!(
            "not back within the run in some round: {}",
            never.join(", ")
        ));
    }
    out.join("; ") + "."
}

pub(super) fn section(p: &FaultsPlan, cx: &Context) -> Section {
    let mut s = Section::new("faults", "When the other side fails");
    s.para(method(
        cx.timing,
        &format!(
            "Closed loop, {} callers each pausing at least {} ms after an answer (so that failures \
             answered at once cannot speed the load up), user-service's pool {} connections \
             per transport; each \
             cell's run holds {:.0} s before the fault, the fault, and at least {:.0} s after it, \
             however short the run's timing. A failed call is an answer the load generator did not count as good, \
             by the status user-service gave (no answer: the connection failed). Recovery is read \
             from user-service's counters of the transport, sampled every {SAMPLE_MS} ms: the \
             first good answer after the fault's end, and the start of the first second whose good \
             rate is within {:.0}% of the rate before (read from {:.0} s into the run to the fault). \
             Both sides count: the load generator's requests against user-service's calls, and order-service's \
             lookups answered well against the good calls user-service got (answers made and \
             never used), and order-service's own count of lookups it answered with an error \
             (its store unavailable, a deadline passed), which user-service may have sent \
             again. {} The reset is `ss -K` on user-service's connections, \
             which makes the kernel send order-service a RST. The Postgres restart runs \
             order-service on a Postgres server the lab made for the run (initdb, durability \
             off) and user-service in memory, unlike every other cell here (both in memory), \
             and restarts it with `pg_ctl restart -m fast`: every session ended, the server \
             refusing connections until it is back, order-service running throughout. Each \
             transport runs with \
             user-service's defaults, and where they act also with the recommended settings \
             below. The defaults: an upstream timeout of 5 s (sent to order-service as the \
             call's deadline), no connect timeout of its own, no keep-alive pings, and a read \
             whose connection failed before any answer came sent again on a new one (REST over \
             TCP and Connect once, gRPC unary calls twice at most; raw TCP, the bidi stream and \
             REST over HTTP/3 send nothing again)",
            p.vus,
            p.think_ms,
            p.pool,
            crate::measure::cell::Fault::ONSET_S,
            crate::measure::cell::Fault::AFTER_S,
            (1.0 - RECOVERED) * 100.0,
            figures::SETTLE_MS / 1e3,
            silence_method(p),
        ),
    ));
    let mut unmeasured: Vec<String> = Vec::new();
    for case in &p.cases {
        for via in &p.vias {
            if let Some(why) = not_measured(via, case, p.path) {
                let line = format!("{via}, {}: {why}", case.fault.describe());
                if !unmeasured.contains(&line) {
                    unmeasured.push(line);
                }
            }
        }
    }
    if !unmeasured.is_empty() {
        s.para(format!("Not measured: {}.", unmeasured.join("; ")));
    }
    if !p.recommended.is_empty() {
        s.table(settings_table(p));
    }
    let mut all: Vec<(Case, u32, Vec<Row>)> = Vec::new();
    for case in &p.cases {
        for &orders in &p.orders {
            let (t, rows) = table(p, cx, case, orders);
            s.table(t);
            all.push((*case, orders, rows));
        }
    }
    s.table(overview(p, &all));
    s
}

/// The settings the recommended cells change, each against its default.
/// How the silent path is made, in words.
fn silence_method(p: &FaultsPlan) -> String {
    match p.path {
        PathChoice::Packets => format!(
            "The silent path is a packet path of {} ms round trip ({}) whose every packet is \
             dropped both ways.",
            p.path_rtt_ms,
            p.cc.name()
        ),
        PathChoice::Proxy => format!(
            "The silence is the delay proxy of {} ms round trip holding every byte, FIN and \
             reset both ways (`--path proxy`): the programs on each side see a silent path, but \
             their kernels still acknowledge what they send, so TCP keep-alive and \
             `TCP_USER_TIMEOUT` see nothing wrong and only HTTP/2 pings and timeouts do; a new \
             connection opens at once (it would wait for a SYN's answer on a real path), and \
             what was held arrives the moment the silence ends (a real path's retransmissions \
             back off). On a packet path the silence is the real one.",
            p.path_rtt_ms
        ),
    }
}

fn settings_table(p: &FaultsPlan) -> Table {
    let acts: Vec<String> = p.recommended.iter().map(|c| c.title(p.path)).collect();
    Table {
        caption: "The settings that differ in the recommended cells (user-service's; every other \
                  is the default)"
            .to_owned(),
        headers: ["setting", "default", "recommended", "what it does"]
            .map(String::from)
            .to_vec(),
        rows: crate::measure::cell::RECOMMENDED
            .iter()
            .map(|(k, v)| {
                vec![
                    Value::text(format!("`{k}`")),
                    Value::text("0 (off)"),
                    Value::text(*v),
                    Value::text(setting_text(k)),
                ]
            })
            .collect(),
        reading: format!(
            "Measured with both: {}. A restart and a reset are met alike by both: a refused \
             connect fails at once, and a read whose connection was reset is sent again by \
             default.",
            acts.join("; ")
        ),
    }
}

/// What a recommended setting does, for its table.
fn setting_text(key: &str) -> &'static str {
    match key {
        "USER_UPSTREAM_CONNECT_TIMEOUT_MS" => {
            "a connect unanswered this long fails, rather than waiting through the kernel's SYN \
             retries (1, 3, 7 s…) until the call's timeout"
        }
        "USER_UPSTREAM_KEEPALIVE_MS" => {
            "TCP keep-alive probes after this much idle time and `TCP_USER_TIMEOUT` of twice it on \
             every connection; HTTP/2 PINGs this often on the gRPC channels, closed when one goes \
             unanswered as long"
        }
        "USER_UPSTREAM_RETRY_BUDGET_PCT" => {
            "with client-side balancing, a call that got no answer is sent once to another replica, \
             such second tries at most this share of the calls"
        }
        _ => "",
    }
}

/// Every fault at a glance: each transport's failed calls and time back
/// to its rate, at the plan's first size.
fn overview(p: &FaultsPlan, all: &[(Case, u32, Vec<Row>)]) -> Table {
    let orders = p.orders.first().copied().unwrap_or(1);
    let cases: Vec<&(Case, u32, Vec<Row>)> = all.iter().filter(|(_, o, _)| *o == orders).collect();
    let mut headers = vec!["transport".to_owned()];
    headers.extend(cases.iter().map(|(c, _, _)| c.title(p.path)));
    let mut t = Table {
        caption: format!(
            "Every fault, {}, user-service's defaults: failed calls · seconds until the rate was back",
            f::orders(orders)
        ),
        headers,
        ..Table::default()
    };
    let mut soonest: Vec<String> = Vec::new();
    for via in &p.vias {
        let mut row = vec![Value::text(via.clone())];
        for (case, _, rows) in &cases {
            let cell = match rows.iter().find(|r| r.via == *via && !r.recommended) {
                None => Value::text(format!(
                    "not measured: {}",
                    not_measured(via, case, p.path).unwrap_or("not in the plan")
                )),
                Some(r) if !r.measured => Value::missing("no round of this cell"),
                Some(r) => Value::text(format!(
                    "{} · {}",
                    r.failed.map_or_else(|| "?".to_owned(), f::num),
                    r.back_s
                        .map_or_else(|| "not back".to_owned(), |b| format!("{} s", f::num(b)))
                )),
            };
            row.push(cell);
        }
        t.rows.push(row);
    }
    for (case, _, rows) in &cases {
        if let Some(best) = rows
            .iter()
            .filter(|r| r.measured && !r.recommended)
            .filter_map(|r| r.back_s.map(|b| (r, b, r.failed.unwrap_or(f64::MAX))))
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.2.total_cmp(&b.2)))
        {
            soonest.push(format!("{}: {}", case.title(p.path), best.0.via));
        }
    }
    t.reading = if soonest.is_empty() {
        "No transport got back to its rate within a run.".to_owned()
    } else {
        format!(
            "Back to its rate soonest (fewest failed calls between equals) — {}.",
            soonest.join("; ")
        )
    };
    t
}
