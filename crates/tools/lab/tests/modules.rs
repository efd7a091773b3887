//! The crate's shape, checked from its source: no two modules of the
//! library import each other, directly or round a loop (tests left out), and the session, the measurement layer,
//! the analysis and the report name no experiment (an experiment is one
//! file under `experiments/` and one line of its registry).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `src/` with its module path (`measure::cell`);
/// the crate root and the binary are left out.
fn modules() -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src()).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|l| l == "mod") {
                parts.pop();
            }
            let name = parts.join("::");
            if name != "lib" && name != "main" {
                out.insert(name, p);
            }
        }
    }
    out
}

/// The code of a file without its comments (doc links name modules too)
/// and without its tests: a test module may use anything (a synthetic run,
/// the session) without making the library's modules depend on each other.
fn code(p: &Path) -> String {
    let text = std::fs::read_to_string(p).unwrap();
    let library = text.split("#[cfg(test)]").next().unwrap_or("");
    library
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> Option<&str> {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (end > 0).then(|| &s[..end])
}

/// Paths a file's code uses: `crate::a::b` and `super::x` resolved, and
/// each item of a `use crate::a::{b, c}` group.
fn paths(module: &str, text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let parent: Vec<String> = {
        let mut p: Vec<String> = module.split("::").map(str::to_owned).collect();
        p.pop();
        p
    };
    for (prefix, base) in [("crate::", Vec::new()), ("super::", parent)] {
        let mut rest = text;
        while let Some(i) = rest.find(prefix) {
            // `crate::` inside a longer identifier (`my_crate::`) is not ours.
            let before = rest[..i].chars().last();
            rest = &rest[i + prefix.len()..];
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let mut segs = base.clone();
            let mut s = rest;
            loop {
                if let Some(group) = s.strip_prefix('{') {
                    let inner = &group[..group.find('}').unwrap_or(group.len())];
                    for item in inner.split(',') {
                        let item = item.trim();
                        if let Some(id) = ident_at(item).filter(|id| *id != "self") {
                            let mut p = segs.clone();
                            p.push(id.to_owned());
                            out.push(p);
                        }
                    }
                    break;
                }
                let Some(id) = ident_at(s) else { break };
                segs.push(id.to_owned());
                s = &s[id.len()..];
                match s.strip_prefix("::") {
                    Some(r) => s = r,
                    None => break,
                }
            }
            out.push(segs);
        }
    }
    out
}

/// The longest prefix of `path` that is a module of the crate.
fn resolve(path: &[String], known: &BTreeMap<String, PathBuf>) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|m| known.contains_key(m))
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let known = modules();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, p) in &known {
        let deps = g.entry(m.clone()).or_default();
        for path in paths(m, &code(p)) {
            if let Some(target) = resolve(&path, &known).filter(|t| t != m) {
                deps.insert(target);
            }
        }
    }
    g
}

/// A loop of imports, if there is one.
fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        m: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut c = path[i..].to_vec();
            c.push(m.to_owned());
            return Some(c);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_owned());
        for d in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(g, d, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for m in g.keys() {
        if let Some(c) = visit(g, m, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_two_modules_import_each_other() {
    let g = graph();
    // The checker sees the imports it must: the session uses the runner,
    // the runner the services.
    assert!(
        g["session"].contains("measure::runner"),
        "{:?}",
        g["session"]
    );
    assert!(g["measure::runner"].contains("measure::services"));
    assert!(g["experiments::floor"].contains("experiments::payload"));
    if let Some(c) = cycle(&g) {
        panic!("an import cycle: {}", c.join(" → "));
    }
}

#[test]
fn the_checker_finds_a_cycle_when_there_is_one() {
    let mut g = graph();
    g.get_mut("measure::services")
        .unwrap()
        .insert("measure::runner".into());
    let c = cycle(&g).expect("a cycle");
    assert!(c.contains(&"measure::runner".to_owned()), "{c:?}");
    let p = paths("a::b", "use crate::x::{y, z::w};\nlet v = super::c::d();");
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
    for (m, p) in modules() {
        if m.starts_with("experiments") || m == "experiment" || m == "cli" {
            continue;
        }
        // Tests may pick an experiment to test with; the code may not.
        let text = code(&p);
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
