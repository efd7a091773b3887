//! Errors of the REST boundary, each mapped once to a status and an RFC 9457
//! problem body that names the problem (see `service_kit::problem`). 5xx
//! causes are logged here and not returned.

use axum::extract::rejection::QueryRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use service_kit::negotiate::WireError;
use service_kit::problem::{self, ProblemType};

use crate::service::AppError;

/// An idempotency key sent again with another order.
pub const IDEMPOTENCY_KEY_REUSED: ProblemType = ProblemType {
    kind: "idempotency_key_reused",
    title: "Idempotency key reused",
    about: "The Idempotency-Key was first sent with a different order. A retry must send the \
            same body as the first try; a new order needs a new key.",
};

/// The problem types of this service beyond `service_kit::problem::COMMON`,
/// described at `/problems/<kind>`.
pub const PROBLEMS: &[ProblemType] = &[
    IDEMPOTENCY_KEY_REUSED,
    service_kit::problem::DEADLINE_EXCEEDED,
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

impl From<QueryRejection> for RestError {
    fn from(r: QueryRejection) -> Self {
        RestError::Wire(r.into())
    }
}

fn status(e: &AppError) -> (StatusCode, &'static ProblemType) {
    match e {
        AppError::Invalid(_) => (StatusCode::BAD_REQUEST, &problem::INVALID_ARGUMENT),
        AppError::NotFound(_) => (StatusCode::NOT_FOUND, &problem::NOT_FOUND),
        AppError::KeyReused(_) => (StatusCode::UNPROCESSABLE_ENTITY, &IDEMPOTENCY_KEY_REUSED),
        AppError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, &problem::UNAVAILABLE),
        AppError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, &problem::INTERNAL),
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        match self {
            RestError::App(e) => {
                e.log();
                let (status, ty) = status(&e);
                ty.response(status, e.to_string(), e.field().map(str::to_owned))
            }
            RestError::Wire(w) => w.into_response(),
        }
    }
}
