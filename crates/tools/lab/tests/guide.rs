//! The README's decision guide ("What the lab found") against the sample
//! report committed under `docs/sample-report/`: every figure the guide
//! quotes is a link to its report section followed by a comment naming the
//! cell it comes from, and that cell, read from `report.json` and rendered
//! as `report.md` renders it, must hold the quoted text. A ratio quoted as
//! a finding must have a rerun interval that excludes ×1. No other figure
//! may stand in the guide unquoted, and the sample report must be whole:
//! its Markdown and HTML are what its JSON renders to, and every chart it
//! links is there.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use lab::report::value::Value;
use lab::report::{Block, Report, Table};

const HEADING: &str = "## What the lab found";
const REPORT_MD: &str = "docs/sample-report/report.md";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn sample_dir() -> PathBuf {
    root().join("docs/sample-report")
}

fn report() -> Report {
    Report::read_json(&sample_dir().join("report.json")).expect("the sample report's report.json")
}

/// The guide: the README from its heading to the next `## ` heading.
fn guide() -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme
        .find(&format!("\n{HEADING}\n"))
        .unwrap_or_else(|| panic!("the README has no {HEADING:?} section"));
    let body = &readme[start + 1..];
    let end = body[HEADING.len()..]
        .find("\n## ")
        .map_or(body.len(), |e| e + HEADING.len());
    body[..end].to_owned()
}

/// One quoted figure: `[TEXT](docs/sample-report/report.md#ANCHOR)<!-- SPEC -->`.
#[derive(Debug)]
struct Quote {
    text: String,
    anchor: String,
    spec: String,
    /// Where the whole quote lies in the guide (bytes).
    span: std::ops::Range<usize>,
}

fn quotes(g: &str) -> Vec<Quote> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = g[from..].find("<!--") {
        let open = from + at;
        let close = open
            + g[open..]
                .find("-->")
                .unwrap_or_else(|| panic!("an unclosed comment in the guide at byte {open}"));
        let spec = g[open + 4..close].trim().to_owned();
        let before = &g[..open];
        assert!(
            before.ends_with(')'),
            "the comment <!-- {spec} --> does not follow a link to the sample report"
        );
        let link_start = before
            .rfind("](")
            .unwrap_or_else(|| panic!("no link before <!-- {spec} -->"));
        let target = &before[link_start + 2..before.len() - 1];
        let text_start = before[..link_start]
            .rfind('[')
            .unwrap_or_else(|| panic!("no link text before <!-- {spec} -->"));
        let text = before[text_start + 1..link_start].to_owned();
        let (path, anchor) = target
            .split_once('#')
            .unwrap_or_else(|| panic!("the link {target:?} names no section"));
        assert_eq!(path, REPORT_MD, "the quote {text:?} links elsewhere");
        out.push(Quote {
            text,
            anchor: anchor.to_owned(),
            spec,
            span: text_start..close + 3,
        });
        from = close + 3;
    }
    out
}

/// A quote's comment split into its fields: `section | caption's
/// beginning | row | column [| same]`.
fn fields(spec: &str) -> Vec<&str> {
    spec.split(" | ").map(str::trim).collect()
}

/// The cell a quote's comment names, where the row is its leading label
/// cells joined by " / ".
fn cell<'r>(r: &'r Report, spec: &str) -> &'r Value {
    let parts = fields(spec);
    assert!(
        parts.len() == 4 || parts.len() == 5,
        "{spec:?}: expected `section | caption | row | column [| same]`"
    );
    let (sid, caption, row, column) = (parts[0], parts[1], parts[2], parts[3]);
    let section = r
        .sections
        .iter()
        .find(|s| s.id == sid)
        .unwrap_or_else(|| panic!("{spec:?}: the sample report has no section {sid:?}"));
    let tables: Vec<&Table> = section
        .tables()
        .filter(|t| t.caption.starts_with(caption))
        .collect();
    assert_eq!(
        tables.len(),
        1,
        "{spec:?}: {} tables of {sid:?} have a caption beginning {caption:?}; captions: {:?}",
        tables.len(),
        section.tables().map(|t| &t.caption).collect::<Vec<_>>()
    );
    let t = tables[0];
    let col = t
        .headers
        .iter()
        .position(|h| h == column)
        .unwrap_or_else(|| panic!("{spec:?}: no column {column:?}; columns: {:?}", t.headers));
    let labels: Vec<&str> = row.split(" / ").collect();
    let rows: Vec<&Vec<Value>> = t
        .rows
        .iter()
        .filter(|cells| {
            labels.len() <= cells.len()
                && labels
                    .iter()
                    .zip(cells.iter())
                    .all(|(l, c)| c.label() == *l)
        })
        .collect();
    assert_eq!(
        rows.len(),
        1,
        "{spec:?}: {} rows match {row:?}; rows: {:?}",
        rows.len(),
        t.rows
            .iter()
            .map(|c| c
                .iter()
                .take(labels.len())
                .map(Value::label)
                .collect::<Vec<_>>()
                .join(" / "))
            .collect::<Vec<_>>()
    );
    &rows[0][col]
}

/// Whether `needle` stands in `hay` as a whole figure: not the beginning
/// or the end of a longer number.
fn holds(hay: &str, needle: &str) -> bool {
    let numeric = |c: char| c.is_ascii_digit() || c == '.' || c == ',';
    hay.match_indices(needle).any(|(i, _)| {
        let before = hay[..i].chars().next_back();
        let after = hay[i + needle.len()..].chars().next();
        let starts_num = needle.chars().next().is_some_and(numeric);
        let ends_num = needle.chars().next_back().is_some_and(numeric);
        let cut_before = starts_num && before.is_some_and(numeric);
        let cut_after = ends_num && after.is_some_and(numeric);
        !cut_before && !cut_after
    })
}

/// The ratio a cell holds, alone or among its parts.
fn ratio(v: &Value) -> Option<(f64, f64)> {
    match v {
        Value::Ratio { low, high, .. } => Some((*low, *high)),
        Value::Parts { parts } => parts.iter().find_map(ratio),
        _ => None,
    }
}

#[test]
fn every_figure_the_guide_quotes_is_the_sample_reports() {
    let g = guide();
    let r = report();
    let qs = quotes(&g);
    assert!(
        qs.len() >= 10,
        "the guide quotes only {} figures from the sample report",
        qs.len()
    );
    let mut wrong = Vec::new();
    for q in &qs {
        let parts = fields(&q.spec);
        let sid = parts[0];
        assert_eq!(
            q.anchor, sid,
            "{:?} links to #{} but quotes a cell of {sid:?}",
            q.text, q.anchor
        );
        let v = cell(&r, &q.spec);
        let rendered = v.to_string();
        if q.text.trim().is_empty() || !holds(&rendered, &q.text) {
            wrong.push(format!(
                "{:?} is not in the cell <!-- {} -->, which reads {rendered:?}",
                q.text, q.spec
            ));
            continue;
        }
        let same = parts.get(4).copied();
        if let (Some((low, high)), true) = (ratio(v), q.text.contains('×')) {
            let includes_one = low <= 1.0 && high >= 1.0;
            match same {
                Some("same") if !includes_one => wrong.push(format!(
                    "{:?} (<!-- {} -->) is quoted as no difference, but its interval \
                     {low:.2}–{high:.2} excludes ×1",
                    q.text, q.spec
                )),
                Some("same") => {}
                Some(other) => wrong.push(format!("<!-- {} -->: unknown mark {other:?}", q.spec)),
                None if includes_one => wrong.push(format!(
                    "{:?} (<!-- {} -->) is quoted as a finding, but its interval \
                     {low:.2}–{high:.2} includes ×1",
                    q.text, q.spec
                )),
                None => {}
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A figure in prose: a ratio, a percentage, or a number with a unit of
/// time, rate or size that is not a condition (ms and s are conditions:
/// round-trip times and durations).
fn loose_figures(text: &str) -> Vec<String> {
    const UNITS: [&str; 9] = [
        "µs",
        "req/s",
        "B",
        "KB",
        "MB",
        "KiB",
        "MiB",
        "bytes",
        "instructions",
    ];
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let times = c == '×' && chars.get(i + 1).is_some_and(char::is_ascii_digit);
        let starts = c.is_ascii_digit() && (i == 0 || !chars[i - 1].is_alphanumeric());
        if !times && !starts {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < chars.len() && (chars[j].is_ascii_digit() || chars[j] == '.' || chars[j] == ',') {
            j += 1;
        }
        let number: String = chars[i..j].iter().collect();
        if times {
            out.push(number.trim_end_matches(['.', ',']).to_owned());
            i = j;
            continue;
        }
        let rest: String = chars[j..(j + 14).min(chars.len())].iter().collect();
        let rest = rest.strip_prefix(' ').unwrap_or(&rest);
        if rest.starts_with('%') {
            out.push(format!("{number}%"));
        } else if let Some(u) = UNITS.iter().find(|u| {
            rest.starts_with(*u)
                && !rest[u.len()..]
                    .chars()
                    .next()
                    .is_some_and(char::is_alphanumeric)
        }) {
            out.push(format!("{number} {u}"));
        }
        i = j.max(i + 1);
    }
    out
}

#[test]
fn the_guide_states_no_figure_it_does_not_quote() {
    let g = guide();
    let mut rest = String::new();
    let mut at = 0;
    for q in quotes(&g) {
        rest.push_str(&g[at..q.span.start]);
        rest.push_str("[quoted]");
        at = q.span.end;
    }
    rest.push_str(&g[at..]);
    // Two figures define the notation rather than report a finding.
    let rest = rest.replace("95% rerun interval", "rerun interval");
    let loose: Vec<String> = loose_figures(&rest)
        .into_iter()
        .filter(|f| f != "×1")
        .collect();
    assert!(
        loose.is_empty(),
        "figures in the guide that quote no cell of the sample report: {loose:?}"
    );
}

#[test]
fn the_loose_figure_check_finds_what_it_should() {
    assert_eq!(
        loose_figures("gRPC ran ×1.4 faster, 12% less, 85 µs, 9,000 req/s, 412 B"),
        ["×1.4", "12%", "85 µs", "9,000 req/s", "412 B"]
    );
    assert!(
        loose_figures("at 20 ms, 100 Mbit/s, 1,000 orders, 3 replicas, h2c, x86_64").is_empty()
    );
}

#[test]
fn the_guide_names_the_sample_reports_command() {
    let r = report();
    let command = r.run["command"]
        .as_str()
        .expect("report.json names its command");
    assert!(
        guide().contains(&format!("`{command}`")),
        "the guide does not give the sample report's command `{command}`"
    );
    let outcome = r.run["outcome"].as_str().unwrap_or_default();
    assert!(
        outcome.starts_with("complete"),
        "the sample report is of an unfinished run: {outcome:?}"
    );
}

#[test]
fn the_sample_report_is_whole() {
    let dir = sample_dir();
    let mut r = report();
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md == r.markdown(),
        "report.md is not what report.json renders to"
    );
    let mut charts = 0;
    for s in &mut r.sections {
        for b in &mut s.blocks {
            if let Block::Chart(c) = b {
                let p = dir.join(&c.file);
                c.svg = std::fs::read_to_string(&p)
                    .unwrap_or_else(|e| panic!("the chart {} report.md links: {e}", p.display()));
                assert!(
                    c.svg.trim_start().starts_with("<svg") && c.svg.trim_end().ends_with("</svg>"),
                    "{} is not an SVG picture",
                    p.display()
                );
                charts += 1;
            }
        }
    }
    assert!(charts > 0, "the sample report has no chart");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(
        html == r.html(),
        "report.html is not what report.json and its charts render to"
    );
    let svgs = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "svg"))
        .count();
    assert_eq!(
        svgs, charts,
        "docs/sample-report holds SVGs its report does not link"
    );
}
