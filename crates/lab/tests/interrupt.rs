//! Ctrl-C in the middle of a run: the services and k6 are killed, the rounds
//! already finished are kept, and a partial report says so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lab::session::{self, RunOptions, load};

#[test]
fn an_interrupted_run_kills_its_children_and_keeps_a_partial_report() {
    common::require_k6();
    let bins = common::service_binaries();
    let out = common::temp_dir("interrupt");
    let stop = Arc::new(AtomicBool::new(false));
    let opts = RunOptions {
        experiment: Some("payload".into()),
        quick: true,
        rounds: Some(3),
        duration_s: Some(2.0),
        warmup_s: Some(1.0),
        out: Some(out.clone()),
        bin_dir: Some(bins),
        transports: Some(vec!["h1-json".into(), "grpc".into()]),
        sizes: Some(vec![1]),
        target: None,
        command: "lab run payload (interrupt test)".into(),
        ..Default::default()
    };
    let root = common::root();
    let flag = stop.clone();
    let runner = std::thread::spawn(move || session::run(opts, &root, flag));

    // Wait for the first finished round, then "press Ctrl-C" while the
    // second is under way.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let done = std::fs::read_dir(&out)
            .unwrap()
            .flatten()
            .filter_map(|d| std::fs::read_dir(d.path().join("rounds")).ok())
            .flat_map(|r| r.flatten())
            .count();
        if done >= 1 {
            break;
        }
        if runner.is_finished() {
            let r = runner.join().unwrap();
            panic!("the run ended before a round finished: {r:?}");
        }
        assert!(Instant::now() < deadline, "no round finished in 5 minutes");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::SeqCst);
    let t = Instant::now();
    let outcome = runner
        .join()
        .unwrap()
        .expect("an interrupted run still ends well");
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "stopping took {:?}",
        t.elapsed()
    );
    assert!(outcome.interrupted);
    assert!(
        common::children_of_this_process().is_empty(),
        "children left: {:?}",
        common::children_of_this_process()
    );
    let (info, results) = load(&outcome.dir).unwrap();
    assert!(info.outcome.starts_with("interrupted"), "{}", info.outcome);
    assert!(!results.records.is_empty() && results.records.len() < 6);
    let md = std::fs::read_to_string(outcome.dir.join("report.md")).unwrap();
    assert!(
        md.contains("interrupted after"),
        "the report says it is partial"
    );
    let _ = std::fs::remove_dir_all(&out);
}
