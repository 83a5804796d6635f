//! The client libraries' own test suites (clients/python with pytest,
//! clients/typescript with Node's test runner),
//! run against this build's server binary: each suite starts the binary on a
//! free loopback port and drives it through the library, as a frontend
//! would. `bash tests/setup.sh` installs the libraries and their test tools;
//! a missing one fails here, loudly.

mod support;

use std::process::Command;

use support::venv_tool;

/// Runs `cmd` in the repository root with the server binary named, and
/// fails with its whole output unless it succeeded.
fn run_suite(name: &str, mut cmd: Command) {
    let root = env!("CARGO_MANIFEST_DIR");
    let output = cmd
        .current_dir(root)
        .env("TOOLSCHED_BIN", env!("CARGO_BIN_EXE_toolsched"))
        .output()
        .unwrap_or_else(|e| panic!("cannot start the {name} suite: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the {name} suite failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    // Shown with --nocapture: the runner's own summary line.
    println!("{name}: {}", stdout.lines().last().unwrap_or_default());
}

#[test]
fn python_client_suite() {
    let mut cmd = Command::new(venv_tool("python"));
    cmd.args([
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "clients/python/tests",
    ]);
    run_suite("python client", cmd);
}

#[test]
fn typescript_client_suite() {
    let pkg = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/typescript");
    assert!(
        pkg.join("node_modules/.bin/tsc").exists(),
        "clients/typescript/node_modules is missing: run `bash tests/setup.sh` first (npm ci)"
    );
    // `npm test`: builds (so the suite never runs a stale dist/), then
    // `node --test tests/*.test.mjs`.
    let mut cmd = Command::new("npm");
    cmd.args(["test", "--silent", "--prefix"]).arg(&pkg);
    run_suite("typescript client", cmd);
}
