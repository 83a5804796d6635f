//! The cost of the sandbox: end-to-end `run_shell_command` of `true` over
//! gRPC, confined (`workspace_write`: worker + Landlock + seccomp + rlimits)
//! against unconfined (`none`: the same worker and process control, no
//! Landlock or seccomp), reported as medians and their ratio.
//!
//! `run_process` alone is also measured with a repository in the workspace
//! (500 directories × 100 files when measuring), where the confined figure
//! includes keeping every `.git` read-only.
//!
//! `cargo bench --bench sandbox_overhead` measures; under `cargo test
//! --all-targets` (CI) it only runs a few iterations as a smoke test.

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::*;
use toolsched::policy::ApprovalMode;
use toolsched::sandbox::{Sandbox, SandboxConfig, SandboxLevel};
use toolsched::scheduler::SchedulerConfig;

/// Runs per level when measuring; enough for a stable median on 2 cores.
const MEASURED_RUNS: usize = 100;
/// Runs per level in smoke mode (CI).
const SMOKE_RUNS: usize = 3;
/// Runs discarded first (page cache, worker binary, connection set-up).
const WARM_UP_RUNS: usize = 3;
/// Directories × files of the repository when measuring (S6's 50,000
/// files) and in smoke mode.
const REPO_MEASURED: (usize, usize) = (500, 100);
const REPO_SMOKE: (usize, usize) = (5, 10);

/// A repository (`.git` at its root) of `dirs` directories of `files`
/// empty files each, in `root/repo`.
fn make_repo(root: &std::path::Path, (dirs, files): (usize, usize)) {
    let repo = root.join("repo");
    std::fs::create_dir_all(repo.join(".git/hooks")).expect("make .git");
    for d in 0..dirs {
        let dir = repo.join(format!("src{d:03}"));
        std::fs::create_dir_all(&dir).expect("make dir");
        for f in 0..files {
            std::fs::write(dir.join(format!("m{f:03}.rs")), "").expect("make file");
        }
    }
}

async fn measure(level: SandboxLevel, runs: usize) -> Vec<Duration> {
    let config = SchedulerConfig {
        default_mode: ApprovalMode::Yolo,
        sandbox: SandboxConfig {
            level,
            ..SandboxConfig::default()
        },
        ..SchedulerConfig::default()
    };
    let srv = TestServer::with_config(config).await;
    let mut times = Vec::with_capacity(runs);
    for i in 0..WARM_UP_RUNS + runs {
        let started = Instant::now();
        let events = srv
            .run(
                "bench",
                vec![call("c", "run_shell_command", json!({ "command": "true" }))],
            )
            .await;
        let elapsed = started.elapsed();
        let _ = success_output(&events, "c");
        if i >= WARM_UP_RUNS {
            times.push(elapsed);
        }
    }
    srv.shutdown().await;
    times.sort();
    times
}

/// The same command through `run_process` alone (no gRPC, no scheduler):
/// the worker's own cost without the end-to-end noise around it.
async fn measure_process(
    level: SandboxLevel,
    runs: usize,
    repo: Option<(usize, usize)>,
) -> Vec<Duration> {
    let workspace = tempfile::tempdir().expect("temp workspace");
    if let Some(size) = repo {
        make_repo(workspace.path(), size);
        // The steady state: directories changed within the racy margin are
        // re-read before every command until their change time ages.
        tokio::time::sleep(toolsched::sandbox::protected::RACY_MARGIN).await;
    }
    let sandbox = Arc::new(Sandbox::new(SandboxConfig {
        level,
        ..SandboxConfig::default()
    }));
    let mut times = Vec::with_capacity(runs);
    for i in 0..WARM_UP_RUNS + runs {
        let spec = toolsched::sandbox::ProcessSpec {
            program: "bash".into(),
            args: vec!["-c".into(), "true".into()],
            cwd: workspace.path().to_path_buf(),
            timeout: Duration::from_secs(30),
            limits: toolsched::sandbox::OutputLimits::default(),
            sandbox: sandbox.clone(),
            workspace: workspace.path().to_path_buf(),
            spill: None,
        };
        let (tx, _rx) =
            tokio::sync::mpsc::unbounded_channel::<toolsched::sandbox::process::ProcessEvent>();
        let started = Instant::now();
        let outcome =
            toolsched::sandbox::run_process(spec, tokio_util::sync::CancellationToken::new(), tx)
                .await;
        let elapsed = started.elapsed();
        assert!(
            matches!(
                outcome,
                toolsched::sandbox::ProcessOutcome::Exited {
                    exit_code: Some(0),
                    ..
                }
            ),
            "{outcome:?}"
        );
        if i >= WARM_UP_RUNS {
            times.push(elapsed);
        }
    }
    times.sort();
    times
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let measuring = std::env::args().any(|a| a == "--bench");
    let runs = if measuring { MEASURED_RUNS } else { SMOKE_RUNS };
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let probe = toolsched::sandbox::probe::probe(SandboxLevel::WorkspaceWrite);
    if !probe.missing.is_empty() {
        println!(
            "sandbox_overhead: SKIPPED, the kernel cannot enforce workspace_write: missing {}",
            probe.missing.join(", ")
        );
        return;
    }
    let median = |v: &[Duration]| v[v.len() / 2];
    let mode = if measuring { "" } else { " (smoke mode)" };
    let report = |what: &str, u: Duration, c: Duration| {
        println!(
            "sandbox_overhead: {what} `true`, {runs} runs each{mode}: unconfined (none) median {:.2} ms, confined (workspace_write) median {:.2} ms, ratio {:.2}x (+{:.2} ms)",
            ms(u),
            ms(c),
            ms(c) / ms(u),
            ms(c) - ms(u),
        );
    };
    let (unconfined, confined) = rt.block_on(async {
        (
            measure(SandboxLevel::None, runs).await,
            measure(SandboxLevel::WorkspaceWrite, runs).await,
        )
    });
    report(
        "end-to-end run_shell_command over gRPC",
        median(&unconfined),
        median(&confined),
    );
    let (unconfined, confined) = rt.block_on(async {
        (
            measure_process(SandboxLevel::None, runs, None).await,
            measure_process(SandboxLevel::WorkspaceWrite, runs, None).await,
        )
    });
    report(
        "run_process (worker only)",
        median(&unconfined),
        median(&confined),
    );
    let size = if measuring { REPO_MEASURED } else { REPO_SMOKE };
    let (unconfined, confined) = rt.block_on(async {
        (
            measure_process(SandboxLevel::None, runs, Some(size)).await,
            measure_process(SandboxLevel::WorkspaceWrite, runs, Some(size)).await,
        )
    });
    report(
        &format!(
            "run_process with a {}-file repository in the workspace",
            size.0 * size.1
        ),
        median(&unconfined),
        median(&confined),
    );
}
