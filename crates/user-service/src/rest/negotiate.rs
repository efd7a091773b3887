//! Content negotiation, as order-service does it: every route answers
//! `application/json` unless `Accept` asks for `application/x-protobuf`;
//! request bodies say which they are in `Content-Type`.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::RestError;

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
    pub fn accepted(headers: &HeaderMap) -> Result<Self, RestError> {
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

    /// The answer in this format: `json` or `proto` of the same message.
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
            Format::Json => match serde_json::to_vec(&json()) {
                Ok(bytes) => (
                    status,
                    [(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    )],
                    bytes,
                )
                    .into_response(),
                Err(e) => {
                    RestError::internal(anyhow::Error::new(e).context("encoding a JSON answer"))
                        .into_response()
                }
            },
            Format::Proto => (
                status,
                [(header::CONTENT_TYPE, HeaderValue::from_static(PROTOBUF))],
                proto().encode_to_vec(),
            )
                .into_response(),
        }
    }
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
        assert_eq!(
            Format::accepted(&headers(
                header::ACCEPT,
                "application/x-protobuf, application/json;q=0.5"
            ))
            .unwrap(),
            Format::Proto
        );
        assert_eq!(
            Format::accepted(&headers(header::ACCEPT, "*/*")).unwrap(),
            Format::Json
        );
        assert!(Format::accepted(&headers(header::ACCEPT, "text/html")).is_err());
        assert!(Format::content_type(&headers(header::CONTENT_TYPE, "text/plain")).is_err());
    }
}
