//! The server skeleton both services run the same way: content
//! negotiation, the wire-level errors and their problem bodies, one limit of
//! work in service, serving with time bounds, connection caps and a bounded
//! drain, gRPC health and reflection, the shutdown signal, listener
//! supervision, Postgres pools, and renamed settings.
//!
//! # Layout
//! - [`negotiate`]: [`negotiate::Format`] (JSON or protobuf, by `Accept`
//!   and `Content-Type`), [`negotiate::read_body`] (the bounded body read)
//!   and [`negotiate::WireError`] (what is wrong with a request on the
//!   wire); [`deadline`]: the body read's time bound; [`call_deadline`]:
//!   the caller's deadline of a gRPC or Connect call, enforced;
//! - [`problem`]: the `application/problem+json` body of every error, the
//!   problem types both services share, and the pages that describe them;
//! - [`shed`]: load shedding, the one limit of work in service;
//! - [`serve`]: serving a router with time bounds per connection and a
//!   shutdown that loses no request and ends in time (`serve::h3`: the
//!   same over QUIC); [`cap`]: the cap on a listener's open connections;
//!   [`h3_client`]: HTTP/3 client connections;
//! - [`preface`]: the same bounds for tonic listeners, and their bounded
//!   drain; [`health`]: gRPC health that follows readiness (its service,
//!   which keeps a `Watch` of an unknown name open, in `health/service.rs`);
//!   [`reflection`]: gRPC reflection, v1 and v1alpha, listing what a port
//!   serves;
//! - [`signal`], [`supervise`]: the shutdown signal, and the listeners run
//!   together;
//! - [`db`]: the Postgres pool opened and bounded, errors classified, rows
//!   stamped and URLs redacted alike;
//! - [`settings`]: renamed settings kept working for a release, and the
//!   defaults without the environment.

pub mod body_gate;
pub mod call_deadline;
pub mod cap;
pub mod db;
pub mod deadline;
pub mod grpc_conn;
pub mod h3_client;
pub mod health;
pub mod negotiate;
pub mod preface;
pub mod problem;
pub mod reflection;
pub mod serve;
pub mod settings;
pub mod shed;
pub mod signal;
pub mod supervise;

#[cfg(test)]
mod tests {
    #[test]
    fn no_module_imports_one_that_imports_it_back() {
        let g = testkit::modules::Graph::of_crate(env!("CARGO_MANIFEST_DIR"));
        g.assert_acyclic();
        // The checker reads real imports, down into serve's own files.
        assert!(g.imports("shed").contains("problem"), "{:?}", g.edges);
        assert!(
            g.imports("serve::connection").contains("serve::limits"),
            "{:?}",
            g.edges
        );
    }
}
