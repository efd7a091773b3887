//! Errors of the REST boundary, each mapped once to a status and a JSON
//! `ErrorJson` body that names the problem. The causes of 5xx answers are
//! logged here and not returned.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use negotiate::{WireError, error_response};

use crate::service::AppError;
use crate::upstream::UpstreamError;

/// Everything a REST handler can fail with: the service's own errors, and
/// what is wrong with the request on the wire.
#[derive(Debug, thiserror::Error)]
pub enum RestError {
    #[error(transparent)]
    App(#[from] AppError),
    #[error(transparent)]
    Wire(#[from] WireError),
}

fn status(e: &AppError) -> StatusCode {
    match e {
        AppError::Invalid(_) | AppError::UnknownTransport(_) => StatusCode::BAD_REQUEST,
        AppError::NotFound(_) => StatusCode::NOT_FOUND,
        AppError::UsernameTaken(_) => StatusCode::CONFLICT,
        AppError::Upstream { error, .. } => match error {
            UpstreamError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            UpstreamError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            UpstreamError::Rejected { .. } | UpstreamError::Protocol(_) => StatusCode::BAD_GATEWAY,
        },
        AppError::StoreUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        AppError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let e = match self {
            RestError::Wire(w) => return w.into_response(),
            RestError::App(e) => e,
        };
        e.log();
        let message = match &e {
            // The detail is in the log, not in the answer.
            AppError::Internal(_) => "internal error".to_owned(),
            other => other.to_string(),
        };
        let mut resp = error_response(status(&e), e.kind(), message, e.field().map(str::to_owned));
        // A failed upstream call still reports what it cost, so that a load
        // test records the time of timeouts too.
        if let AppError::Upstream { via, elapsed, .. } = &e {
            let h = resp.headers_mut();
            h.insert(super::X_VIA, HeaderValue::from_static(via.name()));
            h.insert(
                super::X_UPSTREAM_MICROS,
                HeaderValue::from(elapsed.as_micros() as u64),
            );
        }
        resp
    }
}
