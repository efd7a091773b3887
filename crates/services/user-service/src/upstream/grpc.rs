//! The gRPC adapters: `grpc` (unary `ListOrders`), `grpc-stream`
//! (`StreamOrders`), `grpc-v1` (the all-strings legacy `ListOrders`) and
//! `grpc-bidi` (`LookupOrders`, one long-lived stream per connection). `grpc`
//! and `grpc-stream` also carry many queries in one call (`BatchListOrders`,
//! `BatchStreamOrders`).
//!
//! One tonic `Channel` is one HTTP/2 connection, so a budget of N is N
//! channels, picked round-robin. Each channel connects through
//! [`wire::connect`], lazily, and reconnects by itself when its connection
//! breaks. The upstream timeout travels as the gRPC deadline (`grpc-timeout`)
//! on every unary and server-streaming call.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use hyper_util::rt::TokioIo;
use model::v2::field_mask;
use proto::order::v1::order_service_client::OrderServiceClient as V1Client;
use proto::order::v2::order_service_client::OrderServiceClient;
use proto::order::v2::{
    BatchListOrdersRequest, BatchStreamOrdersRequest, ListOrdersRequest, LookupOrdersRequest,
    StreamOrdersRequest, StreamOrdersResponse,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::CompressionEncoding;
use tonic::transport::{Channel, Endpoint};

use super::mux::{Ids, Link, Pending, Slot, answer_to_orders};
use super::{
    Endpoints, MAX_MESSAGE_BYTES, OrderQuery, OrderSource, Transport, UpstreamError, to_domain,
    wire,
};
use crate::metrics::TransportMetrics;

/// `pool_size` lazily connected channels whose sockets are counted; over
/// TLS (ALPN h2) when it is on. `max_frame`: the largest DATA frame the
/// channels accept, when not HTTP/2's default 16 KiB (a twin's setting).
fn channels(
    ep: &Endpoints,
    metrics: &Arc<TransportMetrics>,
    max_frame: Option<u32>,
) -> anyhow::Result<Vec<Channel>> {
    let dial = ep.dialer(wire::authority(&ep.grpc_url)?, tls::ALPN_H2, metrics);
    // The scheme only becomes `:scheme`: the connector below does the TLS.
    let mut url = ep.grpc_url.clone().into_parts();
    url.scheme = Some(dial.scheme());
    let url = http::Uri::from_parts(url)?;
    let endpoint = Endpoint::from(url)
        .connect_timeout(ep.timeout)
        .max_frame_size(max_frame);
    Ok((0..ep.pool_size)
        .map(|_| {
            let dial = dial.clone();
            let metrics = metrics.clone();
            endpoint.connect_with_connector_lazy(tower::service_fn(move |_: http::Uri| {
                let dial = dial.clone();
                let metrics = metrics.clone();
                async move { dial.connect(&metrics).await.map(TokioIo::new) }
            }))
        })
        .collect())
}

/// A tonic status as an upstream error.
pub(crate) fn from_status(s: &tonic::Status) -> UpstreamError {
    use tonic::Code;
    let message = s.message().to_owned();
    match s.code() {
        Code::DeadlineExceeded => UpstreamError::Timeout(message),
        // tonic enforces the deadline it sends on the client side too, and
        // reports it as CANCELLED with exactly this message.
        Code::Cancelled if message == tonic::TimeoutExpired(()).to_string() => {
            UpstreamError::Timeout(message)
        }
        // A refused or broken connection reaches us as Unavailable or, when
        // the channel could not even become ready, as Unknown. Its cause (a
        // TLS alert, a reset) is in the sources, not in tonic's message.
        Code::Unavailable | Code::Unknown | Code::Cancelled => {
            let cause = std::error::Error::source(s).map(wire::chain);
            UpstreamError::Unavailable(match cause {
                Some(c) if !message.contains(&c) => format!("{message}: {c}"),
                _ => message,
            })
        }
        code => UpstreamError::Rejected {
            status: format!("{code:?}"),
            message,
        },
    }
}

/// A call's status as an upstream error, its code recorded on the call's
/// span.
pub(crate) fn failed(s: tonic::Status) -> UpstreamError {
    super::semconv::record_grpc_code(s.code());
    from_status(&s)
}

/// Whether a call failed on its connection before order-service answered:
/// tonic made the status from a transport error (an h2 or hyper error, a
/// reset, a connection closed under the call, as when a rotated connection
/// goes away under a call in flight), which a status order-service sent
/// never carries. hyper's "operation was canceled", a request its
/// connection closed before sending, reaches us as CANCELLED with that
/// cause. A timeout is not one: sending again would only wait twice.
pub(crate) fn connection_failed(s: &tonic::Status) -> bool {
    use tonic::Code;
    let Some(cause) = std::error::Error::source(s) else {
        return false;
    };
    let late =
        cause.is::<tonic::TimeoutExpired>() || s.message() == tonic::TimeoutExpired(()).to_string();
    !late
        && matches!(
            s.code(),
            Code::Internal | Code::Unavailable | Code::Unknown | Code::Cancelled
        )
}

/// The pauses before each resend of a call whose connection failed under
/// it. A request can land in the queue of a connection task that is already
/// ending (hyper's "operation was canceled: connection closed"); sent again
/// at once, on a busy machine, it can meet the same dying task before the
/// channel has noticed and reconnected. A short pause lets the task finish;
/// the second, longer one covers a reconnect that itself met a closing
/// connection. At most 55 ms are added to a call that fails anyway.
const RESEND_PAUSES: [std::time::Duration; 2] = [
    std::time::Duration::from_millis(5),
    std::time::Duration::from_millis(50),
];

/// The answer of `call`, made again when its connection failed under it
/// (see [`connection_failed`] and [`RESEND_PAUSES`]): only for calls that
/// read and change nothing, as the REST adapters resend a GET whose pooled
/// connection had died.
async fn resent<T, Fut>(mut call: impl FnMut() -> Fut) -> Result<T, UpstreamError>
where
    Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let mut answer = call().await;
    for pause in RESEND_PAUSES {
        match &answer {
            Err(s) if connection_failed(s) => {
                tracing::debug!(status = %s, ?pause, "a gRPC call's connection failed; sending it again");
                tokio::time::sleep(pause).await;
                answer = call().await;
            }
            _ => break,
        }
    }
    answer
        .map(|r| {
            super::semconv::record_grpc_code(tonic::Code::Ok);
            // tonic merges a unary call's trailers into its metadata.
            super::parts::server_timing(r.metadata().as_ref());
            r.into_inner()
        })
        .map_err(failed)
}

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
    peer: super::semconv::Peer,
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
            peer: super::semconv::Peer::of_url(&ep.grpc_url),
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
        super::parts::decoding(|| to_domain(answer.orders))
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
        super::semconv::record_grpc_code(tonic::Code::Ok);
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
        super::semconv::record_grpc_code(tonic::Code::Ok);
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
        super::parts::decoding(|| Ok(select(to_domain(answer.orders)?, q.fields)))
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

/// `StreamOrders`' request for `q`.
pub(crate) fn stream_request(q: &OrderQuery) -> StreamOrdersRequest {
    StreamOrdersRequest {
        user_id: q.user_id.to_string(),
        page_size: page_size(q),
        page_token: String::new(),
        read_mask: field_mask(q.fields),
    }
}

/// The `ListOrders` query of `q`: its first page.
pub(crate) fn list_request(q: &OrderQuery) -> ListOrdersRequest {
    ListOrdersRequest {
        user_id: q.user_id.to_string(),
        page_size: page_size(q),
        page_token: String::new(),
        read_mask: field_mask(q.fields),
    }
}

fn page_size(q: &OrderQuery) -> i32 {
    i32::try_from(q.limit).unwrap_or(i32::MAX)
}

/// The orders of a `StreamOrders` answer to `q`, one per message, to the
/// end of the stream; its trailers read for order-service's account when it
/// is recorded.
pub(super) async fn read_stream(
    q: &OrderQuery,
    stream: &mut tonic::Streaming<StreamOrdersResponse>,
) -> Result<Vec<model::Order>, UpstreamError> {
    let mut orders = Vec::with_capacity(q.limit.min(10_000) as usize);
    while let Some(msg) = stream.message().await.map_err(failed)? {
        let o = msg.order.ok_or_else(|| {
            UpstreamError::Protocol("a StreamOrdersResponse carried no order".to_owned())
        })?;
        orders.push(o);
    }
    // The stream ended without an error: its status was OK.
    super::semconv::record_grpc_code(tonic::Code::Ok);
    if super::parts::recording()
        && let Some(trailers) = stream.trailers().await.map_err(failed)?
    {
        super::parts::server_timing(trailers.as_ref());
    }
    super::parts::decoding(|| to_domain(orders))
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

/// `grpc-bidi`: per channel, one long-lived `LookupOrders` stream carrying
/// every lookup sent on that connection. `grpc-bidi-tuned` is the same
/// with each answer decoded from one `Bytes` ([`super::tuned`]'s codec) and
/// channels that advertise HTTP/2's largest frame size.
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
    peer: super::semconv::Peer,
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
        let max_frame = (t == Transport::GrpcBidiTuned).then_some(super::tuned::MAX_FRAME);
        let channels = channels(ep, &metrics, max_frame)?;
        Ok(BidiSource {
            transport: t,
            slots: channels.iter().map(|_| Slot::default()).collect(),
            channels,
            next: AtomicUsize::new(0),
            ids: Ids::default(),
            metrics,
            breakdown: ep.breakdown,
            peer: super::semconv::Peer::of_url(&ep.grpc_url),
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
                super::tuned::lookup_orders(channel, ReceiverStream::new(rx)).await
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
            };
            let _on_wire = self.metrics.in_flight();
            answer_to_orders(link.call(req).await?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tuned::tests::{BODY, data_frame_sizes, serve_body_in_one_piece};
    use super::*;

    /// The sizes of the DATA frames in which a bidi adapter's channel
    /// receives an answer of [`BODY`] bytes sent in one piece.
    async fn frames_received(t: Transport) -> Vec<usize> {
        let (addr, server) = serve_body_in_one_piece().await;
        let ep = Endpoints {
            rest_url: format!("http://{addr}").parse().unwrap(),
            grpc_url: format!("http://{addr}").parse().unwrap(),
            tcp_addr: addr.to_string(),
            pool_size: 1,
            timeout: Duration::from_secs(5),
            tls: None,
            gzip: false,
            zstd: false,
            breakdown: false,
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

    #[test]
    fn only_a_status_made_from_a_transport_error_counts_as_a_failed_connection() {
        // What order-service sends: no source, whatever the code.
        assert!(!connection_failed(&tonic::Status::internal("a bug")));
        assert!(!connection_failed(&tonic::Status::unavailable(
            "store down"
        )));
        // What tonic makes of a connection that broke under the call.
        let broken = tonic::Status::from_error(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset",
        )));
        assert!(std::error::Error::source(&broken).is_some(), "{broken:?}");
        assert!(connection_failed(&broken), "{broken:?}");
        // A deadline is never sent twice.
        let late = tonic::Status::from_error(Box::new(tonic::TimeoutExpired(())));
        assert!(!connection_failed(&late), "{late:?}");
        // A request its connection closed before sending (hyper's
        // "operation was canceled"): CANCELLED, with the transport's cause.
        let mut canceled = tonic::Status::cancelled("operation was canceled");
        canceled.set_source(Arc::new(std::io::Error::other("connection closed")));
        assert!(connection_failed(&canceled), "{canceled:?}");
        // A CANCELLED that order-service sent carries no cause.
        assert!(!connection_failed(&tonic::Status::cancelled(
            "by the server"
        )));
    }

    fn broken() -> tonic::Status {
        tonic::Status::from_error(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset",
        )))
    }

    /// A call that fails on its connection `fails` times, then answers;
    /// returns its result and how often it was made.
    async fn flaky(fails: usize) -> (Result<u32, UpstreamError>, usize) {
        let made = std::sync::atomic::AtomicUsize::new(0);
        let answer = resent(|| {
            let n = made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                if n < fails {
                    Err(broken())
                } else {
                    Ok(tonic::Response::new(7))
                }
            }
        })
        .await;
        (answer, made.into_inner())
    }

    #[tokio::test]
    async fn a_call_whose_connection_failed_is_sent_again_at_most_twice() {
        let (answer, made) = flaky(0).await;
        assert_eq!((answer.ok(), made), (Some(7), 1));
        let (answer, made) = flaky(2).await;
        assert_eq!((answer.ok(), made), (Some(7), 3));
        let (answer, made) = flaky(3).await;
        assert!(
            matches!(answer, Err(UpstreamError::Unavailable(_))),
            "{answer:?}"
        );
        assert_eq!(made, 3, "gives up after the pauses");
        // An answer from order-service is never sent again.
        let made = std::sync::atomic::AtomicUsize::new(0);
        let answer: Result<u32, _> = resent(|| {
            made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Err(tonic::Status::unavailable("store down")) }
        })
        .await;
        assert!(answer.is_err());
        assert_eq!(made.into_inner(), 1);
    }
}
