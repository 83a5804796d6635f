//! Other processes' `/proc/<pid>/cmdline` (the server's included, where an
//! `--auth-token` flag would show) is not readable by confined commands:
//! a root server gives each command a private `/proc` (`hidepid=ptraceable`
//! in its own mount namespace) that shows only the command's own
//! processes. Through the real gRPC server and worker, as root.

mod support;

use serde_json::json;
use support::*;
use toolsched::sandbox::SandboxLevel;

fn require_root_and_kernel() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "sandbox tests run as root");
    let probe = toolsched::sandbox::probe::probe(SandboxLevel::WorkspaceWrite);
    assert!(
        probe.missing.is_empty(),
        "the kernel cannot enforce workspace_write: missing {}",
        probe.missing.join(", ")
    );
}

async fn output(srv: &TestServer, command: &str) -> String {
    let events = srv
        .run(
            "s",
            vec![call(
                "c",
                "run_shell_command",
                json!({ "command": command }),
            )],
        )
        .await;
    match terminal(&events, "c") {
        State::Success(_) => success_output(&events, "c"),
        State::Error(_) => error_of(&events, "c").1,
        other => panic!("{command}: {other:?}"),
    }
}

#[tokio::test]
async fn other_processes_cmdline_is_not_readable() {
    require_root_and_kernel();
    let srv = TestServer::with_config(yolo_confined()).await;
    // A process outside the sandbox with a secret on its command line, as
    // `toolsched --auth-token …` would have.
    let secret = format!("secret-{}", uuid::Uuid::new_v4().simple());
    let mut outsider = std::process::Command::new("bash")
        .args(["-c", "read -r _", &secret])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let outsider_pid = outsider.id();
    // spawn() returns once exec has begun; the new command line shows once
    // it has replaced the old one.
    let shows = |pid: u32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(&secret))
            .unwrap_or(false)
    };
    let mut tries = 0;
    while !shows(outsider_pid) {
        tries += 1;
        assert!(tries < 100_000, "the outsider never showed its secret");
        std::thread::yield_now();
    }
    let server_pid = std::process::id();
    for pid in [server_pid, outsider_pid, 1] {
        for file in ["cmdline", "status", "environ"] {
            let command = format!("cat /proc/{pid}/{file}; echo rc=$?");
            let out = output(&srv, &command).await;
            assert!(
                out.contains(&format!("/proc/{pid}/{file}: No such file or directory"))
                    && out.contains("rc=1"),
                "{command}: {out}"
            );
            assert!(!out.contains(&secret), "{command}: {out}");
        }
    }
    // Every visible cmdline: none holds the secret (the pattern does not
    // match its own text).
    let out = output(
        &srv,
        "grep -a -l 'secret-[0-9a-f]\\{32\\}' /proc/[0-9]*/cmdline; echo done",
    )
    .await;
    assert!(out.ends_with("Output: done\n"), "{out}");
    // The command's own processes stay visible: itself, its children, ps.
    let out = output(
        &srv,
        "cat /proc/self/cmdline | tr '\\0' ' '; echo; sleep 1 & cat /proc/$!/cmdline | tr '\\0' ' '; echo; ps -e -o comm= | sort | tr '\\n' ' '; wait",
    )
    .await;
    let (head, ps) = out.rsplit_once("sleep 1 \n").expect("the child's cmdline");
    assert!(head.ends_with("Output: cat /proc/self/cmdline \n"), "{out}");
    // Only the command's own processes (the pipeline's last members may not
    // have started when ps read /proc).
    let names: Vec<&str> = ps.split_whitespace().collect();
    for must in ["bash", "ps", "sleep"] {
        assert!(names.contains(&must), "{out}");
    }
    assert!(
        names
            .iter()
            .all(|n| ["bash", "ps", "sleep", "sort", "tr"].contains(n)),
        "{out}"
    );
    drop(outsider.stdin.take());
    outsider.wait().unwrap();
}
