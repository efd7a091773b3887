//! `compression`: REST JSON, REST protobuf and gRPC, uncompressed, with
//! gzip and with zstd, on loopback and on a slow link (20 ms round trip and
//! 100 Mbit/s each way: a packet path, or the delay proxy with `--path
//! proxy`). Does compressed JSON close
//! the gap with protobuf on a slow link, and what does compression cost in
//! CPU where bandwidth is free?

use serde::{Deserialize, Serialize};

use crate::experiment::{Context, Experiment, Knobs, PathChoice};
use crate::experiments::tables::{capitalise, method};
use crate::measure::cell::{Cell, Env, PacketPath};
use crate::measure::figures::Metric;
use crate::measure::schedule::Schedule;
use crate::report::format::{self as f, MISSING};
use crate::report::value::Value;
use crate::report::{Section, Table};

pub struct Compression;

/// The slow link: round trip, ms, and cap, Mbit/s each way.
pub const SLOW_RTT_MS: u32 = 20;
pub const SLOW_MBIT: u32 = 100;

/// REST JSON and protobuf on HTTP/1.1, and gRPC.
const VIAS: [&str; 3] = [transports::H1_JSON, transports::H1_PROTO, transports::GRPC];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompressionPlan {
    pub transports: Vec<String>,
    pub sizes: Vec<u32>,
    /// What carries the slow link (plans written before the packet path
    /// existed ran on the proxy), and TCP's congestion control on it.
    #[serde(default = "PathChoice::before_packets")]
    pub path: PathChoice,
    #[serde(default)]
    pub cc: netpath::CongestionControl,
}

/// Loopback, then the slow link.
const LINKS: [bool; 2] = [false, true];

/// How the answers are compressed, on both ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zip {
    Off,
    Gzip,
    Zstd,
}

impl Zip {
    /// In the order of a table's columns.
    pub const ALL: [Zip; 3] = [Zip::Off, Zip::Gzip, Zip::Zstd];
    /// The two that compress.
    pub const ON: [Zip; 2] = [Zip::Gzip, Zip::Zstd];

    pub fn name(self) -> &'static str {
        match self {
            Zip::Off => "off",
            Zip::Gzip => "gzip",
            Zip::Zstd => "zstd",
        }
    }
}

fn link_name(slow: bool) -> String {
    if slow {
        format!("{SLOW_RTT_MS} ms, {SLOW_MBIT} Mbit/s")
    } else {
        "loopback".to_owned()
    }
}

impl CompressionPlan {
    /// A transport at a size, compressed or not, on loopback or the slow
    /// link. Loopback uncompressed is the payload grid's cell.
    pub fn cell(&self, via: &str, orders: u32, zip: Zip, slow: bool) -> Cell {
        let packets = slow && self.path == PathChoice::Packets;
        let proxy = slow && self.path == PathChoice::Proxy;
        Knobs::closed(via, orders).with_env(Env {
            rtt_ms: proxy.then_some(SLOW_RTT_MS),
            rate_mbit: proxy.then_some(SLOW_MBIT),
            path: packets.then_some(PacketPath {
                rate_mbit: Some(SLOW_MBIT),
                cc: self.cc,
                ..PacketPath::rtt(SLOW_RTT_MS)
            }),
            gzip: zip == Zip::Gzip,
            zstd: zip == Zip::Zstd,
            ..Env::default()
        })
    }

    pub fn cells(&self) -> Vec<Cell> {
        let mut v = Vec::new();
        for slow in LINKS {
            for &n in &self.sizes {
                for via in &self.transports {
                    for zip in Zip::ALL {
                        v.push(self.cell(via, n, zip, slow));
                    }
                }
            }
        }
        v
    }
}

impl Experiment for Compression {
    type Plan = CompressionPlan;
    const NAME: &'static str = "compression";
    const ABOUT: &'static str = "REST JSON, REST protobuf and gRPC uncompressed, with gzip and with zstd, on loopback and on a 20 ms, 100 Mbit/s link";

    fn target() -> Result<(), &'static str> {
        Err(
            "it sets compression on both services and puts a slow link between them, which only the lab's own services allow",
        )
    }

    fn plan(knobs: &Knobs) -> CompressionPlan {
        CompressionPlan {
            transports: knobs
                .transports
                .clone()
                .unwrap_or_else(|| VIAS.iter().map(|s| (*s).to_owned()).collect()),
            sizes: knobs.sizes(&[1000, 10000], &[100, 1000, 10000]),
            path: knobs.path,
            cc: knobs.cc,
        }
    }

    fn schedule(p: &CompressionPlan) -> Schedule {
        Schedule::Grid(p.cells())
    }

    fn describe(p: &CompressionPlan) -> String {
        format!(
            "{} transports, sizes {:?}, uncompressed, gzip and zstd, loopback and {}",
            p.transports.len(),
            p.sizes,
            link_name(true)
        )
    }

    fn section(p: &CompressionPlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

fn section(p: &CompressionPlan, cx: &Context) -> Section {
    let mut s = Section::new(
        Compression::NAME,
        "Compression: gzip and zstd on loopback and on a slow link",
    );
    s.para(method(
        cx.timing,
        &format!(
            "Closed loop, {} VUs, user-service's pool {} connections per transport. gzip on both \
             ends (`ORDER_REST_GZIP`, `ORDER_GRPC_GZIP`, `USER_UPSTREAM_GZIP`), zstd on both ends \
             (`ORDER_REST_ZSTD`, `ORDER_GRPC_ZSTD`, `USER_UPSTREAM_ZSTD`), or neither; each at \
             its library's default level (tower-http's and tonic's); loopback, \
             or {} at {} round trip and {} Mbit/s each way. Nothing else differs \
             between the cells of a row. `×` is compressed over off",
            Knobs::VUS,
            Knobs::POOL,
            match p.path {
                PathChoice::Packets => format!(
                    "a packet path between the services (each in its own network namespace, the \
                     kernels' own TCP with {} congestion control, a drop-tail queue of 50 ms at \
                     the cap)",
                    p.cc
                ),
                PathChoice::Proxy => "the delay proxy between the services (a token bucket per \
                     direction shared by the connections)"
                    .to_owned(),
            },
            format_args!("{SLOW_RTT_MS} ms"),
            SLOW_MBIT
        ),
    ));
    if p.path == PathChoice::Packets {
        s.para(crate::experiments::tables::path_facts(
            cx,
            Compression::NAME,
        ));
    }
    for (m, caption) in [
        (
            Metric::BytesIn,
            "Answer bytes per call (user-service's socket counter)",
        ),
        (Metric::Rate, "Throughput, req/s (higher is better)"),
        (
            Metric::UpP50,
            "Upstream p50, µs: user-service's round trip to order-service",
        ),
        (Metric::CpuOrder, "order-service's CPU per request, µs"),
        (Metric::CpuUser, "user-service's CPU per request, µs"),
    ] {
        let mut headers = vec!["transport, link".to_owned()];
        for &n in &p.sizes {
            for zip in Zip::ALL {
                headers.push(format!("{}, {}", f::orders(n), zip.name()));
            }
        }
        let mut rows = Vec::new();
        for slow in LINKS {
            for via in &p.transports {
                let mut r = vec![Value::text(format!("{via}, {}", link_name(slow)))];
                for &n in &p.sizes {
                    let off = p.cell(via, n, Zip::Off, slow);
                    r.push(cx.fig(&off, m));
                    for zip in Zip::ON {
                        r.push(cx.fig_vs(&p.cell(via, n, zip, slow), &off, m));
                    }
                }
                rows.push(r);
            }
        }
        let reading = match m {
            Metric::Rate => gap_reading(p, cx),
            Metric::BytesIn => bytes_reading(p, cx),
            Metric::CpuOrder | Metric::CpuUser => cpu_reading(p, cx, m),
            _ => both_ratio_readings(p, cx, m, true),
        };
        s.table(Table {
            caption: caption.to_owned(),
            headers,
            rows,
            reading,
        });
    }
    s
}

/// gzip's and zstd's readings, one after the other.
fn both_ratio_readings(p: &CompressionPlan, cx: &Context, m: Metric, slow: bool) -> String {
    Zip::ON
        .map(|zip| capitalise(&zip_ratio_reading(p, cx, m, zip, slow)))
        .join(" ")
}

/// Compressed over off for one metric, one link: "via ×r" per transport and
/// size.
fn zip_ratio_reading(p: &CompressionPlan, cx: &Context, m: Metric, zip: Zip, slow: bool) -> String {
    let parts: Vec<String> = p
        .sizes
        .iter()
        .map(|&n| {
            let each: Vec<String> = p
                .transports
                .iter()
                .map(|via| {
                    match cx.data.ratio(
                        &p.cell(via, n, zip, slow),
                        &p.cell(via, n, Zip::Off, slow),
                        m,
                    ) {
                        Some(r) => format!("{via} ×{}", f::num(r.median)),
                        None => format!("{via} {MISSING}"),
                    }
                })
                .collect();
            format!("at {}: {}", f::orders(n), each.join(", "))
        })
        .collect();
    format!(
        "{} over off on {}: {}.",
        zip.name(),
        if slow {
            format!("the {} link", link_name(true))
        } else {
            "loopback".to_owned()
        },
        parts.join("; ")
    )
}

fn bytes_reading(p: &CompressionPlan, cx: &Context) -> String {
    both_ratio_readings(p, cx, Metric::BytesIn, false)
}

/// On loopback, what compression costs in CPU per request.
fn cpu_reading(p: &CompressionPlan, cx: &Context, m: Metric) -> String {
    format!(
        "What compression costs where bandwidth is free: {}",
        both_ratio_readings(p, cx, m, false)
    )
}

/// The question: on the slow link, does compressed JSON reach protobuf's
/// rate uncompressed (and compressed the same way)? Read from the ratio's
/// rerun interval.
fn gap_reading(p: &CompressionPlan, cx: &Context) -> String {
    let (json, proto) = (transports::H1_JSON, transports::H1_PROTO);
    if !(p.transports.iter().any(|t| t == json) && p.transports.iter().any(|t| t == proto)) {
        return format!("{MISSING}: the plan lacks {json} or {proto}, so the gap cannot be read.");
    }
    let parts: Vec<String> = p
        .sizes
        .iter()
        .map(|&n| {
            let verdict = |jz: &Cell, against: &Cell, what: &str| match cx.data.ratio(
                jz,
                against,
                Metric::Rate,
            ) {
                None => format!("{MISSING} against {what}"),
                Some(r) => format!(
                    "×{} ({}–{}) of {what}{}",
                    f::num(r.median),
                    f::num(r.min),
                    f::num(r.max),
                    if r.max < 1.0 {
                        ": short of it"
                    } else if r.min > 1.0 {
                        ": past it"
                    } else {
                        ": level within noise"
                    }
                ),
            };
            let proto_off = p.cell(proto, n, Zip::Off, true);
            let gap = cx
                .data
                .ratio(&proto_off, &p.cell(json, n, Zip::Off, true), Metric::Rate)
                .map_or(MISSING.to_owned(), |r| format!("×{}", f::num(r.median)));
            let each: Vec<String> = Zip::ON
                .iter()
                .map(|&zip| {
                    let jz = p.cell(json, n, zip, true);
                    let z = zip.name();
                    format!(
                        "{json} with {z} serves {}, and {}",
                        verdict(&jz, &proto_off, &format!("{proto}'s uncompressed")),
                        verdict(
                            &jz,
                            &p.cell(proto, n, zip, true),
                            &format!("{proto}'s with {z}")
                        ),
                    )
                })
                .collect();
            format!(
                "at {}, where uncompressed {proto} serves {gap} of uncompressed {json}'s rate, {}",
                f::orders(n),
                each.join("; ")
            )
        })
        .collect();
    let parts: Vec<String> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| if i == 0 { p.clone() } else { capitalise(p) })
        .collect();
    format!(
        "On the slow link ({}): {}.",
        link_name(true),
        parts.join(". ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_has_off_gzip_and_zstd_on_both_links_and_shares_loopback_with_payload() {
        let p = Compression::plan(&Knobs {
            quick: true,
            ..Knobs::default()
        });
        assert_eq!(p.sizes, vec![1000, 10000]);
        let cells = p.cells();
        assert_eq!(cells.len(), VIAS.len() * 2 * 2 * 3);
        assert_eq!(cells.iter().filter(|c| c.env.gzip).count(), cells.len() / 3);
        assert_eq!(cells.iter().filter(|c| c.env.zstd).count(), cells.len() / 3);
        assert!(!cells.iter().any(|c| c.env.gzip && c.env.zstd));
        let slow = cells
            .iter()
            .filter(|c| {
                c.env
                    .path
                    .is_some_and(|p| p.rate_mbit == Some(SLOW_MBIT) && p.rtt_ms == SLOW_RTT_MS)
            })
            .count();
        assert_eq!(slow, cells.len() / 2);
        assert!(
            cells
                .iter()
                .all(|c| c.env.rate_mbit.is_none() && c.env.rtt_ms.is_none())
        );
        let on_proxy = Compression::plan(&Knobs {
            quick: true,
            path: PathChoice::Proxy,
            ..Knobs::default()
        });
        assert!(
            on_proxy.cells().iter().all(
                |c| c.env.path.is_none() && c.env.rate_mbit.is_some() == c.env.rtt_ms.is_some()
            )
        );
        // Loopback without gzip is the payload grid's cell.
        assert!(cells.contains(&Knobs::closed(transports::GRPC, 1000)));
        assert_ne!(
            p.cell("grpc", 1000, Zip::Gzip, false).id(),
            Knobs::closed("grpc", 1000).id()
        );
    }

    #[test]
    fn the_section_reads_the_gap_and_the_costs_from_the_figures() {
        let (info, results) = crate::synthetic::run(&[Compression::NAME], true, 2);
        let report = crate::session::build_report(&info, &results);
        let empty = report.empty_cells();
        assert!(empty.is_empty(), "empty cells:\n{}", empty.join("\n"));
        let s = report
            .sections
            .iter()
            .find(|s| s.id == Compression::NAME)
            .expect("a compression section");
        let tables: Vec<&Table> = s.tables().collect();
        assert_eq!(tables.len(), 5);
        let rate = tables
            .iter()
            .find(|t| t.caption.starts_with("Throughput"))
            .unwrap();
        assert_eq!(rate.rows.len(), VIAS.len() * 2);
        assert!(
            rate.reading
                .starts_with("On the slow link (20 ms, 100 Mbit/s): at 1,000"),
            "{}",
            rate.reading
        );
        let bytes = tables
            .iter()
            .find(|t| t.caption.starts_with("Answer bytes"))
            .unwrap();
        assert!(
            bytes
                .reading
                .starts_with("Gzip over off on loopback: at 1,000 orders: h1-json ×"),
            "{}",
            bytes.reading
        );
        // The synthetic rounds shrink gzip's answers to a fifth and zstd's
        // to a sixth: the reading's ratios are theirs.
        assert!(
            bytes.reading.contains("h1-json ×0.200"),
            "{}",
            bytes.reading
        );
        assert!(
            bytes
                .reading
                .contains("Zstd over off on loopback: at 1,000 orders: h1-json ×0.167"),
            "{}",
            bytes.reading
        );
        assert!(
            rate.reading.contains("h1-json with zstd serves"),
            "{}",
            rate.reading
        );
        // The report's header says which cells compress.
        assert!(report.markdown().contains("gzip in the cells marked"));
    }
}
