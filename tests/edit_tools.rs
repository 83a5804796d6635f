//! `replace` over gRPC on real files: byte-exact edits of CRLF, BOM,
//! no-final-newline, Latin-1 and UTF-16 files, literal `$` and `\` in
//! new_string, every error type, approval diffs, inline modification, two
//! approved edits of one file in one batch, and an edit applied to the file
//! as it is at execution.

use crate::file_support;
use crate::support;

use file_support::*;
use serde_json::json;
use support::*;
use toolsched::api::pb::{self, ErrorType};

fn utf16(bom: &[u8], text: &str, le: bool) -> Vec<u8> {
    let mut out = bom.to_vec();
    for unit in text.encode_utf16() {
        out.extend(if le {
            unit.to_le_bytes()
        } else {
            unit.to_be_bytes()
        });
    }
    out
}

/// Runs `replace` on `rel` (created with `before`) and asserts the bytes
/// after.
async fn edit_exact(
    srv: &TestServer,
    rel: &str,
    before: &[u8],
    old: &str,
    new: &str,
    after: &[u8],
) {
    put(srv, rel, before);
    let events = run_one(
        srv,
        "replace",
        json!({"file_path": rel, "old_string": old, "new_string": new}),
    )
    .await;
    assert_eq!(
        ok_output(&events),
        format!("Successfully modified file: {rel} (1 replacement).")
    );
    assert_eq!(
        bytes(srv, rel),
        after,
        "{rel}: {:?}",
        String::from_utf8_lossy(&bytes(srv, rel))
    );
}

#[tokio::test]
async fn edits_are_byte_exact_in_every_encoding_and_line_ending() {
    let srv = TestServer::with_config(yolo()).await;
    // CRLF: '\n' in old_string matches "\r\n"; new lines get "\r\n".
    edit_exact(
        &srv,
        "crlf.rs",
        b"fn a() {\r\n    x();\r\n}\r\n",
        "    x();\n}\n",
        "    y();\n    z();\n}\n",
        b"fn a() {\r\n    y();\r\n    z();\r\n}\r\n",
    )
    .await;
    // Mixed endings outside the edit stay as they were.
    edit_exact(
        &srv,
        "mixed.txt",
        b"a\r\nb\nc\r\n",
        "b",
        "B",
        b"a\r\nB\nc\r\n",
    )
    .await;
    // UTF-8 BOM kept.
    edit_exact(
        &srv,
        "bom.ini",
        b"\xEF\xBB\xBFkey = 1\nother = 2\n",
        "key = 1",
        "key = 10",
        b"\xEF\xBB\xBFkey = 10\nother = 2\n",
    )
    .await;
    // No final newline, trailing spaces kept.
    edit_exact(
        &srv,
        "nofinal.txt",
        b"keep  \n\tb = 1",
        "b = 1",
        "b = 2",
        b"keep  \n\tb = 2",
    )
    .await;
    // Latin-1 stays Latin-1, including new accented text.
    edit_exact(
        &srv,
        "latin1.txt",
        b"caf\xe9 = 1\nna\xefve\n",
        "caf\u{e9} = 1",
        "caf\u{e9} = 2 d\u{e9}j\u{e0}",
        b"caf\xe9 = 2 d\xe9j\xe0\nna\xefve\n",
    )
    .await;
    // UTF-16 with BOM, both byte orders, CRLF inside.
    edit_exact(
        &srv,
        "le.txt",
        &utf16(&[0xFF, 0xFE], "alpha\r\nbeta\r\n", true),
        "beta\n",
        "gamma \u{3b3}\n",
        &utf16(&[0xFF, 0xFE], "alpha\r\ngamma \u{3b3}\r\n", true),
    )
    .await;
    edit_exact(
        &srv,
        "be.txt",
        &utf16(&[0xFE, 0xFF], "one\ntwo\n", false),
        "one",
        "1",
        &utf16(&[0xFE, 0xFF], "1\ntwo\n", false),
    )
    .await;
}

#[tokio::test]
async fn new_string_is_inserted_literally() {
    let srv = TestServer::with_config(yolo()).await;
    let new = r#"s.replace(/(\d+)/, '$1 $& $$ $` $'' \1 \\ ${name} $0'); p = "C:\new\dir\\";"#;
    edit_exact(
        &srv,
        "x.js",
        b"// before\nPLACEHOLDER\n// after\n",
        "PLACEHOLDER",
        new,
        format!("// before\n{new}\n// after\n").as_bytes(),
    )
    .await;
    // And in a file created by replace.
    let events = run_one(
        &srv,
        "replace",
        json!({"file_path": "y.txt", "old_string": "", "new_string": new}),
    )
    .await;
    assert_eq!(
        ok_output(&events),
        "Created new file: y.txt with the provided content."
    );
    assert_eq!(bytes(&srv, "y.txt"), new.as_bytes());
}

#[tokio::test]
async fn occurrences_are_counted_and_allow_multiple_replaces_all() {
    let srv = TestServer::with_config(yolo()).await;
    put(&srv, "f.txt", "x = 1\ny = 1\nx = 1\n");
    let events = run_one(
        &srv,
        "replace",
        json!({"file_path": "f.txt", "old_string": "x = 1", "new_string": "x = 2"}),
    )
    .await;
    let (kind, message) = failed(&events, false);
    assert_eq!(kind, ErrorType::EditExpectedOccurrenceMismatch);
    assert_eq!(
        message,
        "Failed to edit, expected 1 occurrence but found 2 for old_string in f.txt. No edits were made. Add more surrounding context to old_string so it matches exactly once, or set allow_multiple to true to replace all 2."
    );
    assert_eq!(bytes(&srv, "f.txt"), b"x = 1\ny = 1\nx = 1\n");

    let events = run_one(
        &srv,
        "replace",
        json!({"file_path": "f.txt", "old_string": "x = 1", "new_string": "x = 2", "allow_multiple": true}),
    )
    .await;
    assert_eq!(
        ok_output(&events),
        "Successfully modified file: f.txt (2 replacements)."
    );
    assert_eq!(result_of(&events, "c")["occurrences"], json!(2));
    assert_eq!(bytes(&srv, "f.txt"), b"x = 2\ny = 1\nx = 2\n");
}

#[tokio::test]
async fn replace_error_types() {
    let srv = TestServer::with_config(yolo()).await;
    put(&srv, "f.txt", "hello\n");
    put(&srv, "latin1.txt", b"caf\xe9\n");
    put(&srv, "blob.bin", b"\x00\x01\x02");
    std::fs::create_dir(srv.path("dir")).unwrap();
    let replace = |path: &str, old: &str, new: &str| json!({"file_path": path, "old_string": old, "new_string": new});

    let events = run_one(&srv, "replace", replace("f.txt", "absent", "x")).await;
    let (kind, message) = failed(&events, false);
    assert_eq!(kind, ErrorType::EditNoOccurrenceFound);
    assert!(
        message.starts_with("Failed to edit, 0 occurrences found for old_string in f.txt."),
        "{message}"
    );
    assert!(message.contains("Use read_file"), "{message}");

    let events = run_one(&srv, "replace", replace("f.txt", "hello", "hello")).await;
    let (kind, message) = failed(&events, true);
    assert_eq!(kind, ErrorType::EditNoChange);
    assert!(
        message.starts_with("No changes to apply to f.txt"),
        "{message}"
    );

    let events = run_one(&srv, "replace", replace("f.txt", "", "new")).await;
    let (kind, message) = failed(&events, false);
    assert_eq!(kind, ErrorType::AttemptToCreateExistingFile);
    assert!(message.contains("f.txt already exists"), "{message}");

    let events = run_one(&srv, "replace", replace("missing.txt", "a", "b")).await;
    let (kind, message) = failed(&events, false);
    assert_eq!(kind, ErrorType::FileNotFound);
    assert!(
        message.starts_with("File not found: missing.txt."),
        "{message}"
    );

    let events = run_one(&srv, "replace", replace("dir", "a", "b")).await;
    let (kind, _) = failed(&events, true);
    assert_eq!(kind, ErrorType::TargetIsDirectory);

    let events = run_one(&srv, "replace", replace("blob.bin", "a", "b")).await;
    let (kind, message) = failed(&events, false);
    assert_eq!(kind, ErrorType::InvalidToolParams);
    assert_eq!(
        message,
        "blob.bin is a binary file, 3 bytes; replace only edits text files."
    );

    let events = run_one(
        &srv,
        "replace",
        replace("latin1.txt", "caf\u{e9}", "\u{2603}"),
    )
    .await;
    let (kind, message) = failed(&events, false);
    assert_eq!(kind, ErrorType::InvalidToolParams);
    assert!(
        message.starts_with(
            "argument 'new_string': the character '☃' (U+2603) cannot be written in windows-1252"
        ),
        "{message}"
    );
    assert_eq!(bytes(&srv, "latin1.txt"), b"caf\xe9\n");

    let f = std::fs::File::create(srv.path("huge.txt")).unwrap();
    f.set_len(17 * 1024 * 1024).unwrap();
    let events = run_one(&srv, "replace", replace("huge.txt", "a", "b")).await;
    let (kind, message) = failed(&events, false);
    assert_eq!(kind, ErrorType::FileTooLarge);
    assert!(
        message.contains("over the 16777216-byte limit"),
        "{message}"
    );

    let events = run_one(
        &srv,
        "replace",
        json!({"file_path": "f.txt", "old_string": "a"}),
    )
    .await;
    let (kind, message) = failed(&events, true);
    assert_eq!(kind, ErrorType::InvalidToolParams);
    assert!(message.contains("new_string"), "{message}");

    let events = run_one(
        &srv,
        "replace",
        json!({"file_path": "f.txt", "old_string": "a", "new_string": "b", "allow_multiple": "yes"}),
    )
    .await;
    let (kind, message) = failed(&events, true);
    assert_eq!(kind, ErrorType::InvalidToolParams);
    assert!(message.contains("allow_multiple"), "{message}");
}

#[tokio::test]
async fn a_file_that_cannot_be_written_is_permission_denied_and_untouched() {
    let srv = TestServer::with_config(yolo()).await;
    put(&srv, "ro/f.txt", "hello\n");
    let dir = srv.path("ro");
    // As an unprivileged user a read-only directory refuses the temp file
    // and the rename; root ignores modes, so there the file is made
    // immutable (ext4/xfs/btrfs `chattr +i`), which refuses the rename.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let root_ignores_modes = std::fs::write(dir.join("probe"), "x").is_ok();
    let mut immutable = false;
    if root_ignores_modes {
        std::fs::remove_file(dir.join("probe")).unwrap();
        let status = std::process::Command::new("chattr")
            .arg("+i")
            .arg(dir.join("f.txt"))
            .status()
            .expect("chattr (e2fsprogs) is needed to test permission_denied as root");
        assert!(
            status.success(),
            "chattr +i failed: this filesystem cannot make a file immutable, so permission_denied cannot be tested as root here"
        );
        immutable = true;
    }
    let calls = [
        (
            "replace",
            json!({"file_path": "ro/f.txt", "old_string": "hello", "new_string": "bye"}),
        ),
        (
            "write_file",
            json!({"file_path": "ro/f.txt", "content": "bye\n"}),
        ),
    ];
    let mut outcomes = Vec::new();
    for (tool, args) in calls {
        outcomes.push((tool, run_one(&srv, tool, args).await));
    }
    if immutable {
        std::process::Command::new("chattr")
            .arg("-i")
            .arg(dir.join("f.txt"))
            .status()
            .unwrap();
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (tool, events) in outcomes {
        let (kind, message) = failed(&events, false);
        assert_eq!(kind, ErrorType::PermissionDenied, "{tool}");
        assert_eq!(message, "Permission denied: ro/f.txt.", "{tool}");
    }
    assert_eq!(bytes(&srv, "ro/f.txt"), b"hello\n");
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["f.txt"], "no temp file left behind");
}

/// The edit prompt of `id`, from the stream.
async fn edit_prompt(
    stream: &mut tonic::Streaming<pb::ScheduleCallsResponse>,
    seen: &mut Vec<Event>,
    id: &str,
) -> (String, pb::EditConfirmation) {
    let prompt = await_prompt(stream, seen, id).await;
    match prompt.details {
        Some(pb::awaiting_approval::Details::Edit(edit)) => (prompt.correlation_id, edit),
        other => panic!("not an edit prompt: {other:?}"),
    }
}

#[tokio::test]
async fn two_approved_replaces_of_one_file_in_one_batch_both_land() {
    let srv = TestServer::start().await;
    put(&srv, "f.txt", "a = 1\nb = 1\n");
    let mut stream = srv
        .schedule(
            "s",
            vec![
                call(
                    "r1",
                    "replace",
                    json!({"file_path": "f.txt", "old_string": "a = 1", "new_string": "a = 2"}),
                ),
                call(
                    "r2",
                    "replace",
                    json!({"file_path": "f.txt", "old_string": "b = 1", "new_string": "b = 2"}),
                ),
            ],
        )
        .await;
    let mut seen = Vec::new();
    let (corr, edit) = edit_prompt(&mut stream, &mut seen, "r1").await;
    assert_eq!(edit.file_path, "f.txt");
    assert_eq!(
        edit.diff,
        "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n-a = 1\n+a = 2\n b = 1\n"
    );
    assert_eq!(edit.new_content, "a = 2");
    srv.confirm("s", "r1", &corr, pb::ConfirmationOutcome::ProceedOnce, None)
        .await
        .unwrap();
    // The second prompt diffs against the file as the first edit left it.
    let (corr, edit) = edit_prompt(&mut stream, &mut seen, "r2").await;
    assert_eq!(
        edit.diff,
        "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n a = 2\n-b = 1\n+b = 2\n"
    );
    srv.confirm("s", "r2", &corr, pb::ConfirmationOutcome::ProceedOnce, None)
        .await
        .unwrap();
    seen.extend(collect(stream).await);
    for id in ["r1", "r2"] {
        assert_eq!(
            states(&seen, id),
            [
                "validating",
                "awaiting_approval",
                "scheduled",
                "executing",
                "success"
            ],
            "{id}"
        );
    }
    assert_eq!(bytes(&srv, "f.txt"), b"a = 2\nb = 2\n");
}

#[tokio::test]
async fn the_edit_applies_to_the_file_as_it_is_at_execution() {
    let srv = TestServer::start().await;
    put(&srv, "f.txt", "keep\ntarget\n");

    // Changed elsewhere while the prompt was open: the edit applies to the
    // current content and keeps the other change.
    let mut stream = srv
        .schedule(
            "s",
            vec![call(
                "r",
                "replace",
                json!({"file_path": "f.txt", "old_string": "target", "new_string": "done"}),
            )],
        )
        .await;
    let mut seen = Vec::new();
    let (corr, _) = edit_prompt(&mut stream, &mut seen, "r").await;
    put(&srv, "f.txt", "someone else's line\nkeep\ntarget\n");
    srv.confirm("s", "r", &corr, pb::ConfirmationOutcome::ProceedOnce, None)
        .await
        .unwrap();
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "r"),
        [
            "validating",
            "awaiting_approval",
            "scheduled",
            "executing",
            "success"
        ]
    );
    assert_eq!(bytes(&srv, "f.txt"), b"someone else's line\nkeep\ndone\n");

    // Changed so the edit no longer applies: the call fails saying so and
    // nothing stale is written.
    let mut stream = srv
        .schedule(
            "s",
            vec![call(
                "r",
                "replace",
                json!({"file_path": "f.txt", "old_string": "keep", "new_string": "kept"}),
            )],
        )
        .await;
    let mut seen = Vec::new();
    let (corr, _) = edit_prompt(&mut stream, &mut seen, "r").await;
    put(&srv, "f.txt", "rewritten\n");
    srv.confirm("s", "r", &corr, pb::ConfirmationOutcome::ProceedOnce, None)
        .await
        .unwrap();
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "r"),
        [
            "validating",
            "awaiting_approval",
            "scheduled",
            "executing",
            "error"
        ]
    );
    let (kind, message) = error_of(&seen, "r");
    assert_eq!(kind, ErrorType::EditNoOccurrenceFound);
    assert!(
        message.contains("The file may have changed since you read it"),
        "{message}"
    );
    assert_eq!(bytes(&srv, "f.txt"), b"rewritten\n");
}

#[tokio::test]
async fn inline_new_content_replaces_new_string() {
    let srv = TestServer::start().await;
    put(&srv, "f.txt", "x = 1\r\n");
    let mut stream = srv
        .schedule(
            "s",
            vec![call(
                "r",
                "replace",
                json!({"file_path": "f.txt", "old_string": "x = 1", "new_string": "x = 2"}),
            )],
        )
        .await;
    let mut seen = Vec::new();
    let (corr, edit) = edit_prompt(&mut stream, &mut seen, "r").await;
    assert_eq!(
        edit.diff,
        "--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-x = 1\r\n+x = 2\r\n"
    );
    srv.confirm(
        "s",
        "r",
        &corr,
        pb::ConfirmationOutcome::ProceedOnce,
        Some("x = 42\ny = $1"),
    )
    .await
    .unwrap();
    seen.extend(collect(stream).await);
    assert_eq!(
        states(&seen, "r"),
        [
            "validating",
            "awaiting_approval",
            "scheduled",
            "executing",
            "success"
        ]
    );
    assert_eq!(bytes(&srv, "f.txt"), b"x = 42\r\ny = $1\r\n");
    // The model learns which argument the person changed, and to what.
    assert_eq!(
        success_response(&seen, "r")["user_modification"],
        "The user modified the `new_string` to be:\nx = 42\ny = $1"
    );
    let args = scheduled_args(&seen, "r").remove(0).expect("modified args");
    assert_eq!(args["new_string"], "x = 42\ny = $1");
    assert_eq!(args["old_string"], "x = 1");
}

#[tokio::test]
async fn a_prompt_for_an_edit_that_cannot_apply_is_never_shown() {
    let srv = TestServer::start().await;
    put(&srv, "f.txt", "hello\n");
    let events = srv
        .run(
            "s",
            vec![call(
                "c",
                "replace",
                json!({"file_path": "f.txt", "old_string": "nope", "new_string": "x"}),
            )],
        )
        .await;
    let (kind, _) = error_of(&events, "c");
    assert_eq!(kind, ErrorType::EditNoOccurrenceFound);
    assert_eq!(states(&events, "c"), ["validating", "error"]);
}
