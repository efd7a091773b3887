//! Postgres going away: 503 / UNAVAILABLE fast while it is gone, and service
//! again by itself when it returns. Postgres is reached through a proxy that
//! the test can cut, so the real server keeps running for other tests.

// Helpers outside #[test] functions unwrap too: a panic is how a test fails.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Backend, orders_database, spawn_with};
use pgtest::proxy::Proxy;
use proto::order::v2 as pb2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_is_503_fast_and_service_returns_by_itself() {
    let db = orders_database().await;
    let proxy = Proxy::start("127.0.0.1:5432".parse().unwrap())
        .await
        .unwrap();
    let via_proxy = proxy.url_through(&db.url);
    let app = spawn_with(Backend::Memory, |s| {
        s.database_url = Some(via_proxy);
        s.db_acquire_timeout_ms = 500;
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
        let e: model::json::ErrorJson = res.json().await.unwrap();
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
