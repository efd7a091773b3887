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
            sampling: telemetry::sampling::Sampling::default(),
            log_format: "json".into(),
        })
        .expect("the services' tracing subscriber");
        // Kept for the life of the process, as in the services' main.
        std::mem::forget(guard);
    });
}

/// order-service, serving in this process.
pub struct OrderService {
    pub rest: SocketAddr,
    pub grpc: SocketAddr,
    pub tcp: SocketAddr,
    /// The HTTP/3 listener (UDP).
    pub h3: SocketAddr,
    /// Its runtime, whose counters `hop_calls --runtime` reads.
    #[allow(dead_code)]
    pub runtime: tokio::runtime::Handle,
}

/// order-service in memory, serving from a thread of its own (a 2-thread
/// runtime) until the process ends. The services' tracing subscriber is
/// installed first.
/// Whether `HOP_BREAKDOWN` asks for each call's parts to be timed (both
/// services' settings on): for counting what the timing costs.
pub fn breakdown() -> bool {
    std::env::var_os("HOP_BREAKDOWN").is_some()
}

pub fn order_service() -> OrderService {
    subscriber();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("order-service's runtime");
        let runtime = rt.handle().clone();
        rt.block_on(async move {
            let mut settings = order_service::Settings::for_tests(None);
            settings.server_timing = breakdown();
            let app = order_service::Application::build(settings)
                .await
                .expect("order-service builds");
            tx.send(OrderService {
                rest: app.rest_addr(),
                grpc: app.grpc_addr(),
                tcp: app.tcp_addr(),
                h3: app.h3_addr().expect("an HTTP/3 listener"),
                runtime,
            })
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
pub fn upstreams(order: &OrderService) -> Upstreams {
    let s = user_service::Settings {
        order_rest_url: format!("http://{}", order.rest).parse().expect("a URL"),
        order_grpc_url: format!("http://{}", order.grpc).parse().expect("a URL"),
        order_tcp_addr: order.tcp.to_string(),
        order_h3_addr: order.h3.to_string(),
        upstream_breakdown: breakdown(),
        ..Default::default()
    };
    let metrics = Arc::new(Metrics::new("memory", usize::from(s.pool_size)));
    let s = user_service::startup::upstream_settings(&s).expect("the settings");
    Upstreams::new(&s, metrics).expect("the adapters")
}
