//! The `replicas` experiment: several order-service replicas, reached
//! directly, through a real HAProxy as L4 or L7 balancer, or balanced by
//! user-service itself, healthy and with one replica slow.
//!
//! HTTP/1.1 spreads its pooled connections over the replicas; a gRPC
//! channel is one long-lived HTTP/2 connection, which an L4 balancer pins to
//! one replica. Each replica's share of the calls is read from its own
//! `/metrics`, so a share is what the replica saw, not what a client meant.
//! With 3 replicas, user-service, k6 and HAProxy on the same cores, CPU
//! contention can skew shares by itself: each replica's CPU is reported, and
//! rounds on a saturated machine are flagged.

use serde::{Deserialize, Serialize};

use crate::experiment::{Context, Experiment, Knobs};
use crate::experiments::tables::method;
use crate::measure::cell::{Balance, Cell, Env, ROTATION_AGE_MS, Replicas as Setup, SLOW_RTT_MS};
use crate::measure::figures::Metric;
use crate::measure::schedule::Schedule;
use crate::report::format::{self as f, MISSING};
use crate::report::svg::{self, BarChart};
use crate::report::value::Value;
use crate::report::{Chart, Section, Table};

pub struct Replicas;

/// What surrounds the replicas in a cell, besides the balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// Every replica answers at the same speed.
    Healthy,
    /// The last replica is behind a delay proxy adding [`SLOW_RTT_MS`] to
    /// each round trip.
    Slow,
    /// Every replica rotates its connections past [`ROTATION_AGE_MS`]
    /// (measured behind the L4 balancer, where rotation is the remedy).
    Rotation,
}

impl Variant {
    fn title(self) -> String {
        match self {
            Variant::Healthy => "every replica healthy".to_owned(),
            Variant::Slow => format!("the last replica slow (+{SLOW_RTT_MS} ms per round trip)"),
            Variant::Rotation => format!(
                "behind L4 with connection rotation (a connection closed past {} s ±10%)",
                f::num(f64::from(ROTATION_AGE_MS) / 1000.0)
            ),
        }
    }
}

/// What the replicas experiment measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicasPlan {
    pub vias: Vec<String>,
    pub modes: Vec<Balance>,
    pub variants: Vec<Variant>,
    pub pools: Vec<u16>,
    pub n: u8,
    pub orders: u32,
    pub vus: u32,
}

/// Why a cell of the grid is not measured, if it is not.
pub fn not_measured(via: &str, mode: Balance, variant: Variant) -> Option<&'static str> {
    if via != transports::TCP_PROTO {
        return None;
    }
    if mode == Balance::L7 {
        return Some("raw TCP has no L7 form: an HTTP balancer cannot read its frames");
    }
    (variant == Variant::Rotation).then_some(
        "order-service does not rotate raw-TCP connections, so there is nothing to measure",
    )
}

impl ReplicasPlan {
    pub fn cell(&self, via: &str, mode: Balance, variant: Variant, pool: u16) -> Cell {
        Cell::closed(via, self.orders, self.vus, pool).with_env(Env {
            replicas: Some(Setup {
                n: self.n,
                balance: mode,
                slow: variant == Variant::Slow,
                rotation: variant == Variant::Rotation,
            }),
            ..Env::default()
        })
    }

    /// The balancing modes a variant is measured in.
    fn modes_of(&self, v: Variant) -> Vec<Balance> {
        match v {
            Variant::Rotation => vec![Balance::L4],
            _ => self.modes.clone(),
        }
    }

    /// Every (variant, pool, via, mode) the grid holds, in report order.
    fn grid(&self) -> Vec<(Variant, u16, String, Balance)> {
        let mut g = Vec::new();
        for &v in &self.variants {
            for &pool in &self.pools {
                for via in &self.vias {
                    for mode in self.modes_of(v) {
                        g.push((v, pool, via.clone(), mode));
                    }
                }
            }
        }
        g
    }
}

/// Every cell measured.
pub fn cells(p: &ReplicasPlan) -> Vec<Cell> {
    p.grid()
        .into_iter()
        .filter(|(v, _, via, mode)| not_measured(via, *mode, *v).is_none())
        .map(|(v, pool, via, mode)| p.cell(&via, mode, v, pool))
        .collect()
}

impl Experiment for Replicas {
    type Plan = ReplicasPlan;
    const NAME: &'static str = "replicas";
    const ABOUT: &'static str = "Three order-service replicas: direct, behind HAProxy L4 and L7, or balanced by user-service; shares, imbalance, a slow replica";

    fn target() -> Result<(), &'static str> {
        Err("it starts the replicas, the delay proxy in front of one and HAProxy")
    }

    fn plan(knobs: &Knobs) -> ReplicasPlan {
        let vias = knobs.transports.clone().unwrap_or_else(|| {
            let v: &[&str] = if knobs.quick {
                &[transports::GRPC, transports::H1_JSON, transports::H2C_JSON]
            } else {
                &[
                    transports::H1_JSON,
                    transports::H2C_JSON,
                    transports::GRPC,
                    transports::GRPC_BIDI,
                    transports::TCP_PROTO,
                ]
            };
            v.iter().map(|s| (*s).to_owned()).collect()
        });
        let (modes, variants, pools) = if knobs.quick {
            (
                vec![
                    Balance::L4,
                    Balance::L7,
                    Balance::Client,
                    Balance::ClientP2c,
                ],
                vec![Variant::Healthy, Variant::Slow],
                vec![1],
            )
        } else {
            (
                Balance::ALL.to_vec(),
                vec![Variant::Healthy, Variant::Slow, Variant::Rotation],
                vec![1, Knobs::POOL],
            )
        };
        ReplicasPlan {
            vias,
            modes,
            variants,
            pools,
            n: 3,
            orders: knobs.sizes(&[1], &[1]).first().copied().unwrap_or(1),
            vus: Knobs::VUS,
        }
    }

    fn schedule(p: &ReplicasPlan) -> Schedule {
        Schedule::Grid(cells(p))
    }

    fn describe(p: &ReplicasPlan) -> String {
        format!(
            "{} replicas; {}; pools {:?}; {}",
            p.n,
            p.modes
                .iter()
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(", "),
            p.pools,
            p.variants
                .iter()
                .map(|v| match v {
                    Variant::Healthy => "healthy",
                    Variant::Slow => "one slow",
                    Variant::Rotation => "l4 with rotation",
                })
                .collect::<Vec<_>>()
                .join(", ")
        )
    }

    fn section(p: &ReplicasPlan, cx: &Context) -> Section {
        section(p, cx)
    }
}

/// What a mode does, for the method paragraph.
fn mode_text(m: Balance) -> &'static str {
    match m {
        Balance::Direct => "`direct`: every call to the first replica, the others idle",
        Balance::L4 => "`l4`: HAProxy `mode tcp`, `balance roundrobin`, balancing connections",
        Balance::L7 => {
            "`l7`: HAProxy `mode http`, `balance roundrobin`, balancing requests, HTTP/1.1 kept \
             as HTTP/1.1 and h2c and gRPC as HTTP/2 toward the replicas (`proto h2`)"
        }
        Balance::Client => {
            "`client`: user-service knows every replica (`USER_ORDER_REPLICAS`) and picks one \
             per call, round robin, with its pool per replica"
        }
        Balance::ClientP2c => {
            "`client-p2c`: the same, picking the less busy of two replicas by calls in flight \
             (power of two choices)"
        }
    }
}

fn section(p: &ReplicasPlan, cx: &Context) -> Section {
    let mut s = Section::new(
        "replicas",
        "Several replicas: L4, L7 and client-side balancing",
    );
    s.para(method(
        cx.timing,
        &format!(
            "Closed loop, {} VUs, {} per call; {} order-service replicas on the same ports at \
             127.0.0.1–{}, as pods are. Modes: {}. The pool is per transport, and in the `client` \
             modes per replica (the total is the pool times {}). A call's replica is counted by \
             the replica itself (its `/metrics`: the calls for orders it answered well); shares \
             are of the calls the replicas answered. Imbalance is the largest share over the fair \
             one (1 is even, {} is every call on one replica). The slow replica is the last, \
             behind a delay proxy adding {SLOW_RTT_MS} ms to every round trip. HAProxy's CPU and \
             each replica's are measured; a round where the machine was 95% busy or more is \
             flagged, as contention can skew shares by itself",
            p.vus,
            f::orders(p.orders),
            p.n,
            p.n,
            p.modes
                .iter()
                .map(|m| mode_text(*m))
                .collect::<Vec<_>>()
                .join("; "),
            p.n,
            p.n
        ),
    ));
    let mut unmeasured: Vec<String> = Vec::new();
    for &variant in &p.variants {
        for via in &p.vias {
            for m in p.modes_of(variant) {
                if let Some(why) = not_measured(via, m, variant) {
                    let line = format!("{via} {}: {why}", m.name());
                    if !unmeasured.contains(&line) {
                        unmeasured.push(line);
                    }
                }
            }
        }
    }
    if !unmeasured.is_empty() {
        s.para(format!("Not measured: {}.", unmeasured.join("; ")));
    }
    for &variant in &p.variants {
        for &pool in &p.pools {
            s.table(table(p, cx, variant, pool));
        }
    }
    for &variant in &p.variants {
        if variant == Variant::Rotation {
            continue;
        }
        if let Some(&pool) = p.pools.first() {
            s.chart(chart(p, cx, variant, pool));
        }
    }
    s
}

/// What the flag of a round on a saturated machine says (`flags_of`).
const SATURATED_FLAG: &str = "CPU contention may skew the replicas' shares";

/// `a · b · c` of each replica's figure (with their total, when `total`).
fn per_replica(
    p: &ReplicasPlan,
    cx: &Context,
    c: &Cell,
    m: fn(u8) -> Metric,
    total: bool,
) -> Value {
    let medians: Vec<Option<f64>> = (0..p.n).map(|i| cx.data.median(c, m(i))).collect();
    if medians.iter().all(Option::is_none) {
        return Value::missing("no round");
    }
    let parts: Vec<String> = medians
        .iter()
        .map(|v| v.map_or_else(|| MISSING.to_owned(), f::num))
        .collect();
    let sum: f64 = medians.iter().flatten().sum();
    if total {
        Value::text(format!("{} (total {})", parts.join(" · "), f::num(sum)))
    } else {
        Value::text(parts.join(" · "))
    }
}

fn table(p: &ReplicasPlan, cx: &Context, variant: Variant, pool: u16) -> Table {
    let mut t = Table {
        caption: format!("{}, pool {pool}", variant.title()),
        headers: [
            "transport",
            "mode",
            "req/s",
            "p50 ms",
            "p99 ms",
            "upstream p50 µs",
            "upstream p99 µs",
            "calls per replica, %",
            "imbalance, × fair",
            "connections per replica",
            "CPU per replica, cores",
            "HAProxy, cores",
        ]
        .iter()
        .map(|h| (*h).to_owned())
        .collect(),
        ..Table::default()
    };
    for via in &p.vias {
        for mode in p.modes_of(variant) {
            if not_measured(via, mode, variant).is_some() {
                // Said once in the method paragraph, rather than a row of n/a.
                continue;
            }
            let mut row = vec![via.clone().into(), mode.name().into()];
            let c = p.cell(via, mode, variant, pool);
            row.extend([
                cx.fig(&c, Metric::Rate),
                cx.fig(&c, Metric::E2eP50),
                cx.fig(&c, Metric::E2eP99),
                cx.fig(&c, Metric::UpP50),
                cx.fig(&c, Metric::UpP99),
                per_replica(p, cx, &c, Metric::ReplicaShare, false),
                cx.fig(&c, Metric::Imbalance),
                per_replica(p, cx, &c, Metric::ReplicaConnections, true),
                per_replica(p, cx, &c, Metric::ReplicaCores, false),
                match mode {
                    Balance::L4 | Balance::L7 => cx.fig(&c, Metric::BalancerCores),
                    _ => Value::text("no balancer"),
                },
            ]);
            t.rows.push(row);
        }
    }
    t.reading = reading(p, cx, variant, pool);
    t
}

/// The table's line, computed from its numbers.
fn reading(p: &ReplicasPlan, cx: &Context, variant: Variant, pool: u16) -> String {
    let d = cx.data;
    let cells: Vec<(String, Balance, Cell)> = p
        .vias
        .iter()
        .flat_map(|via| {
            p.modes_of(variant)
                .into_iter()
                .filter(|m| not_measured(via, *m, variant).is_none())
                .map(|m| (via.clone(), m, p.cell(via, m, variant, pool)))
                .collect::<Vec<_>>()
        })
        .collect();
    let name = |(via, m): (&String, Balance)| format!("{via} {}", m.name());
    let saturated = cells
        .iter()
        .filter(|(.., c)| {
            cx.results
                .records
                .iter()
                .filter(|r| r.cell == *c)
                .any(|r| r.flags.iter().any(|f| f.contains(SATURATED_FLAG)))
        })
        .count();
    let contention = if saturated > 0 {
        format!(
            " {saturated} of {} cells had a round on a saturated machine: read their shares with care.",
            cells.len()
        )
    } else {
        String::new()
    };
    match variant {
        Variant::Slow => {
            let fair = 100.0 / f64::from(p.n);
            let slow = p.n - 1;
            let (mut below, mut not_below, mut pinned) = (Vec::new(), Vec::new(), Vec::new());
            for (via, m, c) in &cells {
                if *m == Balance::Direct {
                    continue;
                }
                let (Some(share), Some(x)) = (
                    d.median(c, Metric::ReplicaShare(slow)),
                    d.median(c, Metric::Imbalance),
                ) else {
                    continue;
                };
                let entry = format!("{} ({}%)", name((via, *m)), f::num(share));
                if x >= 0.9 * f64::from(p.n) {
                    pinned.push(entry);
                } else if share < fair * 0.9 {
                    below.push(entry);
                } else {
                    not_below.push(entry);
                }
            }
            if below.is_empty() && not_below.is_empty() && pinned.is_empty() {
                return format!("{MISSING}: no round with several replicas reached.{contention}");
            }
            let pinned = if pinned.is_empty() {
                String::new()
            } else {
                format!(
                    " Pinned to one replica, so the slow one's share is where the connection \
                     landed, not a response to its speed: {}.",
                    pinned.join(", ")
                )
            };
            format!(
                "The slow replica's fair share is {}%. Spreading calls, kept it well below \
                 (under 90% of fair): {}; did not: {}.{pinned}{contention}",
                f::num(fair),
                list_or_none(&below),
                list_or_none(&not_below)
            )
        }
        _ => {
            let (mut even, mut uneven) = (Vec::new(), Vec::new());
            for (via, m, c) in &cells {
                if *m == Balance::Direct {
                    continue;
                }
                if let Some(x) = d.median(c, Metric::Imbalance) {
                    let entry = format!("{} (×{})", name((via, *m)), f::num(x));
                    if x <= 1.2 {
                        even.push(entry);
                    } else {
                        uneven.push(entry);
                    }
                }
            }
            if even.is_empty() && uneven.is_empty() {
                return format!("{MISSING}: no round with several replicas reached.{contention}");
            }
            format!(
                "Within 20% of an even spread: {}. Uneven (one replica over 1.2× its fair \
                 share): {}.{contention}",
                list_or_none(&even),
                list_or_none(&uneven)
            )
        }
    }
}

fn list_or_none(v: &[String]) -> String {
    if v.is_empty() {
        "none".to_owned()
    } else {
        v.join(", ")
    }
}

fn chart(p: &ReplicasPlan, cx: &Context, variant: Variant, pool: u16) -> Chart {
    let title = format!("Calls per replica, {}, pool {pool}", variant.title());
    let mut groups = Vec::new();
    let mut values = Vec::new();
    for via in &p.vias {
        for mode in p.modes_of(variant) {
            if not_measured(via, mode, variant).is_some() {
                continue;
            }
            let c = p.cell(via, mode, variant, pool);
            groups.push(format!("{via} {}", mode.name()));
            values.push(
                (0..p.n)
                    .map(|i| cx.data.median(&c, Metric::ReplicaShare(i)))
                    .collect(),
            );
        }
    }
    let file = match variant {
        Variant::Healthy => "replicas-shares.svg",
        Variant::Slow => "replicas-shares-slow.svg",
        Variant::Rotation => "replicas-shares-rotation.svg",
    };
    Chart {
        file: file.into(),
        title: title.clone(),
        svg: svg::bar_chart(&BarChart {
            title,
            y_label: "% of calls".into(),
            y_log: false,
            groups,
            series: (1..=p.n)
                .map(|i| {
                    if variant == Variant::Slow && i == p.n {
                        format!("replica {i} (slow)")
                    } else {
                        format!("replica {i}")
                    }
                })
                .collect(),
            values,
            stacked: false,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_plan_is_three_transports_four_modes_healthy_and_slow() {
        let p = Replicas::plan(&Knobs {
            quick: true,
            ..Knobs::default()
        });
        let c = cells(&p);
        assert_eq!(c.len(), 3 * 4 * 2);
        assert!(Replicas::schedule(&p).needs().haproxy);
        assert!(c.iter().all(|c| c.env.replicas.is_some_and(|r| r.n == 3)));
        assert_eq!(
            c.iter()
                .filter(|c| c.env.replicas.is_some_and(|r| r.slow))
                .count(),
            12
        );
    }

    #[test]
    fn raw_tcp_has_no_l7_cell_and_says_why() {
        let p = Replicas::plan(&Knobs::default());
        let c = cells(&p);
        assert!(!c.iter().any(|c| c.via == transports::TCP_PROTO
            && c.env.replicas.is_some_and(|r| r.balance == Balance::L7)));
        assert!(not_measured(transports::TCP_PROTO, Balance::L7, Variant::Healthy).is_some());
        assert!(not_measured(transports::TCP_PROTO, Balance::L4, Variant::Rotation).is_some());
        assert!(not_measured(transports::GRPC, Balance::L4, Variant::Rotation).is_none());
        // Rotation only behind L4.
        assert!(
            c.iter()
                .filter(|c| c.env.replicas.is_some_and(|r| r.rotation))
                .all(|c| c.env.replicas.is_some_and(|r| r.balance == Balance::L4))
        );
        // Cell ids are unique.
        let ids: std::collections::BTreeSet<String> = c.iter().map(Cell::id).collect();
        assert_eq!(ids.len(), c.len());
    }
}
