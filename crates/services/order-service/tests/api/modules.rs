//! order-service's modules import each other without a cycle, between files
//! and between sibling modules each taken with what is under it (see
//! `testkit::modules`).

use testkit::modules::Graph;

fn graph() -> Graph {
    Graph::of_crate(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    graph().assert_acyclic();
}

/// The graph is the real one, so the check above cannot pass on a graph
/// that missed the imports.
#[test]
fn the_graph_holds_imports_the_code_makes() {
    let g = graph();
    for (from, to) in [
        ("rest", "store"),
        ("service", "store"),
        ("startup", "store::memory"),
        ("store", "store::postgres"),
        ("store::memory", "store::port"),
        ("store::postgres", "store::port"),
    ] {
        assert!(g.imports(from).contains(to), "{from} imports {to}: {g:#?}");
    }
    // The stores reach what they share through the leaf, not their parent.
    for store in ["store::memory", "store::postgres"] {
        assert!(!g.imports(store).contains("store"), "{store}: {g:#?}");
    }
    assert!(g.imports("store::port").is_empty(), "{g:#?}");
}
