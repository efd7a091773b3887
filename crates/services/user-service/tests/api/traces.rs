//! One trace per request across both services, on every transport: the two
//! real binaries export over OTLP to a collector inside the test. For each
//! transport the order-service span that answered is a child of
//! user-service's client span, with the SQL query under it; every span is
//! named and described by the OpenTelemetry semantic conventions; and when
//! order-service's store is down, the failure is an error on every span
//! that saw it, with a message.

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

/// Both binaries, exporting every span to one collector.
struct Stack {
    collector: Collector,
    orders: testkit::process::Proc,
    users: testkit::process::Proc,
    dbs: (testkit::postgres::TestDb, testkit::postgres::TestDb),
}

impl Stack {
    /// order-service reaches its database at `orders_db_url(url)`: the
    /// database's own URL, or one through a proxy the test can cut.
    async fn start(orders_db_url: impl FnOnce(&str) -> String) -> Stack {
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
            ("ORDER_H3_ADDR", "127.0.0.1:0".to_owned()),
            ("ORDER_DATABASE_URL", orders_db_url(&orders_db.url)),
            // A store that went away is a 503 / UNAVAILABLE well within
            // user-service's upstream timeout.
            ("ORDER_DATABASE_ACQUIRE_TIMEOUT_MS", "500".to_owned()),
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
            ("USER_ORDER_H3_ADDR", orders.addr("h3")),
            ("USER_POOL_SIZE", "2".to_owned()),
        ]);
        let users = start(&users_bin, &env, "user-service listening").await;
        Stack {
            collector,
            orders,
            users,
            dbs: (orders_db, users_db),
        }
    }

    /// One user's orders over every transport at once: each answer's status.
    async fn orders_over_every_transport(&self) -> Vec<(Transport, u16)> {
        let http = reqwest::Client::new();
        let user = fixed_user(10).id;
        let rest = self.users.addr("rest");
        futures::future::join_all(Transport::ALL.map(|t| {
            let (http, rest) = (&http, &rest);
            async move {
                let res = http
                    .get(format!(
                        "http://{rest}/v1/users/{user}/orders?limit=5&via={}",
                        t.name()
                    ))
                    .send()
                    .await
                    .unwrap();
                (t, res.status().as_u16())
            }
        }))
        .await
    }

    /// Stops both services (which flushes their spans), then the spans
    /// received once `done` holds (10 s at most).
    async fn stop(self, done: impl Fn(&[ReceivedSpan]) -> bool) -> Vec<ReceivedSpan> {
        for p in [self.users, self.orders] {
            let exit = p.sigterm().await;
            assert!(exit.success(), "exited with {exit}");
        }
        let spans = self.collector.wait_for(Duration::from_secs(10), done).await;
        let (orders_db, users_db) = self.dbs;
        orders_db.drop_database().await.unwrap();
        users_db.drop_database().await.unwrap();
        spans
    }
}

/// The client span of the call over `t`.
fn client_span(spans: &[ReceivedSpan], t: Transport) -> &ReceivedSpan {
    spans
        .iter()
        .find(|s| {
            s.service == "user-service" && s.kind == "client" && s.attr("via") == Some(t.name())
        })
        .unwrap_or_else(|| panic!("{t}: no client span"))
}

/// user-service's server span of the request whose call `client` made:
/// the root of its trace.
fn users_server_span<'a>(spans: &'a [ReceivedSpan], client: &ReceivedSpan) -> &'a ReceivedSpan {
    spans
        .iter()
        .find(|s| {
            s.trace_id == client.trace_id
                && s.service == "user-service"
                && s.kind == "server"
                && s.parent_span_id.is_empty()
        })
        .unwrap_or_else(|| panic!("{}: no user-service root span in the trace", client.name))
}

/// order-service's span that answered `client`'s call.
fn orders_server_span<'a>(spans: &'a [ReceivedSpan], client: &ReceivedSpan) -> &'a ReceivedSpan {
    spans
        .iter()
        .find(|s| s.service == "order-service" && s.parent_span_id == client.span_id)
        .unwrap_or_else(|| {
            panic!(
                "{}: no order-service span under the client span",
                client.name
            )
        })
}

/// The name both sides give a transport's call, and its RPC system and
/// method (`None` for the REST routes).
fn expected(
    t: Transport,
) -> (
    &'static str,
    Option<(&'static str, &'static str, &'static str)>,
) {
    const V2: &str = "order.v2.OrderService";
    match t {
        Transport::H1Json
        | Transport::H1JsonClose
        | Transport::H2cJson
        | Transport::H1Proto
        | Transport::H2cProto
        | Transport::H2cProtoTuned
        | Transport::H3Json
        | Transport::H3Proto => ("GET /v2/orders", None),
        Transport::ConnectH1Proto | Transport::ConnectH2cProto => (
            "order.v2.OrderService/ListOrders",
            Some(("connect_rpc", V2, "ListOrders")),
        ),
        Transport::Grpc | Transport::GrpcTuned | Transport::GrpcH3 => (
            "order.v2.OrderService/ListOrders",
            Some(("grpc", V2, "ListOrders")),
        ),
        Transport::GrpcStream | Transport::GrpcStreamTuned => (
            "order.v2.OrderService/StreamOrders",
            Some(("grpc", V2, "StreamOrders")),
        ),
        Transport::GrpcBidi | Transport::GrpcBidiTuned => (
            "order.v2.OrderService/LookupOrders",
            Some(("grpc", V2, "LookupOrders")),
        ),
        Transport::TcpProto => (
            "order.tcp/LookupOrders",
            Some(("order_tcp", "order.tcp", "LookupOrders")),
        ),
        Transport::GrpcV1 => (
            "order.v1.OrderService/ListOrders",
            Some(("grpc", "order.v1.OrderService", "ListOrders")),
        ),
    }
}

/// The port of order-service's listener that `t` calls.
fn port_called(stack_ports: &[(&str, String)], t: Transport) -> String {
    let listener = match expected(t) {
        _ if t.is_quic() => "h3",
        (_, None) | (_, Some(("connect_rpc", _, _))) => "rest",
        (_, Some(("order_tcp", _, _))) => "tcp",
        _ => "grpc",
    };
    let addr = &stack_ports
        .iter()
        .find(|(k, _)| *k == listener)
        .expect("a listener")
        .1;
    addr.rsplit_once(':').expect("host:port").1.to_owned()
}

fn attrs<'a>(s: &'a ReceivedSpan, keys: &[&str]) -> Vec<(String, Option<&'a str>)> {
    keys.iter().map(|k| ((*k).to_owned(), s.attr(k))).collect()
}

fn expect_attrs(s: &ReceivedSpan, want: &[(&str, &str)], what: &str) {
    let keys: Vec<&str> = want.iter().map(|(k, _)| *k).collect();
    let want: Vec<(String, Option<&str>)> = want
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Some(*v)))
        .collect();
    assert_eq!(attrs(s, &keys), want, "{what}: {s:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transport_carries_one_trace_from_user_service_to_postgres() {
    let stack = Stack::start(str::to_owned).await;
    for (t, status) in stack.orders_over_every_transport().await {
        assert_eq!(status, 200, "{t}");
    }
    let spans = stack
        .stop(|s| s.iter().filter(|s| s.name == "db.list_orders").count() >= Transport::ALL.len())
        .await;
    for t in Transport::ALL {
        let client = client_span(&spans, t);
        assert!(client.attr("upstream_us").is_some(), "{t}: {client:?}");
        assert!(client.attr("pool_wait_us").is_some(), "{t}: {client:?}");
        assert!(client.attr("net.bytes_read").is_some(), "{t}: {client:?}");
        let root = users_server_span(&spans, client);
        assert!(
            descends_from(&spans, client, root),
            "{t}: the call is not under the request"
        );
        let server = orders_server_span(&spans, client);
        let sql = spans
            .iter()
            .find(|s| {
                s.trace_id == client.trace_id
                    && s.service == "order-service"
                    && s.name == "db.list_orders"
            })
            .unwrap_or_else(|| panic!("{t}: no SQL span in the trace"));
        assert!(
            descends_from(&spans, sql, server),
            "{t}: the SQL span is not under order-service's server span"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transports_spans_are_named_and_described_by_the_semantic_conventions() {
    let stack = Stack::start(str::to_owned).await;
    let ports = [
        ("rest", stack.orders.addr("rest")),
        ("grpc", stack.orders.addr("grpc")),
        ("tcp", stack.orders.addr("tcp")),
        ("h3", stack.orders.addr("h3")),
    ];
    for (t, status) in stack.orders_over_every_transport().await {
        assert_eq!(status, 200, "{t}");
    }
    let spans = stack
        .stop(|s| s.iter().filter(|s| s.name == "db.list_orders").count() >= Transport::ALL.len())
        .await;
    for t in Transport::ALL {
        let (name, rpc) = expected(t);
        let client = client_span(&spans, t);
        let root = users_server_span(&spans, client);
        let server = orders_server_span(&spans, client);

        // user-service's server span: the route template, not the path.
        assert_eq!(root.name, "GET /v1/users/{id}/orders", "{t}");
        expect_attrs(
            root,
            &[
                ("http.request.method", "GET"),
                ("http.route", "/v1/users/{id}/orders"),
                ("http.response.status_code", "200"),
            ],
            t.name(),
        );
        assert_eq!(root.status, "unset", "{t}: {root:#?}");

        // The client span and order-service's server span: one name.
        assert_eq!((client.name.as_str(), client.kind), (name, "client"), "{t}");
        assert_eq!((server.name.as_str(), server.kind), (name, "server"), "{t}");
        let port = port_called(&ports, t);
        expect_attrs(
            client,
            &[
                ("server.address", "127.0.0.1"),
                ("server.port", port.as_str()),
            ],
            t.name(),
        );
        match rpc {
            None => {
                for s in [client, server] {
                    expect_attrs(
                        s,
                        &[
                            ("http.request.method", "GET"),
                            ("http.response.status_code", "200"),
                        ],
                        t.name(),
                    );
                }
                expect_attrs(server, &[("http.route", "/v2/orders")], t.name());
                let url = client.attr("url.full").unwrap_or_default();
                // HTTP/3 is https: QUIC always encrypts.
                let scheme = if t.is_quic() { "https" } else { "http" };
                assert!(
                    url.starts_with(&format!("{scheme}://127.0.0.1:{port}/v2/orders?user_id=")),
                    "{t}: {url}"
                );
            }
            Some((system, service, method)) => {
                for s in [client, server] {
                    expect_attrs(
                        s,
                        &[
                            ("rpc.system", system),
                            ("rpc.service", service),
                            ("rpc.method", method),
                        ],
                        t.name(),
                    );
                    if system != "connect_rpc" {
                        expect_attrs(s, &[("rpc.grpc.status_code", "0")], t.name());
                    }
                }
                if system == "connect_rpc" {
                    expect_attrs(server, &[("http.response.status_code", "200")], t.name());
                    assert_eq!(server.attr("http.route"), None, "{t}: an RPC, not a route");
                }
            }
        }
        for s in [client, server] {
            assert_eq!(s.status, "unset", "{t}: {s:#?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_is_an_error_on_every_span_that_saw_it_with_its_message() {
    let proxy = testkit::proxy::Proxy::start("127.0.0.1:5432".parse().unwrap())
        .await
        .unwrap();
    let stack = Stack::start(|url| proxy.url_through(url)).await;
    proxy.cut();
    for (t, status) in stack.orders_over_every_transport().await {
        assert_eq!(status, 503, "{t}");
    }
    let spans = stack
        .stop(|s| {
            s.iter()
                .filter(|s| s.service == "user-service" && s.kind == "client")
                .count()
                >= Transport::ALL.len()
        })
        .await;
    for t in Transport::ALL {
        let client = client_span(&spans, t);
        let root = users_server_span(&spans, client);
        let server = orders_server_span(&spans, client);
        // user-service answered 503: its own failure to serve.
        expect_attrs(root, &[("http.response.status_code", "503")], t.name());
        // order-service's store was unavailable: 503, or UNAVAILABLE, and
        // the client saw as much.
        match expected(t).1 {
            None => {
                for s in [client, server] {
                    expect_attrs(s, &[("http.response.status_code", "503")], t.name());
                }
            }
            Some(("connect_rpc", _, _)) => {
                expect_attrs(server, &[("http.response.status_code", "503")], t.name());
                expect_attrs(
                    client,
                    &[("rpc.connect_rpc.error_code", "unavailable")],
                    t.name(),
                );
            }
            Some(_) => {
                for s in [client, server] {
                    expect_attrs(s, &[("rpc.grpc.status_code", "14")], t.name());
                }
            }
        }
        for (side, s) in [
            ("user-service", root),
            ("client", client),
            ("order-service", server),
        ] {
            assert_eq!(s.status, "error", "{t}: {side}: {s:#?}");
            assert!(
                !s.status_message.is_empty(),
                "{t}: {side}: no message: {s:#?}"
            );
        }
        assert!(
            client.status_message.contains("order-service"),
            "{t}: {}",
            client.status_message
        );
    }
}
