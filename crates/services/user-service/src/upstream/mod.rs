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
//!
//! # Layers
//!
//! Each imports only those below it:
//! - this module: [`Upstreams`], the table of adapters, built from
//!   [`UpstreamSettings`]; with replicas, each transport's adapters behind
//!   a [`balance`]r;
//! - the adapters, one module per family, none importing another:
//!   [`rest`], [`connect`], [`grpc`], [`grpc_h3`], [`bidi`], [`tuned`],
//!   [`tcp`];
//! - [`shared`]: what several adapters share (connection pools, the twins'
//!   connections and codec, the gRPC helpers, request-id multiplexing);
//! - the port's own types and the plumbing under every call: [`port`],
//!   [`endpoints`], [`wire`], [`parts`], [`semconv`].

pub mod balance;
pub mod bidi;
pub mod connect;
pub mod endpoints;
pub mod grpc;
pub mod grpc_h3;
pub mod parts;
pub mod port;
pub mod rest;
pub mod semconv;
pub mod shared;
pub mod tcp;
pub mod tuned;
pub mod wire;

use std::sync::Arc;
use std::time::{Duration, Instant};

use model::Order;
use tracing::Instrument as _;
pub use transports::{Transport, UnknownTransport};

pub use self::endpoints::{Endpoints, UpstreamTls};
pub use self::port::{MAX_MESSAGE_BYTES, OrderQuery, OrderSource, UpstreamError};
use crate::metrics::Metrics;

/// What [`Upstreams`] is built from, made from the service's settings at
/// start (`startup::upstream_settings`).
#[derive(Debug, Clone)]
pub struct UpstreamSettings {
    /// Where order-service is, and how every adapter reaches it.
    pub endpoints: Endpoints,
    /// The transport used when a request names none.
    pub default_via: Transport,
    /// order-service's replicas, for client-side balancing: addresses or
    /// names. Empty: every call goes to the endpoints themselves.
    pub replicas: Vec<String>,
    /// How often the names in `replicas` are resolved again.
    pub resolve_every: Duration,
    /// How a call picks its replica.
    pub pick: balance::Pick,
    /// Second tries on another replica, as a percentage of calls (0: none).
    pub retry_budget_pct: u32,
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
        | Transport::H2cProtoTuned
        | Transport::H3Json
        | Transport::H3Proto => Arc::new(rest::RestSource::new(t, ep, m)?),
        Transport::GrpcH3 => Arc::new(grpc_h3::GrpcH3Source::new(ep, m)?),
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
            Arc::new(bidi::BidiSource::new(t, ep, m)?)
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
    pub fn new(settings: &UpstreamSettings, metrics: Arc<Metrics>) -> anyhow::Result<Self> {
        let ep = &settings.endpoints;
        let mut sources: Vec<Arc<dyn OrderSource>> = Vec::with_capacity(Transport::ALL.len());
        let balanced = if settings.replicas.is_empty() {
            for t in Transport::ALL {
                sources.push(adapter(t, ep, &metrics)?);
            }
            None
        } else {
            let balancers: Vec<Arc<balance::Balanced>> = Transport::ALL
                .into_iter()
                .map(|t| {
                    Arc::new(balance::Balanced::new(
                        t,
                        settings.pick,
                        settings.retry_budget_pct,
                    ))
                })
                .collect();
            sources.extend(balancers.iter().map(|b| b.clone() as Arc<dyn OrderSource>));
            Some(Arc::new(Replicas {
                list: settings.replicas.clone(),
                every: settings.resolve_every,
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
            breakdown: ep.breakdown,
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

#[cfg(test)]
mod tests {
    use model::FieldSet;
    use uuid::Uuid;

    use super::*;

    #[tokio::test]
    async fn the_transports_with_a_batch_call_are_those_whose_adapter_makes_one() {
        let settings = crate::startup::upstream_settings(&crate::Settings::default()).unwrap();
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
