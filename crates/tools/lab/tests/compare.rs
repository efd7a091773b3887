//! `lab compare A B --fail-outside PCT` as CI would run it, the real
//! binary on two report.json files: identical runs pass (exit 0), a run
//! where one ratio moved ×1.5 fails (exit 3) naming it, under
//! `--fail-outside` and under `--max-move`, a report with nothing in
//! common fails rather than passing vacuously, `--only` narrows the gate to
//! the tables it names, and a run timed differently
//! is refused (exit 4) unless `--across-plans`.

mod common;

use std::path::Path;
use std::process::Command;

use lab::session::build_report;

/// `lab compare OPTIONS A B`: its exit code, stdout and stderr.
fn lab_compare(options: &[&str], a: &Path, b: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lab"))
        .arg("compare")
        .args(options)
        .arg(a)
        .arg(b)
        .output()
        .expect("lab runs");
    (
        out.status.code().expect("an exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn compare(a: &Path, b: &Path, pct: &str) -> (i32, String, String) {
    lab_compare(&["--fail-outside", pct], a, b)
}

/// Multiplies the first ratio of `json` by `by` (median and interval);
/// returns whether there was one.
fn move_first_ratio(json: &mut serde_json::Value, by: f64) -> bool {
    match json {
        serde_json::Value::Object(m) => {
            if m.get("kind").and_then(|k| k.as_str()) == Some("ratio") {
                for f in ["median", "low", "high"] {
                    let v = m[f].as_f64().expect("a number") * by;
                    m.insert(f.into(), serde_json::json!(v));
                }
                return true;
            }
            m.values_mut().any(|v| move_first_ratio(v, by))
        }
        serde_json::Value::Array(a) => a.iter_mut().any(|v| move_first_ratio(v, by)),
        _ => false,
    }
}

#[test]
fn compare_fails_past_its_bound_and_passes_identical_runs() {
    let (info, results) = common::synthetic(&["payload"], true, 3);
    let report = build_report(&info, &results);
    let a = common::temp_dir("compare-a");
    report.write(&a).unwrap();
    let same = common::temp_dir("compare-same");
    report.write(&same).unwrap();

    let (code, out, err) = compare(&a, &same, "0");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("pass: 0 of "), "{out}");

    // One ratio ×1.5 (a transport that got slower against its baseline).
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("report.json")).unwrap()).unwrap();
    assert!(move_first_ratio(&mut json, 1.5), "the report has a ratio");
    let slower = common::temp_dir("compare-slower");
    std::fs::write(slower.join("report.json"), json.to_string()).unwrap();
    let (code, out, err) = compare(&a, &slower, "0");
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.starts_with("fail: 1 of "), "{err}");
    assert!(err.contains("% outside"), "the ratio is named: {err}");
    // A looser bound lets one ratio of many through.
    let (code, _, err) = compare(&a, &slower, "50");
    assert_eq!(code, 0, "{err}");
    // A gross move fails --max-move whatever the intervals allow.
    let moved = |x: &str| {
        let (code, _, err) = lab_compare(&["--max-move", x], &a, &slower);
        (code, err)
    };
    let (code, err) = moved("1.4");
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("moved by more than ×1.4"), "{err}");
    assert_eq!(moved("1.6").0, 0);
    // A named set of ratios: the moved one is in the throughput table, so
    // naming only the CPU table passes and naming throughput fails.
    let only = |tables: &str| {
        let (code, out, _) = lab_compare(&["--max-move", "1.4", "--only", tables], &a, &slower);
        (code, out)
    };
    let (code, out) = only("cpu per request");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("only the tables whose section or caption holds \"cpu per request\""),
        "{out}"
    );
    assert_eq!(only("upstream p95,THROUGHPUT").0, 3);
    assert_eq!(moved("0.5").0, 2, "a factor under 1 is refused");

    // Nothing in common: a failure, not a pass.
    let empty = common::temp_dir("compare-empty");
    lab::report::Report::default().write(&empty).unwrap();
    let (code, _, err) = compare(&a, &empty, "100");
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("share no ratio"), "{err}");

    // B timed differently: refused with 4, compared under a banner when asked.
    let (mut longer, _) = common::synthetic(&["payload"], true, 3);
    longer.timing.duration_s *= 2.0;
    let timed = common::temp_dir("compare-timed");
    build_report(&longer, &results).write(&timed).unwrap();
    let (code, out, err) = compare(&a, &timed, "100");
    assert_eq!(code, 4, "{out}{err}");
    assert!(
        err.contains("not compared: the runs were timed differently"),
        "{err}"
    );
    assert!(out.is_empty(), "nothing compared is printed: {out}");
    let (code, out, _) = lab_compare(&["--across-plans", "--max-move", "1.01"], &a, &timed);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("NOT LIKE WITH LIKE: the runs were timed differently"),
        "{out}"
    );

    // A bound that is no percentage is refused by the parser.
    let (code, _, err) = compare(&a, &same, "150");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a percentage"), "{err}");
}
