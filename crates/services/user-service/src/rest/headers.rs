//! The headers user-service adds to an answer that fetched orders: which
//! transport, and what the round trip to order-service cost.
//!
//! A leaf: the routes and the error mapping both import it.

use axum::http::HeaderName;

/// The transport that fetched the orders (also a request header choosing it).
pub const X_VIA: HeaderName = HeaderName::from_static("x-via");
/// The round trip to order-service in microseconds, measured inside user-service.
pub const X_UPSTREAM_MICROS: HeaderName = HeaderName::from_static("x-upstream-micros");
/// Where the round trip went (see [`crate::upstream::parts`]), when recorded.
pub const X_UPSTREAM_PARTS: HeaderName = HeaderName::from_static("x-upstream-parts");
/// The calls to order-service one answer took.
pub const X_UPSTREAM_CALLS: HeaderName = HeaderName::from_static("x-upstream-calls");
