//! What the loss experiment measures: its arms (a transport on a pool),
//! its cases (a loss, its pattern, the congestion control), the replicas
//! across the path, and every cell.

use serde::{Deserialize, Serialize};

use crate::measure::cell::{Balance, Cell, Env, PacketPath, Replicas};
use netpath::CongestionControl;

/// One transport on a pool of connections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arm {
    pub via: String,
    pub pool: u16,
}

impl Arm {
    pub(super) fn new(via: &str, pool: u16) -> Arm {
        Arm {
            via: via.to_owned(),
            pool,
        }
    }

    pub(super) fn name(&self) -> String {
        format!("{} ×{}", self.via, self.pool)
    }

    /// Every call shares one TCP connection: one HTTP/2 connection, or a
    /// bidi stream on one (QUIC's one connection is not counted here: a
    /// lost packet stalls only its own stream).
    pub(super) fn one_connection(&self) -> bool {
        !self.quic()
            && (self.via == transports::GRPC_BIDI
                || (self.pool == 1 && !self.via.starts_with("h1-")))
    }

    /// Over QUIC (HTTP/3): its own congestion control and retransmissions,
    /// in user space.
    pub(super) fn quic(&self) -> bool {
        transports::is_quic(&self.via)
    }

    /// Whether this arm runs in `case`: a QUIC arm only under cubic, which
    /// is quinn's own congestion control whatever the kernels run (the
    /// other algorithm's column would not be what it says for it).
    pub(super) fn runs_in(&self, case: &Case) -> bool {
        !self.quic() || case.cc == CongestionControl::Cubic
    }

    /// Calls spread over several connections, one call per HTTP/1.1
    /// connection at a time, or several HTTP/2 connections.
    pub(super) fn pooled(&self) -> bool {
        self.pool > 1 && self.via != transports::GRPC_BIDI && !self.quic()
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
    pub(super) fn name(&self) -> String {
        let mut s = format!("{}%", f64::from(self.loss_pcm) / 1000.0);
        if self.bursty {
            s.push_str(" bursty");
        }
        s.push(' ');
        s.push_str(self.cc.name());
        s
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
    /// The transport to several replicas, if measured.
    #[serde(default)]
    pub spread: Option<Spread>,
}

impl LossPlan {
    /// The run's algorithm: the lossless case's (cubic unless `--cc`).
    pub(super) fn main_cc(&self) -> CongestionControl {
        self.cases
            .iter()
            .find(|c| c.loss_pcm == 0)
            .map_or(CongestionControl::Cubic, |c| c.cc)
    }

    /// The path of `case`.
    fn path(&self, case: &Case) -> PacketPath {
        PacketPath {
            loss_pcm: case.loss_pcm,
            bursty: case.bursty,
            cc: case.cc,
            ..PacketPath::rtt(self.rtt_ms)
        }
    }

    pub fn cell(&self, arm: &Arm, orders: u32, case: &Case) -> Cell {
        Cell::closed(&arm.via, orders, self.vus, arm.pool).with_env(Env {
            path: Some(self.path(case)),
            ..Env::default()
        })
    }

    /// The spread's transport on a pool of 1 (per replica, when balanced by
    /// user-service) to its replicas, reached as `balance` says, in `case`.
    pub fn spread_cell(&self, s: &Spread, balance: Balance, orders: u32, case: &Case) -> Cell {
        Cell::closed(&s.via, orders, self.vus, 1).with_env(Env {
            path: Some(self.path(case)),
            replicas: Some(Replicas {
                n: s.n,
                balance,
                slow: false,
                rotation: false,
            }),
            ..Env::default()
        })
    }

    /// The spread's two cases: no loss and its loss, random, under the
    /// run's algorithm.
    pub fn spread_cases(&self, s: &Spread) -> [Case; 2] {
        let cc = self.main_cc();
        let at = |loss_pcm| Case {
            loss_pcm,
            bursty: false,
            cc,
        };
        [at(0), at(s.loss_pcm)]
    }

    /// The lossless case of the same congestion control, else the first.
    pub(super) fn lossless(&self, cc: CongestionControl) -> Option<&Case> {
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
            for arm in p.arms.iter().filter(|a| a.runs_in(case)) {
                v.push(p.cell(arm, orders, case));
            }
        }
        if let Some(s) = &p.spread {
            for case in &p.spread_cases(s) {
                for &b in &s.balances {
                    v.push(p.spread_cell(s, b, orders, case));
                }
            }
        }
    }
    v
}

/// A transport across the path to several replicas, beside the same
/// transport to one order-service: whether what a lossy path punishes is
/// the connections crossing it or the servers behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spread {
    pub via: String,
    /// Replicas, all beyond the path.
    pub n: u8,
    /// How user-service reaches them: balancing itself (a connection to
    /// each replica crosses the path), or through HAProxy L7 beside them
    /// (one connection crosses it).
    pub balances: Vec<Balance>,
    /// The lossy case's loss, per 100,000 packets.
    pub loss_pcm: u32,
}
