//! user-service: users over REST and gRPC, and the switchable, measured
//! transport that fetches their orders from order-service.
//!
//! The fan-out hop from here to order-service is what the lab measures: one
//! outbound port ([`upstream::OrderSource`]), one adapter per transport of the
//! matrix, each with a real budget of TCP connections, each measured inside
//! this service (round-trip histogram, connections, bytes on the socket).
//!
//! # Layout
//! - [`settings`]: typed settings from flags and `USER_…` variables; the
//!   `seed` command.
//! - [`startup`]: [`startup::Application`]: build (bind port 0 in tests), run
//!   until a shutdown signal.
//! - [`domain`]: `User`, `NewUser` (parsed at the edge) and their JSON and
//!   protobuf forms.
//! - [`store`]: the `UserStore` trait, Postgres (migrations in
//!   `migrations/users`) and in-memory implementations.
//! - [`service`]: the use cases and the one error type both boundaries map.
//! - [`rest`]: axum routes, JSON/protobuf negotiation, the REST error mapping.
//! - [`grpc`]: `user.v1.UserService`, the gRPC error mapping.
//! - [`upstream`]: the outbound port and its adapters:
//!   [`upstream::http`] (h1-json, h1-json-close, h2c-json, h1-proto,
//!   h2c-proto), [`upstream::grpc`] (grpc, grpc-stream, grpc-v1, grpc-bidi,
//!   grpc-bidi-tuned), [`upstream::tuned`] (grpc-tuned, grpc-stream-tuned,
//!   h2c-proto-tuned's connections, and the codec of the gRPC twins),
//!   [`upstream::connect`] (connect-h1-proto, connect-h2c-proto, on the
//!   REST adapters' connection pools),
//!   [`upstream::tcp`] (tcp-proto), [`upstream::mux`] (request-id
//!   multiplexing shared by grpc-bidi and tcp-proto), [`upstream::wire`]
//!   (counted sockets), [`upstream::semconv`] (each call's client span,
//!   named and described by the OpenTelemetry semantic conventions).
//! - [`metrics`]: per-transport counters and histograms, per application,
//!   rendered as Prometheus text.

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
