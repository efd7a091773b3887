//! The module-cycle check over every crate of the workspace, read from
//! `cargo metadata` (the oracle for what the workspace holds): no crate's
//! library has two modules that import each other, as files or as sibling
//! modules taken with everything under them. The crates' own tests check
//! their layers beyond that; this one sees the crates those tests skip and
//! any crate added later.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use testkit::modules::Graph;

/// Every workspace member: its name and manifest directory.
fn members() -> Vec<(String, PathBuf)> {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let manifest = Path::new(p["manifest_path"].as_str().expect("a manifest path"));
            (
                p["name"].as_str().expect("a name").to_owned(),
                manifest.parent().expect("a directory").to_path_buf(),
            )
        })
        .collect()
}

#[test]
fn no_crate_has_an_import_cycle() {
    let members = members();
    let names: Vec<&str> = members.iter().map(|(n, _)| n.as_str()).collect();
    // The metadata reaches the crates the per-crate tests skip.
    for expected in [
        "tls",
        "delay-proxy",
        "netpath",
        "testkit",
        "lab",
        "order-service",
    ] {
        assert!(names.contains(&expected), "{expected} not in {names:?}");
    }
    let mut checked = Vec::new();
    let mut cycles = Vec::new();
    for (name, dir) in &members {
        let g = Graph::of_crate(dir);
        if g.edges.len() < 2 {
            // A library of one file (or none) cannot import itself.
            continue;
        }
        checked.push(format!("{name} ({} modules)", g.edges.len()));
        if let Some(c) = g.file_cycle() {
            cycles.push(format!("{name}: between files: {}", c.join(" → ")));
        }
        if let Some(c) = g.sibling_cycle() {
            cycles.push(format!("{name}: between modules: {}", c.join(" → ")));
        }
    }
    eprintln!("checked: {}", checked.join(", "));
    assert!(
        checked.len() >= 10,
        "only {} crates have modules to check: {checked:?}",
        checked.len()
    );
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

/// The check above fails on a cycle: a crate made of two modules naming
/// each other.
#[test]
fn a_crate_whose_modules_import_each_other_fails_the_check() {
    let dir = std::env::temp_dir().join(format!("testkit-cycle-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\n").unwrap();
    std::fs::write(src.join("a.rs"), "pub fn f() { crate::b::g() }\n").unwrap();
    std::fs::write(src.join("b.rs"), "pub fn g() { crate::a::f() }\n").unwrap();
    let g = Graph::of_crate(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    let c = g.file_cycle().expect("a cycle");
    assert!(
        c.contains(&"a".to_owned()) && c.contains(&"b".to_owned()),
        "{c:?}"
    );
}
