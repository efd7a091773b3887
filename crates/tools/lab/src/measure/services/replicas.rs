//! A cell's replicas: several order-services on the same ports at
//! 127.0.0.1, .2, … (as pods serve on the same ports at their own
//! addresses), the slow one behind a delay proxy, HAProxy in front of them
//! for an L4 or L7 balancer, and user-service pointed at the first, at
//! HAProxy, or at all of them.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context as _, bail};

use super::config::{Ports, ServiceConfig};
use super::process::{ChildGuard, check_pinned, command, env_of, log_file, wait_ready};
use super::running::{ReplicaInfo, Running};
use crate::measure::cell::{Balance, MAX_REPLICAS, ROTATION_AGE_MS, Replicas, SLOW_RTT_MS};

/// The address of replica `i` (1-based): 127.0.0.i.
pub fn replica_ip(i: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, i])
}

fn at(ip: IpAddr, port: u16) -> SocketAddr {
    SocketAddr::new(ip, port)
}

/// Starts `r.n` order-service replicas on the same ports at 127.0.0.1, .2,
/// …; the slow one (the last) really listens at 127.0.0.(100 + i), behind a
/// delay proxy at its public address adding [`SLOW_RTT_MS`] per round trip.
/// Then HAProxy in front of them for `l4` and `l7`, and user-service
/// pointed at the first replica (`direct`), at HAProxy, or at all of them
/// (`client`).
pub(super) fn start(
    cfg: &ServiceConfig,
    user_pool: Option<u16>,
    r: &Replicas,
    ports: Ports,
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
    let Started {
        children,
        replicas,
        mut service_env,
    } = start_replicas(cfg, r, &ports, header, stop)?;
    let slow_proxy = slow_proxy(r, &ports)?;
    let publics: Vec<IpAddr> = replicas.iter().map(|r| r.public).collect();
    let balancer = balancer(cfg, r, &ports, &publics)?;
    let first = replica_ip(1);
    let (order_rest, order_grpc, order_tcp) = match &balancer {
        Some(h) => (h.addr(0), h.addr(1), h.addr(2)),
        None => (
            at(first, ports.order_rest),
            at(first, ports.order_grpc),
            at(first, ports.order_tcp),
        ),
    };
    let user = match user_pool {
        None => None,
        Some(pool) => {
            let user_log = log_file(&cfg.log_dir, "user-service", header)?;
            let mut cmd = command(cfg, &cfg.bins.user, 1, &user_log, None)?;
            cmd.env("USER_REST_ADDR", format!("127.0.0.1:{}", ports.user_rest))
                .env("USER_GRPC_ADDR", format!("127.0.0.1:{}", ports.user_grpc))
                .env("USER_ORDER_REST_URL", format!("http://{order_rest}"))
                .env("USER_ORDER_GRPC_URL", format!("http://{order_grpc}"))
                .env("USER_ORDER_TCP_ADDR", order_tcp.to_string())
                .env("USER_POOL_SIZE", pool.to_string())
                .env("USER_LOG_FORMAT", "json");
            if r.balance.by_client() {
                let list: Vec<String> = publics.iter().map(IpAddr::to_string).collect();
                cmd.env("USER_ORDER_REPLICAS", list.join(","));
                let pick = match r.balance {
                    Balance::ClientP2c => "p2c",
                    _ => "round-robin",
                };
                cmd.env("USER_ORDER_PICK", pick);
            }
            if let Some(db) = &cfg.databases {
                cmd.env("USER_DATABASE_URL", &db.users);
            }
            service_env.extend(env_of("user-service", &cmd));
            let mut user = ChildGuard::spawn(cmd, "user-service")?;
            wait_ready(&mut user, ports.user_rest_addr(), None, &cfg.log_dir, stop)?;
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
        path: None,
        env: service_env.into_iter().collect(),
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
    ports: &Ports,
    header: &str,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Started> {
    let mut children = Vec::new();
    let mut replicas = Vec::new();
    let mut service_env = Vec::new();
    for i in 1..=r.n {
        let public = replica_ip(i);
        let slow = r.slow && i == r.n;
        let own = if slow { replica_ip(100 + i) } else { public };
        let log = log_file(
            &cfg.log_dir,
            "order-service",
            &format!("{header}, replica {i}"),
        )?;
        let mut cmd = command(cfg, &cfg.bins.order, 0, &log, None)?;
        cmd.env("ORDER_REST_ADDR", at(own, ports.order_rest).to_string())
            .env("ORDER_GRPC_ADDR", at(own, ports.order_grpc).to_string())
            .env("ORDER_TCP_ADDR", at(own, ports.order_tcp).to_string());
        if r.rotation {
            cmd.env("ORDER_MAX_CONNECTION_AGE_MS", ROTATION_AGE_MS.to_string());
        }
        if let Some(db) = &cfg.databases {
            cmd.env("ORDER_DATABASE_URL", &db.orders);
        }
        if i == 1 {
            service_env.extend(env_of("order-service", &cmd));
        }
        let mut child = ChildGuard::spawn(cmd, "order-service")?;
        wait_ready(
            &mut child,
            at(own, ports.order_rest),
            None,
            &cfg.log_dir,
            stop,
        )?;
        check_pinned(cfg, &child, 0)?;
        replicas.push(ReplicaInfo {
            public,
            rest: at(own, ports.order_rest),
            metrics_path: "/metrics".to_owned(),
            pid: child.pid(),
        });
        children.push(child);
    }
    Ok(Started {
        children,
        replicas,
        service_env,
    })
}

/// The delay proxy in front of the slow replica, at its public address.
fn slow_proxy(r: &Replicas, ports: &Ports) -> anyhow::Result<Option<delay_proxy::Proxy>> {
    if !r.slow {
        return Ok(None);
    }
    let (public, own) = (replica_ip(r.n), replica_ip(100 + r.n));
    let routes: Vec<delay_proxy::Route> = [ports.order_rest, ports.order_grpc, ports.order_tcp]
        .into_iter()
        .map(|p| delay_proxy::Route {
            listen: at(public, p),
            upstream: at(own, p),
        })
        .collect();
    Ok(Some(
        delay_proxy::Proxy::start(
            delay_proxy::Config::one_way(Duration::from_micros(u64::from(SLOW_RTT_MS) * 500)),
            &routes,
        )
        .context("starting the delay proxy in front of the slow replica")?,
    ))
}

/// HAProxy in front of the replicas (`publics`), for an L4 or L7 balancer:
/// REST and gRPC in the balancer's mode, raw TCP at L4 in both.
fn balancer(
    cfg: &ServiceConfig,
    r: &Replicas,
    ports: &Ports,
    publics: &[IpAddr],
) -> anyhow::Result<Option<haproxy::Haproxy>> {
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
                )
                .context("starting HAProxy")?,
            )
        }
    };
    Ok(balancer)
}
