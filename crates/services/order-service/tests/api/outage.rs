//! Postgres going away: 503 / UNAVAILABLE fast while it is gone, and service
//! again by itself when it returns. Postgres is reached through a proxy that
//! the test can cut, so the real server keeps running for other tests.

use std::time::{Duration, Instant};

use proto::order::v2 as pb2;
use testkit::health::{self, ServingStatus};
use testkit::proxy::Proxy;

use crate::helpers::{Backend, orders_database, spawn_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_is_503_fast_and_service_returns_by_itself() {
    let db = orders_database().await;
    let proxy = Proxy::start("127.0.0.1:5432".parse().unwrap())
        .await
        .unwrap();
    let via_proxy = proxy.url_through(&db.url);
    let app = spawn_with(Backend::Memory, |s| {
        s.database_url = Some(service_kit::db::DatabaseUrl(via_proxy));
        s.database_acquire_timeout_ms = 500;
    })
    .await;
    let list = app.url("/v2/orders?user_id=00000000-0000-0000-0000-000000000010");
    let c = app.h1();
    assert_eq!(c.get(&list).send().await.unwrap().status(), 200);

    proxy.cut();
    for _ in 0..3 {
        let started = Instant::now();
        let res = c.get(&list).send().await.unwrap();
        assert_eq!(res.status(), 503);
        let e: model::json::Problem = res.json().await.unwrap();
        assert_eq!(e.error, "unavailable");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        c.get(app.url("/readyz")).send().await.unwrap().status(),
        503
    );
    let s = app
        .grpc_v2()
        .await
        .list_orders(pb2::ListOrdersRequest {
            user_id: "00000000-0000-0000-0000-000000000010".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::Unavailable);
    // Liveness is not readiness: the process is fine.
    assert_eq!(
        c.get(app.url("/healthz")).send().await.unwrap().status(),
        200
    );

    proxy.restore();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let status = c.get(&list).send().await.unwrap().status();
        if status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {status} after Postgres returned"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        c.get(app.url("/readyz")).send().await.unwrap().status(),
        200
    );
    app.stop().await;
    db.drop_database().await.unwrap();
}

/// order-service's gRPC health names: the server's and each API's.
const HEALTH_NAMES: &[&str] = &["", "order.v2.OrderService", "order.v1.OrderService"];

/// gRPC health tells what /readyz tells: NOT_SERVING while Postgres is
/// gone, SERVING again when it returns, and NOT_SERVING from the moment
/// shutdown starts (seen on a Watch opened before it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_follows_readiness_and_shutdown() {
    let db = orders_database().await;
    let proxy = Proxy::start("127.0.0.1:5432".parse().unwrap())
        .await
        .unwrap();
    let via_proxy = proxy.url_through(&db.url);
    let app = spawn_with(Backend::Memory, |s| {
        s.database_url = Some(service_kit::db::DatabaseUrl(via_proxy));
        s.database_acquire_timeout_ms = 500;
        s.shutdown_grace_ms = 2_000;
    })
    .await;
    health::becomes(app.grpc, HEALTH_NAMES, ServingStatus::Serving).await;
    proxy.cut();
    health::becomes(app.grpc, HEALTH_NAMES, ServingStatus::NotServing).await;
    proxy.restore();
    health::becomes(app.grpc, HEALTH_NAMES, ServingStatus::Serving).await;

    let mut h = tonic_health::pb::health_client::HealthClient::new(
        tonic::transport::Channel::from_shared(format!("http://{}", app.grpc))
            .unwrap()
            .connect()
            .await
            .unwrap(),
    );
    let mut watch = h
        .watch(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        watch.message().await.unwrap().unwrap().status,
        ServingStatus::Serving as i32
    );
    app.serving.stop.cancel();
    let next = tokio::time::timeout(Duration::from_secs(5), watch.message())
        .await
        .expect("a status change within 5 s of the shutdown")
        .unwrap()
        .expect("a message before the stream ends");
    assert_eq!(next.status, ServingStatus::NotServing as i32);
    app.serving.handle.await.unwrap().unwrap();
    db.drop_database().await.unwrap();
}
