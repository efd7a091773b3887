//! report.html rendered by a real browser (headless Chromium): the page
//! loads on its own (no network), and the DOM it builds has the charts and
//! the tables.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use lab::session::build_report;

#[test]
fn chromium_renders_the_report_with_its_charts_and_tables() {
    let chromium = common::require_chromium();
    let (info, results) = common::synthetic(&["all"], true, 2);
    let report = build_report(&info, &results);
    let dir = common::temp_dir("html");
    report.write(&dir).unwrap();
    let page = dir.join("report.html");
    let profile = dir.join("chromium-profile");
    let out = Command::new(&chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("running chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    let charts = report.charts().count();
    let tables = report.tables().count();
    assert!(
        charts >= 4 && tables >= 10,
        "{charts} charts, {tables} tables"
    );
    // The parsed DOM, not the file: Chromium rebuilt these elements.
    assert_eq!(
        dom.matches("<figure class=\"chart\">").count(),
        charts,
        "figures"
    );
    assert!(dom.matches("<svg").count() >= charts, "svg elements");
    assert!(dom.contains("<polyline"), "line charts have lines");
    assert_eq!(
        dom.matches("<table class=\"data\">").count(),
        tables,
        "tables"
    );
    assert!(dom.contains("<caption>Throughput, req/s (higher is better)</caption>"));
    assert!(dom.contains("Transport lab: all"));
    assert!(!dom.contains("n/a"), "an empty cell reached the page");
    let _ = std::fs::remove_dir_all(&dir);
}
