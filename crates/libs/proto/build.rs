//! Generates the Rust code for every package in `proto/` with the vendored
//! protoc, so that a new machine needs no system protoc.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../proto");
    let files = [
        "order/v1/order.proto",
        "order/v2/order.proto",
        "user/v1/user.proto",
    ]
    .map(|f| root.join(f));
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out.join("descriptor.bin"))
        // prost's codec, timed where asked (see `timing`).
        .codec_path("crate::timing::TimedCodec")
        // The legacy messages are served as JSON too, in exactly their proto
        // shape: /v1/orders on the REST port.
        .type_attribute(
            "order.v1.Order",
            "#[derive(serde::Serialize, serde::Deserialize, utoipa::ToSchema)]",
        )
        .type_attribute(
            "order.v1.ListOrdersResponse",
            "#[derive(serde::Serialize, serde::Deserialize, utoipa::ToSchema)]",
        )
        .compile_with_config(config, &files, &[root])?;
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    Ok(())
}
