//! A crate's module graph, read from its source, and the check that it has
//! no import cycle.
//!
//! Each `.rs` file under `src/` is a module, named by its path
//! (`measure/cell.rs` is `measure::cell`, `upstream/mod.rs` is `upstream`);
//! the crate root and binaries are left out, and so are tests (anything
//! after a file's first `#[cfg(test)]`, and `tests.rs` files): a test may
//! use anything without making the library's modules depend on each other.
//! A module imports another when its code names a path into it:
//! `crate::a::b`, `super::x`, `self::y`, or a child module by its bare name.
//!
//! Two checks, both failing on any cycle:
//! - [`Graph::file_cycle`]: between files, as the imports are written;
//! - [`Graph::sibling_cycle`]: between the modules of one parent, each taken
//!   with everything under it (`measure` and `analysis` import each other
//!   if any file under one names any file under the other). This is the
//!   cycle a reader meets: a layer that reaches back into the one above.
//!
//! The parse is textual (paths, not a resolver): a `pub use` re-export is
//! not followed, so a child that names an item by its parent's re-export
//! imports the parent.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module → the modules it imports (itself left out).
#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub edges: BTreeMap<String, BTreeSet<String>>,
}

/// Every library `.rs` file under `src` with its module path; the crate
/// root, binaries and `tests.rs` files are left out.
pub fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                if p != src.join("bin") {
                    stack.push(p);
                }
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let Ok(rel) = p.strip_prefix(src) else {
                continue;
            };
            let mut parts: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|l| l == "mod") {
                parts.pop();
            }
            if parts.last().is_some_and(|l| l == "tests") {
                continue;
            }
            let name = parts.join("::");
            if name != "lib" && name != "main" {
                out.insert(name, p);
            }
        }
    }
    out
}

/// The library code of a file: without its comments (doc links name
/// modules too) and without its tests.
pub fn code(text: &str) -> String {
    let library = text.split("#[cfg(test)]").next().unwrap_or("");
    library
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| match l.find(" // ") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> Option<&str> {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (end > 0).then(|| &s[..end])
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The segments of a path that starts at `s` (`a::b::{c, d::e}` gives
/// `a::b::c` and `a::b::d::e` and `a::b`), each appended to `base`.
fn expand(base: &[String], s: &str, out: &mut Vec<Vec<String>>) {
    let mut segs = base.to_vec();
    let mut s = s;
    loop {
        if let Some(group) = s.strip_prefix('{') {
            // The group up to its matching brace.
            let mut depth = 1;
            let mut end = group.len();
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let inner = &group[..end];
            let mut depth = 0;
            let mut start = 0;
            let mut items = Vec::new();
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(&inner[start..i]);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            items.push(&inner[start..]);
            for item in items {
                let item = item.trim();
                if item.is_empty() || item == "self" {
                    continue;
                }
                expand(&segs, item, out);
            }
            break;
        }
        let Some(id) = ident_at(s) else { break };
        segs.push(id.to_owned());
        s = &s[id.len()..];
        match s.trim_start().strip_prefix("::") {
            Some(r) => s = r.trim_start(),
            None => break,
        }
    }
    out.push(segs);
}

/// The module paths a module's code names: `crate::…`, `super::…` (any
/// number of them), `self::…`, and `child::…` for a module declared in
/// this file.
pub fn paths(module: &str, text: &str, children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let here: Vec<String> = module.split("::").map(str::to_owned).collect();
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < text.len() {
        let c = bytes[i] as char;
        let before = text[..i].chars().last();
        if !is_ident_char(c) || before.is_some_and(|b| is_ident_char(b) || b == ':') {
            i += text[i..].chars().next().map_or(1, char::len_utf8);
            continue;
        }
        let Some(id) = ident_at(&text[i..]) else {
            i += 1;
            continue;
        };
        let after = &text[i + id.len()..];
        if !after.starts_with("::") {
            i += id.len();
            continue;
        }
        let (base, rest) = match id {
            "crate" => (Vec::new(), &after[2..]),
            "self" => (here.clone(), &after[2..]),
            "super" => {
                let mut base = here.clone();
                base.pop();
                let mut rest = &after[2..];
                while let Some(r) = rest.strip_prefix("super::") {
                    base.pop();
                    rest = r;
                }
                (base, rest)
            }
            child if children.contains(child) => {
                let mut base = here.clone();
                base.push(child.to_owned());
                (base, &after[2..])
            }
            _ => {
                i += id.len();
                continue;
            }
        };
        expand(&base, rest, &mut out);
        i += id.len() + 2;
    }
    out
}

/// The modules a file declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`).
fn declared(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l
                .strip_prefix("pub(crate) ")
                .or_else(|| l.strip_prefix("pub(super) "))
                .or_else(|| l.strip_prefix("pub "))
                .unwrap_or(l);
            let name = l.strip_prefix("mod ")?.trim_end().strip_suffix(';')?;
            Some(name.trim().to_owned())
        })
        .collect()
}

/// The longest prefix of `path` that is a module of the crate.
fn resolve(path: &[String], known: &BTreeMap<String, PathBuf>) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|m| known.contains_key(m))
}

impl Graph {
    /// The graph of the crate whose manifest is in `manifest_dir`.
    pub fn of_crate(manifest_dir: impl AsRef<Path>) -> Graph {
        Graph::of_src(&manifest_dir.as_ref().join("src"))
    }

    /// The graph of the modules under `src`.
    pub fn of_src(src: &Path) -> Graph {
        let known = modules(src);
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (m, p) in &known {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            let code = code(&text);
            let deps = edges.entry(m.clone()).or_default();
            for path in paths(m, &code, &declared(&code)) {
                if let Some(target) = resolve(&path, &known).filter(|t| t != m) {
                    deps.insert(target);
                }
            }
        }
        Graph { edges }
    }

    /// The modules `m` imports.
    pub fn imports(&self, m: &str) -> BTreeSet<String> {
        self.edges.get(m).cloned().unwrap_or_default()
    }

    /// A loop of imports between files, if there is one.
    pub fn file_cycle(&self) -> Option<Vec<String>> {
        cycle(&self.edges)
    }

    /// The graph between siblings: an edge from `a` to `b`, two modules of
    /// one parent, when anything under `a` imports anything under `b`.
    /// A module importing its own ancestor or descendant adds nothing here.
    pub fn siblings(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, tos) in &self.edges {
            let f: Vec<&str> = from.split("::").collect();
            for to in tos {
                let t: Vec<&str> = to.split("::").collect();
                let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
                if common == f.len() || common == t.len() {
                    continue;
                }
                out.entry(f[..=common].join("::"))
                    .or_default()
                    .insert(t[..=common].join("::"));
            }
        }
        out
    }

    /// A loop of imports between the modules of one parent, each taken
    /// with everything under it, if there is one.
    pub fn sibling_cycle(&self) -> Option<Vec<String>> {
        cycle(&self.siblings())
    }

    /// Panics, naming the loop, if the crate has a cycle at either level.
    pub fn assert_acyclic(&self) {
        assert!(
            self.edges.len() > 1,
            "fewer than two modules found: is this the crate's manifest directory?"
        );
        if let Some(c) = self.file_cycle() {
            panic!("an import cycle between files: {}", c.join(" → "));
        }
        if let Some(c) = self.sibling_cycle() {
            panic!(
                "an import cycle between modules (each with what is under it): {}",
                c.join(" → ")
            );
        }
    }
}

/// A loop in `g`, if there is one.
pub fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn path(p: &str) -> Vec<String> {
        p.split("::").map(str::to_owned).collect()
    }

    #[test]
    fn paths_are_read_through_groups_supers_selves_and_children() {
        let text = "use crate::x::{y, z::{w, v}};\nlet v = super::c::d();\n\
                    use super::super::top::T;\nuse self::inner::I;\nlet k = kid::new();\n\
                    let n = not_a_kid::f(); let s = my_crate::q();";
        let p = paths("a::b", text, &set(&["kid"]));
        for want in [
            "x::y",
            "x::z::w",
            "x::z::v",
            "a::c::d",
            "top::T",
            "a::b::inner::I",
            "a::b::kid::new",
        ] {
            assert!(p.contains(&path(want)), "{want} not in {p:?}");
        }
        assert!(
            !p.iter()
                .any(|s| s[0] == "not_a_kid" || s.contains(&"q".to_owned()))
        );
    }

    #[test]
    fn comments_and_tests_import_nothing() {
        let c = code(
            "use crate::a::A;\n/// see [`crate::b`]\nlet x = 1; // crate::c\n#[cfg(test)]\nmod tests { use crate::d; }",
        );
        assert!(c.contains("crate::a"));
        for gone in ["crate::b", "crate::c", "crate::d"] {
            assert!(!c.contains(gone), "{gone} in {c}");
        }
    }

    #[test]
    fn a_loop_is_found_between_files_and_between_siblings() {
        let g = Graph {
            edges: [
                ("measure::runner", &["analysis::stats"][..]),
                ("analysis::data", &["measure::cell"][..]),
                ("analysis::stats", &[][..]),
                ("measure::cell", &[][..]),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), set(v)))
            .collect(),
        };
        assert_eq!(g.file_cycle(), None, "the files alone make no loop");
        let c = g
            .sibling_cycle()
            .expect("measure and analysis import each other");
        assert!(c.contains(&"measure".to_owned()) && c.contains(&"analysis".to_owned()));

        let mut g = g;
        g.edges
            .get_mut("measure::cell")
            .unwrap_or_else(|| unreachable!())
            .insert("measure::runner".into());
        g.edges
            .get_mut("analysis::stats")
            .unwrap_or_else(|| unreachable!())
            .insert("analysis::data".into());
        assert!(g.file_cycle().is_some());
    }

    #[test]
    fn a_child_naming_its_parent_is_not_a_sibling_loop() {
        let g = Graph {
            edges: [
                ("up", &["up::grpc"][..]),
                ("up::grpc", &["up", "up::wire"][..]),
                ("up::wire", &[][..]),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), set(v)))
            .collect(),
        };
        assert_eq!(g.sibling_cycle(), None);
        assert!(g.file_cycle().is_some(), "but it is one between files");
    }

    #[test]
    fn this_crate_has_no_cycle() {
        Graph::of_crate(env!("CARGO_MANIFEST_DIR")).assert_acyclic();
    }
}
