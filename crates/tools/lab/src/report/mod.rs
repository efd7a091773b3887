//! The report: a small document model ([`Report`], [`Section`], [`Table`],
//! [`Chart`]) whose table cells are typed [`value::Value`]s, written three
//! ways from the same values: `report.json` (every table as numbers with
//! their units and intervals, and the run's description), Markdown
//! (`report.md`, charts as linked `.svg` files) and one self-contained HTML
//! page (`report.html`, charts inline).

pub mod format;
pub mod svg;
pub mod value;

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::report::svg::esc;
use crate::report::value::Value;

/// What `report.json` says it is, so that a reader can refuse a newer one.
pub const JSON_VERSION: u32 = 1;

/// A whole report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    #[serde(default)]
    pub version: u32,
    pub title: String,
    pub intro: Vec<String>,
    /// Machine, versions, commit, settings: label and value.
    pub meta: Vec<(String, String)>,
    pub sections: Vec<Section>,
    /// The run's own description (its `run.json`): what was asked, the
    /// plans, the machine and the commit. `lab compare` reads it.
    #[serde(default)]
    pub run: serde_json::Value,
}

/// One experiment's part.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Section {
    /// Anchor id.
    pub id: String,
    pub title: String,
    pub blocks: Vec<Block>,
}

/// What a section is made of, in order.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Block {
    Paragraph(String),
    Table(Table),
    Chart(Chart),
}

/// A table with its one-line reading.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Table {
    pub caption: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<Value>>,
    /// What the table says, in one line.
    pub reading: String,
}

impl Table {
    /// Why its missing cells are missing, each reason once, in order.
    pub fn missing_reasons(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in &self.rows {
            for c in r {
                for why in c.missing_reasons() {
                    if !out.iter().any(|o| o == why) {
                        out.push(why.to_owned());
                    }
                }
            }
        }
        out
    }
}

/// A chart and the file it is saved as.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Chart {
    /// File name, e.g. `payload-throughput.svg`.
    pub file: String,
    pub title: String,
    /// The picture itself: in its own file, not in `report.json`.
    #[serde(skip)]
    pub svg: String,
}

impl Section {
    /// Every table of the section.
    pub fn tables(&self) -> impl Iterator<Item = &Table> {
        self.blocks.iter().filter_map(|b| match b {
            Block::Table(t) => Some(t),
            _ => None,
        })
    }

    /// Every chart of the section.
    pub fn charts(&self) -> impl Iterator<Item = &Chart> {
        self.blocks.iter().filter_map(|b| match b {
            Block::Chart(c) => Some(c),
            _ => None,
        })
    }

    pub fn new(id: &str, title: &str) -> Section {
        Section {
            id: id.to_owned(),
            title: title.to_owned(),
            blocks: Vec::new(),
        }
    }

    pub fn para(&mut self, text: impl Into<String>) {
        self.blocks.push(Block::Paragraph(text.into()));
    }

    pub fn table(&mut self, t: Table) {
        self.blocks.push(Block::Table(t));
    }

    pub fn chart(&mut self, c: Chart) {
        self.blocks.push(Block::Chart(c));
    }
}

impl Report {
    /// Every table of the report.
    pub fn tables(&self) -> impl Iterator<Item = &Table> {
        self.sections.iter().flat_map(Section::tables)
    }

    /// Every chart of the report.
    pub fn charts(&self) -> impl Iterator<Item = &Chart> {
        self.sections.iter().flat_map(Section::charts)
    }

    /// Cells with nothing in them (blank or missing), as "table caption /
    /// row / column: why": what the smoke test and CI refuse.
    pub fn empty_cells(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.sections {
            for b in &s.blocks {
                let Block::Table(t) = b else { continue };
                if t.reading.contains(format::MISSING) {
                    out.push(format!("{} / reading: {:?}", t.caption, t.reading));
                }
                for r in &t.rows {
                    for (i, c) in r.iter().enumerate() {
                        if c.is_empty() {
                            out.push(format!(
                                "{} / {} / {}: {c} ({})",
                                t.caption,
                                r.first().map_or("", Value::label),
                                t.headers.get(i).map_or("", String::as_str),
                                c.missing_reasons().join("; ")
                            ));
                        }
                    }
                }
            }
        }
        out
    }

    /// The report as `report.json` holds it.
    pub fn json(&self) -> anyhow::Result<String> {
        let mut r = self.clone();
        r.version = JSON_VERSION;
        Ok(serde_json::to_string_pretty(&r)?)
    }

    /// Reads a `report.json`.
    pub fn read_json(path: &Path) -> anyhow::Result<Report> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let r: Report = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a lab report.json", path.display()))?;
        if r.version > JSON_VERSION {
            anyhow::bail!(
                "{} is version {} of report.json; this lab reads up to version {JSON_VERSION}",
                path.display(),
                r.version
            );
        }
        Ok(r)
    }

    /// Writes `report.json`, `report.md`, `report.html` and every chart's
    /// `.svg` into `dir`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)?;
        let json = dir.join("report.json");
        std::fs::write(&json, self.json()?)
            .with_context(|| format!("writing {}", json.display()))?;
        for c in self.charts() {
            let p = dir.join(&c.file);
            std::fs::write(&p, &c.svg).with_context(|| format!("writing {}", p.display()))?;
        }
        let md = dir.join("report.md");
        std::fs::write(&md, self.markdown())
            .with_context(|| format!("writing {}", md.display()))?;
        let html = dir.join("report.html");
        std::fs::write(&html, self.html())
            .with_context(|| format!("writing {}", html.display()))?;
        Ok(())
    }

    /// The Markdown rendering.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# {}\n", self.title);
        for p in &self.intro {
            let _ = writeln!(out, "{p}\n");
        }
        if !self.meta.is_empty() {
            let _ = writeln!(out, "| | |\n|---|---|");
            for (k, v) in &self.meta {
                let _ = writeln!(out, "| {} | {} |", md_cell(k), md_cell(v));
            }
            out.push('\n');
        }
        if self.sections.len() > 1 {
            let _ = writeln!(out, "Contents:");
            for s in &self.sections {
                let _ = writeln!(out, "- [{}](#{})", s.title, s.id);
            }
            out.push('\n');
        }
        for s in &self.sections {
            let _ = writeln!(out, "<a id=\"{}\"></a>\n## {}\n", s.id, s.title);
            for b in &s.blocks {
                match b {
                    Block::Paragraph(p) => {
                        let _ = writeln!(out, "{p}\n");
                    }
                    Block::Table(t) => {
                        if !t.caption.is_empty() {
                            let _ = writeln!(out, "**{}**\n", t.caption);
                        }
                        let _ = writeln!(
                            out,
                            "| {} |",
                            t.headers
                                .iter()
                                .map(|h| md_cell(h))
                                .collect::<Vec<_>>()
                                .join(" | ")
                        );
                        let _ = writeln!(out, "|{}", "---|".repeat(t.headers.len()));
                        for r in &t.rows {
                            let _ = writeln!(
                                out,
                                "| {} |",
                                r.iter()
                                    .map(|c| md_cell(&c.to_string()))
                                    .collect::<Vec<_>>()
                                    .join(" | ")
                            );
                        }
                        if !t.reading.is_empty() {
                            let _ = writeln!(out, "\n*Reading:* {}", t.reading);
                        }
                        let why = t.missing_reasons();
                        if !why.is_empty() {
                            let _ = writeln!(out, "\n*n/a:* {}.", why.join("; "));
                        }
                        out.push('\n');
                    }
                    Block::Chart(c) => {
                        let _ = writeln!(out, "![{}]({})\n", c.title, c.file);
                    }
                }
            }
        }
        out
    }

    /// The HTML rendering: one file, styles and charts inline.
    pub fn html(&self) -> String {
        let mut out = String::new();
        let _ = write!(
            out,
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>{}</title><style>{CSS}</style></head><body>\n<h1>{}</h1>\n",
            esc(&self.title),
            esc(&self.title)
        );
        self.html_summary(&mut out);
        // The method, settings and environment: folded, one click away
        // (every section links here, and a link to it opens it).
        out.push_str(
            "<details id=\"method\"><summary>How this run measured: method, settings, \
             machine</summary>\n",
        );
        for p in &self.intro {
            let _ = writeln!(out, "<p>{}</p>", inline_md(p));
        }
        if !self.meta.is_empty() {
            out.push_str("<div class=\"scroll\"><table class=\"meta\">");
            for (k, v) in &self.meta {
                let _ = write!(out, "<tr><th>{}</th><td>{}</td></tr>", esc(k), inline_md(v));
            }
            out.push_str("</table></div>\n");
        }
        out.push_str("</details>\n");
        if self.sections.len() > 1 {
            out.push_str("<nav><ul>");
            for s in &self.sections {
                let _ = write!(
                    out,
                    "<li><a href=\"#{}\">{}</a></li>",
                    esc(&s.id),
                    esc(&s.title)
                );
            }
            out.push_str("</ul></nav>\n");
        }
        for s in &self.sections {
            let _ = writeln!(
                out,
                "<section id=\"{}\"><h2>{}</h2><p class=\"method-link\"><a href=\"#method\">How \
                 this run measured</a></p>",
                esc(&s.id),
                esc(&s.title)
            );
            let mut tables = 0;
            for b in &s.blocks {
                match b {
                    Block::Paragraph(p) => {
                        let _ = writeln!(out, "<p>{}</p>", inline_md(p));
                    }
                    Block::Table(t) => {
                        tables += 1;
                        let _ = write!(
                            out,
                            "<div class=\"scroll\"><table class=\"data\" id=\"{}\">",
                            esc(&table_id(&s.id, tables))
                        );
                        if !t.caption.is_empty() {
                            let _ = write!(out, "<caption>{}</caption>", inline_md(&t.caption));
                        }
                        out.push_str("<thead><tr>");
                        for h in &t.headers {
                            let _ = write!(out, "<th>{}</th>", inline_md(h));
                        }
                        out.push_str("</tr></thead><tbody>");
                        for r in &t.rows {
                            out.push_str("<tr>");
                            for (i, c) in r.iter().enumerate() {
                                let tag = if i == 0 { "th" } else { "td" };
                                let reasons = c.missing_reasons();
                                if reasons.is_empty() {
                                    let _ =
                                        write!(out, "<{tag}>{}</{tag}>", inline_md(&c.to_string()));
                                } else {
                                    let _ = write!(
                                        out,
                                        "<{tag} title=\"{}\">{}</{tag}>",
                                        esc(&reasons.join("; ")),
                                        inline_md(&c.to_string())
                                    );
                                }
                            }
                            out.push_str("</tr>");
                        }
                        out.push_str("</tbody></table></div>\n");
                        if !t.reading.is_empty() {
                            let _ = writeln!(
                                out,
                                "<p class=\"reading\"><b>Reading:</b> {}</p>",
                                inline_md(&t.reading)
                            );
                        }
                        let why = t.missing_reasons();
                        if !why.is_empty() {
                            let _ = writeln!(
                                out,
                                "<p class=\"reading\"><b>n/a:</b> {}.</p>",
                                esc(&why.join("; "))
                            );
                        }
                    }
                    Block::Chart(c) => {
                        let _ = writeln!(
                            out,
                            "<figure class=\"chart\">{}<figcaption>{}</figcaption></figure>",
                            c.svg,
                            esc(&c.title)
                        );
                    }
                }
            }
            out.push_str("</section>\n");
        }
        out.push_str("</body></html>\n");
        out
    }
}

impl Report {
    /// The first finding of each section: the reading of its first table
    /// that has one, with that table's id. Sections without a reading
    /// (flagged rounds, every cell) have none.
    pub fn findings(&self) -> Vec<(&Section, String, &str)> {
        self.sections
            .iter()
            .filter_map(|s| {
                s.tables()
                    .enumerate()
                    .find(|(_, t)| !t.reading.is_empty())
                    .map(|(i, t)| (s, table_id(&s.id, i + 1), t.reading.as_str()))
            })
            .collect()
    }

    /// The charts the summary shows: each section's first, in report
    /// order, at most [`SUMMARY_CHARTS`].
    pub fn summary_charts(&self) -> Vec<(&Section, &Chart)> {
        self.sections
            .iter()
            .filter_map(|s| s.charts().next().map(|c| (s, c)))
            .take(SUMMARY_CHARTS)
            .collect()
    }

    /// The opening of the HTML report: what this run found, section by
    /// section, each finding linked to its table, and the first charts.
    fn html_summary(&self, out: &mut String) {
        let findings = self.findings();
        if findings.is_empty() {
            return;
        }
        out.push_str("<section id=\"summary\"><h2>What this run found</h2><div class=\"charts\">");
        for (s, c) in self.summary_charts() {
            let _ = write!(
                out,
                "<figure class=\"chart\">{}<figcaption><a href=\"#{}\">{}</a></figcaption></figure>",
                c.svg,
                esc(&s.id),
                esc(&c.title)
            );
        }
        out.push_str("</div>\n<ul class=\"findings\">");
        for (s, id, reading) in &findings {
            let _ = write!(
                out,
                "<li><a href=\"#{}\" title=\"{}\">{}</a>: {}</li>",
                esc(id),
                esc(&s.title),
                esc(&s.id),
                inline_md(reading)
            );
        }
        out.push_str("</ul></section>\n");
    }
}

/// How many charts the HTML report's summary shows.
pub const SUMMARY_CHARTS: usize = 4;

/// The HTML id of a section's `n`th table (from 1).
pub fn table_id(section: &str, n: usize) -> String {
    format!("{section}-table-{n}")
}

const CSS: &str = "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:1em 0;font-size:13px}\
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right;white-space:nowrap}\
thead th{background:#f2f2f2;text-align:center}tbody th{text-align:left;background:#fafafa}\
table.meta th{text-align:left}table.meta td{text-align:left;white-space:normal}\
caption{font-weight:bold;text-align:left;padding:4px 0}\
p.reading{margin-top:-0.5em;color:#333}figure.chart{margin:1em 0}\
figure.chart svg{max-width:100%;height:auto;border:1px solid #eee}\
code{background:#f4f4f4;padding:0 3px;overflow-wrap:anywhere}section{margin-top:2.5em}\
p,li,td,figcaption{overflow-wrap:anywhere}div.scroll{max-width:100%;overflow-x:auto}\
ul.findings{font-size:14px;padding-left:1.2em}ul.findings li{margin:0.25em 0}ul.findings a{font-weight:bold}div.charts figcaption{font-size:12px}div.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(260px,1fr));gap:1em}\
div.charts figure.chart{margin:0}details{margin:1.5em 0;border:1px solid #ddd;padding:0.5em 1em}\
details summary{cursor:pointer;font-weight:bold}nav ul{display:flex;flex-wrap:wrap;gap:0.3em 1.2em;padding-left:0;list-style:none}\
p.method-link{margin:-0.5em 0 0;font-size:12px}section#summary{margin-top:1em}";

/// A Markdown table cell: pipes escaped, line breaks flattened.
fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The little Markdown the report's text uses (`code`, **bold**), as HTML.
pub fn inline_md(s: &str) -> String {
    let escaped = esc(s);
    let mut out = String::new();
    let mut code = false;
    let mut bold = false;
    let mut rest = escaped.as_str();
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("**") {
            out.push_str(if bold { "</b>" } else { "<b>" });
            bold = !bold;
            rest = &rest[2..];
            continue;
        }
        if c == '`' {
            out.push_str(if code { "</code>" } else { "<code>" });
            code = !code;
        } else {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    if code {
        out.push_str("</code>");
    }
    if bold {
        out.push_str("</b>");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Report {
        let mut s = Section::new("payload", "Payload");
        s.para("Closed loop, `8` VUs.");
        s.table(Table {
            caption: "Throughput".into(),
            headers: vec!["transport".into(), "1 order".into()],
            rows: vec![vec![
                "grpc".into(),
                Value::range(crate::stats::Spread::of(&[1200.0, 1234.0, 1250.0]), "req/s"),
            ]],
            reading: "grpc | fastest".into(),
        });
        s.chart(Chart {
            file: "payload.svg".into(),
            title: "Throughput".into(),
            svg: "<svg></svg>".into(),
        });
        Report {
            title: "Lab report".into(),
            intro: vec!["A **real** run.".into()],
            meta: vec![("cores".into(), "2".into())],
            sections: vec![s.clone(), Section::new("floor", "Floor")],
            ..Report::default()
        }
    }

    #[test]
    fn markdown_has_the_tables_readings_and_chart_links() {
        let md = sample().markdown();
        assert!(md.contains("| transport | 1 order |\n|---|---|\n| grpc | 1,234 (1,200–1,250) |"));
        assert!(md.contains("*Reading:* grpc | fastest"));
        assert!(md.contains("![Throughput](payload.svg)"));
        assert!(md.contains("- [Floor](#floor)"));
    }

    #[test]
    fn html_is_self_contained_with_inline_charts() {
        let html = sample().html();
        assert!(html.starts_with("<!doctype html>"));
        assert!(html.contains("<figure class=\"chart\"><svg></svg>"));
        assert!(html.contains(
            "<table class=\"data\" id=\"payload-table-1\"><caption>Throughput</caption>"
        ));
        // The summary opens the page: the finding linked to its table, the
        // chart again; the method folded after it.
        let summary = html.find("<section id=\"summary\">").expect("a summary");
        let method = html
            .find("<details id=\"method\">")
            .expect("the method folded");
        assert!(summary < method && method < html.find("<section id=\"payload\">").unwrap());
        assert!(html.contains("<a href=\"#payload-table-1\" title=\"Payload\">payload</a>"));
        assert_eq!(
            html.matches("<figure class=\"chart\"><svg></svg>").count(),
            2
        );
        assert!(html.contains("<code>8</code>"));
        assert!(html.contains("<b>real</b>"));
        assert!(!html.contains("src=\"http"));
        assert!(!html.contains("href=\"http"));
    }

    #[test]
    fn inline_markdown_is_escaped_first() {
        assert_eq!(inline_md("a <b> `x<y`"), "a &lt;b&gt; <code>x&lt;y</code>");
        assert_eq!(inline_md("**open"), "<b>open</b>");
    }

    #[test]
    fn a_report_is_written_with_its_charts() {
        let dir = std::env::temp_dir().join(format!("lab-report-test-{}", std::process::id()));
        sample().write(&dir).expect("written");
        for f in ["report.md", "report.html", "report.json", "payload.svg"] {
            assert!(dir.join(f).is_file(), "{f}");
        }
        let back = Report::read_json(&dir.join("report.json")).expect("reads back");
        assert_eq!(back.version, JSON_VERSION);
        assert_eq!(back.markdown(), sample().markdown());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
