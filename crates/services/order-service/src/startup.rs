//! Building the application from its settings and running it.
//!
//! [`Application::build`] binds every listener first (port 0 works: the real
//! port is read back), so a test knows where to send before anything runs.
//! [`Application::run_until_stopped`] serves until the shutdown future
//! completes, then lets requests and streams in flight finish (REST through
//! `service_kit::serve`, which loses no request on a keep-alive connection).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use telemetry::metrics::RequestMetrics;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::grpc::GrpcLimits;
use crate::rest::RestState;
use crate::service::{Limits, Orders};
use crate::settings::Settings;
use crate::store::memory::MemoryStore;
use crate::store::postgres::PgStore;
use crate::store::{OrderStore as _, Store};
use crate::tcp::TcpLimits;

/// A built, not yet running, order-service.
#[derive(Debug)]
pub struct Application {
    settings: Settings,
    orders: Orders,
    rest: TcpListener,
    grpc: TcpListener,
    tcp: TcpListener,
    /// HTTP/3 on UDP, unless off.
    h3: Option<service_kit::serve::h3::H3Listener>,
    /// /healthz, /readyz and /metrics on a port of their own, when set.
    admin: Option<TcpListener>,
    /// TLS for every listener, when the settings name a certificate.
    tls: Option<tls::ServerTls>,
}

/// Connects to Postgres (and migrates) or builds the in-memory store.
pub async fn open_store(s: &Settings) -> anyhow::Result<Store> {
    Ok(match s.pool() {
        Some(pool) => Store::Postgres(PgStore::connect(&pool).await?),
        None => Store::Memory(Arc::new(MemoryStore::with_dataset())),
    })
}

async fn bind(what: &str, addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the {what} listener to {addr}"))
}

impl Application {
    /// Opens the store and binds the listeners.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let store = open_store(&settings).await?;
        if let (Store::Postgres(pg), true) = (&store, settings.seed) {
            let n = pg.seed().await.context("seeding Postgres")?;
            tracing::info!(new_orders = n, "data set loaded into Postgres");
        }
        let orders = Orders {
            store,
            limits: Limits {
                max_page_size: settings.max_page_size,
            },
            server_timing: settings.server_timing,
        };
        let tls = match settings.tls_files() {
            Some(files) => Some(tls::ServerTls::load(&files).context("setting up TLS")?),
            None => None,
        };
        let h3 = match settings.h3_addr.0 {
            None => None,
            Some(addr) => {
                // QUIC always encrypts: the service's certificate, or one
                // of its own when TLS is off.
                let quic_tls = match &tls {
                    Some(t) => t.clone(),
                    None => tls::ServerTls::self_signed()
                        .context("making the HTTP/3 listener's certificate")?,
                };
                Some(service_kit::serve::h3::H3Listener::bind(
                    addr,
                    &quic_tls,
                    &settings.conn_limits(),
                    if settings.quic_retry {
                        service_kit::serve::h3::Validation::Retry
                    } else {
                        service_kit::serve::h3::Validation::Off
                    },
                )?)
            }
        };
        let app = Application {
            h3,
            tls,
            rest: bind("REST", settings.rest_addr).await?,
            grpc: bind("gRPC", settings.grpc_addr).await?,
            tcp: bind("raw-TCP", settings.tcp_addr).await?,
            admin: match settings.admin_addr {
                Some(addr) => Some(bind("admin", addr).await?),
                None => None,
            },
            orders,
            settings,
        };
        tracing::info!(
            store = app.orders.store.kind(),
            rest = %app.rest_addr(),
            grpc = %app.grpc_addr(),
            tcp = %app.tcp_addr(),
            h3 = app.h3_addr().map(|a| a.to_string()).unwrap_or_else(|| "off".into()),
            admin = app.admin_addr().map(|a| a.to_string()).unwrap_or_else(|| "off".into()),
            tls = app.tls_mode(),
            "order-service ready to serve"
        );
        Ok(app)
    }

    /// The REST listener's address.
    pub fn rest_addr(&self) -> SocketAddr {
        self.rest.local_addr().unwrap_or(self.settings.rest_addr)
    }

    /// The gRPC listener's address.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc.local_addr().unwrap_or(self.settings.grpc_addr)
    }

    /// The raw-TCP listener's address.
    pub fn tcp_addr(&self) -> SocketAddr {
        self.tcp.local_addr().unwrap_or(self.settings.tcp_addr)
    }

    /// The HTTP/3 listener's UDP address, if there is one.
    pub fn h3_addr(&self) -> Option<SocketAddr> {
        self.h3.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The admin listener's address, if there is one.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// "off", "on" or "mutual" (client certificates required).
    pub fn tls_mode(&self) -> &'static str {
        match &self.tls {
            None => "off",
            Some(t) if t.requires_client_cert() => "mutual",
            Some(_) => "on",
        }
    }

    /// "memory" or "postgres".
    pub fn store_kind(&self) -> &'static str {
        self.orders.store.kind()
    }

    /// Serves until `shutdown` completes, then drains: no new connections or
    /// requests, and the ones in flight (streams included) finish.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let token = CancellationToken::new();
        let s = &self.settings;
        let metrics = Arc::new(RequestMetrics::new("order"));
        metrics.add_collector(crate::metrics::StoreCollector(self.orders.store.clone()));
        // TLS on every listener when it is on: REST offers h2 and HTTP/1.1
        // by ALPN, gRPC too (HTTP/1.1 for gRPC-web), raw TCP no ALPN.
        let ([rest_tls, grpc_tls, tcp_tls], tls_handshakes) = tls::listener_acceptors(
            self.tls.as_ref(),
            [
                ("rest", tls::ALPN_H2_HTTP1),
                ("grpc", tls::ALPN_H2_HTTP1),
                ("tcp", &[]),
            ],
            "order",
        );
        if let Some(handshakes) = tls_handshakes {
            metrics.add_collector(handshakes);
        }
        // One limit of work in service for every surface.
        let limiter = service_kit::shed::Limiter::new(s.max_concurrent_requests);
        metrics.add_collector(limiter.collector("order"));
        let rest_state = RestState {
            orders: self.orders.clone(),
            max_body_bytes: s.max_request_bytes as usize,
            metrics: metrics.clone(),
            limiter: limiter.clone(),
            gzip: s.rest_gzip,
            zstd: s.rest_zstd,
        };
        let admin_router = crate::rest::admin_router(rest_state.clone());
        let rest_router = crate::rest::router(rest_state);
        let h3_rest = rest_router.clone();
        let limits = s.conn_limits();
        let ([rest_cap, grpc_cap, h3_cap, tcp_cap, admin_cap], caps) =
            service_kit::cap::listener_caps(
                "order",
                [
                    ("rest", s.max_connections as usize),
                    ("grpc", s.max_connections as usize),
                    ("h3", s.max_connections as usize),
                    ("tcp", s.max_tcp_connections as usize),
                    ("admin", service_kit::serve::ADMIN_CONNECTIONS),
                ],
            );
        metrics.add_collector(caps);
        let rest = {
            let t = token.clone();
            let listener = self.rest;
            async move {
                service_kit::serve::serve_with_tls(
                    listener,
                    rest_router,
                    t.cancelled_owned(),
                    limits,
                    rest_cap,
                    rest_tls,
                )
                .await
                .map_err(anyhow::Error::from)
            }
        };
        let (h3_calls, h3_calls_rx) = match self.h3.is_some() {
            true => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                (Some(tx), Some(rx))
            }
            false => (None, None),
        };
        let grpc = crate::grpc::serve(
            crate::grpc::GrpcListener {
                listener: self.grpc,
                tls: grpc_tls,
                cap: grpc_cap,
            },
            self.orders.clone(),
            GrpcLimits {
                max_request_bytes: s.max_request_bytes as usize,
                max_response_bytes: s.max_response_bytes,
                max_lookups_in_flight: s.max_lookups_in_flight,
                limiter: limiter.clone(),
                max_concurrent_streams: s.max_concurrent_streams,
                send_gzip: s.grpc_gzip,
                send_zstd: s.grpc_zstd,
                conn: limits,
            },
            metrics.clone(),
            token.clone(),
            h3_calls,
        );
        let tcp = crate::tcp::serve(
            self.tcp,
            self.orders.clone(),
            TcpLimits {
                max_frame_bytes: s.max_request_bytes as usize,
                max_in_flight: s.max_lookups_in_flight,
                max_connections: s.max_tcp_connections as usize,
                frame_budget: crate::tcp::FrameBudget::new(
                    s.tcp_frame_budget_bytes.max(s.max_request_bytes) as usize,
                ),
                conn: limits,
                limiter,
            },
            metrics,
            token.clone(),
            tcp_tls,
            tcp_cap,
        );
        let mut listeners: Vec<service_kit::supervise::Server> = vec![
            ("REST", Box::pin(rest)),
            ("gRPC", Box::pin(grpc)),
            ("raw TCP", Box::pin(tcp)),
        ];
        if let (Some(listener), Some(calls)) = (self.h3, h3_calls_rx) {
            let stop = token.clone().cancelled_owned();
            listeners.push((
                "HTTP/3",
                Box::pin(async move {
                    let calls = calls
                        .await
                        .context("the gRPC listener ended before the HTTP/3 one began")?;
                    service_kit::serve::h3::serve_h3(
                        listener,
                        crate::h3::service(h3_rest, calls),
                        stop,
                        limits,
                        h3_cap,
                    )
                    .await
                    .map_err(anyhow::Error::from)
                }),
            ));
        }
        if let Some(listener) = self.admin {
            let stop = token.clone().cancelled_owned();
            listeners.push((
                "admin",
                Box::pin(async move {
                    service_kit::serve::serve(listener, admin_router, stop, limits, admin_cap)
                        .await
                        .map_err(anyhow::Error::from)
                }),
            ));
        }
        // The signal stops every listener; so does the first to fail.
        service_kit::supervise::supervise(shutdown, token, listeners).await
    }
}

/// Completes on Ctrl-C or SIGTERM: the one both services share.
pub use service_kit::signal::shutdown_signal;
