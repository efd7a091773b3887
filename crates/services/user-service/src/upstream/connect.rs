//! The Connect adapters: `connect-h1-proto` and `connect-h2c-proto` call
//! `order.v2.OrderService/ListOrders` with connect-rust's generated client
//! (buffa messages, binary protobuf bodies) on order-service's REST port.
//!
//! The client sends through [`Via`], a connect-rust `ClientTransport` over
//! the same connection pools as `h1-proto` and `h2c-proto`: the same budget
//! of N connections, the same byte and connection counting, the same retry
//! of a call whose pooled connection had died. Between `h1-proto` and
//! `connect-h1-proto` (or the h2c pair) only the protocol and the protobuf
//! runtime differ: a POST of a `ListOrdersRequest` against a GET with a
//! query string, and connect-rust with buffa against hyper with prost.
//!
//! Neither end compresses, and the deadline goes out as Connect's
//! `Connect-Timeout-Ms`.

use std::sync::Arc;

use bytes::Bytes;
use connectrpc::ConnectError;
use connectrpc::client::{ClientBody, ClientConfig, ClientTransport};
use futures::future::BoxFuture;
use http_body_util::{BodyExt as _, Full};
use model::Order;
use proto_connect::order::v2::OrderServiceClient;
use transports::Transport;

use super::endpoints::Endpoints;
use super::parts;
use super::port::{MAX_MESSAGE_BYTES, OrderQuery, OrderSource, UpstreamError};
use super::semconv::{self, Peer};
use super::shared::exchange::Outgoing;
use super::shared::pool::Pooled;
use crate::metrics::TransportMetrics;

/// connect-rust's transport: each call goes out on one of the adapter's
/// pooled connections.
#[derive(Debug, Clone)]
pub struct Via(Arc<Pooled>);

/// A failure of the pool itself, carried through connect-rust so that the
/// adapter can give it back unchanged.
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct ViaError(UpstreamError);

impl ClientTransport for Via {
    type ResponseBody = Full<Bytes>;
    type Error = ViaError;

    fn send(
        &self,
        request: http::Request<ClientBody>,
    ) -> BoxFuture<'static, Result<http::Response<Full<Bytes>>, ViaError>> {
        let pool = self.0.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| ViaError(UpstreamError::Protocol(format!("the request body: {e}"))))?
                .to_bytes();
            let pq = parts
                .uri
                .path_and_query()
                .map_or("/", http::uri::PathAndQuery::as_str);
            let out = Outgoing {
                method: parts.method,
                path_and_query: pq,
                headers: parts.headers,
                body,
            };
            let answer = pool.send(&out).await.map_err(ViaError)?;
            parts::server_timing(&answer.headers);
            parts::arrived();
            let mut response = http::Response::new(Full::new(answer.body));
            *response.status_mut() = answer.status;
            *response.headers_mut() = answer.headers;
            Ok(response)
        })
    }
}

/// A Connect error as an upstream error: the pool's own failure as it was,
/// otherwise by code, as [`from_status`](super::shared::rpc::from_status) maps
/// gRPC's; the code
/// is recorded on the call's span.
fn from_connect(e: &ConnectError) -> UpstreamError {
    use connectrpc::ErrorCode as C;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(ViaError(u)) = c.downcast_ref::<ViaError>() {
            return u.clone();
        }
        cause = c.source();
    }
    semconv::record_connect_code(e.code.as_str());
    let message = e.message.clone().unwrap_or_default();
    match e.code {
        C::DeadlineExceeded => UpstreamError::Timeout(message),
        C::Unavailable | C::Unknown | C::Canceled => UpstreamError::Unavailable(message),
        code => UpstreamError::Rejected {
            status: code.as_str().to_owned(),
            message,
        },
    }
}

/// One Connect adapter.
pub struct ConnectSource {
    transport: Transport,
    client: OrderServiceClient<Via>,
    /// The instance called, for the call's span.
    peer: Peer,
}

impl std::fmt::Debug for ConnectSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectSource")
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

impl ConnectSource {
    /// The adapter of `connect-h1-proto` or `connect-h2c-proto`.
    pub fn new(
        transport: Transport,
        ep: &Endpoints,
        metrics: Arc<TransportMetrics>,
    ) -> anyhow::Result<Self> {
        let h2 = match transport {
            Transport::ConnectH1Proto => false,
            Transport::ConnectH2cProto => true,
            other => anyhow::bail!("{other} is not a Connect transport"),
        };
        let pool = Pooled::new(h2, ep, metrics)?;
        let config = ClientConfig::new(ep.rest_url.clone())
            .proto()
            .with_default_timeout(ep.timeout)
            .with_default_max_message_size(MAX_MESSAGE_BYTES)
            .with_compression(connectrpc::CompressionRegistry::new())
            .with_compression_policy(connectrpc::CompressionPolicy::disabled());
        Ok(ConnectSource {
            transport,
            peer: Peer::of_url(&ep.rest_url),
            client: OrderServiceClient::new(Via(Arc::new(pool)), config),
        })
    }

    async fn fetch(&self, q: &OrderQuery) -> Result<Vec<Order>, UpstreamError> {
        self.peer.record();
        let request = model::connect::list_request(q.user_id, q.limit, q.fields);
        let answer = self
            .client
            .list_orders(request)
            .await
            .map_err(|e| from_connect(&e))?;
        let page = answer.into_view();
        let _decode =
            tracing::info_span!(target: telemetry::CODEC, "decode", format = "protobuf", bytes = page.bytes().len())
                .entered();
        let orders = model::connect::page_from_view(page.reborrow())
            .map_err(|e| UpstreamError::Protocol(format!("an order's {e}")));
        // connect-rust decodes out of sight: from the answer's last byte
        // (`arrived`, in the transport below it) to the orders converted.
        parts::converted();
        orders
    }
}

impl OrderSource for ConnectSource {
    fn transport(&self) -> Transport {
        self.transport
    }

    fn list_orders<'a>(
        &'a self,
        q: &'a OrderQuery,
    ) -> BoxFuture<'a, Result<Vec<Order>, UpstreamError>> {
        Box::pin(self.fetch(q))
    }
}
