//! One end-to-end test per transport: the same user and the same orders for
//! the users with 0, 1, 100 and 10,000 orders, checked field by field against
//! the data set order-service was seeded with.

use model::{FieldSet, Order, OrderField};
use prost::Message as _;
use user_service::domain::{Gender, UserJson};
use user_service::upstream::Transport;

use crate::helpers::{OrderService, UserService, fixed_user, spawn_users};

/// What order-service holds for this user: its orders by id, the first `limit`.
fn expected(count: u32, limit: usize) -> Vec<Order> {
    let mut v = dataset::orders_of(&fixed_user(count));
    v.truncate(limit);
    v
}

fn assert_user_is_the_data_sets(u: &UserJson, count: u32) {
    let d = fixed_user(count);
    assert_eq!(u.id, d.id);
    assert_eq!(u.username, d.username);
    assert_eq!(u.first_name, d.first_name);
    assert_eq!(u.last_name, d.last_name);
    assert_eq!(u.email, d.email);
    assert_eq!(u.phone, d.phone);
    assert_eq!(u.gender.as_str(), d.gender);
    assert_eq!(u.birth_date, d.birth_date);
    assert_eq!(u.created_at, d.created_at);
}

async fn check_transport(via: Transport) {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;

    for count in [0u32, 1, 100, 10_000] {
        let id = dataset::fixed_user_id(count);
        let (page, got) = users.orders_ok(id, via, "&limit=10000").await;
        assert_user_is_the_data_sets(&page.user, count);
        let want = expected(count, 10_000);
        assert_eq!(got.len(), count as usize, "over {via}, user {count}");
        // Field by field, with a readable first difference.
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g, w, "over {via}, user {count}, order {}", w.id);
        }
        for o in &got {
            assert_eq!(o.user_id, id);
            assert_eq!(
                o.total_minor,
                i64::from(o.quantity) * o.unit_price_minor - o.discount_minor
            );
        }
    }

    // The default limit is 100, and a narrow selection comes back with the
    // other fields blank, exactly as order-service's own projection.
    let id = dataset::fixed_user_id(1_000);
    let (_, got) = users.orders_ok(id, via, "").await;
    assert_eq!(got, expected(1_000, 100), "default limit over {via}");
    let fields = FieldSet::of([OrderField::Status, OrderField::TotalMinor, OrderField::Note]);
    let (page, got) = users
        .orders_ok(id, via, "&limit=250&fields=status,total_minor,note")
        .await;
    let want: Vec<Order> = expected(1_000, 250)
        .iter()
        .map(|o| o.project(fields))
        .collect();
    assert_eq!(got, want, "selected fields over {via}");
    assert!(
        page.orders
            .iter()
            .all(|o| o.product_name.is_none() && o.total_minor.is_some())
    );

    // The protobuf answer carries the same orders.
    let res = users
        .http
        .get(users.url(&format!("/v1/users/{id}/orders?via={via}&limit=100")))
        .header("accept", "application/x-protobuf")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/x-protobuf");
    let pb =
        proto::user::v1::GetUserWithOrdersResponse::decode(res.bytes().await.unwrap()).unwrap();
    assert_eq!(pb.user.unwrap().gender, {
        let g: Gender = fixed_user(1_000).gender.parse().unwrap();
        g.as_i16() as i32
    });
    let got: Vec<Order> = pb
        .orders
        .into_iter()
        .map(|o| Order::try_from(o).unwrap())
        .collect();
    assert_eq!(got, expected(1_000, 100), "protobuf answer over {via}");

    let s = users.snapshot(via);
    assert!(s.calls >= 7 && s.errors == 0, "{s:?}");
    assert!(s.bytes_read > 0 && s.bytes_written > 0, "{s:?}");
    assert!(s.connections_opened >= 1, "{s:?}");
    users.stop().await;
    orders.stop().await;
}

macro_rules! transport_tests {
    ($($name:ident => $t:expr),* $(,)?) => {$(
        #[tokio::test]
        async fn $name() {
            check_transport($t).await;
        }
    )*};
}

transport_tests! {
    h1_json_returns_the_same_user_and_orders_as_order_service_holds => Transport::H1Json,
    h1_json_close_returns_the_same_user_and_orders_as_order_service_holds => Transport::H1JsonClose,
    h2c_json_returns_the_same_user_and_orders_as_order_service_holds => Transport::H2cJson,
    h1_proto_returns_the_same_user_and_orders_as_order_service_holds => Transport::H1Proto,
    h2c_proto_returns_the_same_user_and_orders_as_order_service_holds => Transport::H2cProto,
    h2c_proto_tuned_returns_the_same_user_and_orders_as_order_service_holds => Transport::H2cProtoTuned,
    connect_h1_proto_returns_the_same_user_and_orders_as_order_service_holds => Transport::ConnectH1Proto,
    connect_h2c_proto_returns_the_same_user_and_orders_as_order_service_holds => Transport::ConnectH2cProto,
    grpc_returns_the_same_user_and_orders_as_order_service_holds => Transport::Grpc,
    grpc_tuned_returns_the_same_user_and_orders_as_order_service_holds => Transport::GrpcTuned,
    grpc_stream_returns_the_same_user_and_orders_as_order_service_holds => Transport::GrpcStream,
    grpc_stream_tuned_returns_the_same_user_and_orders_as_order_service_holds => Transport::GrpcStreamTuned,
    grpc_bidi_returns_the_same_user_and_orders_as_order_service_holds => Transport::GrpcBidi,
    grpc_bidi_tuned_returns_the_same_user_and_orders_as_order_service_holds => Transport::GrpcBidiTuned,
    tcp_proto_returns_the_same_user_and_orders_as_order_service_holds => Transport::TcpProto,
    grpc_v1_returns_the_same_user_and_orders_as_order_service_holds => Transport::GrpcV1,
}

#[tokio::test]
async fn every_transport_gives_a_byte_identical_body_and_json_on_http1_moves_more_bytes_than_protobuf()
 {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    let id = dataset::fixed_user_id(1_000);
    let mut bodies = Vec::new();
    for via in Transport::ALL {
        let res = users.orders(id, via, "&limit=1000").await;
        assert_eq!(res.status(), 200, "over {via}");
        bodies.push((via, res.bytes().await.unwrap()));
    }
    let (first_via, first) = &bodies[0];
    for (via, body) in &bodies[1..] {
        assert!(
            body == first,
            "the body over {via} differs from the one over {first_via}"
        );
    }

    // The same 1,000 orders cost more on the wire as JSON than as protobuf
    // (2.3× in the README's figures; more than 1.5× asserted); headers are
    // counted too.
    let json = users.snapshot(Transport::H1Json).bytes_read;
    let proto = users.snapshot(Transport::H1Proto).bytes_read;
    assert!(
        json as f64 > 1.5 * proto as f64,
        "h1-json read {json} B, h1-proto {proto} B"
    );
    let metrics = users.metrics_text().await;
    for via in Transport::ALL {
        let line = format!("user_upstream_calls_total{{via=\"{via}\",store=\"postgres\"}} 1");
        assert!(metrics.contains(&line), "missing {line}");
    }
    users.stop().await;
    orders.stop().await;
}

/// A grpc client of user-service gets the same orders, and the transport and
/// upstream time in the message.
#[tokio::test]
async fn the_grpc_api_returns_the_same_orders_with_the_transport_and_upstream_time() {
    let orders = OrderService::start().await;
    let users: UserService = spawn_users(&orders).await;
    let mut client = users.grpc_client().await;
    let id = dataset::fixed_user_id(100);
    for via in [Transport::TcpProto, Transport::H2cJson] {
        let res = client
            .get_user_with_orders(proto::user::v1::GetUserWithOrdersRequest {
                id: id.to_string(),
                via: via.name().into(),
                limit: 0,
                read_mask: Some(proto::prost_types::FieldMask {
                    paths: vec!["status".into(), "created_at".into()],
                }),
            })
            .await
            .unwrap();
        assert_eq!(res.metadata().get("x-via").unwrap(), via.name());
        let r = res.into_inner();
        assert_eq!(r.via, via.name());
        assert!(r.upstream_micros > 0);
        assert_eq!(r.user.unwrap().id, id.to_string());
        let fields = FieldSet::of([OrderField::Status, OrderField::CreatedAt]);
        let got: Vec<Order> = r
            .orders
            .into_iter()
            .map(|o| Order::try_from(o).unwrap())
            .collect();
        let want: Vec<Order> = expected(100, 100)
            .iter()
            .map(|o| o.project(fields))
            .collect();
        assert_eq!(got, want, "over {via}");
    }
    // An empty via is the configured default (grpc).
    let r = client
        .get_user_with_orders(proto::user::v1::GetUserWithOrdersRequest {
            id: dataset::fixed_user_id(1).to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.via.as_str(), r.orders.len()), ("grpc", 1));
    users.stop().await;
    orders.stop().await;
}
