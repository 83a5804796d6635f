//! Compiles the toolsched proto into Rust (tonic server and client) and writes
//! the file descriptor set that server reflection serves. The `protoc` binary
//! comes from `protoc-bin-vendored`, so a fresh machine needs no system package.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("PROTOC").is_none() {
        // SAFETY-free: build scripts are single-threaded at this point.
        let protoc = protoc_bin_vendored::protoc_bin_path()?;
        // Safe in a build script: nothing else runs concurrently here.
        unsafe { std::env::set_var("PROTOC", protoc) };
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        // prost's codec with a smaller encoding buffer per response stream
        // (src/api/codec.rs).
        .codec_path("crate::api::codec::EventCodec")
        .file_descriptor_set_path(out_dir.join("toolsched_descriptor.bin"))
        .compile_protos(&["proto/toolsched/v1/toolsched.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
