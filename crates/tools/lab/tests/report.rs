//! Rendering a whole report from a complete (synthetic) run: every table of
//! every experiment filled, charts written, and a results directory read
//! back and rendered again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use lab::measure::results::Results;
use lab::measure::write_json;
use lab::report::{Block, Report};
use lab::session::{build_report, load, rerender};

#[test]
fn a_complete_run_of_all_has_no_empty_cell() {
    let (info, results) = common::synthetic(&["all"], true, 2);
    let report = build_report(&info, &results);
    let empty = report.empty_cells();
    assert!(empty.is_empty(), "empty cells:\n{}", empty.join("\n"));
    let titles: Vec<&str> = report.sections.iter().map(|s| s.id.as_str()).collect();
    for id in [
        "payload",
        "factorial",
        "floor",
        "wire-size",
        "schema",
        "streaming",
        "naive",
        "pool",
        "tls",
        "codec",
        "hop",
        "replicas",
        "flags",
        "cells",
    ] {
        assert!(titles.contains(&id), "no {id} section in {titles:?}");
    }
    assert!(report.tables().all(|t| !t.reading.is_empty()));
    let charts: Vec<&str> = report.charts().map(|c| c.file.as_str()).collect();
    for c in [
        "payload-throughput.svg",
        "payload-latency-1.svg",
        "payload-latency-1000.svg",
        "pool-drops.svg",
        "replicas-shares.svg",
        "replicas-shares-slow.svg",
    ] {
        assert!(charts.contains(&c), "no chart {c} in {charts:?}");
    }
}

#[test]
fn the_full_plan_renders_too() {
    let (info, results) = common::synthetic(&["all"], false, 3);
    let report = build_report(&info, &results);
    let empty = report.empty_cells();
    assert!(empty.is_empty(), "empty cells:\n{}", empty.join("\n"));
}

#[test]
fn the_report_records_machine_versions_commit_and_settings() {
    let (info, results) = common::synthetic(&["payload"], true, 2);
    let md = build_report(&info, &results).markdown();
    for needle in [
        "2 cores, Test CPU, 24.0 GiB",
        "rustc 1.95.0; load engine: not used; k6: k6 v1.1.0",
        "abcdef123456",
        "2 rounds × 2.00 s measured after 1.00 s warm-up",
        "in memory",
        "`lab run payload --quick`",
        // The synthetic run was interrupted once and resumed with --force.
        "resumed: in 2 parts; part 1 from 2026-01-01T00:00:00Z for 2 min 00 s, 10 measurements (interrupted after 10 of 20",
        "part 2 from 2026-01-01T01:00:00Z",
        "resumed with --force although k6: k6 v1.0.0 then, k6 v1.1.0 now differed",
    ] {
        assert!(md.contains(needle), "report lacks {needle:?}\n{md}");
    }
}

#[test]
fn ratios_and_readings_name_the_baseline() {
    let (info, results) = common::synthetic(&["payload"], true, 2);
    let report = build_report(&info, &results);
    let t = report
        .tables()
        .find(|t| t.caption.starts_with("Throughput"))
        .expect("a throughput table");
    let h1 = t
        .rows
        .iter()
        .find(|r| r[0].label() == "h1-json")
        .expect("h1-json row");
    assert!(h1[1].to_string().ends_with("×1"), "{h1:?}");
    let tcp = t
        .rows
        .iter()
        .find(|r| r[0].label() == "tcp-proto")
        .expect("tcp-proto row");
    assert_eq!(tcp[1].ratios().len(), 1, "{tcp:?}");
    assert!(t.reading.contains("h1-json"), "{}", t.reading);
}

#[test]
fn a_missing_round_shows_as_missing_not_as_zero() {
    let (info, mut results) = common::synthetic(&["naive"], true, 2);
    results.records.retain(|r| r.cell.via != "h1-json-close");
    let empty = build_report(&info, &results).empty_cells();
    assert!(!empty.is_empty(), "a cell with no rounds must show as n/a");
    assert!(
        empty.iter().any(|e| e.contains("h1-json-close")),
        "{empty:?}"
    );
}

#[test]
fn a_results_directory_is_read_back_and_rendered_again() {
    let (info, results) = common::synthetic(&["all"], true, 2);
    let dir = common::temp_dir("rerender");
    write_json(&dir.join("run.json"), &info).unwrap();
    for (i, r) in results.records.iter().enumerate() {
        write_json(
            &dir.join("rounds")
                .join(format!("{i:04}-{}-r{}.json", r.cell.id(), r.round)),
            r,
        )
        .unwrap();
    }
    for p in &results.probes {
        write_json(&Results::probe_path(&dir, &p.experiment, p.round), p).unwrap();
    }
    for b in &results.benches {
        write_json(&Results::bench_path(&dir, &b.experiment), b).unwrap();
    }
    let (info2, results2) = load(&dir).unwrap();
    // Compared through the rendered report below (serde_json may move a
    // float's last digit, which no table shows).
    assert_eq!(results2.records.len(), results.records.len());
    assert_eq!(results2.probes.len(), results.probes.len());
    assert!(!results2.probes.is_empty(), "the wire-size probe read back");
    assert_eq!(
        results2.benches.len(),
        2,
        "the codec and hop benchmarks read back"
    );
    let (a, b) = (
        build_report(&info2, &results2).markdown(),
        build_report(&info, &results).markdown(),
    );
    if a != b {
        let line = a
            .lines()
            .zip(b.lines())
            .find(|(x, y)| x != y)
            .map(|(x, y)| format!("read back: {x}\noriginal:  {y}"));
        panic!("the report read back differs: {line:?}");
    }
    rerender(&dir).unwrap();
    for f in [
        "report.md",
        "report.html",
        "report.json",
        "payload-throughput.svg",
        "pool-drops.svg",
    ] {
        assert!(dir.join(f).is_file(), "{f} not written");
    }
    // report.json holds the same tables as typed values: rendered again
    // from it, the Markdown is the same.
    let json = Report::read_json(&dir.join("report.json")).unwrap();
    let from_json = json.markdown();
    if from_json != b {
        let line = from_json
            .lines()
            .zip(b.lines())
            .find(|(x, y)| x != y)
            .map(|(x, y)| format!("from report.json: {x}\noriginal:         {y}"));
        panic!("the report rendered from report.json differs: {line:?}");
    }
    assert_eq!(json.run["experiment"], "all");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_tls_section_has_every_transport_in_cleartext_and_over_tls() {
    let (info, results) = common::synthetic(&["tls"], true, 2);
    let report = build_report(&info, &results);
    let empty = report.empty_cells();
    assert!(empty.is_empty(), "empty cells:\n{}", empty.join("\n"));
    let tls = report
        .sections
        .iter()
        .find(|s| s.id == "tls")
        .expect("a tls section");
    let table = tls
        .blocks
        .iter()
        .find_map(|b| match b {
            Block::Table(t) => Some(t),
            _ => None,
        })
        .expect("a table");
    // Every transport but QUIC's, which has no cleartext to set TLS against.
    let quic = transports::Transport::ALL
        .iter()
        .filter(|t| t.is_quic())
        .count();
    assert_eq!(
        table.rows.len(),
        transports::ALL.len() - quic,
        "every transport with a cleartext"
    );
    assert!(table.rows.iter().all(|r| !r[0].label().contains("h3")));
    for row in &table.rows {
        // TLS columns carry their ratio to cleartext.
        assert!(
            row[2].ratios().len() == 1 && row[4].ratios().len() == 1,
            "{row:?}"
        );
    }
    let close = table
        .rows
        .iter()
        .find(|r| r[0].label() == "h1-json-close")
        .expect("h1-json-close");
    assert!(
        close[7].to_string().ends_with(" · 1,000"),
        "one resumption per call: {}",
        close[7]
    );
    assert!(
        table
            .reading
            .contains("h1-json-close (1,000 per 1,000 calls)"),
        "{}",
        table.reading
    );
}

#[test]
fn every_ratio_pools_its_noise_over_enough_cells() {
    use lab::analysis::{Data, MIN_POOLED_DF};
    use lab::measure::figures::Metric;
    let (_, results) = common::synthetic(&["all"], true, 2);
    let data = Data::new(&results);
    // Some experiments own too few cells to pool alone (with 2 rounds, C
    // cells leave C − 1 degrees of freedom)...
    let mut per: std::collections::BTreeMap<&str, usize> = Default::default();
    for e in data.experiment.values() {
        *per.entry(e.as_str()).or_default() += 1;
    }
    let small: Vec<&&str> = per
        .iter()
        .filter(|(_, n)| (**n as f64 - 1.0) < MIN_POOLED_DF)
        .map(|(e, _)| e)
        .collect();
    assert!(!small.is_empty(), "{per:?}");
    // ...and theirs borrow the whole run's, so every cell's has enough.
    for c in data.cells.keys() {
        let n = data.noise(c, Metric::UpP50).expect("pooled noise");
        assert!(n.df >= MIN_POOLED_DF, "{} ({:?}): {n:?}", c.label(), small);
    }
}

#[test]
fn the_method_text_names_the_store_of_the_run() {
    let (mut info, results) = common::synthetic(&["payload"], true, 2);
    let memory = build_report(&info, &results).markdown();
    assert!(memory.contains("store: in memory"), "in-memory run");
    info.store = "Postgres at 127.0.0.1:5432".into();
    let pg = build_report(&info, &results).markdown();
    assert!(pg.contains("store: Postgres at 127.0.0.1:5432"));
    assert!(
        !pg.contains("in-memory"),
        "a Postgres run says nothing of memory"
    );
}

#[test]
fn a_round_with_too_many_bad_answers_is_left_out_and_said_so() {
    let (info, mut results) = common::synthetic(&["payload"], true, 2);
    // Round 2 of h2c-json at 1 order: 5% bad answers, fast ones.
    let r = results
        .records
        .iter_mut()
        .find(|r| r.cell.via == "h2c-json" && r.cell.orders == 1 && r.round == 2)
        .expect("the round");
    r.load.bad_answers = r.load.requests * 0.05;
    r.load.good = r.load.requests * 0.95;
    r.load.good_rate *= 10.0;
    let report = build_report(&info, &results);
    let md = report.markdown();
    assert!(
        md.contains("Rounds failed by their answers"),
        "the failure is reported"
    );
    // The throughput cell rests on round 1 alone: its min and max agree,
    // and the failed round's inflated rate is nowhere.
    let t = report
        .tables()
        .find(|t| t.caption.starts_with("Throughput"))
        .unwrap();
    let row = t.rows.iter().find(|r| r[0].label() == "h2c-json").unwrap();
    let (_, round1) = (
        (),
        lab::measure::figures::Measures::of(
            results
                .records
                .iter()
                .find(|r| r.cell.via == "h2c-json" && r.cell.orders == 1 && r.round == 1)
                .unwrap(),
        )
        .rate,
    );
    match &row[1] {
        lab::report::value::Value::Parts { parts } => match &parts[0] {
            lab::report::value::Value::Figure {
                median, min, max, ..
            } => {
                assert_eq!((*median, *min, *max), (round1, round1, round1));
            }
            v => panic!("{v:?}"),
        },
        v => panic!("{v:?}"),
    }
}
