//! Graceful shutdown: once the signal comes, lookups already in flight on a
//! bidi stream or a raw-TCP connection are answered, then the streams end and
//! the service stops.

use prost::Message as _;
use proto::order::v2 as pb2;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::helpers::{Backend, spawn};

fn lookup(i: u64) -> pb2::LookupOrdersRequest {
    pb2::LookupOrdersRequest {
        request_id: i,
        user_id: "00000000-0000-0000-0000-000000010000".into(),
        page_size: 10_000,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_in_flight_are_answered_before_the_service_stops() {
    let app = spawn(Backend::Memory).await;

    // Bidi: five large lookups; shut down once the first answer is back.
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    for i in 1..=5 {
        tx.send(lookup(i)).await.unwrap();
    }
    let mut answers = app
        .grpc_v2()
        .await
        .lookup_orders(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();

    // Raw TCP: the same five on one connection.
    let mut tcp = tokio::net::TcpStream::connect(app.tcp).await.unwrap();
    for i in 1..=5 {
        tcp.write_all(&order_service::tcp::encode_frame(&lookup(i)))
            .await
            .unwrap();
    }

    let first = answers.message().await.unwrap().unwrap();
    assert_eq!(first.orders.len(), 10_000);
    let len = tcp.read_u32().await.unwrap() as usize;
    let mut buf = vec![0; len];
    tcp.read_exact(&mut buf).await.unwrap();
    assert_eq!(
        pb2::LookupOrdersResponse::decode(&buf[..])
            .unwrap()
            .orders
            .len(),
        10_000
    );

    app.serving.stop.cancel();

    let mut got = 1;
    while let Some(a) = answers.message().await.unwrap() {
        assert_eq!(a.orders.len(), 10_000);
        got += 1;
    }
    assert_eq!(got, 5, "every bidi lookup sent before shutdown is answered");
    drop(tx);

    let mut got = 1;
    while let Ok(len) = tcp.read_u32().await {
        let len = len as usize;
        let mut buf = vec![0; len];
        tcp.read_exact(&mut buf).await.unwrap();
        assert_eq!(
            pb2::LookupOrdersResponse::decode(&buf[..])
                .unwrap()
                .orders
                .len(),
            10_000
        );
        got += 1;
    }
    assert_eq!(
        got, 5,
        "every raw-TCP lookup sent before shutdown is answered"
    );

    app.serving.handle.await.unwrap().unwrap();
    assert!(
        tokio::net::TcpStream::connect(app.tcp).await.is_err(),
        "the listener is closed"
    );
}
