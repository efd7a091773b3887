//! Error answers as RFC 9457 problem details: `application/problem+json`,
//! whatever the request's `Accept` says (a protobuf client gets JSON for its
//! errors: there is no protobuf problem format, and an error must reach a
//! person intact).
//!
//! Every answer names its [`ProblemType`] twice: `type` is the URI reference
//! `/problems/<kind>`, and the extension member `error` is `<kind>` alone.
//! `error` is the machine-readable kind the API gave before it spoke
//! RFC 9457; it stays so that clients matching on it go on working, and it
//! is the simplest thing to switch on. The reference is relative: it
//! resolves against the request's URL to the service that answered, which
//! serves the type's description there ([`page`]), as RFC 9457 asks of a
//! type URI that can be dereferenced. The request field at fault, when there
//! is one, is the extension member `field`.

use axum::extract::Path;
use axum::extract::rejection::PathRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use model::json::Problem;

/// The media type of every error answer (RFC 9457).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The path under which each service describes its problem types.
pub const PREFIX: &str = "/problems/";

/// One type of problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProblemType {
    /// The stable machine-readable name: the `error` member, and the last
    /// segment of the `type` URI.
    pub kind: &'static str,
    /// The `title`: short, and the same for every problem of this type.
    pub title: &'static str,
    /// What the type means and what a caller can do: the page at its URI.
    pub about: &'static str,
}

impl ProblemType {
    /// The `type` member: `/problems/<kind>`.
    pub fn uri(&self) -> String {
        format!("{PREFIX}{}", self.kind)
    }

    /// The body of a problem of this type.
    pub fn body(&self, status: StatusCode, detail: String, field: Option<String>) -> Problem {
        Problem {
            type_uri: self.uri(),
            title: self.title.to_owned(),
            status: status.as_u16(),
            // Whatever a request held, its error stays small.
            detail: model::capped(detail),
            field: field.map(model::capped),
            error: self.kind.to_owned(),
        }
    }

    /// The answer: `status`, `application/problem+json`, and the body.
    pub fn response(&self, status: StatusCode, detail: String, field: Option<String>) -> Response {
        let body = self.body(status, detail, field);
        // A struct of strings and a number always serializes.
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        (
            status,
            [(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON))],
            bytes,
        )
            .into_response()
    }
}

/// A request field is malformed, missing or out of range.
pub const INVALID_ARGUMENT: ProblemType = ProblemType {
    kind: "invalid_argument",
    title: "Invalid argument",
    about: "A request field is malformed, missing or out of range. `field` names it \
            (`body` when the body as a whole could not be read or decoded) and `detail` \
            says what is wrong. Correct the request before sending it again.",
};

/// No such resource, or no such route.
pub const NOT_FOUND: ProblemType = ProblemType {
    kind: "not_found",
    title: "Not found",
    about: "The resource named in the path does not exist, or no route has this path. \
            `detail` names what was looked for.",
};

/// A body over the service's request cap.
pub const PAYLOAD_TOO_LARGE: ProblemType = ProblemType {
    kind: "payload_too_large",
    title: "Request body too large",
    about: "The request body is over the service's request cap; `detail` gives the cap in \
            bytes. A body announced larger is refused before a byte of it is read.",
};

/// A body that is neither JSON nor protobuf.
pub const UNSUPPORTED_MEDIA_TYPE: ProblemType = ProblemType {
    kind: "unsupported_media_type",
    title: "Unsupported media type",
    about: "The request's Content-Type is neither application/json nor \
            application/x-protobuf.",
};

/// An `Accept` header that names no type the route serves.
pub const NOT_ACCEPTABLE: ProblemType = ProblemType {
    kind: "not_acceptable",
    title: "Not acceptable",
    about: "The request's Accept header names neither application/json nor \
            application/x-protobuf. (Errors are application/problem+json whatever Accept says.)",
};

/// A body that did not arrive in time.
pub const REQUEST_TIMEOUT: ProblemType = ProblemType {
    kind: "request_timeout",
    title: "Request body timeout",
    about: "The request body did not arrive within the service's body-read timeout.",
};

/// The caller's deadline passed before the answer was ready.
pub const DEADLINE_EXCEEDED: ProblemType = ProblemType {
    kind: "deadline_exceeded",
    title: "Deadline exceeded",
    about: "The caller's deadline (its x-request-timeout-ms header, in milliseconds) passed \
            before the answer was ready: the service stopped the work and sent this instead. \
            A read may be retried with a new deadline.",
};

/// A method the route does not answer.
pub const METHOD_NOT_ALLOWED: ProblemType = ProblemType {
    kind: "method_not_allowed",
    title: "Method not allowed",
    about: "The route exists but does not answer this method; the Allow header lists the \
            methods it answers.",
};

/// The service's limit of work in service is reached.
pub const OVERLOADED: ProblemType = ProblemType {
    kind: "overloaded",
    title: "Overloaded",
    about: "The service is at its limit of requests in service and refused this one at once \
            rather than queue it. Retry after the Retry-After header's seconds.",
};

/// A dependency of the service (its database) does not answer.
pub const UNAVAILABLE: ProblemType = ProblemType {
    kind: "unavailable",
    title: "Service unavailable",
    about: "The service's database did not answer in time. The request had no effect; \
            retry later.",
};

/// An unexpected failure.
pub const INTERNAL: ProblemType = ProblemType {
    kind: "internal",
    title: "Internal error",
    about: "An unexpected failure. Its cause is in the service's log, not in the answer.",
};

/// The types both services can answer with.
pub const COMMON: &[ProblemType] = &[
    INVALID_ARGUMENT,
    NOT_FOUND,
    PAYLOAD_TOO_LARGE,
    UNSUPPORTED_MEDIA_TYPE,
    NOT_ACCEPTABLE,
    REQUEST_TIMEOUT,
    METHOD_NOT_ALLOWED,
    OVERLOADED,
    UNAVAILABLE,
    INTERNAL,
];

/// The description of the type `kind` (from `own`, a service's own types,
/// or [`COMMON`]) as plain text; a `not_found` problem for another kind.
pub fn page(own: &[ProblemType], kind: &str) -> Response {
    match own.iter().chain(COMMON).find(|t| t.kind == kind) {
        Some(t) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            )],
            format!("{}\n\n{}\n", t.title, t.about),
        )
            .into_response(),
        // As `WireError::NoRoute` answers it; this module sits below
        // `negotiate`, which builds its answers from these types.
        None => NOT_FOUND.response(
            StatusCode::NOT_FOUND,
            format!("no route for {PREFIX}{kind}"),
            None,
        ),
    }
}

/// The handler of `GET /problems/{kind}` for a service whose own types are
/// `own`.
pub fn route<S>(own: &'static [ProblemType]) -> axum::routing::MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    axum::routing::get(
        move |kind: Result<Path<String>, PathRejection>| async move {
            match kind {
                Ok(Path(kind)) => page(own, &kind),
                // As `WireError::BadPath` answers it.
                Err(r) => INVALID_ARGUMENT.response(
                    StatusCode::BAD_REQUEST,
                    format!("the path is invalid: {}", r.body_text()),
                    None,
                ),
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::negotiate::WireError;

    #[test]
    fn a_problem_names_its_type_twice_and_its_status_once() {
        let p = INVALID_ARGUMENT.body(
            StatusCode::BAD_REQUEST,
            "limit: \"ten\" is not a whole number".into(),
            Some("limit".into()),
        );
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "type": "/problems/invalid_argument",
                "title": "Invalid argument",
                "status": 400,
                "detail": "limit: \"ten\" is not a whole number",
                "field": "limit",
                "error": "invalid_argument",
            })
        );
        let v = serde_json::to_value(INTERNAL.body(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error".into(),
            None,
        ))
        .unwrap();
        assert!(v.get("field").is_none(), "{v}");
    }

    /// The answers made outside any handler: a shed request's, a wire
    /// error's.
    #[tokio::test]
    async fn a_shed_request_and_a_wire_error_get_problems_too() {
        use http_body_util::BodyExt as _;
        for (res, status, kind) in [
            (crate::shed::overloaded(), 503, "overloaded"),
            (
                WireError::MethodNotAllowed("PUT is not allowed on /x".into()).into_response(),
                405,
                "method_not_allowed",
            ),
            (
                WireError::TooLarge(10).into_response(),
                413,
                "payload_too_large",
            ),
        ] {
            assert_eq!(res.status(), status);
            assert_eq!(res.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
            if kind == "overloaded" {
                assert_eq!(res.headers()[header::RETRY_AFTER], "1");
            }
            let body = res.into_body().collect().await.unwrap().to_bytes();
            let p: Problem = serde_json::from_slice(&body).unwrap();
            assert_eq!((p.status, p.error.as_str()), (status, kind), "{p:?}");
            assert_eq!(p.type_uri, format!("/problems/{kind}"));
        }
    }

    #[test]
    fn every_common_kind_is_one_path_segment_and_named_once() {
        let mut kinds: Vec<_> = COMMON.iter().map(|t| t.kind).collect();
        assert!(
            kinds
                .iter()
                .all(|k| k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        );
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds.len(), COMMON.len());
    }
}
