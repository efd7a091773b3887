//! The service every connection runs: the router, wrapped once in
//! [`Tracked`].

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, Version, header};
use axum::response::Response;
use hyper_util::service::TowerToHyperService;

use super::activity::Activity;
use super::leftover;

/// The connection's service: counts requests in service in its
/// [`Activity`], gives each request's body `body_read` to arrive, marks
/// the requests of a TLS connection with [`tls::OverTls`], and once the
/// server is `closing`, ends each HTTP/1.x answer with `Connection: close`,
/// so that a keep-alive client opens its next request elsewhere rather than
/// on a connection about to close. An answer given before its request's
/// body was read waits until the rest is read (see [`super::leftover`]);
/// past the bound, an HTTP/1.1 one says `Connection: close`.
///
/// It wraps the router once, where an axum middleware would wrap each of its
/// routes and add a box and a clone to every request.
#[derive(Clone)]
pub(super) struct Tracked {
    pub(super) inner: TowerToHyperService<Router>,
    pub(super) closing: Arc<AtomicBool>,
    pub(super) activity: Arc<Activity>,
    pub(super) body_read: Duration,
    pub(super) over_tls: bool,
}

impl hyper::service::Service<axum::http::Request<hyper::body::Incoming>> for Tracked {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Response, std::convert::Infallible>> + Send>>;

    fn call(&self, req: axum::http::Request<hyper::body::Incoming>) -> Self::Future {
        self.activity.request_started();
        let h1 = req.version() <= Version::HTTP_11;
        // A client waiting for `100 Continue` sends no body unless asked:
        // reading one it never sends would only wait.
        let expects = req.headers().contains_key(header::EXPECT);
        let slot: leftover::Slot<_> = Arc::default();
        let body_read = self.body_read;
        let mut req = req.map(|b| {
            axum::body::Body::new(leftover::Leftover::new(
                crate::deadline::DeadlineBody::new(b, body_read),
                slot.clone(),
            ))
        });
        if self.over_tls {
            req.extensions_mut().insert(tls::OverTls);
        }
        let answer = hyper::service::Service::call(&self.inner, req);
        let activity = self.activity.clone();
        let closing = self.closing.clone();
        Box::pin(async move {
            let Ok(mut res) = answer.await;
            let unread = slot.lock().ok().and_then(|mut s| s.take());
            let reusable = match unread {
                None => true,
                Some(_) if expects => false,
                Some(body) => leftover::drain_if_room(body).await,
            };
            activity.request_answered();
            if h1 && (!reusable || closing.load(Ordering::SeqCst)) {
                res.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(res)
        })
    }
}
