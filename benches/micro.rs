//! Micro-benchmarks of the hot pure paths (criterion): a shell policy
//! decision for a compound command, a JSON-Schema argument check, and one
//! call's full state transitions inside the scheduler without the network.
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

criterion_group!(benches, policy, schema, scheduler);
criterion_main!(benches);
