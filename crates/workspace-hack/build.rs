//! Empty: cargo reads `[build-dependencies]` only from a package with a
//! build script, and this crate's are there for their features.

fn main() {}
