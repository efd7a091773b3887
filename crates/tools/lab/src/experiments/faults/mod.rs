//! The `faults` experiment: what each transport does when the other side
//! fails, under steady load. One fault per cell, [`Fault::ONSET_S`] into
//! the measured run: a replica killed among three (balanced by
//! user-service, or behind HAProxy L4 or L7) and started again 5 s later;
//! order-service restarted gracefully; the path between the services
//! silent for 2 s and 10 s; every connection reset at once.
//!
//! Each cell is read from both sides: k6 counts how every call ended (by
//! the status user-service gave, and the calls slower than 1 s);
//! user-service's counters, sampled every 100 ms through the run
//! ([`crate::measure::runner::fault`]), give the timeline the recovery is
//! read from; order-service's own count of lookups it answered is set
//! against what user-service got, when the process that counted them
//! lived through the fault. [`figures`] holds what each round yields.

pub mod figures;
mod section;

use serde::{Deserialize, Serialize};

use crate::experiment::{Context, Experiment, Knobs};
use crate::measure::cell::{Balance, Cell, Env, Fault, PacketPath, Replicas};
use crate::measure::schedule::Schedule;
use crate::report::Section;

pub struct Faults;

/// One fault and where it strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    pub fault: Fault,
    /// A replica's death is met by three replicas balanced this way; every
    /// other fault by one order-service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balance: Option<Balance>,
}

impl Case {
    /// Whether the recommended settings act on this fault: a second try
    /// on another replica (a killed replica, when user-service balances),
    /// keep-alive and a connect timeout (a silent path; a killed replica).
    /// A restart and a reset are met the same way by both (a refused
    /// connect fails at once; a reset one is resent by default).
    pub fn recommended_acts(&self) -> bool {
        matches!(self.fault, Fault::Kill { .. } | Fault::Silence { .. })
    }

    /// The case's name in tables: the fault, and its balancer.
    pub fn title(&self) -> String {
        match self.balance {
            Some(b) => format!("{}, three replicas {}", self.fault.describe(), balance_text(b)),
            None => self.fault.describe(),
        }
    }
}

/// How a balancing mode reads in a title.
fn balance_text(b: Balance) -> &'static str {
    match b {
        Balance::L4 => "behind HAProxy L4",
        Balance::L7 => "behind HAProxy L7",
        Balance::Client | Balance::ClientP2c => "balanced by user-service",
        Balance::Direct => "reached at the first",
    }
}

/// What the faults experiment measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultsPlan {
    pub vias: Vec<String>,
    pub orders: Vec<u32>,
    pub cases: Vec<Case>,
    /// Callers (closed loop), and user-service's pool: one connection per
    /// caller, so that no call waits for a slot.
    pub vus: u32,
    pub pool: u16,
    /// The silent path's own round trip, ms, and its congestion control.
    pub path_rtt_ms: u32,
    pub cc: netpath::CongestionControl,
    /// The cases measured with the recommended settings too
    /// ([`crate::measure::cell::RECOMMENDED`]): every one they act on, or
    /// in the quick plan those where they act most (a replica killed under
    /// client-side balancing, a silent path).
    pub recommended: Vec<Case>,
}

/// How long a killed replica stays down, ms.
pub const DOWN_MS: u32 = 5_000;

/// Why a transport does not meet a case, if it does not.
pub fn not_measured(via: &str, case: &Case) -> Option<&'static str> {
    let quic = transports::is_quic(via);
    match (case.fault, case.balance) {
        (_, Some(_)) if quic => Some(
            "HAProxy and the replicas' setup carry TCP only; HTTP/3 meets the faults of one \
             order-service",
        ),
        (_, Some(Balance::L7)) if via == transports::TCP_PROTO => {
            Some("raw TCP has no L7 form: an HTTP balancer cannot read its frames")
        }
        (Fault::Reset, _) if quic => {
            Some("QUIC runs over UDP: there is no TCP connection to reset")
        }
        _ => None,
    }
}

impl FaultsPlan {
    pub fn cell(&self, via: &str, orders: u32, case: &Case, recommended: bool) -> Cell {
        let env = Env {
            fault: Some(case.fault),
            recommended,
            replicas: case.balance.map(|balance| Replicas {
                n: 3,
                balance,
                slow: false,
                rotation: false,
            }),
            path: matches!(case.fault, Fault::Silence { .. }).then(|| PacketPath {
                cc: self.cc,
                ..PacketPath::rtt(self.path_rtt_ms)
            }),
            ..Env::default()
        };
        Cell::closed(via, orders, self.vus, self.pool).with_env(env)
    }

    /// The settings a case is measured with: the defaults, and the
    /// recommended ones where they act on it.
    pub fn settings(&self, case: &Case) -> Vec<bool> {
        if self.recommended.contains(case) {
            vec![false, true]
        } else {
            vec![false]
        }
    }

    /// Every cell measured, in report order.
    pub fn cells(&self) -> Vec<Cell> {
        let mut g = Vec::new();
        for case in &self.cases {
            for &orders in &self.orders {
                for via in &self.vias {
                    if not_measured(via, case).is_some() {
                        continue;
                    }
                    for rec in self.settings(case) {
                        g.push(self.cell(via, orders, case, rec));
                    }
                }
            }
        }
        g
    }
}

/// The transport families, one transport each: HTTP/1.1, h2c, Connect,
/// gRPC unary, a gRPC stream carrying many lookups, raw TCP, HTTP/3.
pub const FAMILIES: [&str; 7] = [
    transports::H1_JSON,
    transports::H2C_PROTO,
    transports::CONNECT_H2C_PROTO,
    transports::GRPC,
    transports::GRPC_BIDI,
    transports::TCP_PROTO,
    transports::H3_PROTO,
];

impl Experiment for Faults {
    type Plan = FaultsPlan;
    const NAME: &'static str = "faults";
    const ABOUT: &'static str = "What each transport does when the other side fails under load: a replica killed, a restart, a silent path, every connection reset; failed calls, slow calls, recovery, counted on both sides";

    fn target() -> Result<(), &'static str> {
        Err("it kills, restarts and cuts off the services it started")
    }

    fn plan(knobs: &Knobs) -> FaultsPlan {
        let vias = knobs
            .transports
            .clone()
            .unwrap_or_else(|| FAMILIES.iter().map(|s| (*s).to_owned()).collect());
        let mut cases: Vec<Case> = [Balance::Client, Balance::L4, Balance::L7]
            .into_iter()
            .map(|b| Case {
                fault: Fault::Kill { down_ms: DOWN_MS },
                balance: Some(b),
            })
            .collect();
        // The 10 s silence outlasts the calls' 5 s timeout; the 2 s one
        // (full plan) does not.
        let silences: &[u32] = if knobs.quick {
            &[10_000]
        } else {
            &[2_000, 10_000]
        };
        let singles = [Fault::Restart]
            .into_iter()
            .chain(silences.iter().map(|&ms| Fault::Silence { ms }))
            .chain([Fault::Reset]);
        for fault in singles {
            cases.push(Case {
                fault,
                balance: None,
            });
        }
        let recommended = cases
            .iter()
            .filter(|c| c.recommended_acts())
            .filter(|c| {
                !knobs.quick
                    || matches!(c.fault, Fault::Silence { .. })
                    || c.balance == Some(Balance::Client)
            })
            .copied()
            .collect();
        FaultsPlan {
            vias,
            orders: knobs.sizes(&[1], &[1, 100]),
            cases,
            vus: 16,
            pool: 16,
            path_rtt_ms: 2,
            cc: knobs.cc,
            recommended,
        }
    }

    fn schedule(p: &FaultsPlan) -> Schedule {
        Schedule::Grid(p.cells())
    }

    fn describe(p: &FaultsPlan) -> String {
        format!(
            "{} faults; {} callers; orders {:?}; defaults, and the recommended settings in {} of them",
            p.cases.len(),
            p.vus,
            p.orders,
            p.recommended.len()
        )
    }

    fn section(p: &FaultsPlan, cx: &Context) -> Section {
        section::section(p, cx)
    }
}

#[cfg(test)]
mod tests;
