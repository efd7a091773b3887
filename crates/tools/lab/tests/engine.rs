//! The lab's load engine against the real services, its counts held to
//! order-service's own; and a plan run with k6 instead (`--load k6`), as
//! users still can.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use lab::measure::figures::Measures;
use lab::measure::load::Generator;
use lab::measure::prom;
use lab::session::{self, RunOptions, load};

/// order-service's own count of lookups it answered well, from its
/// /metrics.
fn order_answered(addr: SocketAddr) -> f64 {
    let r = lab::measure::http::get(addr, "/metrics", Duration::from_secs(5)).unwrap();
    assert_eq!(r.status, 200);
    prom::ReplicaCounters::of(&prom::parse(&String::from_utf8_lossy(&r.body)).unwrap()).answered
}

/// One run of the engine's binary; its summary.
fn engine(bins: &std::path::Path, args: &[&str]) -> loadgen::tally::Summary {
    let out = common::temp_dir("engine-summary").join("summary.json");
    let st = std::process::Command::new(bins.join("loadgen"))
        .args(args)
        .arg("--summary")
        .arg(&out)
        .output()
        .expect("loadgen runs");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap()
}

#[test]
fn the_engines_good_answers_are_the_lookups_order_service_counted() {
    let bins = common::service_binaries();
    let out = common::temp_dir("engine-count");
    let running = lab::measure::services::start(
        &common::service_config(&out),
        Some(4),
        &lab::measure::cell::Env::default(),
        "engine count",
        &Arc::new(AtomicBool::new(false)),
    )
    .unwrap();
    let order = running.ports.order_rest_addr();
    let user = running.ports.user_rest_addr();
    let path = format!(
        "/v1/users/{}/orders?limit=10&via=h1-proto",
        lab::measure::cell::fixed_user(10)
    );
    let url = format!("http://{user}{path}");
    let len = lab::measure::http::get(user, &path, Duration::from_secs(5))
        .unwrap()
        .header("content-length")
        .unwrap()
        .to_owned();
    for (what, extra) in [
        ("closed loop", vec!["--connections", "4"]),
        ("open loop", vec!["--connections", "16", "--rate", "400"]),
    ] {
        let before = order_answered(order);
        let mut args = vec![
            "--url",
            &url,
            "--duration",
            "1",
            "--header",
            "x-via=h1-proto",
            "--length",
            &len,
        ];
        args.extend(extra);
        let s = engine(&bins, &args);
        let answered = order_answered(order) - before;
        assert!(s.good > 50, "{what}: {s:?}");
        assert_eq!((s.bad, s.shed, s.unfinished), (0, 0, 0), "{what}");
        // Each good answer is one lookup order-service itself counted.
        assert_eq!(s.good as f64, answered, "{what}: order-service's count");
        if let Some(k) = &s.schedule {
            assert_eq!((k.due, k.sent, k.unsent), (400, 400, 0), "{what}");
        }
    }
    // Held to a length the answers do not have: not one is good, and the
    // good answers' histogram is empty, not zeros.
    let before = order_answered(order);
    let s = engine(
        &bins,
        &[
            "--url",
            &url,
            "--duration",
            "0.5",
            "--connections",
            "2",
            "--header",
            "x-via=h1-proto",
            "--length",
            "17",
        ],
    );
    assert_eq!(s.good, 0, "{s:?}");
    assert!(s.bad > 10 && s.good_hdr.is_none(), "{s:?}");
    // order-service answered them all well: the engine's check is what
    // refused them.
    assert_eq!(order_answered(order) - before, s.bad as f64);
    running.stop();
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_plan_still_runs_with_k6_when_asked() {
    common::require_k6();
    let bins = common::service_binaries();
    let out = common::temp_dir("load-k6");
    let run = session::run(
        RunOptions {
            bin_dir: Some(bins),
            rounds: Some(1),
            transports: Some(vec!["h1-json".into(), "grpc".into()]),
            load: Generator::K6,
            ..common::tiny_run("payload", &out)
        },
        &common::root(),
        Arc::new(AtomicBool::new(false)),
    )
    .expect("the payload run under k6");
    assert_eq!(run.failures, 0, "see {}", run.dir.display());
    let (info, results) = load(&run.dir).unwrap();
    assert_eq!(info.knobs.load, Generator::K6);
    assert!(info.machine.k6.starts_with("k6 v"), "{}", info.machine.k6);
    assert_eq!(info.machine.loadgen, "not used");
    assert_eq!(results.records.len(), 2);
    for r in &results.records {
        let m = Measures::of(r);
        assert_eq!(r.generator, Generator::K6, "{}", r.cell.label());
        assert!(m.good > 10.0 && m.good == m.requests, "{m:?}");
        assert!(r.load_raw.get("metrics").is_some(), "k6's summary kept");
        assert!(r.e2e_histogram().is_some(), "k6's buckets read back");
    }
    assert!(run.dir.join("logs").join("k6.log").is_file());
    let md = std::fs::read_to_string(run.dir.join("report.md")).unwrap();
    assert!(md.contains("k6 (the scripts in `k6/`) drives"), "{md}");
    let _ = std::fs::remove_dir_all(&out);
}
