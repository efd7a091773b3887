//! Bad input gets a precise status and a body that names the problem, on every
//! API, and the service keeps serving: over REST an RFC 9457 problem
//! (`application/problem+json`, `field` naming the field), over gRPC a status
//! whose `google.rpc.BadRequest` detail names it.

use model::json::Problem;
use proto::order::v2 as pb2;
use testkit::problem::problem_of;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tonic_types::StatusExt as _;

use crate::helpers::{Backend, TestApp, spawn, spawn_with};

const USER: &str = "00000000-0000-0000-0000-000000000010";

async fn rest_error(app: &TestApp, req: reqwest::RequestBuilder, status: u16) -> Problem {
    let res = req.send().await.unwrap();
    assert_eq!(res.status(), status, "{:?}", res.url());
    let e = problem_of(res).await;
    // The service still answers a good request afterwards.
    let ok = app
        .h1()
        .get(app.url(&format!("/v2/orders?user_id={USER}&limit=1")))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_query_parameters_are_400_naming_the_parameter() {
    let app = spawn(Backend::Memory).await;
    let c = app.h1();
    for (query, field, words) in [
        ("limit=10", "user_id", "is required"),
        ("user_id=nope&limit=10", "user_id", "\"nope\" is not a UUID"),
        (
            "user_id={USER}&limit=0",
            "limit",
            "0 is out of range: must be 1 to 10000",
        ),
        (
            "user_id={USER}&limit=10001",
            "limit",
            "10001 is out of range",
        ),
        ("user_id={USER}&limit=-3", "limit", "out of range"),
        (
            "user_id={USER}&limit=ten",
            "limit",
            "\"ten\" is not a whole number",
        ),
        (
            "user_id={USER}&fields=id,colour",
            "fields",
            "unknown field \"colour\"",
        ),
        (
            "user_id={USER}&page_token=%21%21",
            "page_token",
            "not a token",
        ),
    ] {
        let url = app.url(&format!("/v2/orders?{}", query.replace("{USER}", USER)));
        let e = rest_error(&app, c.get(url), 400).await;
        assert_eq!(e.error, "invalid_argument");
        assert_eq!(e.field.as_deref(), Some(field), "{query}");
        assert!(e.detail.contains(words), "{query}: {}", e.detail);
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_or_unknown_order_id_is_400_or_404() {
    let app = spawn(Backend::Postgres).await;
    let c = app.h1();
    let e = rest_error(&app, c.get(app.url("/v2/orders/12345")), 400).await;
    assert_eq!(e.field.as_deref(), Some("id"));
    let missing = uuid::Uuid::new_v4();
    let e = rest_error(&app, c.get(app.url(&format!("/v2/orders/{missing}"))), 404).await;
    assert_eq!(e.error, "not_found");
    assert!(e.detail.contains(&missing.to_string()));
    let e = rest_error(&app, c.get(app.url("/v3/nothing")), 404).await;
    assert!(e.detail.contains("/v3/nothing"));
    app.stop().await;
}

fn new_order_json() -> serde_json::Value {
    serde_json::json!({
        "user_id": USER,
        "product_id": "6d1b4a60-2f7e-4d8e-9a5e-3c2f1b0a9d8c",
        "product_name": "Oak Tray",
        "quantity": 2,
        "unit_price_minor": 1250,
        "currency": "EUR",
        "shipping_address": {"line1": "1 Mill Street", "city": "Lyon", "postal_code": "69001", "country_code": "FR"}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_are_400_and_oversized_ones_413() {
    let app = spawn_with(Backend::Memory, |s| s.max_request_bytes = 4096).await;
    let c = app.h1();
    let post = || {
        c.post(app.url("/v2/orders"))
            .header("idempotency-key", "k1")
    };

    let e = rest_error(
        &app,
        post()
            .header("content-type", "application/json")
            .body("{\"user_id\": "),
        400,
    )
    .await;
    assert_eq!(e.field.as_deref(), Some("body"));
    assert!(e.detail.contains("JSON body is invalid"), "{}", e.detail);

    let mut missing = new_order_json();
    missing.as_object_mut().unwrap().remove("quantity");
    let e = rest_error(&app, post().json(&missing), 400).await;
    assert!(e.detail.contains("quantity"), "{}", e.detail);

    let mut bad = new_order_json();
    bad["currency"] = "euro".into();
    let e = rest_error(&app, post().json(&bad), 400).await;
    assert_eq!(e.field.as_deref(), Some("currency"));

    let mut bad = new_order_json();
    bad["quantity"] = 0.into();
    let e = rest_error(&app, post().json(&bad), 400).await;
    assert_eq!(e.field.as_deref(), Some("quantity"));

    let e = rest_error(
        &app,
        post()
            .header("content-type", "application/x-protobuf")
            .body(vec![0xFF, 0xFF, 0xFF, 0x01]),
        400,
    )
    .await;
    assert!(
        e.detail.contains("protobuf body is invalid"),
        "{}",
        e.detail
    );

    let mut huge = new_order_json();
    huge["note"] = "x".repeat(10_000).into();
    let e = rest_error(&app, post().json(&huge), 413).await;
    assert_eq!(e.error, "payload_too_large");
    assert!(e.detail.contains("4096"), "{}", e.detail);

    // Without a Content-Length the limit still holds: the body is streamed.
    let chunks = futures::stream::iter(
        (0..10).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b' '; 1000]))),
    );
    let e = rest_error(
        &app,
        post()
            .header("content-type", "application/json")
            .body(reqwest::Body::wrap_stream(chunks)),
        413,
    )
    .await;
    assert_eq!(e.error, "payload_too_large");

    let e = rest_error(
        &app,
        post().header("content-type", "text/xml").body("<order/>"),
        415,
    )
    .await;
    assert_eq!(e.error, "unsupported_media_type");

    let e = rest_error(
        &app,
        c.get(app.url(&format!("/v2/orders?user_id={USER}")))
            .header("accept", "text/html"),
        406,
    )
    .await;
    assert_eq!(e.error, "not_acceptable");

    let e = rest_error(
        &app,
        c.post(app.url("/v2/orders")).json(&new_order_json()),
        400,
    )
    .await;
    assert_eq!(e.field.as_deref(), Some("idempotency_key"));
    app.stop().await;
}

/// Every error is `application/problem+json`, also for a client that asked
/// for protobuf, whichever part of the stack refused the request: a handler,
/// an extractor, the body read, the router (404, 405).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rest_error_is_a_problem_even_when_protobuf_was_asked_for() {
    let app = spawn_with(Backend::Memory, |s| s.max_request_bytes = 4096).await;
    let c = app.h1();
    let proto = |req: reqwest::RequestBuilder| req.header("accept", "application/x-protobuf");
    let post = || {
        proto(c.post(app.url("/v2/orders")))
            .header("idempotency-key", "k1")
            .header("content-type", "application/x-protobuf")
    };
    let missing = uuid::Uuid::new_v4();
    for (req, status, error, field, words) in [
        (
            proto(c.get(app.url(&format!("/v2/orders?user_id={USER}&limit=ten")))),
            400,
            "invalid_argument",
            Some("limit"),
            "\"ten\" is not a whole number",
        ),
        (
            proto(c.get(app.url("/v1/orders?limit=5"))),
            400,
            "invalid_argument",
            Some("user_id"),
            "is required",
        ),
        (
            proto(c.get(app.url("/v2/orders/12345"))),
            400,
            "invalid_argument",
            Some("id"),
            "not a UUID",
        ),
        (
            proto(c.get(app.url("/v2/orders/%FF"))),
            400,
            "invalid_argument",
            None,
            "path is invalid",
        ),
        (
            post().body(vec![0xFF, 0xFF, 0xFF, 0x01]),
            400,
            "invalid_argument",
            Some("body"),
            "protobuf body is invalid",
        ),
        (
            post().body(vec![0u8; 5000]),
            413,
            "payload_too_large",
            Some("body"),
            "4096",
        ),
        (
            proto(c.post(app.url("/v2/orders")))
                .header("idempotency-key", "k1")
                .header("content-type", "text/xml")
                .body("<order/>"),
            415,
            "unsupported_media_type",
            None,
            "text/xml",
        ),
        (
            proto(c.get(app.url(&format!("/v2/orders/{missing}")))),
            404,
            "not_found",
            None,
            "no order has the id",
        ),
        (
            proto(c.get(app.url("/v3/nothing"))),
            404,
            "not_found",
            None,
            "/v3/nothing",
        ),
        (
            proto(c.delete(app.url("/v2/orders"))),
            405,
            "method_not_allowed",
            None,
            "DELETE is not allowed on /v2/orders",
        ),
    ] {
        let e = rest_error(&app, req, status).await;
        assert_eq!(e.error, error, "{e:?}");
        assert_eq!(e.field.as_deref(), field, "{e:?}");
        assert!(e.detail.contains(words), "{e:?}");
    }

    // A 405 still lists the methods the route answers.
    let res = c.put(app.url("/v2/orders")).send().await.unwrap();
    assert_eq!(res.status(), 405);
    let allow = res.headers()["allow"].to_str().unwrap().to_owned();
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow}");
    problem_of(res).await;

    // Each type's URI, resolved against the service, describes it.
    let e = rest_error(&app, c.get(app.url("/v2/orders?limit=1")), 400).await;
    let page = c.get(app.url(&e.type_uri)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().starts_with(&e.title));
    let page = c
        .get(app.url("/problems/idempotency_key_reused"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let e = rest_error(&app, c.get(app.url("/problems/no_such_kind")), 404).await;
    assert_eq!(e.error, "not_found");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_answers_bad_input_with_precise_codes_and_the_same_messages() {
    let app = spawn_with(Backend::Memory, |s| s.max_request_bytes = 4096).await;
    let mut g = app.grpc_v2().await;
    let list = |user: &str, size: i32, paths: &[&str]| pb2::ListOrdersRequest {
        user_id: user.into(),
        page_size: size,
        page_token: String::new(),
        read_mask: Some(proto::prost_types::FieldMask {
            paths: paths.iter().map(|p| (*p).to_owned()).collect(),
        }),
    };
    let s = g.list_orders(list("nope", 10, &[])).await.unwrap_err();
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
    assert_eq!(s.message(), "user_id: \"nope\" is not a UUID");
    assert_eq!(
        violation(&s),
        ("user_id".to_owned(), "\"nope\" is not a UUID".to_owned())
    );

    let s = g.list_orders(list(USER, 10_001, &[])).await.unwrap_err();
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        s.message(),
        "page_size: 10001 is out of range: must be 1 to 10000"
    );
    assert_eq!(violation(&s).0, "page_size");

    let s = g
        .list_orders(list(USER, 10, &["colour"]))
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
    let (field, description) = violation(&s);
    assert_eq!(field, "read_mask");
    let rest = app
        .h1()
        .get(app.url(&format!("/v2/orders?user_id={USER}&fields=colour")))
        .send()
        .await
        .unwrap()
        .json::<Problem>()
        .await
        .unwrap();
    // The same explanation, under each API's own name for the parameter.
    assert_eq!(
        s.message().strip_prefix("read_mask: "),
        rest.detail.strip_prefix("fields: ")
    );
    assert_eq!(
        Some(description.as_str()),
        rest.detail.strip_prefix("fields: ")
    );

    let missing = uuid::Uuid::new_v4().to_string();
    let s = g
        .get_order(pb2::GetOrderRequest {
            id: missing.clone(),
            read_mask: None,
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::NotFound);
    assert_eq!(s.message(), format!("no order has the id {missing}"));
    assert!(s.get_details_bad_request().is_none(), "{s:?}");

    let s = g
        .create_order(pb2::CreateOrderRequest {
            idempotency_key: "k".into(),
            note: Some("x".repeat(10_000)),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");

    let s = g
        .create_order(pb2::CreateOrderRequest {
            idempotency_key: "k".into(),
            user_id: USER.into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
    assert!(s.message().starts_with("product_id:"), "{}", s.message());
    assert_eq!(violation(&s).0, "product_id");

    // Still serving.
    let ok = g
        .list_orders(list(USER, 10, &[]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.orders.len(), 10);
    app.stop().await;
}

/// The one `FieldViolation` of a status's `google.rpc.BadRequest` detail,
/// decoded as any client that reads `grpc-status-details-bin` would.
fn violation(s: &tonic::Status) -> (String, String) {
    let bad = s
        .get_details_bad_request()
        .unwrap_or_else(|| panic!("no BadRequest detail in {s:?}"));
    assert_eq!(bad.field_violations.len(), 1, "{bad:?}");
    let v = &bad.field_violations[0];
    (v.field.clone(), v.description.clone())
}

async fn read_answer(s: &mut tokio::net::TcpStream) -> pb2::LookupOrdersResponse {
    use prost::Message as _;
    let len = s.read_u32().await.unwrap() as usize;
    let mut buf = vec![0; len];
    s.read_exact(&mut buf).await.unwrap();
    pb2::LookupOrdersResponse::decode(&buf[..]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_tcp_refuses_oversized_and_garbage_frames_and_reports_bad_lookups() {
    let app = spawn_with(Backend::Memory, |s| s.max_request_bytes = 1024).await;

    // A bad lookup gets its own error; the connection goes on.
    let mut s = tokio::net::TcpStream::connect(app.tcp).await.unwrap();
    let bad = pb2::LookupOrdersRequest {
        request_id: 9,
        user_id: "nope".into(),
        ..Default::default()
    };
    s.write_all(&order_service::tcp::encode_frame(&bad))
        .await
        .unwrap();
    let a = read_answer(&mut s).await;
    assert_eq!(a.request_id, 9);
    let err = a.error.unwrap();
    assert_eq!(err.code, tonic::Code::InvalidArgument as i32);
    assert_eq!(err.message, "user_id: \"nope\" is not a UUID");
    let good = pb2::LookupOrdersRequest {
        request_id: 10,
        user_id: USER.into(),
        page_size: 5,
        ..Default::default()
    };
    s.write_all(&order_service::tcp::encode_frame(&good))
        .await
        .unwrap();
    let a = read_answer(&mut s).await;
    assert_eq!((a.request_id, a.orders.len()), (10, 5));

    // A length over the limit: one error frame, then the connection closes,
    // though the announced body never comes.
    s.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
    let a = read_answer(&mut s).await;
    let err = a.error.unwrap();
    assert_eq!(err.code, tonic::Code::ResourceExhausted as i32);
    assert!(
        err.message.contains("over the limit of 1024"),
        "{}",
        err.message
    );
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());

    // Bytes that are not a request: an error frame, then close.
    let mut s = tokio::net::TcpStream::connect(app.tcp).await.unwrap();
    s.write_all(&[0, 0, 0, 3, 0xFF, 0xFF, 0xFF]).await.unwrap();
    let a = read_answer(&mut s).await;
    assert_eq!(a.error.unwrap().code, tonic::Code::InvalidArgument as i32);

    // And the listener still serves new connections.
    let mut s = tokio::net::TcpStream::connect(app.tcp).await.unwrap();
    s.write_all(&order_service::tcp::encode_frame(&good))
        .await
        .unwrap();
    assert_eq!(read_answer(&mut s).await.orders.len(), 5);
    app.stop().await;
}

/// A huge bad value comes back as a short prefix and its length, on every
/// surface: REST, gRPC (where the message is the `grpc-message` header, and
/// a long one trips clients' metadata limits) and raw TCP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_bad_value_is_quoted_short_with_its_length_everywhere() {
    let app = spawn(Backend::Memory).await;
    // A URL has at most 64 KiB: REST gets 20,000 characters.
    let junk = "z".repeat(100_000);
    let short = |m: &str, surface: &str, len: usize| {
        assert!(m.len() < 400, "{surface}: a {}-byte message", m.len());
        assert!(m.contains(&format!("({len} bytes)")), "{surface}: {m}");
        assert!(m.contains(&"z".repeat(64)), "{surface}");
    };
    let e = rest_error(
        &app,
        app.h1()
            .get(app.url(&format!("/v2/orders?user_id={}&limit=1", &junk[..20_000]))),
        400,
    )
    .await;
    short(&e.detail, "REST", 20_000);

    let mut g = app.grpc_v2().await;
    let s = g
        .list_orders(pb2::ListOrdersRequest {
            user_id: junk.clone(),
            page_size: 1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::InvalidArgument);
    short(s.message(), "gRPC", 100_000);
    short(&violation(&s).1, "gRPC details", 100_000);

    let mut tcp = tokio::net::TcpStream::connect(app.tcp).await.unwrap();
    let req = pb2::LookupOrdersRequest {
        request_id: 3,
        user_id: junk,
        page_size: 1,
        ..Default::default()
    };
    tcp.write_all(&order_service::tcp::encode_frame(&req))
        .await
        .unwrap();
    let a = read_answer(&mut tcp).await;
    short(&a.error.unwrap().message, "raw TCP", 100_000);
    app.stop().await;
}

/// One request cap on every surface, at its default (1 MiB): a 2 MiB gRPC
/// request, unary or on a bidi stream, is RESOURCE_EXHAUSTED before its
/// fields are looked at; a 2 MiB REST body is 413; a 2 MiB raw-TCP frame
/// gets a RESOURCE_EXHAUSTED frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_surface_refuses_a_request_over_the_one_request_cap() {
    let app = spawn(Backend::Memory).await;
    let big = "t".repeat(2 << 20);
    let mut g = app.grpc_v2().await;
    let s = g
        .list_orders(pb2::ListOrdersRequest {
            user_id: USER.into(),
            page_size: 1,
            page_token: big.clone(),
            read_mask: None,
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");

    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(pb2::LookupOrdersRequest {
        request_id: 1,
        user_id: USER.into(),
        page_token: big.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let outcome = match g
        .lookup_orders(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
    {
        Err(s) => s.code(),
        Ok(r) => match r.into_inner().message().await {
            Err(s) => s.code(),
            Ok(m) => panic!("the bidi stream answered {m:?}"),
        },
    };
    assert_eq!(outcome, tonic::Code::ResourceExhausted);

    let res = app
        .h1()
        .post(app.url("/v2/orders"))
        .header("content-type", "application/json")
        .header("idempotency-key", "big")
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 413);

    let mut tcp = tokio::net::TcpStream::connect(app.tcp).await.unwrap();
    tcp.write_all(&((2u32 << 20) + 1).to_be_bytes())
        .await
        .unwrap();
    let a = read_answer(&mut tcp).await;
    assert_eq!(a.error.unwrap().code, tonic::Code::ResourceExhausted as i32);
    app.stop().await;
}
