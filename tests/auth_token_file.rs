//! The bearer token on a network address, with the real binary: read from a
//! file (a Kubernetes Secret mounted as one), refused at start-up when it is
//! a placeholder or too short, saying why and never echoing it.

use crate::support;

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use toolsched::api::pb::tool_scheduler_client::ToolSchedulerClient;

/// Runs `toolsched serve` on 0.0.0.0:0 with the token in `token_file`.
fn serve_on_all_addresses(workspace: &std::path::Path, token_file: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolsched"));
    command
        .args(["serve", "--listen", "0.0.0.0:0", "--log-format", "json"])
        .arg("--workspace")
        .arg(workspace)
        .arg("--auth-token-file")
        .arg(token_file)
        // No TLS in this test: the token crosses loopback only.
        .arg("--allow-plaintext-bearer")
        .env_remove("TOOLSCHED_AUTH_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

#[test]
fn placeholder_and_short_tokens_stop_start_up_with_the_reason() {
    let ws = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    for (token, reason) in [
        (
            "change-me\n",
            "it contains the placeholder word 'change-me'",
        ),
        (
            "Zq81-short-but-random\n",
            "it is 21 bytes; at least 32 are needed",
        ),
    ] {
        std::fs::write(&token_file, token).unwrap();
        let mut child = serve_on_all_addresses(ws.path(), &token_file)
            .spawn()
            .unwrap();
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(1), "{stderr}");
        let expected = format!(
            "the auth token in {} is not usable on the non-loopback address 0.0.0.0:0: {reason}; generate one with e.g. `openssl rand -hex 32`",
            token_file.display()
        );
        assert!(stderr.contains(&expected), "{stderr}");
        // A real (if short) token is never echoed; a placeholder word is
        // named, as it is no secret.
        if !token.starts_with("change-me") {
            assert!(
                !stderr.contains(token.trim()),
                "the token was echoed: {stderr}"
            );
        }
        assert!(!stderr.contains("toolsched serving"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_from_a_file_guards_a_network_listener() {
    use std::io::BufRead as _;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a"), "a\n").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    let token = "9b1f0c4e7a2d58e3c6b4f1a09d8e7c6b5a4f3e2d1c0b9a88";
    // As `kubectl create secret --from-file` leaves it: a final newline.
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let mut child = serve_on_all_addresses(ws.path(), &token_file)
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let port = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("toolsched serving within 60 s");
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if v["message"] == "toolsched serving" {
            let addr: std::net::SocketAddr = v["listen"].as_str().unwrap().parse().unwrap();
            assert!(addr.ip().is_unspecified(), "{addr}");
            break addr.port();
        }
    };
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut anonymous = ToolSchedulerClient::new(channel.clone());
    let refused = anonymous
        .schedule_calls(request(
            "t",
            vec![call("r", "read_file", json!({"file_path": "a"}))],
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);

    let bearer: tonic::metadata::MetadataValue<_> = format!("Bearer {token}").parse().unwrap();
    let mut client =
        ToolSchedulerClient::with_interceptor(channel, move |mut r: tonic::Request<()>| {
            r.metadata_mut().insert("authorization", bearer.clone());
            Ok(r)
        });
    let events = collect(
        client
            .schedule_calls(request(
                "t",
                vec![call("r", "read_file", json!({"file_path": "a"}))],
            ))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    assert_eq!(success_output(&events, "r"), "a\n");
    let _ = child.kill();
    let _ = child.wait();
}
