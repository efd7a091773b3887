//! Three order-service replicas behind a real HAProxy (Debian's package),
//! as L4 (`mode tcp`) and as L7 (`mode http`) balancer. What each replica
//! answered, and the connections it holds, are read from its own /metrics.
//!
//! What the replicas work is about: an L4 balancer balances connections, so
//! a gRPC channel's one long-lived HTTP/2 connection pins every call on it
//! to one replica; an L7 balancer balances the calls themselves.

use std::net::SocketAddr;

use haproxy::{Frontend, Haproxy, Mode};

use crate::helpers::{OrderService, point_at, spawn_users_on};
use crate::replicas::{calls, counts, shares, spread_evenly, three_replicas, three_replicas_with};

/// HAProxy in front of `replicas`: frontend 0 is L4 on their gRPC ports,
/// 1 L7 on their gRPC ports, 2 L7 on their REST ports.
fn balancer(replicas: &[OrderService]) -> Haproxy {
    let grpc: Vec<SocketAddr> = replicas.iter().map(|r| r.grpc).collect();
    let rest: Vec<SocketAddr> = replicas.iter().map(|r| r.rest).collect();
    let dir = std::env::temp_dir().join(format!("haproxy-test-{}", uuid::Uuid::new_v4().simple()));
    Haproxy::start(
        &[
            Frontend {
                name: "grpc_l4".into(),
                mode: Mode::Tcp,
                backends: grpc.clone(),
            },
            Frontend {
                name: "grpc_l7".into(),
                mode: Mode::Http { h2_only: true },
                backends: grpc,
            },
            Frontend {
                name: "rest_l7".into(),
                mode: Mode::Http { h2_only: false },
                backends: rest,
            },
        ],
        &dir,
    )
    .expect("HAProxy starts (.ci/run installs it)")
}

/// user-service in memory calling order-service through `rest` and `grpc`
/// (raw TCP straight to the first replica), with `pool` connections per
/// transport.
async fn users_through(
    replicas: &[OrderService],
    rest: SocketAddr,
    grpc: SocketAddr,
    pool: u16,
) -> crate::helpers::UserService {
    let mut s = user_service::Settings {
        pool_size: pool,
        ..Default::default()
    };
    point_at(&mut s, rest, grpc, replicas[0].tcp, replicas[0].h3);
    spawn_users_on(s, None).await
}

/// gRPC connections open on a replica now, from its /metrics.
async fn grpc_connections(replica: &OrderService) -> u64 {
    let text = replica.metrics_text().await;
    text.lines()
        .find_map(|l| l.strip_prefix("order_connections_open{listener=\"grpc\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no gRPC connection gauge in:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_l4_one_grpc_connection_pins_every_call_to_one_replica() {
    let replicas = three_replicas().await;
    let lb = balancer(&replicas);

    // A pool of 1: one HTTP/2 connection, so one replica gets every call.
    let users = users_through(&replicas, replicas[0].rest, lb.addr(0), 1).await;
    let before = counts(&replicas).await;
    calls(&users, "grpc", 30).await;
    let got = shares(&replicas, &before).await;
    assert_eq!(got.iter().sum::<u64>(), 30, "{got:?}");
    assert_eq!(got.iter().filter(|n| **n > 0).count(), 1, "pinned: {got:?}");
    users.stop().await;

    // A pool of 3: three connections, spread one per replica by the
    // balancer, so every replica holds one.
    let users = users_through(&replicas, replicas[0].rest, lb.addr(0), 3).await;
    calls(&users, "grpc", 30).await;
    let mut held = Vec::new();
    for r in &replicas {
        held.push(grpc_connections(r).await);
    }
    assert!(
        held.iter().all(|n| *n >= 1),
        "connections per replica: {held:?}"
    );
    eprintln!("l4, pool 3: connections per replica {held:?}");
    users.stop().await;

    lb.stop();
    for r in replicas {
        r.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_l7_calls_spread_over_the_replicas_even_on_one_connection() {
    let replicas = three_replicas().await;
    let lb = balancer(&replicas);
    let users = users_through(&replicas, lb.addr(2), lb.addr(1), 1).await;
    for via in ["grpc", "h1-json", "h2c-json"] {
        let got = spread_evenly(&users, &replicas, via, 60).await;
        eprintln!("l7 {via}: calls per replica {got:?}");
    }
    // The replicas saw HTTP/2 for h2c and gRPC, HTTP/1.1 for h1: the
    // balancer kept each client's protocol.
    let text = replicas[0].metrics_text().await;
    assert!(
        text.contains("protocol=\"http1\",route=\"/v2/orders\""),
        "{text}"
    );
    assert!(
        text.contains("protocol=\"h2c\",route=\"/v2/orders\""),
        "{text}"
    );

    users.stop().await;
    lb.stop();
    for r in replicas {
        r.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_l4_connection_rotation_moves_a_pinned_grpc_client_to_other_replicas() {
    let replicas = three_replicas_with(|s| {
        s.max_connection_age_ms = 300;
        s.max_connection_age_grace_ms = 1_000;
    })
    .await;
    let lb = balancer(&replicas);
    let users = users_through(&replicas, replicas[0].rest, lb.addr(0), 1).await;
    // A pool of 1 is pinned to one replica until its connection is rotated:
    // over two seconds of calls, every replica is reached.
    let before = counts(&replicas).await;
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while std::time::Instant::now() < until {
        calls(&users, "grpc", 5).await;
    }
    let got = shares(&replicas, &before).await;
    eprintln!("l4 with rotation, pool 1: calls per replica {got:?}");
    assert!(
        got.iter().all(|n| *n > 0),
        "rotation moved no call: {got:?}"
    );
    users.stop().await;
    lb.stop();
    for r in replicas {
        r.stop().await;
    }
}
