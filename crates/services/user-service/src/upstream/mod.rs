//! The outbound port: how user-service fetches a user's orders from
//! order-service, over a transport chosen per request.
//!
//! One trait, [`OrderSource`], and one adapter per [`Transport`]. Every adapter
//! returns the same domain [`Order`]s for the same [`OrderQuery`]; what differs
//! is the wire (HTTP/1.1, HTTP/2, gRPC, raw TCP), the encoding (JSON,
//! protobuf, the all-strings v1) and how connections are used. [`Upstreams`]
//! holds one adapter of each, times every call and keeps the per-transport
//! [`Metrics`](crate::metrics::Metrics).
//!
//! Each adapter has a budget of `pool_size` TCP connections of its own, which
//! it opens through [`wire::connect`] so that connections and bytes are counted
//! on the socket itself.

pub mod balance;
pub mod connect;
pub mod grpc;
pub mod http;
pub mod mux;
pub mod parts;
pub mod semconv;
pub mod tcp;
pub mod tuned;
pub mod wire;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::future::BoxFuture;
use model::{FieldSet, Order};
use tracing::Instrument as _;
use uuid::Uuid;

use crate::metrics::Metrics;
use crate::settings::Settings;
pub use transports::{Transport, UnknownTransport};

/// The largest message any client here accepts or sends: 10,000 orders are
/// about 2-3 MB, well past tonic's 4 MiB default margin for comfort.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// What user-service asks order-service for: the first `limit` orders of a
/// user (ordered by order id), with the selected fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderQuery {
    pub user_id: Uuid,
    /// 1 to 10,000.
    pub limit: u32,
    pub fields: FieldSet,
}

/// Why a call to order-service failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// No answer within the configured upstream timeout (or order-service
    /// said its own deadline passed).
    #[error("order-service timed out: {0}")]
    Timeout(String),
    /// order-service could not be reached, or the connection broke.
    #[error("order-service is unavailable: {0}")]
    Unavailable(String),
    /// order-service answered with an error of its own.
    #[error("order-service refused the query ({status}): {message}")]
    Rejected { status: String, message: String },
    /// order-service's answer could not be read.
    #[error("order-service's answer could not be read: {0}")]
    Protocol(String),
}

/// The outbound port: one user's orders from order-service.
///
/// Object-safe on purpose (a boxed future rather than `async fn`) so that
/// [`Upstreams`] can hold every adapter in one table and pick one per call.
pub trait OrderSource: Send + Sync {
    /// The transport this adapter speaks.
    fn transport(&self) -> Transport;

    /// The first `q.limit` orders of `q.user_id`, with `q.fields` selected and
    /// the other fields blank.
    fn list_orders<'a>(
        &'a self,
        q: &'a OrderQuery,
    ) -> BoxFuture<'a, Result<Vec<Order>, UpstreamError>>;

    /// Every query's answer, in order, from one call that carries them all;
    /// `None` when this transport has no such call. The queries are at
    /// least one and their limits add up to at most order-service's
    /// maximum page size.
    fn list_batch<'a>(
        &'a self,
        _qs: &'a [OrderQuery],
    ) -> Option<BoxFuture<'a, Result<Vec<Vec<Order>>, UpstreamError>>> {
        None
    }
}

/// How an adapter reaches order-service; built once from [`Settings`].
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// Base URL of the REST port, e.g. `http://127.0.0.1:8082`.
    pub rest_url: ::http::Uri,
    /// URL of the gRPC port, e.g. `http://127.0.0.1:50052`.
    pub grpc_url: ::http::Uri,
    /// `host:port` of the raw-TCP port.
    pub tcp_addr: String,
    /// Connections per transport.
    pub pool_size: usize,
    /// The upstream timeout, also sent as the gRPC deadline.
    pub timeout: Duration,
    /// TLS to order-service on every transport, when configured.
    pub tls: Option<UpstreamTls>,
    /// Ask for gzip on the REST and gRPC transports (`USER_UPSTREAM_GZIP`).
    pub gzip: bool,
    /// Ask for zstd on the same transports (`USER_UPSTREAM_ZSTD`).
    pub zstd: bool,
    /// Time each call's parts (`USER_UPSTREAM_BREAKDOWN`): the shared
    /// readers of bidi streams and raw-TCP connections time their decodes
    /// only then.
    pub breakdown: bool,
}

/// TLS to order-service: the client configuration (trusted CA, optional
/// client certificate) every transport's connector is made from, so that
/// they share one session cache and can resume.
#[derive(Debug, Clone)]
pub struct UpstreamTls {
    pub client: tls::ClientTls,
    /// The name the server certificate must carry; `None`: each target's host.
    pub server_name: Option<String>,
}

/// `uri` with its host replaced by `ip`, its port and path kept.
fn with_host(uri: &::http::Uri, ip: std::net::IpAddr) -> anyhow::Result<::http::Uri> {
    let host = match ip {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
    };
    let authority = match uri.port_u16() {
        Some(port) => format!("{host}:{port}"),
        None => host,
    };
    let mut parts = uri.clone().into_parts();
    parts.authority = Some(authority.parse()?);
    Ok(::http::Uri::from_parts(parts)?)
}

impl Endpoints {
    /// The same endpoints on one replica: every host replaced by `ip`, the
    /// ports kept. With TLS, the certificate name stays the configured
    /// host's, as a replica's certificate names the service, not the pod.
    pub fn for_replica(&self, ip: std::net::IpAddr) -> anyhow::Result<Endpoints> {
        let tcp_port = self
            .tcp_addr
            .rsplit_once(':')
            .map(|(_, p)| p)
            .with_context(|| format!("{} has no port", self.tcp_addr))?;
        let tls = self.tls.clone().map(|mut t| {
            t.server_name
                .get_or_insert_with(|| self.rest_url.host().unwrap_or_default().to_owned());
            t
        });
        Ok(Endpoints {
            rest_url: with_host(&self.rest_url, ip)?,
            grpc_url: with_host(&self.grpc_url, ip)?,
            tcp_addr: std::net::SocketAddr::new(ip, tcp_port.parse()?).to_string(),
            pool_size: self.pool_size,
            timeout: self.timeout,
            tls,
            gzip: self.gzip,
            zstd: self.zstd,
            breakdown: self.breakdown,
        })
    }

    /// How a transport offering `alpn` reaches `addr` (`host:port`): plain,
    /// or TLS counting into `metrics`' handshake counters.
    pub fn dialer(
        &self,
        addr: String,
        alpn: &[&[u8]],
        metrics: &crate::metrics::TransportMetrics,
    ) -> wire::Dialer {
        match &self.tls {
            None => wire::Dialer::plain(addr),
            Some(t) => {
                let name = t
                    .server_name
                    .clone()
                    .unwrap_or_else(|| host_of(&addr).to_owned());
                let connector = t.client.connector(alpn, metrics.tls_counters().clone());
                wire::Dialer::tls(addr, connector, name)
            }
        }
    }
}

/// The host of `host:port` or `[v6]:port`.
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// One adapter per transport, with their shared metrics.
#[derive(Clone)]
pub struct Upstreams {
    sources: Arc<Vec<Arc<dyn OrderSource>>>,
    metrics: Arc<Metrics>,
    default: Transport,
    timeout: Duration,
    /// With replicas (client-side balancing): each transport's balancer and
    /// what it needs to follow the replica set.
    balanced: Option<Arc<Replicas>>,
    /// Record each call's parts (`USER_UPSTREAM_BREAKDOWN`).
    breakdown: bool,
}

/// Client-side balancing's state: the replica list, how often it is
/// resolved, and each transport's balancer.
struct Replicas {
    list: Vec<String>,
    every: Duration,
    endpoints: Endpoints,
    metrics: Arc<Metrics>,
    balancers: Vec<Arc<balance::Balanced>>,
}

impl Replicas {
    /// Makes `ips` every transport's replica set.
    fn set(&self, ips: &std::collections::BTreeSet<std::net::IpAddr>) -> anyhow::Result<()> {
        for b in &self.balancers {
            let t = b.transport();
            b.set(ips, |ip| {
                adapter(t, &self.endpoints.for_replica(ip)?, &self.metrics)
            })?;
        }
        Ok(())
    }

    /// Resolves the list once: the new set is applied and returned, or the
    /// old one kept and the failure logged.
    async fn refresh(&self, resolver: &dyn balance::Resolve) -> Option<Vec<std::net::IpAddr>> {
        let resolved = balance::resolve_all(resolver, &self.list).await;
        let applied = resolved
            .map_err(anyhow::Error::msg)
            .and_then(|ips| self.set(&ips).map(|()| ips));
        match applied {
            Ok(ips) => Some(ips.into_iter().collect()),
            Err(e) => {
                tracing::warn!(
                    error = format!("{e:#}"),
                    "order-service's replicas could not be resolved: the last set stays"
                );
                None
            }
        }
    }
}

/// The adapter of transport `t` for the order-service at `ep`.
fn adapter(
    t: Transport,
    ep: &Endpoints,
    metrics: &Metrics,
) -> anyhow::Result<Arc<dyn OrderSource>> {
    let m = metrics.transport(t).clone();
    Ok(match t {
        Transport::H1Json
        | Transport::H1JsonClose
        | Transport::H2cJson
        | Transport::H1Proto
        | Transport::H2cProto
        | Transport::H2cProtoTuned => Arc::new(http::RestSource::new(t, ep, m)?),
        Transport::ConnectH1Proto | Transport::ConnectH2cProto => {
            Arc::new(connect::ConnectSource::new(t, ep, m)?)
        }
        Transport::Grpc | Transport::GrpcStream | Transport::GrpcV1 => {
            Arc::new(grpc::GrpcSource::new(t, ep, m)?)
        }
        Transport::GrpcTuned | Transport::GrpcStreamTuned => {
            Arc::new(tuned::TunedSource::new(t, ep, m)?)
        }
        Transport::GrpcBidi | Transport::GrpcBidiTuned => {
            Arc::new(grpc::BidiSource::new(t, ep, m)?)
        }
        Transport::TcpProto => Arc::new(tcp::TcpSource::new(ep, m)),
    })
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstreams")
            .field("default", &self.default)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Upstreams {
    /// Every adapter, each with its own connection budget. Nothing connects
    /// yet: connections are opened on first use, so user-service starts even
    /// when order-service is down.
    pub fn new(settings: &Settings, metrics: Arc<Metrics>) -> anyhow::Result<Self> {
        let ep = Endpoints {
            rest_url: settings.order_rest_url.clone(),
            grpc_url: settings.order_grpc_url.clone(),
            tcp_addr: settings.order_tcp_addr.clone(),
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
        };
        for (var, url) in [
            ("USER_ORDER_REST_URL", &ep.rest_url),
            ("USER_ORDER_GRPC_URL", &ep.grpc_url),
        ] {
            if url.scheme_str() == Some("https") && ep.tls.is_none() {
                anyhow::bail!(
                    "{var} is {url}, but TLS to order-service is off: set USER_ORDER_TLS_CA to the CA that signed its certificate"
                );
            }
        }
        let mut sources: Vec<Arc<dyn OrderSource>> = Vec::with_capacity(Transport::ALL.len());
        let balanced = if settings.order_replicas.is_empty() {
            for t in Transport::ALL {
                sources.push(adapter(t, &ep, &metrics)?);
            }
            None
        } else {
            let balancers: Vec<Arc<balance::Balanced>> = Transport::ALL
                .into_iter()
                .map(|t| Arc::new(balance::Balanced::new(t, settings.order_pick)))
                .collect();
            sources.extend(balancers.iter().map(|b| b.clone() as Arc<dyn OrderSource>));
            Some(Arc::new(Replicas {
                list: settings.order_replicas.clone(),
                every: Duration::from_millis(settings.order_resolve_interval_ms.max(1)),
                endpoints: ep.clone(),
                metrics: metrics.clone(),
                balancers,
            }))
        };
        for (t, s) in Transport::ALL.into_iter().zip(&sources) {
            debug_assert_eq!(s.transport(), t);
        }
        Ok(Upstreams {
            sources: Arc::new(sources),
            metrics,
            default: settings.default_via,
            timeout: ep.timeout,
            balanced,
            breakdown: settings.upstream_breakdown,
        })
    }

    /// With replicas, resolves them once now (so that the first calls find
    /// them), then again every resolve interval until `stop`, following
    /// `resolver`'s answers. Without replicas, does nothing.
    pub async fn follow_replicas(
        &self,
        resolver: Arc<dyn balance::Resolve>,
        stop: tokio_util::sync::CancellationToken,
    ) {
        let Some(r) = self.balanced.clone() else {
            return;
        };
        let mut last = r.refresh(resolver.as_ref()).await;
        tracing::info!(replicas = ?last, "order-service's replicas");
        tokio::spawn(async move {
            let mut every = tokio::time::interval(r.every);
            every.tick().await;
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = every.tick() => {}
                }
                if let Some(now) = r.refresh(resolver.as_ref()).await
                    && last.as_ref() != Some(&now)
                {
                    tracing::info!(replicas = ?now, "order-service's replicas changed");
                    last = Some(now);
                }
            }
        });
    }

    /// The replicas each call may go to now, when balancing over replicas.
    pub fn replicas(&self) -> Option<Vec<std::net::IpAddr>> {
        let r = self.balanced.as_ref()?;
        Some(
            r.balancers
                .first()
                .map(|b| b.replicas())
                .unwrap_or_default(),
        )
    }

    /// The transport used when a request names none.
    pub fn default_transport(&self) -> Transport {
        self.default
    }

    /// The adapter of `via`, to drive directly (the hop benchmark): no
    /// timing, counting or tracing around its calls.
    pub fn source(&self, via: Transport) -> Arc<dyn OrderSource> {
        self.sources[via.index()].clone()
    }

    /// The metrics every adapter reports into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Fetches over `via`, timed from the first wait for a connection slot to
    /// the last byte, and never for longer than the upstream timeout.
    ///
    /// The call runs in a client span named as the call is (`GET
    /// /v2/orders`, `order.v2.OrderService/ListOrders`, see [`semconv`]),
    /// whose context every adapter carries to order-service (headers,
    /// metadata, or the message's own `trace_context`). Besides the
    /// conventions' attributes: the transport (`via`), the wait for a
    /// connection slot, the round trip, and the bytes this transport's
    /// sockets moved while the call was open (exactly the call's own bytes
    /// when it was alone on the wire; shared connections add their
    /// neighbours'). A failed call's span has status Error and the message.
    pub async fn fetch(
        &self,
        via: Transport,
        q: &OrderQuery,
    ) -> (Result<Vec<Order>, UpstreamError>, Duration) {
        let (result, elapsed, _) = self.fetch_with_parts(via, q).await;
        (result, elapsed)
    }

    /// [`Upstreams::fetch`], and where the call's time went when
    /// `USER_UPSTREAM_BREAKDOWN` is on and order-service gave its account
    /// (`ORDER_SERVER_TIMING`): `None` otherwise, and for a failed call.
    pub async fn fetch_with_parts(
        &self,
        via: Transport,
        q: &OrderQuery,
    ) -> (
        Result<Vec<Order>, UpstreamError>,
        Duration,
        Option<parts::CallParts>,
    ) {
        let span = semconv::client_span(via, &semconv::Call::of(via));
        span.record("user_id", tracing::field::display(q.user_id));
        span.record("limit", q.limit);
        let source = &self.sources[via.index()];
        self.timed(via, span, source.list_orders(q)).await
    }

    /// Fetches every query's answer, in order, as one call each, all at once
    /// (each waits for a connection slot of `via`'s pool as a lone call
    /// would). Each call is timed, counted and traced as [`Upstreams::fetch`]
    /// does; the duration is the whole fan-out's, from the first call's start
    /// to the last one's end. The first failure in the order of the queries
    /// is the answer's.
    pub async fn fetch_each(
        &self,
        via: Transport,
        qs: &[OrderQuery],
    ) -> (Result<Vec<Vec<Order>>, UpstreamError>, Duration) {
        let start = Instant::now();
        let answers =
            futures::future::join_all(qs.iter().map(|q| async move { self.fetch(via, q).await.0 }))
                .await;
        (answers.into_iter().collect(), start.elapsed())
    }

    /// Fetches every query's answer in one call that carries them all (see
    /// [`Transport::batch_call`]), timed, counted and traced as one call.
    /// `None` when `via` has no such call.
    pub async fn fetch_batch(
        &self,
        via: Transport,
        qs: &[OrderQuery],
    ) -> Option<(Result<Vec<Vec<Order>>, UpstreamError>, Duration)> {
        let call = self.sources[via.index()].list_batch(qs)?;
        let span = semconv::client_span(via, &semconv::Call::batch(via)?);
        span.record("queries", qs.len());
        let (result, elapsed, _) = self.timed(via, span, call).await;
        Some((result, elapsed))
    }

    /// Runs one call of `via` in `span`: timed, bounded by the upstream
    /// timeout, counted in the transport's metrics, and its bytes and
    /// outcome recorded on the span.
    async fn timed<T>(
        &self,
        via: Transport,
        span: tracing::Span,
        call: impl std::future::Future<Output = Result<T, UpstreamError>>,
    ) -> (Result<T, UpstreamError>, Duration, Option<parts::CallParts>) {
        let m = self.metrics.transport(via);
        let before = m.snapshot();
        let start = Instant::now();
        let call = crate::metrics::call_started(start, async {
            let bounded = async {
                match tokio::time::timeout(self.timeout, call).await {
                    Ok(r) => r,
                    Err(_) => Err(UpstreamError::Timeout(format!(
                        "no answer within {} ms",
                        self.timeout.as_millis()
                    ))),
                }
            };
            if self.breakdown {
                parts::record(bounded).await
            } else {
                (bounded.await, None, Duration::ZERO)
            }
        });
        let (result, server, decode) = call.instrument(span.clone()).await;
        let elapsed = start.elapsed();
        let parts = match (&result, server) {
            (Ok(_), Some(s)) => Some(parts::CallParts {
                store: s.store,
                encode: s.encode,
                total: s.total,
                decode,
                upstream: elapsed,
            }),
            _ => None,
        };
        m.record_call(elapsed, result.is_ok());
        let after = m.snapshot();
        span.record("upstream_us", elapsed.as_micros() as u64);
        span.record(
            "net.bytes_read",
            after.bytes_read.saturating_sub(before.bytes_read),
        );
        span.record(
            "net.bytes_written",
            after.bytes_written.saturating_sub(before.bytes_written),
        );
        if let Err(e) = &result {
            span.record("error", tracing::field::display(e));
            telemetry::spans::error(&span, &e.to_string());
        }
        (result, elapsed, parts)
    }
}

/// Converts every order of an answer, naming the bad field of the first that
/// does not parse.
pub(crate) fn to_domain<T>(items: Vec<T>) -> Result<Vec<Order>, UpstreamError>
where
    T: TryInto<Order, Error = model::ParseError>,
{
    items
        .into_iter()
        .map(|o| {
            o.try_into()
                .map_err(|e: model::ParseError| UpstreamError::Protocol(format!("an order's {e}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_of_an_address_is_its_certificate_name() {
        assert_eq!(host_of("order-service:50062"), "order-service");
        assert_eq!(host_of("127.0.0.1:1"), "127.0.0.1");
        assert_eq!(host_of("[::1]:50062"), "::1");
    }

    #[tokio::test]
    async fn the_transports_with_a_batch_call_are_those_whose_adapter_makes_one() {
        let settings = Settings::default();
        let up = Upstreams::new(&settings, Arc::new(Metrics::new("memory", 1))).unwrap();
        let q = [OrderQuery {
            user_id: Uuid::nil(),
            limit: 1,
            fields: FieldSet::ALL,
        }];
        for t in Transport::ALL {
            // Built, not run: nothing connects.
            let made = up.sources[t.index()].list_batch(&q).is_some();
            assert_eq!(made, t.batch_call().is_some(), "{t}");
        }
    }

    #[test]
    fn an_unknown_transport_is_quoted_as_every_bad_value_is() {
        // The transports crate has no dependencies, so it repeats
        // `model::quoted`: the two must quote alike.
        for name in ["carrier-pigeon", "", "\"", &"é".repeat(100)] {
            let msg = name.parse::<Transport>().unwrap_err().to_string();
            assert!(
                msg.starts_with(&format!("unknown transport {};", model::quoted(name))),
                "{msg}"
            );
        }
    }
}
