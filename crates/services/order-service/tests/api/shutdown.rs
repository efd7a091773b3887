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

/// The next frame on `tcp`, or `None` once the server has closed.
async fn read_answer(tcp: &mut tokio::net::TcpStream) -> Option<pb2::LookupOrdersResponse> {
    let len = tcp.read_u32().await.ok()? as usize;
    let mut buf = vec![0; len];
    tcp.read_exact(&mut buf).await.ok()?;
    Some(pb2::LookupOrdersResponse::decode(&buf[..]).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_in_flight_are_answered_before_the_service_stops() {
    let app = spawn(Backend::Memory).await;

    // Bidi: five large lookups; shut down once the first answer is back.
    let (tx, mut answers) =
        crate::helpers::lookups(&mut app.grpc_v2().await, (1..=5).map(lookup)).await;

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

    // The connection says it is going away (request id 0), answers every
    // lookup it had read, and closes once the client closes its side.
    let mut got = 1;
    let mut going_away = false;
    while got < 5 || !going_away {
        let a = read_answer(&mut tcp).await.expect("an answer, not a close");
        if a.request_id == 0 {
            let e = a.error.expect("the going-away frame is an error");
            assert_eq!(e.code, tonic::Code::Unavailable as i32, "{e:?}");
            assert_eq!(e.message, order_service::tcp::GOING_AWAY);
            going_away = true;
        } else {
            assert_eq!(a.orders.len(), 10_000, "{:?}", a.error);
            got += 1;
        }
    }
    tcp.shutdown().await.unwrap();
    assert!(
        read_answer(&mut tcp).await.is_none(),
        "closed after our side"
    );
    app.serving.handle.await.unwrap().unwrap();
    assert!(
        tokio::net::TcpStream::connect(app.tcp).await.is_err(),
        "the listener is closed"
    );
}

/// A lookup written on a raw-TCP connection just after the signal is
/// answered UNAVAILABLE with its own id, after the going-away frame: not a
/// bare close, which left the client not knowing whether it was served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_tcp_lookup_sent_after_the_signal_is_refused_not_dropped() {
    let app = spawn(Backend::Memory).await;
    let mut tcp = tokio::net::TcpStream::connect(app.tcp).await.unwrap();
    let small = |i| pb2::LookupOrdersRequest {
        page_size: 1,
        ..lookup(i)
    };
    tcp.write_all(&order_service::tcp::encode_frame(&small(1)))
        .await
        .unwrap();
    assert_eq!(read_answer(&mut tcp).await.unwrap().orders.len(), 1);

    app.serving.stop.cancel();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    // Written before this client has read the going-away frame.
    tcp.write_all(&order_service::tcp::encode_frame(&small(2)))
        .await
        .unwrap();
    let first = read_answer(&mut tcp).await.expect("the going-away frame");
    assert_eq!(first.request_id, 0);
    assert_eq!(first.error.unwrap().message, order_service::tcp::GOING_AWAY);
    let refused = read_answer(&mut tcp).await.expect("an answer to lookup 2");
    assert_eq!(refused.request_id, 2);
    assert_eq!(
        refused.error.map(|e| e.code),
        Some(tonic::Code::Unavailable as i32)
    );
    assert!(refused.orders.is_empty());
    tcp.shutdown().await.unwrap();
    assert!(read_answer(&mut tcp).await.is_none());
    app.serving.handle.await.unwrap().unwrap();
}
