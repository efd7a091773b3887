//! A call waiting for its client's body lends its slot of the limit to new
//! work: gRPC calls that declare a body and send none used to hold every
//! slot until the body-read timeout (then for a second of silence), and
//! every other call and request was refused meanwhile. When such a call's
//! body comes, it takes a slot again, or is shed like any call if none is
//! free.

use std::time::Duration;

use bytes::Bytes;
use prost::Message as _;
use proto::order::v2 as pb2;

use crate::grpc_raw;
use crate::helpers::{Backend, spawn_with};

const USER: &str = "00000000-0000-0000-0000-000000000010";

/// A ListOrders call over raw h2 whose message is not sent yet.
struct Open {
    body: h2::SendStream<Bytes>,
    answer: h2::client::ResponseFuture,
}

async fn open(addr: std::net::SocketAddr) -> Open {
    let io = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = h2::client::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let req = grpc_raw::request(addr, "/order.v2.OrderService/ListOrders");
    let (answer, body) = send.send_request(req, false).unwrap();
    Open { body, answer }
}

fn message() -> Bytes {
    let m = pb2::ListOrdersRequest {
        user_id: USER.into(),
        page_size: 3,
        ..Default::default()
    };
    grpc_raw::framed(&m.encode_to_vec())
}

/// Sends the message from byte `sent` on and returns the call's
/// `grpc-status`.
async fn finish(mut call: Open, sent: usize) -> String {
    call.body.send_data(message().slice(sent..), true).unwrap();
    grpc_raw::status(call.answer).await
}

async fn list_code(app: &crate::helpers::TestApp) -> tonic::Code {
    let req = pb2::ListOrdersRequest {
        user_id: USER.into(),
        page_size: 1,
        ..Default::default()
    };
    match app.grpc_v2().await.list_orders(req).await {
        Ok(_) => tonic::Code::Ok,
        Err(s) => s.code(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_for_its_body_lends_its_slot_and_takes_one_again_when_it_comes() {
    let app = spawn_with(Backend::Postgres, |s| s.max_concurrent_requests = 2).await;
    // Both slots taken by calls whose messages have not come (a byte of
    // each sent): new work is served at once, on a slot one of them lends,
    // with no second of silence to wait.
    let (mut first, mut second) = (open(app.grpc).await, open(app.grpc).await);
    for call in [&mut first, &mut second] {
        call.body.send_data(message().slice(..1), false).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..3 {
        assert_eq!(list_code(&app).await, tonic::Code::Ok, "a slot lent");
    }
    let rest = reqwest::get(app.url(&format!("/v2/orders?user_id={USER}&limit=1")))
        .await
        .unwrap();
    assert_eq!(rest.status(), 200);

    // The first call's message comes: it takes a slot (free again) and is
    // answered.
    assert_eq!(finish(first, 1).await, "0");

    // Both slots held by work in service (lists waiting on a locked
    // table), which lends nothing: the second call's message finds no slot,
    // and it is shed.
    let holders = crate::helpers::hold_slots(&app, 2).await;
    assert_eq!(
        list_code(&app).await,
        tonic::Code::ResourceExhausted,
        "held by work in service"
    );
    assert_eq!(finish(second, 1).await, "8", "shed: RESOURCE_EXHAUSTED");
    holders.abort();
    app.stop().await;
}
