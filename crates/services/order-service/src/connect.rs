//! The Connect protocol (connect-rust, on the buffa runtime), served on the
//! REST port: `POST /order.v2.OrderService/<Method>` with a protobuf or JSON
//! body, over HTTP/1.1 or h2c.
//!
//! Connect is plain HTTP by design, so it shares the REST listener: the same
//! connection cap, time bounds, TLS, tracing layer, metrics and limit of work
//! in service, and no port of its own to configure, publish or balance.
//! Its routes are `order.v2.OrderService`'s: `GetOrder`, `ListOrders` and
//! `StreamOrders` are answered from the same store as every other surface;
//! the stream-of-lookups, batch and create calls answer `unimplemented` and
//! say where they are served.
//!
//! connect-rust also answers the gRPC and gRPC-web protocols on these paths;
//! responses are never compressed, as on the REST routes, while a request
//! compressed with gzip or zstd is read. The caller's deadline
//! (`Connect-Timeout-Ms`, or `grpc-timeout`) bounds decoding, the handler
//! and a stream; a unary answer still being sent at it is cut.
//! `Connect-Protocol-Version` is not required: the protocol lets a server
//! require it, to tell a Connect call from a stray POST, but every call here
//! is also told apart by its route and content type, and a plain `curl` of a
//! unary call then works.

use std::sync::Arc;

use axum::http;
use axum::response::IntoResponse as _;
use connectrpc::{
    CompressionPolicy, CompressionRegistry, ConnectError, ConnectRpcService, DeadlinePolicy,
    ErrorDetail, RequestContext, Response, ServiceRequest, ServiceResult, ServiceStream,
};
use futures::StreamExt as _;
use model::connect as mc;
use proto_connect::order::v2::{self as cx, OrderServiceExt as _};

use crate::service::{AppError, Orders};

/// The path prefix of every Connect route.
pub const PREFIX: &str = "/order.v2.OrderService/";

/// The methods answered over Connect, as route paths.
pub const METHODS: [&str; 7] = [
    "GetOrder",
    "ListOrders",
    "StreamOrders",
    "LookupOrders",
    "BatchListOrders",
    "BatchStreamOrders",
    "CreateOrder",
];

/// The service's errors as Connect errors, with the codes the gRPC surface
/// gives. A bad field is also a `google.rpc.BadRequest` detail, as over gRPC.
impl From<AppError> for ConnectError {
    fn from(e: AppError) -> Self {
        e.log();
        let msg = e.to_string();
        match e {
            AppError::Invalid(p) => {
                ConnectError::invalid_argument(msg).with_detail(bad_request(&p))
            }
            AppError::NotFound(_) => ConnectError::not_found(msg),
            AppError::KeyReused(_) => ConnectError::failed_precondition(msg),
            AppError::Unavailable(_) => ConnectError::unavailable(msg),
            AppError::Internal(_) => ConnectError::internal(msg),
        }
    }
}

/// A `google.rpc.BadRequest` naming the field, as a Connect error detail:
/// the message's protobuf bytes in unpadded base64 (what the Connect
/// protocol and connect-rust's gRPC path read), and its JSON form as `debug`
/// for a person reading the answer. The message is tonic-types' (prost), as
/// over gRPC: buffa, connect-rust's runtime, has no `google.rpc` types.
fn bad_request(p: &model::ParseError) -> ErrorDetail {
    use base64::Engine as _;
    let pb = tonic_types::pb::BadRequest::from(tonic_types::BadRequest::with_violation(
        &p.field, &p.message,
    ));
    ErrorDetail {
        type_url: "google.rpc.BadRequest".to_owned(),
        value: Some(
            base64::engine::general_purpose::STANDARD_NO_PAD
                .encode(prost::Message::encode_to_vec(&pb)),
        ),
        debug: Some(serde_json::json!({
            "fieldViolations": [{"field": p.field, "description": p.message}]
        })),
    }
}

/// `order.v2.OrderService` over Connect.
#[derive(Debug, Clone)]
pub struct ConnectOrders {
    orders: Orders,
}

/// The request's list query, parsed as the gRPC surface parses it:
/// `page_size` 0 means the default, an absent mask means all fields.
fn list_query(
    orders: &Orders,
    user_id: &str,
    page_size: i32,
    page_token: &str,
    mask: Option<&mc::FieldMaskView<'_>>,
) -> Result<crate::store::ListQuery, AppError> {
    let fields = mc::field_set(mask)?;
    let size = (page_size != 0).then_some(i64::from(page_size));
    Ok(orders.list_query(user_id, ("page_size", size), page_token, fields)?)
}

fn elsewhere(method: &str) -> ConnectError {
    ConnectError::unimplemented(format!(
        "{method} is served over gRPC (and REST where it has a route); over Connect this \
         service answers GetOrder, ListOrders and StreamOrders"
    ))
}

// The trait's methods return `impl Encodable`; these name the message.
#[allow(refining_impl_trait)]
impl cx::OrderService for ConnectOrders {
    async fn get_order(
        &self,
        _ctx: RequestContext,
        req: ServiceRequest<'_, cx::GetOrderRequest>,
    ) -> ServiceResult<cx::GetOrderResponse> {
        let fields = mc::field_set(req.read_mask.as_option()).map_err(AppError::from)?;
        let id = req.id.to_owned();
        let order = self.orders.get(&id, fields).await?;
        Response::ok(cx::GetOrderResponse {
            order: buffa::MessageField::some(mc::order_to_cx(&order, fields)),
            ..Default::default()
        })
    }

    async fn list_orders(
        &self,
        _ctx: RequestContext,
        req: ServiceRequest<'_, cx::ListOrdersRequest>,
    ) -> ServiceResult<cx::ListOrdersResponse> {
        let q = list_query(
            &self.orders,
            req.user_id,
            req.page_size,
            req.page_token,
            req.read_mask.as_option(),
        )?;
        let page = self.orders.list(&q).await?;
        let next = page.next.map(|t| t.encode()).unwrap_or_default();
        Response::ok(mc::page_to_cx(&page.orders, q.fields, next))
    }

    async fn stream_orders(
        &self,
        _ctx: RequestContext,
        req: ServiceRequest<'_, cx::StreamOrdersRequest>,
    ) -> ServiceResult<ServiceStream<cx::StreamOrdersResponse>> {
        let q = list_query(
            &self.orders,
            req.user_id,
            req.page_size,
            req.page_token,
            req.read_mask.as_option(),
        )?;
        let fields = q.fields;
        let page = self.orders.list(&q).await?;
        let stream = futures::stream::iter(page.orders).map(move |o| {
            Ok(cx::StreamOrdersResponse {
                order: buffa::MessageField::some(mc::order_to_cx(&o, fields)),
                ..Default::default()
            })
        });
        Response::ok(Box::pin(stream) as ServiceStream<_>)
    }

    async fn lookup_orders(
        &self,
        _ctx: RequestContext,
        _requests: connectrpc::InboundStream<cx::LookupOrdersRequest>,
    ) -> ServiceResult<ServiceStream<cx::LookupOrdersResponse>> {
        Err(elsewhere("LookupOrders"))
    }

    async fn batch_list_orders(
        &self,
        _ctx: RequestContext,
        _req: ServiceRequest<'_, cx::BatchListOrdersRequest>,
    ) -> ServiceResult<cx::BatchListOrdersResponse> {
        Err(elsewhere("BatchListOrders"))
    }

    async fn batch_stream_orders(
        &self,
        _ctx: RequestContext,
        _req: ServiceRequest<'_, cx::BatchStreamOrdersRequest>,
    ) -> ServiceResult<ServiceStream<cx::BatchStreamOrdersResponse>> {
        Err(elsewhere("BatchStreamOrders"))
    }

    async fn create_order(
        &self,
        _ctx: RequestContext,
        _req: ServiceRequest<'_, cx::CreateOrderRequest>,
    ) -> ServiceResult<cx::CreateOrderResponse> {
        Err(elsewhere("CreateOrder"))
    }
}

/// The Connect service: `max_body_bytes` bounds a request body and a
/// message, as it bounds every REST body.
pub fn service(orders: Orders, max_body_bytes: usize) -> ConnectRpcService {
    let router = Arc::new(ConnectOrders { orders }).register(connectrpc::Router::new());
    ConnectRpcService::new(router)
        .with_limits(
            connectrpc::Limits::default()
                .with_max_request_body_size(max_body_bytes)
                .with_max_message_size(max_body_bytes),
        )
        // Answers never compressed: no surface of this service compresses
        // unless asked to, and a byte count must not mix wires and gzip. A
        // request a client compressed (gzip or zstd) is read, as every
        // Connect server must for the encodings it lists in
        // `Accept-Encoding`.
        .with_compression(CompressionRegistry::default())
        .with_compression_policy(CompressionPolicy::disabled())
        // The caller's deadline ends its stream too, not only the handler
        // (a unary answer still being sent at it is cut by
        // `service_kit::call_deadline::ConnectDeadlineLayer`).
        .with_deadline_policy(DeadlinePolicy::new().with_enforce_on_streams(true))
}

/// Whether a request that matched no route is an RPC call (Connect, or
/// gRPC on this port): a POST to `/package.Service/Method`.
pub fn is_rpc_call(method: &http::Method, path: &str) -> bool {
    let ident = |s: &str| {
        !s.is_empty()
            && s.split('.').all(|p| {
                p.chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                    && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
    };
    let mut parts = path.strip_prefix('/').unwrap_or("").split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(service), Some(m), None) => {
            method == http::Method::POST && service.contains('.') && ident(service) && ident(m)
        }
        _ => false,
    }
}

/// What this port serves over Connect, for an error naming it.
fn served() -> String {
    format!(
        "over Connect this port serves {}{{GetOrder, ListOrders, StreamOrders}}",
        PREFIX
    )
}

/// The answer to an RPC call of a method this port does not serve:
/// `unimplemented`, as a Connect error (HTTP 404, as the protocol maps it)
/// or, for a gRPC call, trailers-only `grpc-status: 12`.
pub fn not_served(path: &str, headers: &http::HeaderMap) -> axum::response::Response {
    let message = format!("no method {path} here; {}", served());
    let grpc = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/grpc"));
    if grpc {
        return tonic::Status::unimplemented(message)
            .into_http::<axum::body::Body>()
            .map(axum::body::Body::new);
    }
    connect_error(http::StatusCode::NOT_FOUND, "unimplemented", &message)
}

/// A Connect error as the protocol writes it for a unary call: a JSON
/// object with its code and message.
fn connect_error(status: http::StatusCode, code: &str, message: &str) -> axum::response::Response {
    let body = serde_json::json!({ "code": code, "message": message }).to_string();
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// A unary Connect error (a JSON body on a status other than 200) with its
/// `message` capped as every error's text is (see [`model::capped`]):
/// connect-rust quotes a bad JSON body whole, 100 KB of it.
async fn small_error(res: axum::response::Response) -> axum::response::Response {
    let json = res
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if res.status().is_success() || !json {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    // An error body is short unless it quotes its input; past 1 MiB it
    // is not one connect-rust wrote.
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return connect_error(parts.status, "internal", "the error could not be read");
    };
    let capped = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|mut v| {
            let m = v.get_mut("message")?;
            let text = m.as_str()?.to_owned();
            *m = serde_json::Value::String(model::capped(text));
            serde_json::to_vec(&v).ok()
        });
    let out = capped.unwrap_or_else(|| bytes.to_vec());
    parts.headers.remove(http::header::CONTENT_LENGTH);
    axum::response::Response::from_parts(parts, axum::body::Body::from(out))
}

/// The request encodings read (connect-rust's default registry).
const ENCODINGS: &str = "gzip, zstd";

/// In front of the Connect routes, what connect-rust leaves out:
/// - a GET of a method not marked free of side effects (none here is)
///   answers 405 with `Allow: POST` and the Connect code `unimplemented`,
///   where connect-rust's code is `unknown`;
/// - a request in an encoding not read is refused (`unimplemented`) with
///   the encodings that are, in `Accept-Encoding` (unary) or
///   `Connect-Accept-Encoding` (streams), as the protocol asks.
pub async fn edges(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if req.method() != http::Method::GET {
        let streaming = req.headers().contains_key("connect-content-encoding");
        let encoded = streaming || req.headers().contains_key(http::header::CONTENT_ENCODING);
        let mut res = next.run(req).await;
        let refused = res.status() == http::StatusCode::NOT_IMPLEMENTED
            || res.headers().get("grpc-status").is_some_and(|s| s == "12");
        if encoded && refused {
            let name = if streaming {
                "connect-accept-encoding"
            } else {
                "accept-encoding"
            };
            res.headers_mut()
                .entry(name)
                .or_insert(http::HeaderValue::from_static(ENCODINGS));
        }
        return small_error(res).await;
    }
    let mut res = connect_error(
        http::StatusCode::METHOD_NOT_ALLOWED,
        "unimplemented",
        &format!(
            "{} takes POST: Connect's GET is for methods marked free of side effects, and this one is not",
            req.uri().path()
        ),
    );
    res.headers_mut()
        .insert(http::header::ALLOW, http::HeaderValue::from_static("POST"));
    res
}
