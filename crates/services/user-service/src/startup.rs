//! Building and running the application: the store, the adapters, both
//! listeners, one shutdown signal. REST drains through `service_kit::serve`,
//! which loses no request on an HTTP/1.1 keep-alive connection.
//!
//! [`Application::build`] binds its listeners at once (port 0 picks a free
//! port; the real one is read back), so tests know where to call before the
//! application runs.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::grpc::UserApi;
use crate::metrics::Metrics;
use crate::rest::{self, AppState};
use crate::service::Service;
use crate::settings::Settings;
use crate::store::memory::MemoryStore;
use crate::store::postgres::PgStore;
use crate::store::{Store, UserStore};
use crate::upstream::{Endpoints, UpstreamSettings, UpstreamTls, Upstreams};

/// A built, not yet running, user-service.
#[derive(Debug)]
pub struct Application {
    rest: TcpListener,
    grpc: TcpListener,
    /// /healthz, /readyz and /metrics on a port of their own, when set.
    admin: Option<TcpListener>,
    rest_addr: SocketAddr,
    grpc_addr: SocketAddr,
    state: AppState,
    /// TLS on both listeners, when the settings name a certificate.
    tls: Option<tls::ServerTls>,
    /// Every connection's time bounds, the drain's, and the HTTP/2 stream
    /// cap (REST and gRPC).
    conn: service_kit::serve::ConnLimits,
    /// Connections open at once on each listener.
    max_connections: usize,
    /// Dropped when serving ends (or the application is dropped unserved):
    /// stops following order-service's replicas.
    _following: tokio_util::sync::DropGuard,
}

/// The store the settings ask for: Postgres (migrated, optionally seeded) or
/// the in-memory data set.
pub async fn open_store(settings: &Settings) -> anyhow::Result<Store> {
    Ok(match settings.pool() {
        Some(pool) => {
            let store = PgStore::connect(&pool).await?;
            if settings.seed {
                let n = store.seed().await?;
                tracing::info!(inserted = n, "seeded the data set's users");
            }
            tracing::info!(store = "postgres", database = %pool.url.redacted(), "users are in Postgres");
            Store::Postgres(store)
        }
        None => {
            let store = MemoryStore::seeded();
            tracing::info!(
                store = "memory",
                users = store.len(),
                "users are in memory, from the data set"
            );
            Store::Memory(Arc::new(store))
        }
    })
}

/// What the order-service clients are built from: the settings that name
/// order-service, with TLS to it loaded. An `https` URL is refused when TLS
/// to order-service is off.
pub fn upstream_settings(settings: &Settings) -> anyhow::Result<UpstreamSettings> {
    let endpoints = Endpoints {
        rest_url: settings.order_rest_url.clone(),
        grpc_url: settings.order_grpc_url.clone(),
        tcp_addr: settings.order_tcp_addr.clone(),
        h3_addr: settings.order_h3_addr.clone(),
        pool_size: usize::from(settings.pool_size.max(1)),
        timeout: Duration::from_millis(settings.upstream_timeout_ms.max(1)),
        tls: match settings.order_tls_files() {
            Some(files) => Some(UpstreamTls {
                client: tls::ClientTls::load(&files).context("TLS to order-service")?,
                server_name: settings.order_tls_server_name.clone(),
            }),
            None => None,
        },
        gzip: settings.upstream_gzip,
        zstd: settings.upstream_zstd,
        breakdown: settings.upstream_breakdown,
        live: settings.liveness(),
    };
    for (var, url) in [
        ("USER_ORDER_REST_URL", &endpoints.rest_url),
        ("USER_ORDER_GRPC_URL", &endpoints.grpc_url),
    ] {
        if url.scheme_str() == Some("https") && endpoints.tls.is_none() {
            anyhow::bail!(
                "{var} is {url}, but TLS to order-service is off: set USER_ORDER_TLS_CA to the CA that signed its certificate"
            );
        }
    }
    Ok(UpstreamSettings {
        endpoints,
        default_via: settings.default_via,
        replicas: settings.order_replicas.clone(),
        resolve_every: Duration::from_millis(settings.order_resolve_interval_ms.max(1)),
        pick: settings.order_pick,
        retry_budget_pct: settings.upstream_retry_budget_pct,
    })
}

impl Application {
    /// Opens the store, prepares the adapters (they connect on first use) and
    /// binds both listeners.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        Self::build_with_resolver(settings, Arc::new(crate::upstream::balance::Dns)).await
    }

    /// The same, with order-service's replica names (if any) resolved by
    /// `resolver` rather than by DNS: a test changes its answers over time.
    pub async fn build_with_resolver(
        settings: Settings,
        resolver: Arc<dyn crate::upstream::balance::Resolve>,
    ) -> anyhow::Result<Self> {
        let store = open_store(&settings).await?;
        let metrics = Arc::new(Metrics::new(store.kind(), usize::from(settings.pool_size)));
        let upstreams = upstream_settings(&settings)
            .and_then(|s| Upstreams::new(&s, metrics.clone()))
            .context("configuring the order-service clients")?;
        tracing::info!(
            default_via = settings.default_via.name(),
            pool_size = settings.pool_size,
            timeout_ms = settings.upstream_timeout_ms,
            order_rest = %settings.order_rest_url,
            order_grpc = %settings.order_grpc_url,
            order_tcp = %settings.order_tcp_addr,
            order_h3 = %settings.order_h3_addr,
            replicas = ?settings.order_replicas,
            pick = %settings.order_pick,
            "order-service transports ready"
        );
        let following = CancellationToken::new();
        upstreams.follow_replicas(resolver, following.clone()).await;
        let tls = match settings.tls_files() {
            Some(files) => Some(tls::ServerTls::load(&files).context("setting up TLS")?),
            None => None,
        };
        let rest = TcpListener::bind(settings.rest_addr)
            .await
            .with_context(|| format!("binding REST to {}", settings.rest_addr))?;
        let grpc = TcpListener::bind(settings.grpc_addr)
            .await
            .with_context(|| format!("binding gRPC to {}", settings.grpc_addr))?;
        let admin = match settings.admin_addr {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("binding the admin listener to {addr}"))?,
            ),
            None => None,
        };
        Ok(Application {
            admin,
            rest_addr: rest.local_addr()?,
            grpc_addr: grpc.local_addr()?,
            rest,
            grpc,
            tls,
            conn: settings.conn_limits(),
            max_connections: settings.max_connections as usize,
            _following: following.drop_guard(),
            state: AppState {
                service: Service::new(store, upstreams),
                metrics,
                // One limit of work in service for REST and gRPC alike.
                limiter: service_kit::shed::Limiter::new(settings.max_concurrent_requests),
                max_request_bytes: settings.max_request_bytes as usize,
            },
        })
    }

    /// Where REST listens.
    pub fn rest_addr(&self) -> SocketAddr {
        self.rest_addr
    }

    /// Where gRPC listens.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// Where the admin listener listens, if there is one.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// This instance's counters (what `/metrics` serves).
    pub fn metrics(&self) -> Arc<Metrics> {
        self.state.metrics.clone()
    }

    /// Serves REST and gRPC until `shutdown` completes, then lets in-flight
    /// requests finish.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let stop = CancellationToken::new();
        let admin = self
            .admin_addr()
            .map_or_else(|| "off".to_owned(), |a| a.to_string());
        tracing::info!(rest = %self.rest_addr, grpc = %self.grpc_addr, admin, tls = self.tls.is_some(), "user-service listening");
        let metrics = &self.state.metrics.requests;
        metrics.add_collector(self.state.limiter.collector("user"));
        // TLS on both listeners when it is on: REST offers h2 and HTTP/1.1
        // by ALPN, gRPC h2 only.
        let ([rest_tls, grpc_tls], tls_handshakes) = tls::listener_acceptors(
            self.tls.as_ref(),
            [("rest", tls::ALPN_H2_HTTP1), ("grpc", tls::ALPN_H2)],
            "user",
        );
        if let Some(handshakes) = tls_handshakes {
            metrics.add_collector(handshakes);
        }

        // axum::serve speaks HTTP/1.1 and, with axum's `http2` feature, h2c
        // by prior knowledge on the same listener.
        let ([rest_cap, grpc_cap, admin_cap], caps) = service_kit::cap::listener_caps(
            "user",
            [
                ("rest", self.max_connections),
                ("grpc", self.max_connections),
                ("admin", service_kit::serve::ADMIN_CONNECTIONS),
            ],
        );
        metrics.add_collector(caps);
        let rest = service_kit::serve::serve_with_tls(
            self.rest,
            rest::router(self.state.clone()),
            stop.clone().cancelled_owned(),
            self.conn,
            rest_cap,
            rest_tls,
        );

        // Known before the first call can ask, then followed like /readyz.
        const HEALTH_NAMES: &[&str] = &["", "user.v1.UserService"];
        let (health_service, readiness) = service_kit::health::following(
            HEALTH_NAMES,
            self.state.service.store().clone(),
            |store: Store| async move { store.ping().await.is_ok() },
            stop.clone(),
        )
        .await;
        // Lists exactly what is added below, not order's APIs from the shared set.
        let descriptors = [
            proto::FILE_DESCRIPTOR_SET,
            tonic_health::pb::FILE_DESCRIPTOR_SET,
        ];
        let served = [
            tonic_health::pb::health_server::SERVICE_NAME,
            proto::user::v1::user_service_server::SERVICE_NAME,
        ];
        let (reflection, reflection_v1alpha) =
            service_kit::reflection::serving(&descriptors, &served)
                .context("building the reflection service")?;
        // Metrics label a call by its path only if it is one of these.
        let methods = service_kit::reflection::method_paths(&descriptors, &served);
        let conn = self.conn;
        let grpc = tonic::transport::Server::builder()
            .max_concurrent_streams(conn.max_streams)
            .timeout(conn.body_read)
            .http2_keepalive_interval(Some(conn.idle))
            .http2_keepalive_timeout(Some(service_kit::preface::KEEPALIVE_TIMEOUT))
            .trace_fn(telemetry::spans::grpc_server::<()>)
            .layer(
                telemetry::metrics::RecordLayer::new(self.state.metrics.requests.clone())
                    .serving(methods),
            )
            // A call answered before its body was read reads the rest first,
            // so that its HTTP/2 window stays open for the calls after it.
            .layer(service_kit::serve::leftover::EarlyAnswerLayer)
            .layer(telemetry::spans::GrpcStatusLayer::new(Some(conn.body_read)))
            .layer(tower::util::MapResponseLayer::new(
                service_kit::preface::oversize_is_resource_exhausted::<tonic::body::Body>,
            ))
            .layer(tower::util::MapResponseLayer::new(
                service_kit::preface::capped_grpc_message::<tonic::body::Body>,
            ))
            .layer(tower::util::MapResponseLayer::new(
                service_kit::preface::bad_bytes_are_invalid_argument::<tonic::body::Body>,
            ))
            .layer(
                service_kit::shed::ShedLayer::shared(&self.state.limiter, crate::grpc::overloaded)
                    .exempt(&["/grpc.health.", "/grpc.reflection."]),
            )
            // The caller's deadline, enforced (order-service's gRPC does the same).
            .layer(service_kit::call_deadline::GrpcDeadlineLayer)
            // The request cap of the API, not tonic's 4 MiB default.
            .add_service(health_service.max_decoding_message_size(self.state.max_request_bytes))
            .add_service(reflection.max_decoding_message_size(self.state.max_request_bytes))
            .add_service(reflection_v1alpha.max_decoding_message_size(self.state.max_request_bytes))
            .add_service(UserApi::server(
                self.state.service.clone(),
                self.state.max_request_bytes,
            ));
        let grpc = service_kit::preface::serve_tonic(
            grpc,
            self.grpc,
            grpc_tls,
            conn,
            grpc_cap,
            stop.clone(),
        );

        // The signal stops both listeners; so does the first to fail.
        let mut listeners: Vec<service_kit::supervise::Server> = vec![
            ("REST", Box::pin(async move { Ok(rest.await?) })),
            ("gRPC", Box::pin(async move { Ok(grpc.await?) })),
        ];
        if let Some(listener) = self.admin {
            let admin = service_kit::serve::serve(
                listener,
                rest::admin_router(self.state.clone()),
                stop.clone().cancelled_owned(),
                self.conn,
                admin_cap,
            );
            listeners.push(("admin", Box::pin(async move { Ok(admin.await?) })));
        }
        let served = service_kit::supervise::supervise(shutdown, stop, listeners).await;
        readiness.abort();
        served
    }
}

/// Completes on Ctrl-C or SIGTERM: the one both services share.
pub use service_kit::signal::shutdown_signal;
