//! The open-loop experiment end to end, for real: a transport's capacity
//! found by a closed loop, the open loop at fractions of it, and order-service
//! stopped for 200 ms mid-run under both loops. The stall must show in the
//! open loop's p99: the requests scheduled during it waited for it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use lab::measure::cell::Load;
use lab::measure::figures::Measures;
use lab::session::{self, RunOptions, load};

#[test]
fn a_stall_of_order_service_shows_in_the_open_loops_p99() {
    let bins = common::service_binaries();
    let out = common::temp_dir("open-loop");
    let run = session::run(
        RunOptions {
            bin_dir: Some(bins),
            rounds: Some(1),
            transports: Some(vec!["grpc".into()]),
            sizes: Some(vec![100]),
            ..common::tiny_run("open-loop", &out)
        },
        &common::root(),
        Arc::new(AtomicBool::new(false)),
    )
    .expect("the open-loop run");
    assert_eq!(run.failures, 0, "see {}", run.dir.display());
    let (_, results) = load(&run.dir).unwrap();

    // The capacity cell, the stalled pair, and four fractions of the capacity.
    let closed =
        |r: &&lab::measure::record::RoundRecord| matches!(r.cell.load, Load::Closed { .. });
    let capacity = results
        .records
        .iter()
        .filter(closed)
        .find(|r| r.cell.env.stall_ms.is_none())
        .map(|r| Measures::of(r).rate)
        .expect("the capacity cell");
    let mut rates: Vec<u32> = results
        .records
        .iter()
        .filter(|r| r.cell.env.stall_ms.is_none())
        .filter_map(|r| match r.cell.load {
            Load::Open { rate, .. } => Some(rate),
            Load::Closed { .. } => None,
        })
        .collect();
    rates.sort_unstable();
    let expected: Vec<u32> = [25.0, 50.0, 75.0, 90.0]
        .iter()
        .map(|p| (capacity * p / 100.0).round() as u32)
        .collect();
    assert_eq!(rates, expected, "fractions of {capacity:.0} req/s");

    for r in results
        .records
        .iter()
        .filter(|r| r.cell.env.stall_ms.is_some())
    {
        let m = Measures::of(r);
        let what = r.cell.label();
        let stopped = r.stalled_ms.expect("the stop's length is recorded");
        assert!(
            (195.0..1000.0).contains(&stopped),
            "{what}: stopped {stopped} ms"
        );
        assert_eq!(m.bad_answers, 0.0, "{what}: a stall is not an error");
        let e2e = m.e2e_ms.expect("latencies");
        // Both loops saw the stall in their longest request ...
        assert!(e2e.max >= 150.0, "{what}: max {} ms", e2e.max);
        if let Load::Open { .. } = r.cell.load {
            // ... and the open loop in its p99: a fifth of its requests were
            // due during the stop.
            assert_eq!(m.dropped, 0.0, "{what}: no VU was short");
            assert!(e2e.p99 >= 100.0, "{what}: p99 {} ms", e2e.p99);
        }
    }
    assert_eq!(
        results
            .records
            .iter()
            .filter(|r| r.cell.env.stall_ms.is_some())
            .count(),
        2,
        "the stalled pair"
    );
    let md = std::fs::read_to_string(run.dir.join("report.md")).unwrap();
    assert!(md.contains("open loop shows it in its p99"), "{md}");
    // Every round's histograms are kept whole: the engine's end to end, and
    // user-service's upstream.
    let hgrm: Vec<String> = std::fs::read_dir(run.dir.join("hdr"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    for what in ["e2e", "upstream"] {
        let n = hgrm
            .iter()
            .filter(|f| f.ends_with(&format!(".{what}.hgrm")))
            .count();
        assert_eq!(n, results.records.len(), "{what}: {hgrm:?}");
    }
    // The spectra are drawn from them: at the top fraction, and the stall.
    for chart in ["open-loop-spectrum-100.svg", "open-loop-stall-spectrum.svg"] {
        let svg = std::fs::read_to_string(run.dir.join(chart)).unwrap();
        assert!(svg.contains("<polyline"), "{chart}");
    }
    let _ = std::fs::remove_dir_all(&out);
}
