//! One trace per request across both services, on every transport: the two
//! real binaries export over OTLP to a collector inside the test, and for
//! each transport the order-service span that answered is a child of
//! user-service's `upstream.call` span, with the SQL query under it.

use std::time::Duration;

use telemetry::receiver::{Collector, ReceivedSpan};
use user_service::upstream::Transport;

use crate::helpers::{fixed_user, orders_database, start_binary as start, users_database};

fn descends_from(spans: &[ReceivedSpan], s: &ReceivedSpan, ancestor: &ReceivedSpan) -> bool {
    let mut cur = s;
    while !cur.parent_span_id.is_empty() {
        if cur.parent_span_id == ancestor.span_id {
            return true;
        }
        match spans.iter().find(|p| p.span_id == cur.parent_span_id) {
            Some(p) => cur = p,
            None => return false,
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transport_carries_one_trace_from_user_service_to_postgres() {
    let (orders_db, users_db) = (orders_database().await, users_database().await);
    let collector = Collector::start().await.unwrap();
    let users_bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_user-service"));
    let orders_bin = users_bin.with_file_name("order-service");
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.clone()),
        ("OTEL_TRACES_SAMPLER", "parentbased_always_on".to_owned()),
    ];
    let mut env: Vec<(&str, String)> = otel.to_vec();
    env.extend([
        ("ORDER_REST_ADDR", "127.0.0.1:0".to_owned()),
        ("ORDER_GRPC_ADDR", "127.0.0.1:0".to_owned()),
        ("ORDER_TCP_ADDR", "127.0.0.1:0".to_owned()),
        ("ORDER_DATABASE_URL", orders_db.url.clone()),
    ]);
    let orders = start(&orders_bin, &env, "order-service ready to serve").await;
    let mut env: Vec<(&str, String)> = otel.to_vec();
    env.extend([
        ("USER_REST_ADDR", "127.0.0.1:0".to_owned()),
        ("USER_GRPC_ADDR", "127.0.0.1:0".to_owned()),
        ("USER_DATABASE_URL", users_db.url.clone()),
        (
            "USER_ORDER_REST_URL",
            format!("http://{}", orders.addr("rest")),
        ),
        (
            "USER_ORDER_GRPC_URL",
            format!("http://{}", orders.addr("grpc")),
        ),
        ("USER_ORDER_TCP_ADDR", orders.addr("tcp")),
        ("USER_POOL_SIZE", "2".to_owned()),
    ]);
    let users = start(&users_bin, &env, "user-service listening").await;

    let http = reqwest::Client::new();
    let user = fixed_user(10).id;
    for t in Transport::ALL {
        let res = http
            .get(format!(
                "http://{}/v1/users/{user}/orders?limit=5&via={}",
                users.addr("rest"),
                t.name()
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{t}");
    }
    for p in [users, orders] {
        let exit = p.sigterm().await;
        assert!(exit.success(), "exited with {exit}");
    }

    let spans = collector
        .wait_for(Duration::from_secs(10), |s| {
            s.iter().filter(|s| s.name == "db.list_orders").count() >= Transport::ALL.len()
        })
        .await;
    for t in Transport::ALL {
        let upstream = spans
            .iter()
            .find(|s| s.name == "upstream.call" && s.attr("via") == Some(t.name()))
            .unwrap_or_else(|| panic!("{t}: no upstream.call span"));
        assert_eq!(upstream.service, "user-service");
        assert!(upstream.attr("upstream_us").is_some(), "{t}: {upstream:?}");
        assert!(upstream.attr("pool_wait_us").is_some(), "{t}: {upstream:?}");
        assert!(
            upstream.attr("net.bytes_read").is_some(),
            "{t}: {upstream:?}"
        );
        let trace: Vec<&ReceivedSpan> = spans
            .iter()
            .filter(|s| s.trace_id == upstream.trace_id)
            .collect();
        // The user-service server span that received the request is the root.
        assert!(
            trace.iter().any(|s| s.service == "user-service"
                && s.name == "GET /v1/users/{id}/orders"
                && s.parent_span_id.is_empty()),
            "{t}: no user-service root span in the trace"
        );
        let server = trace
            .iter()
            .find(|s| s.service == "order-service" && s.parent_span_id == upstream.span_id)
            .unwrap_or_else(|| {
                panic!("{t}: no order-service span is a child of the upstream call")
            });
        let sql = trace
            .iter()
            .find(|s| s.service == "order-service" && s.name == "db.list_orders")
            .unwrap_or_else(|| panic!("{t}: no SQL span in the trace"));
        assert!(
            descends_from(&spans, sql, server),
            "{t}: the SQL span is not under order-service's server span"
        );
    }
    orders_db.drop_database().await.unwrap();
    users_db.drop_database().await.unwrap();
}
