//! The contract between the services, generated from the `.proto` files in the
//! workspace's `proto/` directory by `build.rs`.
//!
//! # Layout
//! - [`order::v2`]: the current, typed order API (unary, server streaming, bidi).
//! - [`order::v1`]: the legacy all-strings order API of the type-fix post.
//! - [`user::v1`]: user-service's own API.
//! - [`timing`]: the codec every generated service uses, with the timing of
//!   a call's parts.
//! - [`FILE_DESCRIPTOR_SET`]: every file above, for gRPC server reflection.
//!
//! Generated code is the only place in the workspace where lints are relaxed.

/// The order API packages.
pub mod order {
    /// Legacy: every field a string.
    #[allow(clippy::all, clippy::pedantic, missing_docs)]
    pub mod v1 {
        tonic::include_proto!("order.v1");
    }
    /// Current: typed fields, field masks, streaming.
    #[allow(clippy::all, clippy::pedantic, missing_docs)]
    pub mod v2 {
        tonic::include_proto!("order.v2");
    }
}

/// The user API package.
pub mod user {
    /// user-service's API.
    #[allow(clippy::all, clippy::pedantic, missing_docs)]
    pub mod v1 {
        tonic::include_proto!("user.v1");
    }
}

pub mod timing;

pub use prost_types;

/// The encoded `FileDescriptorSet` of every package, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("descriptor");
