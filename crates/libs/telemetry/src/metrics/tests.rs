use super::*;

fn text(m: &RequestMetrics) -> String {
    let mut out = String::new();
    m.render(&mut out);
    out
}

#[test]
fn requests_render_as_prometheus_text_with_http_status_and_grpc_code_apart() {
    let m = RequestMetrics::new("order");
    m.record(
        "h2c",
        "/v2/orders",
        Outcome::http(200),
        Duration::from_micros(180),
    );
    m.record(
        "h2c",
        "/v2/orders",
        Outcome::http(503),
        Duration::from_millis(4),
    );
    let unavailable = Outcome {
        http: Some(200),
        grpc: Some(14),
        error: true,
    };
    m.record("grpc", "/o.S/M", unavailable, Duration::from_millis(1));
    m.record(
        "tcp",
        "LookupOrders",
        Outcome::grpc(0),
        Duration::from_micros(40),
    );
    let out = text(&m);
    for line in [
        "# TYPE order_requests_total counter",
        r#"order_requests_total{protocol="h2c",route="/v2/orders",code="200",grpc_code=""} 1"#,
        r#"order_requests_total{protocol="h2c",route="/v2/orders",code="503",grpc_code=""} 1"#,
        r#"order_requests_total{protocol="grpc",route="/o.S/M",code="200",grpc_code="UNAVAILABLE"} 1"#,
        r#"order_requests_total{protocol="tcp",route="LookupOrders",code="",grpc_code="OK"} 1"#,
        r#"order_request_errors_total{protocol="h2c",route="/v2/orders"} 1"#,
        r#"order_request_errors_total{protocol="grpc",route="/o.S/M"} 1"#,
        r#"order_request_errors_total{protocol="tcp",route="LookupOrders"} 0"#,
        "# TYPE order_request_duration_seconds histogram",
        // 180 µs lands in the 200 µs bucket, not the 150 µs one.
        r#"order_request_duration_seconds_bucket{protocol="h2c",route="/v2/orders",le="0.00015"} 0"#,
        r#"order_request_duration_seconds_bucket{protocol="h2c",route="/v2/orders",le="0.0002"} 1"#,
        r#"order_request_duration_seconds_bucket{protocol="h2c",route="/v2/orders",le="+Inf"} 2"#,
        r#"order_request_duration_seconds_count{protocol="h2c",route="/v2/orders"} 2"#,
        "# TYPE process_cpu_seconds_total counter",
        "# TYPE process_resident_memory_bytes gauge",
    ] {
        assert!(out.contains(line), "missing {line}\n{out}");
    }
}

#[test]
fn outcomes_split_the_http_status_from_the_grpc_code() {
    let res = |status: u16, headers: &[(&str, &str)]| {
        let mut r = http::Response::builder().status(status);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.body(()).expect("response")
    };
    assert_eq!(outcome_of(&res(404, &[])), Outcome::http(404));
    assert!(outcome_of(&res(502, &[])).error);
    let started = outcome_of(&res(200, &[("content-type", "application/grpc")]));
    assert_eq!(
        (started.http, started.grpc, started.error),
        (Some(200), Some(0), false)
    );
    let refused = outcome_of(&res(
        200,
        &[("content-type", "application/grpc"), ("grpc-status", "8")],
    ));
    assert_eq!((refused.grpc, refused.error), (Some(8), false));
    let down = outcome_of(&res(200, &[("grpc-status", "14")]));
    assert_eq!((down.grpc, down.error), (Some(14), true));
    let garbled = outcome_of(&res(200, &[("grpc-status", "x")]));
    assert_eq!(garbled.grpc, Some(2));
    assert_eq!(grpc_code_name(8), "RESOURCE_EXHAUSTED");
    assert_eq!(grpc_code_name(99), "UNKNOWN");
}

#[tokio::test]
async fn made_up_paths_share_one_series() {
    use tower::{Layer as _, ServiceExt as _};
    let m = Arc::new(RequestMetrics::new("order"));
    // A gRPC server that knows one method and answers UNIMPLEMENTED to
    // every other path, as tonic's router does.
    let svc = tower::service_fn(|req: http::Request<()>| async move {
        let code = if req.uri().path() == "/o.S/Known" {
            "0"
        } else {
            "12"
        };
        Ok::<_, std::convert::Infallible>(
            http::Response::builder()
                .header("content-type", "application/grpc")
                .header("grpc-status", code)
                .body(())
                .expect("response"),
        )
    });
    let svc = RecordLayer::new(m.clone()).layer(svc);
    for path in (0..50)
        .map(|i| format!("/made.Up/M{i}"))
        .chain(["/o.S/Known".into()])
    {
        let req = http::Request::builder()
            .uri(path)
            .header("content-type", "application/grpc")
            .body(())
            .expect("request");
        svc.clone().oneshot(req).await.expect("answered");
    }
    let out = text(&m);
    assert!(!out.contains("made.Up"), "{out}");
    assert!(out.contains(
        r#"order_requests_total{protocol="grpc",route="unmatched",code="200",grpc_code="UNIMPLEMENTED"} 50"#
    ));
    assert!(out.contains(
        r#"order_requests_total{protocol="grpc",route="/o.S/Known",code="200",grpc_code="OK"} 1"#
    ));
}

#[test]
fn http2_over_tls_is_h2_and_in_clear_h2c() {
    let req = |tls: bool| {
        let mut r = http::Request::builder()
            .version(http::Version::HTTP_2)
            .body(())
            .expect("request");
        if tls {
            r.extensions_mut().insert(tls::OverTls);
        }
        r
    };
    assert_eq!(protocol_of(&req(false)), "h2c");
    assert_eq!(protocol_of(&req(true)), "h2");
}

#[test]
fn collectors_join_the_exposition_and_are_read_at_each_scrape() {
    #[derive(Debug)]
    struct Open(Arc<std::sync::atomic::AtomicU64>);
    impl Collector for Open {
        fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            let n = self.0.load(std::sync::atomic::Ordering::Relaxed);
            encode_family(
                &mut e,
                "thing_open",
                "Things open",
                None,
                Kind::Gauge,
                [([("listener", "rest".to_owned())], n)],
            )
        }
    }
    let m = RequestMetrics::new("x");
    let n = Arc::new(std::sync::atomic::AtomicU64::new(3));
    m.add_collector(Open(n.clone()));
    assert!(text(&m).contains("thing_open{listener=\"rest\"} 3"));
    n.store(5, std::sync::atomic::Ordering::Relaxed);
    assert!(text(&m).contains("thing_open{listener=\"rest\"} 5"));
}

#[test]
fn this_process_has_cpu_time_and_memory() {
    let s = process_stats();
    assert!(s.resident_bytes > 0);
    assert!(s.max_resident_bytes >= s.resident_bytes);
}
