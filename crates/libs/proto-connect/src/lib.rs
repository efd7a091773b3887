//! The order API for the Connect protocol, generated from the same `proto/`
//! files as the `proto` crate but with connect-rust's generator and the buffa
//! protobuf runtime. It is a crate of its own so that the two runtimes stay
//! apart: only what speaks Connect depends on it.

#[allow(clippy::all, clippy::pedantic, missing_docs, unused_imports)]
mod generated {
    connectrpc::include_generated!();
}

pub use generated::*;
