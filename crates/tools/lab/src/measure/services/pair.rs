//! A cell's pair: one order-service, then user-service pointed at it,
//! directly, through the in-process delay proxy (an emulated round trip,
//! a bandwidth cap) or across a packet path (each service in its own
//! network namespace), in cleartext or TLS, with compression or timed parts
//! when the cell's environment asks for them.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context as _;
use tls::generate::LabCerts;

use super::config::{Ports, ServiceConfig};
use super::path::OnPath;
use super::process::{ChildGuard, check_pinned, command, env_of, log_file, wait_ready};
use super::running::Running;
use crate::measure::cell::{Env, RECOMMENDED, Store};

/// Starts order-service, and user-service pointed at it unless
/// `user_pool` is `None`, in the environment `env`, then waits until both
/// answer `/readyz`.
///
/// With an RTT, user-service dials order-service's three ports through one
/// in-process [`delay_proxy::Proxy`] (three routes) that holds every byte
/// RTT/2 in each direction; RTT 0 still goes through the proxy, so that a
/// baseline at 0 pays the proxy's own cost too. With TLS, every listener of
/// order-service serves TLS with the run's certificates and user-service
/// dials it over TLS trusting the run's CA.
///
/// On a packet path, order-service runs in namespace B and user-service in
/// namespace A, both listening on every address of their namespace;
/// user-service dials order-service's path address, and the lab reaches
/// each at its control address.
pub(super) fn start(
    cfg: &ServiceConfig,
    user_pool: Option<u16>,
    env: &Env,
    certs: Option<&LabCerts>,
    mut ports: Ports,
    header: &str,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Running> {
    let mut on_path = env
        .path
        .map(|p| OnPath::up(&p, cfg.path_seed))
        .transpose()?;
    let databases = match (cfg.databases_for(env)?, on_path.as_mut()) {
        (None, _) => None,
        (Some(db), None) => Some((db.orders.clone(), db.users.clone())),
        (Some(db), Some(p)) => Some((
            p.database_url(netpath::Side::B, &db.orders)?,
            p.database_url(netpath::Side::A, &db.users)?,
        )),
    };
    if let Some(p) = &on_path {
        ports.order_ip = p.path.control_addr(netpath::Side::B).into();
        ports.user_ip = p.path.control_addr(netpath::Side::A).into();
    }
    let pair = Pair {
        cfg,
        env,
        certs,
        databases,
        ports: &ports,
        header,
        stop,
        ns: on_path.as_ref().map(|p| {
            [
                p.ns(netpath::Side::A).to_owned(),
                p.ns(netpath::Side::B).to_owned(),
            ]
        }),
    };
    let (order, mut service_env) = pair.order()?;
    let order_tcp = SocketAddr::new(ports.order_ip, ports.order_tcp);
    let proxy = delay_proxy(env, &ports, order_tcp)?;
    // Where user-service dials order-service: its ports, the proxy's, or
    // its address across the path.
    // The proxy carries TCP only: behind it, HTTP/3 is given port 0, which
    // fails every QUIC call at once rather than let one pass beside the
    // proxy (the lab skips QUIC cells there anyway).
    let dial = match (&proxy, &on_path) {
        (Some(p), _) => (
            p.local_addr(0),
            p.local_addr(1),
            p.local_addr(2),
            SocketAddr::new(ports.order_ip, 0),
        ),
        (None, Some(p)) => {
            let b = IpAddr::from(p.path.path_addr(netpath::Side::B));
            (
                SocketAddr::new(b, ports.order_rest),
                SocketAddr::new(b, ports.order_grpc),
                SocketAddr::new(b, ports.order_tcp),
                SocketAddr::new(b, ports.order_h3),
            )
        }
        (None, None) => (
            ports.order_rest_addr(),
            ports.order_grpc_addr(),
            order_tcp,
            SocketAddr::new(ports.order_ip, ports.order_h3),
        ),
    };
    let user = match user_pool {
        None => None,
        Some(pool) => {
            let (user, set) = pair.user(pool, dial)?;
            service_env.extend(set);
            Some(user)
        }
    };
    Ok(Running {
        ports,
        order,
        more_orders: Vec::new(),
        replicas: Vec::new(),
        slow_proxy: None,
        balancer: None,
        user,
        target: None,
        proxy,
        env: service_env
            .into_iter()
            .chain(on_path.iter().flat_map(OnPath::stated))
            .collect(),
        path: on_path,
    })
}

/// What both services of a pair are started with.
struct Pair<'a> {
    cfg: &'a ServiceConfig,
    env: &'a Env,
    certs: Option<&'a LabCerts>,
    /// order-service's and user-service's database URLs.
    databases: Option<(String, String)>,
    ports: &'a Ports,
    header: &'a str,
    stop: &'a Arc<AtomicBool>,
    /// On a packet path: user-service's namespace, then order-service's.
    ns: Option<[String; 2]>,
}

/// A service started, with the variables it was started with.
type Started = (ChildGuard, Vec<(String, String)>);

impl Pair<'_> {
    /// The address the services listen on: loopback, or every address of
    /// their own namespace on a packet path.
    fn bind(&self) -> IpAddr {
        match self.ns {
            Some(_) => Ipv4Addr::UNSPECIFIED.into(),
            None => Ipv4Addr::LOCALHOST.into(),
        }
    }

    fn ns(&self, i: usize) -> Option<&str> {
        self.ns.as_ref().map(|n| n[i].as_str())
    }

    /// order-service on the pair's ports, ready (and its pinning checked).
    fn order(&self) -> anyhow::Result<Started> {
        let (cfg, env, ports) = (self.cfg, self.env, self.ports);
        let order_log = log_file(&cfg.log_dir, "order-service", self.header)?;
        let mut cmd = command(cfg, &cfg.bins.order, 0, &order_log, self.ns(1))?;
        let ip = self.bind();
        cmd.env(
            "ORDER_REST_ADDR",
            SocketAddr::new(ip, ports.order_rest).to_string(),
        )
        .env(
            "ORDER_GRPC_ADDR",
            SocketAddr::new(ip, ports.order_grpc).to_string(),
        )
        .env(
            "ORDER_TCP_ADDR",
            SocketAddr::new(ip, ports.order_tcp).to_string(),
        )
        .env(
            "ORDER_H3_ADDR",
            SocketAddr::new(ip, ports.order_h3).to_string(),
        );
        match self.certs {
            Some(c) => cmd
                .env("ORDER_TLS_CERT", &c.server_cert)
                .env("ORDER_TLS_KEY", &c.server_key),
            None => &mut cmd,
        };
        match &self.databases {
            Some((orders, _)) => cmd.env("ORDER_DATABASE_URL", orders),
            None => &mut cmd,
        };
        if env.gzip {
            cmd.env("ORDER_REST_GZIP", "true")
                .env("ORDER_GRPC_GZIP", "true");
        }
        if env.zstd {
            cmd.env("ORDER_REST_ZSTD", "true")
                .env("ORDER_GRPC_ZSTD", "true");
        }
        if env.breakdown {
            cmd.env("ORDER_SERVER_TIMING", "true");
        }
        let set = env_of("order-service", &cmd);
        let order = ChildGuard::spawn(cmd, "order-service")?;
        wait_ready(
            &order,
            ports.order_rest_addr(),
            self.certs.map(|c| c.ca.as_path()),
            &cfg.log_dir,
            self.stop,
        )?;
        // After readiness: until taskset has exec'd the service, the pid is taskset's.
        check_pinned(cfg, &order, 0)?;
        Ok((order, set))
    }

    /// user-service with a pool of `pool`, dialling order-service's REST,
    /// gRPC, TCP and HTTP/3 ports at `dial`, ready (and its pinning checked).
    fn user(
        &self,
        pool: u16,
        (order_rest, order_grpc, order_tcp, order_h3): (
            SocketAddr,
            SocketAddr,
            SocketAddr,
            SocketAddr,
        ),
    ) -> anyhow::Result<Started> {
        let (cfg, env, ports) = (self.cfg, self.env, self.ports);
        let user_log = log_file(&cfg.log_dir, "user-service", self.header)?;
        let mut cmd = command(cfg, &cfg.bins.user, 1, &user_log, self.ns(0))?;
        let ip = self.bind();
        let scheme = if self.certs.is_some() {
            "https"
        } else {
            "http"
        };
        cmd.env(
            "USER_REST_ADDR",
            SocketAddr::new(ip, ports.user_rest).to_string(),
        )
        .env(
            "USER_GRPC_ADDR",
            SocketAddr::new(ip, ports.user_grpc).to_string(),
        )
        .env("USER_ORDER_REST_URL", format!("{scheme}://{order_rest}"))
        .env("USER_ORDER_GRPC_URL", format!("{scheme}://{order_grpc}"))
        .env("USER_ORDER_TCP_ADDR", order_tcp.to_string())
        .env("USER_ORDER_H3_ADDR", order_h3.to_string())
        .env("USER_POOL_SIZE", pool.to_string())
        .env("USER_LOG_FORMAT", "json");
        match (self.certs, &self.ns) {
            // Across a packet path order-service's address is the path's,
            // which the certificate does not name; its service name it does.
            (Some(c), Some(_)) => cmd
                .env("USER_ORDER_TLS_CA", &c.ca)
                .env("USER_ORDER_TLS_SERVER_NAME", "order-service"),
            (Some(c), None) => cmd.env("USER_ORDER_TLS_CA", &c.ca),
            (None, _) => &mut cmd,
        };
        match &self.databases {
            Some((_, users)) if !Store::user_service_in_memory(env.store) => {
                cmd.env("USER_DATABASE_URL", users)
            }
            _ => &mut cmd,
        };
        if env.gzip {
            cmd.env("USER_UPSTREAM_GZIP", "true");
        }
        if env.zstd {
            cmd.env("USER_UPSTREAM_ZSTD", "true");
        }
        if env.breakdown {
            cmd.env("USER_UPSTREAM_BREAKDOWN", "true");
        }
        if env.recommended {
            cmd.envs(RECOMMENDED);
        }
        let set = env_of("user-service", &cmd);
        let user = ChildGuard::spawn(cmd, "user-service")?;
        wait_ready(&user, ports.user_rest_addr(), None, &cfg.log_dir, self.stop)?;
        check_pinned(cfg, &user, 1)?;
        Ok((user, set))
    }
}

/// The delay proxy in front of order-service's three ports, when the cell
/// emulates a round trip or caps the bandwidth. The round trip is split
/// evenly between the two directions; a bandwidth cap alone goes through
/// the proxy too, with no delay.
fn delay_proxy(
    env: &Env,
    ports: &Ports,
    order_tcp: SocketAddr,
) -> anyhow::Result<Option<delay_proxy::Proxy>> {
    let one_way = match (env.rtt_ms, env.rate_mbit) {
        (None, None) => None,
        (rtt, _) => Some(Duration::from_micros(u64::from(rtt.unwrap_or(0)) * 500)),
    };
    one_way
        .map(|d| {
            let config = match env.rate_mbit {
                Some(m) => delay_proxy::Config::one_way(d)
                    .with_rate(delay_proxy::Config::mbit(f64::from(m))),
                None => delay_proxy::Config::one_way(d),
            };
            delay_proxy::Proxy::start(
                config,
                &[
                    delay_proxy::Route::any_port(ports.order_rest_addr()),
                    delay_proxy::Route::any_port(ports.order_grpc_addr()),
                    delay_proxy::Route::any_port(order_tcp),
                ],
            )
            .context("starting the delay proxy")
        })
        .transpose()
}
