//! A thousand bad connections of each kind against each of user-service's
//! listeners, one kind at a time (idle, trickling a request, HTTP/2
//! trickling a head after the preface or pinging with no call): the process
//! grows by under 64 MiB and a well-behaved client is answered on the
//! flooded listener meanwhile.

use testkit::flood::{self, Kind};
use user_service::upstream::Transport;

use crate::helpers::{OrderService, UserService, spawn_users};

const N: usize = 1_000;

async fn good_client_is_answered(users: &UserService, listener: &str) {
    let id = dataset::fixed_user_id(10);
    if listener == "rest" {
        let (_, orders) = users.orders_ok(id, Transport::Grpc, "&limit=10").await;
        assert_eq!(orders.len(), 10);
    } else {
        let got = users
            .grpc_client()
            .await
            .get_user_with_orders(proto::user::v1::GetUserWithOrdersRequest {
                id: id.to_string(),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(got.orders.len(), 10);
    }
}

#[tokio::test]
async fn a_thousand_bad_connections_of_each_kind_cost_little_and_block_no_one() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    for listener in ["rest", "grpc"] {
        good_client_is_answered(&users, listener).await;
    }
    let floods = [
        ("rest", users.rest, Kind::Idle),
        (
            "rest",
            users.rest,
            Kind::Trickle {
                first: b"GET /v1/users HTTP/1.1\r\nx-slow: ",
            },
        ),
        ("rest", users.rest, Kind::H2HeadTrickle),
        ("rest", users.rest, Kind::H2Pinging),
        ("grpc", users.grpc, Kind::Idle),
        ("grpc", users.grpc, Kind::H2HeadTrickle),
        ("grpc", users.grpc, Kind::H2Pinging),
        (
            "grpc",
            users.grpc,
            Kind::Trickle {
                first: b"PRI * HTTP/2.0\r\n",
            },
        ),
    ];
    flood::each_kind(&floods, N, |l| good_client_is_answered(&users, l)).await;
    users.stop().await;
    orders.stop().await;
}
