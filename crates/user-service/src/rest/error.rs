//! Errors of the REST boundary, each mapped once to a status and a JSON
//! [`ErrorJson`] body that names the problem. The causes of 5xx answers are
//! logged here and not returned.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use model::json::ErrorJson;

use crate::service::AppError;
use crate::upstream::UpstreamError;

/// Everything a REST handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum RestError {
    #[error(transparent)]
    App(#[from] AppError),
    #[error("{0}")]
    BadBody(String),
    #[error("the body is larger than the limit of {0} bytes")]
    TooLarge(usize),
    #[error("Content-Type {0:?} is not supported: send application/json or application/x-protobuf")]
    UnsupportedMediaType(String),
    #[error(
        "Accept {0:?} names no type this route serves: application/json or application/x-protobuf"
    )]
    NotAcceptable(String),
    #[error("no route for {0}")]
    NoRoute(String),
}

impl RestError {
    /// An unexpected failure: logged, answered as a bare 500.
    pub fn internal(e: anyhow::Error) -> Self {
        RestError::App(AppError::Internal(e))
    }

    fn status(&self) -> StatusCode {
        match self {
            RestError::App(e) => match e {
                AppError::Invalid(_) | AppError::UnknownTransport(_) => StatusCode::BAD_REQUEST,
                AppError::NotFound(_) => StatusCode::NOT_FOUND,
                AppError::UsernameTaken(_) => StatusCode::CONFLICT,
                AppError::Upstream { error, .. } => match error {
                    UpstreamError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
                    UpstreamError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                    UpstreamError::Rejected { .. } | UpstreamError::Protocol(_) => {
                        StatusCode::BAD_GATEWAY
                    }
                },
                AppError::StoreUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                AppError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            },
            RestError::BadBody(_) => StatusCode::BAD_REQUEST,
            RestError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            RestError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            RestError::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            RestError::NoRoute(_) => StatusCode::NOT_FOUND,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            RestError::App(e) => e.kind(),
            RestError::BadBody(_) => "invalid_argument",
            RestError::TooLarge(_) => "payload_too_large",
            RestError::UnsupportedMediaType(_) => "unsupported_media_type",
            RestError::NotAcceptable(_) => "not_acceptable",
            RestError::NoRoute(_) => "not_found",
        }
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        if let RestError::App(e) = &self {
            e.log();
        }
        let message = match &self {
            // The detail is in the log, not in the answer.
            RestError::App(AppError::Internal(_)) => "internal error".to_owned(),
            other => other.to_string(),
        };
        let body = ErrorJson {
            error: self.kind().to_owned(),
            message,
            field: match &self {
                RestError::App(e) => e.field().map(str::to_owned),
                RestError::BadBody(_) | RestError::TooLarge(_) => Some("body".to_owned()),
                _ => None,
            },
        };
        let mut resp = (self.status(), axum::Json(body)).into_response();
        // A failed upstream call still reports what it cost, so that a load
        // test records the time of timeouts too.
        if let RestError::App(AppError::Upstream { via, elapsed, .. }) = &self {
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
