//! user-service's gRPC port as grpc's health and reflection protocols
//! describe it: a Watch of a service it does not know says SERVICE_UNKNOWN
//! and stays open (until shutdown, which ends every Watch), and reflection,
//! over v1 and v1alpha, lists exactly the services the port serves. In
//! memory, with no order-service: none of this needs it.

use std::time::Duration;

use tonic_health::pb::health_check_response::ServingStatus;

use crate::helpers::spawn_users_on;

#[path = "../../../order-service/tests/api/grpc_conformance.rs"]
mod grpc_conformance;
use grpc_conformance::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_watch_of_an_unknown_service_says_service_unknown_and_stays_open_until_shutdown() {
    // A long grace: the Watch must end because shutdown began, not because
    // the drain gave up on it.
    let users = spawn_users_on(
        user_service::Settings {
            shutdown_grace_ms: 30_000,
            ..Default::default()
        },
        None,
    )
    .await;
    let ch = channel(users.grpc).await;

    // Check of an unknown name is still NOT_FOUND.
    let err = check(&ch, UNKNOWN).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");

    let mut unknown = watch(&ch, UNKNOWN).await;
    assert_eq!(
        next_status(&mut unknown).await,
        ServingStatus::ServiceUnknown
    );
    assert_still_open(&mut unknown).await;

    // Known names answer as before.
    assert_eq!(
        check(&ch, "user.v1.UserService").await.unwrap(),
        ServingStatus::Serving
    );
    let mut known = watch(&ch, "").await;
    assert_eq!(next_status(&mut known).await, ServingStatus::Serving);

    // Shutdown ends both Watches in time (the known one after saying
    // NOT_SERVING), and the service drains without waiting out its grace.
    let stopping = tokio::spawn(tokio::time::timeout(Duration::from_secs(10), users.stop()));
    assert_ends(&mut unknown, Duration::from_secs(3)).await;
    assert_eq!(next_status(&mut known).await, ServingStatus::NotServing);
    assert_ends(&mut known, Duration::from_secs(3)).await;
    stopping
        .await
        .unwrap()
        .expect("the service drains with the Watches open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_exactly_the_services_the_grpc_port_serves_over_v1_and_v1alpha() {
    let users = spawn_users_on(user_service::Settings::default(), None).await;
    let ch = channel(users.grpc).await;
    assert_lists_exactly(
        &ch,
        &[
            "user.v1.UserService",
            "grpc.health.v1.Health",
            REFLECTION[0],
            REFLECTION[1],
        ],
        &["order.v2.OrderService", "order.v1.OrderService"],
    )
    .await;
    users.stop().await;
}

#[tokio::test]
async fn health_and_reflection_refuse_a_request_over_the_request_cap() {
    let users = spawn_users_on(user_service::Settings::default(), None).await;
    let ch = channel(users.grpc).await;
    assert_over_the_cap_refused(&ch).await;
    // The port still serves.
    assert_eq!(check(&ch, "").await.unwrap(), ServingStatus::Serving);
}
