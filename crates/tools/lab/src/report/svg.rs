//! SVG charts drawn by hand: a line chart (linear or log axes) and a
//! grouped bar chart. No external service or library: the report must open
//! offline, and the shapes needed are few.

use std::fmt::Write as _;

const W: f64 = 820.0;
const H: f64 = 440.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 44.0;
const BOTTOM: f64 = 84.0;

/// Colours that stay apart for up to sixteen series (a colour comes back
/// after sixteen: with every transport, the last three share the first ones').
const PALETTE: [&str; 16] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#7f7f7f", "#bcbd22", "#393b79", "#ad494a", "#637939", "#8c6d31", "#7b4173", "#3182bd",
];

/// Escapes text for SVG/HTML.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One line of a line chart.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart.
#[derive(Debug, Clone)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_log: bool,
    pub y_log: bool,
    pub series: Vec<Series>,
}

/// A mapping from data to pixels along one axis.
#[derive(Debug, Clone, Copy)]
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    px_lo: f64,
    px_hi: f64,
}

impl Axis {
    fn new(values: impl Iterator<Item = f64>, log: bool, px_lo: f64, px_hi: f64) -> Axis {
        let vals: Vec<f64> = values
            .filter(|v| v.is_finite() && (!log || *v > 0.0))
            .collect();
        let (mut lo, mut hi) = vals
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
                (a.min(*v), b.max(*v))
            });
        if !lo.is_finite() {
            (lo, hi) = if log { (1.0, 10.0) } else { (0.0, 1.0) };
        }
        if log {
            lo = 10f64.powf(lo.log10().floor());
            hi = 10f64.powf(hi.log10().ceil());
            if hi <= lo {
                hi = lo * 10.0;
            }
        } else {
            lo = lo.min(0.0);
            if hi <= lo {
                hi = lo + 1.0;
            }
            let step = nice_step((hi - lo) / 5.0);
            hi = (hi / step).ceil() * step;
        }
        Axis {
            lo,
            hi,
            log,
            px_lo,
            px_hi,
        }
    }

    fn px(&self, v: f64) -> f64 {
        let t = if self.log {
            (v.max(self.lo).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        self.px_lo + t * (self.px_hi - self.px_lo)
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let mut t = Vec::new();
            let decades = (self.hi / self.lo).log10().round() as i32;
            let mut d = self.lo;
            while d <= self.hi * 1.0001 {
                t.push(d);
                if decades <= 2 {
                    for m in [2.0, 5.0] {
                        if d * m < self.hi {
                            t.push(d * m);
                        }
                    }
                }
                d *= 10.0;
            }
            t
        } else {
            let step = nice_step((self.hi - self.lo) / 5.0);
            let mut t = Vec::new();
            let mut v = (self.lo / step).ceil() * step;
            while v <= self.hi + step * 1e-9 {
                t.push(v);
                v += step;
            }
            t
        }
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= raw {
            return m * p;
        }
    }
    10.0 * p
}

/// A tick label: 1.5k, 20, 0.5.
pub fn short_number(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "-0" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

fn frame(out: &mut String, title: &str, x_label: &str, y_label: &str) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {W} {H}" width="{W}" height="{H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(
        out,
        r##"<rect x="0" y="0" width="{W}" height="{H}" fill="#ffffff"/><text x="{}" y="24" font-size="15" font-weight="bold">{}</text>"##,
        LEFT,
        esc(title)
    );
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        LEFT + (W - LEFT - RIGHT) / 2.0,
        H - 16.0,
        esc(x_label)
    );
    let _ = write!(
        out,
        r#"<text transform="translate(18 {}) rotate(-90)" text-anchor="middle">{}</text>"#,
        TOP + (H - TOP - BOTTOM) / 2.0,
        esc(y_label)
    );
}

fn axes(out: &mut String, x: &Axis, y: &Axis, x_ticks: &[(f64, String)], slant: bool) {
    for t in y.ticks() {
        let py = y.px(t);
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            py + 4.0,
            short_number(t)
        );
    }
    for (t, label) in x_ticks {
        let px = x.px(*t);
        let ly = H - BOTTOM + 16.0;
        // Many long labels (transport names) would overlap: slant them.
        let text = if slant {
            format!(
                r#"<text x="{px:.1}" y="{ly:.1}" text-anchor="end" transform="rotate(-30 {px:.1} {ly:.1})">{}</text>"#,
                esc(label)
            )
        } else {
            format!(
                r#"<text x="{px:.1}" y="{ly:.1}" text-anchor="middle">{}</text>"#,
                esc(label)
            )
        };
        let _ = write!(
            out,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#f0f0f0"/>{text}"##,
            H - BOTTOM,
        );
    }
    let _ = write!(
        out,
        r##"<rect x="{LEFT}" y="{TOP}" width="{:.1}" height="{:.1}" fill="none" stroke="#888"/>"##,
        W - LEFT - RIGHT,
        H - TOP - BOTTOM
    );
}

fn legend(out: &mut String, names: &[String]) {
    for (i, name) in names.iter().enumerate() {
        let y = TOP + 8.0 + i as f64 * 18.0;
        let c = PALETTE[i % PALETTE.len()];
        let _ = write!(
            out,
            r#"<rect x="{:.1}" y="{:.1}" width="12" height="12" fill="{c}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            W - RIGHT + 14.0,
            y,
            W - RIGHT + 32.0,
            y + 10.0,
            esc(name)
        );
    }
}

/// Renders a line chart.
pub fn line_chart(c: &LineChart) -> String {
    let all = || c.series.iter().flat_map(|s| s.points.iter());
    let x = Axis::new(all().map(|p| p.0), c.x_log, LEFT, W - RIGHT);
    let y = Axis::new(all().map(|p| p.1), c.y_log, H - BOTTOM, TOP);
    let mut out = String::new();
    frame(&mut out, &c.title, &c.x_label, &c.y_label);
    let mut xs: Vec<f64> = all().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let x_ticks: Vec<(f64, String)> = if xs.len() <= 12 {
        xs.iter().map(|v| (*v, short_number(*v))).collect()
    } else {
        x.ticks()
            .into_iter()
            .map(|v| (v, short_number(v)))
            .collect()
    };
    axes(&mut out, &x, &y, &x_ticks, false);
    for (i, s) in c.series.iter().enumerate() {
        let col = PALETTE[i % PALETTE.len()];
        let pts: Vec<String> = s
            .points
            .iter()
            .filter(|p| p.1.is_finite() && (!c.y_log || p.1 > 0.0))
            .map(|p| format!("{:.1},{:.1}", x.px(p.0), y.px(p.1)))
            .collect();
        if pts.len() > 1 {
            let _ = write!(
                out,
                r#"<polyline fill="none" stroke="{col}" stroke-width="2" points="{}"/>"#,
                pts.join(" ")
            );
        }
        for p in &pts {
            if let Some((px, py)) = p.split_once(',') {
                let _ = write!(
                    out,
                    r#"<circle cx="{px}" cy="{py}" r="3.5" fill="{col}"><title>{}</title></circle>"#,
                    esc(&s.name)
                );
            }
        }
    }
    let names: Vec<String> = c.series.iter().map(|s| s.name.clone()).collect();
    legend(&mut out, &names);
    out.push_str("</svg>");
    out
}

/// A grouped bar chart: one group per label, one bar per series.
#[derive(Debug, Clone)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub y_log: bool,
    pub groups: Vec<String>,
    pub series: Vec<String>,
    /// `values[group][series]`.
    pub values: Vec<Vec<Option<f64>>>,
    /// One bar per group, its series stacked from the bottom in order
    /// (linear axis from 0), instead of one bar per series side by side.
    pub stacked: bool,
}

/// A bar chart's frame and axes, one slot per group along x: the SVG so
/// far, and a slot's width.
fn group_frame(c: &BarChart, y: &Axis) -> (String, f64) {
    let n_groups = c.groups.len().max(1) as f64;
    let x = Axis {
        lo: 0.0,
        hi: n_groups,
        log: false,
        px_lo: LEFT,
        px_hi: W - RIGHT,
    };
    let mut out = String::new();
    frame(&mut out, &c.title, "", &c.y_label);
    let ticks: Vec<(f64, String)> = c
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| (i as f64 + 0.5, g.clone()))
        .collect();
    axes(&mut out, &x, y, &ticks, c.groups.len() > 4);
    (out, (W - LEFT - RIGHT) / n_groups)
}

/// Renders a grouped bar chart.
pub fn bar_chart(c: &BarChart) -> String {
    if c.stacked {
        return stacked_chart(c);
    }
    let vals = || c.values.iter().flatten().filter_map(|v| *v);
    let y = Axis::new(vals(), c.y_log, H - BOTTOM, TOP);
    let (mut out, group_w) = group_frame(c, &y);
    let n_series = c.series.len().max(1) as f64;
    let bar_w = group_w * 0.8 / n_series;
    let base = y.px(y.lo);
    for (g, row) in c.values.iter().enumerate() {
        for (s, v) in row.iter().enumerate() {
            let Some(v) = v.filter(|v| v.is_finite() && (!c.y_log || *v > 0.0)) else {
                continue;
            };
            let px = LEFT + g as f64 * group_w + group_w * 0.1 + s as f64 * bar_w;
            let top = y.px(v);
            let _ = write!(
                out,
                r#"<rect x="{px:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} {}: {}</title></rect>"#,
                (bar_w - 1.0).max(1.0),
                (base - top).max(0.5),
                PALETTE[s % PALETTE.len()],
                esc(&c.groups[g]),
                esc(&c.series[s]),
                short_number(v)
            );
        }
    }
    legend(&mut out, &c.series);
    out.push_str("</svg>");
    out
}

/// A stacked bar chart: one bar per group, its series' values piled up.
fn stacked_chart(c: &BarChart) -> String {
    let part = |v: &Option<f64>| v.filter(|v| v.is_finite() && *v > 0.0);
    let totals: Vec<f64> = c
        .values
        .iter()
        .map(|row| row.iter().filter_map(part).sum())
        .collect();
    let y = Axis::new(
        std::iter::once(0.0).chain(totals.iter().copied()),
        false,
        H - BOTTOM,
        TOP,
    );
    let (mut out, group_w) = group_frame(c, &y);
    for (g, row) in c.values.iter().enumerate() {
        let px = LEFT + g as f64 * group_w + group_w * 0.15;
        let mut below = 0.0;
        for (s, v) in row.iter().enumerate() {
            let Some(v) = part(v) else {
                continue;
            };
            let (bottom, top) = (y.px(below), y.px(below + v));
            below += v;
            let _ = write!(
                out,
                r#"<rect x="{px:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} {}: {}</title></rect>"#,
                (group_w * 0.7).max(1.0),
                (bottom - top).max(0.5),
                PALETTE[s % PALETTE.len()],
                esc(&c.groups[g]),
                esc(&c.series[s]),
                short_number(v)
            );
        }
    }
    legend(&mut out, &c.series);
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.3), 2.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(420.0), 500.0);
    }

    #[test]
    fn numbers_are_shortened_for_ticks() {
        assert_eq!(short_number(1500.0), "1.5k");
        assert_eq!(short_number(20.0), "20");
        assert_eq!(short_number(0.5), "0.5");
        assert_eq!(short_number(2_000_000.0), "2M");
    }

    #[test]
    fn a_line_chart_has_a_line_per_series_and_escapes_names() {
        let svg = line_chart(&LineChart {
            title: "t <1>".into(),
            x_label: "orders".into(),
            y_label: "req/s".into(),
            x_log: true,
            y_log: true,
            series: vec![
                Series {
                    name: "grpc".into(),
                    points: vec![(1.0, 5000.0), (1000.0, 800.0)],
                },
                Series {
                    name: "h1 & json".into(),
                    points: vec![(1.0, 4000.0), (1000.0, 400.0), (10.0, f64::NAN)],
                },
            ],
        });
        assert!(svg.starts_with("<svg"));
        assert!(svg.ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("t &lt;1&gt;"));
        assert!(svg.contains("h1 &amp; json"));
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn a_bar_chart_draws_each_present_value() {
        let svg = bar_chart(&BarChart {
            title: "latency".into(),
            y_label: "ms".into(),
            y_log: false,
            groups: vec!["grpc".into(), "h1-json".into()],
            series: vec!["p50".into(), "p99".into()],
            values: vec![vec![Some(1.0), Some(3.0)], vec![Some(2.0), None]],
            stacked: false,
        });
        assert_eq!(svg.matches("<rect x=").count(), 1 + 1 + 3 + 2);
    }

    #[test]
    fn a_stacked_bar_piles_each_groups_parts_up_to_its_sum() {
        let svg = bar_chart(&BarChart {
            title: "parts".into(),
            y_label: "µs".into(),
            y_log: false,
            groups: vec!["grpc".into(), "tcp-proto".into()],
            series: vec!["store".into(), "wire".into()],
            values: vec![vec![Some(10.0), Some(30.0)], vec![Some(20.0), None]],
            stacked: true,
        });
        let rects: Vec<(f64, f64)> = svg
            .split("<rect x=")
            .skip(1)
            .filter(|r| r.contains("<title>"))
            .map(|r| {
                let attr = |name: &str| -> f64 {
                    let at = r.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
                    r[at..].split('"').next().unwrap().parse().unwrap()
                };
                (attr("y"), attr("height"))
            })
            .collect();
        assert_eq!(rects.len(), 3, "{svg}");
        // grpc's wire sits on its store: its bottom is the store's top.
        let (store_y, wire) = (rects[0].0, rects[1]);
        assert!((wire.0 + wire.1 - store_y).abs() < 0.2, "{rects:?}");
        // Heights in proportion to the values: 30 is three times 10.
        assert!((wire.1 / rects[0].1 - 3.0).abs() < 0.05, "{rects:?}");
    }

    #[test]
    fn an_empty_chart_still_renders() {
        let svg = line_chart(&LineChart {
            title: "empty".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            x_log: false,
            y_log: true,
            series: vec![],
        });
        assert!(svg.contains("</svg>"));
    }
}
