//! Ctrl-C in the middle of a run: the services and the load generator are
//! killed, the rounds already finished are kept, and a partial report says so. `--resume` then
//! measures only what is missing, keeps the rounds on disk as they were, and
//! its report says when each part ran; it refuses other binaries unless
//! forced.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lab::session::{self, RunOptions, load};

#[test]
fn an_interrupted_run_kills_its_children_and_keeps_a_partial_report() {
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
        bin_dir: Some(bins.clone()),
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

    resumed_where_it_stopped(&outcome.dir, &bins);
    other_binaries_are_refused_unless_forced(&outcome.dir, &bins);
    let _ = std::fs::remove_dir_all(&out);
}

/// A run's directory resumed with `bin_dir`'s binaries, `force`d or not.
fn resume(dir: &Path, bin_dir: &Path, force: bool) -> RunOptions {
    RunOptions {
        resume: Some(dir.to_path_buf()),
        force,
        bin_dir: Some(bin_dir.to_path_buf()),
        command: "lab run --resume (interrupt test)".into(),
        ..Default::default()
    }
}

/// The files of the rounds a run's directory holds, by name.
fn rounds(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir.join("rounds"))
        .unwrap()
        .flatten()
        .map(|e| {
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// Resumed: the same plan, the finished rounds kept byte for byte, the
/// missing ones measured, and nothing measured twice.
fn resumed_where_it_stopped(dir: &Path, bins: &Path) {
    let first = rounds(dir);
    let again = session::run(
        resume(dir, bins, false),
        &common::root(),
        Arc::new(AtomicBool::new(false)),
    )
    .expect("the run resumes");
    assert_eq!(again.dir, dir, "in the same directory");
    assert!(!again.interrupted);
    let all = rounds(dir);
    for (name, bytes) in &first {
        assert_eq!(all.get(name), Some(bytes), "{name} was kept as it was");
    }
    let (info, results) = load(dir).unwrap();
    assert_eq!(
        results.records.len(),
        6,
        "2 cells × 3 rounds: {:?}",
        all.keys()
    );
    let mut measured: Vec<_> = results
        .records
        .iter()
        .map(|r| (r.cell.id(), r.round))
        .collect();
    measured.sort();
    measured.dedup();
    assert_eq!(measured.len(), 6, "no round measured twice");
    assert!(info.outcome.starts_with("complete"), "{}", info.outcome);
    assert_eq!(info.parts.len(), 2, "{:?}", info.parts);
    assert_eq!(
        info.parts[0].measured as usize + info.parts[1].measured as usize,
        6
    );
    assert_eq!(info.parts[1].measured as usize, 6 - first.len());
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains("resumed: in 2 parts"),
        "the report says it was resumed"
    );
}

/// Other binaries: refused, naming them; with --force, resumed (nothing
/// is left to measure) and said so.
fn other_binaries_are_refused_unless_forced(dir: &Path, bins: &Path) {
    let other = common::temp_dir("other-binaries");
    for b in ["order-service", "user-service", "loadgen"] {
        std::fs::copy(bins.join(b), other.join(b)).unwrap();
    }
    {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(other.join("user-service"))
            .unwrap();
        f.write_all(b"another build").unwrap();
    }
    let refused = session::run(
        resume(dir, &other, false),
        &common::root(),
        Arc::new(AtomicBool::new(false)),
    )
    .unwrap_err();
    let msg = format!("{refused:#}");
    assert!(
        msg.contains("user-service binary") && msg.contains("--force"),
        "{msg}"
    );
    assert!(!msg.contains("order-service binary"), "{msg}");
    session::run(
        resume(dir, &other, true),
        &common::root(),
        Arc::new(AtomicBool::new(false)),
    )
    .expect("forced");
    let (info, results) = load(dir).unwrap();
    assert_eq!(results.records.len(), 6, "nothing new to measure");
    assert_eq!(info.parts.len(), 3);
    assert!(
        info.parts[2]
            .forced
            .iter()
            .any(|d| d.contains("user-service binary"))
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains("resumed with --force although"),
        "the report says so"
    );
    let _ = std::fs::remove_dir_all(&other);
    let _ = std::fs::remove_dir_all(&other);
}
