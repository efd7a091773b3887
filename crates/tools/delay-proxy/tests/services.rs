//! End to end: user-service → delay proxy → order-service, both services in
//! this process and in memory, every order-service port behind one proxy
//! with three routes (as the lab runs them). Each transport answers the same
//! orders it answers directly, and user-service's own timing of the call
//! includes the emulated round trip.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use delay_proxy::{Config, Proxy, Route};

const ONE_WAY: Duration = Duration::from_millis(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_service_reaches_order_service_through_the_proxy_on_several_transports() {
    let orders = order_service::Application::build(order_service::Settings::for_tests(None))
        .await
        .expect("order-service builds");
    let (rest, grpc, tcp) = (orders.rest_addr(), orders.grpc_addr(), orders.tcp_addr());
    tokio::spawn(orders.run_until_stopped(std::future::pending()));

    let proxy = Proxy::start(
        Config::one_way(ONE_WAY),
        &[
            Route::any_port(rest),
            Route::any_port(grpc),
            Route::any_port(tcp),
        ],
    )
    .expect("the proxy binds");
    let settings = user_service::Settings {
        order_rest_url: format!("http://{}", proxy.local_addr(0)).parse().unwrap(),
        order_grpc_url: format!("http://{}", proxy.local_addr(1)).parse().unwrap(),
        order_tcp_addr: proxy.local_addr(2).to_string(),
        ..Default::default()
    };
    let users = user_service::Application::build(settings)
        .await
        .expect("user-service builds");
    let user_rest = users.rest_addr();
    tokio::spawn(users.run_until_stopped(std::future::pending()));

    let http = reqwest::Client::builder().http1_only().build().unwrap();
    let user = dataset::fixed_user_id(10);
    for via in ["h1-json", "h2c-json", "grpc", "grpc-bidi", "tcp-proto"] {
        let mut upstream = Vec::new();
        // Twice: the first call also opens the connection.
        for _ in 0..2 {
            let res = http
                .get(format!(
                    "http://{user_rest}/v1/users/{user}/orders?via={via}&limit=10"
                ))
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200, "over {via}");
            let micros: u64 = res.headers()["x-upstream-micros"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            let body: serde_json::Value = res.json().await.unwrap();
            let n = body["orders"].as_array().map_or(0, Vec::len);
            assert_eq!(n, 10, "over {via}: {body}");
            upstream.push(Duration::from_micros(micros));
        }
        for u in upstream {
            assert!(
                u >= ONE_WAY * 2,
                "over {via} user-service timed {u:?}, less than the {:?} round trip",
                ONE_WAY * 2
            );
        }
    }
    let st = proxy.stats();
    assert!(st.connections >= 5, "{st:?}");
    assert_eq!(st.upstream_failures, 0);
}
