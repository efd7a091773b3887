//! What the rtt experiment measures ([`RttPlan`]), its cells, and the
//! per-RTT figure both its proxy and its path tables read.

use serde::{Deserialize, Serialize};

use crate::experiment::{Context, PathChoice};
use crate::measure::cell::{Cell, Env, PacketPath};
use crate::measure::figures::Metric;
use crate::stats::Spread;

/// What the rtt experiment measures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RttPlan {
    /// Emulated round-trip times, ms (half on each direction).
    pub rtts_ms: Vec<u32>,
    pub vias: Vec<String>,
    /// user-service's connections per transport.
    pub pools: Vec<u16>,
    /// Closed-loop callers: more than the pool, so that HTTP/1.1 queues.
    pub vus: u32,
    /// Orders per call: small, so that the round trip, not the payload,
    /// is what is measured.
    pub orders: Vec<u32>,
    /// What carries the round trip (plans written before the packet path
    /// existed ran on the proxy).
    #[serde(default = "PathChoice::before_packets")]
    pub path: PathChoice,
    /// TCP's congestion control on the packet path.
    #[serde(default)]
    pub cc: netpath::CongestionControl,
    /// The transports run through both the proxy and the packet path at
    /// [`HIDDEN_RTT_MS`], at each of `hidden_orders` (none: no such table).
    #[serde(default)]
    pub hidden_vias: Vec<String>,
    #[serde(default)]
    pub hidden_orders: Vec<u32>,
    /// Each caller's idle time between calls in the idle-then-burst cells
    /// (0: none): pooled connections idle past their retransmission
    /// timeout, then a 1,000-order answer.
    #[serde(default)]
    pub idle_ms: u32,
}

/// The idle-then-burst cells' idle time, ms: well past a retransmission
/// timeout at 20 ms (at least 200 ms).
pub const IDLE_MS: u32 = 1000;
/// Their callers: as many as the pool's connections, so that each
/// connection sits idle between its calls.
pub const IDLE_VUS: u32 = 4;
/// Their transports: HTTP/1.1 and HTTP/2 pools.
pub const IDLE_VIAS: [&str; 2] = [transports::H1_JSON, transports::GRPC];
/// Their answer size.
pub const IDLE_ORDERS: u32 = 1000;

/// The round trip of the proxy-against-packets table, ms.
pub const HIDDEN_RTT_MS: u32 = 20;

impl RttPlan {
    /// The cell of one transport, pool, payload and RTT.
    pub fn cell(&self, via: &str, pool: u16, orders: u32, rtt_ms: u32) -> Cell {
        self.cell_on(self.path, via, pool, orders, rtt_ms)
    }

    /// The same on a given path.
    pub fn cell_on(
        &self,
        path: PathChoice,
        via: &str,
        pool: u16,
        orders: u32,
        rtt_ms: u32,
    ) -> Cell {
        let env = match path {
            PathChoice::Packets => Env {
                path: Some(PacketPath {
                    cc: self.cc,
                    ..PacketPath::rtt(rtt_ms)
                }),
                ..Env::default()
            },
            PathChoice::Proxy => Env {
                rtt_ms: Some(rtt_ms),
                ..Env::default()
            },
        };
        Cell::closed(via, orders, self.vus, pool).with_env(env)
    }

    /// The pool of the proxy-against-packets cells: the largest planned.
    pub(super) fn hidden_pool(&self) -> u16 {
        self.pools.iter().copied().max().unwrap_or(4)
    }

    /// An idle-then-burst cell on the packet path at [`HIDDEN_RTT_MS`]:
    /// each caller idle `think_ms` between calls (0: the warm counterpart).
    pub fn idle_cell(&self, via: &str, think_ms: u32) -> Cell {
        let mut c = self.cell_on(
            PathChoice::Packets,
            via,
            self.hidden_pool(),
            IDLE_ORDERS,
            HIDDEN_RTT_MS,
        );
        c.load = crate::measure::cell::Load::Closed { vus: IDLE_VUS };
        c.thinking(think_ms)
    }

    /// The proxy-against-packets cells, on `path`.
    pub fn hidden_cells(&self, path: PathChoice) -> Vec<Cell> {
        let mut v = Vec::new();
        for &orders in &self.hidden_orders {
            for via in &self.hidden_vias {
                v.push(self.cell_on(path, via, self.hidden_pool(), orders, HIDDEN_RTT_MS));
            }
        }
        v
    }

    pub(super) fn path_words(&self) -> String {
        match self.path {
            PathChoice::Packets => format!("a packet path ({})", self.cc),
            PathChoice::Proxy => "the delay proxy".to_owned(),
        }
    }
}

/// A figure of every grid cell at one RTT, every round of each, as one
/// spread: the delay proxy's or the path's own figures per RTT column.
pub(super) fn over_grid(r: &RttPlan, cx: &Context, ms: u32, m: Metric) -> Option<Spread> {
    let mut v = Vec::new();
    for &pool in &r.pools {
        for &orders in &r.orders {
            for via in &r.vias {
                v.extend(
                    cx.data
                        .values(&r.cell(via, pool, orders, ms), m)
                        .into_iter()
                        .flatten(),
                );
            }
        }
    }
    Spread::of(&v)
}
