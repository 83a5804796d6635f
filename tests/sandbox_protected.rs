//! Protected paths kept by the server between commands: every `.git` in
//! the workspace stays read-only for confined commands, whether it was
//! there when the first command ran, was made by an earlier command (later
//! batches of the same session and other sessions), or appeared after the
//! server had kept the listings of the directories around it. Through the
//! real gRPC server (yolo mode) and the real worker.

use crate::support;

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::sandbox::SandboxLevel;

fn shell(id: &str, command: &str) -> pb::FunctionCall {
    call(id, "run_shell_command", json!({ "command": command }))
}

/// A command setting the POSIX ACL `xattr` of `path` to `user::<owner>
/// group::r-x other::r-x`, in the kernel's layout (no `setfacl` needed).
fn set_acl(path: &str, xattr: &str, owner: u8) -> String {
    format!(
        "/usr/bin/python3 -c \"import os,struct; e=lambda t,p: struct.pack('<HHI',t,p,0xffffffff); os.setxattr('{path}','{xattr}',struct.pack('<I',2)+e(1,{owner})+e(4,5)+e(0x20,5))\""
    )
}

/// A server confined at the default level in yolo mode, with Landlock
/// alone when `landlock_only`.
fn confined(landlock_only: bool) -> toolsched::scheduler::SchedulerConfig {
    let mut config = yolo_confined();
    config.sandbox.landlock_only = landlock_only;
    config
}

/// Runs one shell command in `session` and returns its output; it must
/// succeed.
async fn run_ok(srv: &TestServer, session: &str, command: &str) -> String {
    let events = srv.run(session, vec![shell("ok", command)]).await;
    assert_eq!(
        states(&events, "ok"),
        ["validating", "scheduled", "executing", "success"],
        "{command}: {events:?}"
    );
    success_output(&events, "ok")
}

/// Runs one shell command in `session`; it must be refused by the sandbox.
async fn assert_denied(srv: &TestServer, session: &str, command: &str) {
    let events = srv.run(session, vec![shell("c", command)]).await;
    assert_eq!(
        states(&events, "c"),
        ["validating", "scheduled", "executing", "error"],
        "{command}: {events:?}"
    );
    let (kind, message) = error_of(&events, "c");
    assert_eq!(kind, pb::ErrorType::SandboxDenied, "{command}: {message}");
}

/// Every way a command could change `git_dir` (relative to the
/// workspace) is refused, and nothing changed.
async fn assert_git_dir_read_only(srv: &TestServer, session: &str, git_dir: &str) {
    let hook = format!("{git_dir}/hooks/pre-commit");
    assert_denied(srv, session, &format!("echo evil > {hook}")).await;
    assert!(!srv.path(&hook).exists(), "{hook} was written");
    assert_denied(
        srv,
        session,
        &format!("echo '[core] fsmonitor = evil' > {git_dir}/config"),
    )
    .await;
    assert_denied(srv, session, &format!("mv {git_dir} {git_dir}-moved")).await;
    assert!(srv.path(git_dir).is_dir(), "{git_dir} was moved");
}

/// `git init --separate-git-dir`: the `.git` in the worktree is a file
/// naming the repository elsewhere in the workspace. Writing that
/// directory is writing the repository (a breaker ran code through its
/// `config` and hooks): it is protected like a `.git`, and the worktree
/// around it stays writable.
#[tokio::test]
async fn a_separate_git_dir_named_by_a_gitlink_file_is_read_only() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo_confined()).await;
    std::fs::create_dir_all(srv.path("sepgd/hooks")).unwrap();
    std::fs::create_dir_all(srv.path("proj/src")).unwrap();
    std::fs::write(srv.path("proj/.git"), "gitdir: ../sepgd\n").unwrap();
    assert_git_dir_read_only(&srv, "s", "sepgd").await;
    assert_eq!(
        run_ok(&srv, "s", "echo a > proj/src/x && cat proj/src/x").await,
        "Command: echo a > proj/src/x && cat proj/src/x\nDirectory: .\nOutput: a\n"
    );
}

/// Directories deeper than `PATH_MAX`: the walk cannot open the first one
/// past it and protects it whole. Its read-only mount is made through fds,
/// so the command keeps its mount namespace: the root (which holds a `.git`)
/// still takes new entries, and the deep directory takes none. Before, the
/// failed mount sent every later command to the Landlock-only fallback (a
/// breaker's finding), where the root takes no new entry.
#[tokio::test]
async fn a_directory_deeper_than_path_max_keeps_the_namespace() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo_confined()).await;
    std::fs::create_dir_all(srv.path(".git/hooks")).unwrap();
    // 25 levels of 201-byte names: past 4,096 bytes at the 21st.
    let descend =
        "for i in $(seq 25); do n=d$i$(printf %0200d 0); mkdir -p $n && cd $n || exit 1; done";
    let st = std::process::Command::new("bash")
        .args(["-c", &format!("mkdir -p deep && cd deep && {descend}")])
        .current_dir(srv.path(""))
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(
        run_ok(&srv, "s", "echo a > rootfile && cat rootfile").await,
        "Command: echo a > rootfile && cat rootfile\nDirectory: .\nOutput: a\n"
    );
    // Python walks down (a shell's `cd` before a write leaves the policy
    // asking where it goes) and writes beneath the unreadable directory.
    assert_denied(
        &srv,
        "s",
        "/usr/bin/python3 -c \"import os; os.chdir('deep'); [os.chdir('d%d' % i + '0' * 200) for i in range(1, 26)]; open('f', 'w')\"",
    )
    .await;
    assert_git_dir_read_only(&srv, "s", ".git").await;
}

#[tokio::test]
async fn a_nested_git_present_before_the_first_command_is_read_only() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo_confined()).await;
    std::fs::create_dir_all(srv.path("deep/er/repo/.git/hooks")).unwrap();
    std::fs::create_dir_all(srv.path("deep/er/repo/src")).unwrap();
    std::fs::create_dir_all(srv.path("elsewhere")).unwrap();
    assert_git_dir_read_only(&srv, "s", "deep/er/repo/.git").await;
    // Around it the workspace stays writable, on every later command too.
    assert_eq!(
        run_ok(
            &srv,
            "s",
            "echo a > deep/er/repo/src/x && echo b > elsewhere/y && cat deep/er/repo/src/x elsewhere/y"
        )
        .await,
        "Command: echo a > deep/er/repo/src/x && echo b > elsewhere/y && cat deep/er/repo/src/x elsewhere/y\nDirectory: .\nOutput: a\nb\n"
    );
    assert_git_dir_read_only(&srv, "other", "deep/er/repo/.git").await;
}

#[tokio::test]
async fn a_git_made_by_one_command_is_read_only_for_later_batches_and_sessions() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo_confined()).await;
    std::fs::create_dir_all(srv.path("pkg/src")).unwrap();
    // The server has the workspace's protected set (none yet) before the
    // repositories appear.
    run_ok(&srv, "a", "true").await;
    // A confined command cannot make a repository any more (issue 11, item
    // 12: tests/sandbox_entries.rs); they appear from outside, as a user's
    // `git init` or `git clone` would make them.
    std::fs::create_dir_all(srv.path("pkg/sub/.git/hooks")).unwrap();
    std::fs::create_dir_all(srv.path("pkg/src/inner/.git/hooks")).unwrap();
    assert!(srv.path("pkg/sub/.git/hooks").is_dir());
    // The next batch of the same session.
    assert_git_dir_read_only(&srv, "a", "pkg/sub/.git").await;
    assert_git_dir_read_only(&srv, "a", "pkg/src/inner/.git").await;
    // Another session.
    assert_git_dir_read_only(&srv, "b", "pkg/sub/.git").await;
    assert_git_dir_read_only(&srv, "b", "pkg/src/inner/.git").await;
}

/// The newest ctime of `dirs`.
fn newest_ctime(dirs: &[&Path]) -> SystemTime {
    use std::os::unix::fs::MetadataExt;
    dirs.iter()
        .map(|d| {
            let m = std::fs::symlink_metadata(d).unwrap();
            SystemTime::UNIX_EPOCH + Duration::new(m.ctime() as u64, m.ctime_nsec() as u32)
        })
        .max()
        .unwrap()
}

#[tokio::test]
async fn a_git_made_after_the_listings_were_kept_is_read_only() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo_confined()).await;
    std::fs::create_dir_all(srv.path("lib/a/b")).unwrap();
    std::fs::create_dir_all(srv.path("staging")).unwrap();
    std::fs::create_dir_all(srv.path("dest")).unwrap();
    // Listings are kept once their directory's ctime is older than the
    // racy margin: let the clock pass it (what is under test is the
    // timestamps' age; there is nothing to wait for but the clock).
    let root = srv.path("");
    let dirs = ["lib", "lib/a", "lib/a/b", "staging", "dest"].map(|d| srv.path(d));
    let mut all: Vec<&Path> = dirs.iter().map(|d| d.as_path()).collect();
    all.push(&root);
    let settled = newest_ctime(&all)
        + toolsched::sandbox::protected::RACY_MARGIN
        + Duration::from_millis(100);
    if let Ok(left) = settled.duration_since(SystemTime::now()) {
        tokio::time::sleep(left).await;
    }
    // This walk keeps the listings; the next ones reuse them.
    run_ok(&srv, "a", "true").await;
    run_ok(&srv, "a", "true").await;
    // Made from outside (a confined command cannot make a `.git`, and
    // cannot move a repository it did not make: tests/sandbox_entries.rs,
    // tests/sandbox_namespace.rs), the parent's mtime set back.
    let sh = |script: &str| {
        let st = std::process::Command::new("bash")
            .args(["-c", script])
            .current_dir(srv.path(""))
            .status()
            .unwrap();
        assert!(st.success(), "{script}");
    };
    sh("mkdir -p lib/a/b/.git/hooks && touch -d 2001-01-01 lib/a/b");
    assert_git_dir_read_only(&srv, "a", "lib/a/b/.git").await;
    assert_git_dir_read_only(&srv, "b", "lib/a/b/.git").await;
    // A repository moved in from elsewhere in the workspace.
    sh("mkdir -p staging/r/.git/hooks && mv staging/r dest/r");
    assert_git_dir_read_only(&srv, "b", "dest/r/.git").await;
}

// === the worker and the set the server passes ===

/// Runs the worker binary directly at `workspace_write` with
/// `--protected-fd 4`, fd 4 opened by bash on `protected` (or closed when
/// `None`); returns (exit status, stdout+stderr, status report).
fn run_worker(
    workspace: &Path,
    protected: Option<&Path>,
    command: &str,
) -> (Option<i32>, String, String) {
    run_worker_with_nofile(workspace, protected, command, None)
}

/// [`run_worker`], the worker started with `ulimit -n nofile` when given.
fn run_worker_with_nofile(
    workspace: &Path,
    protected: Option<&Path>,
    command: &str,
    nofile: Option<u32>,
) -> (Option<i32>, String, String) {
    let prelude = nofile.map_or(String::new(), |n| format!("ulimit -n {n} && "));
    let run = WorkerRun {
        prelude: &prelude,
        redirects: if protected.is_some() {
            "4<\"$PROTECTED\""
        } else {
            "4<&-"
        },
        env: vec![("PROTECTED", protected.unwrap_or(Path::new("")).into())],
        // The Landlock-only path (the fallback without a mount namespace):
        // its refusals are Landlock's "Permission denied". The mount
        // namespace's are in tests/sandbox_namespace.rs.
        extra: vec![
            "--protected-fd".into(),
            "4".into(),
            "--landlock-only".into(),
        ],
        ..WorkerRun::default()
    };
    run_worker_process(workspace, run, command)
}

#[test]
fn the_worker_protects_exactly_the_set_the_server_passes() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let ws = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    let lists = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.join("plain")).unwrap();
    std::fs::create_dir_all(ws.join("free")).unwrap();
    let list = lists.path().join("protected");
    std::fs::write(&list, format!("{}\0\0", ws.join("plain").display())).unwrap();
    let (code, out, status) = run_worker(
        &ws,
        Some(&list),
        "echo x > plain/f; echo rc=$?; echo y > free/f; echo rc=$?",
    );
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(status.trim(), r#"{"exit_code":0}"#);
    assert!(out.contains("plain/f: Permission denied"), "{out}");
    assert!(out.starts_with("rc=1\nrc=0\n"), "{out}");
    assert!(!ws.join("plain/f").exists());
    assert_eq!(std::fs::read_to_string(ws.join("free/f")).unwrap(), "y\n");
}

#[test]
fn a_protected_set_that_cannot_be_read_fails_the_setup() {
    let ws = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    let lists = tempfile::tempdir().unwrap();
    let relative = lists.path().join("relative");
    std::fs::write(&relative, "plain\0\0").unwrap();
    // What a walk that did not finish leaves: paths, and no end mark.
    let cut = lists.path().join("cut");
    std::fs::write(&cut, format!("{}\0", ws.join("plain").display())).unwrap();
    let empty = lists.path().join("empty");
    std::fs::write(&empty, "").unwrap();
    let marker = ws.join("ran");
    let touch = format!("touch {}", marker.display());
    for (protected, reason) in [
        (None, "reading the protected paths from fd 4"),
        (Some(relative.as_path()), "is not absolute: plain"),
        (Some(cut.as_path()), "end before their end mark"),
        (Some(empty.as_path()), "end before their end mark"),
    ] {
        let (code, out, status) = run_worker(&ws, protected, &touch);
        assert_eq!(
            code,
            Some(toolsched::sandbox::worker::SETUP_FAILED_EXIT),
            "{out}"
        );
        assert!(
            status.contains("setup_error") && status.contains(reason),
            "{status}"
        );
        assert!(
            !marker.exists(),
            "the command ran without its protected set"
        );
    }
}

#[test]
fn a_repository_root_with_more_entries_than_open_files_is_granted_whole() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let ws = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    let lists = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.join("r/.git")).unwrap();
    // Each entry beside `.git` needs its own Landlock rule, far more of
    // them than the worker may hold fds at once.
    for i in 0..300 {
        std::fs::create_dir(ws.join(format!("r/d{i:03}"))).unwrap();
    }
    let list = lists.path().join("protected");
    std::fs::write(&list, format!("{}\0\0", ws.join("r/.git").display())).unwrap();
    let (code, out, status) = run_worker_with_nofile(
        &ws,
        Some(&list),
        "n=0; for d in r/d*; do touch $d/new || n=$((n+1)); done; echo denied=$n",
        Some(64),
    );
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(status.trim(), r#"{"exit_code":0}"#);
    assert_eq!(out, "denied=0\n");
    assert!(ws.join("r/d299/new").is_file());
}

/// Android's `repo` layout: `p/.git` is a symlink to
/// `../.repo/projects/p.git`. The repository it leads to is read-only, and
/// nothing on the way to it can be swapped: renaming `.repo/projects` (or
/// `.repo`) and making a new `p.git` with a hook there would make git in
/// `p` run it (a breaker's finding). A symlink on the way (`l ->
/// .repo/projects`, and a gitlink naming `../l/q.git`) cannot be removed or
/// replaced. Around them the workspace stays writable. With the private
/// mount namespace and with Landlock alone.
#[tokio::test]
async fn the_way_to_a_repository_a_git_symlink_leads_to_is_pinned() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = git_symlink_layout(yolo_confined()).await;
    assert_eq!(
        run_ok(
            &srv,
            "s",
            "echo a > p/x && echo b > .repo/note && mkdir .repo/projects/new && cat p/x .repo/note"
        )
        .await,
        "Command: echo a > p/x && echo b > .repo/note && mkdir .repo/projects/new && cat p/x .repo/note\nDirectory: .\nOutput: a\nb\n"
    );
}

#[tokio::test]
async fn the_way_to_a_repository_a_git_symlink_leads_to_is_pinned_landlock_only() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = git_symlink_layout(confined(true)).await;
    // Off the way to a repository (`else` was made before), entries are
    // made as ever; on the way (the root) they are not.
    assert_eq!(
        run_ok(
            &srv,
            "s",
            "mkdir else/w && echo a > else/w/x && cat else/w/x"
        )
        .await,
        "Command: mkdir else/w && echo a > else/w/x && cat else/w/x\nDirectory: .\nOutput: a\n"
    );
}

/// A server with `config` over the layout above, after every swap was
/// refused.
async fn git_symlink_layout(config: toolsched::scheduler::SchedulerConfig) -> TestServer {
    let srv = TestServer::with_config(config).await;
    for d in ["projects/p.git", "other/q.git"] {
        std::fs::create_dir_all(srv.path(&format!(".repo/{d}/hooks"))).unwrap();
    }
    std::fs::create_dir_all(srv.path("p")).unwrap();
    std::fs::create_dir_all(srv.path("q")).unwrap();
    std::fs::create_dir_all(srv.path("else")).unwrap();
    std::os::unix::fs::symlink("../.repo/projects/p.git", srv.path("p/.git")).unwrap();
    std::os::unix::fs::symlink(".repo/other", srv.path("l")).unwrap();
    std::fs::write(srv.path("q/.git"), "gitdir: ../l/q.git\n").unwrap();
    assert_git_dir_read_only(&srv, "s", ".repo/projects/p.git").await;
    assert_git_dir_read_only(&srv, "s", ".repo/other/q.git").await;
    for swap in [
        "mv .repo/projects .repo/old && mkdir -p .repo/projects/p.git/hooks",
        "mv .repo repo-old && mkdir -p .repo/projects/p.git/hooks",
        "rm l",
        "ln -sfn p l",
        "mv l l2",
    ] {
        assert_denied(&srv, "s", swap).await;
    }
    assert!(srv.path(".repo/projects/p.git/hooks").is_dir());
    assert!(!srv.path(".repo/old").exists() && !srv.path("repo-old").exists());
    assert_eq!(
        std::fs::read_link(srv.path("l")).unwrap(),
        Path::new(".repo/other")
    );
    srv
}

/// A non-root server finds the protected paths with the commands' own
/// permissions: a directory it cannot list or search hides the `.git`
/// links beyond it, and the repositories they lead to must not become
/// writable. A command cannot make a workspace directory unreadable to its
/// owner; one made so outside is protected instead (read-only: its mode
/// cannot be given back), as the walk protects a directory it cannot read.
/// As root the server runs as `nobody` (setpriv, util-linux).
#[tokio::test]
async fn a_hidden_way_to_a_linked_repository_does_not_unprotect_it() {
    use std::os::unix::fs::PermissionsExt;
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let root = rustix::process::geteuid().is_root();
    let scratch = tempfile::tempdir().unwrap();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let program = scratch.path().join("toolsched");
    std::fs::copy(env!("CARGO_BIN_EXE_toolsched"), &program).unwrap();
    let ws = scratch.path().join("ws");
    std::fs::create_dir_all(ws.join(".repo/projects/p.git/hooks")).unwrap();
    std::fs::create_dir_all(ws.join("p")).unwrap();
    std::os::unix::fs::symlink("../.repo/projects/p.git", ws.join("p/.git")).unwrap();
    if root {
        let st = std::process::Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(&ws)
            .status()
            .unwrap();
        assert!(st.success());
    }
    let launcher = as_nobody();
    let bin = Binary::start_via(launcher, &program, &ws, &["--approval-mode", "yolo"], &[]);
    let run = |session: &'static str, command: String| async move {
        collect(crate::replicas_support::run_shell(bin.addr, session, "c", &command).await).await
    };
    // A command cannot take a workspace directory's read or search
    // permission from its owner (a breaker's finding: `chmod 311 p`, the
    // search bit kept as git needs it, hid `p/.git` from the walk).
    // The owner's bits of an access ACL are the mode's (`setfacl -m u::-wx p`).
    for hide in [
        set_acl("p", "system.posix_acl_access", 3),
        "chmod 000 .repo".into(),
        "chmod 311 p".into(),
        "chmod 000 p".into(),
        "chmod u-r p".into(),
    ] {
        let events = run("s", hide.clone()).await;
        assert_eq!(
            states(&events, "c"),
            ["validating", "scheduled", "executing", "error"],
            "{hide}: {events:?}"
        );
    }
    for dir in [".repo", "p"] {
        assert_eq!(
            std::fs::metadata(ws.join(dir))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o755,
            "{dir}"
        );
    }
    // Made unreadable all the same (by its owner, outside): the directory
    // in the way is protected.
    std::fs::set_permissions(ws.join(".repo"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let write = run(
        "s",
        "chmod 755 .repo; echo evil > .repo/projects/p.git/hooks/post-checkout".into(),
    )
    .await;
    assert_eq!(
        states(&write, "c"),
        ["validating", "scheduled", "executing", "error"],
        "{write:?}"
    );
    std::fs::set_permissions(ws.join(".repo"), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(!ws.join(".repo/projects/p.git/hooks/post-checkout").exists());
    // Modes that keep it are changed as ever.
    let keep = run(
        "s",
        format!(
            "chmod 700 p && chmod 755 p && {} && echo kept",
            set_acl("p", "system.posix_acl_access", 7)
        ),
    )
    .await;
    assert_eq!(
        states(&keep, "c"),
        ["validating", "scheduled", "executing", "success"],
        "{keep:?}"
    );
}

/// A read-only mount does not stop a path at a symlink inside it. A
/// repository's hook linked into the worktree (`.git/hooks/pre-commit ->
/// ../../scripts/pre-commit`), its `config` linked to a workspace file,
/// and Android `repo`'s `p.git/hooks` linked to `project-objects`: each is
/// code git runs outside the sandbox, so what the links lead to is
/// read-only too, whichever path a command takes to it (a breaker's
/// finding). Around them the workspace stays writable. With the private
/// mount namespace and with Landlock alone.
#[tokio::test]
async fn what_symlinks_inside_a_repository_lead_to_is_read_only() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    for landlock_only in [false, true] {
        let srv = TestServer::with_config(confined(landlock_only)).await;
        let link = |to: &str, at: &str| {
            std::fs::create_dir_all(srv.path(at).parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(to, srv.path(at)).unwrap();
        };
        for d in [
            ".git/hooks",
            ".git/objects",
            ".git/refs",
            "scripts",
            ".repo/projects/p.git/refs",
            ".repo/project-objects/p.git/hooks",
            ".repo/repo/hooks",
            "p",
        ] {
            std::fs::create_dir_all(srv.path(d)).unwrap();
        }
        std::fs::write(srv.path(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(srv.path("scripts/pre-commit"), "#!/bin/sh\n").unwrap();
        std::fs::write(srv.path("git-config"), "[core]\n").unwrap();
        std::fs::write(srv.path(".repo/repo/hooks/commit-msg"), "#!/bin/sh\n").unwrap();
        link("../../scripts/pre-commit", ".git/hooks/pre-commit");
        link("../git-config", ".git/config");
        link("../.repo/projects/p.git", "p/.git");
        link(
            "../../project-objects/p.git/hooks",
            ".repo/projects/p.git/hooks",
        );
        link(
            "../../../repo/hooks/commit-msg",
            ".repo/project-objects/p.git/hooks/commit-msg",
        );
        for write in [
            "echo evil > .git/hooks/pre-commit",
            "echo evil > scripts/pre-commit",
            "rm scripts/pre-commit",
            "echo '[core] fsmonitor = evil' >> .git/config",
            "echo '[core] fsmonitor = evil' >> git-config",
            "echo evil > p/.git/hooks/post-checkout",
            "echo evil > .repo/project-objects/p.git/hooks/post-checkout",
            "echo evil > p/.git/hooks/commit-msg",
            "echo evil > .repo/repo/hooks/commit-msg",
            "mv .repo/project-objects .repo/po && mkdir -p .repo/project-objects/p.git/hooks",
        ] {
            assert_denied(&srv, "s", write).await;
        }
        assert_eq!(
            std::fs::read_to_string(srv.path("scripts/pre-commit")).unwrap(),
            "#!/bin/sh\n"
        );
        assert_eq!(
            std::fs::read_to_string(srv.path("git-config")).unwrap(),
            "[core]\n"
        );
        assert_eq!(
            std::fs::read_to_string(srv.path(".repo/repo/hooks/commit-msg")).unwrap(),
            "#!/bin/sh\n"
        );
        assert!(
            !srv.path(".repo/project-objects/p.git/hooks/post-checkout")
                .exists()
        );
        assert!(!srv.path(".repo/po").exists());
        // Off those paths the workspace is written as ever (with Landlock
        // alone, not in the directories on the way to them).
        let (make, shown) = if landlock_only {
            ("mkdir src/w && echo a > src/w/x && cat src/w/x", "a")
        } else {
            (
                "echo a > scripts/other && echo b > .repo/note && cat scripts/other .repo/note",
                "a\nb",
            )
        };
        if landlock_only {
            std::fs::create_dir(srv.path("src")).unwrap();
        }
        assert_eq!(
            run_ok(&srv, "s", make).await,
            format!("Command: {make}\nDirectory: .\nOutput: {shown}\n"),
            "landlock_only: {landlock_only}"
        );
    }
}

/// A `.git` symlink or gitlink whose repository does not exist (yet): a
/// command cannot make it, by any way, and so cannot give git outside the
/// sandbox a repository of its own with `core.fsmonitor` in its `config` (a
/// breaker's finding). The rest of the directory it would be in stays
/// writable.
#[tokio::test]
async fn a_repository_a_dangling_link_names_cannot_be_made() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    for landlock_only in [false, true] {
        let srv = TestServer::with_config(confined(landlock_only)).await;
        for d in [
            ".repo/projects",
            "p",
            "g",
            "stage/p.git/hooks",
            "stage/projects/p.git",
        ] {
            std::fs::create_dir_all(srv.path(d)).unwrap();
        }
        std::os::unix::fs::symlink("../.repo/projects/p.git", srv.path("p/.git")).unwrap();
        std::fs::write(srv.path("g/.git"), "gitdir: ../sep/g.git\n").unwrap();
        for make in [
            "mkdir .repo/projects/p.git",
            "mkdir -p .repo/projects/p.git/hooks",
            "mv stage/p.git .repo/projects/",
            "ln -s ../../stage/p.git .repo/projects/p.git",
            "touch .repo/projects/p.git",
            "mv .repo/projects .repo/old && mv stage/projects .repo/",
            "mkdir -p sep/g.git",
            "mkdir stage/sep && mv stage/sep .",
            "mkfifo .repo/projects/p.git",
            "mkfifo sep",
            // FIFOs keep their make rights: not moved or linked there
            // either (a breaker's finding).
            "mkfifo stage/f1 && mv stage/f1 .repo/projects/p.git",
            "mkfifo stage/f2 && ln stage/f2 sep",
        ] {
            assert_denied(&srv, "s", make).await;
        }
        for gone in [".repo/projects/p.git", "sep", ".repo/old"] {
            assert!(
                std::fs::symlink_metadata(srv.path(gone)).is_err(),
                "{gone} was made (landlock_only: {landlock_only})"
            );
        }
        if !landlock_only {
            let make = "mkdir .repo/projects/q.git && echo a > .repo/projects/q.git/x && mkfifo .repo/projects/q.git/f && test -p .repo/projects/q.git/f && cat .repo/projects/q.git/x";
            assert_eq!(
                run_ok(&srv, "s", make).await,
                format!("Command: {make}\nDirectory: .\nOutput: a\n")
            );
        }
        // Once the repository is there (made outside the sandbox), it is
        // protected as any.
        std::fs::create_dir_all(srv.path(".repo/projects/p.git/hooks")).unwrap();
        assert_git_dir_read_only(&srv, "s", ".repo/projects/p.git").await;
    }
}

/// A workspace directory keeps its owner's read and search permission
/// however it is made (`mkdir -m 300`, a umask, a default ACL): a server
/// that is not root could not look into it, and a repository put there
/// later would not be protected (a breaker's finding). `chmod` refuses the
/// same (see `a_hidden_way_to_a_linked_repository_does_not_unprotect_it`).
#[tokio::test]
async fn a_new_workspace_directory_keeps_its_owners_read_and_search() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo_confined()).await;
    let make = "/usr/bin/python3 -c \"import os; os.mkdir('b', 0o300)\" && umask 477 && mkdir c && umask 022 && mkdir -m 750 d && stat -c %a b c d";
    assert_eq!(
        run_ok(&srv, "s", make).await,
        format!("Command: {make}\nDirectory: .\nOutput: 700\n700\n750\n")
    );
    // `mkdir -m` sets the mode again with `chmod`, which is refused.
    assert_denied(&srv, "s", "mkdir -m 300 e").await;
    // A default ACL whose owner entry lacks read: refused; one with it, set.
    let acl = |perm: u8| set_acl("d", "system.posix_acl_default", perm);
    assert_denied(&srv, "s", &acl(3)).await;
    let keep = format!("{} && echo set", acl(7));
    assert_eq!(
        run_ok(&srv, "s", &keep).await,
        format!("Command: {keep}\nDirectory: .\nOutput: set\n")
    );
}

/// An approved write to a file commands may not write keeps it read-only
/// for a command already running: the file is rewritten in place, because
/// a rename over it would detach the command's read-only mount of it
/// (breakers' findings: the running command's next write landed in the
/// approved hook; in a gitlink written through a symlink to it). Creating
/// a file where only a link makes the path protected (a dangling hook
/// link's target) is refused even when approved: no mount can exist there
/// for commands already running.
#[tokio::test]
async fn an_approved_write_to_a_protected_file_keeps_it_read_only_for_running_commands() {
    use toolsched::api::pb::tool_call_update::State;
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo_confined()).await;
    for d in [".git/hooks", ".git/objects", ".git/refs", "scripts", "sub"] {
        std::fs::create_dir_all(srv.path(d)).unwrap();
    }
    std::fs::write(srv.path(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(srv.path("scripts/pre-commit"), "#!/bin/sh\n").unwrap();
    std::os::unix::fs::symlink(
        "../../scripts/pre-commit",
        srv.path(".git/hooks/pre-commit"),
    )
    .unwrap();
    std::os::unix::fs::symlink("../../scripts/missing", srv.path(".git/hooks/post-merge")).unwrap();
    std::fs::write(srv.path("sub/.git"), "gitdir: ../.git\n").unwrap();
    std::os::unix::fs::symlink(".git", srv.path("sub/alias")).unwrap();
    let approve = |session: &'static str, path: &'static str, content: &'static str| {
        let srv = &srv;
        async move {
            let (stream, _, prompt) = srv
                .prompt(
                    session,
                    call(
                        "w",
                        "write_file",
                        serde_json::json!({"file_path": path, "content": content}),
                    ),
                )
                .await;
            assert!(
                prompt.reason.contains("[rule 'protected-path'"),
                "{}",
                prompt.reason
            );
            srv.confirm(
                session,
                "w",
                &prompt.correlation_id,
                pb::ConfirmationOutcome::ProceedOnce,
                None,
            )
            .await
            .unwrap();
            collect(stream).await
        }
    };
    for (given, file, approved) in [
        (
            "scripts/pre-commit",
            "scripts/pre-commit",
            "#!/bin/sh\necho approved\n",
        ),
        ("sub/alias", "sub/.git", "gitdir: ../.git\n"),
    ] {
        // A command of another session, started before the write, that
        // tries to write the file once the test says so.
        let _ = std::fs::remove_file(srv.path("go"));
        let attempt = format!(
            "while [ ! -e go ]; do sleep 0.01; done; echo evil >> {file} && echo WROTE; echo tried"
        );
        let mut running = srv.schedule("b", vec![shell("c", &attempt)]).await;
        let mut seen = Vec::new();
        next_matching(&mut running, &mut seen, |e| {
            matches!(e, Event::CallUpdate(u) if matches!(&u.state, Some(State::Executing(x)) if x.pid.is_some()))
        })
        .await;
        let events = approve("a", given, approved).await;
        assert_eq!(
            states(&events, "w").last().copied(),
            Some("success"),
            "{given}: {events:?}"
        );
        std::fs::write(srv.path("go"), "").unwrap();
        seen.extend(collect(running).await);
        let out = success_output(&seen, "c");
        assert_eq!(
            out.split_once("Output: ").map(|(_, o)| o.to_string()),
            Some(format!(
                "bash: line 1: {file}: Read-only file system\ntried\n"
            )),
            "{given}: {out}"
        );
        assert_eq!(std::fs::read_to_string(srv.path(file)).unwrap(), approved);
    }
    // Nor a new `.git`, or a file in one not there yet (a breaker's
    // finding: a running command rewrote an approved new gitlink); a new
    // hook in the existing `.git` is made.
    for missing in ["scripts/missing", "sub2/.git", "newrepo/.git/config"] {
        let events = approve("a", missing, "#!/bin/sh\n").await;
        let (kind, message) = error_of(&events, "w");
        assert_eq!(
            kind,
            pb::ErrorType::PermissionDenied,
            "{missing}: {message}"
        );
        assert!(
            std::fs::symlink_metadata(srv.path(missing)).is_err(),
            "{missing}"
        );
    }
    assert!(!srv.path("newrepo").exists());
    let events = approve("a", ".git/hooks/post-checkout", "#!/bin/sh\n").await;
    assert_eq!(
        states(&events, "w").last().copied(),
        Some("success"),
        "{events:?}"
    );
}

/// A command whose directory is inside a repository's `.git`, or on the
/// way to a nested repository, sees the read-only mounts there too: the
/// worker entered the directory before the mounts existed, and relative
/// paths from it reached the writable mount beneath them (a breaker's
/// finding: `core.fsmonitor` written into `.git/config` with `dir_path:
/// ".git"`). Each case runs both ways: as the first command of its
/// options (the command's process cloned for it) and as the next (the
/// process confined ahead), in both levels' order.
#[tokio::test]
async fn a_command_started_inside_or_above_a_repository_cannot_write_it() {
    assert_eq!(unsafe { libc::geteuid() }, 0, "sandbox tests run as root");
    assert!(kernel_enforces(SandboxLevel::WorkspaceWrite));
    let srv = TestServer::with_config(yolo_confined()).await;
    for dir in [".git/hooks", "nest/r/.git"] {
        std::fs::create_dir_all(srv.path(dir)).unwrap();
    }
    std::fs::write(srv.path(".git/config"), "[core]\n").unwrap();
    std::fs::write(srv.path("nest/r/.git/config"), "[core]\n").unwrap();
    let in_dir = |dir: &str, command: &str| {
        call(
            "c",
            "run_shell_command",
            json!({ "command": command, "dir_path": dir }),
        )
    };
    let cases = [
        (".git", "echo x | tee -a config"),
        (".git/hooks", "echo x | tee pre-commit"),
        (".git", "mv config config.old"),
        ("nest", "echo x | tee -a r/.git/config"),
        ("nest/r", "echo x | tee -a .git/config"),
    ];
    for (dir, command) in cases {
        for first in [true, false] {
            if first {
                // Other options before: nothing confined ahead fits.
                let events = srv
                    .schedule_with(pb::ScheduleCallsRequest {
                        sandbox_level: pb::SandboxLevel::ReadOnly as i32,
                        ..request("ro", vec![shell("c", "true")])
                    })
                    .await;
                collect(events).await;
            } else {
                run_ok(&srv, "s", "true").await;
            }
            let events = srv.run("s", vec![in_dir(dir, command)]).await;
            assert_eq!(
                states(&events, "c"),
                ["validating", "scheduled", "executing", "error"],
                "{dir}: {command} (first: {first}): {events:?}"
            );
            let (kind, message) = error_of(&events, "c");
            assert_eq!(
                kind,
                pb::ErrorType::SandboxDenied,
                "{dir}: {command}: {message}"
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(srv.path(".git/config")).unwrap(),
        "[core]\n"
    );
    assert_eq!(
        std::fs::read_to_string(srv.path("nest/r/.git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!srv.path(".git/hooks/pre-commit").exists());
    // The command still runs where it was asked to, and writes what it may.
    let events = srv
        .run("s", vec![in_dir("nest", "pwd; echo x | tee made.txt")])
        .await;
    assert_eq!(
        states(&events, "c"),
        ["validating", "scheduled", "executing", "success"],
        "{events:?}"
    );
    assert!(success_output(&events, "c").contains("/nest\n"));
    assert!(srv.path("nest/made.txt").exists());
}
