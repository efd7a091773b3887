//! The connection budget is real: with a pool of one, concurrent requests
//! share exactly one TCP connection on the multiplexed transports, and
//! HTTP/1.1 never has more than one call in flight.

use futures::future::join_all;
use user_service::upstream::Transport;

use crate::helpers::{OrderService, UserService, eventually, spawn_users_with};

const CONCURRENT: usize = 16;

/// Sends `CONCURRENT` requests at once over `via`, all of which must succeed.
async fn burst(users: &UserService, via: Transport) {
    let id = dataset::fixed_user_id(100);
    let calls = (0..CONCURRENT).map(|_| users.orders(id, via, "&limit=100"));
    for res in join_all(calls).await {
        assert_eq!(res.status(), 200, "over {via}");
    }
}

#[tokio::test]
async fn with_a_pool_of_one_multiplexed_transports_use_exactly_one_connection() {
    let orders = OrderService::start().await;
    let users = spawn_users_with(&orders, |s| s.pool_size = 1).await;
    for via in [
        Transport::H2cJson,
        Transport::H2cProto,
        Transport::ConnectH2cProto,
        Transport::Grpc,
        Transport::GrpcTuned,
        Transport::GrpcStream,
        Transport::GrpcStreamTuned,
        Transport::GrpcBidi,
        Transport::GrpcBidiTuned,
        Transport::TcpProto,
        Transport::GrpcV1,
    ] {
        burst(&users, via).await;
        burst(&users, via).await;
        let s = users.snapshot(via);
        assert_eq!(s.calls, 2 * CONCURRENT as u64, "{via}: {s:?}");
        assert_eq!(
            s.connections_opened, 1,
            "{via} opened more than one connection: {s:?}"
        );
        assert_eq!(s.connections_open, 1, "{via}: {s:?}");
    }
    users.stop().await;
    orders.stop().await;
}

#[tokio::test]
async fn with_a_pool_of_one_http1_never_has_more_than_one_call_in_flight() {
    let orders = OrderService::start().await;
    let users = spawn_users_with(&orders, |s| s.pool_size = 1).await;
    for via in [
        Transport::H1Json,
        Transport::H1Proto,
        Transport::ConnectH1Proto,
    ] {
        burst(&users, via).await;
        let s = users.snapshot(via);
        assert_eq!(s.calls, CONCURRENT as u64, "{via}: {s:?}");
        assert_eq!(
            s.in_flight_max, 1,
            "{via} had calls in flight at once: {s:?}"
        );
        assert_eq!(
            s.connections_opened, 1,
            "{via} did not reuse its one connection: {s:?}"
        );
    }
    burst(&users, Transport::H1JsonClose).await;
    let s = users.snapshot(Transport::H1JsonClose);
    assert_eq!(s.in_flight_max, 1, "h1-json-close: {s:?}");
    assert_eq!(
        s.connections_opened, CONCURRENT as u64,
        "h1-json-close: {s:?}"
    );
    users.stop().await;
    orders.stop().await;
}

#[tokio::test]
async fn h1_json_close_opens_one_connection_per_call_and_keeps_none() {
    let orders = OrderService::start().await;
    let users = spawn_users_with(&orders, |s| s.pool_size = 4).await;
    let id = dataset::fixed_user_id(10);
    for _ in 0..5 {
        let res = users.orders(id, Transport::H1JsonClose, "").await;
        assert_eq!(res.status(), 200);
    }
    let s = users.snapshot(Transport::H1JsonClose);
    assert_eq!((s.calls, s.connections_opened), (5, 5), "{s:?}");
    eventually("every h1-json-close connection is closed", || {
        users.snapshot(Transport::H1JsonClose).connections_open == 0
    })
    .await;

    // The pooled transport, by contrast, keeps its one connection.
    for _ in 0..5 {
        let res = users.orders(id, Transport::H1Json, "").await;
        assert_eq!(res.status(), 200);
    }
    let s = users.snapshot(Transport::H1Json);
    assert_eq!(
        (s.calls, s.connections_opened, s.connections_open),
        (5, 1, 1),
        "{s:?}"
    );
    users.stop().await;
    orders.stop().await;
}

#[tokio::test]
async fn a_pool_of_n_never_opens_more_than_n_connections() {
    let orders = OrderService::start().await;
    let users = spawn_users_with(&orders, |s| s.pool_size = 3).await;
    for via in Transport::ALL {
        burst(&users, via).await;
        let s = users.snapshot(via);
        if via == Transport::H1JsonClose {
            assert!(s.in_flight_max <= 3, "{via}: {s:?}");
        } else {
            assert!(s.connections_opened <= 3, "{via}: {s:?}");
            assert!(
                s.in_flight_max <= 3
                    || !matches!(
                        via,
                        Transport::H1Json | Transport::H1Proto | Transport::ConnectH1Proto
                    ),
                "{via}: {s:?}"
            );
        }
    }
    users.stop().await;
    orders.stop().await;
}
