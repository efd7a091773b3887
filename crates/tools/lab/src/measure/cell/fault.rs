//! What breaks during a fault's cell ([`Fault`]), and the settings the
//! book recommends for when it does ([`RECOMMENDED`]).

use serde::{Deserialize, Serialize};

/// The settings the book recommends for when the other side fails, as
/// user-service takes them: a connect timeout of its own, keep-alive (TCP
/// probes and `TCP_USER_TIMEOUT` on every connection, HTTP/2 PINGs on the
/// gRPC channels), and a second try on another replica within a budget of
/// 20% of the calls (Finagle's default retry budget). Every other setting
/// is the default.
pub const RECOMMENDED: [(&str, &str); 3] = [
    ("USER_UPSTREAM_CONNECT_TIMEOUT_MS", "1000"),
    ("USER_UPSTREAM_KEEPALIVE_MS", "1000"),
    ("USER_UPSTREAM_RETRY_BUDGET_PCT", "20"),
];

/// What breaks once during a measured run, [`Fault::ONSET_S`] after the
/// load began, while the load goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Fault {
    /// One replica of several (the second) killed with SIGKILL, and
    /// started again on the same ports `down_ms` later: a crashed pod.
    Kill { down_ms: u32 },
    /// order-service stopped with SIGTERM (it drains its calls) and started
    /// again on the same ports as soon as it has exited: a release.
    Restart,
    /// The packet path between the services drops every packet both ways
    /// for `ms`, with no RST and no ICMP: a dead host or a partition.
    Silence { ms: u32 },
    /// Every TCP connection between the services reset at once (RST both
    /// ways), as a load balancer or a NAT losing its state does.
    Reset,
    /// order-service's Postgres (a server of the lab's own) restarted with
    /// `pg_ctl restart -m fast`: every session ended, the server down until
    /// it accepts connections again, order-service running throughout.
    PostgresRestart,
}

impl Fault {
    /// When the fault begins, seconds after the load began.
    pub const ONSET_S: f64 = 4.0;
    /// How long the load goes on after the fault ended, at least, for the
    /// recovery to show.
    pub const AFTER_S: f64 = 8.0;

    /// How long the fault itself is planned to last, s (a restart's length
    /// is what the process takes).
    pub fn planned_s(self) -> f64 {
        match self {
            Fault::Kill { down_ms } | Fault::Silence { ms: down_ms } => f64::from(down_ms) / 1e3,
            Fault::Restart | Fault::Reset | Fault::PostgresRestart => 0.0,
        }
    }

    /// The shortest measured run that holds the time before, the fault and
    /// the time after.
    pub fn min_duration_s(self) -> f64 {
        Self::ONSET_S + self.planned_s() + Self::AFTER_S
    }

    /// A short name for ids and tables.
    pub fn id(self) -> String {
        match self {
            Fault::Kill { down_ms } => format!("kill{down_ms}"),
            Fault::Restart => "restart".to_owned(),
            Fault::Silence { ms } => format!("silent{ms}"),
            Fault::Reset => "rst".to_owned(),
            Fault::PostgresRestart => "pgrestart".to_owned(),
        }
    }

    /// What it is, in words.
    pub fn describe(self) -> String {
        match self {
            Fault::Kill { down_ms } => format!(
                "a replica killed (SIGKILL), started again {} s later",
                f64::from(down_ms) / 1e3
            ),
            Fault::Restart => "order-service restarted (SIGTERM, drain, start)".to_owned(),
            Fault::Silence { ms } => format!(
                "the path silent for {} s (nothing passes either way, no RST)",
                f64::from(ms) / 1e3
            ),
            Fault::Reset => "every connection reset (RST)".to_owned(),
            Fault::PostgresRestart => {
                "order-service's Postgres restarted (pg_ctl restart -m fast)".to_owned()
            }
        }
    }
}
