//! run_shell_command: exit codes, live output, timeouts that kill the whole
//! group, pipes held open by background children, bounded output, a scrubbed
//! environment.

use crate::support;

use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::sandbox::OutputLimits;
use toolsched::scheduler::SchedulerConfig;

/// A `run_shell_command` call of `command` with no other argument.
fn shell(id: &str, command: impl Into<String>) -> pb::FunctionCall {
    call(
        id,
        "run_shell_command",
        json!({ "command": command.into() }),
    )
}

fn result_of(events: &[Event], id: &str) -> serde_json::Map<String, serde_json::Value> {
    match terminal(events, id) {
        State::Success(s) => toolsched::api::convert::struct_to_json(s.result.unwrap()),
        other => panic!("{other:?}"),
    }
}

/// The command's output as the function response carries it (once: the
/// structured result has only its length, `output_bytes`).
fn command_output(events: &[Event], id: &str) -> String {
    let text = success_output(events, id);
    let start = text.find("\nOutput: ").expect("an Output section") + "\nOutput: ".len();
    let rest = &text[start..];
    let end = [
        rest.rfind("\nExit Code: "),
        rest.rfind("\nSignal: "),
        // The kept-output note (tests/kept_output.rs) follows the output.
        rest.rfind("\n[The output was longer than the cap"),
    ]
    .into_iter()
    .flatten()
    .min()
    .unwrap_or(rest.len());
    rest[..end].to_string()
}

/// The longest command the shell tool takes (one byte more is an invalid
/// argument: tests/policy_invalid_params.rs) reaches bash whole.
#[tokio::test]
async fn a_command_of_the_longest_length_runs() {
    let srv = TestServer::with_config(yolo()).await;
    let word = "x".repeat(toolsched::tools::MAX_COMMAND_BYTES - "printf %s ".len());
    let command = format!("printf %s {word}");
    assert_eq!(command.len(), toolsched::tools::MAX_COMMAND_BYTES);
    let events = srv.run("s", vec![shell("sh", command)]).await;
    assert_eq!(result_of(&events, "sh")["exit_code"], 0);
    assert_eq!(command_output(&events, "sh"), word);
}

#[tokio::test]
async fn non_zero_exit_is_a_success_carrying_the_exit_code() {
    let srv = TestServer::with_config(yolo()).await;
    let events = srv
        .run("s", vec![shell("sh", "echo out; echo err >&2; exit 3")])
        .await;
    let result = result_of(&events, "sh");
    assert_eq!(result["exit_code"], 3);
    let out = command_output(&events, "sh");
    assert_eq!(result["output_bytes"], out.len());
    assert!(out.contains("out\n") && out.contains("err\n"), "{out}");
    assert!(success_output(&events, "sh").ends_with("Exit Code: 3"));
    // Live output arrived as Executing progress before the Success.
    let chunks: String = events
        .iter()
        .filter_map(|e| match e {
            Event::CallUpdate(pb::ToolCallUpdate {
                state: Some(State::Executing(x)),
                ..
            }) => Some(x.output_chunk.clone()),
            _ => None,
        })
        .collect();
    assert!(
        chunks.contains("out\n") && chunks.contains("err\n"),
        "{chunks}"
    );
}

#[tokio::test]
async fn timeout_kills_the_group_even_with_a_grandchild_holding_the_pipe() {
    let srv = TestServer::with_config(yolo()).await;
    let events = srv
        .run(
            "s",
            vec![call("sh", "run_shell_command", json!({"command": "(sleep 1000 &); echo partial; echo $$ > pid; sleep 1000", "timeout": 1}))],
        )
        .await;
    assert_eq!(
        states(&events, "sh"),
        ["validating", "scheduled", "executing", "error"]
    );
    match terminal(&events, "sh") {
        State::Error(e) => {
            assert_eq!(e.r#type, pb::ErrorType::ExecutionTimeout as i32);
            let resp = response_json(e.response.as_ref().unwrap());
            assert!(
                resp["output"].as_str().unwrap().contains("partial"),
                "{resp:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    let pgid: i32 = std::fs::read_to_string(srv.path("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_group_gone(pgid).await,
        "group {pgid} survived the timeout"
    );
}

#[tokio::test]
async fn finishing_does_not_hang_on_a_background_child_holding_the_pipe() {
    let srv = TestServer::with_config(yolo()).await;
    // The escaped grandchild keeps stdout open for 30 s; the call still ends
    // as soon as bash exits (bounded drain), well within the stream timeout.
    let events = srv
        .run("s", vec![shell("sh", "setsid sleep 30 & echo done")])
        .await;
    let result = result_of(&events, "sh");
    assert_eq!(result["exit_code"], 0);
    assert_eq!(command_output(&events, "sh"), "done\n");
}

/// stdout and stderr are one stream, in the order the command wrote them,
/// and complete: what was written just before the command exited (more
/// than a pipe holds) is all there when the call ends on the worker's
/// report, which no longer waits for the pipe's end of file. With the
/// tests' default sandbox and confined.
#[tokio::test]
async fn stdout_and_stderr_arrive_whole_in_the_order_written() {
    let command = "for i in $(seq 300); do echo out$i; echo err$i >&2; done; \
                   head -c 300000 /dev/zero | tr '\\0' x; echo; echo end >&2";
    let mut expected: String = (1..=300).map(|i| format!("out{i}\nerr{i}\n")).collect();
    expected.push_str(&"x".repeat(300_000));
    expected.push_str("\nend\n");
    for config in [yolo(), yolo_confined()] {
        let srv = TestServer::with_config(config).await;
        for round in 0..3 {
            let events = srv.run("s", vec![shell("sh", command)]).await;
            assert_eq!(result_of(&events, "sh")["exit_code"], 0);
            let out = command_output(&events, "sh");
            assert_eq!(out.len(), expected.len(), "round {round}");
            assert!(out == expected, "round {round}: the output differs");
        }
    }
}

/// A pipe in packet mode (`O_DIRECT`: each read returns one write) and
/// grown to 1 MiB holds up to 256 small writes when the command exits:
/// all of them are read at the report (a breaker lost ~240 lines when a
/// fixed number of reads was made).
#[tokio::test]
async fn output_left_in_a_packet_mode_pipe_is_read_whole() {
    let command = "/usr/bin/python3 -c \"import fcntl, os; fcntl.fcntl(1, 1031, 1 << 20); \
                   fcntl.fcntl(1, fcntl.F_SETFL, fcntl.fcntl(1, fcntl.F_GETFL) | os.O_DIRECT); \
                   [os.write(1, b'%05d\\n' % i) for i in range(3000)]\"";
    let expected: String = (0..3000).map(|i| format!("{i:05}\n")).collect();
    for config in [yolo(), yolo_confined()] {
        let srv = TestServer::with_config(config).await;
        for round in 0..3 {
            let events = srv.run("s", vec![shell("sh", command)]).await;
            assert_eq!(result_of(&events, "sh")["exit_code"], 0, "{events:?}");
            let out = command_output(&events, "sh");
            assert!(
                out == expected,
                "round {round}: {} of {} bytes",
                out.len(),
                expected.len()
            );
        }
    }
}

#[tokio::test]
async fn output_is_bounded_to_head_and_tail() {
    let srv = TestServer::with_config(SchedulerConfig {
        output: OutputLimits {
            max_bytes: 1000,
            max_streamed_bytes: 100,
        },
        ..yolo()
    })
    .await;
    let events = srv
        .run(
            "s",
            vec![shell(
                "sh",
                "echo HEAD; yes filler | head -c 100000; echo; echo TAIL",
            )],
        )
        .await;
    let out = command_output(&events, "sh");
    assert_eq!(result_of(&events, "sh")["output_bytes"], out.len());
    assert!(out.starts_with("HEAD\n"), "{}", &out[..20]);
    assert!(out.ends_with("TAIL\n"));
    assert!(out.contains("bytes of output omitted"));
    assert!(out.len() < 1100, "{}", out.len());
    let streamed: usize = events
        .iter()
        .filter_map(|e| match e {
            Event::CallUpdate(pb::ToolCallUpdate {
                state: Some(State::Executing(x)),
                ..
            }) => Some(x.output_chunk.len()),
            _ => None,
        })
        .sum();
    assert!(streamed <= 100, "streamed {streamed} bytes");
}

#[tokio::test]
async fn the_environment_is_scrubbed_and_stdin_is_closed() {
    // The test process runs under cargo, whose CARGO_* variables stand for
    // whatever the server's environment holds.
    let srv = TestServer::with_config(yolo()).await;
    let events = srv
        .run(
            "s",
            vec![shell(
                "sh",
                "env | cut -d= -f1 | sort | tr '\\n' ' '; read x || echo stdin-closed",
            )],
        )
        .await;
    let out = command_output(&events, "sh");
    assert_eq!(result_of(&events, "sh")["output_bytes"], out.len());
    assert!(out.contains("stdin-closed"), "{out}");
    assert!(!out.contains("CARGO"), "server env leaked: {out}");
}

/// Every live output chunk of `id`, joined.
fn streamed(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            Event::CallUpdate(pb::ToolCallUpdate {
                state: Some(State::Executing(x)),
                ..
            }) => Some(x.output_chunk.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn binary_output_is_detected_counted_and_never_streamed() {
    let srv = TestServer::with_config(yolo_confined()).await;
    for (command, text, bytes) in [
        // The example: text, then binary bytes.
        (
            "printf 'text before\\n'; head -c 70000 /dev/zero",
            "text before\n",
            70000,
        ),
        // Not UTF-8 from the first byte on, then random bytes.
        ("printf '\\377\\376'; head -c 49998 /dev/urandom", "", 50000),
        // An ELF binary after a line of text (its first NUL is byte 7:
        // `\x7fELF\x02\x01\x01` are characters).
        (
            "echo header; cat /bin/true",
            "header\n\u{7f}ELF\u{2}\u{1}\u{1}",
            std::fs::metadata("/bin/true").unwrap().len() - 7,
        ),
    ] {
        let events = srv.run("s", vec![shell("b", command)]).await;
        let result = result_of(&events, "b");
        let out = command_output(&events, "b");
        assert_eq!(
            result["output_bytes"].as_u64(),
            Some(out.len() as u64),
            "{command}"
        );
        let offset = text.len();
        assert_eq!(
            out,
            format!("{text}\n[binary output: {bytes} bytes from byte {offset} on, not shown]"),
            "{command}"
        );
        let live = streamed(&events);
        assert_eq!(
            live,
            format!("{text}\n[binary output detected at byte {offset}: not streamed]\n"),
            "{command}"
        );
        let all = format!("{events:?}");
        assert!(
            !all.contains('\u{fffd}') && !all.contains("\\u{fffd}"),
            "{command}"
        );
    }
}

/// The call ends on the worker's own final report only: a line someone
/// else writes on the status pipe does not end it. At level `none` the
/// command (the server's uid, every capability) can open its worker's
/// status pipe through `/proc`; a final report it writes there was taken
/// for the worker's, ending the call (success, exit code 0) while the
/// command ran on, past its timeout and cancel.
#[tokio::test]
async fn a_final_report_forged_on_the_status_pipe_does_not_end_the_call() {
    let forge = r#"perl -e 'open(my $f, ">", "/proc/$ARGV[0]/fd/3") or die "open: $!\n"; syswrite($f, qq({"exit_code":0}\n))' $PPID"#;
    a_line_on_the_status_pipe_does_not_end_the_call(forge).await;
}

/// Nor does more than the reader keeps of the status pipe (64 KiB): it
/// stopped reading there, which was taken for end of file (the worker
/// reaped), ending the call while the command ran on.
#[tokio::test]
async fn a_flood_on_the_status_pipe_does_not_end_the_call() {
    let flood = r#"perl -e 'open(my $f, ">", "/proc/$ARGV[0]/fd/3") or die "open: $!\n"; syswrite($f, "x" x 70000)' $PPID"#;
    a_line_on_the_status_pipe_does_not_end_the_call(flood).await;
}

/// Runs `forge` (which writes on its worker's status pipe, `$PPID`'s fd 3)
/// at level `none`, then waits on a FIFO: the call must still be running
/// when the FIFO is written, and end with the command's own exit code.
async fn a_line_on_the_status_pipe_does_not_end_the_call(forge: &str) {
    let srv = TestServer::with_config(SchedulerConfig {
        sandbox: toolsched::sandbox::SandboxConfig {
            level: toolsched::sandbox::SandboxLevel::None,
            ..Default::default()
        },
        ..yolo()
    })
    .await;
    let fifo = srv.path("go.fifo");
    mkfifo(&fifo);
    let command = format!("{forge} && echo forged; read -r line < go.fifo; echo released; exit 3");
    let mut stream = srv
        .schedule(
            "s",
            vec![call(
                "sh",
                "run_shell_command",
                json!({"command": command, "timeout": 30}),
            )],
        )
        .await;
    let mut seen = Vec::new();
    next_matching(&mut stream, &mut seen, |e| {
        matches!(e, Event::CallUpdate(pb::ToolCallUpdate { state: Some(State::Executing(x)), .. }) if x.output_chunk.contains("forged"))
    })
    .await;
    // The command still runs (it waits on the FIFO): released, it ends.
    // Bounded: a command already gone leaves the FIFO without a reader.
    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        tokio::task::spawn_blocking(move || std::fs::write(fifo, "go\n")),
    )
    .await
    .expect("the command no longer reads its FIFO")
    .unwrap()
    .unwrap();
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "sh"),
        ["validating", "scheduled", "executing", "success"]
    );
    let result = result_of(&seen, "sh");
    assert_eq!(result["exit_code"], 3, "{result:?}");
    assert_eq!(command_output(&seen, "sh"), "forged\nreleased\n");
}
