//! A call waiting for its client's body holds its slot of the limit for at
//! most a second of silence: gRPC calls that declare a body and send none
//! used to hold every slot until the body-read timeout, and every other
//! call and request was refused meanwhile. When such a call's body comes,
//! it takes a slot again, or is shed like any call if none is free.

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

/// A call that sends one byte of its message every 100 ms, for ever: it
/// never waits a second, so it keeps its slot.
async fn trickling(addr: std::net::SocketAddr) -> tokio::task::JoinHandle<()> {
    let mut call = open(addr).await;
    tokio::spawn(async move {
        for b in message().iter().copied().cycle() {
            if call.body.send_data(Bytes::from(vec![b]), false).is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
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
async fn a_call_waiting_for_its_body_gives_its_slot_back_and_takes_one_again_when_it_comes() {
    let app = spawn_with(Backend::Memory, |s| s.max_concurrent_requests = 2).await;
    // Both slots held: each call sends a byte of its message every 300 ms,
    // from a task of its own so that a probe slow on a loaded machine
    // cannot stretch the gap past a second, until a probe sees them held.
    // A machine so loaded that a gap passed a second anyway has the calls
    // give their slots back and one shed when its byte comes (a closed
    // stream): that attempt proves nothing and is made again, twice at most.
    let mut attempt = 0;
    let (first, second, sent, last) = loop {
        attempt += 1;
        let (mut first, mut second) = (open(app.grpc).await, open(app.grpc).await);
        let msg = message();
        let opened = std::time::Instant::now();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let feeder = tokio::spawn(async move {
            let (mut sent, mut last) = (0, std::time::Instant::now());
            loop {
                tokio::select! {
                    _ = &mut stopped => return Some((first, second, sent, last)),
                    () = tokio::time::sleep(Duration::from_millis(300)) => {}
                }
                if sent + 1 < msg.len() {
                    for call in [&mut first, &mut second] {
                        if call
                            .body
                            .send_data(msg.slice(sent..sent + 1), false)
                            .is_err()
                        {
                            return None;
                        }
                    }
                    (sent, last) = (sent + 1, std::time::Instant::now());
                }
            }
        });
        while !feeder.is_finished() && list_code(&app).await != tonic::Code::ResourceExhausted {
            assert!(
                opened.elapsed() < Duration::from_secs(10),
                "the slots were never held"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = stop.send(());
        match feeder.await.unwrap() {
            Some(held) => break held,
            None => assert!(attempt < 3, "a held call's stream closed in 3 attempts"),
        }
    };

    // Past a second of silence both slots are free again.
    while list_code(&app).await != tonic::Code::Ok {
        assert!(
            last.elapsed() < Duration::from_secs(5),
            "the slots were never given back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        last.elapsed() >= Duration::from_millis(900),
        "given back before a second of silence"
    );
    let rest = reqwest::get(app.url(&format!("/v2/orders?user_id={USER}&limit=1")))
        .await
        .unwrap();
    assert_eq!(rest.status(), 200);

    // The first call's message comes: it takes a slot and is answered.
    assert_eq!(finish(first, sent).await, "0");

    // Both slots held by calls that keep sending: the second call's message
    // finds none, and it is shed.
    let holders = [trickling(app.grpc).await, trickling(app.grpc).await];
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        list_code(&app).await,
        tonic::Code::ResourceExhausted,
        "held by the tricklers"
    );
    assert_eq!(finish(second, sent).await, "8", "shed: RESOURCE_EXHAUSTED");
    for h in holders {
        h.abort();
    }
    app.stop().await;
}
