//! The REST API: axum, one listener for HTTP/1.1 and h2c, JSON or protobuf on
//! every route.
//!
//! # Layout
//! - this file: the routes and their handlers, with their OpenAPI annotations;
//! - the `service-kit` crate: `Accept` / `Content-Type` handling and bounded
//!   body reads, shared with user-service;
//! - [`error`]: the one mapping from errors to statuses and problem bodies
//!   (RFC 9457), and this service's own problem types.

pub mod error;

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use model::json::{CreateOrderJson, CreatedOrderJson, OrderJson, OrderPageJson, Problem};
use model::{FieldSet, NewOrder};
use proto::order::{v1 as pb1, v2 as pb2};
use serde::Deserialize;
use telemetry::metrics::RequestMetrics;
use utoipa::{IntoParams, OpenApi};

use crate::service::{AppError, Orders};
use error::RestError;
use service_kit::negotiate::{Format, WireError, read_body};
use service_kit::problem::PROBLEM_JSON;

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct RestState {
    pub orders: Orders,
    /// The largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Requests served on every API, for /metrics.
    pub metrics: Arc<RequestMetrics>,
    /// The service's one limit of work in service (shared with gRPC and
    /// the streams' lookups); past it, 503 `overloaded` at once.
    pub limiter: service_kit::shed::Limiter,
    /// Gzip the API's answers for clients that accept it (`ORDER_REST_GZIP`).
    pub gzip: bool,
    /// The same with zstd (`ORDER_REST_ZSTD`).
    pub zstd: bool,
}

/// The REST router.
///
/// Every route passes through the same layers, outermost first: the server
/// span (tower-http's trace), its naming after the matched route, the
/// request metrics, and, on the API routes only, the shedding. They are
/// added as one `route_layer` per group of routes rather than one call per
/// layer: axum boxes a route again for each layer added, and clones the
/// whole nest of boxes on every request, so four separate layers cost about
/// twenty allocations per request where one stack of four costs two.
pub fn router(state: RestState) -> Router {
    // Connect shares this listener (see `crate::connect`): one route per
    // method, so that the metrics' route label names the method.
    let connect = tower::ServiceBuilder::new()
        .layer(axum::middleware::from_fn(crate::connect::edges))
        .layer(service_kit::call_deadline::ConnectDeadlineLayer)
        .service(crate::connect::service(
            state.orders.clone(),
            state.max_body_bytes,
        ));
    let mut router = Router::new();
    for method in crate::connect::METHODS {
        router = router.route_service(
            &format!("{}{method}", crate::connect::PREFIX),
            connect.clone(),
        );
    }
    let mut api = Router::new()
        .route("/v2/orders", get(list_orders).post(create_order))
        .route("/v2/orders/{id}", get(get_order))
        .route("/v1/orders", get(list_orders_v1));
    if state.orders.server_timing {
        // Innermost on the API routes: from the request routed to the
        // encoded answer (see `crate::timing`).
        api = api.layer(axum::middleware::from_fn(crate::timing::rest));
        router = router.layer(axum::middleware::from_fn(crate::timing::rest));
    }
    if state.gzip || state.zstd {
        // Negotiated per request: only an `Accept-Encoding` naming an
        // encoding that is on gets it.
        api = api.layer(
            tower_http::compression::CompressionLayer::new()
                .gzip(state.gzip)
                .zstd(state.zstd)
                .no_br()
                .no_deflate(),
        );
    }
    // The caller's deadline (`x-request-timeout-ms`), around the handler,
    // its encoding and compression: past it the work stops and the answer
    // is a 504 `deadline_exceeded`.
    api = api.route_layer(service_kit::call_deadline::RestDeadlineLayer);
    let trace = tower_http::trace::TraceLayer::new_for_http()
        .make_span_with(telemetry::spans::http_server::<axum::body::Body>)
        .on_response(telemetry::spans::OnHttpResponse::default())
        .on_failure(telemetry::http_failure::OnHttpFailure);
    // Names the server span after the matched route (`GET /v2/orders/{id}`,
    // or `order.v2.OrderService/ListOrders` for Connect).
    let route_span = telemetry::spans::RouteLayer::new().connect(crate::connect::PREFIX);
    // A route layer sees the matched route template, a bounded label.
    let record = telemetry::metrics::RecordLayer::new(state.metrics.clone());
    let served = router
        .merge(api)
        // Before the metrics layer, so that a 405 is counted like any answer
        // (and, on an overloaded instance, shed like any request).
        .method_not_allowed_fallback(service_kit::negotiate::method_not_allowed)
        .route_layer((
            trace.clone(),
            route_span.clone(),
            record.clone(),
            service_kit::shed::ShedLayer::shared(&state.limiter, service_kit::shed::overloaded),
        ));
    // Not shed: health checks and /metrics still answer on an overloaded
    // instance, which is alive and worth watching.
    let ops = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .route(
            "/problems/{kind}",
            service_kit::problem::route(error::PROBLEMS),
        )
        .method_not_allowed_fallback(service_kit::negotiate::method_not_allowed)
        .route_layer((trace.clone(), route_span, record));
    served
        .merge(ops)
        .fallback_service(tower::Layer::layer(
            &trace,
            axum::handler::HandlerWithoutStateExt::into_service(not_found),
        ))
        .with_state(state)
}

/// Prometheus text: requests per protocol and route, the process, the
/// store, the listeners (see `startup`).
async fn metrics(State(st): State<RestState>) -> Response {
    let mut out = String::with_capacity(32 * 1024);
    st.metrics.render(&mut out);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            telemetry::metrics::CONTENT_TYPE,
        )],
        out,
    )
        .into_response()
}

/// The 406 of every API route.
const NOT_ACCEPTABLE: &str = "`Accept` names neither JSON nor protobuf";
/// The 503 of every API route: shed, or the store is down.
const UNAVAILABLE: &str = "`overloaded`: the listener is at ORDER_MAX_CONCURRENT_REQUESTS, retry later; \
                           or `unavailable`: the store did not answer within the acquire timeout";

/// The OpenAPI document of this API, generated from the handlers below.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "order-service",
        description = "Users' orders. Every route answers JSON by default and protobuf \
                       (order.v2 / order.v1 messages) with `Accept: application/x-protobuf`."
    ),
    paths(list_orders, get_order, create_order, list_orders_v1, healthz, readyz),
    components(schemas(
        OrderPageJson,
        OrderJson,
        CreateOrderJson,
        CreatedOrderJson,
        Problem,
        pb1::ListOrdersResponse,
        pb1::Order
    ))
)]
pub struct ApiDoc;

async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

// The query structs keep every value as text, so that a bad one gets a 400
// naming its field; the `param` attributes document the values accepted.

/// Query of `GET /v2/orders`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// The user whose orders to list (UUID).
    #[param(required = true, value_type = String, format = Uuid, example = "00000000-0000-0000-0000-000000000010")]
    user_id: Option<String>,
    /// Page size, 1 to the server's maximum (10,000 by default). Default 100.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 10000, example = 5)]
    limit: Option<String>,
    /// `next_page_token` of the previous page.
    #[param(value_type = Option<String>)]
    page_token: Option<String>,
    /// Comma-separated fields to return, such as `id,status,total_minor`.
    /// Default: all. `id` is always returned.
    #[param(value_type = Option<String>, example = "id,status,total_minor",
        pattern = "^((id|user_id|product_id|product_name|quantity|unit_price_minor|discount_minor|total_minor|currency|status|gift|shipping_address|note|coupon_code|created_at|updated_at)(,(id|user_id|product_id|product_name|quantity|unit_price_minor|discount_minor|total_minor|currency|status|gift|shipping_address|note|coupon_code|created_at|updated_at))*)?$")]
    fields: Option<String>,
}

/// Query of `GET /v2/orders/{id}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct GetParams {
    /// Comma-separated fields to return. Default: all.
    #[param(value_type = Option<String>, example = "id,status,total_minor",
        pattern = "^((id|user_id|product_id|product_name|quantity|unit_price_minor|discount_minor|total_minor|currency|status|gift|shipping_address|note|coupon_code|created_at|updated_at)(,(id|user_id|product_id|product_name|quantity|unit_price_minor|discount_minor|total_minor|currency|status|gift|shipping_address|note|coupon_code|created_at|updated_at))*)?$")]
    fields: Option<String>,
}

fn parse_limit(s: Option<&str>) -> Result<Option<i64>, RestError> {
    s.map(|s| {
        s.parse::<i64>().map_err(|_| {
            AppError::Invalid(model::ParseError::new(
                "limit",
                format!("{} is not a whole number", model::quoted(s)),
            ))
            .into()
        })
    })
    .transpose()
}

/// A list query from REST parameters; absent ones take their defaults.
fn rest_query(
    st: &RestState,
    user_id: &Option<String>,
    limit: &Option<String>,
    page_token: &Option<String>,
    fields: FieldSet,
) -> Result<crate::store::ListQuery, RestError> {
    Ok(st
        .orders
        .list_query(
            user_id.as_deref().unwrap_or(""),
            ("limit", parse_limit(limit.as_deref())?),
            page_token.as_deref().unwrap_or(""),
            fields,
        )
        .map_err(AppError::from)?)
}

fn parse_fields(s: Option<&str>) -> Result<FieldSet, RestError> {
    Ok(FieldSet::parse_csv(s.unwrap_or("")).map_err(AppError::from)?)
}

/// One page of a user's orders, sorted by order id.
#[utoipa::path(
    get, path = "/v2/orders", params(ListParams),
    responses(
        (status = 200, description = "One page of orders (protobuf: order.v2.ListOrdersResponse)", body = OrderPageJson),
        (status = 400, description = "A malformed or out-of-range parameter", body = Problem, content_type = PROBLEM_JSON),
        (status = 406, description = NOT_ACCEPTABLE, body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = UNAVAILABLE, body = Problem, content_type = PROBLEM_JSON, headers(("Retry-After" = u32, description = "Seconds to wait before retrying (sent with `overloaded`)"))),
    )
)]
#[tracing::instrument(name = "rest.list_orders", skip_all)]
async fn list_orders(
    State(st): State<RestState>,
    headers: HeaderMap,
    q: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, RestError> {
    let Query(p) = q?;
    let format = Format::accepted(&headers)?;
    let fields = parse_fields(p.fields.as_deref())?;
    let query = rest_query(&st, &p.user_id, &p.limit, &p.page_token, fields)?;
    let page = st.orders.list(&query).await?;
    let next = page.next.map(|t| t.encode());
    Ok(match format {
        Format::Json => format.json(
            StatusCode::OK,
            &OrderPageJson {
                orders: page
                    .orders
                    .iter()
                    .map(|o| OrderJson::from_order(o, fields))
                    .collect(),
                next_page_token: next,
            },
        ),
        Format::Proto => {
            let (orders, next_page_token) = page.into_pb(fields);
            format.proto(
                StatusCode::OK,
                &pb2::ListOrdersResponse {
                    orders,
                    next_page_token,
                },
            )
        }
    })
}

/// One order.
#[utoipa::path(
    get, path = "/v2/orders/{id}", params(("id" = uuid::Uuid, Path, description = "Order id (UUID)"), GetParams),
    responses(
        (status = 200, description = "The order (protobuf: order.v2.GetOrderResponse)", body = OrderJson),
        (status = 400, description = "A malformed id or field name", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "No such order", body = Problem, content_type = PROBLEM_JSON),
        (status = 406, description = NOT_ACCEPTABLE, body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = UNAVAILABLE, body = Problem, content_type = PROBLEM_JSON, headers(("Retry-After" = u32, description = "Seconds to wait before retrying (sent with `overloaded`)"))),
    )
)]
#[tracing::instrument(name = "rest.get_order", skip_all)]
async fn get_order(
    State(st): State<RestState>,
    headers: HeaderMap,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
    q: Result<Query<GetParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, RestError> {
    let Path(id) = id.map_err(WireError::from)?;
    let Query(p) = q?;
    let format = Format::accepted(&headers)?;
    let fields = parse_fields(p.fields.as_deref())?;
    let order = st.orders.get(&id, fields).await?;
    Ok(match format {
        Format::Json => format.json(StatusCode::OK, &OrderJson::from_order(&order, fields)),
        Format::Proto => format.proto(
            StatusCode::OK,
            &pb2::GetOrderResponse {
                order: Some(model::v2::order_to_pb(&order, fields)),
            },
        ),
    })
}

/// Places an order. The `Idempotency-Key` header is required: a retry with the
/// same key and body returns the first order (200, `replayed: true`) and never
/// creates a second; the same key with another body is 422.
#[utoipa::path(
    post, path = "/v2/orders",
    params(("Idempotency-Key" = String, Header, description = "1 to 255 characters naming this order; the same on every retry", min_length = 1, max_length = 255)),
    request_body(content = CreateOrderJson, description = "JSON, or an order.v2.CreateOrderRequest with Content-Type application/x-protobuf"),
    responses(
        (status = 201, description = "Created", body = CreatedOrderJson),
        (status = 200, description = "Replayed: the key was seen before", body = CreatedOrderJson),
        (status = 400, description = "A malformed body or field", body = Problem, content_type = PROBLEM_JSON),
        (status = 406, description = NOT_ACCEPTABLE, body = Problem, content_type = PROBLEM_JSON),
        (status = 413, description = "The body is over the size limit (ORDER_MAX_REQUEST_BYTES)", body = Problem, content_type = PROBLEM_JSON),
        (status = 415, description = "Neither JSON nor protobuf", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "The key was used for a different order", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = UNAVAILABLE, body = Problem, content_type = PROBLEM_JSON, headers(("Retry-After" = u32, description = "Seconds to wait before retrying (sent with `overloaded`)"))),
    )
)]
#[tracing::instrument(name = "rest.create_order", skip_all)]
async fn create_order(
    State(st): State<RestState>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<Response, RestError> {
    let format = Format::accepted(&headers)?;
    let body_format = Format::content_type(&headers)?;
    let bytes = read_body(&headers, body, st.max_body_bytes).await?;
    let (new, key) = match body_format {
        Format::Json => {
            let j: CreateOrderJson = serde_json::from_slice(&bytes)
                .map_err(|e| WireError::BadBody(format!("the JSON body is invalid: {e}")))?;
            (NewOrder::try_from(j).map_err(AppError::from)?, None)
        }
        Format::Proto => {
            let r = <pb2::CreateOrderRequest as prost::Message>::decode(bytes)
                .map_err(|e| WireError::BadBody(format!("the protobuf body is invalid: {e}")))?;
            let key = (!r.idempotency_key.is_empty()).then(|| r.idempotency_key.clone());
            (NewOrder::try_from(r).map_err(AppError::from)?, key)
        }
    };
    let header_key = headers
        .get("idempotency-key")
        .map(|v| {
            v.to_str().map(str::to_owned).map_err(|_| {
                AppError::Invalid(model::ParseError::new(
                    "Idempotency-Key",
                    "must be visible ASCII",
                ))
            })
        })
        .transpose()?;
    let key = header_key.or(key).unwrap_or_default();
    let created = st.orders.create(new, &key).await?;
    let status = if created.replayed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok(match format {
        Format::Json => format.json(
            status,
            &CreatedOrderJson {
                order: OrderJson::from_order(&created.order, FieldSet::ALL),
                replayed: created.replayed,
            },
        ),
        Format::Proto => format.proto(
            status,
            &pb2::CreateOrderResponse {
                order: Some(model::v2::order_to_pb(&created.order, FieldSet::ALL)),
                replayed: created.replayed,
            },
        ),
    })
}

/// Query of `GET /v1/orders`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListV1Params {
    /// The user whose orders to list (UUID).
    #[param(required = true, value_type = String, format = Uuid, example = "00000000-0000-0000-0000-000000000010")]
    user_id: Option<String>,
    /// Page size, 1 to the server's maximum (10,000 by default). Default 100.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 10000, example = 5)]
    limit: Option<String>,
    /// `next_page_token` of the previous page.
    #[param(value_type = Option<String>)]
    page_token: Option<String>,
}

/// The legacy all-strings listing (the type-fix post's v1): every field a string.
#[utoipa::path(
    get, path = "/v1/orders", params(ListV1Params),
    responses(
        (status = 200, description = "One page of orders, all strings (protobuf: order.v1.ListOrdersResponse)", body = pb1::ListOrdersResponse),
        (status = 400, description = "A malformed or out-of-range parameter", body = Problem, content_type = PROBLEM_JSON),
        (status = 406, description = NOT_ACCEPTABLE, body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = UNAVAILABLE, body = Problem, content_type = PROBLEM_JSON, headers(("Retry-After" = u32, description = "Seconds to wait before retrying (sent with `overloaded`)"))),
    )
)]
#[tracing::instrument(name = "rest.list_orders_v1", skip_all)]
async fn list_orders_v1(
    State(st): State<RestState>,
    headers: HeaderMap,
    q: Result<Query<ListV1Params>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, RestError> {
    let Query(p) = q?;
    let format = Format::accepted(&headers)?;
    let query = rest_query(&st, &p.user_id, &p.limit, &p.page_token, FieldSet::ALL)?;
    let page = st.orders.list(&query).await?;
    let body = pb1::ListOrdersResponse {
        orders: page.orders.iter().map(model::v1::order_to_v1).collect(),
        next_page_token: page.next.map(|t| t.encode()).unwrap_or_default(),
    };
    Ok(match format {
        Format::Json => format.json(StatusCode::OK, &body),
        Format::Proto => format.proto(StatusCode::OK, &body),
    })
}

/// The admin listener's router: liveness, readiness and `/metrics`, never
/// shed, and nothing else (an unknown path is a 404 problem).
pub fn admin_router(state: RestState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .method_not_allowed_fallback(service_kit::negotiate::method_not_allowed)
        .fallback(|uri: axum::http::Uri| async move {
            WireError::NoRoute(uri.path().to_owned()).into_response()
        })
        .with_state(state)
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "Alive")))]
async fn healthz() -> &'static str {
    "ok"
}

/// Readiness: the store answers.
#[utoipa::path(get, path = "/readyz", responses(
    (status = 200, description = "Ready"),
    (status = 503, description = "The store is unavailable", body = Problem, content_type = PROBLEM_JSON),
))]
async fn readyz(State(st): State<RestState>) -> Result<&'static str, RestError> {
    st.orders.ready().await?;
    Ok("ready")
}

/// No route: a Connect (or gRPC) error for an RPC call, so that its client
/// reads `unimplemented`; a problem for anything else.
async fn not_found(
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    if crate::connect::is_rpc_call(&method, uri.path()) {
        return crate::connect::not_served(uri.path(), &headers);
    }
    WireError::NoRoute(uri.path().to_owned()).into_response()
}
