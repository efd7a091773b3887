//! An HTTP/1.1 answer given before its request's body was read: the body
//! left over is read and thrown away, within a bound, before the answer
//! goes out, so that the connection stays usable; past the bound the answer
//! says `Connection: close`.
//!
//! A handler that answers early (an unknown route, a refused media type, a
//! body over the size cap) drops the request body unread. hyper cannot then
//! reuse the connection and closes it after the answer, without saying so:
//! a keep-alive client still writing the body, or sending its next request
//! on the connection, gets a broken pipe (`EPIPE`) instead of the answer.
//! RFC 9112 §9.6 asks a server that closes early to say so and to keep
//! reading for a while (hyper's and nginx's lingering close).
//!
//! HTTP/2 resets the one stream, but a client may go on sending the body it
//! had started (connect-node does), and the bytes that arrive still count
//! against the connection's flow-control window: unread, a few refused
//! 5 MB requests left every later call on the connection waiting for a
//! window that never opened. The body is read there too.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt as _;

/// The most of a body left over that is read before answering, bytes:
/// enough for a request a few times over the default 1 MiB cap.
pub const DRAIN_BYTES: usize = 8 * 1024 * 1024;
/// The longest a body left over is read for before answering.
pub const DRAIN_TIME: Duration = Duration::from_secs(2);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The most bodies left over that are read at once, over the process: past
/// it an early answer goes out at once (HTTP/1.1 with `Connection: close`),
/// so that a flood of requests refused before their bodies (20,000 h2c
/// streams declaring 1 MB each) does not hold an answer and a stream each
/// for [`DRAIN_TIME`].
pub const DRAIN_AT_ONCE: usize = 256;

static DRAINING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(DRAIN_AT_ONCE);

/// Where a body dropped unfinished is put, for [`drain`].
pub(super) type Slot<B> = Arc<Mutex<Option<B>>>;

/// `inner`, handed to `slot` when dropped before its end.
pub(super) struct Leftover<B: Body + Unpin> {
    inner: Option<B>,
    slot: Slot<B>,
    done: bool,
}

impl<B: Body + Unpin> Leftover<B> {
    pub(super) fn new(inner: B, slot: Slot<B>) -> Self {
        Leftover {
            inner: Some(inner),
            slot,
            done: false,
        }
    }
}

impl<B> Body for Leftover<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let r = Pin::new(inner).poll_frame(cx);
        if matches!(r, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.done = true;
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.as_ref().is_none_or(B::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), B::size_hint)
    }
}

impl<B: Body + Unpin> Drop for Leftover<B> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(inner) = self.inner.take()
            && !inner.is_end_stream()
            && let Ok(mut slot) = self.slot.lock()
        {
            *slot = Some(inner);
        }
    }
}

/// [`drain`], if fewer than [`DRAIN_AT_ONCE`] bodies are being drained;
/// `false` (not reusable) at once otherwise.
pub(crate) async fn drain_if_room<B>(body: B) -> bool
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    match DRAINING.try_acquire() {
        Ok(_draining) => drain(body).await,
        Err(_) => false,
    }
}

/// Reads `body` to its end and throws it away, within [`DRAIN_BYTES`] and
/// [`DRAIN_TIME`]; whether it got to the end (the connection can then be
/// reused).
pub(super) async fn drain<B>(mut body: B) -> bool
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let read = async {
        let mut n = 0usize;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                return false;
            };
            if let Some(d) = frame.data_ref() {
                n += d.len();
                if n > DRAIN_BYTES {
                    return false;
                }
            }
        }
        true
    };
    tokio::time::timeout(DRAIN_TIME, read)
        .await
        .unwrap_or(false)
}

/// For a tonic listener, what the REST listeners' connection service does
/// (see `super::tracked`): a call answered before its request body was
/// read (an unknown method, a refusal) reads the rest first, within
/// [`DRAIN_BYTES`] and [`DRAIN_TIME`]; past that, an HTTP/1.1 answer
/// (gRPC-web) says `Connection: close`. Over HTTP/2 the read keeps the
/// connection's flow-control window open for the calls after it.
#[derive(Debug, Clone, Copy, Default)]
pub struct EarlyAnswerLayer;

impl<S> tower::Layer<S> for EarlyAnswerLayer {
    type Service = EarlyAnswer<S>;
    fn layer(&self, inner: S) -> EarlyAnswer<S> {
        EarlyAnswer { inner }
    }
}

/// See [`EarlyAnswerLayer`].
#[derive(Debug, Clone)]
pub struct EarlyAnswer<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S, ResBody> tower::Service<axum::http::Request<tonic::body::Body>> for EarlyAnswer<S>
where
    S: tower::Service<
            axum::http::Request<tonic::body::Body>,
            Response = axum::http::Response<ResBody>,
        >,
    S::Future: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = axum::http::Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: axum::http::Request<tonic::body::Body>) -> Self::Future {
        let h1 = req.version() <= axum::http::Version::HTTP_11;
        let slot: Slot<tonic::body::Body> = Arc::default();
        let req = req.map(|b| tonic::body::Body::new(Leftover::new(b, slot.clone())));
        let answer = self.inner.call(req);
        Box::pin(async move {
            let mut res = answer.await?;
            let unread = slot.lock().ok().and_then(|mut s| s.take());
            let reusable = match unread {
                None => true,
                Some(body) => drain_if_room(body).await,
            };
            if h1 && !reusable {
                res.headers_mut().insert(
                    axum::http::header::CONNECTION,
                    axum::http::HeaderValue::from_static("close"),
                );
            }
            Ok(res)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(n: usize) -> http_body_util::Full<Bytes> {
        http_body_util::Full::new(Bytes::from(vec![0u8; n]))
    }

    #[tokio::test]
    async fn a_body_is_drained_to_its_end_within_the_bound_and_no_further() {
        assert!(drain(body(DRAIN_BYTES)).await);
        assert!(!drain(body(DRAIN_BYTES + 1)).await);
    }

    #[tokio::test]
    async fn a_body_dropped_before_its_end_is_left_for_the_drain_and_a_finished_one_is_not() {
        let slot: Slot<http_body_util::Full<Bytes>> = Arc::default();
        drop(Leftover::new(body(10), slot.clone()));
        assert!(slot.lock().unwrap().take().is_some());
        let mut read = Leftover::new(body(10), slot.clone());
        while read.frame().await.is_some() {}
        drop(read);
        assert!(slot.lock().unwrap().is_none());
    }
}
