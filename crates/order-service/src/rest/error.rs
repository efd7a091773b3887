//! Errors of the REST boundary, each mapped once to a status and a JSON body
//! that names the problem. 5xx causes are logged here and not returned.

use axum::extract::rejection::QueryRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use negotiate::{WireError, error_response};

use crate::service::AppError;

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

fn status(e: &AppError) -> StatusCode {
    match e {
        AppError::Invalid(_) => StatusCode::BAD_REQUEST,
        AppError::NotFound(_) => StatusCode::NOT_FOUND,
        AppError::KeyReused(_) => StatusCode::UNPROCESSABLE_ENTITY,
        AppError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        AppError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        match self {
            RestError::App(e) => {
                e.log();
                error_response(
                    status(&e),
                    e.kind(),
                    e.to_string(),
                    e.field().map(str::to_owned),
                )
            }
            RestError::Wire(w) => w.into_response(),
        }
    }
}
