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

/// The connection's service: counts requests in service in its
/// [`Activity`], gives each request's body `body_read` to arrive, marks
/// the requests of a TLS connection with [`tls::OverTls`], and once the
/// server is `closing`, ends each HTTP/1.x answer with `Connection: close`,
/// so that a keep-alive client opens its next request elsewhere rather than
/// on a connection about to close.
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
        let mut req = req
            .map(|b| axum::body::Body::new(crate::deadline::DeadlineBody::new(b, self.body_read)));
        if self.over_tls {
            req.extensions_mut().insert(tls::OverTls);
        }
        let h1 = req.version() <= Version::HTTP_11;
        let answer = hyper::service::Service::call(&self.inner, req);
        let activity = self.activity.clone();
        let closing = self.closing.clone();
        Box::pin(async move {
            let Ok(mut res) = answer.await;
            activity.request_answered();
            if h1 && closing.load(Ordering::SeqCst) {
                res.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(res)
        })
    }
}
