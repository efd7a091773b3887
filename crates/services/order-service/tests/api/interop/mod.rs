//! The interop suite: clients this project did not write (grpcio, grpc-js,
//! connect-node; their scripts under `interop/`, their versions pinned in
//! requirements-dev.txt and interop/node/package-lock.json) against the
//! real order-service on port 0, in memory and on a Postgres database of
//! the test's own. Each client prints what it decoded as JSON, and the
//! answers are compared with the data set field by field.
//!
//! # Layout
//! - `kit`: running a client script and reading its answer.
//! - `oracle`: the data set in the clients' JSON form.
//! - `standard_services`: health and reflection checks (both services).
//! - `grpcio`, `grpc_js`, `connect_node`: one file per client.
//! - `protocol_edges`: what the protocols specify at their edges (health
//!   Watch of an unknown name, reflection's list, deadlines the server keeps,
//!   Connect's refusals), one test each.

pub mod kit;
pub mod oracle;
pub mod standard_services;

mod connect_node;
mod grpc_js;
mod grpcio;
mod protocol_edges;
