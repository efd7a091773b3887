//! order-service: one user's orders, over every transport of the lab.
//!
//! # Layout
//! - [`settings`]: flags and `ORDER_…` environment variables.
//! - [`startup`]: [`Application`]: bind, serve, drain at shutdown.
//! - [`service`]: the transport-independent core every API calls, and its error.
//! - [`store`]: the [`store::Store`] the service runs on, chosen at start:
//!   - `store::port`: the `OrderStore` trait, its queries, pages and errors;
//!   - [`store::memory`]: the data set in memory;
//!   - [`store::postgres`]: Postgres, through sqlx.
//! - [`rest`]: REST on HTTP/1.1 + h2c, JSON or protobuf, OpenAPI:
//!   - [`rest::error`]: each REST error as its status and problem body.
//! - [`grpc`]: gRPC v2 (unary, streams, bidi) and v1, health, reflection, gRPC-web.
//! - [`connect`]: `order.v2.OrderService` over Connect (connect-rust), on the REST port.
//! - [`h3`]: HTTP/3 (QUIC): REST, Connect and gRPC on one UDP port.
//! - [`tcp`]: the raw-TCP floor (length-prefixed protobuf frames).
//! - [`timing`]: the answer's own account of its time (`ORDER_SERVER_TIMING`).
//! - [`metrics`]: the store's series on `/metrics`, its Postgres pool among them.

pub mod connect;
pub mod grpc;
pub mod h3;
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
