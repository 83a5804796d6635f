//! Search patterns are bounded before they compile (issue 11 item 6): an
//! over-long pattern is `invalid_tool_params` naming its length and limit,
//! without repeating it; a pattern within the length whose compiled form is
//! too large is refused by the size limit the compiler checks as it builds.

use crate::support;

use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::tools::pattern::*;

#[tokio::test]
async fn over_long_or_over_large_patterns_are_refused_before_they_run() {
    let srv = TestServer::start().await;
    std::fs::write(srv.path("a.txt"), "needle\n").unwrap();
    let three_mb = "a".repeat(3 << 20);
    let long_glob = "*".repeat(MAX_GLOB_PATTERN_BYTES + 1);
    let many: Vec<String> = (0..=MAX_IGNORE_PATTERNS).map(|i| format!("x{i}")).collect();
    let cases = [
        // The example: a 3 MB grep_search pattern.
        (
            "grep_search",
            json!({"pattern": three_mb}),
            format!(
                "argument 'pattern': the pattern is {} bytes; at most {MAX_REGEX_PATTERN_BYTES}",
                three_mb.len()
            ),
        ),
        (
            "grep_search",
            json!({"pattern": "needle", "include_pattern": long_glob}),
            format!(
                "argument 'include_pattern': the pattern is {} bytes; at most {MAX_GLOB_PATTERN_BYTES}",
                long_glob.len()
            ),
        ),
        (
            "glob",
            json!({"pattern": long_glob}),
            format!(
                "argument 'pattern': the pattern is {} bytes; at most {MAX_GLOB_PATTERN_BYTES}",
                long_glob.len()
            ),
        ),
        (
            "list_directory",
            json!({"dir_path": ".", "ignore": [long_glob]}),
            format!(
                "argument 'ignore/0': the pattern is {} bytes; at most {MAX_GLOB_PATTERN_BYTES}",
                long_glob.len()
            ),
        ),
        (
            "list_directory",
            json!({"dir_path": ".", "ignore": many}),
            format!(
                "argument 'ignore': {} patterns; at most {MAX_IGNORE_PATTERNS}",
                MAX_IGNORE_PATTERNS + 1
            ),
        ),
        // Short, but compiled far beyond the size limit.
        (
            "grep_search",
            json!({"pattern": "(?:\\w{1000}){100}"}),
            format!(
                "argument 'pattern': not a valid regular expression (or larger than {REGEX_SIZE_LIMIT_BYTES} bytes compiled)"
            ),
        ),
    ];
    for (i, (tool, args, needle)) in cases.into_iter().enumerate() {
        let id = format!("c{i}");
        let events = srv.run("s", vec![call(&id, tool, args)]).await;
        assert_eq!(states(&events, &id), ["error"], "{needle}");
        let (kind, msg) = error_of(&events, &id);
        assert_eq!(kind, pb::ErrorType::InvalidToolParams, "{msg}");
        assert!(
            msg.starts_with(&needle),
            "{needle}\n{}",
            &msg[..msg.len().min(500)]
        );
        assert!(
            msg.len() < 1000,
            "the message repeats the pattern: {} bytes",
            msg.len()
        );
    }
    // At the limits, patterns still work.
    let pattern = format!("needle|{}", "z".repeat(MAX_REGEX_PATTERN_BYTES - 7));
    let events = srv
        .run(
            "s",
            vec![call("ok", "grep_search", json!({"pattern": pattern}))],
        )
        .await;
    assert!(success_output(&events, "ok").contains("L1: needle"));
}
