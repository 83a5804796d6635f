//! Micro-benchmarks of the hot pure paths (criterion): a shell policy
//! decision for a compound command, a JSON-Schema argument check, one
//! call's full state transitions inside the scheduler without the network,
//! and the protected paths a confined command waits for (a repository with
//! hooks, an Android `repo` checkout of linked repositories).
//! Run with `cargo bench --bench micro`.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolsched::policy::{ApprovalMode, Policy, PolicyInput, SessionRules};
use toolsched::sandbox::Workspace;
use toolsched::scheduler::{BatchEvent, BatchRequest, CallRequest, SchedulerConfig};
use toolsched::shell::analyze;
use toolsched::tools::Registry;

fn policy(c: &mut Criterion) {
    let ws = tempfile::tempdir().unwrap();
    let registry = Registry::builtin(Arc::new(Workspace::new(ws.path()).unwrap())).unwrap();
    let command = "git status && ls -la | grep foo; echo \"$(whoami)\" > out.txt || cat <(date)";
    let mut args = serde_json::Map::new();
    args.insert("command".into(), json!(command));
    let invocation = registry.build("run_shell_command", &args).unwrap();
    let decl = registry
        .declarations()
        .find(|d| d.name == "run_shell_command")
        .unwrap()
        .clone();
    let rules = SessionRules::default();
    let policy = Policy::builtin();
    c.bench_function("shell analysis of a compound command", |b| {
        b.iter(|| analyze(std::hint::black_box(command)))
    });
    c.bench_function("policy decision for a compound shell command", |b| {
        b.iter(|| {
            let subject = invocation.subject();
            policy.decide(PolicyInput {
                decl: &decl,
                subject: &subject,
                args: &args,
                mode: ApprovalMode::Default,
                interactive: true,
                rules: &rules,
                client_initiated: false,
                writes_repository: invocation.writes_repository(),
            })
        })
    });
}

fn schema(c: &mut Criterion) {
    let ws = tempfile::tempdir().unwrap();
    let registry = Registry::builtin(Arc::new(Workspace::new(ws.path()).unwrap())).unwrap();
    let mut args = serde_json::Map::new();
    args.insert("file_path".into(), json!("src/main.rs"));
    args.insert("start_line".into(), json!(10));
    args.insert("end_line".into(), json!(20));
    c.bench_function("schema check + build of read_file arguments", |b| {
        b.iter(|| {
            registry
                .build("read_file", std::hint::black_box(&args))
                .unwrap()
        })
    });
}

fn scheduler(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "a\n").unwrap();
    let sched = rt.block_on(async {
        toolsched::build_scheduler(
            ws.path(),
            SchedulerConfig::default(),
            CancellationToken::new(),
        )
        .unwrap()
    });
    let mut args = serde_json::Map::new();
    args.insert("topic".into(), json!("benchmarking"));
    c.bench_function(
        "one call through the scheduler (update_topic), no network",
        |b| {
            b.to_async(&rt).iter(|| async {
                let mut stream = sched
                    .schedule(BatchRequest {
                        session_id: "bench".into(),
                        calls: vec![CallRequest {
                            id: "c".into(),
                            name: "update_topic".into(),
                            args: std::sync::Arc::new(args.clone()),
                            wait_for_previous: false,
                            client_initiated: false,
                        }],
                        approval_mode: None,
                        interactive: false,
                        sandbox_level: None,
                        trace_parent: Default::default(),
                        request_id: None,
                        disconnect_grace: None,
                        outcome_unknown: Vec::new(),
                        workspace: None,
                        principal: "bench".into(),
                        ended: Vec::new(),
                        answered: Default::default(),
                        settings: None,
                    })
                    .await
                    .unwrap();
                while let Some(ev) = stream.next().await {
                    if matches!(ev.event, BatchEvent::Completed { .. }) {
                        break;
                    }
                }
            })
        },
    );
}

/// `ProtectedPaths::current` once nothing changed: a workspace of 100
/// directories with one repository (answered from the watches), and an
/// Android `repo` checkout of 100 projects, whose `.git` symlinks, the
/// symlinks in each `p.git` and the hooks they lead to are followed on
/// every call.
fn protected_paths(c: &mut Criterion) {
    use std::os::unix::fs::symlink;
    use toolsched::sandbox::ProtectedPaths;
    let plain = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(plain.path()).unwrap();
    for i in 0..100 {
        std::fs::create_dir_all(root.join(format!("src/d{i}"))).unwrap();
    }
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    std::fs::create_dir_all(root.join(".git/objects")).unwrap();
    let cache = ProtectedPaths::new(&root);
    cache.current();
    c.bench_function("protected paths, one repository, nothing changed", |b| {
        b.iter(|| {
            cache
                .current_if_unchanged()
                .unwrap_or_else(|| cache.current())
        })
    });
    let android = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(android.path()).unwrap();
    std::fs::create_dir_all(root.join(".repo/repo/hooks")).unwrap();
    std::fs::write(root.join(".repo/repo/hooks/commit-msg"), "#!/bin/sh\n").unwrap();
    for i in 0..100 {
        let p = format!("p{i}");
        let objects = root.join(format!(".repo/project-objects/{p}.git"));
        let project = root.join(format!(".repo/projects/{p}.git"));
        std::fs::create_dir_all(objects.join("hooks")).unwrap();
        std::fs::create_dir_all(objects.join("objects")).unwrap();
        std::fs::create_dir_all(project.join("refs")).unwrap();
        std::fs::create_dir_all(root.join(&p)).unwrap();
        symlink(
            format!("../.repo/projects/{p}.git"),
            root.join(&p).join(".git"),
        )
        .unwrap();
        for d in ["hooks", "objects"] {
            symlink(
                format!("../../project-objects/{p}.git/{d}"),
                project.join(d),
            )
            .unwrap();
        }
        symlink(
            "../../../repo/hooks/commit-msg",
            objects.join("hooks/commit-msg"),
        )
        .unwrap();
    }
    let cache = ProtectedPaths::new(&root);
    cache.current();
    c.bench_function(
        "protected paths, Android repo checkout of 100 projects",
        |b| b.iter(|| cache.current()),
    );
}

criterion_group!(benches, policy, schema, scheduler, protected_paths);
criterion_main!(benches);
