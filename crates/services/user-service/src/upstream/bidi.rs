//! `grpc-bidi` and `grpc-bidi-tuned`: per channel, one long-lived
//! `LookupOrders` stream carrying every lookup sent on that connection,
//! matched by request id ([`Link`]). `grpc-bidi-tuned` is the same with each
//! answer decoded from one `Bytes` (the twins' [`FrozenCodec`]) and channels
//! that advertise HTTP/2's largest frame size.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use model::v2::field_mask;
use proto::order::v2::order_service_client::OrderServiceClient;
use proto::order::v2::{LookupOrdersRequest, LookupOrdersResponse};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use transports::Transport;

use super::endpoints::Endpoints;
use super::port::{MAX_MESSAGE_BYTES, OrderQuery, OrderSource, UpstreamError};
use super::semconv::Peer;
use super::shared::codec::FrozenCodec;
use super::shared::h2direct::MAX_FRAME;
use super::shared::mux::{Ids, Link, Pending, Slot, answer_to_orders};
use super::shared::rpc::{channels, from_status, page_size};
use crate::metrics::TransportMetrics;

/// The `grpc-bidi` and `grpc-bidi-tuned` adapter.
#[derive(Debug)]
pub struct BidiSource {
    transport: Transport,
    channels: Vec<Channel>,
    slots: Vec<Slot>,
    next: AtomicUsize,
    ids: Ids,
    metrics: Arc<TransportMetrics>,
    /// Time each answer's decode (`USER_UPSTREAM_BREAKDOWN`).
    breakdown: bool,
    /// The instance called, for the call's span.
    peer: Peer,
    /// The upstream timeout, sent with each lookup as its deadline.
    deadline_ms: u32,
}

impl BidiSource {
    /// The adapter of `t` (`grpc-bidi` or `grpc-bidi-tuned`) with its own
    /// `pool_size` channels; streams open on first use.
    pub fn new(
        t: Transport,
        ep: &Endpoints,
        metrics: Arc<TransportMetrics>,
    ) -> anyhow::Result<Self> {
        // The twin advertises the largest frames, as the other twins do.
        let max_frame = (t == Transport::GrpcBidiTuned).then_some(MAX_FRAME);
        let channels = channels(ep, &metrics, max_frame)?;
        Ok(BidiSource {
            transport: t,
            slots: channels.iter().map(|_| Slot::default()).collect(),
            channels,
            next: AtomicUsize::new(0),
            ids: Ids::default(),
            metrics,
            breakdown: ep.breakdown,
            deadline_ms: u32::try_from(ep.timeout.as_millis()).unwrap_or(u32::MAX),
            peer: Peer::of_url(&ep.grpc_url),
        })
    }

    /// Starts a stream on `channel`. It does not wait for order-service's
    /// response headers: the first lookup is queued at once and, if the
    /// stream cannot be opened, fails with the reason like any other pending
    /// lookup. (Waiting here would deadlock against a server that answers
    /// headers only after the first message.)
    fn open(channel: Channel, tuned: bool, breakdown: bool) -> Link {
        let pending = Arc::new(Pending::default());
        let (tx, rx) = mpsc::channel::<LookupOrdersRequest>(1024);
        let reader = pending.clone();
        tokio::spawn(async move {
            let opened = if tuned {
                lookup_orders(channel, ReceiverStream::new(rx)).await
            } else {
                OrderServiceClient::new(channel)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES)
                    .lookup_orders(ReceiverStream::new(rx))
                    .await
            };
            let mut inbound = match opened {
                Ok(r) => r.into_inner(),
                Err(s) => {
                    // The status's message with its cause (a TLS alert, a reset).
                    let why = match from_status(&s) {
                        UpstreamError::Timeout(m) | UpstreamError::Unavailable(m) => m,
                        other => other.to_string(),
                    };
                    reader.fail_all(&format!("the lookup stream could not be opened: {why}"));
                    return;
                }
            };
            let why = loop {
                let (next, decoded) = if breakdown {
                    proto::timing::decoding(inbound.message()).await
                } else {
                    (inbound.message().await, Duration::ZERO)
                };
                match next {
                    Ok(Some(answer)) => reader.deliver_decoded(answer, decoded),
                    Ok(None) => break "order-service ended the lookup stream".to_owned(),
                    Err(s) => break format!("the lookup stream broke: {}", s.message()),
                }
            };
            reader.fail_all(&why);
        });
        Link::new(tx, pending)
    }
}

impl OrderSource for BidiSource {
    fn transport(&self) -> Transport {
        self.transport
    }

    fn list_orders<'a>(
        &'a self,
        q: &'a OrderQuery,
    ) -> BoxFuture<'a, Result<Vec<model::Order>, UpstreamError>> {
        Box::pin(async move {
            self.peer.record();
            let i = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
            let channel = self.channels[i].clone();
            let (tuned, breakdown) = (self.transport == Transport::GrpcBidiTuned, self.breakdown);
            let link = self.slots[i]
                .get(|| async move { Ok(Self::open(channel, tuned, breakdown)) })
                .await?;
            let req = LookupOrdersRequest {
                request_id: self.ids.next(),
                user_id: q.user_id.to_string(),
                page_size: page_size(q),
                page_token: String::new(),
                read_mask: field_mask(q.fields),
                // The stream's headers belong to whoever opened it: each
                // lookup carries its own caller's context.
                trace_context: telemetry::propagation::context_map(),
                // order-service stops the lookup past it.
                deadline_ms: self.deadline_ms,
            };
            let _on_wire = self.metrics.in_flight();
            answer_to_orders(link.call(req).await?)
        })
    }
}

/// `grpc-bidi-tuned`'s stream on `channel`: what the generated client's
/// `lookup_orders` does, with [`FrozenCodec`] for its codec.
async fn lookup_orders(
    channel: tonic::transport::Channel,
    requests: impl tonic::IntoStreamingRequest<Message = LookupOrdersRequest>,
) -> Result<tonic::Response<tonic::Streaming<LookupOrdersResponse>>, tonic::Status> {
    let mut client = tonic::client::Grpc::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    client
        .ready()
        .await
        .map_err(|e| tonic::Status::unknown(format!("Service was not ready: {e}")))?;
    let mut req = requests.into_streaming_request();
    req.extensions_mut().insert(tonic::GrpcMethod::new(
        "order.v2.OrderService",
        "LookupOrders",
    ));
    let path = http::uri::PathAndQuery::from_static("/order.v2.OrderService/LookupOrders");
    client
        .streaming(req, path, FrozenCodec::<LookupOrdersRequest, _>::default())
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::shared::h2direct::tests::{
        BODY, data_frame_sizes, serve_body_in_one_piece,
    };

    /// The sizes of the DATA frames in which a bidi adapter's channel
    /// receives an answer of [`BODY`] bytes sent in one piece.
    async fn frames_received(t: Transport) -> Vec<usize> {
        let (addr, server) = serve_body_in_one_piece().await;
        let ep = Endpoints {
            rest_url: format!("http://{addr}").parse().unwrap(),
            grpc_url: format!("http://{addr}").parse().unwrap(),
            tcp_addr: addr.to_string(),
            h3_addr: addr.to_string(),
            pool_size: 1,
            timeout: Duration::from_secs(5),
            tls: None,
            gzip: false,
            zstd: false,
            breakdown: false,
            live: Default::default(),
        };
        let source = BidiSource::new(t, &ep, Arc::new(TransportMetrics::new())).unwrap();
        let req = http::Request::builder()
            .method(http::Method::POST)
            .uri(format!("http://{addr}/order.v2.OrderService/LookupOrders"))
            .body(tonic::body::Body::empty())
            .unwrap();
        let resp = tower::ServiceExt::oneshot(source.channels[0].clone(), req)
            .await
            .unwrap();
        let frames = data_frame_sizes(resp.into_body()).await;
        server.abort();
        frames
    }

    #[tokio::test]
    async fn the_bidi_twin_receives_the_largest_frames_and_stock_bidi_the_default() {
        let tuned = frames_received(Transport::GrpcBidiTuned).await;
        assert_eq!(tuned, [BODY], "one DATA frame");
        let stock = frames_received(Transport::GrpcBidi).await;
        assert_eq!(stock.iter().sum::<usize>(), BODY, "{stock:?}");
        assert!(
            stock.iter().all(|&n| n <= 16_384),
            "tonic's default frames: {stock:?}"
        );
        assert_eq!(stock.len(), BODY.div_ceil(16_384), "{stock:?}");
    }
}
