//! The faults experiment's plan: the cases (a fault and where it strikes),
//! the transports that meet each, and the cells they make.

use serde::{Deserialize, Serialize};

use crate::experiment::PathChoice;
use crate::measure::cell::{Balance, Cell, Env, Fault, PacketPath, Replicas, Store};

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

    /// The case's name in tables: the fault, where it strikes, and what
    /// carries a silence.
    pub fn title(&self, path: PathChoice) -> String {
        match (self.fault, self.balance) {
            (_, Some(b)) => format!(
                "{}, three replicas {}",
                self.fault.describe(),
                balance_text(b)
            ),
            (Fault::Silence { ms }, None) => match path {
                PathChoice::Packets => format!(
                    "the path silent for {} s (every packet dropped, no RST)",
                    f64::from(ms) / 1e3
                ),
                PathChoice::Proxy => format!(
                    "the delay proxy holding every byte for {} s (no RST; the kernels still \
                     acknowledge)",
                    f64::from(ms) / 1e3
                ),
            },
            (Fault::PostgresRestart, None) => format!(
                "{}, order-service on the lab's own Postgres, user-service in memory",
                self.fault.describe()
            ),
            (_, None) => self.fault.describe(),
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
    /// Each caller's pause after an answer, ms: a failure answered in
    /// microseconds (order-service down) cannot then speed the load up
    /// past what the machine can send and serve, and every transport is
    /// offered the same ceiling (16 callers, 1 ms apart: under 16,000
    /// calls/s). Without it, the fast failures of a restart drove the
    /// load engine past half a core.
    #[serde(default)]
    pub think_ms: u32,
    /// The silent path's own round trip, ms, and its congestion control.
    pub path_rtt_ms: u32,
    pub cc: netpath::CongestionControl,
    /// What is silenced: a packet path, or the delay proxy holding bytes
    /// (`--path proxy`, where this machine has no packet path).
    #[serde(default)]
    pub path: PathChoice,
    /// The cases measured with the recommended settings too
    /// ([`crate::measure::cell::RECOMMENDED`]): every one they act on, or
    /// in the quick plan those where they act most (a replica killed under
    /// client-side balancing, a silent path).
    pub recommended: Vec<Case>,
}

/// How long a killed replica stays down, ms.
pub const DOWN_MS: u32 = 5_000;

/// Why a transport does not meet a case, if it does not, when silences
/// are made on `path`.
pub fn not_measured(via: &str, case: &Case, path: PathChoice) -> Option<&'static str> {
    let quic = transports::is_quic(via);
    match (case.fault, case.balance) {
        (Fault::Silence { .. }, _) if quic && path == PathChoice::Proxy => Some(
            "QUIC travels over UDP, which the delay proxy does not carry; on the packet path \
             (without --path proxy) HTTP/3 meets the silence",
        ),
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
        let silent = matches!(case.fault, Fault::Silence { .. });
        let env = Env {
            fault: Some(case.fault),
            recommended,
            replicas: case.balance.map(|balance| Replicas {
                n: 3,
                balance,
                slow: false,
                rotation: false,
            }),
            path: (silent && self.path == PathChoice::Packets).then(|| PacketPath {
                cc: self.cc,
                ..PacketPath::rtt(self.path_rtt_ms)
            }),
            rtt_ms: (silent && self.path == PathChoice::Proxy).then_some(self.path_rtt_ms),
            store: (case.fault == Fault::PostgresRestart).then_some(Store::OwnPostgres),
            ..Env::default()
        };
        Cell::closed(via, orders, self.vus, self.pool)
            .thinking(self.think_ms)
            .with_env(env)
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
                    if not_measured(via, case, self.path).is_some() {
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
