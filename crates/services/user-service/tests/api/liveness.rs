//! How user-service notices an order-service that is gone without saying
//! so: a connect whose SYN is never answered fails at
//! `USER_UPSTREAM_CONNECT_TIMEOUT_MS` rather than at the call's timeout,
//! and a gRPC connection whose peer stops answering HTTP/2 PINGs is closed
//! within `USER_UPSTREAM_KEEPALIVE_MS` twice over, the call failing as
//! unavailable rather than waiting for its deadline. Each against the
//! defaults (none of it), which wait for the call's timeout.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use user_service::upstream::Transport;

use crate::helpers::{point_at, problem_of, spawn_users_on};

/// A listener whose accept queue is full and never drained: the kernel
/// drops every new SYN, as a host that is gone (or a silent path) does.
/// Checked here: a connect to it times out.
fn unanswered_syns() -> (socket2::Socket, Vec<std::net::TcpStream>, SocketAddr) {
    let l = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    l.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    l.listen(0).unwrap();
    let addr = l.local_addr().unwrap().as_socket().unwrap();
    // A backlog of 0 holds one connection; it fills the queue.
    let held = vec![std::net::TcpStream::connect(addr).unwrap()];
    let e = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e:?}");
    (l, held, addr)
}

/// Each transport's call against `addr` with these settings: its status
/// and how long it took.
async fn calls(
    addr: SocketAddr,
    tweak: impl FnOnce(&mut user_service::Settings),
) -> Vec<(Transport, u16, Duration)> {
    let mut settings = user_service::Settings {
        upstream_timeout_ms: 3_000,
        pool_size: 1,
        ..Default::default()
    };
    point_at(&mut settings, addr, addr, addr, addr);
    tweak(&mut settings);
    let users = spawn_users_on(settings, None).await;
    let id = dataset::fixed_user_id(1);
    let mut out = Vec::new();
    for via in [
        Transport::H1Json,
        Transport::H2cProto,
        Transport::Grpc,
        Transport::TcpProto,
    ] {
        let started = Instant::now();
        let res = users.orders(id, via, "").await;
        out.push((via, res.status().as_u16(), started.elapsed()));
    }
    users.stop().await;
    out
}

#[tokio::test]
async fn a_connect_nobody_answers_fails_at_the_connect_timeout_instead_of_the_calls() {
    let (_listener, _held, addr) = unanswered_syns();
    for (via, status, took) in calls(addr, |s| s.upstream_connect_timeout_ms = 300).await {
        assert_eq!(status, 503, "{via}");
        assert!(took < Duration::from_millis(2_500), "{via} took {took:?}");
    }
    // The default waits through the kernel's SYN retries until the call's
    // own timeout.
    for (via, status, took) in calls(addr, |_| {}).await {
        assert_eq!(status, 504, "{via}");
        assert!(took >= Duration::from_millis(2_900), "{via} took {took:?}");
    }
}

/// An HTTP/2 server that takes each connection's first request and from
/// then on reads nothing: no answer, no PING acknowledged, no RST.
async fn deaf_after_first_request() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            let Ok(mut conn) = h2::server::handshake(s).await else {
                continue;
            };
            let first = conn.accept().await;
            // Never polled again.
            held.push((conn, first));
        }
    });
    addr
}

#[tokio::test]
async fn a_grpc_connection_whose_peer_stops_answering_pings_is_dropped_before_the_deadline() {
    let addr = deaf_after_first_request().await;
    let mut settings = user_service::Settings {
        upstream_timeout_ms: 3_000,
        pool_size: 1,
        upstream_keepalive_ms: 200,
        ..Default::default()
    };
    point_at(&mut settings, addr, addr, addr, addr);
    let users = spawn_users_on(settings, None).await;
    let id = dataset::fixed_user_id(1);
    let started = Instant::now();
    let res = users.orders(id, Transport::Grpc, "").await;
    let took = started.elapsed();
    assert_eq!(res.status(), 503, "after {took:?}");
    let e = problem_of(res).await;
    assert_eq!(e.error, "upstream_unavailable", "{e:?}");
    // A PING after 200 ms, unanswered for 200 ms more, for the call and its
    // two resends on new connections: about 1.2 s, well before 3 s.
    assert!(took < Duration::from_millis(2_500), "took {took:?}");
    users.stop().await;
    // Without pings the same call waits for its deadline.
    let mut settings = user_service::Settings {
        upstream_timeout_ms: 3_000,
        pool_size: 1,
        ..Default::default()
    };
    point_at(&mut settings, addr, addr, addr, addr);
    let users = spawn_users_on(settings, None).await;
    let started = Instant::now();
    let res = users.orders(id, Transport::Grpc, "").await;
    assert_eq!(res.status(), 504);
    assert!(started.elapsed() >= Duration::from_millis(2_900));
    users.stop().await;
}
