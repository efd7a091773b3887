//! No code. This crate only turns on, for the services' own build, the
//! dependency features that their tests turn on, so that the two builds
//! share their compiled dependencies (see its `Cargo.toml`).
