//! glob and grep_search over gRPC on real temp trees: parameters, the same
//! ignore rules as list_directory (nested .gitignore, the .gitignore of a
//! parent repository root above the workspace, project ignore files) with
//! counts of what was left out, bounded results that say what was cut, and
//! every error type.

use crate::file_support;
use crate::support;

use std::time::{Duration, SystemTime};

use file_support::*;
use serde_json::json;
use support::*;
use toolsched::api::pb::ErrorType;

/// A small repository: git-ignored build tree and logs, a nested ignore
/// file, a project ignore file.
fn repo(srv: &TestServer) {
    std::fs::create_dir(srv.path(".git")).unwrap();
    put(srv, ".gitignore", "target/\n*.log\n");
    put(srv, ".geminiignore", "private/\n");
    put(
        srv,
        "src/main.rs",
        "fn main() {\n    println!(\"Hello\");\n}\n",
    );
    put(
        srv,
        "src/lib.rs",
        "pub fn hello() -> &'static str {\n    \"hello\"\n}\n",
    );
    put(srv, "src/gen/.gitignore", "*.gen.rs\n");
    put(srv, "src/gen/keep.rs", "// hello kept\n");
    put(srv, "src/gen/out.gen.rs", "// hello generated\n");
    put(srv, "target/debug/build.rs", "// hello build\n");
    put(srv, "private/notes.rs", "// hello private\n");
    put(srv, "run.log", "hello log\n");
    put(srv, "README.md", "# Hello\n");
}

fn listed(output: &str) -> Vec<&str> {
    output
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect()
}

// === glob ===

#[tokio::test]
async fn glob_matches_paths_with_ignore_rules_and_counts_what_was_left_out() {
    let srv = TestServer::start().await;
    repo(&srv);
    let old = SystemTime::now() - Duration::from_secs(3 * 24 * 3600);
    for f in ["src/main.rs", "src/lib.rs", "src/gen/keep.rs"] {
        std::fs::File::options()
            .write(true)
            .open(srv.path(f))
            .unwrap()
            .set_modified(old)
            .unwrap();
    }

    let events = run_one(&srv, "glob", json!({"pattern": "**/*.rs"})).await;
    assert_eq!(
        ok_output(&events),
        "Found 3 file(s) matching \"**/*.rs\" within \".\", sorted by modification time (newest first):\n\
         src/gen/keep.rs\nsrc/lib.rs\nsrc/main.rs\n\n\
         4 entries were left out by ignore rules (.gitignore, .toolschedignore, .geminiignore) (e.g. private/, run.log, src/gen/out.gen.rs, target/); set respect_git_ignore to false to include git-ignored files.\n"
    );
    let result = result_of(&events, "c");
    assert_eq!(result["matches"], json!(3));
    assert_eq!(result["ignored_entries"], json!(4));

    // Without git ignores: the build tree and generated file come back, the
    // project ignore file still applies.
    let events = run_one(
        &srv,
        "glob",
        json!({"pattern": "**/*.rs", "respect_git_ignore": false}),
    )
    .await;
    let output = ok_output(&events);
    // Recently modified files first (newest first), then the rest by path.
    assert_eq!(
        listed(&output)[2..],
        ["src/gen/keep.rs", "src/lib.rs", "src/main.rs"]
    );
    let mut recent = listed(&output)[..2].to_vec();
    recent.sort();
    assert_eq!(recent, ["src/gen/out.gen.rs", "target/debug/build.rs"]);
    assert!(output.ends_with(
        "1 entry was left out by ignore rules (.gitignore, .toolschedignore, .geminiignore) (e.g. private/).\n"
    ));

    // '*' stays in one directory; case-insensitive by default.
    let events = run_one(&srv, "glob", json!({"pattern": "*.MD"})).await;
    assert_eq!(listed(&ok_output(&events)), ["README.md"]);
    let events = run_one(
        &srv,
        "glob",
        json!({"pattern": "*.MD", "case_sensitive": true}),
    )
    .await;
    assert!(
        ok_output(&events).starts_with("No files found matching pattern \"*.MD\" within \".\".\n")
    );
    let events = run_one(&srv, "glob", json!({"pattern": "*.rs", "dir_path": "src"})).await;
    assert_eq!(listed(&ok_output(&events)), ["src/lib.rs", "src/main.rs"]);
    let events = run_one(
        &srv,
        "glob",
        json!({"pattern": "{lib,main}.rs", "dir_path": "src"}),
    )
    .await;
    assert_eq!(result_of(&events, "c")["matches"], json!(2));
}

#[tokio::test]
async fn ignore_rules_of_a_parent_repository_root_apply_in_every_search_tool() {
    let srv = NestedServer::start("app", |repo| {
        std::fs::create_dir(repo.join(".git")).unwrap();
        std::fs::write(repo.join(".gitignore"), "dist/\n*.tmp\n").unwrap();
        std::fs::create_dir_all(repo.join("app/dist")).unwrap();
        std::fs::write(repo.join("app/dist/bundle.js"), "needle\n").unwrap();
        std::fs::write(repo.join("app/scratch.tmp"), "needle\n").unwrap();
        std::fs::write(repo.join("app/index.js"), "needle\n").unwrap();
    })
    .await;
    let events = srv.run_one("glob", json!({"pattern": "**/*"})).await;
    assert_eq!(listed(&ok_output(&events)), ["index.js"]);
    assert_eq!(result_of(&events, "c")["ignored_entries"], json!(2));
    let events = srv
        .run_one("grep_search", json!({"pattern": "needle"}))
        .await;
    assert_eq!(
        ok_output(&events),
        "Found 1 match(es) in 1 file(s) for pattern \"needle\" in path \".\":\n---\n\
         File: index.js\nL1: needle\n---\n\n\
         2 entries were left out by ignore rules (.gitignore, .toolschedignore, .geminiignore) (e.g. dist/, scratch.tmp).\n"
    );
    let events = srv
        .run_one("list_directory", json!({"dir_path": "."}))
        .await;
    assert_eq!(
        ok_output(&events),
        "Directory listing for .:\nindex.js\n\n\
         2 entries were left out by ignore rules (.gitignore, .toolschedignore, .geminiignore) (e.g. dist/, scratch.tmp); set respect_git_ignore to false to include git-ignored entries.\n"
    );
}

#[tokio::test]
async fn glob_results_are_bounded_and_say_how_many_more() {
    let srv = TestServer::start().await;
    for i in 0..510 {
        put(&srv, &format!("many/f{i:03}.txt"), "");
    }
    let events = run_one(&srv, "glob", json!({"pattern": "many/*.txt"})).await;
    let output = ok_output(&events);
    assert_eq!(listed(&output).len(), 500);
    assert!(output.ends_with(
        "\nShowing 500 of 510 files; 10 more not shown. Narrow the pattern or dir_path to see them.\n"
    ), "{output}");
    assert_eq!(result_of(&events, "c")["shown"], json!(500));
}

#[tokio::test]
async fn glob_error_types() {
    let srv = TestServer::start().await;
    put(&srv, "a.txt", "");
    let cases = [
        (
            json!({"pattern": "*", "dir_path": "nope"}),
            ErrorType::SearchPathNotFound,
            false,
            "Search path not found: nope.",
        ),
        (
            json!({"pattern": "*", "dir_path": "a.txt"}),
            ErrorType::PathIsNotADirectory,
            false,
            "a.txt is a file, not a directory.",
        ),
        (
            json!({"pattern": "a[b"}),
            ErrorType::InvalidToolParams,
            true,
            "argument 'pattern': 'a[b' is not a valid glob",
        ),
        (
            json!({"pattern": "../*"}),
            ErrorType::InvalidToolParams,
            true,
            "argument 'pattern': '../*' must be relative",
        ),
        (
            json!({"pattern": "/etc/*"}),
            ErrorType::InvalidToolParams,
            true,
            "argument 'pattern': '/etc/*' must be relative",
        ),
        (
            json!({"pattern": ""}),
            ErrorType::InvalidToolParams,
            true,
            "Invalid arguments for glob: argument 'pattern'",
        ),
        (
            json!({"pattern": "*", "case_sensitive": 1}),
            ErrorType::InvalidToolParams,
            true,
            "Invalid arguments for glob: argument 'case_sensitive'",
        ),
    ];
    for (args, kind, built, start) in cases {
        let events = run_one(&srv, "glob", args.clone()).await;
        let (k, message) = failed(&events, built);
        assert_eq!(k, kind, "{args}");
        assert!(message.starts_with(start), "{args}: {message}");
    }
}

// === grep_search ===

#[tokio::test]
async fn grep_search_finds_lines_with_every_parameter() {
    let srv = TestServer::start().await;
    repo(&srv);

    let events = run_one(&srv, "grep_search", json!({"pattern": "hello"})).await;
    assert_eq!(
        ok_output(&events),
        "Found 5 match(es) in 4 file(s) for pattern \"hello\" in path \".\":\n---\n\
         File: README.md\nL1: # Hello\n---\n\
         File: src/gen/keep.rs\nL1: // hello kept\n---\n\
         File: src/lib.rs\nL1: pub fn hello() -> &'static str {\nL2:     \"hello\"\n---\n\
         File: src/main.rs\nL2:     println!(\"Hello\");\n---\n\n\
         4 entries were left out by ignore rules (.gitignore, .toolschedignore, .geminiignore) (e.g. private/, run.log, src/gen/out.gen.rs, target/).\n"
    );

    let events = run_one(
        &srv,
        "grep_search",
        json!({"pattern": "Hello", "case_sensitive": true, "dir_path": "src"}),
    )
    .await;
    assert_eq!(
        ok_output(&events),
        "Found 1 match(es) in 1 file(s) for pattern \"Hello\" in path \"src\":\n---\n\
         File: src/main.rs\nL2:     println!(\"Hello\");\n---\n\n\
         1 entry was left out by ignore rules (.gitignore, .toolschedignore, .geminiignore) (e.g. gen/out.gen.rs).\n"
    );

    let events = run_one(
        &srv,
        "grep_search",
        json!({"pattern": "println!(", "fixed_strings": true, "context": 1, "include_pattern": "*.rs"}),
    )
    .await;
    assert_eq!(
        listed(&ok_output(&events)),
        [
            "---",
            "File: src/main.rs",
            "L1- fn main() {",
            "L2:     println!(\"Hello\");",
            "L3- }",
            "---"
        ]
    );

    let events = run_one(
        &srv,
        "grep_search",
        json!({"pattern": "hello", "names_only": true, "include_pattern": "src/**", "exclude_pattern": "lib.rs"}),
    )
    .await;
    let output = ok_output(&events);
    assert!(output.starts_with(
        "Found 2 file(s) with matches for pattern \"hello\" in path \".\" (include: \"src/**\", exclude: \"lib.rs\"):\nsrc/gen/keep.rs\nsrc/main.rs\n"
    ), "{output}");

    let events = run_one(&srv, "grep_search", json!({"pattern": "absent_\\w+"})).await;
    assert!(
        ok_output(&events)
            .starts_with("No matches found for pattern \"absent_\\w+\" in path \".\".\n")
    );
}

#[tokio::test]
async fn grep_search_is_bounded_and_says_what_was_cut() {
    let srv = TestServer::start().await;
    let many: String = (1..=300).map(|i| format!("match {i}\n")).collect();
    put(&srv, "many.txt", &many);
    let long = format!("needle {}\n", "x".repeat(10_000));
    put(&srv, "long.txt", &long);

    let events = run_one(&srv, "grep_search", json!({"pattern": "match"})).await;
    let output = ok_output(&events);
    assert_eq!(output.matches("\nL").count(), 100);
    assert!(output.contains("L100: match 100\n---\n"));
    assert!(output.ends_with(
        "Results were limited to the first 100 matching lines; the search stopped there. To see more, raise total_max_matches (at most 2000), or narrow the search with dir_path or include_pattern.\n"
    ), "{output}");
    assert_eq!(result_of(&events, "c")["truncated"], json!(true));

    let events = run_one(
        &srv,
        "grep_search",
        json!({"pattern": "match", "total_max_matches": 1000}),
    )
    .await;
    let output = ok_output(&events);
    assert_eq!(output.matches("\nL").count(), 300);
    assert_eq!(result_of(&events, "c")["truncated"], json!(false));

    let events = run_one(&srv, "grep_search", json!({"pattern": "needle"})).await;
    let output = ok_output(&events);
    assert!(
        output.contains(&format!(
            "L1: needle {}... [line truncated, 10007 characters]\n",
            "x".repeat(493)
        )),
        "{output}"
    );
    assert!(
        output.ends_with(
            "1 line(s) longer than 500 characters were cut; read them with read_file.\n"
        )
    );
}

#[tokio::test]
async fn grep_search_handles_binary_utf16_and_latin1_files() {
    let srv = TestServer::start().await;
    put(&srv, "blob.bin", b"needle\x00\x01\x02");
    let utf16: Vec<u8> = [0xFF, 0xFE]
        .into_iter()
        .chain(
            "first\nneedle \u{e9}\n"
                .encode_utf16()
                .flat_map(u16::to_le_bytes),
        )
        .collect();
    put(&srv, "wide.txt", &utf16);
    put(&srv, "latin1.txt", b"needle caf\xe9\n");
    let events = run_one(&srv, "grep_search", json!({"pattern": "needle"})).await;
    assert_eq!(
        ok_output(&events),
        "Found 2 match(es) in 2 file(s) for pattern \"needle\" in path \".\":\n---\n\
         File: latin1.txt\nL1: needle caf\u{e9} [not UTF-8; shown as windows-1252]\n---\n\
         File: wide.txt\nL2: needle \u{e9}\n---\n\n\
         1 binary file(s) were skipped.\n"
    );
    assert_eq!(result_of(&events, "c")["binary_files_skipped"], json!(1));
}

#[tokio::test]
async fn grep_search_error_types() {
    let srv = TestServer::start().await;
    put(&srv, "a.txt", "");
    let cases = [
        (
            json!({"pattern": "x", "dir_path": "nope"}),
            ErrorType::SearchPathNotFound,
            false,
            "Search path not found: nope.",
        ),
        (
            json!({"pattern": "x", "dir_path": "a.txt"}),
            ErrorType::PathIsNotADirectory,
            false,
            "a.txt is a file, not a directory.",
        ),
        (
            json!({"pattern": "(unclosed"}),
            ErrorType::InvalidToolParams,
            true,
            "argument 'pattern': not a valid regular expression",
        ),
        (
            json!({"pattern": "x", "include_pattern": "a[b"}),
            ErrorType::InvalidToolParams,
            true,
            "argument 'include_pattern': 'a[b' is not a valid glob",
        ),
        (
            json!({"pattern": "x", "exclude_pattern": "{a"}),
            ErrorType::InvalidToolParams,
            true,
            "argument 'exclude_pattern': '{a' is not a valid glob",
        ),
        (
            json!({"pattern": "x", "context": 11}),
            ErrorType::InvalidToolParams,
            true,
            "Invalid arguments for grep_search: argument 'context'",
        ),
        (
            json!({"pattern": "x", "total_max_matches": 0}),
            ErrorType::InvalidToolParams,
            true,
            "Invalid arguments for grep_search: argument 'total_max_matches'",
        ),
        (
            json!({"dir_path": "."}),
            ErrorType::InvalidToolParams,
            true,
            "Invalid arguments for grep_search: arguments: \"pattern\" is a required property",
        ),
    ];
    for (args, kind, built, start) in cases {
        let events = run_one(&srv, "grep_search", args.clone()).await;
        let (k, message) = failed(&events, built);
        assert_eq!(k, kind, "{args}");
        assert!(message.starts_with(start), "{args}: {message}");
    }
    // A fixed string is not a regex: "(unclosed" is fine then.
    put(&srv, "p.txt", "call(unclosed\n");
    let events = run_one(
        &srv,
        "grep_search",
        json!({"pattern": "(unclosed", "fixed_strings": true}),
    )
    .await;
    assert_eq!(result_of(&events, "c")["matches"], json!(1));
}
