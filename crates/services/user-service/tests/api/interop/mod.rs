//! The interop suite on user-service: grpcio and grpc-js (scripts under
//! `interop/`, versions pinned) against the real user-service on port 0,
//! whose orders come from the real order-service, both in memory or each on
//! a Postgres database of its own. The answers are compared with the data
//! set field by field. The kit, the oracle and the health and reflection
//! checks are order-service's (its tests/api/interop), included by path.
//!
//! user-service serves no Connect routes (it is a Connect client of
//! order-service): connect-node's checks are order-service's.

#[path = "../../../../order-service/tests/api/interop/kit.rs"]
pub mod kit;
#[path = "../../../../order-service/tests/api/interop/oracle.rs"]
pub mod oracle;
#[path = "../../../../order-service/tests/api/interop/standard_services.rs"]
pub mod standard_services;

mod protocol_edges;

use model::{FieldSet, OrderField};
use serde_json::{Value, json};

use crate::helpers::{OrderService, UserService, spawn_users, spawn_users_on};
use kit::{node_client, python_client};
use oracle::{assert_orders, error_of, fixed_user, ids, ok_of, orders_of};
use standard_services::{Client, HEALTH, Served};

/// What user-service's gRPC port serves, as reflection should describe it.
pub const SERVED: [Served<'static>; 2] = [
    HEALTH,
    (
        "user.v1.UserService",
        &[
            ("GetUser", false, false),
            ("GetUserWithOrders", false, false),
            ("RegisterUser", false, false),
        ],
    ),
];

/// The transports the data scenario fetches orders over (users.py).
const VIAS: [&str; 7] = [
    "grpc",
    "grpc-stream",
    "grpc-bidi",
    "h1-json",
    "h2c-proto",
    "connect-h1-proto",
    "tcp-proto",
];

/// The id of the data set's fixed user with `count` orders.
fn user(count: u32) -> String {
    dataset::fixed_user_id(count).to_string()
}

/// order-service and user-service, both in memory.
pub async fn in_memory() -> (OrderService, UserService) {
    let orders = OrderService::replica_with([127, 0, 0, 1].into(), [0; 4], |_| {}).await;
    let mut settings = user_service::Settings::default();
    orders.dialled_by(&mut settings);
    let users = spawn_users_on(settings, None).await;
    (orders, users)
}

async fn users_py(users: &UserService, scenario: &str, id: &str) -> Value {
    python_client("users.py", &[scenario, &users.grpc.to_string(), id]).await
}

/// A data set user as a client prints it.
fn user_json(count: u32) -> Value {
    let u = fixed_user(count);
    let created = json!([
        u.created_at.timestamp(),
        u.created_at.timestamp_subsec_nanos()
    ]);
    json!({
        "id": u.id.to_string(),
        "username": u.username,
        "first_name": u.first_name,
        "last_name": u.last_name,
        "email": u.email,
        "phone": u.phone,
        "gender": format!("GENDER_{}", u.gender),
        "birth_date": u.birth_date.format("%Y-%m-%d").to_string(),
        "created_at": created,
        // The data set's users were never changed.
        "updated_at": created,
    })
}

async fn grpcio_gets_users_and_their_orders(orders: OrderService, users: UserService) {
    let got = users_py(&users, "data", &user(100)).await;
    assert_eq!(got["user"], user_json(100), "GetUser");
    let want = orders_of(100);
    for via in VIAS {
        let got = &got["via"][via];
        assert_eq!(got["via"], via, "the transport named is the one used");
        assert_eq!(got["user"], user_json(100), "GetUserWithOrders via {via}");
        assert_orders(
            &got["orders"],
            &want,
            FieldSet::ALL,
            &format!("orders via {via}"),
        );
    }
    assert_eq!(got["default_via"]["via"], "grpc", "the default transport");
    assert_orders(
        &got["default_via"]["orders"],
        &want,
        FieldSet::ALL,
        "orders, default via",
    );
    let mask = FieldSet::of([
        OrderField::TotalMinor,
        OrderField::Status,
        OrderField::CouponCode,
    ]);
    assert_orders(
        &got["masked"]["orders"],
        &want[..7],
        mask,
        "orders with a read mask",
    );
    let ten_thousand = orders_of(10_000);
    assert_eq!(
        got["ten_thousand"]["ids"],
        json!(ids(&ten_thousand)),
        "10,000 orders"
    );
    let total: i64 = ten_thousand.iter().map(|o| o.total_minor).sum();
    assert_eq!(got["ten_thousand"]["total_minor"], total);
    users.stop().await;
    orders.stop().await;
}

#[tokio::test]
async fn grpcio_gets_the_user_and_its_data_set_orders_over_every_transport_in_memory() {
    let (orders, users) = in_memory().await;
    grpcio_gets_users_and_their_orders(orders, users).await;
}

#[tokio::test]
async fn grpcio_gets_the_user_and_its_data_set_orders_over_every_transport_on_postgres() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    grpcio_gets_users_and_their_orders(orders, users).await;
}

#[tokio::test]
async fn grpcio_gets_each_user_service_error_with_its_code_and_the_field_it_names() {
    let (orders, users) = in_memory().await;
    let got = users_py(&users, "errors", &user(100)).await;
    for (what, field) in [
        ("bad_id", "id"),
        ("unknown_via", "via"),
        ("limit_too_large", "limit"),
        ("bad_mask", "read_mask"),
        ("bad_registration", "gender"),
    ] {
        let e = error_of(&got[what], what);
        assert_eq!(e["code"], "INVALID_ARGUMENT", "{what}: {e}");
        assert_eq!(
            e["bad_request"][0][0], field,
            "{what}: the field its BadRequest names: {e}"
        );
    }
    for (what, code) in [
        ("unknown_user", "NOT_FOUND"),
        ("over_request_cap", "RESOURCE_EXHAUSTED"),
    ] {
        let e = error_of(&got[what], what);
        assert_eq!(e["code"], code, "{what}: {e}");
        assert_eq!(e["bad_request"], Value::Null, "{what}: {e}");
    }
    assert_eq!(
        ok_of(&got["after"], "after"),
        &json!(user(10_000)),
        "the channel still answers"
    );
    users.stop().await;
    orders.stop().await;
}

#[tokio::test]
async fn grpcio_deadline_on_user_service_ends_the_call_and_leaves_the_channel_working() {
    let (orders, users) = in_memory().await;
    let got = users_py(&users, "deadlines", &user(100)).await;
    assert_eq!(ok_of(&got["generous"], "generous"), 10_000);
    assert_eq!(
        error_of(&got["unary_1ms"], "unary_1ms")["code"],
        "DEADLINE_EXCEEDED"
    );
    assert_eq!(ok_of(&got["after"], "after"), &json!(user(10_000)));
    users.stop().await;
    orders.stop().await;
}

#[tokio::test]
async fn grpcio_gzip_request_to_user_service_is_answered_or_refused_as_the_grpc_spec_says() {
    let (orders, users) = in_memory().await;
    let got = users_py(&users, "gzip", &user(100)).await;
    let got = &got["with_orders"];
    // A server that takes no gzip says UNIMPLEMENTED (gRPC's compression
    // spec); one that does answers with the same orders.
    match got.get("ok") {
        Some(answer) => assert_orders(&answer["orders"], &orders_of(100), FieldSet::ALL, "gzip"),
        None => assert_eq!(got["error"]["code"], "UNIMPLEMENTED", "{got}"),
    }
    users.stop().await;
    orders.stop().await;
}

#[tokio::test]
async fn grpc_js_gets_the_user_and_its_orders_an_error_and_a_deadline() {
    let (orders, users) = in_memory().await;
    let id = user(100);
    let got = node_client("grpc_js.mjs", &["users", &users.grpc.to_string(), &id]).await;
    let unary = ok_of(&got["unary"], "unary");
    assert_eq!(
        (&unary["user_id"], &unary["via"]),
        (&json!(id), &json!("grpc"))
    );
    assert_eq!(unary["username"], fixed_user(100).username);
    assert_orders(
        &unary["orders"],
        &orders_of(100),
        FieldSet::ALL,
        "grpc-js GetUserWithOrders",
    );
    let e = error_of(&got["unknown_via"], "unknown_via");
    assert_eq!(e["code"], "INVALID_ARGUMENT");
    assert_eq!(
        e["has_status_details"], true,
        "the BadRequest rides in grpc-status-details-bin"
    );
    assert_eq!(
        error_of(&got["unknown_user"], "unknown_user")["code"],
        "NOT_FOUND"
    );
    assert_eq!(
        error_of(&got["unary_1ms"], "unary_1ms")["code"],
        "DEADLINE_EXCEEDED"
    );
    assert_eq!(
        ok_of(&got["after"], "after"),
        &json!(id),
        "the channel still answers"
    );
    users.stop().await;
    orders.stop().await;
}

#[tokio::test]
async fn grpcio_health_check_and_watch_say_user_service_is_serving() {
    let users = spawn_users_on(user_service::Settings::default(), None).await;
    standard_services::assert_serving(Client::Grpcio, users.grpc, &["user.v1.UserService"]).await;
    users.stop().await;
}

#[tokio::test]
async fn grpc_js_health_check_and_watch_say_user_service_is_serving() {
    let users = spawn_users_on(user_service::Settings::default(), None).await;
    standard_services::assert_serving(Client::GrpcJs, users.grpc, &["user.v1.UserService"]).await;
    users.stop().await;
}

#[tokio::test]
async fn grpc_js_reflection_v1_describes_user_service() {
    let users = spawn_users_on(user_service::Settings::default(), None).await;
    let got = standard_services::reflect(Client::GrpcJs, users.grpc, "v1").await;
    standard_services::assert_describes(&got, &SERVED);
    users.stop().await;
}

#[tokio::test]
async fn grpcio_reflection_v1_describes_user_service() {
    let users = spawn_users_on(user_service::Settings::default(), None).await;
    let got = standard_services::reflect(Client::Grpcio, users.grpc, "v1").await;
    standard_services::assert_describes(&got, &SERVED);
    users.stop().await;
}
