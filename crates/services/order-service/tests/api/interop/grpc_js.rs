//! @grpc/grpc-js (Node, proto/ loaded at run time by @grpc/proto-loader)
//! against order-service's gRPC port: unary, server and bidi streams, an
//! error, a deadline, gzip-compressed requests, health and reflection.

use model::FieldSet;
use serde_json::Value;

use super::grpcio::SERVED;
use super::kit::node_client;
use super::oracle::{assert_orders, error_of, ok_of, orders_of};
use super::standard_services::{self as std_services, Client};
use crate::helpers::{Backend, spawn, spawn_with};

async fn gets_the_data_sets_orders_errors_and_deadlines(backend: Backend) {
    let app = spawn(backend).await;
    let got = node_client("grpc_js.mjs", &["orders", &app.grpc.to_string()]).await;

    assert_orders(
        ok_of(&got["unary"], "unary"),
        &orders_of(100),
        FieldSet::ALL,
        "grpc-js ListOrders",
    );
    assert_orders(
        ok_of(&got["stream"], "stream"),
        &orders_of(1000),
        FieldSet::ALL,
        "grpc-js StreamOrders",
    );
    let bidi = ok_of(&got["bidi"], "bidi").as_array().unwrap();
    assert_eq!(bidi.len(), 2, "{bidi:?}");
    assert_eq!(
        (&bidi[0]["request_id"], &bidi[1]["request_id"]),
        (&7.into(), &8.into())
    );
    assert_orders(
        &bidi[0]["orders"],
        &orders_of(10),
        FieldSet::ALL,
        "grpc-js lookup 7",
    );
    assert_eq!(bidi[0]["error"], Value::Null);
    assert_eq!(bidi[1]["error"]["code"], 3, "a bad lookup fails alone");

    let bad = error_of(&got["bad_user_id"], "bad_user_id");
    assert_eq!(bad["code"], "INVALID_ARGUMENT");
    assert_eq!(bad["message"], "user_id: \"nope\" is not a UUID");
    assert_eq!(
        bad["has_status_details"], true,
        "the BadRequest rides in grpc-status-details-bin"
    );
    assert_eq!(
        error_of(&got["unknown_order"], "unknown_order")["code"],
        "NOT_FOUND"
    );

    for what in ["unary_1ms", "stream_1ms"] {
        assert_eq!(
            error_of(&got[what], what)["code"],
            "DEADLINE_EXCEEDED",
            "{what}"
        );
    }
    assert_eq!(
        ok_of(&got["after"], "after"),
        10,
        "the channel still answers"
    );
    app.stop().await;
}

#[tokio::test]
async fn grpc_js_gets_the_data_sets_orders_errors_and_deadlines_in_memory() {
    gets_the_data_sets_orders_errors_and_deadlines(Backend::Memory).await;
}

#[tokio::test]
async fn grpc_js_gets_the_data_sets_orders_errors_and_deadlines_on_postgres() {
    gets_the_data_sets_orders_errors_and_deadlines(Backend::Postgres).await;
}

#[tokio::test]
async fn grpc_js_gzip_requests_carry_the_same_orders() {
    let app = spawn_with(Backend::Memory, |s| s.grpc_gzip = true).await;
    let got = node_client("grpc_js.mjs", &["gzip", &app.grpc.to_string()]).await;
    assert_orders(
        ok_of(&got["unary"], "unary"),
        &orders_of(1000),
        FieldSet::ALL,
        "grpc-js gzip ListOrders",
    );
    assert_orders(
        ok_of(&got["stream"], "stream"),
        &orders_of(100),
        FieldSet::ALL,
        "grpc-js gzip StreamOrders",
    );
    assert_orders(
        ok_of(&got["uncompressed_call"], "uncompressed_call"),
        &orders_of(10),
        FieldSet::ALL,
        "grpc-js, a channel without compression",
    );
    app.stop().await;
}

#[tokio::test]
async fn grpc_js_health_check_and_watch_say_serving() {
    let app = spawn(Backend::Memory).await;
    std_services::assert_serving(
        Client::GrpcJs,
        app.grpc,
        &["order.v2.OrderService", "order.v1.OrderService"],
    )
    .await;
    app.stop().await;
}

#[tokio::test]
async fn grpc_js_reflection_v1_describes_every_service_served() {
    let app = spawn(Backend::Memory).await;
    let got = std_services::reflect(Client::GrpcJs, app.grpc, "v1").await;
    std_services::assert_describes(&got, &SERVED);
    app.stop().await;
}
