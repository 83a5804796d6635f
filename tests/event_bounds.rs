//! Every message the server sends fits a client with gRPC's default
//! receive limit (4 MiB), whatever a tool returns (issue 11 item 4). The
//! harness's client has default limits: a message over 4 MiB would end its
//! stream with an error, so receiving the terminal event and BatchCompleted
//! is the proof; each test also measures what it received.

use crate::mcp_common;
use crate::support;

use mcp_common::*;
use prost::Message;
use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::sandbox::OutputLimits;
use toolsched::scheduler::SchedulerConfig;

const DEFAULT_CLIENT_LIMIT: usize = 4 * 1024 * 1024;

/// The encoded size of the largest call update in `events`.
fn largest_update(events: &[Event]) -> usize {
    events
        .iter()
        .filter_map(|e| match e {
            Event::CallUpdate(u) => Some(u.encoded_len()),
            Event::BatchCompleted(c) => Some(c.encoded_len()),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

fn big_text(n: usize) -> String {
    // Lines, so that a diff has many of them.
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefghijklmnopqrstuvwxyz\n"
        .repeat(n / 100)
}

/// A large write's prompt (the diff, itself cut at 512 KiB, and the whole
/// new content) is cut with a note and counts; the write, once approved,
/// writes every byte. Instances: a new 3.9 MB file (the example; the
/// request fits 4 MiB, its prompt would not), a 2 MB file replaced by other
/// 3.9 MB, and `replace` with a 3.9 MB new_string.
#[tokio::test]
async fn a_large_writes_prompt_fits_and_the_write_keeps_every_byte() {
    let srv = TestServer::start().await;
    let old = big_text(2_000_000);
    std::fs::write(srv.path("two.txt"), &old).unwrap();
    std::fs::write(srv.path("r.txt"), "MARK\n").unwrap();
    let three = big_text(3_900_000);
    let two_other = big_text(3_900_000).replace('a', "b");
    let cases = [
        (
            "new.txt",
            "write_file",
            json!({"file_path": "new.txt", "content": three}),
            three.clone(),
        ),
        (
            "two.txt",
            "write_file",
            json!({"file_path": "two.txt", "content": two_other}),
            two_other.clone(),
        ),
        (
            "r.txt",
            "replace",
            json!({"file_path": "r.txt", "old_string": "MARK", "new_string": three}),
            format!("{three}\n"),
        ),
    ];
    for (i, (file, tool, args, expected)) in cases.into_iter().enumerate() {
        let id = format!("w{i}");
        let mut stream = srv.schedule("s", vec![call(&id, tool, args)]).await;
        let mut seen = Vec::new();
        let prompt = await_prompt(&mut stream, &mut seen, &id).await;
        assert!(prompt.encoded_len() <= DEFAULT_CLIENT_LIMIT, "{file}");
        let Some(pb::awaiting_approval::Details::Edit(edit)) = &prompt.details else {
            panic!("{file}: {prompt:?}")
        };
        let cut = format!("{}{}", edit.diff, edit.new_content);
        assert!(
            cut.contains("bytes left out here so that the message fits max_event_bytes = 4194304; the server keeps the full content"),
            "{file}"
        );
        srv.confirm(
            "s",
            &id,
            &prompt.correlation_id,
            pb::ConfirmationOutcome::ProceedOnce,
            None,
        )
        .await
        .unwrap();
        seen.extend(collect(stream).await);
        assert_eq!(states(&seen, &id).last(), Some(&"success"), "{file}");
        assert_eq!(completed(&seen).responses.len(), 1);
        assert!(largest_update(&seen) <= DEFAULT_CLIENT_LIMIT, "{file}");
        let written = std::fs::read_to_string(srv.path(file)).unwrap();
        assert_eq!(written.len(), expected.len(), "{file}");
        assert!(written == expected, "{file}: the full content was written");
    }
}

/// A shell command's output is in its Success event once (the function
/// response), not twice; with the output cap raised as far as start-up
/// allows, the event still fits. Instances: 900 KB, 3 MB, and 3 MB on
/// stderr, under a 3.7 MiB cap.
#[tokio::test]
async fn shell_output_is_carried_once_and_fits_at_the_largest_cap() {
    let cap = 4 * 1024 * 1024 - toolsched::config::EVENT_HEADROOM_BYTES - 64 * 1024;
    let srv = TestServer::with_config(SchedulerConfig {
        output: OutputLimits {
            max_bytes: cap,
            max_streamed_bytes: cap,
        },
        ..yolo()
    })
    .await;
    for (id, command, bytes) in [
        ("small", "head -c 900000 /dev/zero | tr '\\0' a", 900_000),
        ("large", "head -c 3000000 /dev/zero | tr '\\0' b", 3_000_000),
        (
            "stderr",
            "head -c 3000000 /dev/zero | tr '\\0' c >&2",
            3_000_000,
        ),
    ] {
        let events = srv
            .run(
                "s",
                vec![call(id, "run_shell_command", json!({"command": command}))],
            )
            .await;
        let State::Success(s) = terminal(&events, id) else {
            panic!("{id}: {:?}", terminal(&events, id))
        };
        let result = toolsched::api::convert::struct_to_json(s.result.clone().unwrap());
        assert_eq!(result.get("output"), None, "{id}: no second copy");
        assert_eq!(result["output_bytes"], bytes, "{id}");
        assert_eq!(result["exit_code"], 0);
        let output = success_output(&events, id);
        assert!(
            output.len() > bytes && output.len() < bytes + 200,
            "{id}: {}",
            output.len()
        );
        let success = s.encoded_len();
        assert!(
            success < bytes + 1000,
            "{id}: Success event {success} bytes"
        );
        assert!(largest_update(&events) <= DEFAULT_CLIENT_LIMIT, "{id}");
        assert_eq!(completed(&events).responses.len(), 1);
    }
}

/// An MCP result is capped like a command's output (the example: 3 MB
/// became a 6 MB event, text plus FastMCP's structured copy). Instances:
/// 3 MB and 8 MB under the default cap, and 3 MB under a raised cap where
/// the event bound cuts what the cap let through.
#[tokio::test]
async fn an_oversized_mcp_result_is_capped_and_reaches_a_default_client() {
    for (cap, size) in [
        (None, 3_000_000usize),
        (None, 8_000_000),
        (Some(3_800_000usize), 3_000_000),
    ] {
        let mut config = yolo();
        if let Some(cap) = cap {
            config.output = OutputLimits {
                max_bytes: cap,
                max_streamed_bytes: cap,
            };
        }
        let srv = TestServer::with_mcp(config, servers(vec![("py", py(true))])).await;
        let events = collect(
            srv.schedule(
                "s",
                vec![call("m", "mcp_py_big_result", json!({"size": size}))],
            )
            .await,
        )
        .await;
        assert_eq!(states(&events, "m").last(), Some(&"success"), "{size}");
        let output = success_output(&events, "m");
        assert!(
            output.starts_with("HEAD") && output.ends_with("TAIL"),
            "{size}"
        );
        let limit = cap.unwrap_or(1024 * 1024);
        assert!(output.len() <= limit + 300, "{size}: {}", output.len());
        if cap.is_none() {
            assert!(
                output.contains(&format!(" of {size} bytes of the MCP result left out: over the output cap of {limit} bytes (output_cap_bytes)")),
                "{size}"
            );
        }
        let State::Success(s) = terminal(&events, "m") else {
            unreachable!()
        };
        let result = toolsched::api::convert::struct_to_json(s.result.unwrap());
        assert_eq!(result.get("structured_content"), None, "{size}: {result:?}");
        assert!(
            result["structured_content_omitted"]
                .as_str()
                .unwrap()
                .contains("left out")
        );
        assert!(largest_update(&events) <= DEFAULT_CLIENT_LIMIT, "{size}");
        assert_eq!(completed(&events).responses.len(), 1);
        srv.shutdown().await;
    }
}
