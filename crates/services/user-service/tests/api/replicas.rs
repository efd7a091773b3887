//! Several order-service replicas: user-service balancing its own calls over
//! them (`USER_ORDER_REPLICAS`), and following the replica set as a
//! resolver's answer changes. Every share is read from the replicas' own
//! `/metrics`, not from user-service.
//!
//! The replicas serve on the same ports at 127.0.0.1, 127.0.0.2 and
//! 127.0.0.3, as pods behind a headless Service serve on the same ports at
//! their own addresses.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use user_service::upstream::balance::Resolve;

use crate::helpers::{OrderService, UserService, spawn_users_on, spawn_users_resolving};

/// The routes a fetch of a user's orders arrives on, over every transport.
const ORDER_ROUTES: &[&str] = &[
    "route=\"/v2/orders\"",
    "route=\"/order.v2.OrderService/ListOrders\"",
    "route=\"/order.v2.OrderService/StreamOrders\"",
    "route=\"LookupOrders\"",
];

/// The calls for orders a replica answered well, from its own /metrics.
pub(crate) async fn answered(replica: &OrderService) -> u64 {
    let text = replica.metrics_text().await;
    text.lines()
        .filter(|l| l.starts_with("order_requests_total{"))
        .filter(|l| ORDER_ROUTES.iter().any(|r| l.contains(r)))
        // An HTTP 200 with gRPC OK or no gRPC code, or a raw-TCP OK.
        .filter(|l| {
            l.contains("code=\"200\",grpc_code=\"\"")
                || l.contains("code=\"200\",grpc_code=\"OK\"")
                || l.contains("code=\"\",grpc_code=\"OK\"")
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Three replicas on 127.0.0.1-3, on the ports the first one got.
pub(crate) async fn three_replicas() -> Vec<OrderService> {
    three_replicas_with(|_| {}).await
}

/// The same, each with its settings changed by `tweak`.
pub(crate) async fn three_replicas_with(
    tweak: impl Fn(&mut order_service::Settings),
) -> Vec<OrderService> {
    let first = OrderService::replica_with(ip(1), [0, 0, 0, 0], &tweak).await;
    let ports = [
        first.rest.port(),
        first.grpc.port(),
        first.tcp.port(),
        first.h3.port(),
    ];
    let mut all = vec![first];
    for i in [2, 3] {
        all.push(OrderService::replica_with(ip(i), ports, &tweak).await);
    }
    all
}

pub(crate) fn ip(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

/// user-service in memory, pointed at the first replica's ports, with
/// `replicas` to balance over.
fn settings_for(replicas: &[OrderService], list: &[&str]) -> user_service::Settings {
    let mut s = user_service::Settings::default();
    let r = &replicas[0];
    r.dialled_by(&mut s);
    s.order_replicas = list.iter().map(|s| (*s).to_owned()).collect();
    s
}

/// `n` calls over `via`, one after another, each checked to be a 200.
pub(crate) async fn calls(users: &UserService, via: &str, n: usize) {
    let id = dataset::fixed_user_id(10);
    for _ in 0..n {
        let res = users
            .http
            .get(users.url(&format!("/v1/users/{id}/orders?via={via}")))
            .send()
            .await
            .unwrap();
        let status = res.status();
        assert_eq!(status, 200, "{via}: {}", res.text().await.unwrap());
    }
}

/// Each replica's answers since `before`.
pub(crate) async fn shares(replicas: &[OrderService], before: &[u64]) -> Vec<u64> {
    let mut now = Vec::new();
    for (r, b) in replicas.iter().zip(before) {
        now.push(answered(r).await - b);
    }
    now
}

pub(crate) async fn counts(replicas: &[OrderService]) -> Vec<u64> {
    shares(replicas, &vec![0; replicas.len()]).await
}

/// `n` calls over `via`, and each replica's share of them, checked to be
/// within ±20% of a fair share.
pub(crate) async fn spread_evenly(
    users: &UserService,
    replicas: &[OrderService],
    via: &str,
    n: usize,
) -> Vec<u64> {
    let fair = n as f64 / replicas.len() as f64;
    let before = counts(replicas).await;
    calls(users, via, n).await;
    let got = shares(replicas, &before).await;
    assert_eq!(got.iter().sum::<u64>(), n as u64, "{via}: {got:?}");
    for share in &got {
        assert!(
            (*share as f64 - fair).abs() <= 0.2 * fair,
            "{via}: shares {got:?}, each should be {fair} ± 20%"
        );
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_side_balancing_gives_each_replica_a_fair_share_on_every_transport() {
    let replicas = three_replicas().await;
    let users = spawn_users_on(
        settings_for(&replicas, &["127.0.0.1", "127.0.0.2", "127.0.0.3"]),
        None,
    )
    .await;
    let mut seen = BTreeMap::new();
    for via in ["grpc", "grpc-bidi", "h1-json", "h2c-json", "tcp-proto"] {
        seen.insert(via, spread_evenly(&users, &replicas, via, 90).await);
    }
    eprintln!("calls per replica: {seen:?}");
    users.stop().await;
    for r in replicas {
        r.stop().await;
    }
}

/// A resolver whose answer the test sets.
struct Answer(Mutex<Vec<IpAddr>>);

impl Resolve for Answer {
    fn resolve<'a>(&'a self, _name: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        let ips = self.0.lock().unwrap().clone();
        Box::pin(async move { Ok(ips) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_resolved_replicas_change_calls_follow() {
    let replicas = three_replicas().await;
    let answer = Arc::new(Answer(Mutex::new(vec![ip(1), ip(2)])));
    let mut settings = settings_for(&replicas, &["orders.replicas.test"]);
    settings.order_resolve_interval_ms = 50;
    let users = spawn_users_resolving(settings, None, answer.clone()).await;

    let before = counts(&replicas).await;
    calls(&users, "grpc", 20).await;
    let got = shares(&replicas, &before).await;
    assert!(got[0] > 0 && got[1] > 0 && got[2] == 0, "{got:?}");

    // The name now stands for replicas 2 and 3: wait for the first call to
    // reach 3, then every call goes to 2 or 3.
    *answer.0.lock().unwrap() = vec![ip(2), ip(3)];
    let deadline = Instant::now() + Duration::from_secs(10);
    let third_before = answered(&replicas[2]).await;
    while answered(&replicas[2]).await == third_before {
        assert!(Instant::now() < deadline, "no call reached the new replica");
        calls(&users, "grpc", 1).await;
    }
    let before = counts(&replicas).await;
    calls(&users, "grpc", 20).await;
    let got = shares(&replicas, &before).await;
    assert!(got[0] == 0 && got[1] > 0 && got[2] > 0, "{got:?}");

    // A failed resolution keeps the last set.
    *answer.0.lock().unwrap() = vec![];
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = counts(&replicas).await;
    calls(&users, "grpc", 10).await;
    let got = shares(&replicas, &before).await;
    assert!(got[0] == 0 && got[1] > 0 && got[2] > 0, "{got:?}");

    users.stop().await;
    for r in replicas {
        r.stop().await;
    }
}
