//! What every round's services are started from: the binaries, the run's
//! store and the one of cells on Postgres, a target, pinning, logs and
//! certificates ([`ServiceConfig`]); the five free ports of a pair; and
//! the data set seeded once before the first round.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::PathBuf;

use anyhow::{Context as _, bail};

use super::build::Binaries;
use super::postgres::{Databases, seed_into};
use super::target::Target;
use crate::measure::cell::{Env, Store};

/// How the services of every round are started.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    pub bins: Binaries,
    /// The run's store: `--database-url`'s databases, or memory.
    pub databases: Option<Databases>,
    /// The databases of cells that ask for Postgres ([`Store::Postgres`])
    /// whatever the run's store: `--database-url`'s, or the local
    /// default's; `None` when no cell asks or the server is unreachable.
    pub store_databases: Option<Databases>,
    /// The lab's own Postgres server ([`Store::OwnPostgres`]) and its
    /// databases (seeded), when a cell asks for it and it could be made.
    pub own_postgres: Option<(std::sync::Arc<super::own_postgres::OwnPostgres>, Databases)>,
    /// A stack the lab measures without starting it (`--target`).
    pub target: Option<Target>,
    /// `--pin`: order-service on CPU 0, user-service on CPU 1, the load
    /// generator on CPU 2 when there is one, else beside order-service.
    pub pin: bool,
    /// `--seed`: every packet path's losses and jitter drawn from it;
    /// `None`, a fresh seed per round ([`super::path::fresh_seed`]).
    pub path_seed: Option<u64>,
    /// Where the services' output goes (appended, one header per round).
    pub log_dir: PathBuf,
    /// The run's throwaway CA and certificates, made when an experiment
    /// has TLS cells.
    pub certs: Option<tls::generate::LabCerts>,
}

impl ServiceConfig {
    /// The databases a cell's services use: the run's, or those its
    /// environment asks for; `None` is memory.
    pub fn databases_for(&self, env: &Env) -> anyhow::Result<Option<&Databases>> {
        match env.store {
            None => Ok(self.databases.as_ref()),
            Some(Store::Memory) => Ok(None),
            Some(Store::Postgres) => match &self.store_databases {
                Some(d) => Ok(Some(d)),
                None => bail!("a cell on Postgres, but the run has no Postgres server"),
            },
            // user-service stays in memory there
            // (`Store::user_service_in_memory`).
            Some(Store::OwnPostgres) => match &self.own_postgres {
                Some((_, d)) => Ok(Some(d)),
                None => bail!("a cell on the lab's own Postgres, but the run has none"),
            },
        }
    }

    /// What `--pin` does on a machine of `cores` CPUs, for the report.
    pub fn pinning(&self, cores: u32) -> Option<String> {
        self.pin.then(|| {
            let generator = if cores >= 3 {
                "the load generator on CPU 2"
            } else {
                "the load generator on CPU 0 beside order-service"
            };
            format!("order-service on CPU 0, user-service on CPU 1, {generator} (taskset)")
        })
    }
}

/// Loads the data set into both Postgres databases once, before the first
/// round (each service's `seed` command; idempotent).
pub fn seed(cfg: &ServiceConfig) -> anyhow::Result<()> {
    match &cfg.databases {
        Some(db) => seed_into(&cfg.bins, db),
        None => Ok(()),
    }
}

/// 127.0.0.1.
pub const LOCALHOST: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// The ports of one pair of services.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub order_rest: u16,
    pub order_grpc: u16,
    pub order_tcp: u16,
    /// order-service's HTTP/3 listener: a UDP port.
    pub order_h3: u16,
    pub user_rest: u16,
    pub user_grpc: u16,
    /// Where the lab reaches each service: 127.0.0.1, or its namespace's
    /// control address on a packet path.
    pub order_ip: IpAddr,
    pub user_ip: IpAddr,
}

impl Ports {
    /// Five TCP ports and a UDP port free right now. Held together while picking so that none
    /// comes out twice; the small race with other programs between here and
    /// the services binding them is reported as a start failure.
    pub fn pick() -> anyhow::Result<Ports> {
        let listeners = (0..5)
            .map(|_| TcpListener::bind("127.0.0.1:0").context("finding a free port"))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let p = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect::<Result<Vec<_>, _>>()?;
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").context("finding a free UDP port")?;
        Ok(Ports {
            order_rest: p[0],
            order_grpc: p[1],
            order_tcp: p[2],
            order_h3: udp.local_addr()?.port(),
            user_rest: p[3],
            user_grpc: p[4],
            order_ip: LOCALHOST,
            user_ip: LOCALHOST,
        })
    }

    pub fn order_rest_addr(&self) -> SocketAddr {
        SocketAddr::new(self.order_ip, self.order_rest)
    }

    /// The five ports.
    pub fn all(&self) -> [u16; 5] {
        [
            self.order_rest,
            self.order_grpc,
            self.order_tcp,
            self.user_rest,
            self.user_grpc,
        ]
    }

    pub fn user_rest_addr(&self) -> SocketAddr {
        SocketAddr::new(self.user_ip, self.user_rest)
    }

    pub fn order_grpc_addr(&self) -> SocketAddr {
        SocketAddr::new(self.order_ip, self.order_grpc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picked_ports_are_distinct() {
        let p = Ports::pick().expect("ports");
        let mut all = vec![
            p.order_rest,
            p.order_grpc,
            p.order_tcp,
            p.user_rest,
            p.user_grpc,
        ];
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 5);
    }
}
