//! The worker's confinement, seen from inside a command: seccomp, dropped
//! capabilities, `no_new_privs`, resource limits, signal scoping, protected
//! config, setup failures, and the server refusing to start without a
//! worker. Through the gRPC server where the path is the real one, through
//! the worker binary directly where a test needs options the harness cannot
//! give (a protected path inside the workspace, a broken workspace).

use crate::support;

use std::path::Path;
use std::process::Command;

use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::sandbox::{ResourceLimits, SandboxConfig, SandboxLevel};
use toolsched::scheduler::SchedulerConfig;

const TOOLSCHED: &str = env!("CARGO_BIN_EXE_toolsched");

fn shell(id: &str, command: &str) -> pb::FunctionCall {
    call(id, "run_shell_command", json!({ "command": command }))
}

/// The output of `command`, run once at the default (confined) level
/// through a fresh server that approves everything.
async fn confined_output(command: &str) -> String {
    let srv = TestServer::with_config(yolo()).await;
    let events = srv.run("s", vec![shell("c", command)]).await;
    success_output(&events, "c")
}

#[tokio::test]
async fn namespaces_mounts_ptrace_and_keyrings_are_refused() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = TestServer::with_config(yolo()).await;
    // One line per attempt: the syscall's errno name, or "allowed".
    let probe = r#"/usr/bin/python3 - <<'EOF'
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, nr, *args):
    r = libc.syscall(nr, *args)
    e = ctypes.get_errno()
    print(name, "allowed" if r >= 0 else errno.errorcode[e])
attempt("unshare_user", 272, 0x10000000)
attempt("unshare_mount", 272, 0x00020000)
attempt("setns", 308, 0, 0)
attempt("mount", 165, b"none", b"/tmp", b"tmpfs", 0, None)
attempt("ptrace_attach", 101, 16, os.getppid(), 0, 0)
attempt("keyctl", 250, 0, -3, 0)
attempt("bpf", 321, 0, 0, 0)
attempt("io_uring_setup", 425, 1, 0)
attempt("clone3", 435, 0, 0)
# openat2's mode is in memory no filter reads: O_TMPFILE with 06755, then
# linkat, made a set-id file (a breaker's finding); it answers ENOSYS.
class How(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]
how = How(0o20200000 | 2, 0o6755, 0)
attempt("openat2_tmpfile_setid", 437, -100, b".", ctypes.byref(how), 24)
attempt("open_tree_attr", 467, -100, b".", 0, 0, 0)
attempt("init_module", 175, 0, 0, b"")
attempt("x32_getpid", 0x40000000 + 39)
EOF"#;
    let events = srv.run("s", vec![shell("c", probe)]).await;
    let out = success_output(&events, "c");
    for line in [
        "unshare_user EPERM",
        "unshare_mount EPERM",
        "setns EPERM",
        "mount EPERM",
        "ptrace_attach EPERM",
        "keyctl EPERM",
        "bpf EPERM",
        "io_uring_setup EPERM",
        "clone3 ENOSYS",
        "openat2_tmpfile_setid ENOSYS",
        "open_tree_attr EPERM",
        "init_module EPERM",
        "x32_getpid EPERM",
    ] {
        assert!(out.contains(line), "expected {line:?} in {out}");
    }
}

#[tokio::test]
async fn capabilities_are_dropped_and_no_new_privs_is_set() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let out = confined_output(
        "grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status",
    )
    .await;
    for line in [
        "CapEff:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "CapAmb:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
    ] {
        assert!(out.contains(line), "expected {line:?} in {out}");
    }
}

/// The command process starts in the worker's fd table (see the worker's
/// `confine`): it must still begin with stdin, stdout and stderr only,
/// and never with the metadata filter's listener, which would let it answer
/// its own trapped calls.
#[tokio::test]
async fn a_command_starts_with_stdio_only_and_without_the_seccomp_listener() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    // `ls` lists its own fds: what it inherited, and the directory it
    // reads (3). The first command's worker is forked for it; the next
    // ones are spares' (the second and third started by a process
    // confined ahead, which shared the spare's fd table, channel included).
    let srv = TestServer::with_config(yolo()).await;
    for round in 0..3 {
        let events = srv.run("s", vec![shell("c", "ls -l /proc/self/fd/")]).await;
        let out = success_output(&events, "c");
        let mut fds: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split_once(" -> ")?.0.rsplit(' ').next())
            .collect();
        fds.sort();
        assert_eq!(fds, ["0", "1", "2", "3"], "round {round}: {out}");
        assert!(out.contains(" 0 -> /dev/null"), "{out}");
        assert!(out.contains(" 3 -> /proc/"), "{out}");
        assert!(
            !out.contains("seccomp") && !out.contains("anon_inode") && !out.contains("socket"),
            "round {round}: {out}"
        );
    }
}

#[tokio::test]
async fn resource_limits_are_set_from_config() {
    let srv = TestServer::with_config(SchedulerConfig {
        sandbox: SandboxConfig {
            limits: ResourceLimits {
                cpu_secs: 77,
                address_space_bytes: 3 << 30,
                file_size_bytes: 1 << 20,
                processes: 99,
                open_files: 123,
            },
            ..SandboxConfig::default()
        },
        ..yolo()
    })
    .await;
    let events = srv
        .run(
            "s",
            vec![shell(
                "c",
                "echo cpu=$(ulimit -t) as=$(ulimit -v) fsize=$(ulimit -f) nproc=$(ulimit -u) nofile=$(ulimit -n)",
            )],
        )
        .await;
    // bash's ulimit prints KiB for -v and -f.
    assert!(
        success_output(&events, "c").contains("cpu=77 as=3145728 fsize=1024 nproc=99 nofile=123"),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_confined_command_cannot_signal_the_server() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let probe = toolsched::sandbox::probe::probe(SandboxLevel::WorkspaceWrite);
    assert!(
        probe.landlock_abi >= toolsched::sandbox::probe::SCOPE_LANDLOCK_ABI,
        "Landlock ABI {} has no signal scoping",
        probe.landlock_abi
    );
    // `kill` is a dangerous form the policy asks about; an operator rule
    // allows it here so that the kernel is what refuses.
    let rules = toolsched::policy::parse_rules(
        "[[rule]]\nname = \"allow-kill\"\ncommand_prefix = [\"kill\"]\ndecision = \"allow\"\n",
        "test-policy.toml",
    )
    .unwrap();
    let policy =
        toolsched::policy::PolicyHandle::fixed(toolsched::policy::Policy::with_rules(rules, None));
    let srv = TestServer::with_policy(yolo(), Default::default(), policy).await;
    let pid = std::process::id();
    let events = srv
        .run("s", vec![shell("c", &format!("kill -TERM {pid}"))])
        .await;
    let (kind, message) = error_of(&events, "c");
    assert_eq!(kind, pb::ErrorType::SandboxDenied, "{message}");
    assert!(message.contains("Operation not permitted"), "{message}");
}

#[tokio::test]
async fn level_none_is_unconfined_but_still_process_controlled() {
    let srv = TestServer::with_config(SchedulerConfig {
        sandbox: SandboxConfig {
            level: SandboxLevel::None,
            ..SandboxConfig::default()
        },
        ..yolo()
    })
    .await;
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("written-by-none");
    let events = srv
        .run(
            "s",
            vec![shell(
                "c",
                &format!(
                    "echo x | tee {} && grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status && ulimit -u",
                    target.display()
                ),
            )],
        )
        .await;
    let out = success_output(&events, "c");
    assert!(target.exists());
    assert!(
        out.contains("NoNewPrivs:\t0") && out.contains("Seccomp:\t0"),
        "{out}"
    );
    assert!(
        out.contains(&ResourceLimits::default().processes.to_string()),
        "{out}"
    );
}

#[tokio::test]
async fn timeout_kills_the_command_and_what_it_left_behind() {
    let srv = TestServer::with_config(yolo()).await;
    let marker = format!("toolsched-timeout-{}", uuid::Uuid::new_v4().simple());
    let command = format!(
        "setsid bash -c 'exec -a {marker} sleep 1000' & (exec -a {marker} sleep 1000) & echo started; wait"
    );
    let events = srv
        .run(
            "s",
            vec![call(
                "c",
                "run_shell_command",
                json!({ "command": command, "timeout": 1 }),
            )],
        )
        .await;
    assert_eq!(
        states(&events, "c"),
        ["validating", "scheduled", "executing", "error"]
    );
    let (kind, message) = error_of(&events, "c");
    assert_eq!(kind, pb::ErrorType::ExecutionTimeout, "{message}");
    let left = support::running_with_cmdline(&marker);
    assert!(left.is_empty(), "left running: {left:?}");
}

/// Runs the worker binary directly with `extra` options; returns (exit
/// status, stdout+stderr, status report).
fn run_worker(workspace: &Path, extra: &[&str], command: &str) -> (Option<i32>, String, String) {
    let run = WorkerRun {
        extra: extra.iter().map(|s| s.to_string()).collect(),
        ..WorkerRun::default()
    };
    run_worker_process(workspace, run, command)
}

#[test]
fn the_service_config_in_the_workspace_is_read_only() {
    assert!(
        kernel_enforces(SandboxLevel::WorkspaceWrite),
        "the kernel cannot enforce the level: see the line above"
    );
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let config = ws_path.join("toolsched.toml");
    std::fs::write(&config, "sandbox_level = \"workspace_write\"\n").unwrap();
    // Beside a protected path no entry can be created (see the README's
    // Protected paths); a subdirectory is fully writable.
    std::fs::create_dir(ws_path.join("sub")).unwrap();
    let protect = config.display().to_string();
    let (code, out, status) = run_worker(
        &ws_path,
        &["--protect", &protect],
        "echo 'sandbox_level = \"none\"' > toolsched.toml; echo rc=$?; echo other > sub/other.txt && cat sub/other.txt",
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("toolsched.toml: Permission denied"), "{out}");
    assert!(out.contains("rc=1") && out.contains("other"), "{out}");
    assert_eq!(status.trim(), r#"{"exit_code":0}"#);
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "sandbox_level = \"workspace_write\"\n"
    );
}

#[test]
fn a_confinement_failure_is_reported_and_the_command_never_runs() {
    let ws = tempfile::tempdir().unwrap();
    let marker = ws.path().join("ran");
    let missing = ws.path().join("no-such-workspace");
    let (code, out, status) = run_worker(ws.path(), &[], &format!("touch {}", marker.display()));
    assert_eq!(code, Some(0), "sanity: the worker runs commands: {out}");
    std::fs::remove_file(&marker).unwrap();
    // Same command, but a workspace the worker cannot open.
    let tmp = tempfile::tempdir().unwrap();
    let status_file = tmp.path().join("status");
    let out = Command::new("bash")
        .args([
            "-c",
            "exec \"$@\" 3>\"$STATUS\"",
            "bash",
            TOOLSCHED,
            "sandbox-exec",
            "--level",
            "workspace_write",
            "--workspace",
            &missing.display().to_string(),
            "--tmp",
            &tmp.path().display().to_string(),
            "--cpu-secs",
            "10",
            "--address-space-bytes",
            "4294967296",
            "--file-size-bytes",
            "1048576",
            "--processes",
            "64",
            "--open-files",
            "256",
            "--kill-grace-ms",
            "200",
            "--",
            "bash",
            "-c",
            &format!("touch {}", marker.display()),
        ])
        .env("STATUS", &status_file)
        .output()
        .unwrap();
    let status_text = std::fs::read_to_string(&status_file).unwrap();
    assert_eq!(
        out.status.code(),
        Some(toolsched::sandbox::worker::SETUP_FAILED_EXIT)
    );
    assert!(
        status_text.contains("setup_error") && status_text.contains("open workspace"),
        "{status_text}"
    );
    assert!(
        !marker.exists(),
        "the command ran although confinement failed"
    );
    let _ = status;
}

/// The command process fails after its clone, before `exec` (here the
/// `exec` itself): the worker reports the reason the process left it, and
/// the command's exit is the setup failure's.
#[test]
fn a_command_that_cannot_be_executed_is_a_setup_error_with_its_reason() {
    let ws = tempfile::tempdir().unwrap();
    for level in ["workspace_write", "none"] {
        let run = WorkerRun {
            level: Some(level),
            program: Some(vec!["/nonexistent/program".into(), "arg".into()]),
            ..WorkerRun::default()
        };
        let (code, out, status) = run_worker_process(ws.path(), run, "");
        let lines: Vec<serde_json::Value> = status
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            lines,
            [
                json!({"setup_error": "exec /nonexistent/program: No such file or directory (os error 2)"}),
                json!({"exit_code": toolsched::sandbox::worker::SETUP_FAILED_EXIT}),
            ],
            "{level}: {out}"
        );
        assert_eq!(
            code,
            Some(toolsched::sandbox::worker::SETUP_FAILED_EXIT),
            "{level}"
        );
    }
}

/// A script without `#!` and very many arguments: `execve` answers
/// ENOEXEC and `execvp` rebuilds the argument vector for `/bin/sh` on the
/// cloned child's stack, one pointer per argument (a breaker's 32,700
/// arguments overflowed the child's fixed stack into the worker's memory).
/// The stack is sized for it: the script runs with all of them.
#[test]
fn a_script_without_a_shebang_runs_with_thirty_thousand_arguments() {
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let script = ws_path.join("noshebang");
    std::fs::write(&script, "echo ran $#\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut program = vec![script.display().to_string()];
    program.extend(std::iter::repeat_n("a".to_string(), 32_700));
    let run = WorkerRun {
        program: Some(program),
        ..WorkerRun::default()
    };
    let (code, out, status) = run_worker_process(&ws_path, run, "");
    assert_eq!(status.trim(), r#"{"exit_code":0}"#, "{out}");
    assert_eq!(out, "ran 32700\n");
    assert_eq!(code, Some(0));
}

#[test]
fn the_server_refuses_to_start_without_a_worker() {
    let out = Command::new(TOOLSCHED)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--sandbox-worker-exe",
            "/nonexistent/toolsched",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot find the worker binary /nonexistent/toolsched"),
        "{err}"
    );
}
