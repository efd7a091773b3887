//! `grpc-h3`: gRPC unary `ListOrders` over HTTP/3, tonic's generated client
//! on h3-util's channels (what tonic-h3 wraps), `pool_size` of them picked
//! round-robin ([`H3Conns`]). The upstream timeout travels as the gRPC
//! deadline, as on `grpc`.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use proto::order::v2::order_service_client::OrderServiceClient;
use transports::Transport;

use super::endpoints::Endpoints;
use super::parts;
use super::port::{MAX_MESSAGE_BYTES, OrderQuery, OrderSource, UpstreamError, to_domain};
use super::semconv::Peer;
use super::shared::h3::{Connector, H3Conns, H3Counted, tls_failure};
use super::shared::rpc::{list_request, resent};
use crate::metrics::TransportMetrics;

/// The `grpc-h3` adapter.
#[derive(Debug)]
pub struct GrpcH3Source {
    conns: H3Conns<tonic::body::Body>,
    timeout: Duration,
    metrics: Arc<TransportMetrics>,
    /// The instance called, for the call's span.
    peer: Peer,
}

impl GrpcH3Source {
    /// Its own `pool_size` HTTP/3 channels to order-service's QUIC port.
    pub fn new(ep: &Endpoints, metrics: Arc<TransportMetrics>) -> anyhow::Result<Self> {
        Ok(GrpcH3Source {
            conns: H3Conns::new(ep, metrics.clone())?,
            timeout: ep.timeout,
            metrics,
            peer: Peer::of_addr(&ep.h3_addr),
        })
    }

    /// An `order.v2` client on the next channel, with the message limits;
    /// and what counts the channel's bytes once dropped.
    fn client(
        &self,
    ) -> Result<
        (
            OrderServiceClient<h3_util::client::H3Channel<Connector, tonic::body::Body>>,
            H3Counted,
        ),
        UpstreamError,
    > {
        let (channel, counted) = self.conns.pick();
        let origin = self
            .conns
            .uri("")
            .parse()
            .map_err(|e| UpstreamError::Protocol(format!("the HTTP/3 origin: {e}")))?;
        let client = OrderServiceClient::with_origin(channel, origin)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok((client, counted))
    }

    async fn unary(&self, q: &OrderQuery) -> Result<Vec<model::Order>, UpstreamError> {
        self.peer.record();
        let _on_wire = self.metrics.in_flight();
        let mut counted = Vec::with_capacity(1);
        // ListOrders reads only; a resend goes out on the next channel.
        let answer = resent(|| {
            let client = self.client();
            let mut req = tonic::Request::new(list_request(q));
            req.set_timeout(self.timeout);
            telemetry::propagation::inject_metadata(req.metadata_mut());
            let (mut client, c) = match client {
                Ok(pair) => pair,
                Err(e) => {
                    let status = tonic::Status::internal(e.to_string());
                    return futures::future::Either::Left(async move { Err(status) });
                }
            };
            counted.push(c);
            futures::future::Either::Right(async move { client.list_orders(req).await })
        })
        .await
        .map_err(|e| match e {
            // Named as the TLS failure it is, as the REST transports over
            // HTTP/3 name it.
            UpstreamError::Unavailable(m) => {
                tls_failure(&self.conns.uri(""), &m).unwrap_or(UpstreamError::Unavailable(m))
            }
            e => e,
        });
        drop(counted);
        parts::decoding(|| to_domain(answer?.orders))
    }
}

impl OrderSource for GrpcH3Source {
    fn transport(&self) -> Transport {
        Transport::GrpcH3
    }

    fn list_orders<'a>(
        &'a self,
        q: &'a OrderQuery,
    ) -> BoxFuture<'a, Result<Vec<model::Order>, UpstreamError>> {
        Box::pin(self.unary(q))
    }
}
