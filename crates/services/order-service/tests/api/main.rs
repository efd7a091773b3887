//! Black-box tests of order-service: the real service on port 0, in this
//! process (on a Postgres database of its own, or in memory) or as its
//! binary, and clients for every transport. One binary, so that the service
//! and its test dependencies are linked once.

// Helpers outside #[test] functions unwrap too: a panic is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod admin;
mod bad_input;
mod batch;
mod body_wait;
mod caps;
mod client_faults;
mod compose;
mod compression;
mod connect;
mod connect_protocol;
mod create;
mod create_retries;
mod deadlines;
mod early_answers;
mod flood;
mod fuzz;
mod grpc_raw;
mod h2_bounds;
mod h3;
mod h3_validation;
mod health_reflection;
mod helpers;
mod interop;
mod metrics;
mod modules;
mod orders_db;
mod outage;
mod overload;
mod python_client;
mod renamed;
mod rotation;
mod schemathesis;
mod secrets;
mod seed;
mod shutdown;
mod sigterm;
mod slow_clients;
mod small_errors;
mod traces;
mod transports;
mod unread;
