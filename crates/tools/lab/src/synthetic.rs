//! Synthetic runs: plausible rounds for every load cell of some
//! experiments, made without services or k6. The lab's tests render whole
//! reports from them (every table filled, no n/a), and an experiment's own
//! unit tests build its section from them. Probes and benchmarks are the
//! experiments' own records: a test that wants them adds them.

use std::collections::{BTreeMap, BTreeSet};

use crate::measure::Timing;
use crate::measure::cell::{Balance, Cell, Load};
use crate::measure::load::{Percentiles, Summary};
use crate::measure::machine::Machine;
use crate::measure::procfs::TcpStates;
use crate::measure::prom::Upstream;
use crate::measure::record::{
    Cpu, FaultRecord, PathRecord, ProxyRecord, ReplicaRecord, RoundRecord, Rss,
};
use crate::measure::results::Results;
use crate::session::{self, RunInfo};

fn pct(p50: f64) -> Percentiles {
    Percentiles {
        count: 1000.0,
        avg: p50 * 1.1,
        p50,
        p90: p50 * 1.5,
        p95: p50 * 1.8,
        p99: p50 * 2.5,
        p999: Some(p50 * 4.0),
        max: p50 * 6.0,
    }
}

/// 1,000 calls around `p50_us`, with a tail: p99 about 3 times the
/// median, the largest 5 times.
fn upstream_hdr(p50_us: f64) -> hdrhistogram::Histogram<u64> {
    let mut h = telemetry::hdr::empty();
    for i in 0..1000u32 {
        let q = f64::from(i) / 999.0;
        let v = p50_us * (0.6 + 0.8 * q + 3.6 * q.powi(40));
        h.saturating_record(v.max(1.0) as u64);
    }
    h
}

/// A k6 summary holding only its histogram's buckets (the scripts'
/// `good_hdr_bN`): 1,000 good answers around `p50_us`, tailed as
/// [`upstream_hdr`].
fn k6_buckets(p50_us: f64) -> serde_json::Value {
    let h = upstream_hdr(p50_us);
    let mut metrics = serde_json::Map::new();
    for v in h.iter_recorded() {
        let b = ((v.value_iterated_to() as f64).log10() * 50.0).floor() as u32;
        let key = format!("good_hdr_b{b}");
        let count = metrics
            .get(&key)
            .and_then(|m| m["values"]["count"].as_u64())
            .unwrap_or(0)
            + v.count_at_value();
        metrics.insert(key, serde_json::json!({ "values": { "count": count } }));
    }
    serde_json::json!({ "metrics": metrics })
}

/// A plausible record for one round of one cell: costs grow with the
/// payload, vary by transport, and move a little from round to round.
pub fn record(experiment: &str, cell: &Cell, round: u32) -> RoundRecord {
    let (factor, up_us) = hop_us(cell, round);
    let six = selection(cell);
    let on_postgres = matches!(
        cell.env.store,
        Some(crate::measure::cell::Store::Postgres | crate::measure::cell::Store::OwnPostgres)
    );
    let secs = 2.0;
    let (rate, dropped) = match cell.load {
        Load::Closed { .. } => (1e6 / (up_us * 3.0), 0.0),
        Load::Open { rate, .. } => {
            let cap = 3000.0 / factor * f64::from(cell.pool).sqrt();
            let got = f64::from(rate).min(cap);
            (got, (f64::from(rate) - got) * secs)
        }
    };
    let requests = rate * secs;
    // Several users in one request: each request fetches them all, slower
    // the more there are, with one call per user unless batched.
    let users = f64::from(cell.users);
    let calls = requests * if cell.batch { 1.0 } else { users };
    // gzip shrinks an answer to a fifth and costs a tenth more CPU; zstd
    // to a sixth, for a twentieth more.
    let (zip, zip_cpu) = if cell.env.zstd {
        (1.0 / 6.0, 1.05)
    } else if cell.env.gzip {
        (0.2, 1.1)
    } else {
        (1.0, 1.0)
    };
    let bytes_in = (60.0 + 180.0 * f64::from(cell.orders)) * factor * six * zip;
    let before = Upstream {
        calls: 50.0,
        errors: 0.0,
        connections_opened: 8.0,
        connections_open: 8.0,
        bytes_read: 5000.0,
        bytes_written: 500.0,
        tls_full: 0.0,
        tls_resumed: 0.0,
    };
    let close = cell.via == "h1-json-close";
    let after = Upstream {
        calls: before.calls + calls,
        errors: 0.0,
        connections_opened: before.connections_opened + if close { calls } else { 0.0 },
        connections_open: if close {
            0.0
        } else {
            f64::from(upstream_connections(cell))
        },
        bytes_read: before.bytes_read + bytes_in * calls,
        bytes_written: before.bytes_written + 150.0 * calls,
        // Over TLS a new connection per call resumes its session every time.
        tls_full: if cell.env.tls { 1.0 } else { 0.0 },
        tls_resumed: if cell.env.tls && close { calls } else { 0.0 },
    };
    let mut rec = RoundRecord {
        experiment: experiment.to_owned(),
        cell: cell.clone(),
        round,
        started_at: "2026-01-01T00:00:00Z".into(),
        duration_s: secs,
        // Made as k6 would summarise it (its histogram in the scripts'
        // buckets, its endings in their counters).
        generator: crate::measure::load::Generator::K6,
        load: k6(cell, secs, (requests, rate, dropped), up_us),
        upstream_before: before,
        upstream_after: after,
        cpu: Cpu {
            order_us: requests * up_us * 0.4 * zip_cpu,
            user_us: requests * up_us * 0.5 * zip_cpu,
            load_us: requests * 60.0,
        },
        rss: Rss {
            order_kb: 150_000.0,
            user_kb: 20_000.0,
            load_kb: 60_000.0,
        },
        tcp_before: TcpStates {
            established: 8,
            time_wait: 0,
        },
        tcp_after: TcpStates {
            established: 8,
            time_wait: if close { calls as u32 } else { 0 },
        },
        cores: 2,
        other_cpu_us: 10_000.0,
        pinning: None,
        flags: Vec::new(),
        proxy: cell.env.rtt_ms.map(|rtt| ProxyRecord {
            one_way_us: f64::from(rtt) * 500.0,
            chunks: calls * 4.0,
            connections: f64::from(cell.pool),
            late_mean_us: 40.0 + f64::from(round),
            late_max_us: 900.0,
            held: 0.0,
            cpu_us: requests * 20.0,
        }),
        path: path_record(cell, calls, requests, round),
        window_s: Some(secs + 1.0),
        postgres_us: on_postgres.then(|| requests * (200.0 + 2.0 * f64::from(cell.orders))),
        service_env: path_settings(cell),
        load_raw: fault_counters(k6_buckets(up_us * 3.0), cell),
        e2e_hdr: None,
        replicas: replicas(cell, requests, up_us),
        balancer_cpu_us: cell
            .env
            .replicas
            .filter(|r| matches!(r.balance, Balance::L4 | Balance::L7))
            .map(|_| requests * 15.0),
        no_proc: false,
        upstream_hdr: (cell.via != crate::measure::cell::K6_GRPC_DIRECT)
            .then(|| telemetry::hdr::encode(&upstream_hdr(up_us))),
        stalled_ms: cell.env.stall_ms.map(f64::from),
        fault: cell.env.fault.map(|f| fault(cell, f, (rate, calls), round)),
    };
    if cell.env.fault.is_some() {
        // As many not good as fault_counters counts by status.
        let bad = if cell.env.recommended { 5.0 } else { 15.0 };
        rec.load.bad_answers = bad;
        rec.load.good -= bad;
    }
    rec
}

/// The packet path's account, for a cell on it: packets by the calls and
/// the answer's size, losses and retransmits by the path's loss.
fn path_record(cell: &Cell, calls: f64, requests: f64, round: u32) -> Option<PathRecord> {
    cell.env.path.map(|p| PathRecord {
        packets_up: calls * 3.0,
        packets_down: calls * (3.0 + f64::from(cell.orders) / 8.0),
        lost: calls * 6.0 * p.loss_pct() / 100.0,
        queue_drops: 0.0,
        retrans_user: calls * 3.0 * p.loss_pct() / 100.0,
        retrans_order: calls * 4.0 * p.loss_pct() / 100.0,
        late_mean_us: 20.0 + f64::from(round),
        cpu_us: requests * 25.0,
        seed: Some(0x5eed + u64::from(round)),
        device_drops: Some(0.0),
        late_p99_us: Some(64.0),
        ..PathRecord::default()
    })
}

/// The kernels' TCP settings on either side of a cell's packet path, as
/// the lab records them (none without a path).
fn path_settings(cell: &Cell) -> BTreeMap<String, String> {
    cell.env
        .path
        .map(|p| {
            ["user-service side", "order-service side"]
                .into_iter()
                .flat_map(|side| {
                    [
                        (
                            format!("path {side} tcp_congestion_control"),
                            p.cc.name().to_owned(),
                        ),
                        (
                            format!("path {side} tcp_slow_start_after_idle"),
                            "1".to_owned(),
                        ),
                        (format!("path {side} initcwnd"), "10".to_owned()),
                    ]
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A fault's cell: some calls fail (504 and no answer), a few are slow.
fn fault_counters(mut summary: serde_json::Value, cell: &Cell) -> serde_json::Value {
    if cell.env.fault.is_some() {
        // The recommended settings fail a third as many.
        let (timeouts, none) = if cell.env.recommended {
            (4, 1)
        } else {
            (12, 3)
        };
        let m = &mut summary["metrics"];
        m["not_good_504"] = serde_json::json!({ "values": { "count": timeouts, "rate": 1.0 } });
        m["not_good_0"] = serde_json::json!({ "values": { "count": none, "rate": 0.2 } });
        m["slow_answers"] = serde_json::json!({ "values": { "count": 16, "rate": 1.0 } });
    }
    summary
}

/// A fault's record: user-service's calls at `rate` a second, none good
/// while the fault lasts, and back after a while that depends on the
/// transport; order-service's count when its process lived through it:
/// four answers more than user-service's `got` good calls.
fn fault(
    cell: &Cell,
    f: crate::measure::cell::Fault,
    (rate, got): (f64, f64),
    round: u32,
) -> FaultRecord {
    use crate::measure::cell::Fault;
    let at = Fault::ONSET_S * 1e3;
    let end = at + f.planned_s() * 1e3 + 300.0;
    let mut back = 200.0 + 100.0 * (cell.via.len() % 5) as f64 + 50.0 * f64::from(round);
    if cell.env.recommended {
        back /= 2.0;
    }
    let last = end + Fault::AFTER_S * 1e3;
    let (mut calls, mut errors) = (0.0, 0.0);
    let mut timeline = Vec::new();
    let mut t = 0.0;
    while t <= last {
        timeline.push([t, calls, errors]);
        let step = rate / 10.0;
        if t < at || t >= end + back {
            calls += step;
        } else if t >= end {
            // 40% of the rate: no second's rate lands on the 90% line.
            calls += step * 0.4;
        } else {
            errors += 1.0;
            calls += 1.0;
        }
        t += 100.0;
    }
    FaultRecord {
        at_ms: at,
        end_ms: end,
        drain_ms: (f == Fault::Restart).then_some(120.0),
        killed_after_drain: false,
        reset_sockets: (f == Fault::Reset).then_some(16),
        timeline,
        order_answered: (!matches!(f, Fault::Kill { .. } | Fault::Restart)).then_some(got + 4.0),
        order_refused: (!matches!(f, Fault::Kill { .. } | Fault::Restart)).then_some(2.0),
    }
}

/// What asking for six fields instead of all saves.
fn selection(cell: &Cell) -> f64 {
    if cell.fields.is_some() { 0.7 } else { 1.0 }
}

/// The transport's cost factor, and one call's time on the hop in µs.
fn hop_us(cell: &Cell, round: u32) -> (f64, f64) {
    let factor = match cell.via.as_str() {
        "tcp-proto" => 0.6,
        "grpc" | "grpc-bidi" => 0.8,
        "grpc-stream" => 0.9,
        "h2c-proto" => 0.85,
        "h1-proto" => 0.9,
        "h2c-json" => 1.05,
        "h1-json" => 1.1,
        "h1-json-close" => 1.6,
        "grpc-v1" => 1.3,
        _ => 1.0,
    };
    let six = selection(cell);
    let jitter = 1.0 + 0.03 * f64::from(round);
    let mut up_us = (80.0 + 2.0 * f64::from(cell.orders)) * factor * six * jitter;
    // Behind the delay proxy or across a packet path every call pays the
    // round trip; HTTP/1.1 calls also queue for one of `pool` connections.
    let rtt = cell.env.rtt_ms.or(cell.env.path.map(|p| p.rtt_ms));
    if let (Some(rtt), Load::Closed { vus }) = (rtt, cell.load) {
        let queue = if cell.via.starts_with("h1-") {
            f64::from(vus) / f64::from(cell.pool)
        } else {
            1.0
        };
        up_us += f64::from(rtt) * 1000.0 * queue;
    }
    // A connection idle past its timeout starts its window again (cubic).
    if let (Some(p), true) = (cell.env.path, cell.think_ms > 0) {
        let again = if p.cc == netpath::CongestionControl::Cubic {
            4.0
        } else {
            0.5
        };
        up_us += f64::from(p.rtt_ms) * 1000.0 * again;
    }
    // Loss costs a retransmission's wait; one connection carrying every
    // call makes every call behind a lost packet wait too.
    if let Some(p) = cell.env.path {
        let one_connection = upstream_connections(cell) == 1 && !cell.via.starts_with("h1-")
            || cell.via == "grpc-bidi";
        let spread = if one_connection { 12.0 } else { 4.0 };
        up_us *= 1.0 + spread * p.loss_pct() / 100.0 * if p.bursty { 1.5 } else { 1.0 };
        if p.cc == netpath::CongestionControl::Bbr {
            up_us *= 0.9;
        }
    }
    // On Postgres every call also waits for its query, longer the more rows.
    if cell.env.store == Some(crate::measure::cell::Store::Postgres) {
        up_us += 600.0 + 8.0 * f64::from(cell.orders);
    }
    (factor, up_us)
}

/// k6's summary of a round that made `requests` at `rate` (and dropped
/// `dropped`), each call taking `up_us` on the hop.
fn k6(cell: &Cell, secs: f64, (requests, rate, dropped): (f64, f64, f64), up_us: f64) -> Summary {
    let users = f64::from(cell.users);
    Summary {
        run_seconds: secs,
        requests,
        request_rate: rate,
        iterations: requests,
        iteration_rate: rate,
        dropped,
        bad_answers: 0.0,
        duration_ms: pct(up_us / 1000.0 * 3.0 * users.sqrt()),
        iteration_ms: pct(up_us / 1000.0 * 3.0 * users.sqrt()),
        upstream_us: Some(pct(up_us)),
        vus_max: 8.0,
        counting: Some("good-answers-1".into()),
        good: requests,
        good_rate: rate,
        shed: 0.0,
        good_ms: Some(pct(up_us / 1000.0 * 3.0 * users.sqrt())),
        good_sets: requests,
        good_set_ms: Some(pct(up_us / 1000.0 * 3.0 * users.sqrt())),
        parsed_bodies: 8.0,
        compressed: 0.0,
        unfinished: 0.0,
        schedule: None,
        // The store and the wire about a third of the hop each (shares
        // kept off the rounding boundaries of the report's figures).
        parts: cell
            .env
            .breakdown
            .then(|| crate::measure::load::PartsSummary {
                store: pct(up_us * 0.31),
                encode: pct(up_us * 0.12),
                total: pct(up_us * 0.52),
                decode: pct(up_us * 0.14),
                wire: pct(up_us * 0.33),
                reported: requests,
                server_ok: requests,
                client_ok: (requests * 0.97).round(),
            }),
    }
}

/// Plausible replicas for a cell with several: an L4 balancer spreads the
/// pool's connections round robin (the first on the second replica), a
/// direct call reaches the first only, the others spread calls evenly, and
/// power of two choices moves calls off a slow replica.
fn replicas(cell: &Cell, requests: f64, up_us: f64) -> Option<Vec<ReplicaRecord>> {
    let r = cell.env.replicas?;
    let n = usize::from(r.n);
    let pool = f64::from(cell.pool);
    let (weights, connections): (Vec<f64>, Vec<f64>) = (0..n)
        .map(|i| match r.balance {
            Balance::Direct => (f64::from(u8::from(i == 0)), if i == 0 { pool } else { 0.0 }),
            Balance::L4 => {
                let conns = (0..cell.pool)
                    .filter(|c| (usize::from(*c) + 1) % n == i)
                    .count() as f64;
                (conns, conns)
            }
            Balance::L7 => (1.0, 2.0),
            Balance::Client => (1.0, pool),
            Balance::ClientP2c => (if r.slow && i == n - 1 { 0.25 } else { 1.0 }, pool),
        })
        .unzip();
    let total: f64 = weights.iter().sum();
    Some(
        (0..n)
            .map(|i| {
                let calls = requests * weights[i] / total.max(1e-9);
                ReplicaRecord {
                    addr: format!("127.0.0.{}", i + 1),
                    calls,
                    cpu_us: calls * up_us * 0.4,
                    connections: connections[i],
                }
            })
            .collect(),
    )
}

/// A complete run of the named experiments (`["all"]` for all), every
/// grid cell and every ladder rung measured in every round.
///
/// # Panics
/// On a name the registry does not have: a test's mistake.
pub fn run(names: &[&str], quick: bool, rounds: u32) -> (RunInfo, Results) {
    let mut entries = Vec::new();
    for n in names {
        entries.extend(crate::experiments::expand(n).unwrap_or_else(|e| panic!("{e}")));
    }
    let knobs = crate::experiments::knobs(&names.join("+"), quick);
    let planned = session::plan(&entries, &knobs).unwrap_or_else(|e| panic!("{e:#}"));
    let mut seen = BTreeSet::new();
    let mut cells: Vec<(String, Cell)> = Vec::new();
    for (name, schedule) in &planned.schedules {
        for c in schedule.cells() {
            if seen.insert(c.clone()) {
                cells.push((name.clone(), c));
            }
        }
    }
    let mut results = Results::default();
    for r in 1..=rounds {
        for (e, c) in &cells {
            results.records.push(record(e, c, r));
        }
    }
    // A staged grid's second stage, made from its first stage's records.
    for (name, schedule) in &planned.schedules {
        if let crate::measure::schedule::Schedule::Staged(st) = schedule {
            let then = (st.then)(&results);
            for r in 1..=rounds {
                for c in &then {
                    results.records.push(record(name, c, r));
                }
            }
        }
    }
    let experiment = if names.len() == 1 {
        names[0].to_owned()
    } else {
        names.join("+")
    };
    let info = RunInfo {
        command: format!("lab run {experiment} --quick"),
        experiment,
        experiments: entries.iter().map(|e| e.name().to_owned()).collect(),
        knobs,
        plans: planned.plans,
        timing: Timing {
            rounds,
            duration_s: 2.0,
            warmup_s: 1.0,
            restarted: true,
        },
        store: "in memory".into(),
        target: None,
        path_seed: None,
        skipped: Vec::new(),
        pinning: None,
        machine: Machine {
            cores: 2,
            cpu_model: "Test CPU".into(),
            memory_gib: 24.0,
            kernel: "6.1".into(),
            rustc: "rustc 1.95.0".into(),
            k6: "k6 v1.1.0".into(),
            loadgen: "not used".into(),
            git_commit: "abcdef123456".into(),
            git_dirty: false,
        },
        started_at: "2026-01-01T00:00:00Z".into(),
        elapsed_s: Some(200.0),
        outcome: "complete: synthetic".into(),
        service_env: Default::default(),
        binaries: Default::default(),
        // Interrupted once and resumed, so that the report says so.
        parts: vec![
            crate::session::RunPart {
                started_at: "2026-01-01T00:00:00Z".into(),
                elapsed_s: 120.0,
                measured: 10,
                outcome: "interrupted after 10 of 20 planned measurements: a partial report".into(),
                forced: Vec::new(),
            },
            crate::session::RunPart {
                started_at: "2026-01-01T01:00:00Z".into(),
                elapsed_s: 80.0,
                measured: 10,
                outcome: "complete: 20 measurements".into(),
                forced: vec!["k6: k6 v1.0.0 then, k6 v1.1.0 now".into()],
            },
        ],
    };
    (info, results)
}

/// The connections user-service holds upstream: its pool, per replica when
/// it balances them itself.
fn upstream_connections(cell: &Cell) -> u32 {
    let per = match cell.env.replicas {
        Some(r) if r.balance.by_client() => u32::from(r.n),
        _ => 1,
    };
    u32::from(cell.pool) * per
}
