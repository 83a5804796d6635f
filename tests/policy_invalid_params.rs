//! Calls that cannot mean what they say are refused before they run or ask
//! (issue 11, item 18, as Gemini CLI refuses them): a shell command of only
//! whitespace, a `write_file` whose content holds an omission placeholder
//! (`// rest of methods ...`), a `replace` whose new_string holds one that
//! old_string does not. Each ends Validating → Error `invalid_tool_params`
//! in every mode, and nothing is written.

use crate::support;

use serde_json::json;
use support::*;
use toolsched::api::pb;

fn batch(calls: Vec<pb::FunctionCall>) -> pb::ScheduleCallsRequest {
    pb::ScheduleCallsRequest {
        session_id: "invalid".into(),
        calls,
        approval_mode: pb::ApprovalMode::Yolo as i32,
        interactive: Some(true),
        ..Default::default()
    }
}

const ORIGINAL: &str = "fn a() {}\nfn b() {}\n";

#[tokio::test]
async fn whitespace_commands_and_omission_placeholders_are_invalid_params() {
    let srv = TestServer::start().await;
    std::fs::write(srv.path("lib.rs"), ORIGINAL).unwrap();
    let shell = |id: &str, cmd: &str| call(id, "run_shell_command", json!({"command": cmd}));
    let write = |id: &str, content: &str| {
        call(
            id,
            "write_file",
            json!({"file_path": "lib.rs", "content": content}),
        )
    };
    let replace = |id: &str, old: &str, new: &str| {
        call(
            id,
            "replace",
            json!({"file_path": "lib.rs", "old_string": old, "new_string": new}),
        )
    };
    let cases: Vec<(pb::FunctionCall, &str)> = vec![
        (
            shell("sh-space", " "),
            "argument 'command' is empty or only whitespace",
        ),
        (
            shell("sh-tabs", "\t\n  \n"),
            "argument 'command' is empty or only whitespace",
        ),
        (
            shell("sh-cr", "\r\n"),
            "argument 'command' is empty or only whitespace",
        ),
        (
            shell("sh-long", &format!("echo {}", "x".repeat(131_067))),
            "argument 'command' is 131072 bytes; bash takes at most 131071",
        ),
        (
            write("w-methods", "fn a() {}\n    // rest of methods ...\n"),
            "argument 'content' holds an omission placeholder on line 2 (`// rest of methods ...`)",
        ),
        (
            write("w-hash", "def a():\n    pass\n# ... rest of code\n"),
            "on line 3 (`# ... rest of code`)",
        ),
        (
            write("w-block", "int a;\n/* ... */\n"),
            "on line 2 (`/* ... */`)",
        ),
        (
            write("w-html", "<ul>\n  <!-- ... -->\n</ul>\n"),
            "on line 2 (`<!-- ... -->`)",
        ),
        (
            replace(
                "r-new",
                "fn b() {}",
                "fn b() { c() }\n// unchanged code ...",
            ),
            "argument 'new_string' holds an omission placeholder on line 2 (`// unchanged code ...`)",
        ),
        (
            replace("r-dots", "fn a() {}", "fn a() {\n    // …\n}"),
            "argument 'new_string' holds an omission placeholder on line 2 (`// …`)",
        ),
    ];
    let calls = cases.iter().map(|(c, _)| c.clone()).collect();
    let events = collect(srv.schedule_with(batch(calls)).await).await;
    for (c, want) in &cases {
        assert_eq!(states(&events, &c.id), ["error"], "{}", c.id);
        let (kind, message) = error_of(&events, &c.id);
        assert_eq!(
            kind,
            pb::ErrorType::InvalidToolParams,
            "{}: {message}",
            c.id
        );
        assert!(message.contains(want), "{}: {message}", c.id);
    }
    assert_eq!(
        std::fs::read_to_string(srv.path("lib.rs")).unwrap(),
        ORIGINAL
    );
}

#[tokio::test]
async fn ordinary_ellipses_and_a_placeholder_kept_from_old_string_are_fine() {
    let srv = TestServer::start().await;
    std::fs::write(srv.path("a.py"), "def f():\n    # ...\n    return 1\n").unwrap();
    let calls = vec![
        // Python's Ellipsis and a comment that mentions "rest of" in prose.
        call(
            "w-python",
            "write_file",
            json!({"file_path": "b.py", "content": "def g():\n    ...\n# handle the rest of the input later\n"}),
        ),
        // The placeholder was already in the file: replacing around it is
        // an exact edit (as Gemini CLI allows).
        call(
            "r-kept",
            "replace",
            json!({"file_path": "a.py", "old_string": "    # ...\n    return 1", "new_string": "    # ...\n    return 2"}),
        ),
        call("sh", "run_shell_command", json!({"command": "  echo ok  "})),
    ];
    let events = collect(srv.schedule_with(batch(calls)).await).await;
    for id in ["w-python", "r-kept", "sh"] {
        assert_eq!(
            states(&events, id),
            ["validating", "scheduled", "executing", "success"],
            "{id}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(srv.path("a.py")).unwrap(),
        "def f():\n    # ...\n    return 2\n"
    );
    assert!(success_output(&events, "sh").contains("ok"));
}
