//! The caller's deadline, enforced by order-service: past it the server
//! says DEADLINE_EXCEEDED (gRPC) or `deadline_exceeded` (Connect) and stops,
//! rather than encoding and sending a 10,000-order answer nobody waits for.
//! The clients are raw (h2 for gRPC, reqwest for Connect), so what is
//! checked is what the server sent, not a client's own timer; the answers
//! with a generous deadline are checked against the data set.

use bytes::{Buf as _, Bytes};
use model::FieldSet;
use prost::Message as _;
use proto::order::v2 as pb2;
use tokio::net::TcpStream;

use crate::helpers::{Backend, expected_orders, list_request, spawn};

/// The data set's user with 10,000 orders.
fn big_user() -> String {
    dataset::fixed_user_id(10_000).to_string()
}

/// A gRPC `ListOrders` of all 10,000 orders over raw h2 with `grpc-timeout`
/// `timeout`: the `grpc-status` the server sent (in headers or trailers)
/// and the message bytes it sent.
async fn grpc_list(addr: std::net::SocketAddr, timeout: &str) -> (String, Vec<u8>) {
    let io = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = h2::client::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let msg = list_request(&big_user(), 10_000, FieldSet::ALL).encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&u32::try_from(msg.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(&msg);
    let req = http::Request::post(format!("http://{addr}/order.v2.OrderService/ListOrders"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", timeout)
        .body(())
        .unwrap();
    let (res, mut body) = send.send_request(req, false).unwrap();
    body.send_data(Bytes::from(frame), true).unwrap();
    let res = res.await.unwrap();
    assert_eq!(res.status(), 200);
    let head_status = res
        .headers()
        .get("grpc-status")
        .map(|v| v.to_str().unwrap().to_owned());
    let mut body = res.into_body();
    let mut data = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(chunk.chunk());
    }
    let status = match head_status {
        Some(s) => s,
        None => body
            .trailers()
            .await
            .unwrap()
            .expect("trailers")
            .get("grpc-status")
            .expect("grpc-status")
            .to_str()
            .unwrap()
            .to_owned(),
    };
    (status, data)
}

#[tokio::test]
async fn a_grpc_call_past_its_deadline_is_deadline_exceeded_from_the_server_and_its_answer_is_not_sent()
 {
    let app = spawn(Backend::Memory).await;
    // 60 s: the whole answer, the data set's 10,000 orders.
    let (status, data) = grpc_list(app.grpc, "60S").await;
    assert_eq!(status, "0");
    let page = pb2::ListOrdersResponse::decode(&data[5..]).unwrap();
    let want = expected_orders(10_000);
    assert_eq!(page.orders.len(), want.len());
    assert!(
        page.orders
            .iter()
            .zip(&want)
            .all(|(o, w)| o.id == w.id.to_string())
    );
    // 1 ms: DEADLINE_EXCEEDED, said by the server, and most of the answer
    // never sent.
    let (status, short) = grpc_list(app.grpc, "1m").await;
    assert_eq!(status, "4", "grpc-status after {} bytes", short.len());
    assert!(
        short.len() < data.len() / 2,
        "{} of {} bytes sent",
        short.len(),
        data.len()
    );
    app.stop().await;
}

#[tokio::test]
async fn a_connect_call_past_its_deadline_is_deadline_exceeded_and_its_answer_is_not_sent() {
    let app = spawn(Backend::Memory).await;
    let body = serde_json::json!({ "userId": big_user(), "pageSize": 10_000 }).to_string();
    for client in [app.h1(), app.h2c()] {
        let call = |ms: &'static str| {
            client
                .post(app.url("/order.v2.OrderService/ListOrders"))
                .header("content-type", "application/json")
                .header("connect-protocol-version", "1")
                .header("connect-timeout-ms", ms)
                .body(body.clone())
                .send()
        };
        let full = call("60000").await.unwrap();
        assert_eq!(full.status(), 200);
        let page: serde_json::Value = full.json().await.unwrap();
        assert_eq!(page["orders"].as_array().unwrap().len(), 10_000);
        // 1 ms: the server's `deadline_exceeded`, or the answer cut at the
        // deadline; never the whole answer.
        match call("1").await {
            Ok(res) if res.status() == 504 => {
                let e: serde_json::Value = res.json().await.unwrap();
                assert_eq!(e["code"], "deadline_exceeded", "{e}");
            }
            Ok(res) => {
                let status = res.status();
                let got = res.bytes().await;
                assert!(
                    got.is_err(),
                    "{status} and the whole answer ({} bytes) past a 1 ms deadline",
                    got.map(|b| b.len()).unwrap_or(0)
                );
            }
            Err(e) => assert!(e.is_request() || e.is_body(), "{e}"),
        }
    }
    app.stop().await;
}

#[tokio::test]
async fn a_rest_call_past_its_deadline_is_a_504_problem_and_its_answer_is_not_sent() {
    let app = spawn(Backend::Memory).await;
    let url = app.url(&format!("/v2/orders?user_id={}&limit=10000", big_user()));
    for client in [app.h1(), app.h2c()] {
        let call = |ms: &'static str| client.get(&url).header("x-request-timeout-ms", ms).send();
        // Time enough, or a value that is no deadline: the whole answer.
        for ms in ["60000", "soon", ""] {
            let full = call(ms).await.unwrap();
            assert_eq!(full.status(), 200, "x-request-timeout-ms: {ms:?}");
            let page: serde_json::Value = full.json().await.unwrap();
            assert_eq!(page["orders"].as_array().unwrap().len(), 10_000);
        }
        // 1 ms: the 504 problem, or the answer cut at the deadline; never
        // the whole answer.
        match call("1").await {
            Ok(res) if res.status() == 504 => {
                let e = testkit::problem::problem_of(res).await;
                assert_eq!(e.error, "deadline_exceeded", "{e:?}");
                assert!(e.detail.contains("1 ms"), "{e:?}");
            }
            Ok(res) => {
                let status = res.status();
                let got = res.bytes().await;
                assert!(
                    got.is_err(),
                    "{status} and the whole answer ({} bytes) past a 1 ms deadline",
                    got.map(|b| b.len()).unwrap_or(0)
                );
            }
            Err(e) => assert!(e.is_request() || e.is_body(), "{e}"),
        }
    }
    // The problem type is described where its URI points.
    let page = app
        .h1()
        .get(app.url("/problems/deadline_exceeded"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("x-request-timeout-ms"));
    app.stop().await;
}

/// One raw-TCP lookup of all 10,000 orders with `deadline_ms`.
async fn tcp_lookup_within(
    c: &mut TcpStream,
    id: u64,
    deadline_ms: u32,
) -> pb2::LookupOrdersResponse {
    let req = pb2::LookupOrdersRequest {
        request_id: id,
        user_id: big_user(),
        page_size: 10_000,
        deadline_ms,
        ..Default::default()
    };
    crate::helpers::tcp_send(c, &req).await
}

#[tokio::test]
async fn a_lookup_past_its_deadline_is_deadline_exceeded_on_raw_tcp_and_on_a_bidi_stream() {
    for backend in [Backend::Memory, Backend::Postgres] {
        let app = spawn(backend).await;
        // Raw TCP: 1 ms cannot hold 10,000 orders; 60 s and none (0) can.
        let mut c = TcpStream::connect(app.tcp).await.unwrap();
        let late = tcp_lookup_within(&mut c, 1, 1).await;
        let e = late.error.expect("an error past the deadline");
        assert_eq!(e.code, tonic::Code::DeadlineExceeded as i32, "{e:?}");
        assert!(e.message.contains("1 ms"), "{e:?}");
        assert!(late.orders.is_empty());
        let want = expected_orders(10_000);
        for (id, ms) in [(2, 60_000), (3, 0)] {
            let ok = tcp_lookup_within(&mut c, id, ms).await;
            assert!(ok.error.is_none(), "{ms} ms: {:?}", ok.error);
            let got: Vec<model::Order> = ok
                .orders
                .into_iter()
                .map(|o| model::Order::try_from(o).unwrap())
                .collect();
            assert_eq!(got, want, "{ms} ms");
        }
        // A bidi stream carries the same lookups, answered the same way.
        let mut grpc = app.grpc_v2().await;
        let lookups = [(1u64, 1u32), (2, 60_000)].map(|(id, ms)| pb2::LookupOrdersRequest {
            request_id: id,
            user_id: big_user(),
            page_size: 10_000,
            deadline_ms: ms,
            ..Default::default()
        });
        let mut answers = grpc
            .lookup_orders(futures::stream::iter(lookups))
            .await
            .unwrap()
            .into_inner();
        let mut by_id = std::collections::HashMap::new();
        while let Some(a) = answers.message().await.unwrap() {
            by_id.insert(a.request_id, a);
        }
        let e = by_id[&1]
            .error
            .as_ref()
            .expect("an error past the deadline");
        assert_eq!(e.code, tonic::Code::DeadlineExceeded as i32, "{e:?}");
        assert_eq!(by_id[&2].orders.len(), 10_000);
        app.stop().await;
    }
}
