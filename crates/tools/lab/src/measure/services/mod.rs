//! The two services as child processes: building them, starting them on
//! free ports in a cell's environment, waiting for readiness, and stopping
//! them.
//!
//! Every round gets fresh processes (the Spring Boot post: a reused process measured 12%
//! differently), on fresh ports, so that sockets left in TIME_WAIT by one
//! round are never counted in the next. Each child runs in its own process
//! group: a Ctrl-C in the terminal reaches the lab only, and the lab decides
//! how the children stop. [`ChildGuard`] kills its child when dropped, so an
//! error or an interruption anywhere leaves no service running.
//!
//! # Layout
//! This file holds [`start`], which hands a cell to the pair or the
//! replicas, and re-exports what the rest of the lab uses; no part reads it
//! back.
//! - [`build`]: the release binaries.
//! - [`config`]: what every round's services start from, and their ports.
//! - [`postgres`]: each service's database, the server's reachability, the
//!   data set seeded.
//! - [`own_postgres`]: a Postgres server of the lab's own, which a cell
//!   may restart.
//! - [`target`]: a stack the lab measures without starting it.
//! - [`process`]: one service as a child process: environment, log,
//!   readiness, pinning, and killed when dropped.
//! - [`running`]: the services of a round as the runner sees them.
//! - [`pair`]: order-service and user-service, directly, through the
//!   delay proxy or across a packet path, in cleartext or TLS.
//! - [`path`]: the packet path between the pair's namespaces, its relays
//!   to Postgres, and what the kernel says of its TCP.
//! - [`replicas`]: several order-services, a slow one, HAProxy, and
//!   user-service in front.

pub mod build;
pub mod config;
pub mod own_postgres;
pub mod pair;
pub mod path;
pub mod postgres;
pub mod process;
pub mod replicas;
pub mod running;
pub mod target;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::bail;

pub use build::{Binaries, build};
pub use config::{Ports, ServiceConfig, seed};
pub use own_postgres::OwnPostgres;
pub use postgres::{DEFAULT_DATABASE_URL, Databases, authority, reachable, seed_into};
pub use process::ChildGuard;
pub use replicas::replica_ip;
pub use running::{ReplicaInfo, Running};
pub use target::{Target, http_endpoint};

use crate::measure::cell::Env;

/// Starts a cell's services on fresh ports in its environment `env`: the
/// pair ([`pair::start`]), or the replicas ([`replicas::start`]), which run
/// in cleartext on loopback or a packet path, with no delay proxy,
/// compression or timed parts. user-service is left out when `user_pool`
/// is `None`.
pub fn start(
    cfg: &ServiceConfig,
    user_pool: Option<u16>,
    env: &Env,
    header: &str,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Running> {
    let certs = match (env.tls, &cfg.certs) {
        (false, _) => None,
        (true, Some(c)) => Some(c),
        (true, None) => bail!("a TLS cell, but the run made no certificates"),
    };
    if env.stall_ms.is_some() && (env.replicas.is_some() || env.path.is_some()) {
        bail!("a stalled cell runs one order-service on loopback");
    }
    if env.path.is_some() && (env.rtt_ms.is_some() || env.rate_mbit.is_some()) {
        bail!("a cell runs on a packet path or through the delay proxy, not both");
    }
    let ports = Ports::pick()?;
    if let Some(r) = env.replicas {
        if env.tls
            || env.rtt_ms.is_some()
            || env.rate_mbit.is_some()
            || env.gzip
            || env.zstd
            || env.breakdown
        {
            bail!(
                "a cell with replicas runs in cleartext, on loopback or a packet path, with no delay proxy, compression or timed parts"
            );
        }
        return replicas::start(cfg, user_pool, &r, env, ports, header, stop);
    }
    pair::start(cfg, user_pool, env, certs, ports, header, stop)
}
