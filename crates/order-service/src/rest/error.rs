//! Errors of the REST boundary, each mapped once to a status and a JSON body
//! that names the problem. 5xx causes are logged here and not returned.

use axum::extract::rejection::QueryRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use model::json::ErrorJson;

use crate::service::AppError;

/// Everything a REST handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum RestError {
    #[error(transparent)]
    App(#[from] AppError),
    #[error("{0}")]
    BadBody(String),
    #[error("the query string is invalid: {0}")]
    BadQuery(String),
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

impl From<QueryRejection> for RestError {
    fn from(r: QueryRejection) -> Self {
        RestError::BadQuery(r.body_text())
    }
}

impl RestError {
    fn status(&self) -> StatusCode {
        match self {
            RestError::App(e) => match e {
                AppError::Invalid(_) => StatusCode::BAD_REQUEST,
                AppError::NotFound(_) => StatusCode::NOT_FOUND,
                AppError::KeyReused(_) => StatusCode::UNPROCESSABLE_ENTITY,
                AppError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                AppError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            },
            RestError::BadBody(_) | RestError::BadQuery(_) => StatusCode::BAD_REQUEST,
            RestError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            RestError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            RestError::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            RestError::NoRoute(_) => StatusCode::NOT_FOUND,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            RestError::App(e) => e.kind(),
            RestError::BadBody(_) | RestError::BadQuery(_) => "invalid_argument",
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
        let body = ErrorJson {
            error: self.kind().to_owned(),
            message: self.to_string(),
            field: match &self {
                RestError::App(e) => e.field().map(str::to_owned),
                RestError::BadBody(_) | RestError::TooLarge(_) => Some("body".to_owned()),
                _ => None,
            },
        };
        (self.status(), axum::Json(body)).into_response()
    }
}
