//! Every transport carries the same orders: REST over HTTP/1.1 and h2c in JSON
//! and protobuf, gRPC unary, server stream and bidi, gRPC-web, raw TCP, and
//! the legacy v1 API; on Postgres and in memory. The ground truth is the data
//! set itself, so field values are checked, not only counts.

use std::collections::HashMap;

use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};
use model::json::{OrderJson, OrderPageJson};
use model::{FieldSet, Order};
use prost::Message as _;
use proto::order::{v1 as pb1, v2 as pb2};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::helpers::{Backend, TestApp, expected_orders, list_request, spawn};

const USER_100: &str = "00000000-0000-0000-0000-000000000100";

async fn rest_json(client: &reqwest::Client, url: String) -> (Vec<Order>, Option<String>) {
    let res = client.get(url).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/json");
    let page: OrderPageJson = res.json().await.unwrap();
    (
        page.orders
            .into_iter()
            .map(|o| Order::try_from(o).unwrap())
            .collect(),
        page.next_page_token,
    )
}

async fn rest_proto(client: &reqwest::Client, url: String) -> Vec<Order> {
    let res = client
        .get(url)
        .header("accept", "application/x-protobuf")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/x-protobuf");
    let page = pb2::ListOrdersResponse::decode(res.bytes().await.unwrap()).unwrap();
    page.orders
        .into_iter()
        .map(|o| Order::try_from(o).unwrap())
        .collect()
}

/// Sends one gRPC-web request over HTTP/1.1 and returns the first message.
async fn grpc_web<M: prost::Message + Default>(
    app: &TestApp,
    method: &str,
    req: impl prost::Message,
) -> M {
    let msg = req.encode_to_vec();
    let mut body = BytesMut::new();
    body.put_u8(0);
    body.put_u32(msg.len() as u32);
    body.put_slice(&msg);
    let res = app
        .h1()
        .post(format!("http://{}/{method}", app.grpc))
        .header("content-type", "application/grpc-web+proto")
        .header("x-grpc-web", "1")
        .body(body.freeze())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut bytes: Bytes = res.bytes().await.unwrap();
    let flag = bytes.get_u8();
    assert_eq!(flag, 0, "the first gRPC-web frame is a message");
    let len = bytes.get_u32() as usize;
    M::decode(&bytes[..len]).unwrap()
}

async fn tcp_lookups(
    app: &TestApp,
    requests: Vec<pb2::LookupOrdersRequest>,
) -> HashMap<u64, pb2::LookupOrdersResponse> {
    let mut s = tokio::net::TcpStream::connect(app.tcp).await.unwrap();
    let n = requests.len();
    // All requests go out before any answer is read: they are in flight together.
    for r in &requests {
        s.write_all(&order_service::tcp::encode_frame(r))
            .await
            .unwrap();
    }
    let mut answers = HashMap::new();
    for _ in 0..n {
        let len = s.read_u32().await.unwrap() as usize;
        let mut buf = vec![0; len];
        s.read_exact(&mut buf).await.unwrap();
        let a = pb2::LookupOrdersResponse::decode(&buf[..]).unwrap();
        answers.insert(a.request_id, a);
    }
    answers
}

/// Fetches the same query over every transport and checks each answer
/// against `want`.
async fn assert_every_transport_returns(
    app: &TestApp,
    user: &str,
    limit: i32,
    fields: FieldSet,
    want: &[Order],
) {
    let csv = if fields.is_all() {
        String::new()
    } else {
        fields.to_csv()
    };
    let url = app.url(&format!(
        "/v2/orders?user_id={user}&limit={limit}&fields={csv}"
    ));
    let check = |name: &str, got: &[Order]| {
        assert_eq!(got.len(), want.len(), "{name}: count");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g, w, "{name}: order {}", w.id);
        }
    };

    check("h1 json", &rest_json(&app.h1(), url.clone()).await.0);
    check("h2c json", &rest_json(&app.h2c(), url.clone()).await.0);
    check("h1 proto", &rest_proto(&app.h1(), url.clone()).await);
    check("h2c proto", &rest_proto(&app.h2c(), url.clone()).await);

    let mut grpc = app.grpc_v2().await;
    let unary = grpc
        .list_orders(list_request(user, limit, fields))
        .await
        .unwrap()
        .into_inner();
    check(
        "grpc unary",
        &unary
            .orders
            .into_iter()
            .map(|o| Order::try_from(o).unwrap())
            .collect::<Vec<_>>(),
    );

    let l = list_request(user, limit, fields);
    let mut stream = grpc
        .stream_orders(pb2::StreamOrdersRequest {
            user_id: l.user_id,
            page_size: l.page_size,
            page_token: l.page_token,
            read_mask: l.read_mask,
        })
        .await
        .unwrap()
        .into_inner();
    let mut streamed = Vec::new();
    while let Some(m) = stream.message().await.unwrap() {
        streamed.push(Order::try_from(m.order.unwrap()).unwrap());
    }
    check("grpc server stream", &streamed);

    // Bidi: three lookups on one stream, answered by request id.
    let lookups: Vec<pb2::LookupOrdersRequest> = (1..=3)
        .map(|i| pb2::LookupOrdersRequest {
            request_id: i,
            user_id: user.into(),
            page_size: limit,
            read_mask: model::v2::field_mask(fields),
            ..Default::default()
        })
        .collect();
    let mut answers = grpc
        .lookup_orders(futures::stream::iter(lookups.clone()))
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    while let Some(a) = answers.message().await.unwrap() {
        assert!(a.error.is_none(), "{:?}", a.error);
        seen.push(a.request_id);
        check(
            "grpc bidi",
            &a.orders
                .into_iter()
                .map(|o| Order::try_from(o).unwrap())
                .collect::<Vec<_>>(),
        );
    }
    seen.sort_unstable();
    assert_eq!(seen, [1, 2, 3]);

    let web: pb2::ListOrdersResponse = grpc_web(
        app,
        "order.v2.OrderService/ListOrders",
        list_request(user, limit, fields),
    )
    .await;
    check(
        "grpc-web",
        &web.orders
            .into_iter()
            .map(|o| Order::try_from(o).unwrap())
            .collect::<Vec<_>>(),
    );

    let tcp = tcp_lookups(app, lookups).await;
    assert_eq!(tcp.len(), 3);
    for a in tcp.into_values() {
        assert!(a.error.is_none(), "{:?}", a.error);
        check(
            "raw tcp",
            &a.orders
                .into_iter()
                .map(|o| Order::try_from(o).unwrap())
                .collect::<Vec<_>>(),
        );
    }
}

async fn assert_v1_matches(app: &TestApp, user: &str, limit: i32, want: &[Order]) {
    let mut v1 = app.grpc_v1().await;
    let page = v1
        .list_orders(pb1::ListOrdersRequest {
            user_id: user.into(),
            page_size: limit,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let got: Vec<Order> = page
        .orders
        .into_iter()
        .map(|o| Order::try_from(o).unwrap())
        .collect();
    assert_eq!(got, want, "grpc v1");

    let res = app
        .h1()
        .get(app.url(&format!("/v1/orders?user_id={user}&limit={limit}")))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let page: pb1::ListOrdersResponse = res.json().await.unwrap();
    // Every field is a string on the wire, prices as decimals.
    let first = &page.orders[0];
    assert_eq!(first.unit_price, model::v1::money(want[0].unit_price_minor));
    let got: Vec<Order> = page
        .orders
        .into_iter()
        .map(|o| Order::try_from(o).unwrap())
        .collect();
    assert_eq!(got, want, "rest v1");
}

async fn same_orders_everywhere(backend: Backend) {
    let app = spawn(backend).await;
    let want = expected_orders(100);
    assert_every_transport_returns(&app, USER_100, 1000, FieldSet::ALL, &want).await;

    let six = FieldSet::of(FieldSet::SUMMARY);
    let narrow: Vec<Order> = want.iter().map(|o| o.project(six)).collect();
    assert_every_transport_returns(&app, USER_100, 1000, six, &narrow).await;

    let ten_thousand = expected_orders(10_000);
    assert_every_transport_returns(
        &app,
        "00000000-0000-0000-0000-000000010000",
        10_000,
        FieldSet::ALL,
        &ten_thousand,
    )
    .await;

    assert_every_transport_returns(
        &app,
        "00000000-0000-0000-0000-000000000000",
        10,
        FieldSet::ALL,
        &[],
    )
    .await;
    assert_v1_matches(&app, USER_100, 1000, &want).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transport_returns_the_data_set_from_postgres() {
    same_orders_everywhere(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transport_returns_the_data_set_from_memory() {
    same_orders_everywhere(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_chain_through_all_of_a_users_orders() {
    for backend in [Backend::Memory, Backend::Postgres] {
        let app = spawn(backend).await;
        let want = expected_orders(1000);
        let mut got = Vec::new();
        let mut token: Option<String> = None;
        let mut pages = 0;
        loop {
            let url = app.url(&format!(
                "/v2/orders?user_id=00000000-0000-0000-0000-000000001000&limit=300&page_token={}",
                token.as_deref().unwrap_or("")
            ));
            let (orders, next) = rest_json(&app.h1(), url).await;
            got.extend(orders);
            pages += 1;
            match next {
                Some(t) => token = Some(t),
                None => break,
            }
        }
        assert_eq!(pages, 4, "{backend:?}: 300+300+300+100");
        assert_eq!(got, want, "{backend:?}");
        app.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_order_by_id_over_rest_and_grpc() {
    let app = spawn(Backend::Postgres).await;
    let want = expected_orders(10)[3].clone();
    let res = app
        .h1()
        .get(app.url(&format!("/v2/orders/{}", want.id)))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let got = Order::try_from(res.json::<OrderJson>().await.unwrap()).unwrap();
    assert_eq!(got, want);

    let got = app
        .grpc_v2()
        .await
        .get_order(pb2::GetOrderRequest {
            id: want.id.to_string(),
            read_mask: None,
        })
        .await
        .unwrap()
        .into_inner()
        .order
        .unwrap();
    assert_eq!(Order::try_from(got).unwrap(), want);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_reflection_answer_on_the_grpc_port() {
    let app = spawn(Backend::Memory).await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", app.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "order.v2.OrderService".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let mut refl = ServerReflectionClient::new(channel);
    let req = tonic_reflection::pb::v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = refl
        .server_reflection_info(futures::stream::iter([req]))
        .await
        .unwrap()
        .into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) =
        answers.message().await.unwrap().unwrap().message_response
    else {
        panic!("expected a service list");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for want in [
        "order.v2.OrderService",
        "order.v1.OrderService",
        "grpc.health.v1.Health",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} missing from {names:?}"
        );
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_describes_every_route() {
    let app = spawn(Backend::Memory).await;
    let doc: serde_json::Value = app
        .h1()
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for path in [
        "/v2/orders",
        "/v2/orders/{id}",
        "/v1/orders",
        "/healthz",
        "/readyz",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    assert!(doc["paths"]["/v2/orders"]["post"]["requestBody"].is_object());
    assert!(doc["components"]["schemas"]["OrderJson"]["properties"]["total_minor"].is_object());
    // Every error answer is documented as an RFC 9457 problem, and only so.
    let errors = testkit::problem::openapi_errors_are_problems(&doc);
    assert!(errors > 10, "{errors} error answers documented");
    let problem = &doc["components"]["schemas"]["Problem"];
    let mut required: Vec<_> = problem["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    required.sort_unstable();
    assert_eq!(required, ["detail", "error", "status", "title", "type"]);
    assert!(problem["properties"]["field"].is_object(), "{problem}");
    app.stop().await;
}
