//! Generates the Connect code (connect-rust's services and clients, buffa's
//! messages) for the order packages in `proto/`. The vendored protoc writes
//! the descriptor set the generator reads, so a new machine needs no system
//! protoc and no buf.

use std::path::PathBuf;
use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../proto");
    let files = ["order/v1/order.proto", "order/v2/order.proto"];
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptor = out.join("connect-descriptor.bin");
    let status = Command::new(protoc_bin_vendored::protoc_bin_path()?)
        .arg(format!("--proto_path={}", root.display()))
        .arg(format!(
            "--proto_path={}",
            protoc_bin_vendored::include_path()?.display()
        ))
        .arg("--include_imports")
        .arg("--include_source_info")
        .arg(format!("--descriptor_set_out={}", descriptor.display()))
        .args(files)
        .status()?;
    if !status.success() {
        return Err(format!("protoc failed: {status}").into());
    }
    connectrpc_build::Config::new()
        .descriptor_set(&descriptor)
        .files(&files)
        .include_file("_connectrpc.rs")
        .emit_rerun_directives(false)
        .compile()?;
    for f in &files {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    Ok(())
}
