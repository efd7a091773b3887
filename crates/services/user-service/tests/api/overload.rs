//! Overload: past its concurrency limit user-service refuses at once (503 with
//! a problem body of type `overloaded`, RESOURCE_EXHAUSTED on gRPC) instead of queueing, its
//! memory stays bounded, and it serves normally the moment the load drops.

use std::time::Duration;

use proto::user::v1 as pbu;
use user_service::upstream::Transport;

use crate::helpers::{OrderService, spawn_users_with};

const LIMIT: usize = 2;
const CALLERS: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_limit_user_service_answers_503_or_resource_exhausted_at_once_and_recovers() {
    let orders = OrderService::start().await;
    let users = spawn_users_with(&orders, |s| s.max_concurrent_requests = LIMIT).await;
    // The user with 10,000 orders: each answer is about 5 MB of JSON.
    let id = dataset::fixed_user_id(10_000);
    let url = users.url(&format!("/v1/users/{id}/orders?via=grpc&limit=10000"));
    let warm = users.http.get(&url).send().await.unwrap();
    assert_eq!(warm.status(), 200);
    drop(warm.bytes().await);
    let before = testkit::flood::rss_kib() * 1024;

    let rest_calls = (0..CALLERS).map(|_| {
        // A client each: one connection each, so all of them are in at once.
        let client = reqwest::Client::builder().http1_only().build().unwrap();
        let url = url.clone();
        tokio::spawn(async move {
            let res = client.get(&url).send().await.unwrap();
            let status = res.status().as_u16();
            let body = res.bytes().await.unwrap();
            // Keep only what is checked: the callers' copies are not the service's memory.
            (status, body.len(), (status != 200).then_some(body))
        })
    });
    let (mut served, mut shed) = (0, 0);
    for call in futures::future::join_all(rest_calls).await {
        let (status, len, body) = call.unwrap();
        let body = body.unwrap_or_default();
        match status {
            200 => {
                assert!(len > 1 << 20, "a short answer: {len} bytes");
                served += 1;
            }
            503 => {
                shed += 1;
                let e: serde_json::Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(e["error"], "overloaded", "{e}");
            }
            other => panic!("status {other}: {}", String::from_utf8_lossy(&body)),
        }
    }
    let grew = (testkit::flood::rss_kib() * 1024).saturating_sub(before);
    eprintln!(
        "REST: {served} served, {shed} shed; RSS grew {} MB",
        grew >> 20
    );
    assert!(shed > 0, "nothing was shed: {served} served");
    assert!(served >= 1, "nothing was served");
    // Two answers in service take tens of MB (orders decoded, then JSON);
    // fifty at once would take over a GB.
    assert!(grew < 128 << 20, "RSS grew by {} MB", grew >> 20);

    let grpc_calls = (0..CALLERS).map(|_| {
        let addr = format!("http://{}", users.grpc);
        tokio::spawn(async move {
            let mut c = pbu::user_service_client::UserServiceClient::connect(addr)
                .await
                .unwrap()
                .max_decoding_message_size(64 << 20);
            c.get_user_with_orders(pbu::GetUserWithOrdersRequest {
                id: id.to_string(),
                via: "grpc".into(),
                limit: 10_000,
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner().orders.len())
        })
    });
    let (mut served, mut shed) = (0, 0);
    for call in futures::future::join_all(grpc_calls).await {
        match call.unwrap() {
            Ok(n) => {
                assert_eq!(n, 10_000);
                served += 1;
            }
            Err(s) if s.code() == tonic::Code::ResourceExhausted => shed += 1,
            Err(s) => panic!("unexpected {s:?}"),
        }
    }
    assert!(shed > 0, "nothing was shed over gRPC: {served} served");
    assert!(served >= 1, "nothing was served over gRPC");

    // Straight after, every transport serves normally again.
    for via in Transport::ALL {
        let res = tokio::time::timeout(Duration::from_secs(10), users.orders(id, via, "&limit=10"))
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{via} after the burst");
    }
    users.stop().await;
    orders.stop().await;
}
