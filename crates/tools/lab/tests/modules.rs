//! The crate's shape, checked from its source with the workspace's shared
//! checker ([`testkit::modules`]): no two modules of the library import
//! each other, directly or round a loop, whether as files or as sibling
//! modules taken with everything under them (tests left out); and the
//! session, the measurement layer, the analysis and the report name no
//! experiment (an experiment is one file under `experiments/`, or one
//! folder, and one line of its registry).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;

use testkit::modules::{Graph, code, modules, paths};

fn graph() -> Graph {
    Graph::of_crate(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn no_two_modules_import_each_other() {
    let g = graph();
    // The checker sees the imports it must: the session uses the runner,
    // the runner the services.
    let session = g.imports("session::execute");
    assert!(session.contains("measure::runner"), "{session:?}");
    assert!(g.imports("measure::runner").contains("measure::services"));
    assert!(
        g.imports("experiments::floor")
            .contains("experiments::payload")
    );
    g.assert_acyclic();
}

#[test]
fn the_layers_go_one_way() {
    let g = graph();
    let siblings = g.siblings();
    let reads = |a: &str, b: &str| siblings.get(a).is_some_and(|s| s.contains(b));
    // The analysis reads what the measurement layer recorded; the
    // measurement layer reads no analysis, and both use the statistics.
    assert!(reads("analysis", "measure"));
    assert!(
        !reads("measure", "analysis"),
        "{:?}",
        siblings.get("measure")
    );
    assert!(reads("measure", "stats") && reads("analysis", "stats"));
    // The statistics and the report's model know nothing above them.
    for low in ["stats", "report"] {
        for high in ["measure", "analysis", "session", "experiments"] {
            assert!(!reads(low, high), "{low} reads {high}");
        }
    }
}

#[test]
fn the_checker_finds_a_cycle_when_there_is_one() {
    let mut g = graph();
    g.edges
        .get_mut("measure::services")
        .unwrap()
        .insert("measure::runner".into());
    let c = g.file_cycle().expect("a cycle");
    assert!(c.contains(&"measure::runner".to_owned()), "{c:?}");

    // A file of the measurement layer reaching into the analysis makes the
    // two layers a loop, though no file imports one that imports it back.
    let mut g = graph();
    g.edges
        .get_mut("measure::runner")
        .unwrap()
        .insert("analysis".into());
    assert_eq!(g.file_cycle(), None);
    let c = g.sibling_cycle().expect("a loop between layers");
    assert!(
        c.contains(&"measure".to_owned()) && c.contains(&"analysis".to_owned()),
        "{c:?}"
    );

    let p = paths(
        "a::b",
        "use crate::x::{y, z::w};\nlet v = super::c::d();",
        &BTreeSet::new(),
    );
    assert!(p.contains(&vec!["x".to_owned(), "y".to_owned()]), "{p:?}");
    assert!(
        p.contains(&vec!["a".to_owned(), "c".to_owned(), "d".to_owned()]),
        "{p:?}"
    );
}

#[test]
fn only_the_experiments_name_an_experiment() {
    let names: Vec<&str> = lab::experiments::all().iter().map(|e| e.name()).collect();
    assert!(names.len() >= 10, "{names:?}");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for (m, p) in modules(&src) {
        if m.starts_with("experiments") || m == "experiment" || m == "cli" {
            continue;
        }
        // Tests may pick an experiment to test with; the code may not.
        let text = code(&std::fs::read_to_string(&p).unwrap());
        for n in &names {
            let module = n.replace('-', "_");
            for needle in [format!("\"{n}\""), format!("experiments::{module}")] {
                assert!(
                    !text.contains(&needle),
                    "{m} names the experiment {n} ({needle})"
                );
            }
        }
    }
}
