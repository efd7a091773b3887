//! The services of one round as the runner sees them, started by the lab
//! or a target's: their addresses, their processes, the delay proxy and
//! the balancer between them, and stopping them all.

use std::net::{IpAddr, SocketAddr};

use anyhow::Context as _;

use super::config::Ports;
use super::process::ChildGuard;
use super::target::{Target, http_endpoint};

/// One order-service replica of a cell with several.
#[derive(Debug, Clone)]
pub struct ReplicaInfo {
    /// Where its clients reach it (the delay proxy's address, for the slow
    /// one).
    pub public: IpAddr,
    /// Where its own REST listener is, for its /metrics.
    pub rest: SocketAddr,
    /// The path of its metrics there.
    pub metrics_path: String,
}

/// A running pair (or order-service alone).
#[derive(Debug)]
pub struct Running {
    pub ports: Ports,
    /// order-service; with several replicas, the first.
    pub order: ChildGuard,
    /// With several replicas: the others, then every replica's addresses.
    pub more_orders: Vec<ChildGuard>,
    pub replicas: Vec<ReplicaInfo>,
    /// The delay proxy in front of the slow replica, in this process.
    pub slow_proxy: Option<delay_proxy::Proxy>,
    /// HAProxy, when it balances the replicas.
    pub balancer: Option<haproxy::Haproxy>,
    pub user: Option<ChildGuard>,
    /// Set when the stack is a target the lab did not start: no process
    /// of its is the lab's, and nothing is stopped.
    pub target: Option<Target>,
    /// The delay proxy between them, in this process, when a round trip is
    /// emulated: one route per order-service port user-service dials.
    pub proxy: Option<delay_proxy::Proxy>,
    /// The packet path between them, in this process, when the cell runs
    /// on one (with the relays to the host's Postgres).
    pub path: Option<super::path::OnPath>,
    /// Every variable each service was started with (`service NAME`).
    pub env: std::collections::BTreeMap<String, String>,
}

impl Running {
    /// A target stack, as the rounds see it.
    pub fn of_target(t: &Target) -> anyhow::Result<Running> {
        let replicas = t
            .order_metrics
            .iter()
            .map(|m| {
                let (addr, path) = http_endpoint(m)?;
                Ok(ReplicaInfo {
                    public: addr.ip(),
                    rest: addr,
                    metrics_path: path,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Running {
            ports: Ports {
                order_rest: 0,
                order_grpc: 0,
                order_tcp: 0,
                order_h3: 0,
                user_rest: 0,
                user_grpc: 0,
                order_ip: super::config::LOCALHOST,
                user_ip: super::config::LOCALHOST,
            },
            order: ChildGuard::absent("order-service"),
            more_orders: Vec::new(),
            replicas,
            slow_proxy: None,
            balancer: None,
            user: None,
            target: Some(t.clone()),
            proxy: None,
            path: None,
            env: std::collections::BTreeMap::new(),
        })
    }

    /// user-service's REST address.
    pub fn user_rest_addr(&self) -> anyhow::Result<SocketAddr> {
        match &self.target {
            Some(t) => Ok(http_endpoint(&t.user_url)?.0),
            None => Ok(self.ports.user_rest_addr()),
        }
    }

    /// user-service's base URL, for k6.
    pub fn user_base_url(&self) -> String {
        match &self.target {
            Some(t) => t.user_url.trim_end_matches('/').to_owned(),
            None => format!("http://{}", self.ports.user_rest_addr()),
        }
    }

    /// Where user-service's metrics are: address and path.
    pub fn user_metrics(&self) -> anyhow::Result<(SocketAddr, String)> {
        match &self.target {
            Some(t) => http_endpoint(&t.user_metrics),
            None => Ok((self.ports.user_rest_addr(), "/metrics".to_owned())),
        }
    }

    /// order-service's REST and gRPC addresses, for what calls it
    /// directly; a target without them cannot serve such a call.
    pub fn order_addrs(&self) -> anyhow::Result<(SocketAddr, SocketAddr)> {
        let Some(t) = &self.target else {
            return Ok((self.ports.order_rest_addr(), self.ports.order_grpc_addr()));
        };
        let resolve = |a: &Option<String>, flag: &str| -> anyhow::Result<SocketAddr> {
            let a = a.as_deref().with_context(|| {
                format!("this calls order-service directly: give its address with {flag}")
            })?;
            std::net::ToSocketAddrs::to_socket_addrs(a)?
                .next()
                .with_context(|| format!("{a} resolves to no address"))
        };
        Ok((
            resolve(&t.order_rest, "--target-order-rest")?,
            resolve(&t.order_grpc, "--target-order-grpc")?,
        ))
    }

    /// Whether /proc shows the services (the lab started them).
    pub fn on_proc(&self) -> bool {
        self.target.is_none()
    }

    pub fn order_pid(&self) -> u32 {
        self.order.pid()
    }

    /// Replica `i`'s (0-based) process as it is now (a fault may have
    /// started it again); 0 for a target's.
    pub fn replica_pid(&self, i: usize) -> u32 {
        self.replica(i).map_or(0, ChildGuard::pid)
    }

    /// Replica `i`'s (0-based) process guard: order-service itself for 0.
    pub fn replica(&self, i: usize) -> Option<&ChildGuard> {
        match i {
            0 => Some(&self.order),
            _ => self.more_orders.get(i - 1),
        }
    }

    pub fn user_pid(&self) -> u32 {
        self.user.as_ref().map_or(0, ChildGuard::pid)
    }

    /// Stops both now (and the proxy between them).
    pub fn stop(mut self) {
        if let Some(u) = self.user.as_mut() {
            u.kill();
        }
        self.proxy = None;
        self.balancer = None;
        self.slow_proxy = None;
        self.order.kill();
        for o in &mut self.more_orders {
            o.kill();
        }
        // After the services, whose namespaces it removes.
        self.path = None;
    }
}
