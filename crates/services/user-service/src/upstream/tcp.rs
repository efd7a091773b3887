//! `tcp-proto`: the floor. Raw TCP, no HTTP: each frame is a 4-byte
//! big-endian length and a protobuf `LookupOrdersRequest` (or, coming back,
//! `LookupOrdersResponse`). N persistent connections, each carrying many
//! lookups at once, matched by request id.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{SinkExt, StreamExt as _};
use model::v2::field_mask;
use prost::Message as _;
use proto::order::v2::{LookupOrdersRequest, LookupOrdersResponse};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};
use transports::Transport;

use super::endpoints::Endpoints;
use super::port::{MAX_MESSAGE_BYTES, OrderQuery, OrderSource, UpstreamError};
use super::semconv::Peer;
use super::shared::mux::{Ids, Link, Pending, Slot, answer_to_orders};
use super::wire;
use crate::metrics::TransportMetrics;

/// The `tcp-proto` adapter.
#[derive(Debug)]
pub struct TcpSource {
    dial: wire::Dialer,
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

/// An answer frame decoded, and how long that took when `timed`.
///
/// Decoded from the frame frozen into `Bytes` (no copy), as the REST
/// adapters decode their bodies: prost advances through a `BytesMut` with
/// more bookkeeping per field: about 1.1 million instructions more per
/// 1,000-order answer (callgrind), which made the floor slower than
/// HTTP/1.1.
fn timed_decode(
    timed: bool,
    frame: bytes::BytesMut,
) -> Result<(LookupOrdersResponse, std::time::Duration), prost::DecodeError> {
    let frame = frame.freeze();
    if !timed {
        return LookupOrdersResponse::decode(frame).map(|a| (a, std::time::Duration::ZERO));
    }
    let t0 = std::time::Instant::now();
    let answer = LookupOrdersResponse::decode(frame)?;
    Ok((answer, t0.elapsed()))
}

/// The frame format both ends agree on: 4-byte big-endian length prefix.
fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .big_endian()
        .max_frame_length(MAX_MESSAGE_BYTES)
        .new_codec()
}

impl TcpSource {
    /// An adapter with `ep.pool_size` connection slots, none open yet.
    pub fn new(ep: &Endpoints, metrics: Arc<TransportMetrics>) -> Self {
        TcpSource {
            // No ALPN: the frames are this project's own protocol.
            dial: ep.dialer(ep.tcp_addr.clone(), &[], &metrics),
            slots: (0..ep.pool_size).map(|_| Slot::default()).collect(),
            next: AtomicUsize::new(0),
            ids: Ids::default(),
            metrics,
            breakdown: ep.breakdown,
            deadline_ms: u32::try_from(ep.timeout.as_millis()).unwrap_or(u32::MAX),
            peer: Peer::of_addr(&ep.tcp_addr),
        }
    }

    /// Opens a connection and starts its writer and reader tasks.
    async fn open(
        dial: wire::Dialer,
        metrics: Arc<TransportMetrics>,
        breakdown: bool,
    ) -> Result<Link, UpstreamError> {
        let io = dial.connect(&metrics).await.map_err(|e| {
            UpstreamError::Unavailable(format!(
                "cannot connect to the raw-TCP port {}: {e}",
                dial.addr
            ))
        })?;
        Ok(match io {
            // Owned halves: no lock between the reader and the writer.
            wire::Conn::Plain(io) => {
                let (r, w) = io.into_split();
                Self::start(r, w, breakdown)
            }
            wire::Conn::Tls(_) => {
                let (r, w) = tokio::io::split(io);
                Self::start(r, w, breakdown)
            }
        })
    }

    /// Starts the writer and reader tasks of a connection's two halves.
    fn start<R, W>(r: R, w: W, breakdown: bool) -> Link
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let pending = Arc::new(Pending::default());
        // Bounded: a caller waits here when the socket cannot keep up.
        let (tx, mut rx) = mpsc::channel::<LookupOrdersRequest>(1024);

        let writer_pending = pending.clone();
        tokio::spawn(async move {
            let mut sink = FramedWrite::new(w, codec());
            while let Some(req) = rx.recv().await {
                let mut result = sink.feed(Bytes::from(req.encode_to_vec())).await;
                // Write whatever else is already queued before flushing, so a
                // burst of lookups shares system calls.
                while result.is_ok() {
                    match rx.try_recv() {
                        Ok(more) => result = sink.feed(Bytes::from(more.encode_to_vec())).await,
                        Err(_) => break,
                    }
                }
                if let Err(e) = result.and(SinkExt::<Bytes>::flush(&mut sink).await) {
                    writer_pending.fail_all(&format!(
                        "writing to order-service's raw-TCP port failed: {e}"
                    ));
                    return;
                }
            }
            // Every sender is gone: the link was replaced or the app stopped.
            // Dropping the write half shuts our side down.
        });

        let reader_pending = pending.clone();
        tokio::spawn(async move {
            let mut frames = FramedRead::new(r, codec());
            let why = loop {
                match frames.next().await {
                    Some(Ok(frame)) => match timed_decode(breakdown, frame) {
                        // Request id 0 is the connection's own: an error
                        // there (order-service shutting down) ends it for
                        // new lookups, and the pending ones are answered.
                        Ok((answer, _)) if answer.request_id == 0 => {
                            let why = answer.error.map_or_else(
                                || "order-service sent an answer to no lookup".to_owned(),
                                |e| format!("order-service: {}", e.message),
                            );
                            reader_pending.going_away(&why);
                        }
                        Ok((answer, took)) => reader_pending.deliver_decoded(answer, took),
                        Err(e) => {
                            break format!(
                                "order-service sent a frame that is not a LookupOrdersResponse: {e}"
                            );
                        }
                    },
                    Some(Err(e)) => {
                        break format!("reading from order-service's raw-TCP port failed: {e}");
                    }
                    None => break "order-service closed the raw-TCP connection".to_owned(),
                }
            };
            reader_pending.fail_all(&why);
        });

        Link::new(tx, pending)
    }
}

/// Whether a lookup came back UNAVAILABLE, as an answer or as a failure.
fn unavailable(answer: &Result<LookupOrdersResponse, UpstreamError>) -> bool {
    match answer {
        Ok(a) => a
            .error
            .as_ref()
            .is_some_and(|e| e.code == tonic::Code::Unavailable as i32),
        Err(e) => matches!(e, UpstreamError::Unavailable(_)),
    }
}

impl OrderSource for TcpSource {
    fn transport(&self) -> Transport {
        Transport::TcpProto
    }

    fn list_orders<'a>(
        &'a self,
        q: &'a OrderQuery,
    ) -> BoxFuture<'a, Result<Vec<model::Order>, UpstreamError>> {
        Box::pin(async move {
            self.peer.record();
            let i = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
            let slot = &self.slots[i];
            let open = || Self::open(self.dial.clone(), self.metrics.clone(), self.breakdown);
            let link = slot.get(open).await?;
            let req = LookupOrdersRequest {
                request_id: self.ids.next(),
                user_id: q.user_id.to_string(),
                page_size: i32::try_from(q.limit).unwrap_or(i32::MAX),
                page_token: String::new(),
                read_mask: field_mask(q.fields),
                trace_context: telemetry::propagation::context_map(),
                // order-service stops the lookup past it.
                deadline_ms: self.deadline_ms,
            };
            let _on_wire = self.metrics.in_flight();
            let answer = link.call(req.clone()).await;
            // A lookup the server refused because its connection was going
            // away was not processed (order-service's raw-TCP drain says
            // so): sent once more, on a new connection. Nothing else is
            // retried.
            if link.went_away() && unavailable(&answer) {
                let link = slot.get(open).await?;
                return answer_to_orders(link.call(req).await?);
            }
            answer_to_orders(answer?)
        })
    }
}
