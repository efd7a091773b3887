//! grpcio (Python) against order-service's gRPC port: the data set's
//! orders through every kind of call, errors with their codes and
//! `google.rpc.BadRequest`, deadlines, gzip, health and reflection.

use model::{FieldSet, OrderField};
use serde_json::{Value, json};

use super::kit::python_client;
use super::oracle::{assert_orders, error_of, ids, ok_of, orders_of};
use super::standard_services::{self as std_services, Client, HEALTH, Served};
use crate::helpers::{Backend, TestApp, spawn, spawn_with};

/// What order-service's gRPC port serves, as reflection should describe it.
pub const SERVED: [Served<'static>; 3] = [
    HEALTH,
    ("order.v1.OrderService", &[("ListOrders", false, false)]),
    (
        "order.v2.OrderService",
        &[
            ("GetOrder", false, false),
            ("ListOrders", false, false),
            ("StreamOrders", false, true),
            ("LookupOrders", true, true),
            ("BatchListOrders", false, false),
            ("BatchStreamOrders", false, true),
            ("CreateOrder", false, false),
        ],
    ),
];

/// The mask the clients send: three scalar fields and a message.
pub fn mask() -> FieldSet {
    FieldSet::of([
        OrderField::Status,
        OrderField::TotalMinor,
        OrderField::Note,
        OrderField::ShippingAddress,
    ])
}

async fn orders(app: &TestApp, scenario: &str) -> Value {
    python_client("orders.py", &[scenario, &app.grpc.to_string()]).await
}

async fn gets_the_data_sets_orders(backend: Backend) {
    let app = spawn(backend).await;
    let got = orders(&app, "data").await;

    for n in dataset::FIXED_COUNTS {
        let page = &got["unary"][n.to_string()];
        assert_orders(
            &page["orders"],
            &orders_of(n),
            FieldSet::ALL,
            &format!("ListOrders of user {n}"),
        );
        assert_eq!(
            page["next_page_token"], "",
            "one page holds all of user {n}'s orders"
        );
    }
    assert_eq!(got["default_page"], 100, "page_size 0 means 100");

    let thousand = orders_of(1000);
    let pages: Vec<Vec<String>> = serde_json::from_value(got["pages"].clone()).unwrap();
    assert_eq!(
        pages.iter().map(Vec::len).collect::<Vec<_>>(),
        [300, 300, 300, 100]
    );
    assert_eq!(
        pages.concat(),
        ids(&thousand),
        "the pages, in order, are the user's orders"
    );

    let hundred = orders_of(100);
    assert_orders(
        &got["masked"],
        &hundred[..20],
        mask(),
        "ListOrders with a read mask",
    );
    assert_orders(
        &json!([got["get"]]),
        &orders_of(10)[3..4],
        FieldSet::ALL,
        "GetOrder",
    );
    assert_orders(&got["stream"], &thousand, FieldSet::ALL, "StreamOrders");

    let bidi = got["bidi"].as_array().unwrap();
    assert_eq!(bidi.len(), 4, "one answer per lookup: {bidi:?}");
    assert_orders(
        &bidi[0]["orders"],
        &orders_of(10),
        FieldSet::ALL,
        "lookup 1",
    );
    assert_orders(
        &bidi[1]["orders"],
        &hundred[..50],
        mask(),
        "lookup 2, masked",
    );
    assert_eq!(
        bidi[1]["next_page_token"].as_str().map(str::is_empty),
        Some(false)
    );
    assert_eq!(
        bidi[2]["error"]["code"], 3,
        "a bad lookup fails alone: {}",
        bidi[2]
    );
    assert_eq!(
        bidi[2]["error"]["message"],
        "user_id: \"nope\" is not a UUID"
    );
    assert_eq!(bidi[3]["orders"], json!([]), "user 0 has no orders");
    for (i, a) in bidi.iter().enumerate() {
        assert_eq!(a["request_id"], i + 1);
        if i != 2 {
            assert_eq!(a["error"], Value::Null, "{a}");
        }
    }

    for (what, got) in [
        ("BatchListOrders", &got["batch"]),
        ("BatchStreamOrders", &got["batch_stream"]),
    ] {
        let got = got.as_array().unwrap();
        assert_eq!(got.len(), 2, "{what}: one answer per query");
        let (first, second) = if what == "BatchListOrders" {
            (&got[0], &got[1])
        } else {
            assert_eq!((&got[0]["index"], &got[1]["index"]), (&json!(0), &json!(1)));
            (&got[0]["orders"], &got[1]["orders"])
        };
        assert_orders(first, &orders_of(10), FieldSet::ALL, what);
        assert_orders(second, &hundred[..5], FieldSet::ALL, what);
    }

    let v1: Vec<Value> = orders_of(10)
        .iter()
        .map(|o| {
            let o = model::v1::order_to_v1(o);
            json!({
                "id": o.id, "user_id": o.user_id, "product_id": o.product_id,
                "product_name": o.product_name, "quantity": o.quantity,
                "unit_price": o.unit_price, "discount": o.discount, "total": o.total,
                "currency": o.currency, "status": o.status, "gift": o.gift,
                "ship_line1": o.ship_line1, "ship_line2": o.ship_line2,
                "ship_city": o.ship_city, "ship_postal_code": o.ship_postal_code,
                "ship_country_code": o.ship_country_code, "note": o.note,
                "coupon_code": o.coupon_code, "created_at": o.created_at,
                "updated_at": o.updated_at,
            })
        })
        .collect();
    assert_eq!(got["v1"], json!(v1), "order.v1's all-strings orders");
    app.stop().await;
}

#[tokio::test]
async fn grpcio_gets_the_data_sets_orders_through_every_kind_of_call_in_memory() {
    gets_the_data_sets_orders(Backend::Memory).await;
}

#[tokio::test]
async fn grpcio_gets_the_data_sets_orders_through_every_kind_of_call_on_postgres() {
    gets_the_data_sets_orders(Backend::Postgres).await;
}

/// A failed call's code, and the field its `google.rpc.BadRequest` names
/// (`None`: no such detail).
fn assert_failed(got: &Value, what: &str, code: &str, field: Option<&str>) {
    let e = error_of(&got[what], what);
    assert_eq!(e["code"], code, "{what}: {e}");
    match field {
        Some(field) => {
            let violations = e["bad_request"]
                .as_array()
                .unwrap_or_else(|| panic!("{what}: no BadRequest: {e}"));
            assert_eq!(violations.len(), 1, "{what}: {e}");
            assert_eq!(violations[0][0], field, "{what}: the field named: {e}");
            let message = e["message"].as_str().unwrap();
            let description = violations[0][1].as_str().unwrap();
            assert_eq!(
                message,
                format!("{field}: {description}"),
                "{what}: the message names the field"
            );
        }
        None => assert_eq!(e["bad_request"], Value::Null, "{what}: {e}"),
    }
}

#[tokio::test]
async fn grpcio_gets_each_error_with_its_code_and_the_field_it_names() {
    let app = spawn(Backend::Memory).await;
    let got = orders(&app, "errors").await;
    for (what, field) in [
        ("bad_user_id", "user_id"),
        ("page_size_too_large", "page_size"),
        ("negative_page_size", "page_size"),
        ("bad_page_token", "page_token"),
        ("bad_mask", "read_mask"),
        ("bad_order_id", "id"),
        ("stream_bad_user_id", "user_id"),
        ("bad_create", "user_id"),
    ] {
        assert_failed(&got, what, "INVALID_ARGUMENT", Some(field));
    }
    assert_eq!(
        error_of(&got["bad_user_id"], "bad_user_id")["bad_request"],
        json!([["user_id", "\"nope\" is not a UUID"]])
    );
    assert_failed(&got, "unknown_order", "NOT_FOUND", None);
    assert_failed(&got, "unknown_method", "UNIMPLEMENTED", None);
    assert_failed(&got, "unknown_service", "UNIMPLEMENTED", None);
    assert_failed(&got, "over_request_cap", "RESOURCE_EXHAUSTED", None);
    assert_eq!(
        ok_of(&got["after"], "after"),
        10,
        "the channel still answers"
    );
    app.stop().await;
}

#[tokio::test]
async fn grpcio_deadlines_end_calls_and_leave_the_channel_working() {
    let app = spawn(Backend::Memory).await;
    let got = orders(&app, "deadlines").await;
    assert_eq!(ok_of(&got["generous"], "generous"), 10_000);
    for what in ["unary_1ms", "stream_1ms"] {
        assert_eq!(
            error_of(&got[what], what)["code"],
            "DEADLINE_EXCEEDED",
            "{what}"
        );
    }
    assert_eq!(ok_of(&got["after"], "after"), 10);
    app.stop().await;
}

#[tokio::test]
async fn grpcio_gzip_requests_and_gzip_answers_carry_the_same_orders() {
    let app = spawn_with(Backend::Memory, |s| s.grpc_gzip = true).await;
    let got = orders(&app, "gzip").await;
    assert_orders(
        &got["unary"],
        &orders_of(1000),
        FieldSet::ALL,
        "gzip ListOrders",
    );
    assert_orders(
        &got["stream"],
        &orders_of(100),
        FieldSet::ALL,
        "gzip StreamOrders",
    );
    assert_orders(
        &got["uncompressed_call"],
        &orders_of(10),
        FieldSet::ALL,
        "one call without",
    );
    app.stop().await;
}

#[tokio::test]
async fn grpcio_health_check_and_watch_say_serving() {
    let app = spawn(Backend::Memory).await;
    std_services::assert_serving(
        Client::Grpcio,
        app.grpc,
        &["order.v2.OrderService", "order.v1.OrderService"],
    )
    .await;
    app.stop().await;
}

#[tokio::test]
async fn grpcio_reflection_v1_describes_every_service_served() {
    let app = spawn(Backend::Memory).await;
    let got = std_services::reflect(Client::Grpcio, app.grpc, "v1").await;
    std_services::assert_describes(&got, &SERVED);
    app.stop().await;
}
