//! The HTTP/3 listener's one service: a gRPC call (`content-type:
//! application/grpc…`, gRPC-web included) goes to the gRPC listener's
//! calls, anything else to the REST router (REST and Connect), so one QUIC
//! port serves every API the two TCP ports serve. Connect and gRPC share
//! method paths; the content type is what tells them apart, as it is for
//! a client.

use std::convert::Infallible;

use futures::FutureExt as _;
use tracing::Instrument as _;

use crate::grpc::H3Calls;

/// Whether a request is a gRPC (or gRPC-web) call.
fn is_grpc(request: &http::Request<axum::body::Body>) -> bool {
    request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

/// The dispatching service.
pub fn service(
    rest: axum::Router,
    grpc: H3Calls,
) -> impl tower::Service<
    http::Request<axum::body::Body>,
    Response = http::Response<axum::body::Body>,
    Error = Infallible,
    Future = impl Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |request: http::Request<axum::body::Body>| {
        if is_grpc(&request) {
            // The call's span, as the TCP listener's `trace_fn` makes it
            // (its protocol version says 3).
            let span = telemetry::spans::grpc_server(&request);
            // tonic-web answers 400 to a gRPC call on anything but HTTP/2
            // (gRPC's own transport until gRPC over HTTP/3): HTTP/3 is
            // HTTP/2's semantics over QUIC, so the layers see HTTP/2.
            let mut request = request;
            *request.version_mut() = http::Version::HTTP_2;
            grpc.clone()
                .call(request.map(tonic::body::Body::new))
                .instrument(span)
                .map(|answer| Ok(answer.map(axum::body::Body::new)))
                .boxed()
        } else {
            let rest = rest.clone();
            async move { tower::ServiceExt::oneshot(rest, request).await }.boxed()
        }
    })
}
