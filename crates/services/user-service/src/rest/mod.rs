//! The REST boundary: axum routes, served over HTTP/1.1 and h2c (prior
//! knowledge) on one listener, JSON or protobuf by `Accept`/`Content-Type`.
//!
//! - `POST /v1/users`: register (201; a taken username is 409).
//! - `GET /v1/users/{id}`: the user alone, the no-fan-out floor.
//! - `GET /v1/users/{id}/orders?limit=&fields=&via=`: the user and its orders
//!   from order-service; `via` may also come as the `x-via` header. The
//!   answer carries `x-via` and `x-upstream-micros` headers.
//! - `GET /v1/orders?users=&limit=&fields=&via=&batch=`: the first `limit`
//!   orders of each of several users, fetched as one call per user or, with
//!   `batch=true`, one call for all. Headers as above, plus
//!   `x-upstream-calls`.
//! - `/healthz`, `/readyz`, `/metrics` (Prometheus text), `/openapi.json`,
//!   `/problems/{kind}` (what each problem type of the error answers means).
//!
//! Every error is an RFC 9457 problem (`application/problem+json`), mapped
//! once in [`error`].

pub mod error;
pub mod headers;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use model::json::{OrderJson, Problem};
use model::{FieldSet, ParseError};
use prost::Message as _;
use proto::user::v1 as pb;
use serde::Deserialize;
use utoipa::OpenApi;
use uuid::Uuid;

use self::error::RestError;
pub use self::headers::{X_UPSTREAM_CALLS, X_UPSTREAM_MICROS, X_UPSTREAM_PARTS, X_VIA};
use crate::domain::{
    NewUser, OrdersOfUsersJson, RegisterUserJson, UserEnvelopeJson, UserJson, UserOrdersJson,
    UserWithOrdersJson, user_to_pb,
};
use crate::metrics::Metrics;
use crate::service::{AppError, DEFAULT_LIMIT, Fanout, MAX_USERS, Service};
use crate::store::UserStore;
use service_kit::negotiate::{Format, WireError};
use service_kit::problem::PROBLEM_JSON;

/// What the handlers share.
#[derive(Clone, Debug)]
pub struct AppState {
    pub service: Service,
    pub metrics: Arc<Metrics>,
    /// The service's one limit of API requests in service, shared by REST
    /// and gRPC; past it, 503 `overloaded` at once.
    pub limiter: service_kit::shed::Limiter,
    /// The largest request body read (USER_MAX_REQUEST_BYTES); more is 413.
    pub max_request_bytes: usize,
}

/// Every route.
///
/// Each route passes through the same layers, outermost first: the server
/// span, its naming after the matched route, the request metrics and, on
/// the API routes only, the shedding; added as one `route_layer` per group
/// of routes, because axum boxes a route again for every layer added and
/// clones the whole nest on every request (see order-service's router).
pub fn router(state: AppState) -> Router {
    // Failures are logged once, by the error mapping, with their cause.
    // The server span continues the caller's trace (k6, or any client
    // that sends `traceparent`).
    let trace = tower_http::trace::TraceLayer::new_for_http()
        .make_span_with(telemetry::spans::http_server::<axum::body::Body>)
        .on_response(telemetry::spans::OnHttpResponse::default())
        .on_failure(());
    // Names the server span after the route (`GET /v1/users/{id}/orders`).
    let route_span = telemetry::spans::RouteLayer::new();
    // A route layer sees the matched route template, a bounded label.
    let record = telemetry::metrics::RecordLayer::new(state.metrics.requests.clone());
    let api = Router::new()
        .route("/v1/users", post(register))
        .route("/v1/users/{id}", get(get_user))
        .route("/v1/users/{id}/orders", get(get_user_orders))
        .route("/v1/orders", get(orders_of_users))
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
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/metrics/hdr", get(hdr))
        .route("/openapi.json", get(openapi))
        .route(
            "/problems/{kind}",
            service_kit::problem::route(error::PROBLEMS),
        )
        .method_not_allowed_fallback(service_kit::negotiate::method_not_allowed)
        .route_layer((trace.clone(), route_span, record));
    let no_route = |uri: Uri| async move { WireError::NoRoute(uri.path().to_owned()) };
    api.merge(ops)
        .fallback_service(tower::Layer::layer(
            &trace,
            axum::handler::HandlerWithoutStateExt::into_service(no_route),
        ))
        .with_state(state)
}

/// The admin listener's router: liveness, readiness and `/metrics`, never
/// shed, and nothing else (an unknown path is a 404 problem).
pub fn admin_router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/metrics/hdr", get(hdr))
        .method_not_allowed_fallback(service_kit::negotiate::method_not_allowed)
        .fallback(|uri: Uri| async move { WireError::NoRoute(uri.path().to_owned()) })
        .with_state(state)
}

fn parse_id(id: &str) -> Result<Uuid, RestError> {
    Ok(model::v2::parse_uuid("id", id).map_err(AppError::from)?)
}

/// Registers a user.
#[utoipa::path(
    post, path = "/v1/users",
    request_body(content = RegisterUserJson, description = "JSON, or a protobuf user.v1.RegisterUserRequest with Content-Type application/x-protobuf"),
    responses(
        (status = 201, description = "Registered (protobuf: user.v1.RegisterUserResponse)", body = UserEnvelopeJson,
            headers(("Location" = String, description = "The new user's URL"))),
        (status = 400, description = "A field is invalid; `field` names it", body = Problem, content_type = PROBLEM_JSON),
        (status = 406, description = NOT_ACCEPTABLE, body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "The username is taken", body = Problem, content_type = PROBLEM_JSON),
        (status = 413, description = "The body is over the request cap (USER_MAX_REQUEST_BYTES, 64 KiB by default)", body = Problem, content_type = PROBLEM_JSON),
        (status = 415, description = "Neither JSON nor protobuf", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = UNAVAILABLE, body = Problem, content_type = PROBLEM_JSON, headers(("Retry-After" = u32, description = "Seconds to wait before retrying (sent with `overloaded`)"))),
    )
)]
#[tracing::instrument(skip_all)]
async fn register(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, RestError> {
    let out = Format::accepted(&headers)?;
    let bytes = service_kit::negotiate::read_body(&headers, body, st.max_request_bytes).await?;
    let new = match Format::content_type(&headers)? {
        Format::Json => {
            let form: RegisterUserJson = serde_json::from_slice(&bytes)
                .map_err(|e| WireError::BadBody(format!("the body is not a registration: {e}")))?;
            NewUser::try_from(form).map_err(AppError::from)?
        }
        Format::Proto => {
            let form = pb::RegisterUserRequest::decode(bytes).map_err(|e| {
                WireError::BadBody(format!("the body is not a RegisterUserRequest: {e}"))
            })?;
            NewUser::try_from(form).map_err(AppError::from)?
        }
    };
    let user = st.service.register(new).await?;
    let mut resp = out.respond(
        StatusCode::CREATED,
        || UserEnvelopeJson {
            user: UserJson::from(&user),
        },
        || pb::RegisterUserResponse {
            user: Some(user_to_pb(&user)),
        },
    );
    if let Ok(loc) = HeaderValue::from_str(&format!("/v1/users/{}", user.id)) {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(resp)
}

/// One user, without its orders: no call to order-service.
#[utoipa::path(
    get, path = "/v1/users/{id}",
    params(("id" = Uuid, Path, description = "The user's id", example = "00000000-0000-0000-0000-000000000010")),
    responses(
        (status = 200, description = "The user (protobuf: user.v1.GetUserResponse)", body = UserEnvelopeJson),
        (status = 400, description = "The id is not a UUID", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "No such user", body = Problem, content_type = PROBLEM_JSON),
        (status = 406, description = NOT_ACCEPTABLE, body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = UNAVAILABLE, body = Problem, content_type = PROBLEM_JSON, headers(("Retry-After" = u32, description = "Seconds to wait before retrying (sent with `overloaded`)"))),
    )
)]
#[tracing::instrument(skip_all)]
async fn get_user(
    State(st): State<AppState>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, RestError> {
    let Path(id) = id.map_err(WireError::from)?;
    let out = Format::accepted(&headers)?;
    let user = st.service.get_user(parse_id(&id)?).await?;
    Ok(out.respond(
        StatusCode::OK,
        || UserEnvelopeJson {
            user: UserJson::from(&user),
        },
        || pb::GetUserResponse {
            user: Some(user_to_pb(&user)),
        },
    ))
}

/// The query of `GET /v1/users/{id}/orders`. Kept as text so that a bad
/// value gets an error naming its field rather than a generic rejection.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OrdersParams {
    /// Orders to fetch, 1 to 10000; default 100.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 10000, example = 5)]
    limit: Option<String>,
    /// Comma-separated order fields; default all. `id` is always included.
    #[param(value_type = Option<String>, example = "id,status,total_minor",
        pattern = "^((id|user_id|product_id|product_name|quantity|unit_price_minor|discount_minor|total_minor|currency|status|gift|shipping_address|note|coupon_code|created_at|updated_at)(,(id|user_id|product_id|product_name|quantity|unit_price_minor|discount_minor|total_minor|currency|status|gift|shipping_address|note|coupon_code|created_at|updated_at))*)?$")]
    fields: Option<String>,
    /// The transport to order-service; default from the settings
    /// (USER_DEFAULT_VIA). The `x-via` header does the same.
    // The pattern must be a literal; a test holds it to `transports::ALL`.
    #[param(value_type = Option<String>, example = "grpc",
        pattern = "^(h1-json|h1-json-close|h2c-json|h1-proto|h2c-proto|h2c-proto-tuned|connect-h1-proto|connect-h2c-proto|grpc|grpc-tuned|grpc-stream|grpc-stream-tuned|grpc-bidi|grpc-bidi-tuned|tcp-proto|grpc-v1|h3-json|h3-proto|grpc-h3)$")]
    via: Option<String>,
}

/// One user with its orders, fetched from order-service over `via`.
#[utoipa::path(
    get, path = "/v1/users/{id}/orders",
    params(("id" = Uuid, Path, description = "The user's id", example = "00000000-0000-0000-0000-000000000010"), OrdersParams),
    responses(
        (status = 200, description = "The user and its orders (protobuf: user.v1.GetUserWithOrdersResponse without via/upstream_micros). \
Headers: x-via (the transport), x-upstream-micros (the round trip to order-service) and, with USER_UPSTREAM_BREAKDOWN on, x-upstream-parts (where the round trip went, µs).", body = UserWithOrdersJson),
        (status = 400, description = "A bad id, limit, fields or an unknown via (the message lists the valid ones)", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "No such user", body = Problem, content_type = PROBLEM_JSON),
        (status = 406, description = NOT_ACCEPTABLE, body = Problem, content_type = PROBLEM_JSON),
        (status = 502, description = "order-service gave an answer that could not be used", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "`unavailable`: order-service (or this service's store) is unavailable; \
or `overloaded`: the listener is at USER_MAX_CONCURRENT_REQUESTS, retry later", body = Problem, content_type = PROBLEM_JSON,
            headers(("Retry-After" = u32, description = "Seconds to wait before retrying (sent with `overloaded`)"))),
        (status = 504, description = "order-service did not answer within the upstream timeout (USER_UPSTREAM_TIMEOUT_MS)", body = Problem, content_type = PROBLEM_JSON),
    )
)]
#[tracing::instrument(skip_all)]
async fn get_user_orders(
    State(st): State<AppState>,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<OrdersParams>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, RestError> {
    let Path(id) = id.map_err(WireError::from)?;
    let Query(p) = query.map_err(WireError::from)?;
    let out = Format::accepted(&headers)?;
    let id = parse_id(&id)?;
    let via_header = headers.get(X_VIA).map(|v| v.to_str().unwrap_or("?"));
    // The query wins over the header: it is the more specific of the two.
    let via = st.service.transport(p.via.as_deref().or(via_header))?;
    let limit = parse_limit(p.limit.as_deref(), DEFAULT_LIMIT)?;
    let fields = FieldSet::parse_csv(p.fields.as_deref().unwrap_or("")).map_err(AppError::from)?;
    let got = st.service.user_with_orders(id, via, limit, fields).await?;
    let mut resp = out.respond(
        StatusCode::OK,
        || UserWithOrdersJson {
            user: UserJson::from(&got.user),
            orders: got
                .orders
                .iter()
                .map(|o| OrderJson::from_order(o, got.fields))
                .collect(),
        },
        || pb::GetUserWithOrdersResponse {
            user: Some(user_to_pb(&got.user)),
            orders: got
                .orders
                .iter()
                .map(|o| model::v2::order_to_pb(o, got.fields))
                .collect(),
            // Left unset on REST (the headers carry them) so that the body is
            // the same whichever transport fetched it.
            via: String::new(),
            upstream_micros: 0,
        },
    );
    let h = resp.headers_mut();
    h.insert(X_VIA, HeaderValue::from_static(got.via.name()));
    h.insert(
        X_UPSTREAM_MICROS,
        HeaderValue::from(got.upstream.as_micros() as u64),
    );
    if let Some(parts) = got.parts
        && let Ok(v) = HeaderValue::from_str(&parts.header())
    {
        h.insert(X_UPSTREAM_PARTS, v);
    }
    Ok(resp)
}

/// A `limit` parameter; absent or empty: `default`.
fn parse_limit(raw: Option<&str>, default: u32) -> Result<u32, AppError> {
    match raw.map(str::trim) {
        None | Some("") => Ok(default),
        Some(s) => s.parse().map_err(|_| {
            AppError::from(ParseError::new(
                "limit",
                format!("{} is not a number from 1 to 10000", model::quoted(s)),
            ))
        }),
    }
}

/// The query of `GET /v1/orders`, kept as text like [`OrdersParams`].
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UsersOrdersParams {
    /// Comma-separated user ids, 1 to 1000 of them; answered in this order.
    #[param(value_type = String, example = "00000000-0000-0001-0000-000000000001,00000000-0000-0001-0000-000000000002",
        pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(,[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})*$")]
    users: Option<String>,
    /// Orders per user, from 1; the limit times the number of users is at
    /// most 10000. Default 1: each user's first order.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 10000, example = 1)]
    limit: Option<String>,
    /// As for `/v1/users/{id}/orders`.
    #[param(value_type = Option<String>, example = "id,status,total_minor",
        pattern = "^((id|user_id|product_id|product_name|quantity|unit_price_minor|discount_minor|total_minor|currency|status|gift|shipping_address|note|coupon_code|created_at|updated_at)(,(id|user_id|product_id|product_name|quantity|unit_price_minor|discount_minor|total_minor|currency|status|gift|shipping_address|note|coupon_code|created_at|updated_at))*)?$")]
    fields: Option<String>,
    /// As for `/v1/users/{id}/orders`.
    #[param(value_type = Option<String>, example = "grpc",
        pattern = "^(h1-json|h1-json-close|h2c-json|h1-proto|h2c-proto|h2c-proto-tuned|connect-h1-proto|connect-h2c-proto|grpc|grpc-tuned|grpc-stream|grpc-stream-tuned|grpc-bidi|grpc-bidi-tuned|tcp-proto|grpc-v1|h3-json|h3-proto|grpc-h3)$")]
    via: Option<String>,
    /// `false` (default): one call to order-service per user, all at once
    /// (a lookup each on the shared stream for grpc-bidi and tcp-proto).
    /// `true`: one call for all users: `BatchListOrders` over grpc,
    /// `BatchStreamOrders` (one message per user) over grpc-stream; other
    /// transports have none and answer 400.
    #[param(value_type = Option<bool>, example = false)]
    batch: Option<String>,
}

/// The users of `users=`: UUIDs, comma-separated, at most [`MAX_USERS`].
fn parse_users(raw: Option<&str>) -> Result<Vec<Uuid>, AppError> {
    let raw = raw.map(str::trim).unwrap_or("");
    if raw.is_empty() {
        return Err(ParseError::new("users", "is required: comma-separated user ids").into());
    }
    // Counted before parsing, so that a huge list costs no more than its split.
    let n = raw.split(',').count();
    if n > MAX_USERS {
        return Err(
            ParseError::new("users", format!("names {n} users; at most {MAX_USERS}")).into(),
        );
    }
    raw.split(',')
        .enumerate()
        .map(|(i, s)| {
            Uuid::parse_str(s.trim()).map_err(|_| {
                AppError::from(ParseError::new(
                    "users",
                    format!("item {} ({}) is not a UUID", i + 1, model::quoted(s)),
                ))
            })
        })
        .collect()
}

/// Several users' orders, fetched from order-service over `via`.
#[utoipa::path(
    get, path = "/v1/orders",
    params(UsersOrdersParams),
    responses(
        (status = 200, description = "Each user's orders, in the order named (protobuf: user.v1.OrdersOfUsers). \
user-service's own store is not read: a user order-service does not know has no orders. \
Headers: x-via (the transport), x-upstream-micros (from the first call's start to the last one's end) \
and x-upstream-calls (calls made to order-service).", body = OrdersOfUsersJson),
        (status = 400, description = "A bad user id, limit, fields, via or batch, too many users, or batch=true over a transport without a batch call", body = Problem, content_type = PROBLEM_JSON),
        (status = 406, description = NOT_ACCEPTABLE, body = Problem, content_type = PROBLEM_JSON),
        (status = 502, description = "order-service gave an answer that could not be used", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "`unavailable`: order-service is unavailable; \
or `overloaded`: the listener is at USER_MAX_CONCURRENT_REQUESTS, retry later", body = Problem, content_type = PROBLEM_JSON,
            headers(("Retry-After" = u32, description = "Seconds to wait before retrying (sent with `overloaded`)"))),
        (status = 504, description = "order-service did not answer within the upstream timeout (USER_UPSTREAM_TIMEOUT_MS)", body = Problem, content_type = PROBLEM_JSON),
    )
)]
#[tracing::instrument(skip_all)]
async fn orders_of_users(
    State(st): State<AppState>,
    query: Result<Query<UsersOrdersParams>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, RestError> {
    let Query(p) = query.map_err(WireError::from)?;
    let out = Format::accepted(&headers)?;
    let via_header = headers.get(X_VIA).map(|v| v.to_str().unwrap_or("?"));
    let via = st.service.transport(p.via.as_deref().or(via_header))?;
    let users = parse_users(p.users.as_deref())?;
    let limit = parse_limit(p.limit.as_deref(), 1)?;
    let fields = FieldSet::parse_csv(p.fields.as_deref().unwrap_or("")).map_err(AppError::from)?;
    let fanout = match p.batch.as_deref().map(str::trim) {
        None | Some("") | Some("false") => Fanout::Each,
        Some("true") => Fanout::Batch,
        Some(s) => {
            return Err(AppError::from(ParseError::new(
                "batch",
                format!("{} is neither true nor false", model::quoted(s)),
            ))
            .into());
        }
    };
    if fanout == Fanout::Batch && via.batch_call().is_none() {
        return Err(AppError::from(crate::service::no_batch(via)).into());
    }
    let got = st
        .service
        .orders_of_users(users, via, limit, fields, fanout)
        .await?;
    let mut resp = out.respond(
        StatusCode::OK,
        || OrdersOfUsersJson {
            lookups: got
                .lookups
                .iter()
                .map(|(user_id, orders)| UserOrdersJson {
                    user_id: *user_id,
                    orders: orders
                        .iter()
                        .map(|o| OrderJson::from_order(o, got.fields))
                        .collect(),
                })
                .collect(),
        },
        || pb::OrdersOfUsers {
            lookups: got
                .lookups
                .iter()
                .map(|(user_id, orders)| pb::UserOrders {
                    user_id: user_id.to_string(),
                    orders: orders
                        .iter()
                        .map(|o| model::v2::order_to_pb(o, got.fields))
                        .collect(),
                })
                .collect(),
        },
    );
    let h = resp.headers_mut();
    h.insert(X_VIA, HeaderValue::from_static(got.via.name()));
    h.insert(
        X_UPSTREAM_MICROS,
        HeaderValue::from(got.upstream.as_micros() as u64),
    );
    h.insert(X_UPSTREAM_CALLS, HeaderValue::from(got.calls));
    Ok(resp)
}

/// Ready when the store answers. order-service being down does not make
/// user-service unready: `GET /v1/users/{id}` still works, and the order
/// routes answer 503 quickly rather than being taken out of rotation.
async fn readyz(State(st): State<AppState>) -> Response {
    match st.service.store().ping().await {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "not ready");
            service_kit::problem::UNAVAILABLE.response(
                StatusCode::SERVICE_UNAVAILABLE,
                "the store is not ready".to_owned(),
                None,
            )
        }
    }
}

async fn metrics(State(st): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        st.metrics.render(),
    )
        .into_response()
}

/// The query of `/metrics/hdr`.
#[derive(Debug, Deserialize)]
struct HdrQuery {
    via: Option<String>,
    format: Option<String>,
    reset: Option<bool>,
}

/// One transport's HDR histogram of good upstream calls
/// ([`telemetry::hdr`]): `via` names it (required), `format=hgrm` asks
/// for the percentile distribution rather than the encoded histogram, and
/// `reset=true` empties it in the same step.
async fn hdr(
    State(st): State<AppState>,
    q: Result<Query<HdrQuery>, QueryRejection>,
) -> Result<Response, RestError> {
    let Query(q) = q.map_err(WireError::from)?;
    let Some(via) = q.via.as_deref().filter(|v| !v.trim().is_empty()) else {
        return Err(WireError::BadQuery(format!(
            "via is required: one of {}",
            transports::Transport::names()
        ))
        .into());
    };
    let via = st.service.transport(Some(via))?;
    let hgrm = match q.format.as_deref() {
        None | Some("base64") => false,
        Some("hgrm") => true,
        Some(other) => {
            return Err(WireError::BadQuery(format!(
                "format {} is not one of base64, hgrm",
                model::quoted(other)
            ))
            .into());
        }
    };
    let h = st.metrics.transport(via).hdr(q.reset.unwrap_or(false));
    let body = if hgrm {
        telemetry::hdr::percentile_distribution(&h)
    } else {
        telemetry::hdr::encode(&h)
    };
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response())
}

/// The 406 of every API route.
const NOT_ACCEPTABLE: &str = "`Accept` names neither JSON nor protobuf";
/// The 503 of every API route but the fan-out, which has more causes.
const UNAVAILABLE: &str = "`overloaded`: the listener is at USER_MAX_CONCURRENT_REQUESTS, retry later; \
                           or `unavailable`: the store is unavailable";

/// The OpenAPI document of the routes above, generated from this code.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "user-service",
        description = "Users, and their orders fetched from order-service over a switchable transport."
    ),
    paths(register, get_user, get_user_orders, orders_of_users),
    components(schemas(
        UserJson,
        UserEnvelopeJson,
        UserWithOrdersJson,
        OrdersOfUsersJson,
        UserOrdersJson,
        RegisterUserJson,
        OrderJson,
        Problem,
        crate::domain::Gender
    ))
)]
pub struct ApiDoc;

async fn openapi() -> impl IntoResponse {
    axum::Json(ApiDoc::openapi())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(doc: &serde_json::Value, path: &str, name: &str) -> serde_json::Value {
        doc["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap_or_else(|| panic!("{path} has parameters"))
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{path} has a `{name}` parameter"))
            .clone()
    }

    #[test]
    fn the_openapi_via_pattern_is_exactly_the_transports_of_the_transports_crate() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        for path in ["/v1/users/{id}/orders", "/v1/orders"] {
            let via = param(&doc, path, "via");
            assert_eq!(
                via["schema"]["pattern"].as_str(),
                Some(format!("^({})$", transports::ALL.join("|")).as_str()),
                "{path}: {via}"
            );
        }
    }

    #[test]
    fn the_openapi_error_answers_are_all_rfc_9457_problems() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let errors = testkit::problem::openapi_errors_are_problems(&doc);
        assert!(errors > 10, "{errors} error answers documented");
        assert!(doc["components"]["schemas"]["Problem"]["properties"]["field"].is_object());
    }

    #[test]
    fn the_openapi_many_users_route_requires_users_that_are_uuids() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let users = param(&doc, "/v1/orders", "users");
        assert_eq!(users["required"], true, "{users}");
        let pattern = regex::Regex::new(users["schema"]["pattern"].as_str().unwrap()).unwrap();
        let two = format!("{},{}", Uuid::from_u128(1), Uuid::from_u128(u128::MAX));
        assert!(pattern.is_match(&two), "{pattern}");
        assert!(!pattern.is_match("----,"), "{pattern}");
        assert!(!pattern.is_match(""), "{pattern}");
        let batch = param(&doc, "/v1/orders", "batch");
        assert_eq!(batch["schema"]["type"], "boolean", "{batch}");
    }
}
