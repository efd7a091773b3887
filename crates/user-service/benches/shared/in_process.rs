//! order-service in this process, and user-service's adapters pointed at
//! it: what the hop benchmark and the `hop_calls` example (callgrind's
//! subject) both run. Included by path from each.

use std::net::SocketAddr;
use std::sync::Arc;

use user_service::metrics::Metrics;
use user_service::upstream::Upstreams;

/// The tracing subscriber both services install (`telemetry::init`, no
/// exporter, JSON logs at `RUST_LOG` or info), once for the process. Without
/// one, every span the HTTP/2 stack enters falls back to the `log` crate
/// (tracing's `log` feature, which sqlx and axum turn on), a cost the
/// services never pay.
fn subscriber() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let guard = telemetry::init(&telemetry::TelemetrySettings {
            service_name: "hop".into(),
            service_version: env!("CARGO_PKG_VERSION").into(),
            otlp_endpoint: None,
            sampling_ratio: 1.0,
            log_format: "json".into(),
        })
        .expect("the services' tracing subscriber");
        // Kept for the life of the process, as in the services' main.
        std::mem::forget(guard);
    });
}

/// order-service in memory, serving from a thread of its own (a 2-thread
/// runtime) until the process ends: its REST, gRPC and raw-TCP addresses.
/// The services' tracing subscriber is installed first.
pub fn order_service() -> (SocketAddr, SocketAddr, SocketAddr) {
    subscriber();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("order-service's runtime");
        rt.block_on(async move {
            let app = order_service::Application::build(order_service::Settings::for_tests(None))
                .await
                .expect("order-service builds");
            tx.send((app.rest_addr(), app.grpc_addr(), app.tcp_addr()))
                .expect("the caller waits");
            app.run_until_stopped(std::future::pending())
                .await
                .expect("order-service serves");
        });
    });
    rx.recv().expect("order-service starts")
}

/// Every transport's adapter, with user-service's default settings,
/// pointed at order-service. Call it inside a Tokio runtime.
pub fn upstreams(rest: SocketAddr, grpc: SocketAddr, tcp: SocketAddr) -> Upstreams {
    let s = user_service::Settings {
        order_rest_url: format!("http://{rest}").parse().expect("a URL"),
        order_grpc_url: format!("http://{grpc}").parse().expect("a URL"),
        order_tcp_addr: tcp.to_string(),
        ..Default::default()
    };
    let metrics = Arc::new(Metrics::new("memory", usize::from(s.pool_size)));
    Upstreams::new(&s, metrics).expect("the adapters")
}
