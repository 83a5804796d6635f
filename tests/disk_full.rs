//! A full disk: the real `toolsched` binary serves a workspace on a 256 KiB
//! tmpfs mounted in its own mount namespace (`unshare`, in a user namespace
//! so no privilege is needed and nothing is mounted on the host). Writes
//! that do not fit end in `no_space_left`, the file they targeted is left
//! as it was, and no temp file is left behind.

use crate::support;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use support::*;
use toolsched::api::pb::ErrorType;
use toolsched::api::pb::tool_scheduler_client::ToolSchedulerClient;

/// Size of the tmpfs the workspace lives on.
const DISK: &str = "256k";

struct FullDisk {
    child: Child,
    addr: SocketAddr,
    _mountpoint: tempfile::TempDir,
}

impl FullDisk {
    fn start() -> Self {
        let mountpoint = tempfile::tempdir().unwrap();
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let mut child = Command::new("unshare")
            .args(["--user", "--map-root-user", "--mount", "sh", "-c"])
            .arg(format!(
                "mount -t tmpfs -o size={DISK} tmpfs \"$0\" && exec \"$1\" --listen \"$2\" --workspace \"$0\" --approval-mode yolo"
            ))
            .arg(mountpoint.path())
            .arg(env!("CARGO_BIN_EXE_toolsched"))
            .arg(addr.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("unshare (util-linux) runs");
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                let out = child.wait_with_output().unwrap();
                panic!(
                    "cannot run the disk-full test: `unshare --user --mount` + tmpfs + toolsched exited with {status}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            assert!(
                Instant::now() < deadline,
                "toolsched did not listen within 60 s"
            );
            std::thread::yield_now();
        }
        Self {
            child,
            addr,
            _mountpoint: mountpoint,
        }
    }
}

impl Drop for FullDisk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn writes_that_do_not_fit_are_no_space_left_and_leave_the_file_intact() {
    let disk = FullDisk::start();
    let client = ToolSchedulerClient::connect(format!("http://{}", disk.addr))
        .await
        .unwrap();
    let run = |name: &'static str, args: serde_json::Value| {
        let mut client = client.clone();
        async move {
            let stream = client
                .schedule_calls(request("s", vec![call("c", name, args)]))
                .await
                .unwrap()
                .into_inner();
            collect(stream).await
        }
    };
    let big = "x".repeat(400 * 1024);

    let events = run(
        "write_file",
        json!({"file_path": "f.txt", "content": "hello\n"}),
    )
    .await;
    assert_eq!(
        success_output(&events, "c"),
        "Successfully created and wrote to new file: f.txt."
    );

    let calls = [
        ("write_file", json!({"file_path": "f.txt", "content": big})),
        (
            "write_file",
            json!({"file_path": "new.txt", "content": big}),
        ),
        (
            "replace",
            json!({"file_path": "f.txt", "old_string": "hello", "new_string": big}),
        ),
    ];
    for (tool, args) in calls {
        let events = run(tool, args).await;
        assert_eq!(
            states(&events, "c"),
            ["validating", "scheduled", "executing", "error"],
            "{tool}"
        );
        let (kind, message) = error_of(&events, "c");
        assert_eq!(kind, ErrorType::NoSpaceLeft, "{tool}: {message}");
        assert!(
            message.starts_with("No space left on the device while writing "),
            "{message}"
        );
    }

    let events = run("read_file", json!({"file_path": "f.txt"})).await;
    assert_eq!(success_output(&events, "c"), "hello\n");
    let events = run("list_directory", json!({"dir_path": "."})).await;
    assert_eq!(
        success_output(&events, "c"),
        "Directory listing for .:\nf.txt\n",
        "no temp file is left behind"
    );
}
