//! The README's time table against the lab's own plans: each row's quoted
//! estimate is what `lab run` would print at its start today, and each
//! measured time is within 30% of that estimate, so that neither the table
//! nor the estimate can drift away from the other unnoticed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

/// How far a quoted time and the lab's estimate may be apart, as a share of
/// the larger.
const TOLERANCE: f64 = 0.30;

mod common;

fn readme() -> String {
    std::fs::read_to_string(common::root().join("README.md")).expect("reading README.md")
}

/// `1 h 05 min`, `29 min 51 s`, `48 s` in seconds; None for anything else.
fn seconds(text: &str) -> Option<f64> {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.is_empty() || !words.len().is_multiple_of(2) {
        return None;
    }
    let mut total = 0.0;
    for pair in words.chunks(2) {
        let n: f64 = pair[0].parse().ok()?;
        total += n * match pair[1] {
            "h" => 3600.0,
            "min" => 60.0,
            "s" => 1.0,
            _ => return None,
        };
    }
    Some(total)
}

/// A row of the time table: its plan, the experiment and `--quick` its
/// command runs, and its cells.
struct Row {
    plan: String,
    experiment: String,
    quick: bool,
    measured: String,
    estimate: String,
}

fn rows(readme: &str) -> Vec<Row> {
    let table = readme
        .split("| plan | command | build, fresh clone | measured, before any benchmark | lab's estimate | in all |")
        .nth(1)
        .expect("the README's time table");
    table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            assert_eq!(cells.len(), 6, "a row of six cells: {l}");
            let command = cells[1].trim_matches('`');
            let args = command
                .split(" -- run ")
                .nth(1)
                .unwrap_or_else(|| panic!("not a lab run command: {command}"));
            let mut words = args.split_whitespace();
            let experiment = words.next().expect("an experiment").to_owned();
            let rest: Vec<&str> = words.collect();
            assert!(
                rest.iter().all(|w| *w == "--quick"),
                "the table quotes default timings only: {command}"
            );
            Row {
                plan: cells[0].to_owned(),
                experiment,
                quick: rest.contains(&"--quick"),
                measured: cells[3].to_owned(),
                estimate: cells[4].to_owned(),
            }
        })
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= TOLERANCE * a.max(b)
}

#[test]
fn the_time_table_quotes_the_labs_estimates_and_times_within_30_percent_of_them() {
    let rows = rows(&readme());
    let plans: Vec<&str> = rows.iter().map(|r| r.plan.as_str()).collect();
    for want in ["taster", "quick", "full"] {
        assert!(plans.contains(&want), "no {want} row: {plans:?}");
    }
    let mut measured = 0;
    for r in &rows {
        let (_, estimate) = lab::session::plan::estimate(&r.experiment, r.quick).unwrap();
        let quoted = seconds(&r.estimate)
            .unwrap_or_else(|| panic!("{}: the estimate {:?} is not a time", r.plan, r.estimate));
        assert!(
            close(quoted, estimate),
            "{}: the README quotes an estimate of {}, the lab's is {estimate:.0} s",
            r.plan,
            r.estimate
        );
        if let Some(m) = seconds(&r.measured) {
            measured += 1;
            assert!(
                close(m, estimate),
                "{}: measured {} against the lab's estimate of {estimate:.0} s: more than {}% apart",
                r.plan,
                r.measured,
                TOLERANCE * 100.0
            );
        } else {
            assert!(
                r.measured.starts_with("n/a"),
                "{}: {:?} is neither a time nor n/a with its reason",
                r.plan,
                r.measured
            );
        }
    }
    assert!(measured >= 2, "fewer than two measured rows");
}

#[test]
fn times_are_read_as_written_and_only_then() {
    assert_eq!(seconds("29 min 51 s"), Some(1791.0));
    assert_eq!(seconds("1 h 05 min"), Some(3900.0));
    assert_eq!(seconds("48 s"), Some(48.0));
    assert_eq!(seconds("n/a: never run"), None);
    assert_eq!(seconds("about 3 min"), None);
    assert!(close(100.0, 75.0) && !close(100.0, 65.0) && !close(65.0, 100.0));
}
