//! order-service: one user's orders, over every transport of the lab.
//!
//! # Layout
//! - [`settings`]: flags and `ORDER_…` environment variables.
//! - [`startup`]: [`Application`]: bind, serve, drain at shutdown.
//! - [`service`]: the transport-independent core every API calls, and its
//!   error type.
//! - [`store`]: the `OrderStore` trait, Postgres and in-memory stores.
//! - [`rest`]: REST on HTTP/1.1 + h2c, JSON or protobuf, OpenAPI.
//! - [`grpc`]: gRPC v2 (unary, server and bidi streams) and v1, health,
//!   reflection, gRPC-web.
//! - [`tcp`]: the raw-TCP floor (length-prefixed protobuf frames).
//! - [`timing`]: the answer's own account of its time (`ORDER_SERVER_TIMING`).
//! - [`connect`]: `order.v2.OrderService` over Connect (connect-rust, buffa),
//!   on the REST port.

pub mod connect;
pub mod grpc;
pub mod metrics;
pub mod rest;
pub mod service;
pub mod settings;
pub mod startup;
pub mod store;
pub mod tcp;
pub mod timing;

pub use settings::Settings;
pub use startup::Application;
