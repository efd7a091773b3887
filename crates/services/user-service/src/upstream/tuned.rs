//! The tuned twins: `grpc-tuned`, `grpc-stream-tuned` and `h2c-proto-tuned`,
//! the same calls as `grpc`, `grpc-stream` and `h2c-proto` to the same
//! servers, made over connections of the `h2` crate that the caller uses
//! directly, rather than through hyper's HTTP/2 client (and, for gRPC,
//! tonic's `Channel`); and `grpc-bidi-tuned`, `grpc-bidi` with the twins'
//! codec and frame size only. Each difference is a departure a user would
//! have to choose, which is why the stock transports stay beside them:
//!
//! - **No task between the caller and the connection.** tonic's `Channel`
//!   puts a `Buffer` (a task fed by a queue) in front of hyper's client, and
//!   hyper's client hands each call to its connection task and spawns a task
//!   per call for the answer. Here the caller opens its stream on the
//!   connection itself and reads the answer off it; the only other task is
//!   the connection's own, which reads and writes the socket.
//! - **The request in one piece.** gRPC's one request message (unary and
//!   server streaming) is collected and sent as one DATA frame that ends the
//!   stream, rather than piped from a streaming body.
//! - **Decoded from one `Bytes`** (gRPC). tonic's prost codec decodes from its
//!   receive buffer (`BytesMut`), where each of prost's reads pays
//!   `BytesMut::advance`; here the message is split off that buffer as one
//!   frozen `Bytes` (no copy) and decoded from it. The gRPC twins still use
//!   tonic's client (`tonic::client::Grpc`) for its framing, deadline header
//!   and status handling.
//! - **The largest DATA frames HTTP/2 allows** (every twin;
//!   `grpc-bidi-tuned` through tonic's `Endpoint`). The connection
//!   advertises `SETTINGS_MAX_FRAME_SIZE` = 2^24 − 1 where hyper and tonic
//!   keep the protocol's 16 KiB, so order-service sends a 217 KB answer as
//!   one DATA frame rather than 14: one `writev` on its side and a few reads
//!   on this one, against about 15 and 28 (see
//!   [`MAX_FRAME`](super::shared::h2direct::MAX_FRAME)).
//!
//! `grpc-bidi-tuned` keeps tonic's `Channel`: its one long-lived stream per
//! connection pays the channel's tasks when it opens, not per lookup, and
//! its requests are a stream, which [`Conns`] does not send.
//!
//! This module is the adapter of `grpc-tuned` and `grpc-stream-tuned`
//! ([`TunedSource`]). The twins' connections are [`Conns`] (also under
//! `h2c-proto-tuned`, a [REST adapter](super::rest)), their codec is
//! [`FrozenCodec`] (also `grpc-bidi-tuned`'s, a [bidi adapter](super::bidi)).

use std::sync::Arc;

use futures::future::BoxFuture;
use proto::order::v2::{
    ListOrdersRequest, ListOrdersResponse, StreamOrdersRequest, StreamOrdersResponse,
};
use transports::Transport;

use super::endpoints::Endpoints;
use super::parts;
use super::port::{MAX_MESSAGE_BYTES, OrderQuery, OrderSource, UpstreamError, to_domain};
use super::semconv::{self, Peer};
use super::shared::codec::FrozenCodec;
use super::shared::h2direct::{Conns, Service};
use super::shared::rpc::{failed, list_request, read_stream, stream_request};
use super::wire;
use crate::metrics::TransportMetrics;

/// The `grpc-tuned` and `grpc-stream-tuned` adapter.
pub struct TunedSource {
    transport: Transport,
    client: tonic::client::Grpc<Service>,
    timeout: std::time::Duration,
    metrics: Arc<TransportMetrics>,
    /// The instance called, for the call's span.
    peer: Peer,
}

impl std::fmt::Debug for TunedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunedSource")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl TunedSource {
    /// The adapter of `t` (`grpc-tuned` or `grpc-stream-tuned`): `pool_size`
    /// lazily opened connections to the gRPC port.
    pub fn new(
        t: Transport,
        ep: &Endpoints,
        metrics: Arc<TransportMetrics>,
    ) -> anyhow::Result<Self> {
        let dial = ep.dialer(wire::authority(&ep.grpc_url)?, tls::ALPN_H2, &metrics);
        // The origin becomes `:scheme` and `:authority`; the dialer does TLS.
        let mut origin = ep.grpc_url.clone().into_parts();
        origin.scheme = Some(dial.scheme());
        origin.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
        let origin = http::Uri::from_parts(origin)?;
        let conns = Conns::new(dial, ep.pool_size, metrics.clone());
        let client = tonic::client::Grpc::with_origin(Service(Arc::new(conns)), origin)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(TunedSource {
            transport: t,
            client,
            timeout: ep.timeout,
            metrics,
            peer: Peer::of_url(&ep.grpc_url),
        })
    }

    /// A request for `method` of order.v2's service with the deadline and
    /// the trace context, as the stock adapters send it, and the client
    /// ready to send it.
    async fn request<T>(
        &self,
        method: &'static str,
        message: T,
    ) -> Result<(tonic::client::Grpc<Service>, tonic::Request<T>), UpstreamError> {
        let mut client = self.client.clone();
        let mut req = tonic::Request::new(message);
        req.set_timeout(self.timeout);
        telemetry::propagation::inject_metadata(req.metadata_mut());
        req.extensions_mut()
            .insert(tonic::GrpcMethod::new("order.v2.OrderService", method));
        client
            .ready()
            .await
            .map_err(|e| UpstreamError::Unavailable(e.to_string()))?;
        Ok((client, req))
    }

    async fn unary(&self, q: &OrderQuery) -> Result<Vec<model::Order>, UpstreamError> {
        let _on_wire = self.metrics.in_flight();
        let (mut client, req) = self.request("ListOrders", list_request(q)).await?;
        let path = http::uri::PathAndQuery::from_static("/order.v2.OrderService/ListOrders");
        let answer: tonic::Response<ListOrdersResponse> = client
            .unary(req, path, FrozenCodec::<ListOrdersRequest, _>::default())
            .await
            .map_err(failed)?;
        semconv::record_grpc_code(tonic::Code::Ok);
        parts::server_timing(answer.metadata().as_ref());
        parts::decoding(|| to_domain(answer.into_inner().orders))
    }

    /// `StreamOrders`, one order per message, as `grpc-stream` reads it.
    async fn stream(&self, q: &OrderQuery) -> Result<Vec<model::Order>, UpstreamError> {
        let _on_wire = self.metrics.in_flight();
        let (mut client, req) = self.request("StreamOrders", stream_request(q)).await?;
        let path = http::uri::PathAndQuery::from_static("/order.v2.OrderService/StreamOrders");
        let mut stream = client
            .server_streaming(
                req,
                path,
                FrozenCodec::<StreamOrdersRequest, StreamOrdersResponse>::default(),
            )
            .await
            .map_err(failed)?
            .into_inner();
        read_stream(q, &mut stream).await
    }
}

impl OrderSource for TunedSource {
    fn transport(&self) -> Transport {
        self.transport
    }

    fn list_orders<'a>(
        &'a self,
        q: &'a OrderQuery,
    ) -> BoxFuture<'a, Result<Vec<model::Order>, UpstreamError>> {
        Box::pin(async move {
            self.peer.record();
            if self.transport == Transport::GrpcStreamTuned {
                self.stream(q).await
            } else {
                self.unary(q).await
            }
        })
    }
}
