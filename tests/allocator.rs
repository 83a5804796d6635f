//! The server binary's allocator options (src/main.rs): mimalloc commits on
//! demand and gives freed pages back at once unless the operator says
//! otherwise. Read from mimalloc's own report of its options
//! (`MIMALLOC_VERBOSE=1`), which names each option: this also checks that
//! the numbers the binary sets are the options it means to set.

use std::process::Command;

/// The value mimalloc reports for `option` when the binary starts with
/// `env` (plus `MIMALLOC_VERBOSE=1`).
fn reported(env: &[(&str, &str)], option: &str) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolsched"));
    command.arg("--version").env("MIMALLOC_VERBOSE", "1");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("run toolsched --version");
    assert!(out.status.success(), "toolsched --version failed: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let prefix = format!("option '{option}': ");
    stderr
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("mimalloc did not report {option}:\n{stderr}"))
        .trim()
        .to_string()
}

#[test]
fn the_server_commits_on_demand_and_gives_freed_pages_back_at_once() {
    assert_eq!(reported(&[], "arena_eager_commit"), "0");
    assert_eq!(reported(&[], "purge_delay"), "0");
    // Options mimalloc's defaults keep are left alone.
    assert_eq!(reported(&[], "purge_decommits"), "1");
}

#[test]
fn an_operators_mimalloc_variables_still_win() {
    let env = [
        ("MIMALLOC_ARENA_EAGER_COMMIT", "1"),
        ("MIMALLOC_PURGE_DELAY", "250"),
    ];
    assert_eq!(reported(&env, "arena_eager_commit"), "1");
    assert_eq!(reported(&env, "purge_delay"), "250");
}
