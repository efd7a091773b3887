//! Black-box tests of user-service against the real order-service, both on
//! port 0 and on real Postgres databases of their own. One binary, so that
//! the two services and the test templates are built and linked once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod admin;
mod balancers;
mod breakdown;
mod budget;
mod caps;
mod client_faults;
mod compose;
mod dashboard;
mod early_answers;
mod flood;
mod gzip;
mod h3_wire;
mod hdr;
mod health_reflection;
mod helpers;
mod interop;
mod k8s;
mod liveness;
mod many_users;
mod modules;
mod over_tls;
mod overload;
mod postgres_outage;
mod renamed;
mod replicas;
mod resilience;
mod schemathesis;
mod secrets;
mod sigterm;
mod slow_clients;
mod small_errors;
mod traces;
mod transports;
mod users;
