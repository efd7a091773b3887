//! Errors of the REST boundary, each mapped once to a status and an RFC 9457
//! problem body that names the problem (see `service_kit::problem`). The causes
//! of 5xx answers are logged here and not returned.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use service_kit::negotiate::WireError;
use service_kit::problem::{self, ProblemType};

use super::headers::{X_UPSTREAM_MICROS, X_VIA};
use crate::service::AppError;
use crate::upstream::UpstreamError;

/// A username already registered.
pub const ALREADY_EXISTS: ProblemType = ProblemType {
    kind: "already_exists",
    title: "Already exists",
    about: "The username is taken: `field` is `username`. Choose another one.",
};

/// order-service did not answer within the upstream timeout.
pub const UPSTREAM_TIMEOUT: ProblemType = ProblemType {
    kind: "upstream_timeout",
    title: "Upstream timeout",
    about: "order-service did not answer within the upstream timeout (USER_UPSTREAM_TIMEOUT_MS). \
            The x-via and x-upstream-micros headers say over which transport and after how long.",
};

/// order-service could not be reached, or said it was unavailable.
pub const UPSTREAM_UNAVAILABLE: ProblemType = ProblemType {
    kind: "upstream_unavailable",
    title: "Upstream unavailable",
    about: "order-service could not be reached, or answered that it is unavailable or \
            overloaded. Retry later.",
};

/// order-service answered with something that could not be used.
pub const BAD_UPSTREAM_ANSWER: ProblemType = ProblemType {
    kind: "bad_upstream_answer",
    title: "Bad upstream answer",
    about: "order-service refused the call or gave an answer that could not be decoded; \
            `detail` quotes what it said.",
};

/// The problem types of this service beyond `service_kit::problem::COMMON`,
/// described at `/problems/<kind>`.
pub const PROBLEMS: &[ProblemType] = &[
    ALREADY_EXISTS,
    UPSTREAM_TIMEOUT,
    UPSTREAM_UNAVAILABLE,
    BAD_UPSTREAM_ANSWER,
];

/// Everything a REST handler can fail with: the service's own errors, and
/// what is wrong with the request on the wire.
#[derive(Debug, thiserror::Error)]
pub enum RestError {
    #[error(transparent)]
    App(#[from] AppError),
    #[error(transparent)]
    Wire(#[from] WireError),
}

fn status(e: &AppError) -> (StatusCode, &'static ProblemType) {
    match e {
        AppError::Invalid(_) | AppError::UnknownTransport(_) => {
            (StatusCode::BAD_REQUEST, &problem::INVALID_ARGUMENT)
        }
        AppError::NotFound(_) => (StatusCode::NOT_FOUND, &problem::NOT_FOUND),
        AppError::UsernameTaken(_) => (StatusCode::CONFLICT, &ALREADY_EXISTS),
        AppError::Upstream { error, .. } => match error {
            UpstreamError::Timeout(_) => (StatusCode::GATEWAY_TIMEOUT, &UPSTREAM_TIMEOUT),
            UpstreamError::Unavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, &UPSTREAM_UNAVAILABLE)
            }
            UpstreamError::Rejected { .. } | UpstreamError::Protocol(_) => {
                (StatusCode::BAD_GATEWAY, &BAD_UPSTREAM_ANSWER)
            }
        },
        AppError::StoreUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, &problem::UNAVAILABLE),
        AppError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, &problem::INTERNAL),
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let e = match self {
            RestError::Wire(w) => return w.into_response(),
            RestError::App(e) => e,
        };
        e.log();
        let detail = match &e {
            // The detail is in the log, not in the answer.
            AppError::Internal(_) => "internal error".to_owned(),
            other => other.to_string(),
        };
        let (status, ty) = status(&e);
        let mut resp = ty.response(status, detail, e.field().map(str::to_owned));
        // A failed upstream call still reports what it cost, so that a load
        // test records the time of timeouts too.
        if let AppError::Upstream { via, elapsed, .. } = &e {
            let h = resp.headers_mut();
            h.insert(X_VIA, HeaderValue::from_static(via.name()));
            h.insert(
                X_UPSTREAM_MICROS,
                HeaderValue::from(elapsed.as_micros() as u64),
            );
        }
        resp
    }
}
