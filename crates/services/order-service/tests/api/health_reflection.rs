//! order-service's gRPC port as grpc's health and reflection protocols
//! describe it: a Watch of a service it does not know says SERVICE_UNKNOWN
//! and stays open (until shutdown, which ends every Watch), and reflection,
//! over v1 and v1alpha, lists exactly the services the port serves.

use std::time::Duration;

use proto::order::v2 as pb2;
use tonic_health::pb::health_check_response::ServingStatus;

use crate::helpers::{Backend, spawn, spawn_with};

#[path = "grpc_conformance.rs"]
mod grpc_conformance;
use grpc_conformance::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_watch_of_an_unknown_service_says_service_unknown_and_stays_open_until_shutdown() {
    // A long grace: the Watch must end because shutdown began, not because
    // the drain gave up on it.
    let app = spawn_with(Backend::Memory, |s| s.shutdown_grace_ms = 30_000).await;
    let ch = channel(app.grpc).await;

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
        check(&ch, "order.v2.OrderService").await.unwrap(),
        ServingStatus::Serving
    );
    let mut known = watch(&ch, "").await;
    assert_eq!(next_status(&mut known).await, ServingStatus::Serving);

    // Shutdown ends both Watches in time (the known one after saying
    // NOT_SERVING), and the service drains without waiting out its grace.
    let started = tokio::time::Instant::now();
    app.serving.stop.cancel();
    assert_ends(&mut unknown, Duration::from_secs(3)).await;
    assert_eq!(next_status(&mut known).await, ServingStatus::NotServing);
    assert_ends(&mut known, Duration::from_secs(3)).await;
    tokio::time::timeout(Duration::from_secs(10), app.serving.handle)
        .await
        .expect("the service drains with the Watches open")
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_exactly_the_services_the_grpc_port_serves_over_v1_and_v1alpha() {
    let app = spawn(Backend::Memory).await;
    let ch = channel(app.grpc).await;
    assert_lists_exactly(
        &ch,
        &[
            "order.v2.OrderService",
            "order.v1.OrderService",
            "grpc.health.v1.Health",
            REFLECTION[0],
            REFLECTION[1],
        ],
        &["user.v1.UserService"],
    )
    .await;
    app.stop().await;
}

/// The shed layer's exemption (`/grpc.reflection.`) covers v1alpha too: with
/// the one slot taken, an API call is refused and both reflection versions
/// and health still answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_limit_health_and_both_reflection_versions_still_answer() {
    let app = spawn_with(Backend::Postgres, |s| s.max_concurrent_requests = 1).await;
    let ch = channel(app.grpc).await;
    // The slot taken: a list waiting on a locked table.
    let hold = crate::helpers::hold_a_slot(&app).await;

    let refused = pb2::order_service_client::OrderServiceClient::new(ch.clone())
        .get_order(pb2::GetOrderRequest {
            id: "00000000-0000-0000-0000-000000000000".into(),
            read_mask: None,
        })
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert_eq!(check(&ch, "").await.unwrap(), ServingStatus::Serving);
    assert!(listed_v1(&ch).await.contains("order.v2.OrderService"));
    assert!(listed_v1alpha(&ch).await.contains("order.v2.OrderService"));
    hold.abort();
    app.stop().await;
}

#[tokio::test]
async fn health_and_reflection_refuse_a_request_over_the_request_cap() {
    let app = spawn(Backend::Memory).await;
    let ch = channel(app.grpc).await;
    assert_over_the_cap_refused(&ch).await;
    // The port still serves.
    assert_eq!(check(&ch, "").await.unwrap(), ServingStatus::Serving);
    app.stop().await;
}
