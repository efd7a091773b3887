//! user-service's modules import each other without a cycle: between files,
//! and between sibling modules each taken with everything under it (see
//! `testkit::modules`). A layer never reaches back into the one above it.

use std::collections::BTreeSet;

use testkit::modules::Graph;

fn graph() -> Graph {
    Graph::of_crate(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    graph().assert_acyclic();
}

#[test]
fn the_checker_sees_the_imports_it_must_see() {
    let g = graph();
    let siblings = g.siblings();
    let imports = |m: &str| siblings.get(m).cloned().unwrap_or_default();
    // Between the crate's top modules: the boundaries call the use cases,
    // which call order-service through the port.
    assert!(imports("rest").contains("upstream"), "{siblings:#?}");
    assert!(imports("rest").contains("service"), "{siblings:#?}");
    assert!(imports("service").contains("upstream"), "{siblings:#?}");
    assert!(imports("startup").contains("settings"), "{siblings:#?}");
    // Inside the outbound port: the adapters import what they share, the
    // shared machinery the port's types, and the table every adapter.
    assert!(
        imports("upstream::rest").contains("upstream::shared"),
        "{siblings:#?}"
    );
    assert!(
        imports("upstream::shared").contains("upstream::port"),
        "{siblings:#?}"
    );
    assert!(
        g.imports("upstream::shared::h2direct")
            .contains("upstream::shared::h2"),
        "{:?}",
        g.imports("upstream::shared::h2direct")
    );
    let table = g.imports("upstream");
    for adapter in ["rest", "connect", "grpc", "bidi", "tuned", "tcp"] {
        assert!(
            table.contains(&format!("upstream::{adapter}")),
            "{adapter}: {table:?}"
        );
    }
    // And what must not be: an adapter importing another.
    for adapter in ["rest", "connect", "grpc", "bidi", "tuned", "tcp"] {
        let from = imports(&format!("upstream::{adapter}"));
        for other in ["rest", "connect", "grpc", "bidi", "tuned", "tcp"] {
            assert!(
                !from.contains(&format!("upstream::{other}")),
                "{adapter} imports {other}"
            );
        }
    }
}

/// The modules the `# Layout` section of `src/lib.rs` lists, in its order.
fn layout() -> Vec<String> {
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs"))
        .expect("reading src/lib.rs");
    let section = lib
        .split("//! # Layout")
        .nth(1)
        .expect("a # Layout section in src/lib.rs");
    section
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("//!"))
        .filter_map(|l| {
            l.trim_start_matches("//!")
                .trim_start()
                .strip_prefix("- [`")
        })
        .filter_map(|l| l.split_once("`]").map(|(m, _)| m.to_owned()))
        .collect()
}

#[test]
fn the_layout_lists_every_module_below_those_it_imports() {
    let g = graph();
    let listed = layout();
    let modules: BTreeSet<&String> = g.edges.keys().collect();
    assert_eq!(
        listed.iter().collect::<BTreeSet<_>>(),
        modules,
        "the # Layout of src/lib.rs lists other modules than src/ has"
    );
    assert_eq!(
        listed.len(),
        modules.len(),
        "a module listed twice: {listed:?}"
    );
    let at = |m: &str| listed.iter().position(|l| l == m);
    for (m, deps) in &g.edges {
        for d in deps {
            let child = d.starts_with(&format!("{m}::"));
            assert!(
                child || at(d) < at(m),
                "{m} imports {d}, which the # Layout of src/lib.rs lists below it"
            );
        }
    }
}
