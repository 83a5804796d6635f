//! File metadata (mode with set-id bits, owner, times, extended attributes,
//! inode flags) outside the writable paths never changes, whatever a
//! confined command calls; inside the workspace `chmod`, `touch -d`,
//! `setxattr` and `chown` to the owner it already has still work. Through
//! the real gRPC server (yolo mode) and the real worker, as root: CI runs
//! as root, and root owns every system file, so this is where the hole was.

use crate::support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::sandbox::SandboxLevel;

fn shell(id: &str, command: &str) -> pb::FunctionCall {
    call(id, "run_shell_command", json!({ "command": command }))
}

/// These tests exist for a root server: fail loudly otherwise, and when the
/// kernel cannot confine at all.
fn require_root_and_kernel() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "the metadata tests must run as root (as CI does)");
    let probe = toolsched::sandbox::probe::probe(SandboxLevel::WorkspaceWrite);
    assert!(
        probe.missing.is_empty(),
        "the kernel cannot enforce workspace_write: missing {}",
        probe.missing.join(", ")
    );
}

/// Everything about a file that a metadata call could change.
#[derive(Debug, PartialEq)]
struct Meta {
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: (i64, i64),
    xattrs: Vec<String>,
    flags: String,
}

fn meta(p: &Path) -> Meta {
    let m = std::fs::symlink_metadata(p).unwrap();
    let xattrs = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import os,sys; print(sorted(os.listxattr(sys.argv[1])))",
        ])
        .arg(p)
        .output()
        .unwrap();
    let flags = std::process::Command::new("lsattr")
        .arg("-d")
        .arg(p)
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split(' ')
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default();
    Meta {
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
        mtime: (m.mtime(), m.mtime_nsec()),
        xattrs: vec![String::from_utf8_lossy(&xattrs.stdout).trim().to_string()],
        flags,
    }
}

/// A root-owned file outside the workspace, mode 0644, no xattrs.
fn outside_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("toolsched-meta-")
        .tempdir()
        .unwrap();
    let f = std::fs::canonicalize(dir.path()).unwrap().join("victim");
    std::fs::write(&f, "secret\n").unwrap();
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    (dir, f)
}

fn setxattr(path: &str) -> String {
    format!("/usr/bin/python3 -c \"import os; os.setxattr('{path}', 'user.planted', b'1')\"")
}

fn removexattr(path: &str) -> String {
    format!("/usr/bin/python3 -c \"import os; os.removexattr('{path}', 'user.kept')\"")
}

/// Runs `command`; it must end in Error `sandbox_denied`.
async fn assert_denied(srv: &TestServer, command: &str) -> String {
    let events = srv.run("s", vec![shell("c", command)]).await;
    assert_eq!(
        states(&events, "c"),
        ["validating", "scheduled", "executing", "error"],
        "{command}: {events:?}"
    );
    let (kind, message) = error_of(&events, "c");
    assert_eq!(kind, pb::ErrorType::SandboxDenied, "{command}: {message}");
    message
}

async fn run_ok(srv: &TestServer, command: &str) -> String {
    let events = srv.run("s", vec![shell("ok", command)]).await;
    assert_eq!(
        states(&events, "ok"),
        ["validating", "scheduled", "executing", "success"],
        "{command}: {events:?}"
    );
    success_output(&events, "ok")
}

#[tokio::test]
async fn metadata_outside_the_workspace_never_changes() {
    require_root_and_kernel();
    let srv = TestServer::with_config(yolo_confined()).await;
    let (_dir, f) = outside_file();
    let p = f.display().to_string();
    // A kept xattr, to show removal is refused too.
    let set_kept = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import os,sys; os.setxattr(sys.argv[1], 'user.kept', b'1')",
        ])
        .arg(&f)
        .status()
        .unwrap();
    assert!(set_kept.success());
    // Through a symlink in the workspace as well: the object counts.
    std::os::unix::fs::symlink(&f, srv.path("link")).unwrap();
    let before = meta(&f);
    for command in [
        format!("chmod u+s {p}"),
        format!("chmod 777 {p}"),
        format!("chmod g+s {p}"),
        format!("touch -d 2001-01-01 {p}"),
        format!("touch -m -d @0 -c {p}"),
        setxattr(&p),
        removexattr(&p),
        format!("chown 1000 {p}"),
        format!("chown 0:1000 {p}"),
        "chmod 777 link".to_string(),
        "touch -d 2001-01-01 -c link".to_string(),
        setxattr("link"),
        format!("chattr +d {p}"),
        // utime(2) and utimes(2) through python, and futimens on an fd.
        format!("/usr/bin/python3 -c \"import os; os.utime('{p}', (0, 0))\""),
        format!(
            "/usr/bin/python3 -c \"import os; fd = os.open('{p}', os.O_RDONLY); os.utime(fd, (0, 0))\""
        ),
        format!(
            "/usr/bin/python3 -c \"import os; fd = os.open('{p}', os.O_RDONLY); os.fchmod(fd, 0o777)\""
        ),
        format!(
            "/usr/bin/python3 -c \"import os; fd = os.open('{p}', os.O_RDONLY); os.fchown(fd, 1000, 1000)\""
        ),
    ] {
        let message = assert_denied(&srv, &command).await;
        assert!(
            message.contains("Operation not permitted") || message.contains("Permission denied"),
            "{command}: {message}"
        );
        assert_eq!(meta(&f), before, "{command} changed {p}");
    }
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "secret\n");
}

#[tokio::test]
async fn metadata_inside_the_workspace_still_changes() {
    require_root_and_kernel();
    let srv = TestServer::with_config(yolo_confined()).await;
    std::fs::write(srv.path("f"), "x\n").unwrap();
    std::fs::write(srv.path("run.sh"), "#!/bin/sh\necho ran\n").unwrap();
    let out = run_ok(
        &srv,
        &format!(
            "chmod 700 f && touch -d 2001-01-01 f && {} && chown 0:0 f && chmod +x run.sh && ./run.sh && mkdir -p d/e && chmod 750 d && touch -d @0 \"$TMPDIR/t\" && stat -c %Y \"$TMPDIR/t\"",
            setxattr("f")
        ),
    )
    .await;
    assert!(out.ends_with("ran\n0\n"), "{out}");
    let m = std::fs::metadata(srv.path("f")).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o700);
    assert_eq!(m.mtime(), 978_307_200, "2001-01-01 UTC");
    let m = meta(&srv.path("f"));
    assert_eq!(m.xattrs, ["['user.planted']"]);
    assert_eq!(
        std::fs::metadata(srv.path("d")).unwrap().mode() & 0o7777,
        0o750
    );
}

#[tokio::test]
async fn set_id_bits_are_refused_inside_the_workspace_too() {
    require_root_and_kernel();
    let srv = TestServer::with_config(yolo_confined()).await;
    std::fs::write(srv.path("tool"), "#!/bin/sh\n").unwrap();
    let before = meta(&srv.path("tool"));
    for command in [
        "chmod u+s tool",
        "chmod 4755 tool",
        "chmod g+s tool",
        "/usr/bin/python3 -c \"import os; os.open('made', os.O_CREAT | os.O_WRONLY, 0o4755)\"",
        "/usr/bin/python3 -c \"import os; os.chmod('tool', 0o2755)\"",
    ] {
        assert_denied(&srv, command).await;
        assert_eq!(meta(&srv.path("tool")), before, "{command}");
    }
    assert!(!srv.path("made").exists());
}

#[tokio::test]
async fn metadata_of_protected_paths_inside_the_workspace_never_changes() {
    require_root_and_kernel();
    let srv = TestServer::with_config(yolo_confined()).await;
    std::fs::create_dir_all(srv.path("repo/.git/hooks")).unwrap();
    let hook = srv.path("repo/.git/hooks/pre-commit");
    std::fs::write(&hook, "#!/bin/sh\necho evil\n").unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let before = meta(&hook);
    for command in [
        "chmod +x repo/.git/hooks/pre-commit",
        "touch -d 2001-01-01 repo/.git/hooks/pre-commit",
        &setxattr("repo/.git/hooks/pre-commit"),
    ] {
        assert_denied(&srv, command).await;
        assert_eq!(meta(&hook), before, "{command}");
    }
}
