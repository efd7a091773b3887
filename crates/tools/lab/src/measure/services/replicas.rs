//! A cell's replicas: several order-services on the same ports at
//! 127.0.0.1, .2, … (as pods serve on the same ports at their own
//! addresses), the slow one behind a delay proxy, HAProxy in front of them
//! for an L4 or L7 balancer, and user-service pointed at the first, at
//! HAProxy, or at all of them.
//!
//! On a packet path the replicas, the slow one's delay proxy and HAProxy
//! are all in namespace B, each replica at an address of its own on the
//! path (as pods behind one link), and user-service is in A: whatever
//! user-service dials crosses the path, and HAProxy reaches the replicas
//! inside B, as a balancer beside them would. The lab reaches every
//! replica over B's control link, and HAProxy at B's control address.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context as _, bail};
use netpath::Side;

use super::config::{Ports, ServiceConfig};
use super::path::OnPath;
use super::process::{ChildGuard, check_pinned, command, env_of, log_file, wait_ready};
use super::running::{ReplicaInfo, Running};
use crate::measure::cell::{
    Balance, Env, MAX_REPLICAS, ROTATION_AGE_MS, Replicas, SLOW_RTT_MS, Store,
};

/// The address of replica `i` (1-based): 127.0.0.i.
pub fn replica_ip(i: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, i])
}

fn at(ip: IpAddr, port: u16) -> SocketAddr {
    SocketAddr::new(ip, port)
}

/// Where a cell's replicas, HAProxy and user-service are: on loopback, or
/// on the two sides of a packet path.
struct Layout {
    path: Option<OnPath>,
    /// Replica `i`'s (0-based) address its clients dial, then its own when
    /// it is the slow one, behind the delay proxy.
    publics: Vec<IpAddr>,
    slow_own: Option<IpAddr>,
    /// The databases' URLs as each side dials them: order-service's,
    /// user-service's.
    databases: Option<(String, String)>,
}

impl Layout {
    fn new(cfg: &ServiceConfig, r: &Replicas, env: &Env) -> anyhow::Result<Layout> {
        let db = cfg.databases_for(env)?;
        let Some(p) = &env.path else {
            return Ok(Layout {
                path: None,
                publics: (1..=r.n).map(replica_ip).collect(),
                slow_own: r.slow.then(|| replica_ip(100 + r.n)),
                databases: db.map(|d| (d.orders.clone(), d.users.clone())),
            });
        };
        let mut on = OnPath::up(p, cfg.path_seed)?;
        let publics = (0..r.n)
            .map(|_| on.path.add_addr(Side::B).map(IpAddr::from))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let slow_own = if r.slow {
            Some(IpAddr::from(on.path.add_addr(Side::B)?))
        } else {
            None
        };
        let databases = match db {
            None => None,
            Some(d) => Some((
                on.database_url(Side::B, &d.orders)?,
                on.database_url(Side::A, &d.users)?,
            )),
        };
        Ok(Layout {
            path: Some(on),
            publics,
            slow_own,
            databases,
        })
    }

    /// The namespace of user-service (A) or of the replicas (B).
    fn ns(&self, side: Side) -> Option<&str> {
        self.path.as_ref().map(|p| p.ns(side))
    }

    /// Where replica `i` (0-based) listens.
    fn own(&self, r: &Replicas, i: usize) -> IpAddr {
        match self.slow_own {
            Some(own) if i + 1 == usize::from(r.n) => own,
            _ => self.publics[i],
        }
    }
}

/// Starts `r.n` order-service replicas on the same ports at 127.0.0.1, .2,
/// … (or at addresses of their own on the packet path of `env`); the slow
/// one (the last) really listens at another address, behind a delay proxy
/// at its public address adding [`SLOW_RTT_MS`] per round trip. Then
/// HAProxy in front of them for `l4` and `l7`, and user-service pointed at
/// the first replica (`direct`), at HAProxy, or at all of them (`client`).
pub(super) fn start(
    cfg: &ServiceConfig,
    user_pool: Option<u16>,
    r: &Replicas,
    env: &Env,
    mut ports: Ports,
    header: &str,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Running> {
    anyhow::ensure!(
        (2..=MAX_REPLICAS as u8).contains(&r.n),
        "{} replicas: a cell has 2 to {}",
        r.n,
        MAX_REPLICAS
    );
    if matches!(r.balance, Balance::L4 | Balance::L7) && haproxy::binary().is_none() {
        bail!("{}", haproxy::INSTALL_HINT);
    }
    let layout = Layout::new(cfg, r, env)?;
    let Started {
        children,
        replicas,
        mut service_env,
    } = start_replicas(cfg, r, &layout, &ports, header, stop)?;
    let slow_proxy = slow_proxy(r, &layout, &ports)?;
    let balancer = balancer(cfg, r, &layout, &ports)?;
    let first = layout.publics[0];
    // What user-service dials for HAProxy: its port, at B's path address
    // across a path.
    let across = |a: SocketAddr| match &layout.path {
        Some(p) => SocketAddr::new(p.path.path_addr(Side::B).into(), a.port()),
        None => a,
    };
    let (order_rest, order_grpc, order_tcp) = match &balancer {
        Some(h) => (across(h.addr(0)), across(h.addr(1)), across(h.addr(2))),
        None => (
            at(first, ports.order_rest),
            at(first, ports.order_grpc),
            at(first, ports.order_tcp),
        ),
    };
    // The lab reaches user-service at A's control address, and the first
    // replica at its own address over B's control link.
    let bind = match &layout.path {
        Some(p) => {
            ports.user_ip = p.path.control_addr(Side::A).into();
            ports.order_ip = first;
            IpAddr::from(Ipv4Addr::UNSPECIFIED)
        }
        None => IpAddr::from(Ipv4Addr::LOCALHOST),
    };
    let user = match user_pool {
        None => None,
        Some(pool) => {
            let user_log = log_file(&cfg.log_dir, "user-service", header)?;
            let mut cmd = command(cfg, &cfg.bins.user, 1, &user_log, layout.ns(Side::A))?;
            cmd.env("USER_REST_ADDR", at(bind, ports.user_rest).to_string())
                .env("USER_GRPC_ADDR", at(bind, ports.user_grpc).to_string())
                .env("USER_ORDER_REST_URL", format!("http://{order_rest}"))
                .env("USER_ORDER_GRPC_URL", format!("http://{order_grpc}"))
                .env("USER_ORDER_TCP_ADDR", order_tcp.to_string())
                // HAProxy and the slow replica's proxy carry TCP only: QUIC
                // cells with replicas are skipped, and port 0 fails any
                // QUIC call at once rather than let it pass beside them.
                .env("USER_ORDER_H3_ADDR", at(first, 0).to_string())
                .env("USER_POOL_SIZE", pool.to_string())
                .env("USER_LOG_FORMAT", "json");
            if r.balance.by_client() {
                let list: Vec<String> = layout.publics.iter().map(IpAddr::to_string).collect();
                cmd.env("USER_ORDER_REPLICAS", list.join(","));
                let pick = match r.balance {
                    Balance::ClientP2c => "p2c",
                    _ => "round-robin",
                };
                cmd.env("USER_ORDER_PICK", pick);
            }
            if let Some((_, users)) = &layout.databases
                && !Store::user_service_in_memory(env.store)
            {
                cmd.env("USER_DATABASE_URL", users);
            }
            if env.recommended {
                cmd.envs(crate::measure::cell::RECOMMENDED);
            }
            service_env.extend(env_of("user-service", &cmd));
            let user = ChildGuard::spawn(cmd, "user-service")?;
            wait_ready(&user, ports.user_rest_addr(), None, &cfg.log_dir, stop)?;
            check_pinned(cfg, &user, 1)?;
            Some(user)
        }
    };
    let mut children = children.into_iter();
    let order = children.next().context("no replica started")?;
    Ok(Running {
        ports,
        order,
        more_orders: children.collect(),
        replicas,
        slow_proxy,
        balancer,
        user,
        target: None,
        proxy: None,
        env: service_env
            .into_iter()
            .chain(layout.path.iter().flat_map(OnPath::stated))
            .collect(),
        path: layout.path,
    })
}

/// The replicas started: their processes, where each is reached, and the
/// variables the first was started with.
struct Started {
    children: Vec<ChildGuard>,
    replicas: Vec<ReplicaInfo>,
    service_env: Vec<(String, String)>,
}

/// The replicas, one after another, each ready (and its pinning checked).
fn start_replicas(
    cfg: &ServiceConfig,
    r: &Replicas,
    layout: &Layout,
    ports: &Ports,
    header: &str,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Started> {
    let mut children = Vec::new();
    let mut replicas = Vec::new();
    let mut service_env = Vec::new();
    for i in 1..=r.n {
        let public = layout.publics[usize::from(i) - 1];
        let own = layout.own(r, usize::from(i) - 1);
        let log = log_file(
            &cfg.log_dir,
            "order-service",
            &format!("{header}, replica {i}"),
        )?;
        let mut cmd = command(cfg, &cfg.bins.order, 0, &log, layout.ns(Side::B))?;
        cmd.env("ORDER_REST_ADDR", at(own, ports.order_rest).to_string())
            .env("ORDER_GRPC_ADDR", at(own, ports.order_grpc).to_string())
            .env("ORDER_TCP_ADDR", at(own, ports.order_tcp).to_string())
            .env("ORDER_H3_ADDR", at(own, ports.order_h3).to_string());
        if r.rotation {
            cmd.env("ORDER_MAX_CONNECTION_AGE_MS", ROTATION_AGE_MS.to_string());
        }
        if let Some((orders, _)) = &layout.databases {
            cmd.env("ORDER_DATABASE_URL", orders);
        }
        if i == 1 {
            service_env.extend(env_of("order-service", &cmd));
        }
        let child = ChildGuard::spawn(cmd, "order-service")?;
        wait_ready(&child, at(own, ports.order_rest), None, &cfg.log_dir, stop)?;
        check_pinned(cfg, &child, 0)?;
        replicas.push(ReplicaInfo {
            public,
            rest: at(own, ports.order_rest),
            metrics_path: "/metrics".to_owned(),
        });
        children.push(child);
    }
    Ok(Started {
        children,
        replicas,
        service_env,
    })
}

/// The delay proxy in front of the slow replica, at its public address
/// (inside B on a packet path, where its threads and sockets stay).
fn slow_proxy(
    r: &Replicas,
    layout: &Layout,
    ports: &Ports,
) -> anyhow::Result<Option<delay_proxy::Proxy>> {
    let Some(own) = layout.slow_own else {
        return Ok(None);
    };
    let public = layout.publics[usize::from(r.n) - 1];
    let routes: Vec<delay_proxy::Route> = [ports.order_rest, ports.order_grpc, ports.order_tcp]
        .into_iter()
        .map(|p| delay_proxy::Route {
            listen: at(public, p),
            upstream: at(own, p),
        })
        .collect();
    let config = delay_proxy::Config::one_way(Duration::from_micros(u64::from(SLOW_RTT_MS) * 500));
    let start = || delay_proxy::Proxy::start(config, &routes);
    let proxy = match &layout.path {
        Some(p) => p.path.in_ns(Side::B, start)?,
        None => start(),
    };
    Ok(Some(proxy.context(
        "starting the delay proxy in front of the slow replica",
    )?))
}

/// HAProxy in front of the replicas (`publics`), for an L4 or L7 balancer:
/// REST and gRPC in the balancer's mode, raw TCP at L4 in both.
fn balancer(
    cfg: &ServiceConfig,
    r: &Replicas,
    layout: &Layout,
    ports: &Ports,
) -> anyhow::Result<Option<haproxy::Haproxy>> {
    let publics = &layout.publics;
    let backends = |port: u16| publics.iter().map(|ip| at(*ip, port)).collect::<Vec<_>>();
    let balancer = match r.balance {
        Balance::Direct | Balance::Client | Balance::ClientP2c => None,
        Balance::L4 | Balance::L7 => {
            let (rest_mode, grpc_mode) = match r.balance {
                Balance::L4 => (haproxy::Mode::Tcp, haproxy::Mode::Tcp),
                _ => (
                    haproxy::Mode::Http { h2_only: false },
                    haproxy::Mode::Http { h2_only: true },
                ),
            };
            let frontends = [
                haproxy::Frontend {
                    name: "rest".into(),
                    mode: rest_mode,
                    backends: backends(ports.order_rest),
                },
                haproxy::Frontend {
                    name: "grpc".into(),
                    mode: grpc_mode,
                    backends: backends(ports.order_grpc),
                },
                // Raw TCP has no L7 form: it is balanced at L4 in both.
                haproxy::Frontend {
                    name: "tcp".into(),
                    mode: haproxy::Mode::Tcp,
                    backends: backends(ports.order_tcp),
                },
            ];
            Some(
                haproxy::Haproxy::start_avoiding(
                    &frontends,
                    &cfg.log_dir.join("haproxy"),
                    &ports.all(),
                    match &layout.path {
                        Some(p) => haproxy::Place {
                            netns: Some(p.ns(Side::B)),
                            bind: Ipv4Addr::UNSPECIFIED.into(),
                            reach: p.path.control_addr(Side::B).into(),
                        },
                        None => haproxy::Place::LOCAL,
                    },
                )
                .context("starting HAProxy")?,
            )
        }
    };
    Ok(balancer)
}
