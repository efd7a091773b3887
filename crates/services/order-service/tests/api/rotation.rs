//! Connection rotation (`ORDER_MAX_CONNECTION_AGE_MS`): past its age a REST
//! or gRPC connection is closed gracefully, so that a client behind an L4
//! balancer reconnects; calls made across rotations all succeed. Without
//! the setting, connections stay open.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use proto::order::v2 as pb2;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::helpers::{Backend, spawn_with};

const USER: &str = "00000000-0000-0000-0000-000000000010";

/// How long an HTTP/1.1 keep-alive connection to `rest` stays open after
/// one answer, up to `limit`; `None` if still open then.
async fn h1_lifetime(rest: SocketAddr, limit: Duration) -> Option<Duration> {
    let mut c = tokio::net::TcpStream::connect(rest).await.unwrap();
    c.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let start = Instant::now();
    let mut buf = vec![0u8; 4096];
    let n = c.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    match tokio::time::timeout(limit, c.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => Some(start.elapsed()),
        Ok(Ok(n)) => panic!("unexpected bytes: {:?}", &buf[..n]),
        Err(_) => None,
    }
}

/// How long an HTTP/2 connection with no stream stays open, up to `limit`.
async fn h2_lifetime(addr: SocketAddr, limit: Duration) -> Option<Duration> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (_client, conn) = h2::client::handshake(tcp).await.unwrap();
    let start = Instant::now();
    tokio::time::timeout(limit, conn)
        .await
        .ok()
        .map(|_| start.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_their_age_rest_and_grpc_connections_are_closed_and_no_call_is_lost() {
    let app = spawn_with(Backend::Memory, |s| {
        s.max_connection_age_ms = 300;
        s.max_connection_age_grace_ms = 3_000;
    })
    .await;
    let limit = Duration::from_secs(5);
    // Closed near 300 ms (±10%, and the time to notice), far before the
    // 60 s idle timeout, and gracefully: with no call in flight a
    // connection does not wait for its 3 s grace (tonic 0.14, given a
    // grace, cuts at age + grace without a GOAWAY).
    for (what, lived) in [
        ("HTTP/1.1 on REST", h1_lifetime(app.rest, limit).await),
        ("h2c on REST", h2_lifetime(app.rest, limit).await),
        ("gRPC", h2_lifetime(app.grpc, limit).await),
    ] {
        let lived = lived.unwrap_or_else(|| panic!("{what}: still open after {limit:?}"));
        assert!(
            lived >= Duration::from_millis(250),
            "{what}: closed after {lived:?}"
        );
        eprintln!("{what}: closed after {lived:?}");
    }

    // Calls across several rotations, on clients that reconnect by
    // themselves: every one is answered.
    let h2c = app.h2c();
    let mut grpc = app.grpc_v2().await;
    let url = app.url(&format!("/v2/orders?user_id={USER}&limit=5"));
    let until = Instant::now() + Duration::from_millis(1_500);
    let (mut n, mut resent) = (0, 0);
    let request = || pb2::ListOrdersRequest {
        user_id: USER.into(),
        page_size: 5,
        ..Default::default()
    };
    while Instant::now() < until {
        let res = h2c.get(&url).send().await.unwrap();
        assert_eq!(res.status(), 200);
        let got = match grpc.list_orders(request()).await {
            Ok(got) => got,
            // A call handed to a connection as its GOAWAY arrived is
            // cancelled by the client ("connection closed") before it is
            // sent: tonic does not send it again, a caller may (the
            // server's count below shows none of them reached it).
            Err(e) if format!("{e:?}").contains("Canceled") && resent < 3 => {
                resent += 1;
                grpc.list_orders(request())
                    .await
                    .unwrap_or_else(|e| panic!("call {n}, sent again: {e}"))
            }
            Err(e) => panic!("call {n} across a rotation: {e:?}"),
        };
        assert_eq!(got.into_inner().orders.len(), 5);
        n += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(n > 10, "{n} calls");
    // order-service saw exactly the calls answered, each answered well: a
    // rotation cut none it had begun, and a cancelled one never arrived.
    let text = app.metrics_text().await;
    let seen = |code: Option<&str>| -> u64 {
        text.lines()
            .filter(|l| {
                l.starts_with(
                    r#"order_requests_total{protocol="grpc",route="/order.v2.OrderService/ListOrders""#,
                )
            })
            .filter(|l| code.is_none_or(|c| l.contains(&format!("grpc_code=\"{c}\""))))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum()
    };
    assert_eq!(
        seen(None),
        n,
        "calls order-service saw ({resent} sent again)"
    );
    assert_eq!(seen(Some("OK")), n);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_rotation_connections_stay_open() {
    let app = spawn_with(Backend::Memory, |_| {}).await;
    let limit = Duration::from_millis(1_500);
    assert_eq!(h1_lifetime(app.rest, limit).await, None);
    assert_eq!(h2_lifetime(app.grpc, limit).await, None);
    app.stop().await;
}
