//! `/metrics/hdr`: each transport's HDR histogram of good upstream calls,
//! checked against what the test itself sent and timed.

use std::time::Instant;

use hdrhistogram::Histogram;
use transports::Transport;

use crate::helpers::{OrderService, fixed_user, spawn_users};

async fn histogram(http: &reqwest::Client, url: String) -> Histogram<u64> {
    let res = http.get(url).send().await.unwrap();
    assert_eq!(res.status(), 200);
    telemetry::hdr::decode(&res.text().await.unwrap()).expect("an HdrHistogram V2 encoding")
}

#[tokio::test]
async fn each_transports_histogram_holds_its_good_calls_and_no_failed_one() {
    let mut orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    let user = fixed_user(10);
    let http = reqwest::Client::new();
    let hdr = |via: &str, extra: &str| users.url(&format!("/metrics/hdr?via={via}{extra}"));

    // 30 calls over gRPC and 20 over HTTP/1.1 JSON, each timed here around
    // the whole request (which contains the upstream call).
    let mut longest_us = 0u64;
    for (via, n) in [(Transport::Grpc, 30), (Transport::H1Json, 20)] {
        for _ in 0..n {
            let t = Instant::now();
            users.orders_ok(user.id, via, "").await;
            longest_us = longest_us.max(t.elapsed().as_micros() as u64);
        }
    }
    let grpc = histogram(&http, hdr("grpc", "")).await;
    assert_eq!(grpc.len(), 30, "every gRPC call, once");
    assert_eq!(histogram(&http, hdr("h1-json", "")).await.len(), 20);
    assert_eq!(histogram(&http, hdr("h2c-json", "")).await.len(), 0);
    // Within 3 significant digits, no call took longer upstream than the
    // whole request took here.
    assert!(grpc.min() >= 1);
    assert!(
        grpc.max() as f64 <= longest_us as f64 * 1.001 + 1.0,
        "{} µs upstream, {longest_us} µs for the whole request",
        grpc.max()
    );

    // The distribution ends at the total count and the largest value.
    let res = http.get(hdr("grpc", "&format=hgrm")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let text = res.text().await.unwrap();
    let last = text
        .lines()
        .rfind(|l| !l.starts_with('#') && !l.trim().is_empty())
        .unwrap();
    let cols: Vec<f64> = last
        .split_whitespace()
        .map(|c| c.parse().unwrap())
        .collect();
    assert_eq!(cols[1], 1.0, "{text}");
    assert_eq!(cols[2], 30.0, "{text}");
    assert!(
        (cols[0] * 1000.0 - grpc.max() as f64).abs() <= 1.0,
        "{text}"
    );

    // A read with reset takes the calls; the next read starts empty.
    assert_eq!(histogram(&http, hdr("grpc", "&reset=true")).await.len(), 30);
    assert_eq!(histogram(&http, hdr("grpc", "")).await.len(), 0);

    // Failed calls are counted as errors, not as latencies.
    orders.kill().await;
    for _ in 0..5 {
        let res = users.orders(user.id, Transport::Grpc, "").await;
        assert!(res.status().is_server_error(), "{}", res.status());
    }
    assert_eq!(histogram(&http, hdr("grpc", "")).await.len(), 0);
    assert_eq!(users.snapshot(Transport::Grpc).errors, 5);
    users.stop().await;
}

#[tokio::test]
async fn a_bad_hdr_query_is_a_400_naming_what_is_wrong() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    let http = reqwest::Client::new();
    for (query, says) in [
        ("", "via is required"),
        ("?via=carrier-pigeon", "carrier-pigeon"),
        ("?via=grpc&format=xml", "is not one of base64, hgrm"),
        ("?via=grpc&reset=maybe", "reset"),
    ] {
        let res = http
            .get(users.url(&format!("/metrics/hdr{query}")))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 400, "{query}");
        let body = res.text().await.unwrap();
        assert!(body.contains(says), "{query}: {body}");
    }
    users.stop().await;
}
