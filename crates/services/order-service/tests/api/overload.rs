//! Overload: past its concurrency limit the service refuses at once (503 with
//! a problem body of type `overloaded`, RESOURCE_EXHAUSTED on gRPC) instead of queueing, its
//! memory stays bounded, and it serves normally the moment the load drops.
//!
//! On Postgres, so that requests wait on the database and really are in
//! service together (the in-memory store answers without ever yielding, so a
//! two-thread runtime would never have more than two at once).

use std::time::{Duration, Instant};

use proto::order::v2 as pb2;

use crate::helpers::{self, Backend, spawn_with};

/// The user with 10,000 orders: each answer is about 5 MB of JSON.
const BIG: &str = "00000000-0000-0000-0000-000000010000";
const LIMIT: usize = 2;
const CALLERS: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_limit_rest_requests_get_503_at_once_and_memory_stays_bounded() {
    // It reads this process's memory.
    if !helpers::alone(
        "overload::past_the_limit_rest_requests_get_503_at_once_and_memory_stays_bounded",
    )
    .await
    {
        return;
    }
    let app = spawn_with(Backend::Postgres, |s| s.max_concurrent_requests = LIMIT).await;
    let url = app.url(&format!("/v2/orders?user_id={BIG}&limit=10000"));
    // One request first, so the baseline includes a served answer's buffers.
    let warm = reqwest::get(&url).await.expect("a warm-up answer");
    assert_eq!(warm.status(), 200);
    drop(warm.bytes().await);
    let before = testkit::flood::rss_kib() * 1024;

    let started = Instant::now();
    let calls = (0..CALLERS).map(|_| {
        // A client each: one connection each, so all of them are in at once.
        let client = reqwest::Client::builder()
            .http1_only()
            .build()
            .expect("a client");
        let url = url.clone();
        tokio::spawn(async move {
            let res = client.get(&url).send().await.expect("an answer");
            let status = res.status().as_u16();
            let body = res.bytes().await.expect("a whole body");
            // Keep only what is checked: the callers' copies are not the service's memory.
            let len = body.len();
            (status, len, (status != 200).then_some(body))
        })
    });
    let (mut served, mut shed) = (0, 0);
    for call in futures::future::join_all(calls).await {
        let (status, len, body) = call.expect("the caller task");
        let body = body.unwrap_or_default();
        match status {
            200 => {
                assert!(len > 1 << 20, "a short answer: {len} bytes");
                served += 1;
            }
            503 => {
                shed += 1;
                let e: serde_json::Value = serde_json::from_slice(&body).expect("a JSON body");
                assert_eq!(e["error"], "overloaded", "{e}");
                assert!(e["detail"].as_str().is_some_and(|m| m.contains("retry")));
            }
            other => panic!("status {other}: {}", String::from_utf8_lossy(&body)),
        }
    }
    let took = started.elapsed();
    let grew = (testkit::flood::rss_kib() * 1024).saturating_sub(before);
    eprintln!(
        "{served} served, {shed} shed in {took:?}; RSS grew {} MB",
        grew >> 20
    );
    assert!(shed > 0, "nothing was shed: {served} served");
    assert!(served >= 1, "nothing was served");
    // Fifty 10,000-order answers in service at once would take hundreds of MB.
    assert!(grew < 64 << 20, "RSS grew by {} MB", grew >> 20);

    // Straight after, the service serves normally again.
    for _ in 0..3 {
        let res = reqwest::get(&url).await.expect("an answer");
        assert_eq!(res.status(), 200);
    }
    let health = reqwest::get(app.url("/healthz")).await.expect("health");
    assert_eq!(health.status(), 200);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_limit_grpc_calls_get_resource_exhausted_and_health_still_answers() {
    let app = spawn_with(Backend::Postgres, |s| s.max_concurrent_requests = LIMIT).await;
    let calls = (0..CALLERS).map(|_| {
        let grpc = format!("http://{}", app.grpc);
        tokio::spawn(async move {
            let mut c = pb2::order_service_client::OrderServiceClient::connect(grpc)
                .await
                .expect("a channel")
                .max_decoding_message_size(64 << 20);
            c.list_orders(pb2::ListOrdersRequest {
                user_id: BIG.into(),
                page_size: 10_000,
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner().orders.len())
        })
    });
    let (mut served, mut shed) = (0, 0);
    for call in futures::future::join_all(calls).await {
        match call.expect("the caller task") {
            Ok(n) => {
                assert_eq!(n, 10_000);
                served += 1;
            }
            Err(s) if s.code() == tonic::Code::ResourceExhausted => shed += 1,
            Err(s) => panic!("unexpected {s:?}"),
        }
    }
    assert!(shed > 0, "nothing was shed: {served} served");
    assert!(served >= 1, "nothing was served");

    let mut c = app.grpc_v2().await;
    let again = tokio::time::timeout(
        Duration::from_secs(10),
        c.list_orders(pb2::ListOrdersRequest {
            user_id: BIG.into(),
            page_size: 10_000,
            ..Default::default()
        }),
    )
    .await
    .expect("an answer in time")
    .expect("served");
    assert_eq!(again.into_inner().orders.len(), 10_000);
    app.stop().await;
}

/// One raw-TCP answer frame.
async fn read_frame(s: &mut tokio::net::TcpStream) -> pb2::LookupOrdersResponse {
    use tokio::io::AsyncReadExt as _;
    let len = s.read_u32().await.unwrap() as usize;
    let mut buf = vec![0; len];
    s.read_exact(&mut buf).await.unwrap();
    <pb2::LookupOrdersResponse as prost::Message>::decode(&buf[..]).unwrap()
}

/// One limit for every surface: with the only slot held by a REST request
/// in service (waiting on a locked table), a gRPC call, a lookup on a bidi stream opened
/// before, and a raw-TCP lookup are all refused at once with
/// RESOURCE_EXHAUSTED (the lookups in their answers, the streams going on);
/// once the slot is free, the same stream and connection are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_on_streams_and_connections_share_the_one_limit() {
    use tokio::io::AsyncWriteExt as _;
    let app = spawn_with(Backend::Postgres, |s| s.max_concurrent_requests = 1).await;
    let user = "00000000-0000-0000-0000-000000000010";
    let lookup = |id| pb2::LookupOrdersRequest {
        request_id: id,
        user_id: user.into(),
        page_size: 1,
        ..Default::default()
    };
    // A bidi stream and a raw-TCP connection, each served once while the
    // slot is free.
    let mut g = app.grpc_v2().await;
    let (tx, mut answers) = crate::helpers::lookups(&mut g, [lookup(1)]).await;
    assert!(answers.message().await.unwrap().unwrap().error.is_none());
    let mut tcp = tokio::net::TcpStream::connect(app.tcp).await.unwrap();
    tcp.write_all(&order_service::tcp::encode_frame(&lookup(7)))
        .await
        .unwrap();
    assert!(read_frame(&mut tcp).await.error.is_none());

    // The slot taken: a list waiting on the locked orders table.
    let hold = crate::helpers::hold_a_slot(&app).await;

    let s = g
        .list_orders(pb2::ListOrdersRequest {
            user_id: user.into(),
            page_size: 1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
    let exhausted = Some(tonic::Code::ResourceExhausted as i32);
    tx.send(lookup(2)).await.unwrap();
    let refused = answers.message().await.unwrap().unwrap();
    assert_eq!(
        (refused.request_id, refused.error.map(|e| e.code)),
        (2, exhausted)
    );
    tcp.write_all(&order_service::tcp::encode_frame(&lookup(8)))
        .await
        .unwrap();
    let refused = read_frame(&mut tcp).await;
    assert_eq!(
        (refused.request_id, refused.error.map(|e| e.code)),
        (8, exhausted)
    );

    // The slot frees: the same stream and connection are served again.
    hold.abort();
    tokio::time::sleep(Duration::from_millis(200)).await;
    tx.send(lookup(3)).await.unwrap();
    let served = answers.message().await.unwrap().unwrap();
    assert!(served.error.is_none(), "{served:?}");
    assert_eq!(served.orders.len(), 1);
    tcp.write_all(&order_service::tcp::encode_frame(&lookup(9)))
        .await
        .unwrap();
    let served = read_frame(&mut tcp).await;
    assert!(served.error.is_none(), "{served:?}");
    app.stop().await;
}
