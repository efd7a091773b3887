//! W3C trace context across every transport.
//!
//! One trace must run from k6 through user-service to order-service and
//! Postgres whatever the transport: HTTP headers for REST, gRPC metadata for
//! unary and streaming calls, and a string map inside each message where one
//! stream or one TCP connection carries many calls (bidi lookups, raw-TCP
//! frames), since there the call has no headers of its own.

use std::collections::HashMap;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Installs the W3C propagator as the global one. [`crate::init`] calls it.
pub fn install() {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
}

struct HeaderInjector<'a>(&'a mut http::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(k, v);
        }
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct MapCarrier<'a>(&'a mut HashMap<String, String>);

impl Injector for MapCarrier<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), value);
    }
}

struct MapExtractor<'a>(&'a HashMap<String, String>);

impl Extractor for MapExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

fn current() -> opentelemetry::Context {
    tracing::Span::current().context()
}

/// Adds the current span's `traceparent` (and `tracestate`) to HTTP headers.
pub fn inject_headers(headers: &mut http::HeaderMap) {
    let cx = current();
    if cx.span().span_context().is_valid() {
        opentelemetry::global::get_text_map_propagator(|p| {
            p.inject_context(&cx, &mut HeaderInjector(headers));
        });
    }
}

/// Adds the current span's trace context to gRPC metadata.
pub fn inject_metadata(metadata: &mut tonic::metadata::MetadataMap) {
    let mut headers = http::HeaderMap::new();
    inject_headers(&mut headers);
    for (k, v) in &headers {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::MetadataKey::from_bytes(k.as_str().as_bytes()),
            tonic::metadata::MetadataValue::try_from(v.as_bytes()),
        ) {
            metadata.insert(k, v);
        }
    }
}

/// The current span's trace context as a string map, for a message.
pub fn context_map() -> HashMap<String, String> {
    let mut map = HashMap::new();
    let cx = current();
    if cx.span().span_context().is_valid() {
        opentelemetry::global::get_text_map_propagator(|p| {
            p.inject_context(&cx, &mut MapCarrier(&mut map));
        });
    }
    map
}

/// Makes `span` a child of the remote span named in HTTP headers, if any.
pub fn set_parent_from_headers(span: &tracing::Span, headers: &http::HeaderMap) {
    let cx = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// Makes `span` a child of the remote span named in a message's map, if any.
pub fn set_parent_from_map(span: &tracing::Span, map: &HashMap<String, String>) {
    let cx = TraceContextPropagator::new().extract(&MapExtractor(map));
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}
