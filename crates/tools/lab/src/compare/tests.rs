use super::*;
use crate::report::{Section, Table};
use crate::session::RunInfo;

fn ratio(median: f64, low: f64, high: f64) -> Value {
    Value::Ratio { median, low, high }
}

fn report(cells: &[Value]) -> Report {
    let mut s = Section::new("payload", "Payload");
    s.table(Table {
        caption: "Throughput".into(),
        headers: vec!["transport".into(), "1 order".into()],
        rows: cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                vec![
                    Value::text(format!("t{i}")),
                    Value::parts(vec![Value::single(100.0, "req/s"), c.clone()]),
                ]
            })
            .collect(),
        reading: String::new(),
    });
    Report {
        sections: vec![s],
        ..Report::default()
    }
}

/// A baseline and two ratios: the A of several tests.
fn two_ratios() -> Report {
    report(&[
        Value::Baseline,
        ratio(1.5, 1.4, 1.6),
        ratio(0.5, 0.45, 0.55),
    ])
}

#[test]
fn agreement_is_counted_and_the_worst_miss_named() {
    let a = two_ratios();
    let b = report(&[
        Value::Baseline,
        ratio(1.55, 1.5, 1.7),
        ratio(0.8, 0.75, 0.85),
    ]);
    let text = compare(&a, &b, 5);
    // The baselines are left out: two ratios paired.
    assert!(text.contains("\n2 ratios in both reports"), "{text}");
    assert!(text.contains("inside A's stated spread: 1 (50%)"), "{text}");
    assert!(text.contains("overlap:            1 (50%)"), "{text}");
    assert!(
        text.contains("t2 / 1 order: A ×0.50 (0.45–0.55), B ×0.80"),
        "{text}"
    );
    assert!(!text.contains("t1 / 1 order: A"), "{text}");
    assert!(text.contains("payload         1 of 2    (50%)"), "{text}");
    // t1: 0.51 of A's upper half-interval; t2: 4.9 of it; median 2.72.
    assert!(
        text.contains("half-intervals: median 2.72 over 2 ratios"),
        "{text}"
    );
    // Half-widths ±6.9% and ±10.6%.
    assert!(text.contains("intervals are ±9% wide"), "{text}");
    // Neither report says which run it was.
    assert!(text.contains("warning: a report.json lacks"), "{text}");
}

#[test]
fn the_bound_passes_identical_runs_and_fails_a_regression_naming_it() {
    let a = report(&[
        Value::Baseline,
        ratio(1.5, 1.4, 1.6),
        ratio(0.5, 0.45, 0.55),
        ratio(2.0, 1.9, 2.1),
    ]);
    let (_, same) = compare_tally(&a, &a.clone(), 5, false);
    assert_eq!(same.paired, 3);
    assert!(same.verdict(0.0).is_ok(), "{:?}", same.verdict(0.0));
    // One transport got ×1.5 slower against the baseline.
    let b = report(&[
        Value::Baseline,
        ratio(1.5, 1.4, 1.6),
        ratio(0.75, 0.7, 0.8),
        ratio(2.0, 1.9, 2.1),
    ]);
    let (_, t) = compare_tally(&a, &b, 5, false);
    let fail = t.verdict(10.0).unwrap_err();
    assert!(
        fail.starts_with("fail: 1 of 3 of B's medians (33.3%)"),
        "{fail}"
    );
    assert!(fail.contains("t2 / 1 order: A ×0.50"), "{fail}");
    assert!(t.verdict(34.0).is_ok());
    // Nothing in common: a failure, not a pass.
    let (_, none) = compare_tally(&a, &Report::default(), 5, false);
    assert!(none.verdict(100.0).unwrap_err().contains("share no ratio"));
    assert!(
        none.verdict_moves(1.5)
            .unwrap_err()
            .contains("share no ratio")
    );
    // The ×1.5 move passes a bound of ×1.6 and fails one of ×1.4.
    let ok = t.verdict_moves(1.6).unwrap();
    assert!(ok.contains("the most: ×1.50"), "{ok}");
    let moved = t.verdict_moves(1.4).unwrap_err();
    assert!(moved.starts_with("fail: 1 of 3 ratios moved"), "{moved}");
    assert!(
        moved.contains("×1.50  payload / Throughput / t2 / 1 order: A ×0.50, B ×0.75"),
        "{moved}"
    );
    assert!(same.verdict_moves(1.0).is_ok());
}

#[test]
fn a_ratio_gone_from_the_second_run_fails_both_gates_naming_it() {
    let a = two_ratios();
    // t2's rounds were all dropped in B (too many bad answers): n/a, and
    // every other ratio agrees exactly.
    let b = report(&[
        Value::Baseline,
        ratio(1.5, 1.4, 1.6),
        Value::missing("every round had more than 1% bad answers"),
    ]);
    let (text, t) = compare_tally(&a, &b, 5, false);
    assert_eq!(t.paired, 1, "{text}");
    assert_eq!(
        t.missing,
        ["payload / Throughput / t2 / 1 order: A ×0.50, B n/a"]
    );
    assert!(
        text.contains("A's ratios missing from B (n/a there, or the row gone), 1:"),
        "{text}"
    );
    let moved = t.verdict_moves(1.5).unwrap_err();
    assert!(
        moved.starts_with("fail: 1 of A's ratios are missing from B"),
        "{moved}"
    );
    assert!(
        moved.contains("payload / Throughput / t2 / 1 order"),
        "{moved}"
    );
    assert!(t.verdict(100.0).unwrap_err().contains("t2 / 1 order"));
    // The row gone altogether fails the same way.
    let gone = report(&[Value::Baseline, ratio(1.5, 1.4, 1.6)]);
    let (_, t) = compare_tally(&a, &gone, 5, false);
    assert!(t.verdict_moves(1.5).is_err());
    // A ratio only B states is not A's to miss.
    let (_, t) = compare_tally(&gone, &a, 5, false);
    assert!(t.missing.is_empty());
    assert!(t.verdict_moves(1.5).is_ok());
    // Nor is a section B did not run: A ran naive too, B only payload.
    let mut both = a.clone();
    let mut naive = report(&[Value::Baseline, ratio(2.0, 1.9, 2.1)])
        .sections
        .remove(0);
    naive.id = "naive".into();
    both.sections.push(naive);
    let (text, t) = compare_tally(&both, &a, 5, false);
    assert!(t.missing.is_empty(), "{text}");
    assert!(t.verdict_moves(1.5).is_ok());
}

#[test]
fn runs_from_other_machines_commits_or_plans_are_named() {
    let (a, _) = crate::synthetic::run(&["payload", "naive"], true, 2);
    let mut b = a.clone();
    assert!(alike(&to(&a), &to(&b)).warnings.is_empty());
    b.machine.cores = 4;
    b.machine.git_commit = "0123456789ab".into();
    b.knobs.quick = false;
    b.plans.insert(
        "payload".into(),
        serde_json::json!({"transports": ["grpc"], "sizes": [1]}),
    );
    b.plans.remove("naive");
    b.knobs.cc = netpath::CongestionControl::Bbr;
    let seen = alike(&to(&a), &to(&b));
    let d = seen.warnings.join("\n");
    for needle in [
        "different TCP congestion control on the packet path: A cubic, B bbr",
        "different machines",
        "different commits",
        "naive is in A only",
    ] {
        assert!(d.contains(needle), "{needle}: {d}");
    }
    // A plan that differs is said once, where it decides what is compared.
    assert!(!d.contains("payload"), "{d}");
    assert_eq!(seen.narrowed["payload"], "sizes, transports");
}

fn to(info: &RunInfo) -> serde_json::Value {
    serde_json::to_value(info).expect("serialises")
}

#[test]
fn alike_tells_run_wide_differences_from_settings_and_from_cells() {
    let (a, _) = crate::synthetic::run(&["payload", "naive", "hop"], true, 2);
    assert_eq!(alike(&to(&a), &to(&a)), Alike::default());
    let mut b = a.clone();
    b.timing.rounds = 3;
    b.timing.duration_s = 3.0;
    b.store = "postgres://127.0.0.1".into();
    // payload measured fewer transports: the same way, fewer cells.
    b.plans.insert(
        "payload".into(),
        serde_json::json!({"transports": ["grpc"], "sizes": [1]}),
    );
    // naive with four times the callers: another way.
    let mut naive = a.plans["naive"].clone();
    naive["vus"] = serde_json::json!(128);
    b.plans.insert("naive".into(), naive);
    let seen = alike(&to(&a), &to(&b));
    assert_eq!(seen.run_wide.len(), 2, "{seen:?}");
    assert!(
        seen.run_wide[0].contains("A 2 rounds × 2 s after 1 s of warm-up, B 3 rounds × 3 s"),
        "{seen:?}"
    );
    assert!(seen.run_wide[1].contains("different stores"), "{seen:?}");
    assert_eq!(seen.narrowed["payload"], "sizes, transports");
    assert_eq!(seen.apart["naive"], "vus: A 32, B 128");
    assert!(!seen.apart.contains_key("hop") && !seen.narrowed.contains_key("hop"));
}

#[test]
fn an_experiment_planned_another_way_is_left_out_unless_asked() {
    let (info, _) = crate::synthetic::run(&["payload"], true, 2);
    let cells = [
        Value::Baseline,
        ratio(1.5, 1.4, 1.6),
        ratio(0.5, 0.45, 0.55),
    ];
    let mut a = report(&cells);
    a.run = to(&info);
    let mut b = a.clone();
    let mut other = info.clone();
    let mut plan = other.plans["payload"].clone();
    plan["vus"] = serde_json::json!(16);
    other.plans.insert("payload".into(), plan);
    b.run = to(&other);
    let (text, t) = compare_tally(&a, &b, 5, false);
    assert_eq!(t.paired, 0, "{text}");
    assert!(
        text.contains("left out: payload, planned with other settings (vus: A null, B 16)"),
        "{text}"
    );
    // Nothing compared fails any gate.
    assert!(t.verdict_moves(1.5).is_err());
    let (text, t) = compare_tally(&a, &b, 5, true);
    assert_eq!(t.paired, 2, "{text}");
    assert!(
        text.contains("NOT LIKE WITH LIKE: payload was planned with other settings"),
        "{text}"
    );
    // Fewer transports in B's plan: its shared cells are compared.
    let mut fewer = info.clone();
    let mut plan = fewer.plans["payload"].clone();
    plan["transports"] = serde_json::json!(["h1-json", "grpc"]);
    fewer.plans.insert("payload".into(), plan);
    b.run = to(&fewer);
    let (text, t) = compare_tally(&a, &b, 5, false);
    assert_eq!(t.paired, 2, "{text}");
    assert!(
        text.contains("payload: its plans differ only in which cells they hold (transports)"),
        "{text}"
    );
    // B asked for fewer cells: what it did not measure is not missing.
    let mut fewer_cells = report(&cells[..2]);
    fewer_cells.run = to(&fewer);
    let (text, t) = compare_tally(&a, &fewer_cells, 5, false);
    assert_eq!((t.paired, t.missing.len()), (1, 0), "{text}");
    assert!(t.verdict_moves(1.5).is_ok());
}

#[test]
fn runs_timed_differently_are_refused_unless_asked() {
    let dir = std::env::temp_dir().join(format!("lab-compare-alike-{}", std::process::id()));
    let (info, _) = crate::synthetic::run(&["payload"], true, 2);
    let mut a = report(&[Value::Baseline, ratio(1.5, 1.4, 1.6)]);
    a.run = to(&info);
    let mut b = a.clone();
    let mut longer = info.clone();
    longer.timing.rounds = 3;
    b.run = to(&longer);
    let (pa, pb) = (dir.join("a.json"), dir.join("b.json"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(&pa, a.json().unwrap()).unwrap();
    std::fs::write(&pb, b.json().unwrap()).unwrap();
    let err = run(&pa, &pb, 5, false, &[]).unwrap_err();
    let refused = err.downcast_ref::<NotAlike>().expect("a refusal");
    assert!(
        refused
            .0
            .starts_with("not compared: the runs were timed differently: A 2 rounds"),
        "{refused}"
    );
    let (text, tally) = run(&pa, &pb, 5, true, &[]).unwrap();
    assert!(
        text.contains("\nNOT LIKE WITH LIKE: the runs were timed differently"),
        "{text}"
    );
    assert_eq!(tally.paired, 1);
    // The same timing is compared without asking.
    assert_eq!(run(&pa, &pa, 5, false, &[]).unwrap().1.paired, 1);
    std::fs::remove_dir_all(&dir).unwrap();
}
