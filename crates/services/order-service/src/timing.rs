//! order-service's own account of where an answer's time went, when asked
//! (`ORDER_SERVER_TIMING`): the store, the encoding, and the total, each on
//! its own clock.
//!
//! - **total** is order-service's own time on the answer, from the request
//!   read (its arrival at the router) to the encoded answer handed to the
//!   server below: for a REST or Connect answer, whose body is encoded
//!   before its headers go, until the response; for a gRPC call, whose
//!   messages tonic encodes as hyper asks for them, until the response plus
//!   the time spent producing each of its body's frames. The waits between
//!   those frames, while hyper sends the last one (flow control, a full
//!   socket), are the wire's, not order-service's.
//! - **store** is the time spent in the store's calls.
//! - **encode** runs from the store's answer to the encoded answer:
//!   converting the store's orders to the wire's types and serializing them;
//!   for gRPC, tonic's serialization too, timed where hyper polls the body.
//!   On a bidi stream, a lookup's answer is serialized when hyper polls the
//!   stream for it, so its total runs to that moment.
//!
//! Over HTTP they travel in a `Server-Timing` header (W3C; durations in ms),
//! over gRPC in a `server-timing` trailer of the same form, and on a bidi or
//! raw-TCP lookup in the answer's `timing` field (see `proto::timing`).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::HeaderValue;
use http_body::{Body, Frame};
use proto::timing::clock_nanos;

/// The parts of one answer so far.
#[derive(Debug, Default)]
pub struct Parts {
    store_nanos: AtomicU64,
    /// [`clock_nanos`] at the store's last answer; 0 before it.
    store_done_at: AtomicU64,
}

tokio::task_local! {
    static PARTS: Arc<Parts>;
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Runs `f`, a store call, adding its time to the answer's parts when they
/// are being recorded.
pub async fn store<T>(f: impl Future<Output = T>) -> T {
    if PARTS.try_with(|_| ()).is_err() {
        return f.await;
    }
    let t0 = Instant::now();
    let out = f.await;
    let took = t0.elapsed();
    let _ = PARTS.try_with(|p| {
        p.store_nanos.fetch_add(nanos(took), Ordering::Relaxed);
        p.store_done_at.store(clock_nanos(), Ordering::Relaxed);
    });
    out
}

/// A `Server-Timing` value: each duration in ms, to the nanosecond.
pub fn header_value(store: Duration, encode: Duration, total: Duration) -> HeaderValue {
    let ms = |d: Duration| d.as_nanos() as f64 / 1e6;
    let v = format!(
        "store;dur={:.6}, encode;dur={:.6}, total;dur={:.6}",
        ms(store),
        ms(encode),
        ms(total)
    );
    // Digits, letters and punctuation only: always a valid header value.
    HeaderValue::from_str(&v).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The header's name.
pub const SERVER_TIMING: http::HeaderName = http::HeaderName::from_static("server-timing");

/// One answer's clock: started at the request's arrival.
struct Clock {
    started: Instant,
    parts: Arc<Parts>,
}

impl Clock {
    fn start() -> Self {
        Clock {
            started: Instant::now(),
            parts: Arc::new(Parts::default()),
        }
    }

    fn store(&self) -> Duration {
        Duration::from_nanos(self.parts.store_nanos.load(Ordering::Relaxed))
    }

    /// From the store's answer to now; zero if the store was not asked.
    fn encode_so_far(&self) -> Duration {
        match self.parts.store_done_at.load(Ordering::Relaxed) {
            0 => Duration::ZERO,
            at => Duration::from_nanos(clock_nanos().saturating_sub(at)),
        }
    }
}

/// axum middleware: times the request and adds `Server-Timing` to its
/// answer, whose body axum has already encoded.
pub async fn rest(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let clock = Clock::start();
    let mut res = PARTS.scope(clock.parts.clone(), next.run(req)).await;
    let value = header_value(
        clock.store(),
        clock.encode_so_far(),
        clock.started.elapsed(),
    );
    res.headers_mut().insert(SERVER_TIMING, value);
    res
}

/// The tower layer of the gRPC server: times each call and adds a
/// `server-timing` trailer when hyper takes the trailers.
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcTimingLayer;

impl<S> tower::Layer<S> for GrpcTimingLayer {
    type Service = GrpcTiming<S>;
    fn layer(&self, inner: S) -> Self::Service {
        GrpcTiming { inner }
    }
}

/// See [`GrpcTimingLayer`].
#[derive(Debug, Clone)]
pub struct GrpcTiming<S> {
    inner: S,
}

impl<S, B> tower::Service<http::Request<B>> for GrpcTiming<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let clock = Clock::start();
        let fut = PARTS.scope(clock.parts.clone(), self.inner.call(req));
        Box::pin(async move {
            let res = fut.await?;
            let encoded = clock.encode_so_far();
            let head = clock.started.elapsed();
            Ok(res.map(|body| {
                tonic::body::Body::new(TimedBody {
                    inner: body,
                    clock,
                    encoded,
                    head,
                    polled: Duration::ZERO,
                })
            }))
        })
    }
}

pin_project_lite::pin_project! {
    /// A gRPC body whose polls count as encoding, and whose trailers get
    /// the call's `server-timing`.
    struct TimedBody {
        #[pin]
        inner: tonic::body::Body,
        clock: Clock,
        // The encoding before the response (from the store's answer), the
        // time from the request read to the response, and the time spent
        // inside the body's polls (tonic encoding frames).
        encoded: Duration,
        head: Duration,
        polled: Duration,
    }
}

impl Body for TimedBody {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let t0 = Instant::now();
        let frame = this.inner.poll_frame(cx);
        *this.polled += t0.elapsed();
        match frame {
            Poll::Ready(Some(Ok(frame))) if frame.is_trailers() => {
                let mut trailers = frame.into_trailers().unwrap_or_default();
                trailers.insert(
                    SERVER_TIMING,
                    header_value(
                        this.clock.store(),
                        *this.encoded + *this.polled,
                        *this.head + *this.polled,
                    ),
                );
                Poll::Ready(Some(Ok(Frame::trailers(trailers))))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_gives_each_part_in_milliseconds() {
        let v = header_value(
            Duration::from_nanos(12_345),
            Duration::from_micros(2),
            Duration::from_millis(3),
        );
        assert_eq!(
            v.to_str().unwrap(),
            "store;dur=0.012345, encode;dur=0.002000, total;dur=3.000000"
        );
    }

    #[tokio::test]
    async fn store_time_is_added_only_while_parts_are_recorded() {
        let clock = Clock::start();
        store(tokio::time::sleep(Duration::from_millis(2))).await;
        assert_eq!(clock.store(), Duration::ZERO);
        PARTS
            .scope(clock.parts.clone(), async {
                store(tokio::time::sleep(Duration::from_millis(2))).await;
            })
            .await;
        assert!(clock.store() >= Duration::from_millis(2));
        assert!(clock.started.elapsed() >= clock.store());
    }
}
