//! report.html rendered by a real browser (headless Chromium): the page
//! loads on its own (no network), and the DOM it builds has the charts and
//! the tables.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
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
    // Every chart in its section, and the summary's again at the top.
    assert_eq!(
        dom.matches("<figure class=\"chart\">").count(),
        charts + report.summary_charts().len(),
        "figures"
    );
    assert_eq!(report.summary_charts().len(), lab::report::SUMMARY_CHARTS);
    assert!(dom.matches("<svg").count() >= charts, "svg elements");
    assert!(dom.contains("<polyline"), "line charts have lines");
    assert_eq!(
        dom.matches("<table class=\"data\" id=\"").count(),
        tables,
        "tables"
    );
    // Each finding of the summary links to a table the page has.
    for (_, id, _) in report.findings() {
        assert!(dom.contains(&format!("href=\"#{id}\"")), "{id}");
        assert!(
            dom.contains(&format!("<table class=\"data\" id=\"{id}\">")),
            "{id}"
        );
    }
    assert!(dom.contains("<caption>Throughput, req/s (higher is better)</caption>"));
    assert!(dom.contains("Transport lab: all"));
    assert!(!dom.contains("n/a"), "an empty cell reached the page");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the page looks like to a reader of a `width` × `height` window:
/// the script measures the laid-out page and leaves its findings in the
/// DOM Chromium dumps.
fn layout(chromium: &Path, page: &str, width: u32, height: u32) -> serde_json::Value {
    const PROBE: &str = r#"<script>
(function () {
  var W = window.innerWidth, H = window.innerHeight, over = [];
  document.querySelectorAll('body *').forEach(function (e) {
    for (var p = e.parentElement; p; p = p.parentElement) {
      if (p.classList && p.classList.contains('scroll')) return;
    }
    var r = e.getBoundingClientRect();
    if (r.width > 0 && r.right > W + 0.5) {
      over.push(e.tagName + (e.id ? '#' + e.id : '') + ' right=' + Math.round(r.right));
    }
  });
  var top = function (sel) {
    var e = document.querySelector(sel);
    return e ? e.getBoundingClientRect() : null;
  };
  var summary = top('#summary'), chart = top('#summary figure.chart'),
      finding = top('#summary ul.findings li'), method = document.getElementById('method');
  var out = document.createElement('pre');
  out.id = 'layout-probe';
  out.textContent = JSON.stringify({
    width: W, height: H, scroll_width: document.documentElement.scrollWidth,
    over: over.slice(0, 20), overflowing: over.length,
    summary_top: summary ? summary.top : null,
    chart_top: chart ? chart.top : null, chart_bottom: chart ? chart.bottom : null,
    finding_top: finding ? finding.top : null,
    method_open: method ? method.open : null
  });
  document.body.appendChild(out);
})();
</script>"#;
    let dir = common::temp_dir("layout");
    let file = dir.join("report.html");
    std::fs::write(&file, page.replace("</body>", &format!("{PROBE}</body>"))).unwrap();
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--disable-background-networking",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", file.display()))
        .output()
        .expect("running chromium");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    let json = dom
        .split("<pre id=\"layout-probe\">")
        .nth(1)
        .and_then(|r| r.split("</pre>").next())
        .expect("the probe's findings in the DOM")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

#[test]
fn the_sample_report_opens_with_its_findings_and_a_chart_and_never_scrolls_sideways() {
    let chromium = common::require_chromium();
    let page = std::fs::read_to_string(common::root().join("docs/sample-report/report.html"))
        .expect("the committed sample report");
    // The method and the settings come after the summary, folded.
    let at = |needle: &str| page.find(needle).unwrap_or_else(|| panic!("no {needle}"));
    assert!(at("<section id=\"summary\">") < at("<details id=\"method\">"));
    assert!(at("<details id=\"method\">") < at("user-service fetches a user's orders"));
    assert!(at("<details id=\"method\">") < at("<table class=\"meta\">"));
    for (width, height) in [(1280, 800), (1400, 900)] {
        let l = layout(&chromium, &page, width, height);
        let num = |k: &str| l[k].as_f64().unwrap_or_else(|| panic!("{k}: {l}"));
        assert_eq!(num("width"), f64::from(width), "the window: {l}");
        assert!(
            num("scroll_width") <= num("width"),
            "the page scrolls sideways at {width} px: {l}"
        );
        assert_eq!(num("overflowing"), 0.0, "elements past the right edge: {l}");
        let h = f64::from(height);
        assert!(num("summary_top") < h / 4.0, "the summary starts low: {l}");
        assert!(
            num("chart_top") >= 0.0 && num("chart_bottom") <= h,
            "no whole chart on the first screen: {l}"
        );
        assert!(
            num("finding_top") < h,
            "no finding on the first screen: {l}"
        );
        assert_eq!(l["method_open"], false, "the method is folded: {l}");
    }
    // And the probe can fail: a page forced wider than the window is caught.
    let wide = page.replace("</body>", "<div style=\"width:3000px\">wide</div></body>");
    let l = layout(&chromium, &wide, 1280, 800);
    assert!(l["overflowing"].as_f64().unwrap_or(0.0) > 0.0, "{l}");
}
