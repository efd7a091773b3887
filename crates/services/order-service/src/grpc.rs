//! The gRPC API: `order.v2.OrderService` (unary, server stream, bidi stream,
//! and a batch of queries as one unary call or one server stream),
//! the legacy `order.v1.OrderService`, health and reflection, and gRPC-web on
//! the same port.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt as _, TryStreamExt as _};
use model::{FieldSet, NewOrder};
use proto::order::{v1 as pb1, v2 as pb2};
use telemetry::metrics::{RecordLayer, RequestMetrics};
use tokio::sync::{Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status, Streaming};
use tonic_types::{ErrorDetails, StatusExt as _};
use tracing::Instrument as _;

use crate::service::{AppError, Orders};
use crate::store::ListQuery;

/// The one mapping from the service's errors to a gRPC status. A bad field
/// is named in the message and, for clients that read `google.rpc` details
/// (tonic-types, grpcio's `rich_status`, grpc-go's `status.Details`), in a
/// `google.rpc.BadRequest` with one `FieldViolation`, as a REST problem names
/// it in `field`.
impl From<AppError> for Status {
    fn from(e: AppError) -> Self {
        e.log();
        let msg = e.to_string();
        match e {
            AppError::Invalid(p) => Status::with_error_details(
                tonic::Code::InvalidArgument,
                msg,
                ErrorDetails::with_bad_request_violation(p.field, p.message),
            ),
            AppError::NotFound(_) => Status::not_found(msg),
            AppError::KeyReused(_) => Status::failed_precondition(msg),
            AppError::Unavailable(_) => Status::unavailable(msg),
            AppError::Internal(_) => Status::internal(msg),
        }
    }
}

/// The per-lookup error of a bidi stream or raw-TCP frame.
fn lookup_error(s: &Status) -> pb2::LookupError {
    pb2::LookupError {
        code: s.code() as i32,
        message: s.message().to_owned(),
    }
}

/// gRPC limits, all configurable.
#[derive(Debug, Clone)]
pub struct GrpcLimits {
    /// The largest message received, in bytes (the service's request cap).
    pub max_request_bytes: usize,
    /// The largest message sent, in bytes.
    pub max_response_bytes: usize,
    /// Lookups one bidi stream may have in flight; more wait for a slot.
    pub max_lookups_in_flight: usize,
    /// The service's one limit of work in service: each call, and each
    /// lookup on a bidi stream, takes a slot; past it, RESOURCE_EXHAUSTED
    /// at once (for a lookup, in its answer, and the stream goes on).
    pub limiter: service_kit::shed::Limiter,
    /// Streams open at once on one HTTP/2 connection (announced to clients).
    pub max_concurrent_streams: u32,
    /// Answers gzip-compressed for clients that accept gzip.
    pub send_gzip: bool,
    /// Answers zstd-compressed for clients that accept zstd (before gzip).
    pub send_zstd: bool,
    /// Time bounds: the first bytes within `header_read`, a call within
    /// `body_read`, keep-alive pings every `idle`, the drain within
    /// `grace` plus 1 s.
    pub conn: service_kit::serve::ConnLimits,
}

/// The v2 service.
#[derive(Debug, Clone)]
pub struct OrderServiceV2 {
    orders: Orders,
    limits: GrpcLimits,
    /// Each lookup on a bidi stream is counted as a request of its own.
    metrics: Arc<RequestMetrics>,
    /// Ends bidi streams at shutdown, once their lookups in flight are answered.
    shutdown: CancellationToken,
}

/// Answers one lookup of a bidi stream (or a raw-TCP frame), in a span that is
/// a child of the caller's span named in the message itself: the stream's own
/// headers belong to whichever call opened it.
///
/// `began_at` ([`proto::timing::clock_nanos`]) is when the request was read:
/// with `ORDER_SERVER_TIMING` on, the answer carries its pending timing, which
/// its serialization completes (`proto::timing::encode_lookup`). The span
/// is named by `carrier` ([`telemetry::spans::lookup`]) and records the
/// lookup's status in gRPC's codes.
pub async fn lookup(
    orders: &Orders,
    carrier: telemetry::spans::LookupCarrier,
    r: pb2::LookupOrdersRequest,
    began_at: u64,
) -> pb2::LookupOrdersResponse {
    let span = telemetry::spans::lookup(carrier, r.request_id);
    telemetry::propagation::set_parent_from_map(&span, &r.trace_context);
    let answer = lookup_in(orders, r, began_at)
        .instrument(span.clone())
        .await;
    match &answer.error {
        Some(e) => {
            telemetry::spans::record_grpc_status(&span, tonic::Code::from_i32(e.code), &e.message)
        }
        None => telemetry::spans::record_grpc_status(&span, tonic::Code::Ok, ""),
    }
    answer
}

async fn lookup_in(
    orders: &Orders,
    r: pb2::LookupOrdersRequest,
    began_at: u64,
) -> pb2::LookupOrdersResponse {
    let request_id = r.request_id;
    let timed = orders.server_timing;
    let deadline_ms = r.deadline_ms;
    let work = async {
        let q = orders.proto_query(&r.user_id, r.page_size, &r.page_token, r.read_mask.as_ref())?;
        if !timed {
            return Ok((orders.list(&q).await?.into_pb(q.fields), None));
        }
        let t0 = std::time::Instant::now();
        let page = orders.list(&q).await?;
        let t1 = std::time::Instant::now();
        let pb = page.into_pb(q.fields);
        let timing = proto::timing::pending(t1 - t0, t1.elapsed(), began_at);
        Ok((pb, Some(timing)))
    };
    // The caller's deadline: past it the work stops (its future dropped),
    // and an answer ready only past it is not sent (a store that does not
    // yield, the in-memory one, finishes first).
    let result: Result<_, AppError> = match deadline_ms {
        0 => work.await,
        ms => {
            let within = std::time::Duration::from_millis(ms.into());
            let began = std::time::Instant::now();
            match tokio::time::timeout(within, work).await {
                Ok(r) if began.elapsed() < within => r,
                _ => {
                    return pb2::LookupOrdersResponse {
                        request_id,
                        error: Some(pb2::LookupError {
                            code: tonic::Code::DeadlineExceeded as i32,
                            message: format!(
                                "the lookup's deadline ({ms} ms) passed before its answer was ready"
                            ),
                        }),
                        ..Default::default()
                    };
                }
            }
        }
    };
    match result {
        Ok(((orders, next_page_token), timing)) => pb2::LookupOrdersResponse {
            request_id,
            orders,
            next_page_token,
            error: None,
            timing,
        },
        Err(e) => pb2::LookupOrdersResponse {
            request_id,
            error: Some(lookup_error(&Status::from(e))),
            ..Default::default()
        },
    }
}

/// The answer to a lookup refused by the service's limit of work in
/// service: RESOURCE_EXHAUSTED, as a unary call gets it.
pub fn overloaded_lookup(request_id: u64) -> pb2::LookupOrdersResponse {
    pb2::LookupOrdersResponse {
        request_id,
        error: Some(pb2::LookupError {
            code: tonic::Code::ResourceExhausted as i32,
            message: service_kit::shed::OVERLOADED.to_owned(),
        }),
        ..Default::default()
    }
}

/// Counts one lookup of a shared stream or connection as a request.
pub fn record_lookup(
    metrics: &RequestMetrics,
    protocol: &str,
    answer: &pb2::LookupOrdersResponse,
    took: std::time::Duration,
) {
    let code = answer.error.as_ref().map_or(0, |e| e.code);
    metrics.record(
        protocol,
        "LookupOrders",
        telemetry::metrics::Outcome::grpc(code),
        took,
    );
}

impl OrderServiceV2 {
    /// The pages of a batch's queries, in their order. As many are read at
    /// once as a bidi stream may have lookups in flight, so that a batch
    /// reaches the store as the same queries sent one by one would. Each
    /// read runs in the span of the call that asked, which for a stream is
    /// no longer current when tonic polls it.
    fn pages(
        &self,
        queries: Vec<ListQuery>,
    ) -> impl Stream<Item = Result<(Vec<pb2::Order>, String), Status>> + Send + 'static {
        let orders = self.orders.clone();
        let span = tracing::Span::current();
        futures::stream::iter(queries)
            .map(move |q| {
                let orders = orders.clone();
                async move { Ok(orders.list(&q).await?.into_pb(q.fields)) }.instrument(span.clone())
            })
            .buffered(self.limits.max_lookups_in_flight.max(1))
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl pb2::order_service_server::OrderService for OrderServiceV2 {
    #[tracing::instrument(name = "grpc.get_order", skip_all)]
    async fn get_order(
        &self,
        req: Request<pb2::GetOrderRequest>,
    ) -> Result<Response<pb2::GetOrderResponse>, Status> {
        let r = req.into_inner();
        let fields = model::v2::field_set(r.read_mask.as_ref()).map_err(AppError::from)?;
        let order = self.orders.get(&r.id, fields).await?;
        Ok(Response::new(pb2::GetOrderResponse {
            order: Some(model::v2::order_to_pb(&order, fields)),
        }))
    }

    #[tracing::instrument(name = "grpc.list_orders", skip_all)]
    async fn list_orders(
        &self,
        req: Request<pb2::ListOrdersRequest>,
    ) -> Result<Response<pb2::ListOrdersResponse>, Status> {
        let r = req.into_inner();
        let q = self
            .orders
            .proto_query(&r.user_id, r.page_size, &r.page_token, r.read_mask.as_ref())
            .map_err(AppError::from)?;
        let (orders, next_page_token) = self.orders.list(&q).await?.into_pb(q.fields);
        Ok(Response::new(pb2::ListOrdersResponse {
            orders,
            next_page_token,
        }))
    }

    type StreamOrdersStream = BoxStream<pb2::StreamOrdersResponse>;

    #[tracing::instrument(name = "grpc.stream_orders", skip_all)]
    async fn stream_orders(
        &self,
        req: Request<pb2::StreamOrdersRequest>,
    ) -> Result<Response<Self::StreamOrdersStream>, Status> {
        let r = req.into_inner();
        let q = self
            .orders
            .proto_query(&r.user_id, r.page_size, &r.page_token, r.read_mask.as_ref())
            .map_err(AppError::from)?;
        let fields = q.fields;
        let page = self.orders.list(&q).await?;
        let stream = futures::stream::iter(page.orders).map(move |o| {
            Ok(pb2::StreamOrdersResponse {
                order: Some(model::v2::order_to_pb(&o, fields)),
            })
        });
        Ok(Response::new(Box::pin(stream)))
    }

    type LookupOrdersStream = BoxStream<pb2::LookupOrdersResponse>;

    #[tracing::instrument(name = "grpc.lookup_orders", skip_all)]
    async fn lookup_orders(
        &self,
        req: Request<Streaming<pb2::LookupOrdersRequest>>,
    ) -> Result<Response<Self::LookupOrdersStream>, Status> {
        let mut incoming = req.into_inner();
        let (tx, rx) = mpsc::channel::<Result<pb2::LookupOrdersResponse, Status>>(64);
        let orders = self.orders.clone();
        let timed = orders.server_timing;
        let metrics = self.metrics.clone();
        let slots = Arc::new(Semaphore::new(self.limits.max_lookups_in_flight));
        let limiter = self.limits.limiter.clone();
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    // At shutdown, read no more; answer what is in flight.
                    () = shutdown.cancelled() => break,
                    next = incoming.next() => next,
                };
                let began_at = if timed {
                    proto::timing::clock_nanos()
                } else {
                    0
                };
                let r = match next {
                    Some(Ok(r)) => r,
                    Some(Err(status)) => {
                        tracing::debug!(%status, "lookup stream broke");
                        // Say why to the caller: a message over the request
                        // cap is RESOURCE_EXHAUSTED, as on a unary call.
                        let status = if status.code() == tonic::Code::OutOfRange
                            && status.message().contains("too large")
                        {
                            Status::resource_exhausted(status.message().to_owned())
                        } else {
                            status
                        };
                        let _ = tx.send(Err(status)).await;
                        break;
                    }
                    None => break,
                };
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    break;
                };
                let Some(admitted) = limiter.try_acquire() else {
                    let answer = overloaded_lookup(r.request_id);
                    record_lookup(&metrics, "grpc-bidi", &answer, std::time::Duration::ZERO);
                    let _ = tx.send(Ok(answer)).await;
                    continue;
                };
                let (orders, tx, metrics) = (orders.clone(), tx.clone(), metrics.clone());
                tokio::spawn(async move {
                    let started = std::time::Instant::now();
                    let answer =
                        lookup(&orders, telemetry::spans::LookupCarrier::Bidi, r, began_at).await;
                    record_lookup(&metrics, "grpc-bidi", &answer, started.elapsed());
                    let _ = tx.send(Ok(answer)).await;
                    drop((permit, admitted));
                });
            }
            // The stream ends when the last in-flight lookup drops its sender.
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    #[tracing::instrument(name = "grpc.batch_list_orders", skip_all)]
    async fn batch_list_orders(
        &self,
        req: Request<pb2::BatchListOrdersRequest>,
    ) -> Result<Response<pb2::BatchListOrdersResponse>, Status> {
        let r = req.into_inner();
        let queries = self
            .orders
            .batch_queries(&r.requests)
            .map_err(AppError::from)?;
        let responses = self
            .pages(queries)
            .map(|page| {
                page.map(|(orders, next_page_token)| pb2::ListOrdersResponse {
                    orders,
                    next_page_token,
                })
            })
            .try_collect()
            .await?;
        Ok(Response::new(pb2::BatchListOrdersResponse { responses }))
    }

    type BatchStreamOrdersStream = BoxStream<pb2::BatchStreamOrdersResponse>;

    #[tracing::instrument(name = "grpc.batch_stream_orders", skip_all)]
    async fn batch_stream_orders(
        &self,
        req: Request<pb2::BatchStreamOrdersRequest>,
    ) -> Result<Response<Self::BatchStreamOrdersStream>, Status> {
        let r = req.into_inner();
        let queries = self
            .orders
            .batch_queries(&r.requests)
            .map_err(AppError::from)?;
        let stream = self.pages(queries).enumerate().map(|(index, page)| {
            let (orders, next_page_token) = page?;
            Ok(pb2::BatchStreamOrdersResponse {
                index: u32::try_from(index).unwrap_or(u32::MAX),
                orders,
                next_page_token,
            })
        });
        Ok(Response::new(Box::pin(stream)))
    }

    #[tracing::instrument(name = "grpc.create_order", skip_all)]
    async fn create_order(
        &self,
        req: Request<pb2::CreateOrderRequest>,
    ) -> Result<Response<pb2::CreateOrderResponse>, Status> {
        let r = req.into_inner();
        let key = r.idempotency_key.clone();
        let new = NewOrder::try_from(r).map_err(AppError::from)?;
        let created = self.orders.create(new, &key).await?;
        Ok(Response::new(pb2::CreateOrderResponse {
            order: Some(model::v2::order_to_pb(&created.order, FieldSet::ALL)),
            replayed: created.replayed,
        }))
    }
}

/// The legacy all-strings service.
#[derive(Debug, Clone)]
pub struct OrderServiceV1 {
    orders: Orders,
}

#[tonic::async_trait]
impl pb1::order_service_server::OrderService for OrderServiceV1 {
    #[tracing::instrument(name = "grpc.v1.list_orders", skip_all)]
    async fn list_orders(
        &self,
        req: Request<pb1::ListOrdersRequest>,
    ) -> Result<Response<pb1::ListOrdersResponse>, Status> {
        let r = req.into_inner();
        let q = self
            .orders
            .proto_query(&r.user_id, r.page_size, &r.page_token, None)
            .map_err(AppError::from)?;
        let page = self.orders.list(&q).await?;
        Ok(Response::new(pb1::ListOrdersResponse {
            orders: page.orders.iter().map(model::v1::order_to_v1).collect(),
            next_page_token: page.next.map(|t| t.encode()).unwrap_or_default(),
        }))
    }
}

/// The answer to a call shed by the concurrency limit.
fn overloaded() -> http::Response<tonic::body::Body> {
    Status::resource_exhausted(service_kit::shed::OVERLOADED).into_http()
}

/// Serves gRPC (and gRPC-web) on `listener` until `shutdown` is cancelled.
pub async fn serve(
    GrpcListener { listener, tls, cap }: GrpcListener,
    orders: Orders,
    limits: GrpcLimits,
    metrics: Arc<RequestMetrics>,
    shutdown: CancellationToken,
    h3: Option<tokio::sync::oneshot::Sender<H3Calls>>,
) -> anyhow::Result<()> {
    let server_timing = orders.server_timing;
    let (health_service, readiness) = service_kit::health::following(
        HEALTH_NAMES,
        orders.clone(),
        |o: Orders| async move { o.ready().await.is_ok() },
        shutdown.clone(),
    )
    .await;
    // Lists exactly what is added below, not user.v1 from the shared set.
    let descriptors = [
        proto::FILE_DESCRIPTOR_SET,
        tonic_health::pb::FILE_DESCRIPTOR_SET,
    ];
    let served = [
        tonic_health::pb::health_server::SERVICE_NAME,
        pb2::order_service_server::SERVICE_NAME,
        pb1::order_service_server::SERVICE_NAME,
    ];
    let (reflection, reflection_v1alpha) = service_kit::reflection::serving(&descriptors, &served)?;
    // A call answered before routing (shed, past its deadline) is labelled
    // by its path only if the path is one of these methods.
    let methods = service_kit::reflection::method_paths(&descriptors, &served);
    let mut v2 = pb2::order_service_server::OrderServiceServer::new(OrderServiceV2 {
        orders: orders.clone(),
        limits: limits.clone(),
        metrics: metrics.clone(),
        shutdown: shutdown.clone(),
    })
    .max_decoding_message_size(limits.max_request_bytes)
    .max_encoding_message_size(limits.max_response_bytes)
    .accept_compressed(CompressionEncoding::Gzip)
    .accept_compressed(CompressionEncoding::Zstd);
    if limits.send_zstd {
        v2 = v2.send_compressed(CompressionEncoding::Zstd);
    }
    if limits.send_gzip {
        v2 = v2.send_compressed(CompressionEncoding::Gzip);
    }
    let v1 = pb1::order_service_server::OrderServiceServer::new(OrderServiceV1 { orders })
        .max_decoding_message_size(limits.max_request_bytes)
        .max_encoding_message_size(limits.max_response_bytes);
    let conn = limits.conn;
    let mut server = tonic::transport::Server::builder();
    if let Some(age) = conn.max_age {
        // tonic applies one age to every connection: it is jittered once
        // per process (REST jitters per connection). Its grace is not
        // given to tonic: tonic 0.14 then skips the GOAWAY and cuts the
        // connection at age + grace, calls in flight included. The grace
        // is enforced under tonic instead (`preface::deadlined_for`).
        server = server.max_connection_age(service_kit::serve::jittered(
            age,
            service_kit::serve::seed(),
        ));
    }
    let routes = tonic::service::Routes::builder()
        // The request cap of the APIs, not tonic's 4 MiB default.
        .add_service(health_service.max_decoding_message_size(limits.max_request_bytes))
        .add_service(reflection.max_decoding_message_size(limits.max_request_bytes))
        .add_service(reflection_v1alpha.max_decoding_message_size(limits.max_request_bytes))
        .add_service(v2)
        .add_service(v1)
        .clone()
        .routes();
    let layers = tower::ServiceBuilder::new()
        // Outermost, so that gRPC-web calls are counted as such.
        .layer(RecordLayer::new(metrics).serving(methods))
        // A call answered before its body was read reads the rest first
        // (gRPC-web over HTTP/1.1 keeps its connection; HTTP/2 its window).
        .layer(service_kit::serve::leftover::EarlyAnswerLayer)
        .layer(tonic_web::GrpcWebLayer::new())
        // Inside gRPC-web, so that a gRPC-web call's status is in real trailers.
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
        // Inside gRPC-web, so a gRPC-web caller gets its own framing of the refusal.
        .layer(
            service_kit::shed::ShedLayer::shared(&limits.limiter, overloaded)
                .exempt(&["/grpc.health.", "/grpc.reflection."]),
        )
        // The caller's deadline, enforced: inside the status layer, so that
        // a call past it is counted as DEADLINE_EXCEEDED.
        .layer(service_kit::call_deadline::GrpcDeadlineLayer)
        // Innermost: from the call routed to its trailers (see `crate::timing`).
        .layer(tower::util::option_layer(
            server_timing.then_some(crate::timing::GrpcTimingLayer),
        ));
    if let Some(h3) = h3 {
        // The same calls, layers and all, for the HTTP/3 listener.
        let _ = h3.send(H3Calls::new(
            layers.clone().service(routes.clone().prepare()),
        ));
    }
    let router = server
        .accept_http1(true)
        .max_concurrent_streams(limits.max_concurrent_streams)
        .timeout(conn.body_read)
        .http2_keepalive_interval(Some(conn.idle))
        .http2_keepalive_timeout(Some(service_kit::preface::KEEPALIVE_TIMEOUT))
        .trace_fn(telemetry::spans::grpc_server::<()>)
        .layer(layers.into_inner())
        .add_routes(routes);
    let served =
        service_kit::preface::serve_tonic(router, listener, tls, conn, cap, shutdown).await;
    readiness.abort();
    served?;
    Ok(())
}

/// The gRPC listener's socket, its TLS when on, and its connection cap.
#[derive(Debug)]
pub struct GrpcListener {
    pub listener: tokio::net::TcpListener,
    pub tls: Option<tls::Acceptor>,
    pub cap: service_kit::cap::ConnCap,
}

/// The gRPC calls as the HTTP/3 listener serves them: every layer of the
/// TCP listener's calls but tonic's own (the call's span is made by the
/// HTTP/3 listener's dispatch, as `trace_fn` makes it here).
#[derive(Clone)]
pub struct H3Calls(
    tower::util::BoxCloneSyncService<
        http::Request<tonic::body::Body>,
        http::Response<tonic::body::Body>,
        Infallible,
    >,
);

impl std::fmt::Debug for H3Calls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("H3Calls")
    }
}

impl H3Calls {
    fn new<S, B>(service: S) -> Self
    where
        S: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<B>>
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
        S::Error: std::fmt::Display,
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<tonic::codegen::StdError>,
    {
        use tower::ServiceExt as _;
        H3Calls(tower::util::BoxCloneSyncService::new(tower::service_fn(
            move |request| {
                let service = service.clone();
                async move {
                    Ok(match service.oneshot(request).await {
                        Ok(answer) => answer.map(tonic::body::Body::new),
                        Err(e) => Status::internal(format!("the call failed: {e}")).into_http(),
                    })
                }
            },
        )))
    }

    /// Answers one call.
    pub async fn call(
        self,
        request: http::Request<tonic::body::Body>,
    ) -> http::Response<tonic::body::Body> {
        use tower::ServiceExt as _;
        let Ok(answer) = self.0.oneshot(request).await;
        answer
    }
}

/// The services the gRPC health check answers for: the whole server ("")
/// and each API.
const HEALTH_NAMES: &[&str] = &["", "order.v2.OrderService", "order.v1.OrderService"];
