//! The raw-TCP floor: the least any protocol can cost for the same bytes.
//!
//! A frame is a 4-byte big-endian length, then that many bytes of protobuf.
//! Requests are `order.v2.LookupOrdersRequest`, answers
//! `order.v2.LookupOrdersResponse`, matched by `request_id`: a connection
//! carries many requests at once, and answers go out as they are ready, in
//! any order. No HTTP, no headers, no per-call framing beyond the length.
//!
//! A length over the configured maximum is refused before anything is
//! allocated: the connection gets one error frame (request id 0) and is closed,
//! since the rest of its bytes can no longer be trusted to be frame-aligned.
//!
//! A frame's buffer grows as its bytes arrive, never to the announced length
//! up front: a client that announces a large frame and sends nothing costs
//! almost nothing. A frame begun must be whole within the header-read
//! timeout; a connection that starts no frame for the idle timeout, with
//! no lookup in flight, is closed; the drain at shutdown ends `grace` plus
//! 1 s after the signal.
//!
//! Raw TCP has no GOAWAY, so at the signal each connection sends one of its
//! own: an error frame (request id 0, UNAVAILABLE, [`GOING_AWAY`]). It goes
//! on reading until the client closes its side (or `grace` passes), and
//! answers every lookup it reads from then on with UNAVAILABLE and the
//! lookup's id, not processed: a lookup already on the wire at the signal
//! gets an answer instead of a bare close.
//!
//! At most `max_connections` connections are served at once: the next one
//! gets one error frame (`RESOURCE_EXHAUSTED`, request id 0) and is closed,
//! and the refusal is counted in `/metrics` (protocol `tcp`, route `connect`).

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut as _, Bytes, BytesMut};
use prost::Message as _;
use proto::order::v2 as pb2;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _, BufReader, BufWriter};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::service::Orders;
use telemetry::metrics::RequestMetrics;

/// Raw-TCP limits, all configurable.
#[derive(Debug, Clone)]
pub struct TcpLimits {
    /// The largest request frame accepted, in bytes.
    pub max_frame_bytes: usize,
    /// Requests one connection may have in flight; more wait for a slot.
    pub max_in_flight: usize,
    /// Connections open at once; the next one gets a RESOURCE_EXHAUSTED
    /// error frame and is closed.
    pub max_connections: usize,
    /// Bytes of large frames being received at once, over every connection.
    pub frame_budget: FrameBudget,
    /// Time bounds: a frame whole within `header_read`, a connection
    /// idle no longer than `idle`, the drain within `grace` plus 1 s.
    pub conn: service_kit::serve::ConnLimits,
    /// The service's one limit of work in service: each lookup takes a
    /// slot; past it, RESOURCE_EXHAUSTED in the lookup's answer.
    pub limiter: service_kit::shed::Limiter,
}

/// The bytes of raw-TCP frames being received at once, shared by every
/// connection: a frame over [`FIRST_CHUNK`] takes its announced length
/// before its payload is read, and gives it back once decoded.
#[derive(Debug, Clone)]
pub struct FrameBudget {
    bytes: Arc<Semaphore>,
    total: usize,
}

impl FrameBudget {
    pub fn new(total: usize) -> Self {
        // A semaphore counts at most `Semaphore::MAX_PERMITS`.
        let total = total.min(Semaphore::MAX_PERMITS);
        FrameBudget {
            bytes: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// `announced` bytes of it, or why not.
    fn take(
        &self,
        announced: usize,
    ) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, FrameError> {
        if announced <= FIRST_CHUNK {
            return Ok(None);
        }
        let n = u32::try_from(announced).unwrap_or(u32::MAX);
        self.bytes
            .clone()
            .try_acquire_many_owned(n)
            .map(Some)
            .map_err(|_| FrameError::OverBudget {
                announced,
                budget: self.total,
            })
    }
}

/// A frame holding `msg`.
pub fn encode_frame<M: prost::Message>(msg: &M) -> Bytes {
    let len = msg.encoded_len();
    let mut buf = BytesMut::with_capacity(4 + len);
    buf.put_u32(len as u32);
    // Encoding into a buffer of the right size cannot fail.
    let _ = msg.encode(&mut buf);
    buf.freeze()
}

/// A frame holding a lookup's answer, its pending timing (if any)
/// completed as it is serialized (see `proto::timing::encode_lookup`).
pub fn lookup_frame(answer: pb2::LookupOrdersResponse) -> Bytes {
    let mut buf = BytesMut::with_capacity(4 + answer.encoded_len() + 32);
    buf.put_u32(0);
    proto::timing::encode_lookup(answer, &mut buf);
    let len = (buf.len() - 4) as u32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    buf.freeze()
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("the frame announces {announced} bytes, over the limit of {max}")]
    TooLarge { announced: usize, max: usize },
    #[error(
        "the frame announces {announced} bytes, and frames being received on every connection \
         already hold the budget of {budget} bytes (ORDER_TCP_FRAME_BUDGET_BYTES); retry later"
    )]
    OverBudget { announced: usize, budget: usize },
    #[error("a frame was begun and not finished within {} ms", .0.as_millis())]
    Slow(Duration),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Reads one frame's payload; `Ok(None)` at a clean end of stream.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<Option<Bytes>, FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let announced = u32::from_be_bytes(len) as usize;
    if announced > max {
        return Err(FrameError::TooLarge { announced, max });
    }
    read_payload(r, announced).await.map(Some)
}

/// A frame's `announced` bytes, in a buffer that grows as they arrive.
async fn read_payload<R: AsyncRead + Unpin>(
    r: &mut R,
    announced: usize,
) -> Result<Bytes, FrameError> {
    let mut buf = Vec::with_capacity(announced.min(FIRST_CHUNK));
    let got = r.take(announced as u64).read_to_end(&mut buf).await?;
    if got < announced {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    Ok(Bytes::from(buf))
}

/// The buffer a frame starts with, whatever length it announces.
const FIRST_CHUNK: usize = 8 * 1024;

/// A frame's payload, and its share of the [`FrameBudget`] (held until the
/// payload is decoded).
type Framed = (Bytes, Option<tokio::sync::OwnedSemaphorePermit>);

/// [`read_frame`] under the connection's time bounds and the frame budget: the length may take
/// up to `idle` to start arriving when `quiet()` says no lookup is in
/// flight (forever otherwise), and a frame begun must be whole within
/// `header_read`. `Ok(None)` at a clean end of stream or when idle.
async fn read_frame_timed<R: AsyncRead + Unpin>(
    r: &mut R,
    (max, budget): (usize, &FrameBudget),
    conn: &service_kit::serve::ConnLimits,
    quiet: impl Fn() -> bool,
) -> Result<Option<Framed>, FrameError> {
    // The first byte, waited for in idle-long slices (cancel-safe: one byte).
    let mut first = [0u8; 1];
    loop {
        match tokio::time::timeout(conn.idle, r.read(&mut first)).await {
            Ok(Ok(0)) => return Ok(None),
            Ok(Ok(_)) => break,
            Ok(Err(e)) => return Err(e.into()),
            Err(_) if quiet() => return Ok(None),
            Err(_) => {}
        }
    }
    let rest = async {
        let mut len = [first[0], 0, 0, 0];
        r.read_exact(&mut len[1..]).await?;
        let announced = u32::from_be_bytes(len) as usize;
        if announced > max {
            return Err(FrameError::TooLarge { announced, max });
        }
        let held = budget.take(announced)?;
        Ok((read_payload(r, announced).await?, held))
    };
    match tokio::time::timeout(conn.header_read, rest).await {
        Ok(r) => r.map(Some),
        Err(_) => Err(FrameError::Slow(conn.header_read)),
    }
}

/// What a connection sends at the signal, as request id 0: no lookup sent
/// from now on is processed; the answers to those already read follow.
pub const GOING_AWAY: &str = "order-service is shutting down: this connection takes no new lookup \
     (the ones already read are answered); close it and open another";

/// The frame that says [`GOING_AWAY`].
fn going_away() -> Bytes {
    error_frame(tonic::Code::Unavailable, GOING_AWAY.to_owned())
}

/// The answer to a lookup read after the signal: UNAVAILABLE, and it was
/// not processed, so it is safe to send again on another connection.
pub fn refused_at_shutdown(request_id: u64) -> pb2::LookupOrdersResponse {
    pb2::LookupOrdersResponse {
        request_id,
        error: Some(pb2::LookupError {
            code: tonic::Code::Unavailable as i32,
            message: "order-service is shutting down: the lookup was not processed".to_owned(),
        }),
        ..Default::default()
    }
}

/// A deadline that never comes, for a `select!` branch that is off.
fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600)
}

fn error_frame(code: tonic::Code, message: String) -> Bytes {
    encode_frame(&pb2::LookupOrdersResponse {
        request_id: 0,
        error: Some(pb2::LookupError {
            code: code as i32,
            message,
        }),
        ..Default::default()
    })
}

/// Serves raw-TCP lookups until `shutdown`; then stops accepting, answers the
/// requests in flight, and closes every connection. With `tls`, each
/// connection is TLS first (the same frames inside it).
pub async fn serve(
    listener: TcpListener,
    orders: Orders,
    limits: TcpLimits,
    metrics: Arc<RequestMetrics>,
    shutdown: CancellationToken,
    tls: Option<tls::Acceptor>,
    cap: service_kit::cap::ConnCap,
) -> anyhow::Result<()> {
    let tracker = TaskTracker::new();
    // `open` refuses past `limits.max_connections`, logging at most once a
    // second; its counts are on /metrics.
    let open = cap;
    loop {
        let (socket, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait, then go on.
                    tracing::warn!(error = %e, "raw-TCP accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = socket.set_nodelay(true);
        // Held for the connection's life; none left: refused with a frame.
        let slot = open.admit();
        let (orders, shutdown, metrics) = (orders.clone(), shutdown.clone(), metrics.clone());
        let (tls, limits) = (tls.clone(), limits.clone());
        tracker.spawn(async move {
            let served = match tls {
                None => {
                    let (rd, wr) = socket.into_split();
                    connection(rd, wr, orders, limits, metrics, shutdown, slot).await
                }
                Some(acceptor) => {
                    let handshake = tokio::select! {
                        () = shutdown.cancelled() => return,
                        h = acceptor.accept(socket) => h,
                    };
                    match handshake {
                        Ok(stream) => {
                            let (rd, wr) = tokio::io::split(stream);
                            connection(rd, wr, orders, limits, metrics, shutdown, slot).await
                        }
                        Err(e) => Err(e),
                    }
                }
            };
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "raw-TCP connection ended with an error");
            }
        });
    }
    tracker.close();
    let bound = limits.conn.grace + service_kit::serve::DRAIN_SLACK;
    if tokio::time::timeout(bound, tracker.wait()).await.is_err() {
        tracing::warn!(
            connections = tracker.len(),
            "the raw-TCP drain's time is up: dropping the connections still open"
        );
    }
    Ok(())
}

/// Serves one connection, plain or TLS, given its two halves.
async fn connection<R, W>(
    rd: R,
    wr: W,
    orders: Orders,
    limits: TcpLimits,
    metrics: Arc<RequestMetrics>,
    shutdown: CancellationToken,
    slot: Option<service_kit::cap::Admitted>,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut rd = BufReader::new(rd);
    let (tx, mut rx) = mpsc::channel::<Bytes>(64);
    let write_timeout = limits.conn.write;
    let writer = tokio::spawn(async move {
        // A client that takes no byte of its answers for the write timeout
        // loses the connection: the lookups waiting to send give their
        // slots of the limit back.
        let mut wr = BufWriter::new(service_kit::serve::WriteTimeout::new(wr, write_timeout));
        while let Some(frame) = rx.recv().await {
            wr.write_all(&frame).await?;
            // Coalesce answers that are ready together into one write.
            while let Ok(frame) = rx.try_recv() {
                wr.write_all(&frame).await?;
            }
            wr.flush().await?;
        }
        wr.shutdown().await
    });
    let Some(_slot) = slot else {
        return refuse(rd, tx, writer, limits.max_connections, &metrics).await;
    };
    let slots = Arc::new(Semaphore::new(limits.max_in_flight));
    let quiet = {
        let slots = slots.clone();
        move || slots.available_permits() == limits.max_in_flight
    };
    // Set at the signal: reading goes on until the client closes its side
    // or this passes, and every lookup read is refused, not lost.
    let mut draining: Option<tokio::time::Instant> = None;
    loop {
        let frame = {
            let next = read_frame_timed(
                &mut rd,
                (limits.max_frame_bytes, &limits.frame_budget),
                &limits.conn,
                &quiet,
            );
            tokio::pin!(next);
            // A frame half read is never abandoned at the signal (the bytes
            // after it would be misread): the read goes on, and only the drain's
            // end stops it.
            loop {
                let end = draining.unwrap_or_else(far_future);
                tokio::select! {
                    f = &mut next => break f,
                    () = shutdown.cancelled(), if draining.is_none() => {
                        draining = Some(tokio::time::Instant::now() + limits.conn.grace);
                        let _ = tx.send(going_away()).await;
                    }
                    () = tokio::time::sleep_until(end), if draining.is_some() => break Ok(None),
                // The writer gave up on a client that reads nothing.
                () = tx.closed() => break Ok(None),
                }
            }
        };
        let (payload, held) = match frame {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(FrameError::TooLarge { announced, max }) => {
                let msg = format!("frame of {announced} bytes is over the limit of {max}");
                let _ = tx
                    .send(error_frame(tonic::Code::ResourceExhausted, msg))
                    .await;
                break;
            }
            Err(e @ FrameError::OverBudget { announced, .. }) => {
                let _ = tx
                    .send(error_frame(tonic::Code::ResourceExhausted, e.to_string()))
                    .await;
                // Read the frame's bytes off (not kept) so that the close
                // does not reset the connection ahead of the error frame.
                discard(&mut rd, announced).await;
                break;
            }
            Err(e @ FrameError::Slow(_)) => {
                let _ = tx
                    .send(error_frame(tonic::Code::DeadlineExceeded, e.to_string()))
                    .await;
                break;
            }
            Err(FrameError::Io(e)) => {
                tracing::debug!(error = %e, "raw-TCP read failed");
                break;
            }
        };
        let began_at = if orders.server_timing {
            proto::timing::clock_nanos()
        } else {
            0
        };
        let decoded = pb2::LookupOrdersRequest::decode(payload);
        drop(held);
        let request = match decoded {
            Ok(r) => r,
            Err(e) => {
                let msg = format!("the frame is not a LookupOrdersRequest: {e}");
                let _ = tx
                    .send(error_frame(tonic::Code::InvalidArgument, msg))
                    .await;
                break;
            }
        };
        if draining.is_some() {
            let answer = refused_at_shutdown(request.request_id);
            crate::grpc::record_lookup(&metrics, "tcp", &answer, Duration::ZERO);
            let _ = tx.send(encode_frame(&answer)).await;
            continue;
        }
        let Ok(permit) = slots.clone().acquire_owned().await else {
            break;
        };
        let Some(admitted) = limits.limiter.try_acquire() else {
            let answer = crate::grpc::overloaded_lookup(request.request_id);
            crate::grpc::record_lookup(&metrics, "tcp", &answer, Duration::ZERO);
            let _ = tx.send(encode_frame(&answer)).await;
            continue;
        };
        let (orders, tx, metrics) = (orders.clone(), tx.clone(), metrics.clone());
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let answer = crate::grpc::lookup(
                &orders,
                telemetry::spans::LookupCarrier::Tcp,
                request,
                began_at,
            )
            .await;
            crate::grpc::record_lookup(&metrics, "tcp", &answer, started.elapsed());
            let _ = tx.send(lookup_frame(answer)).await;
            drop((permit, admitted));
        });
    }
    drop(tx);
    writer.await.map_err(std::io::Error::other)?
}

/// Reads up to `n` bytes off `rd` and drops them, for at most a second.
async fn discard<R: AsyncRead + Unpin>(rd: &mut R, n: usize) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut buf = [0u8; 8192];
        let mut left = n;
        while left > 0 {
            match rd.read(&mut buf[..left.min(8192)]).await {
                Ok(0) | Err(_) => break,
                Ok(k) => left -= k,
            }
        }
    })
    .await;
}

/// Refuses a connection over the limit: one RESOURCE_EXHAUSTED frame
/// (request id 0), counted as a `connect` of protocol `tcp`, then the close.
async fn refuse<R: AsyncRead + Unpin>(
    mut rd: R,
    tx: mpsc::Sender<Bytes>,
    writer: tokio::task::JoinHandle<std::io::Result<()>>,
    max: usize,
    metrics: &RequestMetrics,
) -> std::io::Result<()> {
    metrics.record(
        "tcp",
        "connect",
        telemetry::metrics::Outcome::grpc(tonic::Code::ResourceExhausted as i32),
        Duration::ZERO,
    );
    let msg = format!(
        "too many raw-TCP connections: the limit is {max} (ORDER_MAX_TCP_CONNECTIONS); retry later"
    );
    let _ = tx
        .send(error_frame(tonic::Code::ResourceExhausted, msg))
        .await;
    drop(tx);
    let written = writer.await.map_err(std::io::Error::other)?;
    // Closing a socket with unread bytes resets it, and the reset can beat
    // the error frame to the client: read what it already sent (bounded in
    // bytes and time) until it closes its side.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut buf = [0u8; 4096];
        let mut left: usize = 64 * 1024;
        while left > 0 {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_length_over_the_limit_is_refused_before_reading_the_body() {
        // Announces 4 GiB - 1 and sends nothing more: the reader must refuse at
        // once rather than allocate or wait for the body.
        let bytes: &[u8] = &[0xFF, 0xFF, 0xFF, 0xFF];
        let mut r = bytes;
        match read_frame(&mut r, 1024).await {
            Err(FrameError::TooLarge { announced, max }) => {
                assert_eq!(announced, u32::MAX as usize);
                assert_eq!(max, 1024);
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn frames_round_trip() {
        let msg = pb2::LookupOrdersRequest {
            request_id: 7,
            user_id: "u".into(),
            ..Default::default()
        };
        let frame = encode_frame(&msg);
        let mut r: &[u8] = &frame;
        let payload = read_frame(&mut r, 1024).await.unwrap().unwrap();
        assert_eq!(pb2::LookupOrdersRequest::decode(payload).unwrap(), msg);
        assert!(read_frame(&mut r, 1024).await.unwrap().is_none());
    }
}
