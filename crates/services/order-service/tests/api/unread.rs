//! Clients that never read their answers hold nothing past the write
//! timeout: the connection is closed, and the slots of the limit its
//! answers held are free again. Raw TCP lookups never read, a gRPC client
//! whose flow-control window is shut (a bidi stream and a unary call), and
//! HTTP/1.1 answers never read. Bounds are functional: a write timeout of
//! half a second must have acted within seconds.

use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message as _;
use proto::order::v2 as pb2;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::grpc_raw;
use crate::helpers::{Backend, TestApp, spawn_with};

/// A user with 10,000 orders: each answer is about 3 MB.
const BIG: &str = "00000000-0000-0000-0000-000000010000";
const SMALL: &str = "00000000-0000-0000-0000-000000000010";
const LIMIT: usize = 4;

async fn app() -> TestApp {
    spawn_with(Backend::Memory, |s| {
        s.write_timeout_ms = 500;
        s.max_concurrent_requests = LIMIT;
    })
    .await
}

/// Whether a REST request and a gRPC call are both answered.
async fn others_served(app: &TestApp) -> bool {
    let rest = app
        .h1()
        .get(app.url(&format!("/v2/orders?user_id={SMALL}&limit=1")))
        .send()
        .await
        .is_ok_and(|r| r.status() == 200);
    let req = pb2::ListOrdersRequest {
        user_id: SMALL.into(),
        page_size: 1,
        ..Default::default()
    };
    rest && app.grpc_v2().await.list_orders(req).await.is_ok()
}

/// Waits (10 s at most) until others are served again; how long it took.
async fn served_again(app: &TestApp, what: &str) -> Duration {
    let started = Instant::now();
    while !others_served(app).await {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what}: others still refused after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_tcp_lookups_never_read_give_their_slots_back_at_the_write_timeout() {
    let app = app().await;
    // 200 lookups of 10,000 orders on one connection, never read: past
    // what the socket's buffers and the answer queue hold, lookups wait to
    // send with their slots of the limit held.
    let mut s = TcpStream::connect(app.tcp).await.unwrap();
    for i in 0..200 {
        let req = pb2::LookupOrdersRequest {
            request_id: i + 1,
            user_id: BIG.into(),
            page_size: 10_000,
            ..Default::default()
        };
        s.write_all(&order_service::tcp::encode_frame(&req))
            .await
            .unwrap();
    }
    let took = served_again(&app, "raw TCP").await;
    eprintln!("served again {took:?} after 200 lookups never read");
    // Past the write timeout, unread: the connection was closed, and what
    // it had sent ends short of the answers asked for.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (mut got, mut answered) = (0usize, 0usize);
    let read_all = async {
        while let Ok(len) = s.read_u32().await {
            let mut frame = vec![0u8; len as usize];
            if s.read_exact(&mut frame).await.is_err() {
                break;
            }
            got += frame.len();
            let a = pb2::LookupOrdersResponse::decode(&frame[..]).unwrap();
            answered += usize::from(a.orders.len() == 10_000);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read_all)
        .await
        .expect("the server closed the connection");
    assert!(
        answered < 200,
        "{answered} answers of {got} bytes: every one was sent"
    );
    app.stop().await;
}

/// An h2 client that grants no flow-control room: no answer can reach it.
async fn shut_window(
    addr: std::net::SocketAddr,
) -> (h2::client::SendRequest<Bytes>, tokio::task::JoinHandle<()>) {
    let io = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, Bytes>(io)
        .await
        .unwrap();
    let ended = tokio::spawn(async move {
        let _ = conn.await;
    });
    (send, ended)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_client_with_a_shut_window_is_closed_at_the_write_timeout() {
    let app = app().await;
    // Unary calls whose answers cannot be sent (made first, so that each
    // gets a slot and its answer is begun).
    let (send, unary_conn) = shut_window(app.grpc).await;
    let mut send = send.ready().await.unwrap();
    let mut calls = Vec::new();
    for _ in 0..3 {
        let (answer, mut body) = send
            .send_request(
                grpc_raw::request(app.grpc, "/order.v2.OrderService/ListOrders"),
                false,
            )
            .unwrap();
        let req = pb2::ListOrdersRequest {
            user_id: BIG.into(),
            page_size: 10_000,
            ..Default::default()
        };
        body.send_data(grpc_raw::framed(&req.encode_to_vec()), true)
            .unwrap();
        calls.push(answer);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A bidi stream of lookups whose answers cannot be sent either.
    let (send, bidi_conn) = shut_window(app.grpc).await;
    let mut send = send.ready().await.unwrap();
    let (_answers, mut lookups) = send
        .send_request(
            grpc_raw::request(app.grpc, "/order.v2.OrderService/LookupOrders"),
            false,
        )
        .unwrap();
    for i in 1..=16 {
        let req = pb2::LookupOrdersRequest {
            request_id: i,
            user_id: BIG.into(),
            page_size: 10_000,
            ..Default::default()
        };
        lookups
            .send_data(grpc_raw::framed(&req.encode_to_vec()), false)
            .unwrap();
    }
    let took = served_again(&app, "gRPC").await;
    eprintln!("served again {took:?} after shut windows");
    for (what, conn) in [("bidi", bidi_conn), ("unary", unary_conn)] {
        tokio::time::timeout(Duration::from_secs(10), conn)
            .await
            .unwrap_or_else(|_| panic!("{what}: the connection is still open after 10 s"))
            .unwrap();
    }
    drop((lookups, calls));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_answers_never_read_end_the_connection_at_the_write_timeout() {
    let app = app().await;
    let mut c = TcpStream::connect(app.rest).await.unwrap();
    // Five pipelined lists of 10,000 orders (about 3 MB of JSON each),
    // none read.
    let get = format!("GET /v2/orders?user_id={BIG}&limit=10000 HTTP/1.1\r\nhost: t\r\n\r\n");
    for _ in 0..5 {
        c.write_all(get.as_bytes()).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let got = testkit::flood::closed_within(&mut c, Duration::from_secs(10))
        .await
        .len();
    assert!(got < 5 * 3_000_000, "{got} bytes: every answer was sent");
    assert!(others_served(&app).await);
    app.stop().await;
}
