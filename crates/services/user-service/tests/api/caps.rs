//! `USER_MAX_CONCURRENT_STREAMS`: both listeners announce it as their
//! SETTINGS_MAX_CONCURRENT_STREAMS. (That a stream past it waits rather than
//! fails is order-service's tests/caps.rs: the same serving code.)

use std::future::Future as _;
use std::pin::Pin;
use std::time::Duration;

use crate::helpers::{OrderService, spawn_users_with};

/// The stream limit an HTTP/2 server at `addr` announces, once one request
/// has been answered on the connection (its SETTINGS come first).
async fn announced_stream_limit(addr: std::net::SocketAddr, path: &str) -> usize {
    let io = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, mut conn) = h2::client::handshake(io).await.unwrap();
    let (limit_tx, mut limit_rx) = tokio::sync::watch::channel(0);
    tokio::spawn(std::future::poll_fn(move |cx| {
        let r = Pin::new(&mut conn).poll(cx);
        let _ = limit_tx.send(conn.max_concurrent_send_streams());
        r
    }));
    let req = http::Request::get(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .body(())
        .unwrap();
    let (res, _) = send.send_request(req, true).unwrap();
    tokio::time::timeout(Duration::from_secs(5), res)
        .await
        .expect("an answer within 5 s")
        .unwrap();
    // The connection task records the limit each time it is polled.
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        limit_rx.wait_for(|n| *n != usize::MAX && *n != 0),
    )
    .await;
    *limit_rx.borrow()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_listeners_announce_the_configured_stream_limit() {
    let orders = OrderService::start().await;
    let users = spawn_users_with(&orders, |s| s.max_concurrent_streams = 3).await;
    assert_eq!(announced_stream_limit(users.rest, "/healthz").await, 3);
    assert_eq!(
        announced_stream_limit(users.grpc, "/grpc.health.v1.Health/Check").await,
        3
    );
    users.stop().await;
    orders.stop().await;
}
