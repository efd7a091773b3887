//! `order.v2.OrderService` over the Connect protocol, on the REST port.
//!
//! The client here is not connect-rust's: plain HTTP requests built from the
//! Connect specification (a POST of the encoded request, `Content-Type:
//! application/proto` or `application/json`, `Connect-Protocol-Version: 1`),
//! encoded with prost. The oracles are the data set, the REST route's own
//! protobuf body for the same query, and order-service's request counters.

use base64::Engine as _;
use model::{FieldSet, Order, OrderField};
use prost::Message as _;
use proto::order::v2 as pb2;
use tonic_types::StatusExt as _;

use crate::helpers::{Backend, TestApp, expected_orders, list_request, spawn, spawn_with};

const USER_100: &str = "00000000-0000-0000-0000-000000000100";
const LIST: &str = "/order.v2.OrderService/ListOrders";

async fn connect_post(
    client: &reqwest::Client,
    app: &TestApp,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> reqwest::Response {
    client
        .post(app.url(path))
        .header("content-type", content_type)
        .header("connect-protocol-version", "1")
        .body(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn list_orders_over_connect_gives_the_rest_routes_bytes_on_http1_and_h2c() {
    let app = spawn(Backend::Postgres).await;
    let fields = FieldSet::of([OrderField::ProductName, OrderField::Note]);
    for (client, version) in [
        (app.h1(), reqwest::Version::HTTP_11),
        (app.h2c(), reqwest::Version::HTTP_2),
    ] {
        for (n, fields, csv) in [
            (100, FieldSet::ALL, None),
            (7, fields, Some("product_name,note")),
        ] {
            let res = connect_post(
                &client,
                &app,
                LIST,
                "application/proto",
                list_request(USER_100, n, fields).encode_to_vec(),
            )
            .await;
            assert_eq!(res.status(), 200);
            assert_eq!(res.version(), version);
            assert_eq!(res.headers()["content-type"], "application/proto");
            assert!(
                res.headers().get("content-encoding").is_none(),
                "nothing is compressed"
            );
            let body = res.bytes().await.unwrap();

            let mut url = app.url(&format!("/v2/orders?user_id={USER_100}&limit={n}"));
            if let Some(csv) = csv {
                url.push_str(&format!("&fields={csv}"));
            }
            let rest = client
                .get(url)
                .header("accept", "application/x-protobuf")
                .send()
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            assert_eq!(body, rest, "Connect and REST send the same protobuf");

            let got: Vec<Order> = pb2::ListOrdersResponse::decode(body)
                .unwrap()
                .orders
                .into_iter()
                .map(|o| Order::try_from(o).unwrap())
                .collect();
            let want: Vec<Order> = expected_orders(100)
                .into_iter()
                .take(n as usize)
                .map(|o| o.project(fields))
                .collect();
            assert_eq!(got, want);
        }
    }
    let metrics = app.metrics_text().await;
    let line = format!(
        "order_requests_total{{protocol=\"connect\",route=\"{LIST}\",code=\"200\",grpc_code=\"\"}} 4"
    );
    assert!(metrics.contains(&line), "no {line} in\n{metrics}");
    app.stop().await;
}

#[tokio::test]
async fn connect_json_is_proto3_json_with_int64_as_strings() {
    let app = spawn(Backend::Memory).await;
    let res = connect_post(
        &app.h1(),
        &app,
        LIST,
        "application/json",
        format!(r#"{{"userId":"{USER_100}","pageSize":2}}"#).into_bytes(),
    )
    .await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/json");
    let page: serde_json::Value = res.json().await.unwrap();
    let orders = page["orders"].as_array().unwrap();
    let want = expected_orders(100);
    assert_eq!(orders.len(), 2);
    for (o, w) in orders.iter().zip(&want) {
        assert_eq!(o["id"], w.id.to_string());
        // proto3's JSON mapping writes 64-bit integers as strings and names
        // fields in lowerCamelCase: not the REST API's JSON.
        assert_eq!(o["totalMinor"], w.total_minor.to_string());
        assert_eq!(o["productName"], w.product_name);
    }
    app.stop().await;
}

#[tokio::test]
async fn bad_input_over_connect_gets_a_connect_error_naming_the_field() {
    let app = spawn_with(Backend::Memory, |s| s.max_request_bytes = 1024).await;
    let client = app.h1();
    let res = connect_post(
        &client,
        &app,
        LIST,
        "application/proto",
        list_request("not-a-uuid", 10, FieldSet::ALL).encode_to_vec(),
    )
    .await;
    assert_eq!(res.status(), 400);
    let e: serde_json::Value = res.json().await.unwrap();
    assert_eq!(e["code"], "invalid_argument");
    assert!(e["message"].as_str().unwrap().contains("user_id"), "{e}");
    // The field is named in a google.rpc.BadRequest detail too, as over gRPC.
    let details = e["details"].as_array().unwrap();
    assert_eq!(details.len(), 1, "{e}");
    assert_eq!(details[0]["type"], "google.rpc.BadRequest", "{e}");
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(details[0]["value"].as_str().unwrap())
        .unwrap();
    let bad = tonic_types::pb::BadRequest::decode(&bytes[..]).unwrap();
    assert_eq!(bad.field_violations.len(), 1, "{bad:?}");
    assert_eq!(bad.field_violations[0].field, "user_id");
    assert_eq!(
        bad.field_violations[0].description,
        "\"not-a-uuid\" is not a UUID"
    );

    // Not protobuf at all.
    let res = connect_post(&client, &app, LIST, "application/proto", vec![0xff; 16]).await;
    assert_eq!(res.status(), 400);
    let e: serde_json::Value = res.json().await.unwrap();
    assert_eq!(e["code"], "invalid_argument", "{e}");

    // Over the request cap: refused, and the service goes on answering.
    let mut big = list_request(USER_100, 1, FieldSet::ALL);
    big.page_token = "x".repeat(4096);
    let res = connect_post(
        &client,
        &app,
        LIST,
        "application/proto",
        big.encode_to_vec(),
    )
    .await;
    assert!(res.status().is_client_error(), "{}", res.status());

    // A call this surface does not serve says where it is served.
    let res = connect_post(
        &client,
        &app,
        "/order.v2.OrderService/CreateOrder",
        "application/proto",
        Vec::new(),
    )
    .await;
    let e: serde_json::Value = res.json().await.unwrap();
    assert_eq!(e["code"], "unimplemented");
    assert!(e["message"].as_str().unwrap().contains("gRPC"), "{e}");

    let res = connect_post(
        &client,
        &app,
        LIST,
        "application/proto",
        list_request(USER_100, 3, FieldSet::ALL).encode_to_vec(),
    )
    .await;
    assert_eq!(res.status(), 200);
    app.stop().await;
}

/// connect-rust answers gRPC on the same paths: tonic's client, pointed at
/// the REST port, gets the same orders as from tonic's server.
#[tokio::test]
async fn a_grpc_client_gets_the_same_orders_from_the_connect_server() {
    let app = spawn(Backend::Memory).await;
    let mut on_rest_port =
        pb2::order_service_client::OrderServiceClient::connect(format!("http://{}", app.rest))
            .await
            .unwrap();
    let mut on_grpc_port = app.grpc_v2().await;
    let req = list_request(USER_100, 100, FieldSet::ALL);
    let a = on_rest_port
        .list_orders(req.clone())
        .await
        .unwrap()
        .into_inner();
    let b = on_grpc_port.list_orders(req).await.unwrap().into_inner();
    assert_eq!(a.orders.len(), 100);
    assert_eq!(a, b);

    // A bad field: the same code and message from both. (The BadRequest
    // detail reaches a tonic client from tonic's server only: connect-rust
    // 0.9.1 puts `grpc-status` in the headers of its gRPC error answers and
    // `grpc-status-details-bin` in the trailers after them, and tonic, taking
    // the answer for trailers-only, reads the headers alone. Over the Connect
    // protocol the detail is there: see the test above.)
    let bad = list_request("nope", 1, FieldSet::ALL);
    let a = on_rest_port.list_orders(bad.clone()).await.unwrap_err();
    let b = on_grpc_port.list_orders(bad).await.unwrap_err();
    assert_eq!(a.code(), tonic::Code::InvalidArgument);
    assert_eq!((a.code(), a.message()), (b.code(), b.message()));
    let field = b.get_details_bad_request().unwrap().field_violations[0]
        .field
        .clone();
    assert_eq!(field, "user_id");
    app.stop().await;
}
