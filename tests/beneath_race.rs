//! File tools against a path swapped after it was checked: one batch, over
//! the real gRPC server, in which a shell command replaces a directory the
//! later calls were validated against with a symlink to a directory outside
//! the workspace. Every file tool that follows must end in
//! `path_not_in_workspace` with nothing read from or written outside, while
//! std::fs on the same path does follow the link.
//!
//! Over gRPC the refusal can come from the re-check at execution time
//! (`Target::check`) or from the race-free open beneath the root that
//! follows it; the unit tests `sandbox::workspace::tests::every_beneath_access_*`
//! and `tools::file::tests::accesses_after_the_check_*` prove the second on
//! its own, with the swap made after the check.

use crate::support;

use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::sandbox::SandboxLevel;

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_directory_swapped_for_a_link_out_by_an_earlier_call_is_refused_to_every_file_tool() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("f.txt"), "TOPSECRET\n").expect("write");
    let srv = TestServer::with_config(yolo_confined()).await;
    std::fs::create_dir(srv.path("sub")).expect("mkdir");
    std::fs::write(srv.path("sub/f.txt"), "inside\n").expect("write");
    let swap = format!(
        "mv sub sub-old && ln -s {} sub && echo swapped",
        outside.path().display()
    );
    let events = srv
        .run(
            "s",
            vec![
                call("swap", "run_shell_command", json!({ "command": swap })),
                call("read", "read_file", json!({ "file_path": "sub/f.txt" })),
                call(
                    "write",
                    "write_file",
                    json!({ "file_path": "sub/f.txt", "content": "pwned\n" }),
                ),
                call(
                    "create",
                    "write_file",
                    json!({ "file_path": "sub/new.txt", "content": "pwned\n" }),
                ),
                call(
                    "replace",
                    "replace",
                    json!({ "file_path": "sub/f.txt", "old_string": "inside", "new_string": "pwned" }),
                ),
                call("list", "list_directory", json!({ "dir_path": "sub" })),
                call(
                    "grep",
                    "grep_search",
                    json!({ "pattern": "TOPSECRET", "dir_path": "sub" }),
                ),
                call("glob", "glob", json!({ "pattern": "*", "dir_path": "sub" })),
            ],
        )
        .await;
    assert!(success_output(&events, "swap").contains("swapped"));
    for id in ["read", "write", "create", "replace", "list", "grep", "glob"] {
        assert_eq!(
            states(&events, id),
            ["validating", "scheduled", "executing", "error"],
            "{id}"
        );
        let (kind, message) = error_of(&events, id);
        assert_eq!(kind, pb::ErrorType::PathNotInWorkspace, "{id}: {message}");
        assert!(!message.contains("TOPSECRET"), "{id}: {message}");
    }
    // The swap really happened: std::fs follows the link out.
    assert_eq!(
        std::fs::read_to_string(srv.path("sub/f.txt")).expect("read"),
        "TOPSECRET\n"
    );
    // Nothing outside was written, nothing created there.
    assert_eq!(
        std::fs::read_to_string(outside.path().join("f.txt")).expect("read"),
        "TOPSECRET\n"
    );
    assert_eq!(names(outside.path()), ["f.txt"]);
    // The original directory, moved aside, is untouched too.
    assert_eq!(
        std::fs::read_to_string(srv.path("sub-old/f.txt")).expect("read"),
        "inside\n"
    );
    assert_eq!(names(&srv.path("sub-old")), ["f.txt"]);
}

/// The file itself swapped for a link out by an earlier call: read_file,
/// write_file and replace neither read nor write through it.
#[tokio::test]
async fn a_file_swapped_for_a_link_out_by_an_earlier_call_is_neither_read_nor_written() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let outside = tempfile::tempdir().expect("tempdir");
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "TOPSECRET\n").expect("write");
    let srv = TestServer::with_config(yolo_confined()).await;
    std::fs::write(srv.path("f.txt"), "inside\n").expect("write");
    let swap = format!(
        "rm f.txt && ln -s {} f.txt && echo swapped",
        secret.display()
    );
    let events = srv
        .run(
            "s",
            vec![
                call("swap", "run_shell_command", json!({ "command": swap })),
                call("read", "read_file", json!({ "file_path": "f.txt" })),
                call(
                    "write",
                    "write_file",
                    json!({ "file_path": "f.txt", "content": "pwned\n" }),
                ),
                call(
                    "replace",
                    "replace",
                    json!({ "file_path": "f.txt", "old_string": "inside", "new_string": "pwned" }),
                ),
            ],
        )
        .await;
    assert!(success_output(&events, "swap").contains("swapped"));
    for id in ["read", "write", "replace"] {
        assert_eq!(
            states(&events, id),
            ["validating", "scheduled", "executing", "error"],
            "{id}"
        );
        let (kind, message) = error_of(&events, id);
        assert_eq!(kind, pb::ErrorType::PathNotInWorkspace, "{id}: {message}");
        assert!(!message.contains("TOPSECRET"), "{id}: {message}");
    }
    assert_eq!(
        std::fs::read_to_string(&secret).expect("read"),
        "TOPSECRET\n"
    );
    assert_eq!(names(outside.path()), ["secret.txt"]);
    assert!(
        std::fs::symlink_metadata(srv.path("f.txt"))
            .expect("lstat")
            .file_type()
            .is_symlink(),
        "the link is still there, not replaced by a write"
    );
}
