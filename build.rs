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
    // The service as the server runs it (src/api/wire.rs): the same
    // messages, generated above, except that the event streams send each
    // event's encoded form.
    let wire = out_dir.join("wire");
    std::fs::create_dir_all(&wire)?;
    tonic_prost_build::configure()
        .build_client(false)
        .codec_path("crate::api::codec::EventCodec")
        .extern_path(".toolsched.v1", "crate::api::pb")
        .extern_path(
            ".toolsched.v1.ScheduleCallsResponse",
            "crate::api::wire::EncodedEvent",
        )
        .out_dir(&wire)
        .compile_protos(&["proto/toolsched/v1/toolsched.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
