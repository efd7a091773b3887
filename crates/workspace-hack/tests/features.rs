//! The services' own build and the test build turn on the same features of
//! every dependency they share, so that neither compiles it again. The
//! oracle is cargo's own resolution (`cargo tree`), for the three package
//! selections the test command builds: both services and the load engine
//! without their dev-dependencies (`cargo build -p order-service -p
//! user-service -p loadgen`), user-service with them (the hop benchmark),
//! and the whole workspace with them (the tests); and the lab's own release build against the services'
//! it runs, so that `cargo run --release -p lab` compiles one tree.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// The selection of the services' own build: both and the lab's load
/// engine, without their dev-dependencies (`cargo build -p order-service
/// -p user-service -p loadgen`, as the lab and the test command build them).
const SERVICES_BUILD: &[&str] = &[
    "-p",
    "order-service",
    "-p",
    "user-service",
    "-p",
    "loadgen",
    "--edges",
    "normal,build",
];

/// Each package (name and version) with the feature sets cargo resolves
/// for it in `args`'s selection: one per kind of build it is compiled for.
fn resolved(args: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(cargo)
        .current_dir(root)
        .args([
            "tree",
            "--locked",
            "--offline",
            "--prefix",
            "none",
            "--no-dedupe",
        ])
        .args(["--format", "{p} [{f}]"])
        .args(args)
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut packages: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let line = line.trim_end_matches(" (*)");
        let Some((package, features)) = line.split_once(" [") else {
            continue;
        };
        // `name vX.Y.Z`, without a workspace crate's path.
        let package = package.split(" (").next().unwrap_or(package).to_owned();
        packages
            .entry(package)
            .or_default()
            .insert(features.trim_end_matches(']').to_owned());
    }
    packages
}

/// The packages of `part` whose feature sets are not all among `whole`'s.
fn differing(
    part: &BTreeMap<String, BTreeSet<String>>,
    whole: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    part.iter()
        .filter_map(|(p, sets)| {
            let theirs = whole.get(p)?;
            let extra: Vec<&String> = sets.difference(theirs).collect();
            (!extra.is_empty()).then(|| format!("{p}: {extra:?} against {theirs:?}"))
        })
        .collect()
}

#[test]
fn the_services_build_and_the_test_build_resolve_the_same_features() {
    let tests = resolved(&["--workspace", "--edges", "normal,build,dev"]);
    assert!(
        tests.keys().any(|p| p.starts_with("tonic ")),
        "cargo tree listed no tonic: {} packages",
        tests.len()
    );
    for (what, args) in [
        (
            "both services without their dev-dependencies",
            SERVICES_BUILD,
        ),
        (
            "user-service with its dev-dependencies (the hop benchmark)",
            &["-p", "user-service", "--edges", "normal,build,dev"][..],
        ),
    ] {
        let part = resolved(args);
        let differ = differing(&part, &tests);
        assert!(
            differ.is_empty(),
            "{what} resolve other features than the test build for:\n{}\n\
             Turn the test build's features on in crates/workspace-hack/Cargo.toml.",
            differ.join("\n")
        );
    }
}

#[test]
fn the_labs_release_build_and_the_services_it_builds_resolve_the_same_features() {
    // `cargo run --release -p lab` builds the lab alone; the lab then runs
    // `cargo build --release -p order-service -p user-service -p loadgen`. Every
    // dependency the two share is compiled once only if the lab's build
    // asks for no feature set the services' build does not.
    let services = resolved(SERVICES_BUILD);
    let lab = resolved(&["-p", "lab", "--edges", "normal,build"]);
    let shared = lab.keys().filter(|p| services.contains_key(*p)).count();
    assert!(shared > 100, "only {shared} packages shared");
    let differ = differing(&lab, &services);
    assert!(
        differ.is_empty(),
        "the lab's build resolves other features than the services' for:\n{}\n\
         Turn them on in crates/workspace-hack/Cargo.toml (build-dependencies for \
         what build scripts and macros use).",
        differ.join("\n")
    );
}

#[test]
fn a_feature_set_missing_from_the_whole_is_named() {
    let set = |fs: &[&str]| -> BTreeSet<String> { fs.iter().map(|f| (*f).to_owned()).collect() };
    let whole = BTreeMap::from([("tower v0.5.3".to_owned(), set(&["retry,util"]))]);
    let same = BTreeMap::from([("tower v0.5.3".to_owned(), set(&["retry,util"]))]);
    let fewer = BTreeMap::from([("tower v0.5.3".to_owned(), set(&["util"]))]);
    let elsewhere = BTreeMap::from([("regex v1.12.0".to_owned(), set(&["std"]))]);
    assert!(differing(&same, &whole).is_empty());
    assert_eq!(differing(&fewer, &whole).len(), 1);
    assert!(differing(&fewer, &whole)[0].starts_with("tower v0.5.3"));
    assert!(
        differing(&elsewhere, &whole).is_empty(),
        "not in the whole: nothing shared"
    );
}
