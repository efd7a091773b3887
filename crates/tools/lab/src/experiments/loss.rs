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

use serde::{Deserialize, Serialize};

use crate::experiment::{Context, Experiment, Knobs};
use crate::experiments::tables::{method, scaled};
use crate::measure::cell::{BURST_PACKETS, Cell, Env, PacketPath};
use crate::measure::figures::Metric;
use crate::measure::schedule::Schedule;
use crate::report::format::{self as f};
use crate::report::value::Value;
use crate::report::{Section, Table};
use netpath::CongestionControl;

pub struct Loss;

/// One transport on a pool of connections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arm {
    pub via: String,
    pub pool: u16,
}

impl Arm {
    fn new(via: &str, pool: u16) -> Arm {
        Arm {
            via: via.to_owned(),
            pool,
        }
    }

    fn name(&self) -> String {
        format!("{} ×{}", self.via, self.pool)
    }

    /// Every call shares one connection: one HTTP/2 connection, or a bidi
    /// stream on one.
    fn one_connection(&self) -> bool {
        self.via == transports::GRPC_BIDI || (self.pool == 1 && !self.via.starts_with("h1-"))
    }

    /// Calls spread over several connections, one call per HTTP/1.1
    /// connection at a time, or several HTTP/2 connections.
    fn pooled(&self) -> bool {
        self.pool > 1 && self.via != transports::GRPC_BIDI
    }
}

/// One condition of the path: loss, its pattern and the congestion control.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// Per 100,000 packets, each direction.
    pub loss_pcm: u32,
    pub bursty: bool,
    pub cc: CongestionControl,
}

impl Case {
    fn name(&self) -> String {
        let mut s = format!("{}%", f64::from(self.loss_pcm) / 1000.0);
        if self.bursty {
            s.push_str(" bursty");
        }
        s.push(' ');
        s.push_str(self.cc.name());
        s
    }
}

impl Experiment for Loss {
    type Plan = LossPlan;
    const NAME: &'static str = "loss";
    const ABOUT: &'static str = "Packet loss 0 to 3% at a 20 ms round trip on the packet path: one HTTP/2 connection against pools, cubic against bbr";

    fn target() -> Result<(), &'static str> {
        Err("it puts a packet path it makes between user-service and order-service")
    }

    fn plan(knobs: &Knobs) -> LossPlan {
        use transports::{GRPC, GRPC_BIDI, H1_JSON, H1_PROTO, H2C_PROTO};
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
                ],
            )
        };
        let arms = match &knobs.transports {
            Some(t) => arms.into_iter().filter(|a| t.contains(&a.via)).collect(),
            None => arms,
        };
        LossPlan {
            rtt_ms: 20,
            cases,
            arms,
            orders: knobs.sizes(&[100], &[1, 100]),
            vus: 16,
        }
    }

    fn schedule(p: &LossPlan) -> Schedule {
        Schedule::Grid(cells(p))
    }

    fn describe(p: &LossPlan) -> String {
        format!(
            "loss {} at RTT {} ms on a packet path; {}; {} VUs",
            p.cases.iter().map(Case::name).collect::<Vec<_>>().join(", "),
            p.rtt_ms,
            p.arms.iter().map(Arm::name).collect::<Vec<_>>().join(", "),
            p.vus
        )
    }

    fn section(p: &LossPlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

/// What the loss experiment measures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LossPlan {
    pub rtt_ms: u32,
    pub cases: Vec<Case>,
    pub arms: Vec<Arm>,
    pub orders: Vec<u32>,
    /// Closed-loop callers.
    pub vus: u32,
}

impl LossPlan {
    /// The run's algorithm: the lossless case's (cubic unless `--cc`).
    fn main_cc(&self) -> CongestionControl {
        self.cases
            .iter()
            .find(|c| c.loss_pcm == 0)
            .map_or(CongestionControl::Cubic, |c| c.cc)
    }

    pub fn cell(&self, arm: &Arm, orders: u32, case: &Case) -> Cell {
        Cell::closed(&arm.via, orders, self.vus, arm.pool).with_env(Env {
            path: Some(PacketPath {
                loss_pcm: case.loss_pcm,
                bursty: case.bursty,
                cc: case.cc,
                ..PacketPath::rtt(self.rtt_ms)
            }),
            ..Env::default()
        })
    }

    /// The lossless case of the same congestion control, else the first.
    fn lossless(&self, cc: CongestionControl) -> Option<&Case> {
        self.cases
            .iter()
            .find(|c| c.loss_pcm == 0 && c.cc == cc)
            .or_else(|| self.cases.iter().find(|c| c.loss_pcm == 0))
    }
}

/// Every cell of the experiment.
pub fn cells(p: &LossPlan) -> Vec<Cell> {
    let mut v = Vec::new();
    for &orders in &p.orders {
        for case in &p.cases {
            for arm in &p.arms {
                v.push(p.cell(arm, orders, case));
            }
        }
    }
    v
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
                Metric::UpP99 | Metric::UpP999 => tail_reading(p, cx, orders, m),
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
    s
}

/// How much a tail grows from no loss to `case`, per arm.
fn growth<'p>(
    p: &'p LossPlan,
    cx: &Context,
    orders: u32,
    case: &Case,
    m: Metric,
) -> Vec<(&'p Arm, f64)> {
    let Some(base) = p.lossless(case.cc) else {
        return Vec::new();
    };
    p.arms
        .iter()
        .filter_map(|a| {
            let lossy = cx.data.median(&p.cell(a, orders, case), m)?;
            let clean = cx.data.median(&p.cell(a, orders, base), m)?;
            (clean > 0.0).then_some((a, lossy / clean))
        })
        .collect()
}

/// A bare ratio: `×1.52`.
fn times(v: f64) -> String {
    format!("×{v:.2}")
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Whether one connection's tail grows faster with loss than a pool's,
/// and from what loss rate on (random loss, the run's algorithm).
fn tail_reading(p: &LossPlan, cx: &Context, orders: u32, m: Metric) -> String {
    let which = if m == Metric::UpP99 { "p99" } else { "p99.9" };
    let mut said = Vec::new();
    let mut from = None;
    for case in p
        .cases
        .iter()
        .filter(|c| c.loss_pcm > 0 && !c.bursty && c.cc == p.main_cc())
    {
        let g = growth(p, cx, orders, case, m);
        let one: Vec<f64> = g.iter().filter(|(a, _)| a.one_connection()).map(|x| x.1).collect();
        let pool: Vec<f64> = g.iter().filter(|(a, _)| a.pooled()).map(|x| x.1).collect();
        let (Some(o), Some(q)) = (mean(&one), mean(&pool)) else {
            continue;
        };
        said.push(format!(
            "at {} one connection's {which} grew {} and a pool's {}",
            case.name(),
            times(o),
            times(q)
        ));
        if o > q && from.is_none() {
            from = Some(case.name());
        }
    }
    if said.is_empty() {
        return format!(
            "Growth of the {which} with loss not measured on both one connection and a pool ({}).",
            f::MISSING
        );
    }
    let verdict = match from {
        Some(c) => format!("one connection's {which} grows faster than a pool's from {c} on"),
        None => format!("one connection's {which} did not grow faster than a pool's at any loss measured"),
    };
    format!(
        "Against the same transport without loss (mean over the arms): {}; {verdict}.",
        said.join("; ")
    )
}

/// The median call at the highest random loss under the run's algorithm,
/// against none.
fn p50_reading(p: &LossPlan, cx: &Context, orders: u32) -> String {
    let Some(worst) = p
        .cases
        .iter()
        .filter(|c| c.loss_pcm > 0 && !c.bursty && c.cc == p.main_cc())
        .max_by_key(|c| c.loss_pcm)
    else {
        return "No random loss under the run's algorithm was measured.".to_owned();
    };
    let mut g = growth(p, cx, orders, worst, Metric::UpP50);
    // As shown (two decimals), ties kept in the plan's order.
    g.sort_by(|a, b| ((a.1 * 100.0).round()).total_cmp(&(b.1 * 100.0).round()));
    match (g.first(), g.last()) {
        (Some(lo), Some(hi)) => format!(
            "At {}, the median call took from {} ({}) to {} ({}) its time without loss: loss reaches the median, not only the tail, when a retransmission's wait is longer than the call.",
            worst.name(),
            times(lo.1),
            lo.0.name(),
            times(hi.1),
            hi.0.name()
        ),
        _ => format!("Not measured with and without loss ({}).", f::MISSING),
    }
}

/// Where the kernels retransmitted most, per call.
fn retrans_reading(p: &LossPlan, cx: &Context, orders: u32) -> String {
    let mut most: Option<(String, String, f64)> = None;
    let mut lossless_max: f64 = 0.0;
    for case in &p.cases {
        for arm in &p.arms {
            let Some(v) = cx.data.median(&p.cell(arm, orders, case), Metric::Retrans) else {
                continue;
            };
            if case.loss_pcm == 0 {
                lossless_max = lossless_max.max(v);
            } else if most.as_ref().is_none_or(|m| v > m.2) {
                most = Some((arm.name(), case.name(), v));
            }
        }
    }
    match most {
        Some((arm, case, v)) => format!(
            "The most: {arm} at {case}, {} segments per 1,000 calls (a call's answer is several segments, so more retransmissions per call mean more of its segments were lost, not more loss); without loss, at most {}.",
            f::num(v),
            f::num(lossless_max)
        ),
        None => format!("Retransmissions were not recorded ({}).", f::MISSING),
    }
}

/// Whether the ranking of the arms by rate at the same loss differs
/// between cubic and bbr.
fn cc_reading(p: &LossPlan, cx: &Context, orders: u32) -> String {
    let pair: Vec<&Case> = p
        .cases
        .iter()
        .filter(|c| c.loss_pcm > 0 && !c.bursty)
        .collect();
    let both = |cc: CongestionControl| {
        pair.iter().copied().find(|c| {
            c.cc == cc
                && pair
                    .iter()
                    .any(|o| o.cc != cc && o.loss_pcm == c.loss_pcm)
        })
    };
    let (Some(cubic), Some(bbr)) = (
        both(CongestionControl::Cubic),
        both(CongestionControl::Bbr),
    ) else {
        return "No loss rate was measured under both cubic and bbr.".to_owned();
    };
    let rank = |case: &Case| -> Option<Vec<String>> {
        let mut v: Vec<(String, f64)> = p
            .arms
            .iter()
            .map(|a| Some((a.name(), cx.data.median(&p.cell(a, orders, case), Metric::Rate)?)))
            .collect::<Option<_>>()?;
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        Some(v.into_iter().map(|x| x.0).collect())
    };
    let (Some(rc), Some(rb)) = (rank(cubic), rank(bbr)) else {
        return format!("The cubic/bbr pair is incomplete ({}).", f::MISSING);
    };
    let gain: Vec<f64> = p
        .arms
        .iter()
        .filter_map(|a| {
            cx.data.ratio(&p.cell(a, orders, bbr), &p.cell(a, orders, cubic), Metric::Rate).map(|r| r.median)
        })
        .collect();
    format!(
        "At {}% loss, by rate: under cubic {}; under bbr {}: the ranking {} with the algorithm{}.",
        f64::from(cubic.loss_pcm) / 1000.0,
        rc.join(" > "),
        rb.join(" > "),
        if rc == rb { "does not change" } else { "changes" },
        match mean(&gain) {
            Some(g) => format!(", and bbr's rate is {} cubic's on average", times(g)),
            None => String::new(),
        }
    )
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
            assert!(c.iter().any(|c| c
                .env
                .path
                .is_some_and(|x| x.loss_pcm == 1000 && x.cc == cc && !x.bursty)));
        }
        let full = Loss::plan(&Knobs::default());
        assert_eq!(cells(&full).len(), 6 * 8 * 2);
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
            p99.reading.contains("grows faster than a pool's from 1% cubic on"),
            "{}",
            p99.reading
        );
        let rate = tables
            .iter()
            .find(|t| t.caption.starts_with("Good answers/s"))
            .expect("a rate table");
        assert!(rate.reading.contains("under bbr"), "{}", rate.reading);
        assert!(rate.headers.iter().any(|h| h == "1% bbr"), "{:?}", rate.headers);
        let text = report.markdown();
        assert!(
            text.contains("was the one its column names on both sides in 40 of 40 rounds"),
            "{text}"
        );
    }
}
