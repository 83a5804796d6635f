//! read_file, write_file and list_directory over gRPC on real temp
//! directories: parameters, encodings, binary and inline data, every error
//! type, and the workspace boundary (symlinks out, a sibling sharing the
//! root's name prefix, `..`) for every file and search tool.

use crate::file_support;
use crate::support;

use file_support::*;
use serde_json::json;
use support::*;
use toolsched::api::pb::ErrorType;

fn numbered(n: usize) -> String {
    (1..=n).map(|i| format!("line {i}\n")).collect()
}

// === read_file ===

#[tokio::test]
async fn read_file_windows_lines_and_says_how_to_continue() {
    let srv = TestServer::start().await;
    put(&srv, "big.txt", numbered(3000));

    let events = run_one(&srv, "read_file", json!({"file_path": "big.txt"})).await;
    let expected = format!(
        "IMPORTANT: The file content has been truncated.\n\
         Status: Showing lines 1-2000 of 3000 total lines of big.txt.\n\
         Action: To read more of the file, call read_file again with start_line: 2001.\n\n\
         --- FILE CONTENT (truncated) ---\n{}",
        numbered(2000)
    );
    assert_eq!(ok_output(&events), expected);
    let result = result_of(&events, "c");
    assert_eq!(result["total_lines"], json!(3000));
    assert_eq!(result["end_line"], json!(2000));
    assert_eq!(result["truncated"], json!(true));
    assert_eq!(result["encoding"], json!("UTF-8"));

    let events = run_one(
        &srv,
        "read_file",
        json!({"file_path": "big.txt", "start_line": 2001}),
    )
    .await;
    let rest: String = (2001..=3000).map(|i| format!("line {i}\n")).collect();
    assert_eq!(
        ok_output(&events),
        format!(
            "IMPORTANT: The file content has been truncated.\n\
             Status: Showing lines 2001-3000 of 3000 total lines of big.txt.\n\n\
             --- FILE CONTENT (truncated) ---\n{rest}"
        )
    );

    let events = run_one(
        &srv,
        "read_file",
        json!({"file_path": "big.txt", "start_line": 5, "end_line": 6}),
    )
    .await;
    assert_eq!(
        ok_output(&events),
        "IMPORTANT: The file content has been truncated.\n\
         Status: Showing lines 5-6 of 3000 total lines of big.txt.\n\
         Action: To read more of the file, call read_file again with start_line: 7.\n\n\
         --- FILE CONTENT (truncated) ---\nline 5\nline 6\n"
    );
}

#[tokio::test]
async fn read_file_returns_a_small_file_as_is_and_crlf_as_lines() {
    let srv = TestServer::start().await;
    put(&srv, "a.txt", "alpha\nbeta");
    put(&srv, "dos.txt", "one\r\ntwo\r\n");
    put(&srv, "empty.txt", "");
    let events = run_one(&srv, "read_file", json!({"file_path": "a.txt"})).await;
    assert_eq!(ok_output(&events), "alpha\nbeta");
    let events = run_one(&srv, "read_file", json!({"file_path": "dos.txt"})).await;
    assert_eq!(ok_output(&events), "one\ntwo\n");
    assert_eq!(result_of(&events, "c")["crlf_lines"], json!(2));
    let events = run_one(&srv, "read_file", json!({"file_path": "empty.txt"})).await;
    assert_eq!(ok_output(&events), "");
    assert_eq!(result_of(&events, "c")["total_lines"], json!(0));
}

/// `--blocking-file-io` moves small reads to the blocking pool; what comes
/// back is the same, small (inline) and large (streamed) files alike.
#[tokio::test]
async fn read_file_gives_the_same_with_blocking_file_io() {
    let inline = TestServer::start().await;
    let blocking = TestServer::with_config(toolsched::scheduler::SchedulerConfig {
        blocking_file_io: true,
        ..Default::default()
    })
    .await;
    for srv in [&inline, &blocking] {
        put(srv, "dos.txt", "one\r\ntwo\r\n");
        put(srv, "big.txt", numbered(20_000));
    }
    for (file, start) in [("dos.txt", 1), ("big.txt", 19_999)] {
        let args = json!({"file_path": file, "start_line": start});
        let a = run_one(&inline, "read_file", args.clone()).await;
        let b = run_one(&blocking, "read_file", args).await;
        assert_eq!(ok_output(&a), ok_output(&b), "{file}");
        assert_eq!(result_of(&a, "c"), result_of(&b, "c"), "{file}");
    }
    let a = run_one(
        &inline,
        "read_file",
        json!({"file_path": "big.txt", "start_line": 19_999}),
    )
    .await;
    assert_eq!(ok_output(&a).lines().last(), Some("line 20000"));
}

#[tokio::test]
async fn read_file_detects_and_states_the_encoding_without_replacement_characters() {
    let srv = TestServer::start().await;
    let utf16le: Vec<u8> = [0xFF, 0xFE]
        .into_iter()
        .chain(
            "h\u{e9}llo\nw\u{f6}rld\n"
                .encode_utf16()
                .flat_map(u16::to_le_bytes),
        )
        .collect();
    let utf16be: Vec<u8> = [0xFE, 0xFF]
        .into_iter()
        .chain("\u{3b1}\u{3b2}\n".encode_utf16().flat_map(u16::to_be_bytes))
        .collect();
    put(&srv, "le.txt", &utf16le);
    put(&srv, "be.txt", &utf16be);
    put(&srv, "bom.txt", b"\xEF\xBB\xBFcaf\xC3\xA9\n");
    put(
        &srv,
        "latin1.txt",
        b"Fran\xe7ais: \xe9t\xe9, na\xefve, gar\xe7on, d\xe9j\xe0 vu\n",
    );
    let cases = [
        ("le.txt", "UTF-16LE with BOM", "h\u{e9}llo\nw\u{f6}rld\n"),
        ("be.txt", "UTF-16BE with BOM", "\u{3b1}\u{3b2}\n"),
        ("bom.txt", "UTF-8 with BOM", "caf\u{e9}\n"),
        (
            "latin1.txt",
            "windows-1252 (legacy single-byte encoding, detected)",
            "Fran\u{e7}ais: \u{e9}t\u{e9}, na\u{ef}ve, gar\u{e7}on, d\u{e9}j\u{e0} vu\n",
        ),
    ];
    for (file, encoding, text) in cases {
        let events = run_one(&srv, "read_file", json!({"file_path": file})).await;
        let output = ok_output(&events);
        assert_eq!(
            output,
            format!(
                "Encoding: {encoding}. The text below is decoded; edits keep the file's encoding.\n\n--- FILE CONTENT ---\n{text}"
            ),
            "{file}"
        );
        assert!(!output.contains('\u{fffd}'));
        assert_eq!(result_of(&events, "c")["encoding"], json!(encoding));
    }
}

#[tokio::test]
async fn read_file_reports_binary_files_and_inlines_images_and_pdf() {
    let srv = TestServer::start().await;
    put(&srv, "blob.bin", b"\x7fELF\x02\x01\x00\x00garbage\x00\x01");
    let png = [
        b"\x89PNG\r\n\x1a\n".as_slice(),
        b"\x00\x00\x00\x0dIHDR rest",
    ]
    .concat();
    put(&srv, "pic.png", &png);
    let pdf = b"%PDF-1.4\n1 0 obj\n<<>>\nendobj\n%%EOF\n".to_vec();
    put(&srv, "doc.pdf", &pdf);

    let events = run_one(&srv, "read_file", json!({"file_path": "blob.bin"})).await;
    assert_eq!(ok_output(&events), "binary file, 17 bytes");

    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let events = run_one(&srv, "read_file", json!({"file_path": "pic.png"})).await;
    assert_ran(&events);
    assert_eq!(
        output_json(&events, "c"),
        json!({"inlineData": {"mimeType": "image/png", "data": b64(&png)}})
    );
    let events = run_one(&srv, "read_file", json!({"file_path": "doc.pdf"})).await;
    assert_eq!(
        output_json(&events, "c"),
        json!({"inlineData": {"mimeType": "application/pdf", "data": b64(&pdf)}})
    );

    // An image over the inline limit is file_too_large.
    let mut huge = png.clone();
    huge.resize(3 * 1024 * 1024, 0);
    put(&srv, "huge.png", &huge);
    let events = run_one(&srv, "read_file", json!({"file_path": "huge.png"})).await;
    let (kind, message) = failed(&events, false);
    assert_eq!(kind, ErrorType::FileTooLarge);
    assert!(
        message.contains("huge.png is a image/png file of 3145728 bytes"),
        "{message}"
    );
}

#[tokio::test]
async fn read_file_error_types() {
    let srv = TestServer::start().await;
    put(&srv, "three.txt", "a\nb\nc\n");
    std::fs::create_dir(srv.path("dir")).unwrap();
    // Sparse: no disk blocks, but over the read limit.
    let f = std::fs::File::create(srv.path("sparse.log")).unwrap();
    f.set_len(513 * 1024 * 1024).unwrap();

    let events = run_one(&srv, "read_file", json!({"file_path": "missing.txt"})).await;
    let (kind, message) = failed(&events, false);
    assert_eq!(kind, ErrorType::FileNotFound);
    assert!(
        message.starts_with("File not found: missing.txt."),
        "{message}"
    );

    let events = run_one(&srv, "read_file", json!({"file_path": "three.txt/x"})).await;
    let (kind, message) = failed(&events, true);
    assert_eq!(kind, ErrorType::FileNotFound);
    assert!(
        message.contains("A file in the path is used as a directory"),
        "{message}"
    );

    let events = run_one(&srv, "read_file", json!({"file_path": "dir"})).await;
    let (kind, message) = failed(&events, false);
    assert_eq!(kind, ErrorType::TargetIsDirectory);
    assert!(message.contains("Use list_directory"), "{message}");

    let events = run_one(&srv, "read_file", json!({"file_path": "sparse.log"})).await;
    let (kind, message) = failed(&events, false);
    assert_eq!(kind, ErrorType::FileTooLarge);
    assert!(
        message.contains("sparse.log is 537919488 bytes"),
        "{message}"
    );

    let events = run_one(
        &srv,
        "read_file",
        json!({"file_path": "three.txt", "start_line": 3, "end_line": 2}),
    )
    .await;
    let (kind, message) = failed(&events, true);
    assert_eq!(kind, ErrorType::InvalidToolParams);
    assert_eq!(
        message,
        "argument 'start_line' (3) must not be greater than 'end_line' (2). Send start_line <= end_line."
    );

    // A trailing "/." or "/" on a file, or "/" naming no directory, is not
    // taken as the file (the last would create "new" as a file).
    let events = run_one(&srv, "read_file", json!({"file_path": "three.txt/."})).await;
    let (kind, _) = failed(&events, true);
    assert_eq!(kind, ErrorType::FileNotFound);
    let events = run_one(
        &srv,
        "write_file",
        json!({"file_path": "new/", "content": "x"}),
    )
    .await;
    let (kind, message) = failed(&events, true);
    assert_eq!(kind, ErrorType::InvalidToolParams);
    assert_eq!(
        message,
        "'new/' ends with '/', so it names a directory, and there is none there. Give the path of a file."
    );
    assert!(!srv.path("new").exists());

    let events = run_one(
        &srv,
        "read_file",
        json!({"file_path": "three.txt", "start_line": 9}),
    )
    .await;
    let (kind, message) = failed(&events, false);
    assert_eq!(kind, ErrorType::InvalidToolParams);
    assert!(
        message.contains("three.txt, which has 3 lines"),
        "{message}"
    );
}

#[tokio::test]
async fn schema_errors_name_the_field() {
    let srv = TestServer::start().await;
    let cases = [
        (json!({"file_path": "a", "start_line": 0}), "start_line"),
        (json!({"file_path": "a", "start_line": "one"}), "start_line"),
        (json!({}), "file_path"),
        (json!({"file_path": "a", "offset": 3}), "offset"),
        (json!({"file_path": ""}), "file_path"),
    ];
    for (args, field) in cases {
        let events = run_one(&srv, "read_file", args.clone()).await;
        let (kind, message) = failed(&events, true);
        assert_eq!(kind, ErrorType::InvalidToolParams, "{args}");
        assert!(message.contains(field), "{args}: {message}");
    }
}

// === write_file ===

#[tokio::test]
async fn write_file_creates_and_overwrites_keeping_encoding_line_endings_and_mode() {
    use std::os::unix::fs::PermissionsExt;
    let srv = TestServer::with_config(yolo()).await;
    let events = run_one(
        &srv,
        "write_file",
        json!({"file_path": "new/dir/f.txt", "content": "hi\n"}),
    )
    .await;
    assert_eq!(
        ok_output(&events),
        "Successfully created and wrote to new file: new/dir/f.txt."
    );
    assert_eq!(bytes(&srv, "new/dir/f.txt"), b"hi\n");
    let mode = std::fs::metadata(srv.path("new/dir/f.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644);

    // An existing CRLF, Latin-1, executable file keeps all three.
    put(&srv, "run.bat", b"@echo off\r\necho caf\xe9\r\n");
    std::fs::set_permissions(srv.path("run.bat"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let events = run_one(
        &srv,
        "write_file",
        json!({"file_path": "run.bat", "content": "@echo off\necho d\u{e9}j\u{e0} vu\n"}),
    )
    .await;
    assert_eq!(ok_output(&events), "Successfully overwrote file: run.bat.");
    assert_eq!(
        bytes(&srv, "run.bat"),
        b"@echo off\r\necho d\xe9j\xe0 vu\r\n"
    );
    let mode = std::fs::metadata(srv.path("run.bat"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);

    // A character the file's encoding cannot hold is refused, file intact.
    let events = run_one(
        &srv,
        "write_file",
        json!({"file_path": "run.bat", "content": "\u{4e2d}\n"}),
    )
    .await;
    let (kind, message) = failed(&events, false);
    assert_eq!(kind, ErrorType::InvalidToolParams);
    assert!(
        message.starts_with(
            "argument 'content': the character '中' (U+4E2D) cannot be written in windows-1252"
        ),
        "{message}"
    );
    assert_eq!(
        bytes(&srv, "run.bat"),
        b"@echo off\r\necho d\xe9j\xe0 vu\r\n"
    );

    // No temp file is left behind.
    let mut names: Vec<String> = std::fs::read_dir(srv.workspace.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["new", "run.bat"]);

    std::fs::create_dir(srv.path("adir")).unwrap();
    let events = run_one(
        &srv,
        "write_file",
        json!({"file_path": "adir", "content": "x"}),
    )
    .await;
    let (kind, _) = failed(&events, true);
    assert_eq!(kind, ErrorType::TargetIsDirectory);
}

#[tokio::test]
async fn write_file_prompt_carries_a_unified_diff_and_modified_content_is_written() {
    let srv = TestServer::start().await;
    put(&srv, "a.txt", "one\ntwo\nthree\n");
    let mut stream = srv
        .schedule(
            "s",
            vec![call(
                "w",
                "write_file",
                json!({"file_path": "a.txt", "content": "one\n2\nthree\n"}),
            )],
        )
        .await;
    let mut seen = Vec::new();
    let prompt = await_prompt(&mut stream, &mut seen, "w").await;
    let Some(toolsched::api::pb::awaiting_approval::Details::Edit(edit)) = prompt.details else {
        panic!("not an edit prompt: {prompt:?}");
    };
    assert_eq!(edit.file_path, "a.txt");
    assert!(!edit.is_new_file);
    assert_eq!(
        edit.diff,
        "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
    );
    assert_eq!(edit.new_content, "one\n2\nthree\n");
    srv.confirm(
        "s",
        "w",
        &prompt.correlation_id,
        toolsched::api::pb::ConfirmationOutcome::ProceedOnce,
        Some("edited by a person\n"),
    )
    .await
    .unwrap();
    let events = collect(stream).await;
    seen.extend(events);
    assert_eq!(
        states(&seen, "w"),
        [
            "validating",
            "awaiting_approval",
            "scheduled",
            "executing",
            "success"
        ]
    );
    assert_eq!(bytes(&srv, "a.txt"), b"edited by a person\n");
}

// === list_directory ===

#[tokio::test]
async fn list_directory_lists_dirs_first_and_counts_what_ignore_rules_left_out() {
    let srv = TestServer::start().await;
    std::fs::create_dir(srv.path(".git")).unwrap();
    put(&srv, ".gitignore", "target/\n*.log\n");
    put(&srv, ".toolschedignore", "secret.txt\n");
    put(&srv, "b.txt", "b");
    put(&srv, "a.txt", "a");
    put(&srv, "x.log", "log");
    put(&srv, "secret.txt", "s");
    put(&srv, "notes.tmp", "t");
    put(&srv, "src/main.rs", "fn main() {}");
    put(&srv, "target/debug/app", "bin");

    let events = run_one(
        &srv,
        "list_directory",
        json!({"dir_path": ".", "ignore": ["*.tmp"]}),
    )
    .await;
    assert_eq!(
        ok_output(&events),
        "Directory listing for .:\n[DIR] src\n.gitignore\n.toolschedignore\na.txt\nb.txt\n\n\
         Left out 1 entry matching the ignore patterns.\n\
         3 entries were left out by ignore rules (.gitignore, .toolschedignore, .geminiignore) (e.g. secret.txt, target/, x.log); set respect_git_ignore to false to include git-ignored entries.\n"
    );
    let result = result_of(&events, "c");
    assert_eq!(result["ignored_entries"], json!(3));
    assert_eq!(result["directories"], json!(1));
    assert_eq!(result["files"], json!(4));

    let events = run_one(
        &srv,
        "list_directory",
        json!({"dir_path": ".", "respect_git_ignore": false}),
    )
    .await;
    assert_eq!(
        ok_output(&events),
        "Directory listing for .:\n[DIR] src\n[DIR] target\n.gitignore\n.toolschedignore\na.txt\nb.txt\nnotes.tmp\nx.log\n\n\
         1 entry was left out by ignore rules (.gitignore, .toolschedignore, .geminiignore) (e.g. secret.txt).\n"
    );

    let events = run_one(&srv, "list_directory", json!({"dir_path": "src"})).await;
    assert_eq!(ok_output(&events), "Directory listing for src:\nmain.rs\n");

    let events = run_one(&srv, "list_directory", json!({"dir_path": "nope"})).await;
    let (kind, message) = failed(&events, false);
    assert_eq!(kind, ErrorType::FileNotFound);
    assert!(
        message.starts_with("Directory not found: nope."),
        "{message}"
    );

    let events = run_one(&srv, "list_directory", json!({"dir_path": "a.txt"})).await;
    let (kind, _) = failed(&events, false);
    assert_eq!(kind, ErrorType::PathIsNotADirectory);

    let events = run_one(
        &srv,
        "list_directory",
        json!({"dir_path": ".", "ignore": ["[oops"]}),
    )
    .await;
    let (kind, message) = failed(&events, true);
    assert_eq!(kind, ErrorType::InvalidToolParams);
    assert!(
        message.starts_with("argument 'ignore/0': '[oops' is not a valid glob"),
        "{message}"
    );
}

// === the workspace boundary, for every tool ===

/// A workspace with links leading out, and a sibling directory whose name
/// starts with the root's name.
struct Escape {
    srv: TestServer,
    outside: tempfile::TempDir,
    sibling: std::path::PathBuf,
}

impl Escape {
    async fn new() -> Self {
        let srv = TestServer::with_config(yolo()).await;
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "TOPSECRET\n").unwrap();
        let root = srv.workspace.path().canonicalize().unwrap();
        let sibling = std::path::PathBuf::from(format!("{}-evil", root.display()));
        std::fs::create_dir_all(&sibling).unwrap();
        std::fs::write(sibling.join("x.txt"), "TOPSECRET\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), srv.path("link_out")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), srv.path("secret_link"))
            .unwrap();
        std::fs::create_dir(srv.path("real")).unwrap();
        std::os::unix::fs::symlink(srv.path("real"), srv.path("alias")).unwrap();
        put(&srv, "inside.txt", "visible\n");
        Self {
            srv,
            outside,
            sibling,
        }
    }
}

impl Drop for Escape {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.sibling);
    }
}

#[tokio::test]
async fn every_tool_refuses_paths_leading_outside_the_workspace() {
    let e = Escape::new().await;
    let srv = &e.srv;
    let sibling_abs = e.sibling.join("x.txt").display().to_string();
    let sibling_name = e.sibling.file_name().unwrap().to_str().unwrap().to_string();
    let sibling_rel = format!("../{sibling_name}/x.txt");
    let outside_abs = e.outside.path().join("secret.txt").display().to_string();
    let paths = [
        "link_out/secret.txt".to_string(),
        "secret_link".to_string(),
        sibling_abs,
        sibling_rel,
        "real/../../x.txt".to_string(),
        outside_abs,
    ];
    for p in &paths {
        let calls = [
            ("read_file", json!({"file_path": p})),
            ("write_file", json!({"file_path": p, "content": "pwned"})),
            (
                "replace",
                json!({"file_path": p, "old_string": "TOPSECRET", "new_string": "pwned"}),
            ),
            (
                "replace",
                json!({"file_path": p, "old_string": "", "new_string": "pwned"}),
            ),
            ("list_directory", json!({"dir_path": p})),
            ("glob", json!({"pattern": "*", "dir_path": p})),
            (
                "grep_search",
                json!({"pattern": "TOPSECRET", "dir_path": p}),
            ),
        ];
        for (tool, args) in calls {
            let events = run_one(srv, tool, args).await;
            let (kind, message) = failed(&events, true);
            assert_eq!(kind, ErrorType::PathNotInWorkspace, "{tool} {p}: {message}");
            assert!(
                message.contains("resolves outside the workspace root"),
                "{message}"
            );
        }
    }
    let sibling_dir = format!("../{sibling_name}");
    for dir in ["link_out", "../", &sibling_dir] {
        let events = run_one(srv, "list_directory", json!({"dir_path": dir})).await;
        let (kind, _) = failed(&events, true);
        assert_eq!(kind, ErrorType::PathNotInWorkspace, "{dir}");
    }
    // Nothing outside changed.
    assert_eq!(
        std::fs::read_to_string(e.outside.path().join("secret.txt")).unwrap(),
        "TOPSECRET\n"
    );
    assert_eq!(
        std::fs::read_to_string(e.sibling.join("x.txt")).unwrap(),
        "TOPSECRET\n"
    );
}

#[tokio::test]
async fn walks_never_follow_links_out_and_count_them() {
    let e = Escape::new().await;
    let srv = &e.srv;
    put(srv, "real/inner.txt", "visible\n");

    let events = run_one(srv, "glob", json!({"pattern": "**/*"})).await;
    let output = ok_output(&events);
    assert!(!output.contains("secret"), "{output}");
    let mut listed: Vec<&str> = output
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    listed.sort();
    assert_eq!(listed, ["inside.txt", "real/inner.txt"]);
    assert_eq!(result_of(&events, "c")["outside_symlinks"], json!(2));
    assert!(
        output.contains("2 symlink(s) leading outside the workspace (or nowhere) were left out")
    );

    let events = run_one(srv, "grep_search", json!({"pattern": "TOPSECRET|visible"})).await;
    assert_eq!(
        ok_output(&events),
        "Found 2 match(es) in 2 file(s) for pattern \"TOPSECRET|visible\" in path \".\":\n---\n\
         File: inside.txt\nL1: visible\n---\nFile: real/inner.txt\nL1: visible\n---\n\n\
         2 symlink(s) leading outside the workspace (or nowhere) were left out.\n"
    );
    assert_eq!(result_of(&events, "c")["matches"], json!(2));
    assert_eq!(result_of(&events, "c")["outside_symlinks"], json!(2));

    let events = run_one(srv, "list_directory", json!({"dir_path": "."})).await;
    assert_eq!(
        ok_output(&events),
        "Directory listing for .:\n[DIR] alias\n[DIR] real\ninside.txt\n\n\
         2 symlink(s) leading outside the workspace (or nowhere) were left out.\n"
    );
}

#[tokio::test]
async fn a_new_file_under_a_symlinked_directory_inside_is_allowed() {
    let e = Escape::new().await;
    let srv = &e.srv;
    let events = run_one(
        srv,
        "write_file",
        json!({"file_path": "alias/new.txt", "content": "n\n"}),
    )
    .await;
    assert_eq!(
        ok_output(&events),
        "Successfully created and wrote to new file: real/new.txt."
    );
    assert_eq!(bytes(srv, "real/new.txt"), b"n\n");
    let events = run_one(
        srv,
        "replace",
        json!({"file_path": "alias/other.txt", "old_string": "", "new_string": "o\n"}),
    )
    .await;
    assert_eq!(
        ok_output(&events),
        "Created new file: real/other.txt with the provided content."
    );
    let events = run_one(srv, "read_file", json!({"file_path": "alias/new.txt"})).await;
    assert_eq!(ok_output(&events), "n\n");
    let events = run_one(srv, "list_directory", json!({"dir_path": "alias"})).await;
    assert_eq!(
        ok_output(&events),
        "Directory listing for real:\nnew.txt\nother.txt\n"
    );
}

#[tokio::test]
async fn fifos_are_refused_and_never_block_a_tool() {
    let srv = TestServer::with_config(yolo()).await;
    put(&srv, "dir/a.txt", "needle\n");
    mkfifo(&srv.path("dir/pipe"));
    let calls = [
        ("read_file", json!({"file_path": "dir/pipe"})),
        (
            "write_file",
            json!({"file_path": "dir/pipe", "content": "x"}),
        ),
        (
            "replace",
            json!({"file_path": "dir/pipe", "old_string": "a", "new_string": "b"}),
        ),
    ];
    for (tool, args) in calls {
        let events = run_one(&srv, tool, args).await;
        let (kind, message) = failed(&events, false);
        assert_eq!(kind, ErrorType::InvalidToolParams, "{tool}");
        assert_eq!(
            message,
            format!(
                "dir/pipe is not a regular file (it is a FIFO, socket or device); {tool} only works on regular files."
            )
        );
    }
    let events = run_one(&srv, "grep_search", json!({"pattern": "needle"})).await;
    assert_eq!(
        ok_output(&events),
        "Found 1 match(es) in 1 file(s) for pattern \"needle\" in path \".\":\n---\nFile: dir/a.txt\nL1: needle\n---\n"
    );
    let events = run_one(&srv, "list_directory", json!({"dir_path": "dir"})).await;
    assert_eq!(
        ok_output(&events),
        "Directory listing for dir:\na.txt\npipe\n"
    );
}

#[tokio::test]
async fn text_that_starts_like_an_image_signature_is_read_as_text() {
    let srv = TestServer::start().await;
    put(&srv, "cars.txt", "BMW and GIF\n");
    let events = run_one(&srv, "read_file", json!({"file_path": "cars.txt"})).await;
    assert_eq!(ok_output(&events), "BMW and GIF\n");
}

#[tokio::test]
async fn a_path_is_resolved_again_when_the_call_runs() {
    // Each call is built when the batch starts, while `sub` does not exist;
    // the shell command before them then makes `sub` a link out.
    let e = Escape::new().await;
    let srv = &e.srv;
    let outside = e.outside.path().display().to_string();
    put(srv, "real/keep.txt", "k\n");
    let events = srv
        .run(
            "s",
            vec![
                call("ln", "run_shell_command", json!({"command": format!("ln -s {outside} sub && ln -s real other")})),
                call("w", "write_file", json!({"file_path": "sub/pwned.txt", "content": "x"})),
                call("r", "replace", json!({"file_path": "sub/secret.txt", "old_string": "TOPSECRET", "new_string": "x"})),
                call("rd", "read_file", json!({"file_path": "sub/secret.txt"})),
                call("g", "grep_search", json!({"pattern": "TOPSECRET", "dir_path": "sub"})),
                call("l", "list_directory", json!({"dir_path": "sub"})),
                call("w2", "write_file", json!({"file_path": "other/new.txt", "content": "x"})),
            ],
        )
        .await;
    assert_eq!(
        states(&events, "ln"),
        ["validating", "scheduled", "executing", "success"]
    );
    for id in ["w", "r", "rd", "g", "l"] {
        assert_eq!(
            states(&events, id),
            ["validating", "scheduled", "executing", "error"],
            "{id}"
        );
        let (kind, message) = error_of(&events, id);
        assert_eq!(kind, ErrorType::PathNotInWorkspace, "{id}: {message}");
    }
    let (kind, message) = error_of(&events, "w2");
    assert_eq!(kind, ErrorType::FileChangedConcurrently);
    assert_eq!(
        message,
        "'other/new.txt' now resolves to real/new.txt instead of other/new.txt (a symlink or directory changed since the call was built); nothing was done. Send the call again if it is still wanted."
    );
    let mut outside_names: Vec<_> = std::fs::read_dir(e.outside.path())
        .unwrap()
        .map(|d| d.unwrap().file_name())
        .collect();
    outside_names.sort();
    assert_eq!(outside_names, ["secret.txt"]);
    assert_eq!(
        std::fs::read_to_string(e.outside.path().join("secret.txt")).unwrap(),
        "TOPSECRET\n"
    );
    assert!(!srv.path("real/new.txt").exists());
}
