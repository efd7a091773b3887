//! The book under `docs/`: it builds, every internal link and anchor in the
//! built HTML leads somewhere, and what the lab can say about itself (its
//! experiments and what each is about, the transports in their order) is
//! what the book says, so the two cannot drift apart.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

fn docs() -> PathBuf {
    common::root().join("docs")
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// The values of `attr="…"` in an HTML text.
fn attrs<'a>(html: &'a str, attr: &str) -> Vec<&'a str> {
    let needle = format!(" {attr}=\"");
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find(&needle) {
        rest = &rest[i + needle.len()..];
        if let Some(end) = rest.find('"') {
            out.push(&rest[..end]);
            rest = &rest[end..];
        }
    }
    out
}

/// Every HTML file under `dir`, by its path relative to `dir`.
fn pages(dir: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else if p.extension().is_some_and(|x| x == "html") {
                out.insert(p.strip_prefix(base).unwrap().to_path_buf(), read(&p));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Lexically joined: `a/b` + `../c` is `a/c`.
fn join(base: &Path, rel: &str) -> PathBuf {
    let mut out: Vec<std::ffi::OsString> = base.iter().map(Into::into).collect();
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            p => out.push(p.into()),
        }
    }
    out.iter().collect()
}

/// Every internal link of a built site that leads nowhere: a file that is
/// not there, or an anchor the page it names does not hold. `print.html`
/// (every page again, with rewritten links) is left out.
fn broken_links(site: &Path) -> Vec<String> {
    let pages = pages(site);
    let ids: BTreeMap<&PathBuf, BTreeSet<&str>> = pages
        .iter()
        .map(|(p, html)| (p, attrs(html, "id").into_iter().collect()))
        .collect();
    let mut broken = Vec::new();
    for (page, html) in &pages {
        if page.ends_with("print.html") {
            continue;
        }
        let dir = page.parent().unwrap_or(Path::new(""));
        for link in attrs(html, "href").into_iter().chain(attrs(html, "src")) {
            if link.contains("://") || link.starts_with("mailto:") || link.starts_with("data:") {
                continue;
            }
            let (file, anchor) = link.split_once('#').unwrap_or((link, ""));
            let file = file.split('?').next().unwrap_or("");
            let target = if file.is_empty() {
                page.clone()
            } else {
                join(dir, file)
            };
            if !site.join(&target).exists() {
                broken.push(format!(
                    "{}: {link} (no {})",
                    page.display(),
                    target.display()
                ));
                continue;
            }
            if !anchor.is_empty()
                && target.extension().is_some_and(|x| x == "html")
                && !ids.get(&target).is_some_and(|ids| ids.contains(anchor))
            {
                broken.push(format!("{}: {link} (no #{anchor} there)", page.display()));
            }
        }
    }
    broken
}

fn mdbook() -> Command {
    let probe = Command::new("mdbook").arg("--version").output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "mdbook is not installed: ./scripts/setup installs it (cargo install mdbook --version 0.5.4 --no-default-features --features search --locked)"
    );
    Command::new("mdbook")
}

#[test]
fn the_book_builds_and_every_internal_link_and_anchor_leads_somewhere() {
    let out = std::env::temp_dir().join(format!("lab-book-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let built = mdbook()
        .arg("build")
        .arg(docs())
        .arg("--dest-dir")
        .arg(&out)
        .output()
        .expect("running mdbook");
    let log = String::from_utf8_lossy(&built.stderr);
    assert!(built.status.success(), "mdbook build failed:\n{log}");
    assert!(
        !log.contains("WARN") && !log.contains("ERROR"),
        "mdbook warned:\n{log}"
    );
    let n = pages(&out).len();
    assert!(n > 30, "only {n} pages built");
    let broken = broken_links(&out);
    let _ = std::fs::remove_dir_all(&out);
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_checker_finds_a_missing_page_and_a_missing_anchor() {
    let site = std::env::temp_dir().join(format!("lab-book-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&site);
    std::fs::create_dir_all(site.join("sub")).unwrap();
    std::fs::write(
        site.join("index.html"),
        r##"<p id="top"><a href="sub/a.html#here">ok</a> <a href="#top">ok</a>
        <a href="sub/a.html#gone">bad anchor</a> <a href="missing.html">bad page</a>
        <img src="sub/pic.svg"> <a href="https://example.com/x">outside</a></p>"##,
    )
    .unwrap();
    std::fs::write(
        site.join("sub/a.html"),
        r#"<h2 id="here">x</h2><a href="../index.html#top">up</a>"#,
    )
    .unwrap();
    std::fs::write(site.join("sub/pic.svg"), "<svg/>").unwrap();
    let broken = broken_links(&site);
    let _ = std::fs::remove_dir_all(&site);
    assert_eq!(broken.len(), 2, "{broken:#?}");
    assert!(broken[0].contains("#gone"), "{broken:#?}");
    assert!(broken[1].contains("missing.html"), "{broken:#?}");
}

#[test]
fn every_experiment_has_its_page_saying_what_lab_list_says() {
    let summary = read(&docs().join("SUMMARY.md"));
    for e in lab::experiments::all() {
        let name = e.name();
        let page = docs().join(format!("experiments/{name}.md"));
        assert!(page.exists(), "no page docs/experiments/{name}.md");
        assert!(
            summary.contains(&format!("(experiments/{name}.md)")),
            "docs/SUMMARY.md does not list experiments/{name}.md"
        );
        let text = read(&page);
        assert!(
            text.contains(e.about()),
            "docs/experiments/{name}.md does not say what `lab list` says of it:\n{}",
            e.about()
        );
    }
    let index = read(&docs().join("experiments/index.md"));
    for e in lab::experiments::all() {
        assert!(
            index.contains(&format!("({}.md)", e.name())),
            "docs/experiments/index.md does not link {}",
            e.name()
        );
    }
}

#[test]
fn the_transports_page_has_one_row_per_transport_in_the_lists_order() {
    let text = read(&docs().join("transports.md"));
    let table = text
        .split("\n## The nineteen\n")
        .nth(1)
        .expect("a section \"The nineteen\" in docs/transports.md");
    // The first table of the section: from its header to the first line
    // that is not a row.
    let rows: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(name, _)| name))
        .collect();
    assert_eq!(
        rows,
        transports::ALL.to_vec(),
        "docs/transports.md's table is not transports::ALL"
    );
}
