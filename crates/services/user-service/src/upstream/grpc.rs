//! The gRPC adapters of `order.v2`'s unary and server-streaming calls and of
//! the legacy `order.v1`: `grpc` (unary `ListOrders`), `grpc-stream`
//! (`StreamOrders`) and `grpc-v1` (the all-strings legacy `ListOrders`).
//! `grpc` and `grpc-stream` also carry many queries in one call
//! (`BatchListOrders`, `BatchStreamOrders`).
//!
//! Each adapter has its own `pool_size` channels ([`channels`]), picked
//! round-robin. The upstream timeout travels as the gRPC deadline
//! (`grpc-timeout`) on every call.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use proto::order::v1::order_service_client::OrderServiceClient as V1Client;
use proto::order::v2::order_service_client::OrderServiceClient;
use proto::order::v2::{BatchListOrdersRequest, BatchStreamOrdersRequest};
use tonic::codec::CompressionEncoding;
use tonic::transport::Channel;
use transports::Transport;

use super::endpoints::Endpoints;
use super::parts;
use super::port::{MAX_MESSAGE_BYTES, OrderQuery, OrderSource, UpstreamError, to_domain};
use super::semconv::{self, Peer};
use super::shared::rpc::{
    channels, failed, list_request, page_size, read_stream, resent, stream_request,
};
use crate::metrics::TransportMetrics;

/// The unary and server-streaming adapters.
#[derive(Debug)]
pub struct GrpcSource {
    transport: Transport,
    /// Gzip both ways (`USER_UPSTREAM_GZIP`).
    gzip: bool,
    /// zstd both ways (`USER_UPSTREAM_ZSTD`); sent in preference to gzip.
    zstd: bool,
    channels: Vec<Channel>,
    next: AtomicUsize,
    timeout: Duration,
    metrics: Arc<TransportMetrics>,
    /// The instance called, for the call's span.
    peer: Peer,
}

impl GrpcSource {
    /// `grpc`, `grpc-stream` or `grpc-v1`, with its own `pool_size` channels.
    pub fn new(
        transport: Transport,
        ep: &Endpoints,
        metrics: Arc<TransportMetrics>,
    ) -> anyhow::Result<Self> {
        Ok(GrpcSource {
            transport,
            gzip: ep.gzip,
            zstd: ep.zstd,
            channels: channels(ep, &metrics, None)?,
            next: AtomicUsize::new(0),
            timeout: ep.timeout,
            metrics,
            peer: Peer::of_url(&ep.grpc_url),
        })
    }

    fn channel(&self) -> Channel {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.channels.len();
        self.channels[i].clone()
    }

    /// An `order.v2` client on the next channel, with the message limits.
    fn v2(&self) -> OrderServiceClient<Channel> {
        let mut c = OrderServiceClient::new(self.channel())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        if self.zstd {
            // zstd alone: tonic lists the encodings a client accepts in its
            // own order, gzip first, and the server takes the first it can
            // send, so offering both would get gzip.
            c = c
                .accept_compressed(CompressionEncoding::Zstd)
                .send_compressed(CompressionEncoding::Zstd);
        } else if self.gzip {
            c = c
                .accept_compressed(CompressionEncoding::Gzip)
                .send_compressed(CompressionEncoding::Gzip);
        }
        c
    }

    fn request<T>(&self, msg: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(msg);
        req.set_timeout(self.timeout);
        telemetry::propagation::inject_metadata(req.metadata_mut());
        req
    }

    async fn unary(&self, q: &OrderQuery) -> Result<Vec<model::Order>, UpstreamError> {
        let _on_wire = self.metrics.in_flight();
        // ListOrders reads only; a resend goes out on the next channel.
        let answer = resent(|| {
            let mut client = self.v2();
            let req = self.request(list_request(q));
            async move { client.list_orders(req).await }
        })
        .await?;
        parts::decoding(|| to_domain(answer.orders))
    }

    async fn stream(&self, q: &OrderQuery) -> Result<Vec<model::Order>, UpstreamError> {
        let mut client = self.v2();
        let req = self.request(stream_request(q));
        let _on_wire = self.metrics.in_flight();
        let mut stream = client
            .stream_orders(req)
            .await
            .map_err(failed)?
            .into_inner();
        read_stream(q, &mut stream).await
    }

    /// Every query in one `BatchListOrders` call.
    async fn batch_unary(
        &self,
        qs: &[OrderQuery],
    ) -> Result<Vec<Vec<model::Order>>, UpstreamError> {
        let mut client = self.v2();
        let req = self.request(BatchListOrdersRequest {
            requests: qs.iter().map(list_request).collect(),
        });
        let _on_wire = self.metrics.in_flight();
        let answer = client
            .batch_list_orders(req)
            .await
            .map_err(failed)?
            .into_inner();
        semconv::record_grpc_code(tonic::Code::Ok);
        if answer.responses.len() != qs.len() {
            return Err(UpstreamError::Protocol(format!(
                "{} answers to a batch of {} queries",
                answer.responses.len(),
                qs.len()
            )));
        }
        answer
            .responses
            .into_iter()
            .map(|r| to_domain(r.orders))
            .collect()
    }

    /// Every query in one `BatchStreamOrders` call, one message per query.
    async fn batch_stream(
        &self,
        qs: &[OrderQuery],
    ) -> Result<Vec<Vec<model::Order>>, UpstreamError> {
        let mut client = self.v2();
        let req = self.request(BatchStreamOrdersRequest {
            requests: qs.iter().map(list_request).collect(),
        });
        let _on_wire = self.metrics.in_flight();
        let mut stream = client
            .batch_stream_orders(req)
            .await
            .map_err(failed)?
            .into_inner();
        let mut answers = Vec::with_capacity(qs.len());
        while let Some(msg) = stream.message().await.map_err(failed)? {
            if msg.index as usize != answers.len() || answers.len() == qs.len() {
                return Err(UpstreamError::Protocol(format!(
                    "the batch stream answered query {} where {} was next of {}",
                    msg.index,
                    answers.len(),
                    qs.len()
                )));
            }
            answers.push(to_domain(msg.orders)?);
        }
        semconv::record_grpc_code(tonic::Code::Ok);
        if answers.len() != qs.len() {
            return Err(UpstreamError::Protocol(format!(
                "the batch stream ended after {} of {} queries",
                answers.len(),
                qs.len()
            )));
        }
        Ok(answers)
    }

    async fn legacy(&self, q: &OrderQuery) -> Result<Vec<model::Order>, UpstreamError> {
        let msg = proto::order::v1::ListOrdersRequest {
            user_id: q.user_id.to_string(),
            page_size: page_size(q),
            page_token: String::new(),
        };
        let _on_wire = self.metrics.in_flight();
        let answer = resent(|| {
            let mut client = V1Client::new(self.channel())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES);
            let req = self.request(msg.clone());
            async move { client.list_orders(req).await }
        })
        .await?;
        // v1 has no field selection: every field crosses the wire and the
        // unselected ones are blanked here, so the answer equals the others'.
        parts::decoding(|| Ok(select(to_domain(answer.orders)?, q.fields)))
    }
}

/// The selected fields of v1's orders (v1 has no selection of its own),
/// moving the orders when all are selected: the same work as every other
/// transport, which receives only what it asked for and copies nothing.
fn select(orders: Vec<model::Order>, fields: model::FieldSet) -> Vec<model::Order> {
    orders
        .into_iter()
        .map(|o| o.into_projected(fields))
        .collect()
}

impl OrderSource for GrpcSource {
    fn transport(&self) -> Transport {
        self.transport
    }

    fn list_orders<'a>(
        &'a self,
        q: &'a OrderQuery,
    ) -> BoxFuture<'a, Result<Vec<model::Order>, UpstreamError>> {
        Box::pin(async move {
            self.peer.record();
            match self.transport {
                Transport::GrpcStream => self.stream(q).await,
                Transport::GrpcV1 => self.legacy(q).await,
                _ => self.unary(q).await,
            }
        })
    }

    fn list_batch<'a>(
        &'a self,
        qs: &'a [OrderQuery],
    ) -> Option<BoxFuture<'a, Result<Vec<Vec<model::Order>>, UpstreamError>>> {
        self.transport.batch_call()?;
        Some(Box::pin(async move {
            self.peer.record();
            match self.transport {
                Transport::GrpcStream => self.batch_stream(qs).await,
                _ => self.batch_unary(qs).await,
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_orders_with_every_field_selected_are_moved_not_copied() {
        let user = dataset::users()
            .into_iter()
            .find(|u| u.id == dataset::fixed_user_id(10))
            .expect("the 10-order user");
        let orders = dataset::orders_of(&user);
        let expected = orders.clone();
        let buffers = |v: &[model::Order]| -> Vec<*const u8> {
            v.iter().map(|o| o.product_name.as_ptr()).collect()
        };
        let before = buffers(&orders);
        let out = select(orders, model::FieldSet::ALL);
        assert_eq!(out, expected);
        assert_eq!(buffers(&out), before, "every field selected: no copy");
        // A real selection still blanks the others.
        let two = model::FieldSet::parse_csv("id,status").expect("fields");
        let out = select(expected, two);
        assert!(out.iter().all(|o| o.product_name.is_empty()));
    }
}
