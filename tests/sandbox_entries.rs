//! No confined command may create a `.git` (issue 11, item 12): a
//! repository a command made could carry a hook that git, run outside the
//! sandbox, executes before the server protects it at the next command. So
//! every way to make an entry named `.git` (any case) is refused, in the
//! workspace and in the private tmp alike, while ordinary files,
//! directories, links and renames work as before, with the command's umask.
//! Through the real gRPC server (yolo mode) and the real worker, with the
//! mount namespace and with `sandbox_landlock_only`.

use crate::support;

use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::sandbox::{SandboxConfig, SandboxLevel};
use toolsched::scheduler::SchedulerConfig;

fn shell(id: &str, command: &str) -> pb::FunctionCall {
    call(id, "run_shell_command", json!({ "command": command }))
}

fn landlock_only() -> SchedulerConfig {
    SchedulerConfig {
        sandbox: SandboxConfig {
            landlock_only: true,
            ..SandboxConfig::default()
        },
        ..yolo()
    }
}

/// The output of a command that must succeed (what follows `Output: `).
async fn run_ok(srv: &TestServer, command: &str) -> String {
    let events = srv.run("s", vec![shell("ok", command)]).await;
    assert_eq!(
        states(&events, "ok"),
        ["validating", "scheduled", "executing", "success"],
        "{command}: {events:?}"
    );
    let out = success_output(&events, "ok");
    out.split_once("Output: ")
        .map(|(_, o)| o.to_string())
        .unwrap_or_default()
}

/// A command that must end `sandbox_denied` with `refusal` in its output.
async fn assert_refused(srv: &TestServer, command: &str, refusal: &str) {
    let events = srv.run("s", vec![shell("c", command)]).await;
    assert_eq!(
        states(&events, "c"),
        ["validating", "scheduled", "executing", "error"],
        "{command}: {events:?}"
    );
    let (kind, message) = error_of(&events, "c");
    assert_eq!(kind, pb::ErrorType::SandboxDenied, "{command}: {message}");
    assert!(message.contains(refusal), "{command}: {message}");
}

/// Every `.git` beneath `dir` (a walk of the real filesystem).
fn gits_beneath(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    toolsched::sandbox::protected::scan_once(dir)
}

async fn no_command_makes_a_git(config: SchedulerConfig) {
    let srv = TestServer::with_config(config).await;
    // The issue's example (HOME unset so that git does not stop at the
    // unreadable ~/.gitconfig and gets as far as making the repository).
    assert_refused(
        &srv,
        "unset HOME; git init -q x && echo evil > x/.git/hooks/pre-commit",
        "x/.git: Operation not permitted",
    )
    .await;
    // A hand-made one.
    assert_refused(
        &srv,
        "mkdir -p y/.git/hooks && echo evil > y/.git/hooks/pre-commit",
        "cannot create directory ‘y/.git’: Operation not permitted",
    )
    .await;
    // One laid out in the private tmp and moved in, or renamed in place.
    assert_refused(
        &srv,
        "mkdir -p $TMPDIR/r/hooks z && touch $TMPDIR/r/hooks/pre-commit && mv $TMPDIR/r z/.git",
        "Operation not permitted",
    )
    .await;
    assert_refused(
        &srv,
        "mkdir -p w/gitdir/hooks && mv w/gitdir w/.GIT",
        "Operation not permitted",
    )
    .await;
    // A `.git` file (gitlink) or symlink pointing at a directory laid out
    // as a git dir, and a hard link named `.git`.
    assert_refused(
        &srv,
        "mkdir -p v && echo 'gitdir: ../w/gitdir' > v/.git",
        "v/.git: Operation not permitted",
    )
    .await;
    assert_refused(
        &srv,
        "mkdir -p u && ln -s ../w/gitdir u/.git",
        "Operation not permitted",
    )
    .await;
    assert_refused(
        &srv,
        "mkdir -p t && echo x > t/f && ln t/f t/.Git",
        "Operation not permitted",
    )
    .await;
    // In the private tmp too.
    assert_refused(&srv, "mkdir $TMPDIR/.git", "Operation not permitted").await;
    assert_eq!(
        gits_beneath(&srv.path("")),
        Vec::<std::path::PathBuf>::new()
    );
    assert!(!srv.path("x/.git").exists() && !srv.path("w/.GIT").exists());
}

#[tokio::test]
async fn no_command_makes_a_git_with_the_mount_namespace() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    no_command_makes_a_git(yolo_confined()).await;
}

#[tokio::test]
async fn no_command_makes_a_git_landlock_only() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    no_command_makes_a_git(landlock_only()).await;
}

async fn ordinary_entries_are_made_as_before(config: SchedulerConfig) {
    let srv = TestServer::with_config(config).await;
    let script = "umask 027 && echo hi > f && mkdir d && mkdir -p d/e/f && ln -s f l && ln f h \
        && mv f g && mkfifo p && cp g d/c && echo more >> g && mknod n p && touch .gitignore x.git \
        && mkdir $TMPDIR/t && touch $TMPDIR/t/f && mv $TMPDIR/t/f $TMPDIR/u \
        && /usr/bin/python3 -c 'import tempfile; f = tempfile.TemporaryFile(dir=\".\"); f.write(b\"x\"); f.seek(0); print(f.read())' \
        && stat -c '%n %A %h' d d/e/f g h l p d/c n .gitignore x.git | sort && cat g && ls $TMPDIR \
        && rmdir $TMPDIR/t";
    assert_eq!(
        run_ok(&srv, script).await,
        "b'x'\n\
         .gitignore -rw-r----- 1\n\
         d drwxr-x--- 3\n\
         d/c -rw-r----- 1\n\
         d/e/f drwxr-x--- 2\n\
         g -rw-r----- 2\n\
         h -rw-r----- 2\n\
         l lrwxrwxrwx 1\n\
         n prw-r----- 1\n\
         p prw-r----- 1\n\
         x.git -rw-r----- 1\n\
         hi\nmore\nt\nu\n"
    );
    assert!(srv.path("d/e/f").is_dir() && !srv.path("f").exists());
    // Outside the writable paths nothing is made, as before (Landlock).
    assert_refused(
        &srv,
        "mkdir /etc/toolsched-entries-test",
        "Permission denied",
    )
    .await;
    assert_refused(
        &srv,
        "touch /usr/toolsched-entries-test",
        "Permission denied",
    )
    .await;
    assert!(!std::path::Path::new("/etc/toolsched-entries-test").exists());
    // A trailing slash names a directory: anything else fails as the
    // kernel fails it, and nothing is made (a breaker saw `mkfifo ff/`
    // make `ff`).
    // The server's own temp files (a file tool's content waits in one,
    // with no permission bits, before it replaces a file): no command
    // makes, moves onto or changes one.
    std::fs::write(srv.path(".t.toolsched-0.tmp"), "").unwrap();
    for command in [
        "touch .u.toolsched-1.tmp",
        "mv g .v.toolsched-2.tmp",
        "ln -s g .w.toolsched-3.tmp",
        "chmod 644 .t.toolsched-0.tmp",
        "ln .t.toolsched-0.tmp mine",
    ] {
        assert_refused(&srv, command, "Operation not permitted").await;
    }
    let out = run_ok(&srv, "mkfifo ff/; touch fo/; ln -s g sl/; echo done").await;
    for error in [
        "mkfifo: cannot create fifo 'ff/': No such file or directory",
        "touch: setting times of 'fo/': No such file or directory",
        "ln: failed to create symbolic link 'sl/': No such file or directory",
    ] {
        assert!(out.contains(error), "{error}: {out}");
    }
    for made in ["ff", "fo", "sl"] {
        assert!(std::fs::symlink_metadata(srv.path(made)).is_err(), "{made}");
    }
}

#[tokio::test]
async fn ordinary_entries_are_made_as_before_with_the_mount_namespace() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    ordinary_entries_are_made_as_before(yolo_confined()).await;
}

#[tokio::test]
async fn ordinary_entries_are_made_as_before_landlock_only() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    ordinary_entries_are_made_as_before(landlock_only()).await;
}

#[tokio::test]
async fn landlock_only_still_locks_the_way_to_a_git_for_new_entries() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(landlock_only()).await;
    std::fs::create_dir_all(srv.path("a/repo/.git")).unwrap();
    std::fs::create_dir_all(srv.path("a/repo/src")).unwrap();
    // The worker makes entries only where the piecewise grants would let
    // the kernel: not in a directory on the way to the `.git`.
    assert_refused(&srv, "mkdir a/new", "Permission denied").await;
    assert_refused(&srv, "ln -s x a/repo/l", "Permission denied").await;
    assert_refused(&srv, "mv a/repo a/old", "Permission denied").await;
    assert_eq!(
        run_ok(&srv, "mkdir a/repo/src/new && echo ok").await,
        "ok\n"
    );
    assert!(srv.path("a/repo/.git").is_dir() && !srv.path("a/new").exists());
}

/// Makes `x` over and over once the swapper runs (bounded waits), and
/// says what it got whenever that was not the new file `x`: an open of a
/// pipe (then it writes the worker's final report on it and stays) or of a
/// file elsewhere.
const CREATE_X: &str = r#"
use strict;
$| = 1;
my $wait = time + 30;
until (-e 'swapping') { die "no swapper\n" if time > $wait; select(undef, undef, undef, 0.01); }
my $until = time + 8;
while (time < $until) {
    if (open(my $f, '>', 'x')) {
        my $got = readlink('/proc/self/fd/' . fileno($f)) // '';
        if ($got =~ /^pipe:/) {
            syswrite($f, qq({"exit_code":0}\n));
            print "forged a report on $got\n";
            sleep 60;
        } elsif ($got !~ m{/x( \(deleted\))?$}) {
            print "made $got\n";
        }
        close($f);
    }
    unlink('x');
}
open(my $d, '>', 'created') or die "created: $!\n";
print "done\n";
"#;

/// Swaps `x` between absent and a symlink (to the worker's status pipe as
/// `/proc/self/fd/3`, then to `$ARGV[0]`, outside every writable root)
/// until the creator is done (at most 30 s).
const SWAP_X: &str = r#"
my ($outside) = @ARGV;
open(my $s, '>', 'swapping') or die "swapping: $!\n";
my $until = time + 30;
while (!-e 'created' && time < $until) {
    symlink('/proc/self/fd/3', 'x'); unlink('x');
    symlink($outside, 'x'); unlink('x');
}
print "swapped\n";
"#;

/// The worker makes a new file for a command only where the name was free
/// when it looked: a symlink another command (served by its own worker)
/// swaps in between that look and the making is not followed. The worker
/// runs unconfined with the server's uid, so following it would create a
/// file outside every writable root, or hand the command the worker's own
/// status pipe, on which a forged final report ends the call (success,
/// exit code 0) while the command runs on, past its timeout.
#[tokio::test]
async fn a_symlink_swapped_in_while_the_worker_makes_a_file_is_not_followed() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo_confined()).await;
    let outside = std::env::temp_dir().join(format!(
        "toolsched-swapped-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::write(srv.path("create.pl"), CREATE_X).unwrap();
    std::fs::write(srv.path("swap.pl"), SWAP_X).unwrap();
    let swapper = srv
        .schedule(
            "swapper",
            vec![shell("s", &format!("perl swap.pl {}", outside.display()))],
        )
        .await;
    let creator = srv
        .schedule("creator", vec![shell("c", "perl create.pl")])
        .await;
    let (swapped, created) = tokio::join!(collect(swapper), collect(creator));
    let made_outside = outside.exists();
    let _ = std::fs::remove_file(&outside);
    assert_eq!(
        states(&created, "c"),
        ["validating", "scheduled", "executing", "success"],
        "{created:?}"
    );
    let out = success_output(&created, "c");
    assert_eq!(
        out.split_once("Output: ").map(|(_, o)| o),
        Some("done\n"),
        "{out}"
    );
    assert!(!made_outside, "the worker made {}", outside.display());
    assert!(
        success_output(&swapped, "s").contains("swapped"),
        "{swapped:?}"
    );
}
