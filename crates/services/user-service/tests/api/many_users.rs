//! `GET /v1/orders?users=…`: several users' orders in one front-end request,
//! fetched as one call per user over any transport, or as one call for all
//! (`batch=true`: `BatchListOrders` over grpc, `BatchStreamOrders` over
//! grpc-stream). The answers are held to the data set; the calls made are
//! counted on order-service's side, by its own /metrics.

use std::collections::BTreeMap;

use model::json::OrderJson;
use model::{FieldSet, Order};
use prost::Message as _;
use user_service::domain::OrdersOfUsersJson;
use user_service::upstream::Transport;
use uuid::Uuid;

use crate::helpers::{OrderService, UserService, spawn_users};

/// Requests order-service counted, per (protocol, route), /metrics aside.
async fn order_requests(orders: &OrderService) -> BTreeMap<(String, String), u64> {
    let text = reqwest::get(format!("http://{}/metrics", orders.rest))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("order_requests_total{") else {
            continue;
        };
        let (labels, value) = rest.split_once("} ").unwrap();
        let label = |name: &str| -> String {
            let start = labels.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
            let len = labels[start..].find('"').unwrap();
            labels[start..start + len].to_owned()
        };
        let route = label("route");
        if route.contains("metrics") {
            continue;
        }
        *counts.entry((label("protocol"), route)).or_default() += value.parse::<u64>().unwrap();
    }
    counts
}

/// What changed between two readings of [`order_requests`].
fn delta(
    before: &BTreeMap<(String, String), u64>,
    after: &BTreeMap<(String, String), u64>,
) -> BTreeMap<(String, String), u64> {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0);
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

fn users_csv(ids: &[Uuid]) -> String {
    ids.iter()
        .map(Uuid::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The first `limit` orders of `id` in the data set (none for a stranger).
fn first_orders(id: Uuid, limit: usize, fields: FieldSet) -> Vec<Order> {
    dataset::users()
        .into_iter()
        .find(|u| u.id == id)
        .map(|u| {
            dataset::orders_of(&u)
                .into_iter()
                .take(limit)
                .map(|o| o.project(fields))
                .collect()
        })
        .unwrap_or_default()
}

async fn get(users: &UserService, query: &str) -> reqwest::Response {
    users
        .http
        .get(users.url(&format!("/v1/orders?{query}")))
        .send()
        .await
        .unwrap()
}

/// Every way to fetch: one call per user over each transport, and one call
/// for all over the two that have it. Their answers are byte-identical and
/// hold the data set's orders; order-service counted one request per user,
/// or one request in all, on the call the mode names.
#[tokio::test]
async fn every_way_to_fetch_many_users_gives_the_data_sets_orders_in_one_answer() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    // Twenty other users, two fixed ones, one with no orders, and a stranger.
    let mut ids: Vec<Uuid> = (1..=20).map(dataset::other_user_id).collect();
    ids.extend([
        dataset::fixed_user_id(10),
        dataset::fixed_user_id(1000),
        dataset::fixed_user_id(0),
        Uuid::from_u128(0xdead_beef),
    ]);
    let n = ids.len() as u64;
    let limit = 2;
    let six = FieldSet::of(FieldSet::SUMMARY);
    let want: Vec<Vec<Order>> = ids.iter().map(|&id| first_orders(id, limit, six)).collect();

    let mut ways: Vec<(Transport, bool)> = Transport::ALL.iter().map(|&t| (t, false)).collect();
    ways.extend([(Transport::Grpc, true), (Transport::GrpcStream, true)]);
    let mut bodies = Vec::new();
    for (via, batch) in ways {
        let way = format!("{via} batch={batch}");
        let calls_before = users.snapshot(via).calls;
        let before = order_requests(&orders).await;
        let res = get(
            &users,
            &format!(
                "users={}&limit={limit}&fields={}&via={via}&batch={batch}",
                users_csv(&ids),
                six.to_csv()
            ),
        )
        .await;
        let status = res.status();
        let h = res.headers().clone();
        let body = res.bytes().await.unwrap();
        assert_eq!(status, 200, "{way}: {}", String::from_utf8_lossy(&body));
        assert_eq!(h["x-via"], via.name(), "{way}");
        let calls: u64 = h["x-upstream-calls"].to_str().unwrap().parse().unwrap();
        assert_eq!(calls, if batch { 1 } else { n }, "{way}: x-upstream-calls");
        assert_eq!(users.snapshot(via).calls - calls_before, calls, "{way}");

        let got: OrdersOfUsersJson = serde_json::from_slice(&body).unwrap();
        assert_eq!(got.lookups.len(), ids.len(), "{way}");
        for ((l, id), want) in got.lookups.iter().zip(&ids).zip(&want) {
            assert_eq!(l.user_id, *id, "{way}: in the order named");
            let orders: Vec<Order> = l
                .orders
                .iter()
                .cloned()
                .map(|o: OrderJson| Order::try_from(o).unwrap())
                .collect();
            assert_eq!(&orders, want, "{way}: user {id}");
        }

        let seen = delta(&before, &order_requests(&orders).await);
        let total: u64 = seen.values().sum();
        if batch {
            let call = via.batch_call().unwrap();
            assert_eq!(
                seen.into_iter().collect::<Vec<_>>(),
                vec![(
                    ("grpc".to_owned(), format!("/order.v2.OrderService/{call}")),
                    1
                )],
                "{way}: one call for all"
            );
        } else {
            // The bidi transport's streams (one per connection, opened on
            // first use) are requests of their own, beside their lookups.
            let opened: u64 = seen
                .iter()
                .filter(|((p, r), _)| p == "grpc" && r.ends_with("/LookupOrders"))
                .map(|(_, v)| v)
                .sum();
            assert_eq!(
                total - opened,
                n,
                "{way}: one request per user, saw {seen:?}"
            );
            assert!(
                !seen.keys().any(|(_, r)| r.contains("Batch")),
                "{way}: {seen:?}"
            );
        }
        bodies.push((way, body));
    }
    let (first_way, first) = &bodies[0];
    for (way, body) in &bodies[1..] {
        assert!(
            body == first,
            "the body of {way} differs from {first_way}'s"
        );
    }

    // Protobuf, on request: the same users and orders.
    let res = users
        .http
        .get(users.url(&format!(
            "/v1/orders?users={}&limit={limit}&fields={}&via=grpc&batch=true",
            users_csv(&ids),
            six.to_csv()
        )))
        .header("accept", "application/x-protobuf")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let pb = proto::user::v1::OrdersOfUsers::decode(res.bytes().await.unwrap()).unwrap();
    assert_eq!(pb.lookups.len(), ids.len());
    for ((l, id), want) in pb.lookups.into_iter().zip(&ids).zip(&want) {
        assert_eq!(l.user_id, id.to_string());
        let orders: Vec<Order> = l
            .orders
            .into_iter()
            .map(|o| Order::try_from(o).unwrap())
            .collect();
        assert_eq!(&orders, want, "protobuf: user {id}");
    }
    users.stop().await;
    orders.stop().await;
}

/// Bad input is a short 400 naming the parameter, and order-service is not
/// called.
#[tokio::test]
async fn bad_many_user_requests_get_a_short_400_and_reach_no_one() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    let two = users_csv(&[dataset::other_user_id(1), dataset::other_user_id(2)]);
    let too_many = users_csv(
        &(1..=1001)
            .map(|i| Uuid::from_u128(i as u128))
            .collect::<Vec<_>>(),
    );
    let junk = "x".repeat(50_000);
    let cases = [
        ("via=grpc".to_owned(), "users", "required"),
        ("users=&via=grpc".to_owned(), "users", "required"),
        (format!("users={too_many}"), "users", "at most 1000"),
        (
            format!("users={two},not-a-uuid&via=grpc"),
            "users",
            "item 3",
        ),
        (format!("users={junk}"), "users", "item 1"),
        (format!("users={two}&limit=5001"), "limit", "at most 10000"),
        (format!("users={two}&limit=0"), "limit", "at least 1"),
        (format!("users={two}&limit={junk}"), "limit", "not a number"),
        (
            format!("users={two}&via=h1-json&batch=true"),
            "batch",
            "grpc (BatchListOrders)",
        ),
        (
            format!("users={two}&via=grpc-bidi&batch=true"),
            "batch",
            "grpc-stream (BatchStreamOrders)",
        ),
        (
            format!("users={two}&via=grpc&batch=maybe"),
            "batch",
            "neither true nor false",
        ),
        (format!("users={two}&via=pigeon"), "via", "valid transports"),
        (format!("users={two}&fields=colour"), "fields", "colour"),
    ];
    let before = order_requests(&orders).await;
    for (query, field, says) in cases {
        let res = get(&users, &query).await;
        let status = res.status();
        let body = res.text().await.unwrap();
        let shown = &query[..query.len().min(80)];
        assert_eq!(status, 400, "{shown}: {body}");
        assert!(body.len() < 600, "{shown}: a {}-byte error", body.len());
        let e: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(e["error"], "invalid_argument", "{shown}: {body}");
        assert_eq!(e["field"], field, "{shown}: {body}");
        assert!(body.contains(says), "{shown}: {body} lacks {says:?}");
    }
    assert!(
        delta(&before, &order_requests(&orders).await).is_empty(),
        "order-service was called"
    );
    users.stop().await;
    orders.stop().await;
}

/// With order-service gone, both ways of fetching answer 503 at once, like
/// the one-user route.
#[tokio::test]
async fn many_users_with_order_service_down_is_a_503() {
    let mut orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    orders.kill().await;
    let two = users_csv(&[dataset::other_user_id(1), dataset::other_user_id(2)]);
    for (via, batch) in [
        (Transport::Grpc, false),
        (Transport::Grpc, true),
        (Transport::GrpcStream, true),
        (Transport::H1Json, false),
    ] {
        let res = get(&users, &format!("users={two}&via={via}&batch={batch}")).await;
        let status = res.status();
        let body = res.text().await.unwrap();
        assert_eq!(status, 503, "{via} batch={batch}: {body}");
        assert!(body.contains("upstream_unavailable"), "{via}: {body}");
    }
    users.stop().await;
    orders.stop().await;
}

/// A huge bad value comes back as a short prefix and its length, over REST
/// and gRPC alike.
#[tokio::test]
async fn a_huge_bad_value_is_quoted_short_with_its_length() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    let junk = "q".repeat(50_000);
    for (path, len) in [
        (format!("/v1/users/{junk}/orders"), 50_000),
        (
            format!(
                "/v1/users/{}/orders?via={}",
                dataset::fixed_user_id(1),
                &junk[..10_000]
            ),
            10_000,
        ),
        (format!("/v1/orders?users={}", &junk[..20_000]), 20_000),
    ] {
        let res = users.http.get(users.url(&path)).send().await.unwrap();
        assert_eq!(res.status(), 400);
        let body = res.text().await.unwrap();
        assert!(body.len() < 600, "a {}-byte error", body.len());
        assert!(body.contains(&format!("({len} bytes)")), "{body}");
    }
    let mut g = users.grpc_client().await;
    let s = g
        .get_user_with_orders(proto::user::v1::GetUserWithOrdersRequest {
            id: junk.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
    assert!(
        s.message().len() < 400,
        "a {}-byte message",
        s.message().len()
    );
    assert!(s.message().contains("(50000 bytes)"), "{}", s.message());
    users.stop().await;
    orders.stop().await;
}
