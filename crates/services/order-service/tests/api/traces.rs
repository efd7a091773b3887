//! Traces: the order-service binary, exporting over OTLP to a collector inside
//! the test, continues the caller's trace on every API (HTTP headers, gRPC
//! metadata, the per-message context of bidi lookups and raw-TCP frames), and
//! the SQL query sits under its server span. Sampling 0 exports nothing.

use std::collections::HashMap;
use std::time::Duration;

use prost::Message as _;
use proto::order::v2 as pb2;
use telemetry::receiver::{Collector, ReceivedSpan};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::helpers;

const USER: &str = "00000000-0000-0000-0000-000000000010";

struct Child {
    proc: helpers::Proc,
    rest: String,
    grpc: String,
    tcp: String,
}

/// Starts the real binary on Postgres, exporting to `collector`, new
/// traces kept at `ratio`.
async fn start(db_url: &str, collector: &Collector, ratio: &str) -> Child {
    start_sampling(db_url, collector, "parentbased_traceidratio", Some(ratio)).await
}

/// The same with any sampler (`OTEL_TRACES_SAMPLER`, `_ARG`).
async fn start_sampling(
    db_url: &str,
    collector: &Collector,
    sampler: &str,
    arg: Option<&str>,
) -> Child {
    let mut env = vec![
        ("ORDER_DATABASE_URL", db_url),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
        ("OTEL_TRACES_SAMPLER", sampler),
    ];
    if let Some(a) = arg {
        env.push(("OTEL_TRACES_SAMPLER_ARG", a));
    }
    let proc = helpers::start_binary(&env).await;
    Child {
        rest: proc.addr("rest"),
        grpc: proc.addr("grpc"),
        tcp: proc.addr("tcp"),
        proc,
    }
}

async fn stop(c: Child) {
    let exit = c.proc.sigterm().await;
    assert!(exit.success(), "order-service exited with {exit}");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A caller's span: a fixed trace id per API, so each API's spans can be found.
fn traceparent(n: u8) -> (String, String, String) {
    let trace = format!("{:032x}", 0xABCD_0000_u128 + u128::from(n));
    let span = format!("{:016x}", 0x1234_0000_u64 + u64::from(n));
    (format!("00-{trace}-{span}-01"), trace, span)
}

fn list(n: i32) -> pb2::ListOrdersRequest {
    pb2::ListOrdersRequest {
        user_id: USER.into(),
        page_size: n,
        ..Default::default()
    }
}

fn lookup(id: u64, parent: &str) -> pb2::LookupOrdersRequest {
    pb2::LookupOrdersRequest {
        request_id: id,
        user_id: USER.into(),
        page_size: 5,
        trace_context: HashMap::from([("traceparent".to_owned(), parent.to_owned())]),
        ..Default::default()
    }
}

/// Sends one request per API, each under its own caller trace.
async fn one_call_per_api(c: &Child) -> Vec<(&'static str, String, String)> {
    let mut sent = Vec::new();
    let http = reqwest::Client::builder().http1_only().build().unwrap();
    let (tp, trace, span) = traceparent(1);
    let res = http
        .get(format!(
            "http://{}/v2/orders?user_id={USER}&limit=5",
            c.rest
        ))
        .header("traceparent", tp)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    sent.push(("rest", trace, span));

    let mut grpc =
        pb2::order_service_client::OrderServiceClient::connect(format!("http://{}", c.grpc))
            .await
            .unwrap();
    let (tp, trace, span) = traceparent(2);
    let mut req = tonic::Request::new(list(5));
    req.metadata_mut()
        .insert("traceparent", tp.parse().unwrap());
    grpc.list_orders(req).await.unwrap();
    sent.push(("grpc", trace, span));

    let (tp, trace, span) = traceparent(3);
    let mut answers = grpc
        .lookup_orders(futures::stream::iter([lookup(1, &tp)]))
        .await
        .unwrap()
        .into_inner();
    assert!(answers.message().await.unwrap().unwrap().error.is_none());
    sent.push(("bidi", trace, span));

    let (tp, trace, span) = traceparent(4);
    let mut tcp = tokio::net::TcpStream::connect(&c.tcp).await.unwrap();
    tcp.write_all(&order_service::tcp::encode_frame(&lookup(2, &tp)))
        .await
        .unwrap();
    let len = tcp.read_u32().await.unwrap() as usize;
    let mut buf = vec![0; len];
    tcp.read_exact(&mut buf).await.unwrap();
    assert!(
        pb2::LookupOrdersResponse::decode(&buf[..])
            .unwrap()
            .error
            .is_none()
    );
    sent.push(("tcp", trace, span));
    sent
}

fn descends_from<'a>(
    spans: &'a [ReceivedSpan],
    mut s: &'a ReceivedSpan,
    ancestor: &ReceivedSpan,
) -> bool {
    while !s.parent_span_id.is_empty() {
        if s.parent_span_id == ancestor.span_id {
            return true;
        }
        match spans.iter().find(|p| p.span_id == s.parent_span_id) {
            Some(p) => s = p,
            None => return false,
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_continues_the_callers_trace_down_to_sql() {
    let db = helpers::orders_database().await;
    let collector = Collector::start().await.unwrap();
    let child = start(&db.url, &collector, "1.0").await;
    let sent = one_call_per_api(&child).await;
    stop(child).await;
    let spans = collector
        .wait_for(Duration::from_secs(10), |s| {
            s.iter().filter(|s| s.name == "db.list_orders").count() >= sent.len()
        })
        .await;
    for (api, trace, caller) in &sent {
        let in_trace: Vec<&ReceivedSpan> = spans
            .iter()
            .filter(|s| hex(&s.trace_id) == *trace)
            .collect();
        assert!(!in_trace.is_empty(), "{api}: no span in the caller's trace");
        assert!(in_trace.iter().all(|s| s.service == "order-service"));
        let server = in_trace
            .iter()
            .find(|s| hex(&s.parent_span_id) == *caller)
            .unwrap_or_else(|| {
                panic!("{api}: no span is a child of the caller's span: {in_trace:#?}")
            });
        let sql = in_trace
            .iter()
            .find(|s| s.name == "db.list_orders")
            .unwrap_or_else(|| panic!("{api}: no SQL span in the trace"));
        assert_eq!(sql.attr("db.system"), Some("postgresql"));
        assert!(
            descends_from(&spans, sql, server),
            "{api}: the SQL span is not under the server span"
        );
        // A REST answer's serialization is a span of its own, exported
        // though the log leaves it out (see `telemetry::CODEC`).
        if *api == "rest" {
            let encode = in_trace
                .iter()
                .find(|s| s.name == "encode")
                .unwrap_or_else(|| panic!("rest: no encode span in the trace: {in_trace:#?}"));
            assert_eq!(encode.attr("format"), Some("json"));
            assert!(descends_from(&spans, encode, server));
        }
    }
    db.drop_database().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_ratio_zero_exports_nothing() {
    let db = helpers::orders_database().await;
    let collector = Collector::start().await.unwrap();
    let child = start(&db.url, &collector, "0").await;
    let http = reqwest::Client::new();
    for _ in 0..5 {
        let res = http
            .get(format!(
                "http://{}/v2/orders?user_id={USER}&limit=5",
                child.rest
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
    }
    stop(child).await;
    // The exporter flushed at shutdown: whatever was sampled has arrived.
    assert_eq!(collector.spans(), Vec::new());
    db.drop_database().await.unwrap();
}

/// Sends one listing with `traceparent` (or none), expecting a 200.
async fn listed(http: &reqwest::Client, child: &Child, traceparent: Option<&str>) {
    let mut req = http.get(format!(
        "http://{}/v2/orders?user_id={USER}&limit=5",
        child.rest
    ));
    if let Some(tp) = traceparent {
        req = req.header("traceparent", tp);
    }
    assert_eq!(req.send().await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_based_samplers_follow_the_caller_and_plain_ones_do_not() {
    let db = helpers::orders_database().await;
    let http = reqwest::Client::new();
    let (sampled, _, _) = traceparent(7);
    let unsampled = sampled.replace("-01", "-00");
    // A request's traceparent (or none), and whether its trace is kept.
    type Request<'a> = (Option<&'a str>, bool);
    let cases: [(&str, [Request; 3]); 3] = [
        (
            "parentbased_always_off",
            [
                (Some(&sampled), true),
                (Some(&unsampled), false),
                (None, false),
            ],
        ),
        (
            "parentbased_always_on",
            [
                (Some(&sampled), true),
                (Some(&unsampled), false),
                (None, true),
            ],
        ),
        (
            "always_on",
            [
                (Some(&sampled), true),
                (Some(&unsampled), true),
                (None, true),
            ],
        ),
    ];
    for (sampler, requests) in cases {
        for (parent, kept) in requests {
            let collector = Collector::start().await.unwrap();
            let child = start_sampling(&db.url, &collector, sampler, None).await;
            listed(&http, &child, parent).await;
            stop(child).await;
            // Flushed at shutdown: whatever was sampled has arrived.
            let spans = collector.spans();
            assert_eq!(
                !spans.is_empty(),
                kept,
                "{sampler} with traceparent {parent:?}: {} spans",
                spans.len()
            );
        }
    }
    db.drop_database().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_line_inside_a_request_names_its_trace_and_span() {
    let db = helpers::orders_database().await;
    let collector = Collector::start().await.unwrap();
    // On Postgres with a debug directive, which once silenced the log after
    // the migrations: the ready line must still come (start_binary waits
    // for it).
    let proc = helpers::start_binary(&[
        ("ORDER_DATABASE_URL", &db.url),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.endpoint),
        // tower-http logs each answer at debug, inside the request's span.
        ("RUST_LOG", "info,tower_http=debug"),
    ])
    .await;
    let (tp, trace, _) = traceparent(9);
    let rest = proc.addr("rest");
    let res = reqwest::Client::new()
        .get(format!("http://{rest}/v2/orders?user_id={USER}&limit=5"))
        .header("traceparent", tp)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let lines = proc.log_lines();
    assert!(proc.sigterm().await.success());
    let spans = collector.spans();
    let logs: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let in_request: Vec<&serde_json::Value> =
        logs.iter().filter(|v| v["trace_id"] == trace).collect();
    assert!(
        !in_request.is_empty(),
        "no log line names the caller's trace {trace}:\n{}",
        lines.join("\n")
    );
    // Each names a span of that trace that the collector received.
    for v in &in_request {
        let span_id = v["span_id"]
            .as_str()
            .expect("a span_id beside the trace_id");
        assert!(
            spans
                .iter()
                .any(|s| hex(&s.trace_id) == trace && hex(&s.span_id) == span_id),
            "{v}: no exported span {span_id} in trace {trace}"
        );
    }
    // A line outside any span names none.
    assert!(
        logs.iter()
            .any(|v| v.get("trace_id").is_none() && v.get("span_id").is_none()),
        "every line names a trace:\n{}",
        lines.join("\n")
    );
    db.drop_database().await.unwrap();
}

/// The server span that is a child of the caller span `caller`.
fn served<'a>(spans: &'a [ReceivedSpan], caller: &str) -> &'a ReceivedSpan {
    spans
        .iter()
        .find(|s| hex(&s.parent_span_id) == caller)
        .unwrap_or_else(|| panic!("no span under the caller's span {caller}: {spans:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_mistake_is_named_by_its_route_and_is_not_a_server_error() {
    let db = helpers::orders_database().await;
    let collector = Collector::start().await.unwrap();
    let child = start(&db.url, &collector, "1.0").await;
    let http = reqwest::Client::new();
    let unknown = "00000000-0000-0000-0000-00000000abcd";
    let mut callers = Vec::new();
    for (n, path, status) in [
        (20, format!("/v2/orders/{unknown}"), 404),
        (21, "/no/such/route".to_owned(), 404),
        (22, "/v2/orders?user_id=not-a-uuid".to_owned(), 400),
    ] {
        let (tp, _, span) = traceparent(n);
        let res = http
            .get(format!("http://{}{path}", child.rest))
            .header("traceparent", tp)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), status, "{path}");
        callers.push(span);
    }
    let mut grpc =
        pb2::order_service_client::OrderServiceClient::connect(format!("http://{}", child.grpc))
            .await
            .unwrap();
    let (tp, _, span) = traceparent(23);
    let mut req = tonic::Request::new(pb2::GetOrderRequest {
        id: unknown.into(),
        ..Default::default()
    });
    req.metadata_mut()
        .insert("traceparent", tp.parse().unwrap());
    let e = grpc.get_order(req).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    callers.push(span);
    stop(child).await;

    let spans = collector.spans();
    let served: Vec<&ReceivedSpan> = callers.iter().map(|c| served(&spans, c)).collect();
    let [by_id, unrouted, bad_query, get_order] = served[..] else {
        unreachable!("four calls")
    };
    // Named by the route template, never by the path with its id.
    assert_eq!(by_id.name, "GET /v2/orders/{id}");
    assert_eq!(by_id.attr("http.route"), Some("/v2/orders/{id}"));
    assert_eq!(by_id.attr("http.response.status_code"), Some("404"));
    // No route matched: the method alone.
    assert_eq!(unrouted.name, "GET");
    assert_eq!(unrouted.attr("http.route"), None);
    assert_eq!(unrouted.attr("url.path"), Some("/no/such/route"));
    assert_eq!(bad_query.name, "GET /v2/orders");
    assert_eq!(bad_query.attr("http.response.status_code"), Some("400"));
    assert_eq!(get_order.name, "order.v2.OrderService/GetOrder");
    assert_eq!(get_order.attr("rpc.grpc.status_code"), Some("5"));
    for s in [by_id, unrouted, bad_query, get_order] {
        assert_eq!((s.kind, s.status), ("server", "unset"), "{s:#?}");
    }
    db.drop_database().await.unwrap();
}
