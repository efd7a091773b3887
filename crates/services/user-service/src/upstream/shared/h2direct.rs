//! The tuned twins' connections: HTTP/2 connections of the `h2` crate that
//! the caller uses directly, rather than through hyper's HTTP/2 client (and,
//! for gRPC, tonic's `Channel`). The caller opens its stream on the
//! connection itself and reads the answer off it; the only other task is the
//! connection's own, which reads and writes the socket. Why the twins differ
//! from the stock transports is told in [`crate::upstream::tuned`].
//!
//! [`Conns`]: `pool_size` connections, round-robin, each opened on first use
//! and again when it broke ([`H2Slots`]), counted and over TLS (ALPN h2)
//! like every other transport's, advertising the largest DATA frames HTTP/2
//! allows ([`MAX_FRAME`]). A request (gRPC's one message, or a bodiless GET)
//! goes out in one piece. [`Service`]: the connections as the service
//! tonic's client calls.
//!
//! Flow-control windows are hyper's defaults (2 MiB per stream, 5 MiB per
//! connection), which the stock clients also have, so flow control is not
//! one of the differences, and a frame is never larger than the stream's
//! window: what one stream holds unread is bounded as before.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame};

use super::exchange::{Answer, into_answer, read_body, unavailable};
use super::h2::H2Slots;
use crate::metrics::TransportMetrics;
use crate::upstream::port::UpstreamError;
use crate::upstream::wire;

/// hyper's HTTP/2 client defaults, which tonic's `Channel` keeps.
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;
/// The largest DATA frame this side accepts: HTTP/2's largest (RFC 9113,
/// 6.5.2). The `h2` crate writes each DATA frame with its own `writev` and
/// reads at most a frame's remainder at a time, so at 1,000 orders 16 KiB
/// frames cost about 43 system calls per call where HTTP/1.1 makes 4. The
/// price, on a connection shared by several callers, is that one caller's
/// large frame is sent whole before another's next frame.
pub(crate) const MAX_FRAME: u32 = (1 << 24) - 1;

/// One `h2` connection's handle for opening streams, and whether its
/// connection task has ended.
#[derive(Clone)]
struct Sender {
    send: h2::client::SendRequest<Bytes>,
    closed: Arc<AtomicBool>,
}

/// A request's head, kept so that a retry can send it again.
struct Head {
    method: http::Method,
    uri: http::Uri,
    headers: http::HeaderMap,
}

impl Head {
    fn request(&self) -> http::Request<()> {
        let mut r = http::Request::new(());
        *r.method_mut() = self.method.clone();
        *r.uri_mut() = self.uri.clone();
        *r.headers_mut() = self.headers.clone();
        r
    }
}

/// The connections of one tuned adapter, and how to open one.
pub(crate) struct Conns {
    dial: wire::Dialer,
    slots: H2Slots<Sender>,
    metrics: Arc<TransportMetrics>,
}

impl std::fmt::Debug for Conns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conns")
            .field("addr", &self.dial.addr)
            .finish_non_exhaustive()
    }
}

impl Conns {
    /// `size` connections to `dial`'s address, each opened on first use.
    pub(crate) fn new(dial: wire::Dialer, size: usize, metrics: Arc<TransportMetrics>) -> Self {
        Conns {
            dial,
            slots: H2Slots::new(size),
            metrics,
        }
    }

    async fn open(&self) -> Result<Sender, UpstreamError> {
        let io = self.dial.connect(&self.metrics).await.map_err(|e| {
            UpstreamError::Unavailable(format!("cannot connect to {}: {e}", self.dial.addr))
        })?;
        let (send, conn) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_frame_size(MAX_FRAME)
            .handshake::<_, Bytes>(io)
            .await
            .map_err(|e| {
                UpstreamError::Unavailable(format!(
                    "the HTTP/2 handshake failed: {}",
                    wire::chain(&e)
                ))
            })?;
        let closed = Arc::new(AtomicBool::new(false));
        let ended = closed.clone();
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "an HTTP/2 connection to order-service ended");
            }
            ended.store(true, Ordering::Release);
        });
        Ok(Sender { send, closed })
    }

    /// Sends `head` and `body` on the next connection and waits for the
    /// answer's headers. A connection that died before answering (order-
    /// service went away and came back) gets one more try on a new one.
    /// The outer error: no connection; the inner: the call failed on one.
    async fn request(
        &self,
        head: &Head,
        body: Bytes,
    ) -> Result<Result<http::Response<RecvBody>, h2::Error>, UpstreamError> {
        let i = self.slots.pick();
        let mut failed = None;
        loop {
            let (generation, sender) = self
                .slots
                .get(
                    i,
                    failed,
                    |s| !s.closed.load(Ordering::Acquire),
                    || self.open(),
                )
                .await?;
            match send(sender.send, head.request(), body.clone()).await {
                Ok(resp) => return Ok(Ok(resp.map(RecvBody::new))),
                Err(e) if failed.is_none() && (e.is_io() || e.is_go_away()) => {
                    tracing::debug!(error = %e, "an HTTP/2 connection failed; retrying on a new one");
                    failed = Some(generation);
                }
                Err(e) => return Ok(Err(e)),
            }
        }
    }

    /// One gRPC call: the request's headers and its one message, then the
    /// answer's headers.
    async fn call(
        &self,
        req: http::Request<tonic::body::Body>,
    ) -> Result<http::Response<RecvBody>, tonic::Status> {
        let (parts, body) = req.into_parts();
        // A unary request's body is its one encoded message, ready at once.
        let body = body.collect().await?.to_bytes();
        let head = Head {
            method: parts.method,
            uri: parts.uri,
            headers: parts.headers,
        };
        match self.request(&head, body).await {
            Ok(Ok(resp)) => Ok(resp),
            // tonic maps an h2 error to its status (a reset stream's reason,
            // an I/O error as unavailable).
            Ok(Err(e)) => Err(tonic::Status::from_error(Box::new(e))),
            Err(e) => Err(tonic::Status::unavailable(e.to_string())),
        }
    }

    /// `h2c-proto-tuned`'s GET: the whole answer, up to the message limit.
    pub(crate) async fn get(
        &self,
        path_and_query: &str,
        accept: &'static str,
        extra: &http::HeaderMap,
    ) -> Result<Answer, UpstreamError> {
        let uri: http::Uri = self
            .dial
            .absolute(path_and_query)
            .parse()
            .map_err(|e| UpstreamError::Protocol(format!("building the request: {e}")))?;
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::ACCEPT, http::HeaderValue::from_static(accept));
        headers.extend(extra.clone());
        telemetry::propagation::inject_headers(&mut headers);
        let head = Head {
            method: http::Method::GET,
            uri,
            headers,
        };
        let _on_wire = self.metrics.in_flight();
        let resp = self
            .request(&head, Bytes::new())
            .await?
            .map_err(|e| unavailable("the HTTP/2 call failed", wire::chain(&e)))?;
        let (parts, body) = resp.into_parts();
        let body = read_body(body).await?;
        Ok(into_answer(parts, body))
    }
}

/// Opens a stream on `send`'s connection, sends `head` and `body` (ending
/// the stream), and waits for the answer's headers.
async fn send(
    send: h2::client::SendRequest<Bytes>,
    head: http::Request<()>,
    body: Bytes,
) -> Result<http::Response<h2::RecvStream>, h2::Error> {
    let mut send = send.ready().await?;
    let (answer, mut stream) = send.send_request(head, body.is_empty())?;
    if !body.is_empty() {
        stream.send_data(body, true)?;
    }
    answer.await
}

/// An answer's body, as tonic or `read_body` reads it: the DATA frames
/// (their flow-control capacity given back as they are read), then the
/// trailers.
pub(crate) struct RecvBody {
    recv: h2::RecvStream,
    data_done: bool,
    done: bool,
}

impl RecvBody {
    fn new(recv: h2::RecvStream) -> Self {
        RecvBody {
            recv,
            data_done: false,
            done: false,
        }
    }
}

impl Body for RecvBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if !this.data_done {
            match ready!(this.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(e)));
                }
                None => this.data_done = true,
            }
        }
        let trailers = ready!(this.recv.poll_trailers(cx));
        this.done = true;
        Poll::Ready(match trailers {
            Ok(Some(t)) => Some(Ok(Frame::trailers(t))),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        })
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

/// The connections as the service tonic's client calls.
#[derive(Clone)]
pub(crate) struct Service(pub(crate) Arc<Conns>);

impl tower::Service<http::Request<tonic::body::Body>> for Service {
    type Response = http::Response<RecvBody>;
    type Error = tonic::Status;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness is per connection, awaited in `call`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let conns = self.0.clone();
        Box::pin(async move { conns.call(req).await })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use http_body_util::BodyExt as _;

    use super::*;

    /// A body larger than three 16 KiB frames and smaller than HTTP/2's
    /// initial connection window, so that flow control cannot split it.
    pub(crate) const BODY: usize = 60_000;

    /// An `h2` server on a free port that answers its one request with
    /// `BODY` bytes in one `send_data`: it cuts them into frames no larger
    /// than the client advertised. Its address, and its task to abort.
    pub(crate) async fn serve_body_in_one_piece()
    -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            let mut conn = h2::server::handshake(socket).await.unwrap();
            let (_req, mut respond) = conn.accept().await.unwrap().unwrap();
            let mut stream = respond
                .send_response(http::Response::new(()), false)
                .unwrap();
            stream
                .send_data(Bytes::from(vec![7u8; BODY]), true)
                .unwrap();
            // Drive the connection until the client goes away.
            while conn.accept().await.is_some() {}
        });
        (addr, server)
    }

    /// The sizes of `body`'s DATA frames, as the client received them.
    pub(crate) async fn data_frame_sizes<B>(mut body: B) -> Vec<usize>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Debug,
    {
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.unwrap().into_data() {
                frames.push(data.len());
            }
        }
        frames
    }

    #[tokio::test]
    async fn the_answer_comes_in_the_largest_frames_the_client_advertises() {
        let (addr, server) = serve_body_in_one_piece().await;
        let conns = Conns::new(
            wire::Dialer::plain(addr.to_string()),
            1,
            Arc::new(TransportMetrics::new()),
        );
        let head = Head {
            method: http::Method::GET,
            uri: format!("http://{addr}/").parse().unwrap(),
            headers: http::HeaderMap::new(),
        };
        let resp = conns.request(&head, Bytes::new()).await.unwrap().unwrap();
        let frames = data_frame_sizes(resp.into_body()).await;
        assert_eq!(frames.iter().sum::<usize>(), BODY, "{frames:?}");
        // 16 KiB frames would have made four.
        assert_eq!(frames, [BODY], "one DATA frame");
        drop(conns);
        server.abort();
    }
}
