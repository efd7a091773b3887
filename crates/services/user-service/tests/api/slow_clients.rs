//! user-service's listeners bound slow clients as order-service's do (one
//! implementation, `service_kit::serve` and `service_kit::preface`): a silent
//! connection is cut at the header-read timeout on REST and gRPC, and an
//! idle REST keep-alive connection at the idle timeout.

use std::time::{Duration, Instant};

use testkit::flood::closed_within;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::helpers::{OrderService, spawn_users_with};

#[tokio::test]
async fn silent_and_idle_connections_are_cut_at_their_timeouts() {
    let orders = OrderService::start().await;
    let users = spawn_users_with(&orders, |s| {
        s.header_read_timeout_ms = 300;
        s.idle_timeout_ms = 400;
    })
    .await;
    for addr in [users.rest, users.grpc] {
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let started = Instant::now();
        closed_within(&mut silent, Duration::from_secs(5)).await;
        assert!(started.elapsed() < Duration::from_secs(5), "{addr}");
    }
    let mut idle = TcpStream::connect(users.rest).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    closed_within(&mut idle, Duration::from_secs(5)).await;
    users.stop().await;
    orders.stop().await;
}

/// One request cap (USER_MAX_REQUEST_BYTES, 64 KiB by default) on REST and
/// gRPC alike: 100 KB is 413 / RESOURCE_EXHAUSTED before it is looked at.
#[tokio::test]
async fn a_request_over_the_cap_is_refused_on_rest_and_grpc() {
    let orders = OrderService::start().await;
    let users = crate::helpers::spawn_users(&orders).await;
    let big = "v".repeat(100_000);
    let res = users
        .http
        .post(users.url("/v1/users"))
        .header("content-type", "application/json")
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 413);
    let s = users
        .grpc_client()
        .await
        .get_user_with_orders(proto::user::v1::GetUserWithOrdersRequest {
            id: dataset::fixed_user_id(1).to_string(),
            via: big,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
    users.stop().await;
    orders.stop().await;
}
