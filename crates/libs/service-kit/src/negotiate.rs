//! Content negotiation: JSON or protobuf over axum.
//!
//! Every route answers `application/json` unless the `Accept` header asks for
//! `application/x-protobuf`; request bodies say which they are in
//! `Content-Type`. A body is read only up to a limit: a `Content-Length` over
//! it is refused before a byte is read, and a streamed body is cut off there.
//! What can go wrong at this level, before a service's own logic runs, is a
//! [`WireError`], answered with the status and the RFC 9457 problem body
//! every error gets (see [`crate::problem`]).

use crate::{deadline, problem};
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body_util::BodyExt as _;

/// The media type of protobuf bodies.
pub const PROTOBUF: &str = "application/x-protobuf";

/// A body format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Proto,
}

fn media(m: &str) -> &str {
    m.split(';').next().unwrap_or("").trim()
}

fn is_proto(m: &str) -> bool {
    let m = media(m);
    m.eq_ignore_ascii_case(PROTOBUF) || m.eq_ignore_ascii_case("application/protobuf")
}

fn is_json(m: &str) -> bool {
    let m = media(m);
    m.eq_ignore_ascii_case("application/json")
        || m == "*/*"
        || m.eq_ignore_ascii_case("application/*")
}

impl Format {
    /// What the caller accepts: protobuf if `Accept` names it; JSON if it
    /// names JSON, `*/*` or nothing; 406 if it names only other types.
    pub fn accepted(headers: &HeaderMap) -> Result<Self, WireError> {
        let accept = headers
            .get(header::ACCEPT)
            .map(|v| v.to_str().unwrap_or("?"))
            .unwrap_or("");
        if accept.trim().is_empty() {
            Ok(Format::Json)
        } else if accept.split(',').any(is_proto) {
            Ok(Format::Proto)
        } else if accept.split(',').any(is_json) {
            Ok(Format::Json)
        } else {
            Err(WireError::NotAcceptable(accept.to_owned()))
        }
    }

    /// The format of the request body; no `Content-Type` means JSON.
    pub fn content_type(headers: &HeaderMap) -> Result<Self, WireError> {
        match headers
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap_or("?"))
        {
            None => Ok(Format::Json),
            Some(ct) if is_proto(ct) => Ok(Format::Proto),
            Some(ct) if is_json(ct) => Ok(Format::Json),
            Some(ct) => Err(WireError::UnsupportedMediaType(ct.to_owned())),
        }
    }

    /// A JSON answer, encoded in a span of its own (a 10,000-order body is
    /// real work).
    pub fn json<T: serde::Serialize>(self, status: StatusCode, body: &T) -> Response {
        let span = tracing::info_span!(target: telemetry::CODEC, "encode", format = "json", bytes = tracing::field::Empty);
        match span.in_scope(|| serde_json::to_vec(body)) {
            Ok(bytes) => {
                span.record("bytes", bytes.len());
                (
                    status,
                    [(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    )],
                    bytes,
                )
                    .into_response()
            }
            Err(e) => {
                tracing::error!(error = %e, "encoding a JSON answer failed");
                problem::INTERNAL.response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error".to_owned(),
                    None,
                )
            }
        }
    }

    /// A protobuf answer.
    pub fn proto<M: prost::Message>(self, status: StatusCode, body: &M) -> Response {
        let bytes = tracing::info_span!(target: telemetry::CODEC, "encode", format = "protobuf", bytes = body.encoded_len())
            .in_scope(|| body.encode_to_vec());
        (
            status,
            [(header::CONTENT_TYPE, HeaderValue::from_static(PROTOBUF))],
            bytes,
        )
            .into_response()
    }

    /// The answer in this format: `json` or `proto` of the same message,
    /// building only the one that is sent.
    pub fn respond<J, P>(
        self,
        status: StatusCode,
        json: impl FnOnce() -> J,
        proto: impl FnOnce() -> P,
    ) -> Response
    where
        J: serde::Serialize,
        P: prost::Message,
    {
        match self {
            Format::Json => self.json(status, &json()),
            Format::Proto => self.proto(status, &proto()),
        }
    }
}

/// Reads a request body of at most `max` bytes.
pub async fn read_body(headers: &HeaderMap, body: Body, max: usize) -> Result<Bytes, WireError> {
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > max as u64) {
        return Err(WireError::TooLarge(max));
    }
    match http_body_util::Limited::new(body, max).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(WireError::TooLarge(max)),
        Err(e) if deadline::timed_out(e.as_ref()) => Err(WireError::BodyTimeout),
        Err(e) => Err(WireError::BadBody(format!(
            "the body could not be read: {e}"
        ))),
    }
}

/// What can be wrong with a request before the service's own logic runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("{0}")]
    BadBody(String),
    #[error("the query string is invalid: {0}")]
    BadQuery(String),
    #[error("the path is invalid: {0}")]
    BadPath(String),
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
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("the request body did not arrive within the body-read timeout")]
    BodyTimeout,
}

impl From<QueryRejection> for WireError {
    fn from(r: QueryRejection) -> Self {
        WireError::BadQuery(r.body_text())
    }
}

/// A path segment axum could not extract (not UTF-8 once percent-decoded):
/// the problem body every error gets, rather than axum's plain text.
impl From<PathRejection> for WireError {
    fn from(r: PathRejection) -> Self {
        WireError::BadPath(r.body_text())
    }
}

impl WireError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            WireError::BadBody(_) | WireError::BadQuery(_) | WireError::BadPath(_) => {
                StatusCode::BAD_REQUEST
            }
            WireError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            WireError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            WireError::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            WireError::NoRoute(_) => StatusCode::NOT_FOUND,
            WireError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            WireError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
        }
    }

    /// The problem type of the answer.
    pub fn problem_type(&self) -> &'static problem::ProblemType {
        match self {
            WireError::BadBody(_) | WireError::BadQuery(_) | WireError::BadPath(_) => {
                &problem::INVALID_ARGUMENT
            }
            WireError::TooLarge(_) => &problem::PAYLOAD_TOO_LARGE,
            WireError::UnsupportedMediaType(_) => &problem::UNSUPPORTED_MEDIA_TYPE,
            WireError::NotAcceptable(_) => &problem::NOT_ACCEPTABLE,
            WireError::NoRoute(_) => &problem::NOT_FOUND,
            WireError::MethodNotAllowed(_) => &problem::METHOD_NOT_ALLOWED,
            WireError::BodyTimeout => &problem::REQUEST_TIMEOUT,
        }
    }

    /// The request field at fault, when there is one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            WireError::BadBody(_) | WireError::TooLarge(_) | WireError::BodyTimeout => Some("body"),
            _ => None,
        }
    }
}

impl IntoResponse for WireError {
    fn into_response(self) -> Response {
        self.problem_type().response(
            self.status(),
            self.to_string(),
            self.field().map(str::to_owned),
        )
    }
}

/// The answer to a method a route does not answer (axum adds the `Allow`
/// header): `Router::method_not_allowed_fallback(service_kit::negotiate::method_not_allowed)`,
/// once every route is added.
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    WireError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: header::HeaderName, v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn protobuf_is_chosen_only_when_asked_for() {
        assert_eq!(Format::accepted(&HeaderMap::new()).unwrap(), Format::Json);
        let h = headers(
            header::ACCEPT,
            "application/json;q=0.5, application/x-protobuf",
        );
        assert_eq!(Format::accepted(&h).unwrap(), Format::Proto);
        assert_eq!(
            Format::accepted(&headers(header::ACCEPT, "*/*")).unwrap(),
            Format::Json
        );
        assert_eq!(
            Format::accepted(&headers(header::ACCEPT, "text/html")).unwrap_err(),
            WireError::NotAcceptable("text/html".into())
        );
    }

    #[test]
    fn a_body_type_that_is_neither_is_415() {
        let h = headers(header::CONTENT_TYPE, "text/xml");
        let e = Format::content_type(&h).unwrap_err();
        assert_eq!(e.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let h = headers(
            header::CONTENT_TYPE,
            "application/x-protobuf; charset=binary",
        );
        assert_eq!(Format::content_type(&h).unwrap(), Format::Proto);
    }

    #[tokio::test]
    async fn an_announced_length_over_the_limit_is_refused_unread() {
        let h = headers(header::CONTENT_LENGTH, "5000");
        let e = read_body(&h, Body::from("tiny"), 1000).await.unwrap_err();
        assert_eq!(e, WireError::TooLarge(1000));
        let e = read_body(&HeaderMap::new(), Body::from(vec![0u8; 2000]), 1000)
            .await
            .unwrap_err();
        assert_eq!(e, WireError::TooLarge(1000));
        let ok = read_body(&HeaderMap::new(), Body::from("tiny"), 1000)
            .await
            .unwrap();
        assert_eq!(&ok[..], b"tiny");
    }
}
