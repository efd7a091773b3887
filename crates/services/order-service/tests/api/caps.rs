//! Connection and stream caps: past `ORDER_MAX_TCP_CONNECTIONS` a raw-TCP
//! connection gets one `RESOURCE_EXHAUSTED` frame and is closed while the
//! others are served; past `ORDER_MAX_CONCURRENT_STREAMS` an HTTP/2 client
//! (h2c REST or gRPC) is told the limit in SETTINGS and its next stream waits
//! for a free one instead of failing.

use std::future::Future as _;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use order_service::tcp::{encode_frame, read_frame};
use proto::order::v2 as pb2;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

use crate::helpers::{Backend, spawn_with};

const TEN: &str = "00000000-0000-0000-0000-000000000010";

fn lookup(request_id: u64) -> pb2::LookupOrdersRequest {
    pb2::LookupOrdersRequest {
        request_id,
        user_id: TEN.to_owned(),
        page_size: 10,
        ..Default::default()
    }
}

/// Sends one lookup and reads one answer frame (5 s at most); `None` when
/// the connection ended instead.
async fn ask(socket: &mut TcpStream, request_id: u64) -> Option<pb2::LookupOrdersResponse> {
    use prost::Message as _;
    let _ = socket.write_all(&encode_frame(&lookup(request_id))).await;
    let frame = tokio::time::timeout(Duration::from_secs(5), read_frame(socket, 1 << 24))
        .await
        .expect("an answer or the close within 5 s");
    match frame {
        Ok(Some(payload)) => Some(pb2::LookupOrdersResponse::decode(payload).unwrap()),
        Ok(None) | Err(_) => None,
    }
}

fn served(answer: Option<pb2::LookupOrdersResponse>, request_id: u64) {
    let answer = answer.expect("an answer");
    assert_eq!(answer.error, None);
    assert_eq!(answer.request_id, request_id);
    assert_eq!(answer.orders.len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_tcp_connection_past_the_limit_gets_one_error_frame_and_is_closed_while_the_others_are_served()
 {
    let app = spawn_with(Backend::Postgres, |s| s.max_tcp_connections = 2).await;
    let mut first = TcpStream::connect(app.tcp).await.unwrap();
    let mut second = TcpStream::connect(app.tcp).await.unwrap();
    // An answer on each means the service holds both as open connections.
    served(ask(&mut first, 1).await, 1);
    served(ask(&mut second, 1).await, 1);

    let mut third = TcpStream::connect(app.tcp).await.unwrap();
    let refusal = ask(&mut third, 1).await.expect("an error frame");
    assert_eq!(refusal.request_id, 0);
    let error = refusal.error.expect("an error");
    assert_eq!(error.code, tonic::Code::ResourceExhausted as i32);
    assert!(
        error.message.contains("limit is 2") && error.message.contains("ORDER_MAX_TCP_CONNECTIONS"),
        "{}",
        error.message
    );
    let after = tokio::time::timeout(Duration::from_secs(5), read_frame(&mut third, 1 << 24))
        .await
        .expect("the close within 5 s");
    assert!(
        matches!(after, Ok(None)),
        "the refused connection is closed after its one frame: {after:?}"
    );

    // The first two are still served.
    served(ask(&mut first, 2).await, 2);
    served(ask(&mut second, 2).await, 2);

    // Once one closes, a new connection is served (the service notices the
    // close asynchronously, so a refusal or two may come first).
    drop(second);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let mut next = TcpStream::connect(app.tcp).await.unwrap();
        match ask(&mut next, 3).await {
            Some(a) if a.error.is_none() => {
                served(Some(a), 3);
                break;
            }
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "a connection is served again once one closed: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    let metrics = reqwest::get(app.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let refused: u64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                r#"order_requests_total{protocol="tcp",route="connect",code="",grpc_code="RESOURCE_EXHAUSTED"} "#,
            )
        })
        .expect("refusals are counted in /metrics")
        .parse()
        .unwrap();
    assert!(refused >= 1, "{refused}");
    // The same refusals, under the listener's connection counts.
    let by_listener: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix(r#"order_connections_refused_total{listener="tcp"} "#))
        .expect("the raw-TCP listener's refusals")
        .parse()
        .unwrap();
    assert_eq!(by_listener, refused);
    app.stop().await;
}

/// An h2c connection (prior knowledge) to `addr`, and a watch of the
/// concurrent streams the server allows on it (updated as the connection is
/// driven; the client's default until the server's SETTINGS arrive).
async fn h2c(
    addr: std::net::SocketAddr,
) -> (
    h2::client::SendRequest<Bytes>,
    tokio::sync::watch::Receiver<usize>,
) {
    let io = TcpStream::connect(addr).await.unwrap();
    let (send, mut conn) = h2::client::handshake(io).await.unwrap();
    let (limit_tx, limit_rx) = tokio::sync::watch::channel(0);
    tokio::spawn(std::future::poll_fn(move |cx| {
        let r = Pin::new(&mut conn).poll(cx);
        let _ = limit_tx.send(conn.max_concurrent_send_streams());
        r
    }));
    (send, limit_rx)
}

/// Waits until the server's SETTINGS set the stream limit to `want`.
async fn announced(limit: &mut tokio::sync::watch::Receiver<usize>, want: usize) {
    let got = tokio::time::timeout(Duration::from_secs(5), limit.wait_for(|n| *n == want))
        .await
        .is_ok();
    assert!(
        got,
        "SETTINGS_MAX_CONCURRENT_STREAMS should be {want}, is {}",
        *limit.borrow()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2c_client_is_told_the_stream_limit_and_a_stream_past_it_waits_for_a_free_one() {
    let app = spawn_with(Backend::Postgres, |s| s.max_concurrent_streams = 3).await;
    let (mut send, mut limit) = h2c(app.rest).await;
    let get = |path: &str| {
        http::Request::get(format!("http://{}{path}", app.rest))
            .body(())
            .unwrap()
    };
    // One request first: the server's SETTINGS come with its first frames.
    let (res, _) = send.send_request(get("/healthz"), true).unwrap();
    assert_eq!(res.await.unwrap().status(), 200);
    announced(&mut limit, 3).await;

    // Three creates whose bodies never end: three streams held open.
    let mut held = Vec::new();
    for i in 0..3 {
        send = send.ready().await.unwrap();
        let req = http::Request::post(format!("http://{}/v2/orders", app.rest))
            .header("content-type", "application/json")
            .header("idempotency-key", format!("caps-{i}"))
            .body(())
            .unwrap();
        held.push(send.send_request(req, false).unwrap());
    }
    // The fourth waits for a stream to end: no answer, and no error.
    send = send.ready().await.unwrap();
    let (fourth, _) = send.send_request(get("/healthz"), true).unwrap();
    let mut fourth = Box::pin(fourth);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut fourth)
            .await
            .is_err(),
        "a fourth stream was answered while three were open"
    );
    // End one body (not an order: 400); its stream closes and the fourth goes.
    let (first, mut body) = held.remove(0);
    body.send_data(Bytes::from_static(b"{}"), true).unwrap();
    assert_eq!(first.await.unwrap().status(), 400);
    let fourth = tokio::time::timeout(Duration::from_secs(5), fourth)
        .await
        .expect("the fourth stream is served once one ended")
        .unwrap();
    assert_eq!(fourth.status(), 200);
    drop(held);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_client_is_told_the_stream_limit_and_a_call_past_it_waits_for_a_free_stream() {
    let app = spawn_with(Backend::Postgres, |s| s.max_concurrent_streams = 2).await;
    let (_send, mut limit) = h2c(app.grpc).await;
    announced(&mut limit, 2).await;

    // One channel (one HTTP/2 connection): two bidi streams held open.
    let client = app.grpc_v2().await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let (tx, rx) = tokio::sync::mpsc::channel::<pb2::LookupOrdersRequest>(1);
        let answers = client
            .clone()
            .lookup_orders(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        held.push((tx, answers));
    }
    let mut unary = client.clone();
    let call = unary.list_orders(pb2::ListOrdersRequest {
        user_id: TEN.to_owned(),
        page_size: 10,
        ..Default::default()
    });
    let mut call = Box::pin(call);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut call)
            .await
            .is_err(),
        "a third stream was answered while two were open"
    );
    // End one bidi stream: the call takes its place and is served.
    let (tx, mut answers) = held.remove(0);
    drop(tx);
    while answers.message().await.unwrap().is_some() {}
    let listed = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the call is served once a stream ended")
        .unwrap();
    assert_eq!(listed.into_inner().orders.len(), 10);
    drop(held);
    app.stop().await;
}

/// Frames being received share one budget: with it held by a frame sent
/// almost whole, another large frame is refused with one error frame naming
/// the setting, then the close; once that frame is over, the budget is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_raw_tcp_frame_past_the_frame_budget_is_refused_with_one_error_frame() {
    const MAX: u32 = 64 << 10;
    let app = spawn_with(Backend::Memory, |s| {
        s.max_request_bytes = MAX;
        s.tcp_frame_budget_bytes = MAX;
    })
    .await;
    // Holds the whole budget: 64 KiB announced, all but a byte sent.
    let mut holder = TcpStream::connect(app.tcp).await.unwrap();
    let mut almost = MAX.to_be_bytes().to_vec();
    almost.resize(4 + MAX as usize - 1, 0);
    holder.write_all(&almost).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let mut refused = TcpStream::connect(app.tcp).await.unwrap();
    let mut frame = (20_000u32).to_be_bytes().to_vec();
    frame.resize(4 + 20_000, 0);
    refused.write_all(&frame).await.unwrap();
    let answer = read_frame(&mut refused, 1 << 24)
        .await
        .unwrap()
        .expect("an error frame");
    let answer = <pb2::LookupOrdersResponse as prost::Message>::decode(answer).unwrap();
    let error = answer.error.expect("an error");
    assert_eq!(error.code, tonic::Code::ResourceExhausted as i32);
    assert!(
        error.message.contains("ORDER_TCP_FRAME_BUDGET_BYTES"),
        "{}",
        error.message
    );
    let after = tokio::time::timeout(Duration::from_secs(5), read_frame(&mut refused, 1 << 24))
        .await
        .expect("the close within 5 s");
    assert!(matches!(after, Ok(None)), "{after:?}");

    // The holder's frame ends (not a lookup: refused as such), and the
    // budget is free: the same large frame is read and judged on its bytes.
    holder.write_all(&[0]).await.unwrap();
    let mut again = TcpStream::connect(app.tcp).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    again.write_all(&frame).await.unwrap();
    let answer = read_frame(&mut again, 1 << 24)
        .await
        .unwrap()
        .expect("an answer");
    let answer = <pb2::LookupOrdersResponse as prost::Message>::decode(answer).unwrap();
    let error = answer.error.expect("zeros are no lookup");
    assert_eq!(
        error.code,
        tonic::Code::InvalidArgument as i32,
        "{}",
        error.message
    );
    app.stop().await;
}
