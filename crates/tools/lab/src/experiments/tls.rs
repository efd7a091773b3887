//! The `tls` experiment: every transport with and without TLS between
//! user-service and order-service, at the same load.
//!
//! The Go post left "HTTP/2 with TLS" open, and every post the lab
//! reproduces measured cleartext. Here the run makes a throwaway CA and server certificate (rcgen), and a
//! TLS cell starts order-service with every listener on TLS and user-service
//! dialling it over TLS; the cleartext cell beside it is the same cell
//! without. The report gives the cost of TLS as round-by-round ratios, the
//! bytes it adds per call, and the handshakes user-service made during the
//! measured run (full and resumed, from its `/metrics`): a pooled transport
//! pays its handshakes once per connection, during warm-up, while a new
//! connection per call (`h1-json-close`) pays one on every call.

use serde::{Deserialize, Serialize};

use crate::experiment::{Context, Experiment, Knobs, PathChoice};
use crate::experiments::tables::method;
use crate::measure::cell::{Cell, Env, PacketPath};
use crate::measure::figures::Metric;
use crate::measure::schedule::Schedule;
use crate::report::format::{self as f, MISSING};
use crate::report::value::Value;
use crate::report::{Section, Table};

pub struct Tls;

impl Experiment for Tls {
    type Plan = TlsPlan;
    const NAME: &'static str = "tls";
    const ABOUT: &'static str = "Every transport with and without TLS: cost, bytes, handshakes (the Go post's open question)";

    fn target() -> Result<(), &'static str> {
        Err("it starts order-service with certificates it makes, and user-service trusting them")
    }

    fn plan(knobs: &Knobs) -> TlsPlan {
        // QUIC is encrypted either way (without TLS settings, with a
        // self-signed certificate): it has no cleartext row to set TLS
        // against, so it is not in this experiment's pairs.
        let asked = knobs.transports();
        let vias: Vec<String> = asked
            .iter()
            .filter(|v| !transports::is_quic(v))
            .cloned()
            .collect();
        // Each QUIC transport against its TCP twin over TLS, when both are
        // asked for.
        let quic_pairs: Vec<(String, String)> = transports::QUIC_TWINS
            .iter()
            .filter(|(q, t)| asked.iter().any(|v| v == q) && vias.iter().any(|v| v == t))
            .map(|(q, t)| ((*q).to_owned(), (*t).to_owned()))
            .collect();
        // Across a packet path, a handshake costs round trips: a transport
        // that opens a connection per call, one that pools, one on HTTP/2.
        let path_vias = match knobs.path {
            PathChoice::Proxy => Vec::new(),
            PathChoice::Packets => [
                transports::H1_JSON,
                transports::H1_JSON_CLOSE,
                transports::GRPC,
            ]
            .iter()
            .filter(|v| vias.iter().any(|x| x == *v))
            .map(|v| (*v).to_owned())
            .collect(),
        };
        TlsPlan {
            vias,
            quic_pairs,
            orders: knobs.sizes(&[1], &[1, 1000]),
            vus: Knobs::VUS,
            pool: Knobs::POOL,
            path_vias,
            cc: knobs.cc,
        }
    }

    fn schedule(p: &TlsPlan) -> Schedule {
        Schedule::Grid(cells(p))
    }

    fn describe(p: &TlsPlan) -> String {
        let mut d = format!("sizes {:?}, cleartext and TLS", p.orders);
        if !p.quic_pairs.is_empty() {
            d.push_str(&format!(
                "; {} against TLS on TCP",
                p.quic_pairs
                    .iter()
                    .map(|(q, t)| format!("{q} (against {t})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if !p.path_vias.is_empty() {
            d.push_str(&format!(
                "; {} also across a {PATH_RTT_MS} ms packet path ({})",
                p.path_vias.join(", "),
                p.cc
            ));
        }
        d
    }

    fn section(p: &TlsPlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

/// What the tls experiment measures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TlsPlan {
    /// The transports measured in cleartext and over TLS: every one asked
    /// for but QUIC's, which has no cleartext.
    pub vias: Vec<String>,
    /// QUIC transports (always encrypted, here with the run's certificates)
    /// and the TCP transport each is set against over TLS.
    #[serde(default)]
    pub quic_pairs: Vec<(String, String)>,
    pub orders: Vec<u32>,
    pub vus: u32,
    pub pool: u16,
    /// The transports also measured across a packet path of
    /// [`PATH_RTT_MS`], at the first size (none in plans written before
    /// the packet path existed).
    #[serde(default)]
    pub path_vias: Vec<String>,
    #[serde(default)]
    pub cc: netpath::CongestionControl,
}

/// The round trip of the packet path the tls experiment also runs on, ms.
pub const PATH_RTT_MS: u32 = 20;

impl TlsPlan {
    pub fn cell(&self, via: &str, orders: u32, tls: bool) -> Cell {
        Cell::closed(via, orders, self.vus, self.pool).with_env(Env {
            tls,
            ..Env::default()
        })
    }

    /// The same across the packet path.
    pub fn path_cell(&self, via: &str, orders: u32, tls: bool) -> Cell {
        Cell::closed(via, orders, self.vus, self.pool).with_env(Env {
            tls,
            path: Some(PacketPath {
                cc: self.cc,
                ..PacketPath::rtt(PATH_RTT_MS)
            }),
            ..Env::default()
        })
    }
}

/// Every cell: each transport and size, cleartext and TLS.
pub fn cells(p: &TlsPlan) -> Vec<Cell> {
    let mut v = Vec::new();
    for &orders in &p.orders {
        for via in &p.vias {
            for tls in [false, true] {
                v.push(p.cell(via, orders, tls));
            }
        }
        for (quic, _) in &p.quic_pairs {
            v.push(p.cell(quic, orders, true));
        }
    }
    if let Some(&orders) = p.orders.first() {
        for via in &p.path_vias {
            for tls in [false, true] {
                v.push(p.path_cell(via, orders, tls));
            }
        }
    }
    v
}

/// The tls section of the report.
fn section(p: &TlsPlan, cx: &Context) -> Section {
    let mut s = Section::new(
        "tls",
        "TLS between the services: what it costs each transport",
    );
    s.para(method(
        cx.timing,
        &format!(
            "Closed loop, {} VUs, pool {}; in a TLS cell every listener of order-service serves \
             TLS 1.3 (rustls, a throwaway CA made for the run) and user-service dials it over \
             TLS, h2 negotiated by ALPN; the cleartext cell is the same cell without. `×` is TLS \
             against cleartext, round by round. Handshakes are user-service's, counted over the \
             measured run only (connections opened during warm-up did theirs before it)",
            p.vus, p.pool
        ),
    ));
    for &orders in &p.orders {
        let what = f::orders(orders);
        let mut t = Table {
            caption: format!("TLS against cleartext, {what} per call"),
            headers: [
                "transport",
                "req/s, cleartext",
                "req/s, TLS",
                "upstream p50 µs, cleartext",
                "upstream p50 µs, TLS",
                "bytes per call, cleartext",
                "bytes per call, TLS",
                "handshakes per 1,000 calls: full · resumed",
            ]
            .iter()
            .map(|h| (*h).to_owned())
            .collect(),
            ..Table::default()
        };
        for via in &p.vias {
            let (plain, tls) = (p.cell(via, orders, false), p.cell(via, orders, true));
            t.rows.push(vec![
                via.clone().into(),
                cx.fig(&plain, Metric::Rate),
                cx.fig_vs(&tls, &plain, Metric::Rate),
                cx.fig(&plain, Metric::UpP50),
                cx.fig_vs(&tls, &plain, Metric::UpP50),
                cx.fig(&plain, Metric::BytesTotal),
                cx.fig_vs(&tls, &plain, Metric::BytesTotal),
                Value::parts(vec![
                    cx.fig(&tls, Metric::TlsFullPer1k),
                    cx.fig(&tls, Metric::TlsResumedPer1k),
                ]),
            ]);
        }
        t.reading = reading(p, cx, orders);
        s.table(t);
        if !p.quic_pairs.is_empty() {
            s.table(quic_table(p, cx, orders));
        }
    }
    if let (Some(&orders), false) = (p.orders.first(), p.path_vias.is_empty()) {
        s.para(crate::experiments::tables::path_facts(cx, Tls::NAME));
        s.table(path_table(p, cx, orders));
    }
    s
}

/// HTTP/3 against the same call over TLS on TCP, both verified with the
/// run's certificates.
fn quic_table(p: &TlsPlan, cx: &Context, orders: u32) -> Table {
    let mut rows = Vec::new();
    let mut said = Vec::new();
    for (quic, twin) in &p.quic_pairs {
        let (q, t) = (p.cell(quic, orders, true), p.cell(twin, orders, true));
        rows.push(vec![
            quic.clone().into(),
            twin.clone().into(),
            cx.fig(&t, Metric::Rate),
            cx.fig_vs(&q, &t, Metric::Rate),
            cx.fig(&t, Metric::UpP50),
            cx.fig_vs(&q, &t, Metric::UpP50),
            cx.fig(&t, Metric::BytesTotal),
            cx.fig_vs(&q, &t, Metric::BytesTotal),
        ]);
        said.push(match cx.data.ratio(&q, &t, Metric::Rate) {
            Some(r) => format!(
                "{quic} served {} {twin}'s rate, {}",
                f::ratio(Some(r)),
                crate::experiments::tables::verdict(&r)
            ),
            None => format!("{quic} against {twin}: {}", f::MISSING),
        });
    }
    Table {
        caption: format!(
            "HTTP/3 (QUIC) against the same call over TLS on TCP, {} per call",
            f::orders(orders)
        ),
        headers: [
            "QUIC transport",
            "set against (TLS)",
            "req/s, TLS on TCP",
            "req/s, QUIC",
            "upstream p50 µs, TLS on TCP",
            "upstream p50 µs, QUIC",
            "bytes per call, TLS on TCP",
            "bytes per call, QUIC (UDP payload)",
        ]
        .iter()
        .map(|h| (*h).to_owned())
        .collect(),
        rows,
        reading: format!(
            "Both encrypted with TLS 1.3 and the run's certificates, so the difference is the \
             transport: QUIC in user space over UDP against the kernel's TCP. {}.",
            said.join("; ")
        ),
    }
}

/// TLS across the packet path: what a handshake costs in round trips.
fn path_table(p: &TlsPlan, cx: &Context, orders: u32) -> Table {
    let d = cx.data;
    let rtts = |c: &Cell| {
        d.median(c, Metric::UpP50)
            .map(|us| us / 1000.0 / f64::from(PATH_RTT_MS))
    };
    let mut rows = Vec::new();
    let mut extra = Vec::new();
    for via in &p.path_vias {
        let (plain, tls) = (
            p.path_cell(via, orders, false),
            p.path_cell(via, orders, true),
        );
        if let (Some(a), Some(b)) = (rtts(&plain), rtts(&tls)) {
            extra.push(format!("{via} {}", f::num(b - a)));
        }
        rows.push(vec![
            via.clone().into(),
            cx.fig(&plain, Metric::Rate),
            cx.fig_vs(&tls, &plain, Metric::Rate),
            cx.fig(&plain, Metric::UpP50),
            cx.fig_vs(&tls, &plain, Metric::UpP50),
            Value::parts(vec![
                cx.fig(&tls, Metric::TlsFullPer1k),
                cx.fig(&tls, Metric::TlsResumedPer1k),
            ]),
        ]);
    }
    Table {
        caption: format!(
            "TLS against cleartext across a {PATH_RTT_MS} ms packet path ({}), {} per call",
            p.cc,
            f::orders(orders)
        ),
        headers: [
            "transport",
            "req/s, cleartext",
            "req/s, TLS",
            "upstream p50 µs, cleartext",
            "upstream p50 µs, TLS",
            "handshakes per 1,000 calls: full · resumed",
        ]
        .iter()
        .map(|h| (*h).to_owned())
        .collect(),
        rows,
        reading: if extra.is_empty() {
            format!("{MISSING}: no transport has both a cleartext and a TLS round on the path.")
        } else {
            format!(
                "Round trips TLS added to the median call across the path: {}. A pooled \
                 connection pays its handshake once; a connection per call pays it on every call \
                 (TLS 1.3: one round trip, a resumed session too).",
                extra.join(", ")
            )
        },
    }
}

/// The table's line: which transport TLS costs most and least, and who
/// pays handshakes during the run.
fn reading(p: &TlsPlan, cx: &Context, orders: u32) -> String {
    let d = cx.data;
    let mut costs: Vec<(String, f64)> = p
        .vias
        .iter()
        .filter_map(|v| {
            d.ratio(
                &p.cell(v, orders, true),
                &p.cell(v, orders, false),
                Metric::Rate,
            )
            .map(|r| (v.clone(), r.median))
        })
        .collect();
    if costs.is_empty() {
        return format!("{MISSING}: no transport has both a cleartext and a TLS round.");
    }
    costs.sort_by(|a, b| a.1.total_cmp(&b.1));
    let (worst, best) = (&costs[0], &costs[costs.len() - 1]);
    let per_call: Vec<String> = p
        .vias
        .iter()
        .filter_map(|v| {
            let c = p.cell(v, orders, true);
            let hs = d.median(&c, Metric::TlsFullPer1k)? + d.median(&c, Metric::TlsResumedPer1k)?;
            (hs >= 100.0).then(|| format!("{v} ({} per 1,000 calls)", f::num(hs)))
        })
        .collect();
    format!(
        "With TLS, {} kept ×{} of its cleartext rate, the most affected; {} kept ×{}. {}",
        worst.0,
        f::num(worst.1),
        best.0,
        f::num(best.1),
        if per_call.is_empty() {
            "No transport did handshakes during the measured run: the pooled connections were \
             opened, and their handshakes done, in the warm-up."
                .to_owned()
        } else {
            format!(
                "Handshakes during the measured run: {}; the pooled transports did theirs once \
                 per connection, in the warm-up.",
                per_call.join(", ")
            )
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_transport_is_measured_in_cleartext_and_over_tls() {
        // Every transport but QUIC's, which has no cleartext.
        let quic = transports::Transport::ALL
            .iter()
            .filter(|t| t.is_quic())
            .count();
        assert_eq!(quic, 3);
        let all = transports::ALL.len() - quic;
        let p = Tls::plan(&Knobs {
            quick: true,
            ..Knobs::default()
        });
        let c = cells(&p);
        // Every transport on loopback, and three across the packet path;
        // each QUIC transport once, with the run's certificates, against
        // its TCP twin's TLS cell.
        assert_eq!(c.len(), all * 2 + 3 * 2 + quic);
        assert_eq!(c.iter().filter(|c| c.env.tls).count(), all + 3 + quic);
        assert_eq!(
            c.iter()
                .filter(|c| c.env.tls && c.env.path.is_some())
                .count(),
            3
        );
        assert_eq!(p.quic_pairs.len(), quic);
        for (q, t) in &p.quic_pairs {
            assert!(c.contains(&p.cell(q, 1, true)) && c.contains(&p.cell(t, 1, true)));
            assert!(!c.contains(&p.cell(q, 1, false)), "{q} has no cleartext");
        }
        // The cleartext cells are the payload experiment's own.
        assert!(c.contains(&Knobs::closed("grpc", 1)));
        assert!(c.iter().any(|c| c.env.tls && c.id().ends_with("-tls")));
        assert!(Tls::schedule(&p).needs().certs);
        let full = Tls::plan(&Knobs::default());
        assert_eq!(cells(&full).len(), (all * 2 + quic) * 2 + 3 * 2);
    }
}
