//! The `loss` experiment: packets lost between user-service and
//! order-service, at a 20 ms round trip on the packet path ([`netpath`]),
//! where the kernels' own TCP retransmits them.
//!
//! A lost packet stalls its TCP connection until it is retransmitted:
//! every call whose bytes are behind it on that connection waits too. One
//! HTTP/2 connection carrying every call (h2c, gRPC on one channel, a bidi
//! stream) puts all calls behind each loss; a pool of HTTP/1.1 connections
//! stalls only the call on the connection that lost it. The question is
//! whether, and from what loss rate, one connection's tail grows faster
//! than a pool's, and whether the congestion control (cubic, Linux's
//! default, against bbr) changes the ranking.
//!
//! [`LossPlan`] says which cells; `section` writes the report's tables
//! and readings, computed from the numbers.
//!
//! # Layout
//! - this file: the experiment, its plan's choices, the section and its
//!   tables against loss.
//! - `plan`: [`LossPlan`], its arms, cases and cells.
//! - `readings`: what each table against loss says, from its numbers.
//! - `spread`: gRPC across the path to several replicas, balanced by
//!   user-service or by HAProxy beside them.

mod plan;
mod readings;
mod spread;

pub use plan::{Arm, Case, LossPlan, Spread, cells};
use readings::{cc_reading, p50_reading, retrans_reading, tail_reading};

use crate::experiment::{Context, Experiment, Knobs};
use crate::experiments::tables::{method, scaled};
use crate::measure::cell::{BURST_PACKETS, Balance};
use crate::measure::figures::Metric;
use crate::measure::schedule::Schedule;
use crate::report::format::{self as f};
use crate::report::value::Value;
use crate::report::{Section, Table};
use netpath::CongestionControl;

pub struct Loss;

/// Replicas the spread's transport reaches across the path.
pub const SPREAD_REPLICAS: u8 = 4;

impl Experiment for Loss {
    type Plan = LossPlan;
    const NAME: &'static str = "loss";
    const ABOUT: &'static str = "Packet loss 0 to 3% at a 20 ms round trip on the packet path: one HTTP/2 connection against pools and against HTTP/3, cubic against bbr";

    fn target() -> Result<(), &'static str> {
        Err("it puts a packet path it makes between user-service and order-service")
    }

    fn plan(knobs: &Knobs) -> LossPlan {
        use transports::{GRPC, GRPC_BIDI, GRPC_H3, H1_JSON, H1_PROTO, H2C_PROTO, H3_PROTO};
        // Every case under the run's algorithm (cubic unless --cc), and
        // 1% under the other of cubic and bbr.
        let at = |loss_pcm: u32| Case {
            loss_pcm,
            bursty: false,
            cc: knobs.cc,
        };
        let bursty = Case {
            bursty: true,
            ..at(1000)
        };
        let bbr = Case {
            cc: if knobs.cc == CongestionControl::Bbr {
                CongestionControl::Cubic
            } else {
                CongestionControl::Bbr
            },
            ..at(1000)
        };
        let (cases, arms) = if knobs.quick {
            (
                vec![at(0), at(1000), bursty, bbr],
                vec![
                    Arm::new(H1_JSON, 4),
                    Arm::new(H2C_PROTO, 1),
                    Arm::new(GRPC, 1),
                    Arm::new(GRPC, 4),
                    Arm::new(GRPC_BIDI, 1),
                    Arm::new(H3_PROTO, 1),
                    Arm::new(GRPC_H3, 1),
                ],
            )
        } else {
            (
                vec![at(0), at(100), at(1000), at(3000), bursty, bbr],
                vec![
                    Arm::new(H1_JSON, 1),
                    Arm::new(H1_JSON, 4),
                    Arm::new(H1_PROTO, 1),
                    Arm::new(H1_PROTO, 4),
                    Arm::new(H2C_PROTO, 1),
                    Arm::new(GRPC, 1),
                    Arm::new(GRPC, 4),
                    Arm::new(GRPC_BIDI, 1),
                    Arm::new(H3_PROTO, 1),
                    Arm::new(GRPC_H3, 1),
                ],
            )
        };
        let wanted = |via: &str| {
            knobs
                .transports
                .as_ref()
                .is_none_or(|t| t.iter().any(|x| x == via))
        };
        let arms = arms.into_iter().filter(|a| wanted(&a.via)).collect();
        // gRPC to four replicas at 1%: balanced by user-service (four
        // connections across the path, as gRPC ×4) or by HAProxy L7 beside
        // them (one, as gRPC ×1).
        let spread = wanted(GRPC).then(|| Spread {
            via: GRPC.to_owned(),
            n: SPREAD_REPLICAS,
            balances: vec![Balance::Client, Balance::L7],
            loss_pcm: 1000,
        });
        LossPlan {
            rtt_ms: 20,
            cases,
            arms,
            orders: knobs.sizes(&[100], &[1, 100]),
            vus: 16,
            spread,
        }
    }

    fn schedule(p: &LossPlan) -> Schedule {
        Schedule::Grid(cells(p))
    }

    fn describe(p: &LossPlan) -> String {
        let spread = p.spread.as_ref().map_or(String::new(), |s| {
            format!(
                "; {} to {} replicas ({}) at 0 and {}%",
                s.via,
                s.n,
                s.balances
                    .iter()
                    .map(|b| b.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                f64::from(s.loss_pcm) / 1000.0
            )
        });
        format!(
            "loss {} at RTT {} ms on a packet path; {}{spread}; {} VUs",
            p.cases
                .iter()
                .map(Case::name)
                .collect::<Vec<_>>()
                .join(", "),
            p.rtt_ms,
            p.arms.iter().map(Arm::name).collect::<Vec<_>>().join(", "),
            p.vus
        )
    }

    fn section(p: &LossPlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

fn section(p: &LossPlan, cx: &Context) -> Section {
    let d = cx.data;
    let mut s = Section::new(
        "loss",
        "Packet loss: one HTTP/2 connection against pools, and the congestion control",
    );
    s.para(method(
        cx.timing,
        &format!(
            "Closed loop, {} VUs; user-service and order-service in two network namespaces \
             joined by a packet path of {} ms round trip that loses packets at random in each \
             direction (bursty: Gilbert–Elliott, the same mean rate in bursts of {BURST_PACKETS} \
             packets on average); the kernels' own TCP retransmits them, with the congestion \
             control named in each column on both sides. `×N` after a transport is its pool: \
             HTTP/1.1 carries one call per connection, HTTP/2 and gRPC multiplex every caller \
             over the pool's connections, a bidi stream carries every lookup on one stream. \
             Upstream times are user-service's calls; which call waited behind another call's \
             lost packet is not counted (nothing on the wire says so)",
            p.vus, p.rtt_ms
        ),
    ));
    let quic_vias: Vec<String> = p
        .arms
        .iter()
        .filter(|a| a.quic())
        .map(|a| a.via.clone())
        .collect();
    if let Some(note) = crate::experiments::tables::quic_note(&quic_vias) {
        s.para(format!(
            "{note} Over QUIC each call rides a stream of its own, so a lost packet stalls only \
             the calls whose bytes it carried, and QUIC retransmits it itself, in user space, \
             under quinn's congestion control (cubic, its default, whatever the kernels run): \
             its arms are not run in the other algorithm's column, and the kernels' \
             retransmission counts do not see them."
        ));
    }
    s.para(crate::experiments::tables::path_facts(cx, Loss::NAME));
    let mut headers = vec!["transport ×pool".to_owned()];
    headers.extend(p.cases.iter().map(Case::name));
    for &orders in &p.orders {
        let what = f::orders(orders);
        for (m, k, unit, caption) in [
            (
                Metric::Rate,
                1.0,
                "req/s",
                format!("Good answers/s against loss (higher is better), {what}"),
            ),
            (
                Metric::UpP50,
                1e-3,
                "ms",
                format!("Upstream p50 against loss, ms, {what}"),
            ),
            (
                Metric::UpP99,
                1e-3,
                "ms",
                format!("Upstream p99 against loss, ms, {what}"),
            ),
            (
                Metric::UpP999,
                1e-3,
                "ms",
                format!("Upstream p99.9 against loss, ms, {what}"),
            ),
            (
                Metric::Retrans,
                1.0,
                Metric::Retrans.unit(),
                format!("Segments retransmitted by both kernels per 1,000 calls, {what}"),
            ),
        ] {
            let rows = p
                .arms
                .iter()
                .map(|arm| {
                    let mut row = vec![Value::text(arm.name())];
                    for case in &p.cases {
                        // Not measured by design, and said so in the cell.
                        if !arm.runs_in(case) {
                            row.push(Value::text("not run: QUIC runs quinn's own cubic"));
                            continue;
                        }
                        if m == Metric::Retrans && arm.quic() {
                            row.push(Value::text("in user space: not the kernels' count"));
                            continue;
                        }
                        let c = p.cell(arm, orders, case);
                        let v = Value::range(scaled(d.spread(&c, m), k), unit);
                        let base = p.lossless(case.cc).filter(|b| *b != case);
                        row.push(match (m, base) {
                            (Metric::Retrans, _) | (_, None) => v,
                            (_, Some(b)) => Value::parts(vec![
                                v,
                                Value::ratio(d.ratio(&c, &p.cell(arm, orders, b), m)),
                            ]),
                        });
                    }
                    row
                })
                .collect();
            let reading = match m {
                Metric::UpP99 | Metric::UpP999 => {
                    let tail = tail_reading(p, cx, orders, m);
                    match readings::quic_reading(p, cx, orders, m) {
                        Some(q) => format!("{tail} {q}"),
                        None => tail,
                    }
                }
                Metric::Rate => cc_reading(p, cx, orders),
                Metric::Retrans => retrans_reading(p, cx, orders),
                _ => p50_reading(p, cx, orders),
            };
            s.table(Table {
                caption,
                headers: headers.clone(),
                rows,
                reading,
            });
        }
    }
    if let Some(sp) = &p.spread {
        s.para(format!(
            "Across the path to several replicas: {} on a pool of 1 to {} order-service \
             replicas, all in the far namespace at addresses of their own on the path, \
             balanced by user-service (a connection to each replica crosses the path) or by \
             HAProxy L7 in the far namespace beside them (user-service's one connection to \
             HAProxy crosses the path, HAProxy's to the replicas do not). Beside them, the same \
             transport to one order-service on 1 and 4 connections, from the tables above. The \
             connections held are user-service's own count of its upstream connections at the \
             end of each round.",
            sp.via, sp.n
        ));
        for &orders in &p.orders {
            if let Some(t) = spread::spread_table(p, cx, orders) {
                s.table(t);
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_plan_has_a_cubic_bbr_pair_at_one_percent_on_the_packet_path() {
        let p = Loss::plan(&Knobs {
            quick: true,
            ..Knobs::default()
        });
        let c = cells(&p);
        assert!(c.iter().all(|c| c.env.path.is_some_and(|x| x.rtt_ms == 20)));
        for cc in [CongestionControl::Cubic, CongestionControl::Bbr] {
            assert!(c.iter().any(|c| {
                c.env
                    .path
                    .is_some_and(|x| x.loss_pcm == 1000 && x.cc == cc && !x.bursty)
            }));
        }
        // gRPC to four replicas across the path, balanced by user-service
        // and by HAProxy L7, at no loss and at 1%.
        let spread: Vec<_> = c
            .iter()
            .filter_map(|c| c.env.replicas.map(|r| (r, c.env.path)))
            .collect();
        assert_eq!(spread.len(), 4);
        assert!(
            spread
                .iter()
                .all(|(r, p)| r.n == 4 && p.is_some_and(|p| [0, 1000].contains(&p.loss_pcm)))
        );
        // HTTP/3's two arms beside one HTTP/2 connection, under cubic only
        // (quinn's own algorithm).
        let quic: Vec<_> = c
            .iter()
            .filter(|c| c.via == "grpc-h3" || c.via == "h3-proto")
            .collect();
        assert_eq!(quic.len(), 2 * 3, "two arms, the three cubic cases");
        assert!(
            quic.iter()
                .all(|c| c.env.path.is_some_and(|x| x.cc == CongestionControl::Cubic))
        );
        let full = Loss::plan(&Knobs::default());
        assert_eq!(cells(&full).len(), (6 * 8 + 5 * 2 + 2 * 2) * 2);
    }

    #[test]
    fn the_section_reads_its_numbers() {
        let (info, results) = crate::synthetic::run(&[Loss::NAME], true, 2);
        let report = crate::session::build_report(&info, &results);
        let empty = report.empty_cells();
        assert!(empty.is_empty(), "empty cells:\n{}", empty.join("\n"));
        let s = report
            .sections
            .iter()
            .find(|s| s.id == "loss")
            .expect("a loss section");
        let tables: Vec<&Table> = s.tables().collect();
        let p99 = tables
            .iter()
            .find(|t| t.caption.starts_with("Upstream p99 against loss"))
            .expect("a p99 table");
        // The synthetic data makes one connection's tail grow 3x as fast.
        assert!(
            p99.reading
                .contains("grows faster than a pool's from 1% cubic on"),
            "{}",
            p99.reading
        );
        let rate = tables
            .iter()
            .find(|t| t.caption.starts_with("Good answers/s"))
            .expect("a rate table");
        assert!(rate.reading.contains("under bbr"), "{}", rate.reading);
        assert!(
            rate.headers.iter().any(|h| h == "1% bbr"),
            "{:?}",
            rate.headers
        );
        // HTTP/3 set against one HTTP/2 connection, the same call, in the
        // tail's reading.
        assert!(
            p99.reading.contains("HTTP/3 against one HTTP/2 connection")
                && p99.reading.contains("grpc-h3 ×1's p99 was ×")
                && p99.reading.contains("grpc ×1's"),
            "{}",
            p99.reading
        );
        // In the synthetic data a lost packet costs one connection's calls
        // three times what it costs a pool's, replicas or not.
        let spread = tables
            .iter()
            .find(|t| {
                t.caption
                    .contains("across the lossy path to one order-service or to 4 replicas")
            })
            .expect("a table of the replicas across the path");
        assert_eq!(spread.rows.len(), 4, "{:?}", spread.rows);
        assert!(
            spread
                .reading
                .contains("the tail follows the connections that cross the lossy path")
                && spread
                    .reading
                    .contains("(grpc ×1, 4 replicas through HAProxy L7 beside them, rate ×"),
            "{}",
            spread.reading
        );
        let text = report.markdown();
        assert!(
            text.contains("was the one its column names on both sides in 60 of 60 rounds"),
            "{text}"
        );
    }
}
