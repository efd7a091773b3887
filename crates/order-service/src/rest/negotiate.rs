//! Content negotiation and bounded body reads.
//!
//! Every route answers `application/json` unless the `Accept` header asks for
//! `application/x-protobuf`; request bodies say which they are in
//! `Content-Type`. A body is read only up to the configured limit: a
//! `Content-Length` over it is refused before a byte is read.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::BodyExt as _;

use super::error::RestError;

/// The media type of protobuf bodies.
pub const PROTOBUF: &str = "application/x-protobuf";

/// A body format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Proto,
}

fn is_proto(media: &str) -> bool {
    let m = media.split(';').next().unwrap_or("").trim();
    m.eq_ignore_ascii_case(PROTOBUF) || m.eq_ignore_ascii_case("application/protobuf")
}

fn is_json(media: &str) -> bool {
    let m = media.split(';').next().unwrap_or("").trim();
    m.eq_ignore_ascii_case("application/json")
        || m == "*/*"
        || m.eq_ignore_ascii_case("application/*")
}

impl Format {
    /// The format the caller accepts: protobuf if `Accept` names it, JSON if
    /// it names JSON, `*/*` or nothing; 406 if it names only other types.
    pub fn accepted(headers: &HeaderMap) -> Result<Self, RestError> {
        let Some(accept) = headers.get(header::ACCEPT) else {
            return Ok(Format::Json);
        };
        let accept = accept.to_str().unwrap_or("");
        if accept.trim().is_empty() {
            return Ok(Format::Json);
        }
        if accept.split(',').any(is_proto) {
            Ok(Format::Proto)
        } else if accept.split(',').any(is_json) {
            Ok(Format::Json)
        } else {
            Err(RestError::NotAcceptable(accept.to_owned()))
        }
    }

    /// The format of the request body; no `Content-Type` means JSON.
    pub fn content_type(headers: &HeaderMap) -> Result<Self, RestError> {
        match headers
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap_or("?"))
        {
            None => Ok(Format::Json),
            Some(ct) if is_proto(ct) => Ok(Format::Proto),
            Some(ct) if is_json(ct) => Ok(Format::Json),
            Some(ct) => Err(RestError::UnsupportedMediaType(ct.to_owned())),
        }
    }

    /// A JSON response.
    pub fn json<T: serde::Serialize>(self, status: StatusCode, body: &T) -> Response {
        let span = tracing::info_span!("encode", format = "json", bytes = tracing::field::Empty);
        let encoded = span.in_scope(|| serde_json::to_vec(body));
        if let Ok(b) = &encoded {
            span.record("bytes", b.len());
        }
        match encoded {
            Ok(bytes) => (
                status,
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                bytes,
            )
                .into_response(),
            Err(e) => RestError::from(crate::service::AppError::Internal(
                anyhow::Error::new(e).context("encoding a JSON response"),
            ))
            .into_response(),
        }
    }

    /// A protobuf response.
    pub fn proto<M: prost::Message>(self, status: StatusCode, body: &M) -> Response {
        let bytes = tracing::info_span!("encode", format = "protobuf", bytes = body.encoded_len())
            .in_scope(|| body.encode_to_vec());
        (
            status,
            [(header::CONTENT_TYPE, HeaderValue::from_static(PROTOBUF))],
            bytes,
        )
            .into_response()
    }
}

/// Reads a request body of at most `max` bytes.
pub async fn read_body(headers: &HeaderMap, body: Body, max: usize) -> Result<Bytes, RestError> {
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > max as u64) {
        return Err(RestError::TooLarge(max));
    }
    match http_body_util::Limited::new(body, max).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(RestError::TooLarge(max)),
        Err(e) => Err(RestError::BadBody(format!(
            "the body could not be read: {e}"
        ))),
    }
}
