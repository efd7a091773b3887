//! Load shedding: at most N requests in service per listener, and the next one
//! is answered at once with an overload response instead of queueing.
//!
//! A queue without a bound is how a service falls over under twice the load it
//! can hold: every waiting request holds its connection, its buffers and, soon,
//! more memory than the machine has, and by the time it is served its caller
//! has given up. Refusing at once keeps memory bounded, tells the caller to back
//! off (503 / `RESOURCE_EXHAUSTED`), and the service is back to normal the
//! moment the load drops: there is no backlog to work through.
//!
//! [`ShedLayer`] is a tower layer over `http` services, so it serves axum
//! routers and tonic servers alike; what an overloaded request gets is the
//! caller's [`ShedLayer::new`] `reject` function. A permit is held until the
//! response's head is ready: a streamed body (a gRPC server stream) is bounded
//! by its own limits, not by this one. While a request's body is on its way,
//! its permit is given back after [`crate::body_gate::BODY_WAIT`] of silence
//! from the client and taken again when its bytes come (see
//! [`crate::body_gate`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::{HeaderValue, Request, Response, StatusCode, header};

/// The REST answer to a shed request: 503, `Retry-After: 1`, and the
/// problem body of every error, of type `overloaded`.
pub fn overloaded() -> axum::response::Response {
    let mut res = crate::problem::OVERLOADED.response(
        StatusCode::SERVICE_UNAVAILABLE,
        OVERLOADED.to_owned(),
        None,
    );
    res.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    res
}

pub use crate::body_gate::{Limiter, ShedCollector};

/// The message every refusal by the limit carries, on every surface.
pub const OVERLOADED: &str = "the service is at its limit of concurrent requests: retry later";

/// Limits requests in service to `max`; the rest get `reject()` at once.
#[derive(Clone)]
pub struct ShedLayer<R> {
    limiter: Limiter,
    reject: R,
    /// Path prefixes never shed (health checks, reflection), so that an
    /// overloaded instance is not also taken for a dead one.
    exempt: &'static [&'static str],
}

impl<R> std::fmt::Debug for ShedLayer<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShedLayer")
            .field("free", &self.limiter.available())
            .finish_non_exhaustive()
    }
}

impl<R> ShedLayer<R> {
    /// At most `max` requests in service at once (at least one).
    pub fn new(max: usize, reject: R) -> Self {
        ShedLayer {
            limiter: Limiter::new(max),
            reject,
            exempt: &[],
        }
    }

    /// Requests in service count against `limiter`, shared with the
    /// service's other listeners and streams.
    pub fn shared(limiter: &Limiter, reject: R) -> Self {
        ShedLayer {
            limiter: limiter.clone(),
            reject,
            exempt: &[],
        }
    }

    /// Requests whose path starts with one of `prefixes` are never shed.
    pub fn exempt(mut self, prefixes: &'static [&'static str]) -> Self {
        self.exempt = prefixes;
        self
    }
}

impl<S, R: Clone> tower::Layer<S> for ShedLayer<R> {
    type Service = Shed<S, R>;

    fn layer(&self, inner: S) -> Self::Service {
        Shed {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`ShedLayer`] makes.
#[derive(Clone)]
pub struct Shed<S, R> {
    inner: S,
    layer: ShedLayer<R>,
}

impl<S, R> std::fmt::Debug for Shed<S, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.layer.fmt(f)
    }
}

impl<S, R, B, RB> tower::Service<Request<B>> for Shed<S, R>
where
    B: crate::body_gate::GateBody,
    S: tower::Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    R: Fn() -> Response<RB> + Clone + Send + 'static,
    RB: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let path = req.uri().path();
        if self.layer.exempt.iter().any(|p| path.starts_with(p)) {
            return Box::pin(self.inner.call(req));
        }
        match self.layer.limiter.try_acquire() {
            Some(permit) => {
                // While the body comes, the slot is given back past
                // BODY_WAIT of silence and taken again when bytes come.
                let gate = crate::body_gate::Gate::new(self.layer.limiter.clone(), permit);
                let served = self.inner.call(req.map(|b| b.gated(&gate)));
                let reject = self.layer.reject.clone();
                Box::pin(async move {
                    let res = served.await;
                    if gate.finish() {
                        tracing::debug!("overloaded: shed while its body came");
                        return Ok(reject());
                    }
                    res
                })
            }
            None => {
                tracing::debug!(path, "overloaded: request shed");
                let res = (self.layer.reject)();
                Box::pin(async move { Ok(res) })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tower::{Layer as _, Service as _, ServiceExt as _};

    use std::sync::Arc;

    use tokio::sync::Semaphore;

    use super::*;

    #[tokio::test]
    async fn past_the_limit_a_request_is_rejected_at_once_and_served_again_after() {
        // Each request served waits for a permit the test hands out.
        let gate = Arc::new(Semaphore::new(0));
        let svc = tower::service_fn({
            let gate = gate.clone();
            move |_req: Request<()>| {
                let gate = gate.clone();
                async move {
                    gate.acquire().await.unwrap().forget();
                    Ok::<_, Infallible>(Response::new("served"))
                }
            }
        });
        let mut svc = ShedLayer::new(1, || Response::new("shed"))
            .exempt(&["/healthz"])
            .layer(svc);
        let req = |p: &str| Request::builder().uri(p).body(()).unwrap();
        let held = svc.ready().await.unwrap().call(req("/a"));
        let shed = svc.ready().await.unwrap().call(req("/b")).await.unwrap();
        assert_eq!(*shed.body(), "shed");
        let exempt = svc.ready().await.unwrap().call(req("/healthz"));
        gate.add_permits(2);
        let (held, exempt) = tokio::join!(held, exempt);
        assert_eq!(*held.unwrap().body(), "served");
        assert_eq!(*exempt.unwrap().body(), "served");
        let again = svc.ready().await.unwrap().call(req("/c"));
        gate.add_permits(1);
        assert_eq!(*again.await.unwrap().body(), "served");
        // One refusal, counted and shown on /metrics; the exempt request
        // and the ones served are not.
        let limiter = svc.layer.limiter.clone();
        assert_eq!(limiter.shed(), 1);
        let metrics = telemetry::metrics::RequestMetrics::new("x");
        metrics.add_collector(limiter.collector("order"));
        let mut text = String::new();
        metrics.render(&mut text);
        assert!(text.contains("order_shed_requests_total 1\n"), "{text}");
    }
}
