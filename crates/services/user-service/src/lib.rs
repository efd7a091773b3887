//! user-service: users over REST and gRPC, and the switchable, measured
//! transport that fetches their orders from order-service.
//!
//! The fan-out hop from here to order-service is what the lab measures: one
//! outbound port ([`upstream::OrderSource`]), one adapter per transport of the
//! matrix, each with a real budget of TCP connections, each measured inside
//! this service (round-trip histogram, connections, bytes on the socket).
//!
//! # Layout
//!
//! One line per module, in an order the imports follow: a module imports
//! only those listed above it, and its own children (`tests/api/modules.rs`
//! holds the crate to this list, and to no import cycle).
//! - [`domain`]: `User`, `NewUser` (parsed at the edge), their JSON and protobuf forms.
//! - [`metrics`]: per-transport counters and histograms, rendered as Prometheus text.
//! - [`upstream`]: the outbound port, [`upstream::Upstreams`]: one adapter per transport.
//!   - [`upstream::port`]: `OrderSource`, `OrderQuery`, `UpstreamError`.
//!   - [`upstream::wire`]: the counted sockets every transport dials.
//!   - [`upstream::endpoints`]: where order-service is, TLS to it, one replica's endpoints.
//!   - [`upstream::parts`]: where one call's time went (`USER_UPSTREAM_BREAKDOWN`).
//!   - [`upstream::semconv`]: each call's client span, by the OpenTelemetry conventions.
//!   - [`upstream::shared`]: what several adapters share, importing none of them:
//!     - [`upstream::shared::exchange`]: one HTTP exchange with the REST port.
//!     - [`upstream::shared::h1`]: HTTP/1.1 pools, keep-alive or a connection per call.
//!     - [`upstream::shared::h2`]: N multiplexed HTTP/2 connections; hyper's client on them.
//!     - [`upstream::shared::pool`]: a REST pool, HTTP/1.1 or h2c.
//!     - [`upstream::shared::h2direct`]: the tuned twins' `h2` connections.
//!     - [`upstream::shared::h3`]: N HTTP/3 (QUIC) channels, counted as sockets are.
//!     - [`upstream::shared::codec`]: the gRPC twins' codec, decoding from one `Bytes`.
//!     - [`upstream::shared::rpc`]: gRPC channels, status mapping, resends, requests.
//!     - [`upstream::shared::mux`]: many lookups on one connection (bidi, raw TCP).
//!   - [`upstream::rest`]: h1-json, h1-json-close, h2c-json, h1-proto, h2c-proto(-tuned),
//!     h3-json, h3-proto.
//!   - [`upstream::connect`]: connect-h1-proto, connect-h2c-proto.
//!   - [`upstream::grpc`]: grpc, grpc-stream, grpc-v1 (and the batch calls).
//!   - [`upstream::grpc_h3`]: grpc-h3, gRPC over HTTP/3.
//!   - [`upstream::bidi`]: grpc-bidi, grpc-bidi-tuned.
//!   - [`upstream::tuned`]: grpc-tuned, grpc-stream-tuned; why the twins differ.
//!   - [`upstream::tcp`]: tcp-proto, the floor.
//!   - [`upstream::balance`]: client-side balancing over order-service's replicas.
//! - [`store`]: the store the service runs on, Postgres or memory.
//!   - [`store::port`]: the `UserStore` trait and `StoreError`.
//!   - [`store::postgres`]: Postgres, migrated from `migrations/users`.
//!   - [`store::memory`]: the data set's users in memory.
//! - [`service`]: the use cases and the one error type both boundaries map.
//! - [`rest`]: axum routes, JSON/protobuf negotiation.
//!   - [`rest::headers`]: the `x-via` and `x-upstream-*` answer headers.
//!   - [`rest::error`]: the REST error mapping, RFC 9457 problems.
//! - [`grpc`]: `user.v1.UserService`, the gRPC error mapping.
//! - [`settings`]: typed settings from flags and `USER_…` variables; the `seed` command.
//! - [`startup`]: [`startup::Application`]: build (port 0 in tests), run until a signal.

pub mod domain;
pub mod grpc;
pub mod metrics;
pub mod rest;
pub mod service;
pub mod settings;
pub mod startup;
pub mod store;
pub mod upstream;

pub use settings::Settings;
pub use startup::Application;
