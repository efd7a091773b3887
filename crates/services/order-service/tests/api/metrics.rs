//! /metrics: requests per protocol and route, errors, durations, the process
//! and the database pool, in Prometheus text.

use proto::order::v2 as pb2;

use crate::helpers::{Backend, spawn, spawn_with};

const USER: &str = "00000000-0000-0000-0000-000000000010";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_per_protocol_and_route() {
    let app = spawn(Backend::Postgres).await;
    let list = app.url(&format!("/v2/orders?user_id={USER}&limit=3"));
    for _ in 0..3 {
        assert_eq!(app.h1().get(&list).send().await.unwrap().status(), 200);
    }
    assert_eq!(app.h2c().get(&list).send().await.unwrap().status(), 200);
    let bad = app.url("/v2/orders?user_id=nope");
    assert_eq!(app.h1().get(&bad).send().await.unwrap().status(), 400);
    let mut g = app.grpc_v2().await;
    g.list_orders(pb2::ListOrdersRequest {
        user_id: USER.into(),
        page_size: 3,
        ..Default::default()
    })
    .await
    .unwrap();
    // Made-up gRPC methods: tonic answers UNIMPLEMENTED, and they share one
    // series instead of adding one per path.
    for i in 0..5 {
        let res = app
            .h2c()
            .post(format!("http://{}/made.Up/Method{i}", app.grpc))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .send()
            .await
            .unwrap();
        assert_eq!(res.headers()["grpc-status"], "12");
    }

    let text = app.metrics_text().await;
    assert!(!text.contains("made.Up"), "{text}");
    for line in [
        "order_requests_total{protocol=\"http1\",route=\"/v2/orders\",code=\"200\",grpc_code=\"\"} 3",
        "order_requests_total{protocol=\"http1\",route=\"/v2/orders\",code=\"400\",grpc_code=\"\"} 1",
        "order_requests_total{protocol=\"h2c\",route=\"/v2/orders\",code=\"200\",grpc_code=\"\"} 1",
        "order_requests_total{protocol=\"grpc\",route=\"/order.v2.OrderService/ListOrders\",code=\"200\",grpc_code=\"OK\"} 1",
        "order_request_errors_total{protocol=\"http1\",route=\"/v2/orders\"} 0",
        "order_requests_total{protocol=\"grpc\",route=\"unmatched\",code=\"200\",grpc_code=\"UNIMPLEMENTED\"} 5",
        "# TYPE order_request_duration_seconds histogram",
        "order_request_duration_seconds_count{protocol=\"http1\",route=\"/v2/orders\"} 4",
        "order_request_duration_seconds_bucket{protocol=\"http1\",route=\"/v2/orders\",le=\"+Inf\"} 4",
        "order_service_info{store=\"postgres\"",
        "# TYPE process_cpu_seconds_total counter",
        "# TYPE process_resident_memory_bytes gauge",
        "order_db_pool_waiting 0",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    let in_use = text
        .lines()
        .find_map(|l| l.strip_prefix("order_db_pool_connections "))
        .unwrap();
    assert!(in_use.parse::<f64>().unwrap() >= 1.0);
    app.stop().await;
}

/// Calls shed before routing are labelled by their path only when it is a
/// method the port serves: 200 made-up paths add no series (a flood of them
/// once added one each, 7,400 lines).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shed_calls_to_made_up_paths_share_one_series() {
    let app = spawn_with(Backend::Postgres, |s| s.max_concurrent_requests = 1).await;
    // The only slot taken.
    let hold = crate::helpers::hold_a_slot(&app).await;
    let call = |path: String| {
        let client = app.h2c();
        async move {
            let res = client
                .post(path)
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(vec![0u8; 5])
                .send()
                .await
                .unwrap();
            res.headers()["grpc-status"].to_str().unwrap().to_owned()
        }
    };
    for i in 0..200 {
        let status = call(format!("http://{}/made.Up{i}/Method", app.grpc)).await;
        assert_eq!(status, "8", "shed");
    }
    let real = format!("http://{}/order.v2.OrderService/ListOrders", app.grpc);
    assert_eq!(call(real).await, "8");

    let text = app.metrics_text().await;
    assert!(!text.contains("made.Up"), "{text}");
    for line in [
        "order_requests_total{protocol=\"grpc\",route=\"unmatched\",code=\"200\",grpc_code=\"RESOURCE_EXHAUSTED\"} 200",
        "order_requests_total{protocol=\"grpc\",route=\"/order.v2.OrderService/ListOrders\",code=\"200\",grpc_code=\"RESOURCE_EXHAUSTED\"} 1",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    hold.abort();
    app.stop().await;
}
