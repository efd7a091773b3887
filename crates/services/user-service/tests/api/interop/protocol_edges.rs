//! What the gRPC protocols specify at their edges, checked on user-service,
//! each a test of its own and lettered as order-service's (its
//! tests/api/interop/protocol_edges.rs):
//!
//! - (a) a health Watch of an unknown service says SERVICE_UNKNOWN and stays
//!   open;
//! - (b) reflection lists only the services the port serves, over v1 and
//!   v1alpha;
//! - (c) the server itself ends a call past its `grpc-timeout` with
//!   DEADLINE_EXCEEDED, not an answer.

use super::standard_services::{self as std_services, Client};
use super::{SERVED, in_memory, kit::node_client};
use crate::helpers::spawn_users_on;

#[tokio::test]
async fn a_health_watch_of_an_unknown_service_says_service_unknown_and_stays_open() {
    let users = spawn_users_on(user_service::Settings::default(), None).await;
    for client in [Client::Grpcio, Client::GrpcJs] {
        std_services::assert_watch_of_unknown_says_service_unknown(client, users.grpc).await;
    }
    users.stop().await;
}

#[tokio::test]
async fn reflection_v1_lists_only_the_services_the_port_serves() {
    let users = spawn_users_on(user_service::Settings::default(), None).await;
    for client in [Client::Grpcio, Client::GrpcJs] {
        let got = std_services::reflect(client, users.grpc, "v1").await;
        std_services::assert_lists_only(&got, &SERVED);
    }
    users.stop().await;
}

#[tokio::test]
async fn reflection_v1alpha_is_answered_and_lists_only_the_services_the_port_serves() {
    let users = spawn_users_on(user_service::Settings::default(), None).await;
    for client in [Client::Grpcio, Client::GrpcJs] {
        let got = std_services::reflect(client, users.grpc, "v1alpha").await;
        assert!(got.get("error").is_none(), "{client:?}'s v1alpha: {got}");
        std_services::assert_describes(&got, &SERVED);
        std_services::assert_lists_only(&got, &SERVED);
    }
    users.stop().await;
}

#[tokio::test]
async fn a_grpc_timeout_of_1ms_on_10000_orders_is_answered_deadline_exceeded_by_the_server() {
    let (orders, users) = in_memory().await;
    // grpc-js sends `grpc-timeout: 1m` as metadata and keeps no timer: the
    // status it reports is the server's, from its trailers.
    let got = node_client(
        "grpc_js.mjs",
        &["server-deadline-users", &users.grpc.to_string()],
    )
    .await;
    assert!(
        got.get("ok").is_none(),
        "the server answered {} orders in {} ms, past a 1 ms deadline",
        got["ok"],
        got["took_ms"]
    );
    assert_eq!(got["error"]["code"], "DEADLINE_EXCEEDED", "{got}");
    users.stop().await;
    orders.stop().await;
}
