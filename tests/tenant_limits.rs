//! What a tenant may do and how much it may hold (issue 18, items 4–7),
//! against the real server with two tenants and their static tokens:
//! allowed approval modes, the most permissive sandbox level, a tenant's
//! policy tier, MCP servers per tenant, quotas (RESOURCE_EXHAUSTED naming
//! the quota and the use, while the other tenant runs normally), and the
//! audit trail naming who asked and who approved (the real binary,
//! `--log-format json`).

use crate::mcp_common;
use crate::replicas_support;
use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use toolsched::api::ServerOptions;
use toolsched::api::auth::{StaticToken, hash_hex};
use toolsched::api::pb;
use toolsched::policy::ApprovalMode;
use toolsched::sandbox::SandboxLevel;
use toolsched::scheduler::SchedulerConfig;
use toolsched::tenant::{TenantConfig, TenantQuotas};

const A: &str = "token-of-tenant-acme-alice-0123456789";
const A2: &str = "token-of-tenant-acme-carol-0123456789";
const B: &str = "token-of-tenant-beta-bob-0123456789";

fn tokens() -> Vec<StaticToken> {
    [
        (A, "acme", "alice"),
        (A2, "acme", "carol"),
        (B, "beta", "bob"),
    ]
    .into_iter()
    .map(|(token, tenant, principal)| StaticToken {
        sha256: hash_hex(token),
        tenant: tenant.into(),
        principal: principal.into(),
    })
    .collect()
}

fn options() -> ServerOptions {
    ServerOptions {
        auth_tokens: tokens(),
        ..ServerOptions::default()
    }
}

/// `acme` configured as `acme`; `beta` has no table (unlimited).
fn acme(config: TenantConfig) -> TenantConfig {
    TenantConfig {
        name: "acme".into(),
        ..config
    }
}

async fn server(config: SchedulerConfig, tenant: TenantConfig) -> TestServer {
    let config = SchedulerConfig {
        tenants: vec![acme(tenant)],
        ..config
    };
    TestServer::with_options(config, options()).await
}

fn shell(id: &str, command: &str) -> pb::FunctionCall {
    call(
        id,
        "run_shell_command",
        json!({"command": command, "dir_path": "."}),
    )
}

fn read(id: &str) -> pb::FunctionCall {
    call(id, "list_directory", json!({"dir_path": "."}))
}

/// A tenant table with only `quotas`.
fn limited(quotas: TenantQuotas) -> TenantConfig {
    TenantConfig {
        quotas,
        ..TenantConfig::default()
    }
}

/// A batch of `token` in `session` whose call `call_id` (`sleep 30`) is
/// Executing: it holds an execution slot and keeps its session busy.
async fn busy(
    srv: &TestServer,
    token: &str,
    session: &str,
    call_id: &str,
) -> tonic::Streaming<pb::ScheduleCallsResponse> {
    let mut stream = schedule(
        srv,
        token,
        request(session, vec![shell(call_id, "sleep 30")]),
    )
    .await
    .expect("accepted");
    until_executing(&mut stream, call_id).await;
    stream
}

/// Schedules as `token`; the status when refused.
async fn schedule(
    srv: &TestServer,
    token: &str,
    request: pb::ScheduleCallsRequest,
) -> Result<tonic::Streaming<pb::ScheduleCallsResponse>, tonic::Status> {
    let mut client = srv.client.clone();
    client
        .schedule_calls(with_token(token, request))
        .await
        .map(|r| r.into_inner())
}

/// Every event of a batch that must be accepted.
async fn run(srv: &TestServer, token: &str, request: pb::ScheduleCallsRequest) -> Vec<Event> {
    collect(schedule(srv, token, request).await.expect("accepted")).await
}

/// Reads `stream` until `call_id` is Executing.
async fn until_executing(
    stream: &mut tonic::Streaming<pb::ScheduleCallsResponse>,
    call_id: &str,
) -> Vec<Event> {
    let mut seen = Vec::new();
    next_matching(stream, &mut seen, |e| {
        matches!(e, Event::CallUpdate(u)
            if u.call_id == call_id && u.state.as_ref().map(state_name) == Some("executing"))
    })
    .await;
    seen
}

fn with_mode(mut r: pb::ScheduleCallsRequest, mode: pb::ApprovalMode) -> pb::ScheduleCallsRequest {
    r.approval_mode = mode as i32;
    r
}

async fn cancel(srv: &TestServer, token: &str, session: &str) {
    let mut client = srv.client.clone();
    client
        .cancel(with_token(
            token,
            pb::CancelRequest {
                session_id: session.into(),
                ..Default::default()
            },
        ))
        .await
        .expect("cancel");
}

fn refusal(status: tonic::Status, code: tonic::Code) -> String {
    assert_eq!(status.code(), code, "{status:?}");
    status.message().to_string()
}

#[tokio::test]
async fn a_tenant_limited_to_default_cannot_ask_for_yolo_nor_a_more_permissive_sandbox() {
    let srv = server(
        SchedulerConfig::default(),
        TenantConfig {
            allowed_modes: Some(vec![ApprovalMode::Default, ApprovalMode::Plan]),
            max_sandbox_level: Some(SandboxLevel::ReadOnly),
            ..TenantConfig::default()
        },
    )
    .await;
    let yolo = || with_mode(request("main", vec![read("r")]), pb::ApprovalMode::Yolo);
    let status = schedule(&srv, A, yolo()).await.unwrap_err();
    assert_eq!(
        refusal(status, tonic::Code::PermissionDenied),
        "tenant acme may not use approval mode yolo (allowed: default, plan)"
    );
    // The other tenant has no such limit.
    let events = run(&srv, B, yolo()).await;
    assert_eq!(
        states(&events, "r"),
        ["validating", "scheduled", "executing", "success"]
    );
    // An allowed mode is accepted.
    let plan = with_mode(request("main", vec![read("r")]), pb::ApprovalMode::Plan);
    let events = run(&srv, A, plan).await;
    assert_eq!(
        states(&events, "r"),
        ["validating", "scheduled", "executing", "success"]
    );

    let mut wider = request("main", vec![read("r")]);
    wider.sandbox_level = pb::SandboxLevel::WorkspaceWrite as i32;
    let status = schedule(&srv, A, wider.clone()).await.unwrap_err();
    assert_eq!(
        refusal(status, tonic::Code::PermissionDenied),
        "sandbox level workspace_write is more permissive than tenant acme's max_sandbox_level read_only"
    );
    assert!(schedule(&srv, B, wider).await.is_ok());
    let mut strict = request("main", vec![read("r")]);
    strict.sandbox_level = pb::SandboxLevel::ReadOnly as i32;
    let events = run(&srv, A, strict).await;
    assert_eq!(terminal_name(&events, "r"), "success");
}

/// The session of a tenant whose most permissive level is read_only runs
/// its commands read-only, asked for nothing (clamped, enforced by the
/// kernel), while the other tenant's same command writes.
#[tokio::test]
async fn a_tenants_commands_run_at_its_most_permissive_sandbox_level() {
    assert!(
        kernel_enforces(SandboxLevel::ReadOnly),
        "the kernel cannot enforce the level: see the line above"
    );
    let srv = server(
        yolo_confined(),
        TenantConfig {
            max_sandbox_level: Some(SandboxLevel::ReadOnly),
            ..TenantConfig::default()
        },
    )
    .await;
    let events = run(&srv, A, request("s", vec![shell("w", "echo a > a.txt")])).await;
    assert_eq!(terminal_name(&events, "w"), "error");
    let (kind, _) = error_of(&events, "w");
    assert_eq!(kind, pb::ErrorType::SandboxDenied);
    assert!(!srv.path("a.txt").exists());
    let events = run(&srv, B, request("s", vec![shell("w", "echo b > b.txt")])).await;
    assert_eq!(terminal_name(&events, "w"), "success");
    assert_eq!(std::fs::read_to_string(srv.path("b.txt")).unwrap(), "b\n");
}

fn terminal_name(events: &[Event], call_id: &str) -> &'static str {
    state_name(&terminal(events, call_id))
}

#[tokio::test]
async fn a_tenants_policy_file_denies_what_the_servers_allows() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("acme.toml");
    std::fs::write(
        &policy,
        "[[rule]]\nname = \"acme-no-echo\"\ncommand_prefix = \"echo\"\ndecision = \"deny\"\ndeny_message = \"acme does not echo\"\n",
    )
    .unwrap();
    let srv = server(
        yolo(),
        TenantConfig {
            policy_file: Some(policy.clone()),
            ..TenantConfig::default()
        },
    )
    .await;
    let batch = || request("main", vec![shell("e", "echo hello")]);
    let events = run(&srv, A, batch()).await;
    assert_eq!(states(&events, "e"), ["validating", "error"]);
    let (kind, message) = error_of(&events, "e");
    assert_eq!(kind, pb::ErrorType::PolicyViolation);
    assert!(
        message.contains("acme does not echo")
            && message.contains(&format!("rule 'acme-no-echo' ({}:1)", policy.display())),
        "{message}"
    );
    let events = run(&srv, B, batch()).await;
    assert_eq!(
        states(&events, "e"),
        ["validating", "scheduled", "executing", "success"]
    );
    let output = success_output(&events, "e");
    assert!(output.trim_end().ends_with("Output: hello"), "{output}");
}

#[tokio::test]
async fn at_its_executing_quota_a_tenant_is_refused_while_the_other_runs() {
    let srv = server(
        yolo(),
        limited(TenantQuotas {
            max_executing_calls: Some(1),
            ..TenantQuotas::default()
        }),
    )
    .await;
    let running = busy(&srv, A, "long", "s").await;

    let status = schedule(&srv, A, request("other", vec![read("r")]))
        .await
        .unwrap_err();
    assert_eq!(
        refusal(status, tonic::Code::ResourceExhausted),
        "tenant acme: max_executing_calls 1 reached (1 executing)"
    );
    let events = run(&srv, B, request("other", vec![shell("e", "echo b")])).await;
    assert_eq!(terminal_name(&events, "e"), "success");

    // The slot is free once the sleep stopped.
    cancel(&srv, A, "long").await;
    let rest = collect(running).await;
    assert_eq!(terminal_name(&rest, "s"), "cancelled");
    let events = run(&srv, A, request("other", vec![read("r")])).await;
    assert_eq!(terminal_name(&events, "r"), "success");
    let metrics = srv.metrics.render(&Default::default());
    for line in [
        "toolsched_tenant_calls_total{outcome=\"cancelled\",tenant=\"acme\"} 1",
        "toolsched_tenant_calls_total{outcome=\"success\",tenant=\"acme\"} 1",
        "toolsched_tenant_calls_total{outcome=\"success\",tenant=\"beta\"} 1",
        "toolsched_tenant_calls_executing{tenant=\"acme\"} 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
}

/// A call whose tenant's execution slots are all taken is not Executing
/// until its tool starts: it stays Scheduled while it waits for a slot.
#[tokio::test]
async fn a_call_waiting_for_its_tenants_slot_is_scheduled_not_executing() {
    let srv = server(
        SchedulerConfig::default(),
        limited(TenantQuotas {
            max_executing_calls: Some(1),
            ..TenantQuotas::default()
        }),
    )
    .await;
    // Both admitted while nothing executes: each waits at its prompt.
    let mut first = schedule(
        &srv,
        A,
        request("a", vec![shell("w", "echo a > a.txt; sleep 30")]),
    )
    .await
    .expect("accepted");
    let mut second = schedule(&srv, A, request("b", vec![shell("w", "echo b > b.txt")]))
        .await
        .expect("accepted");
    let mut seen = Vec::new();
    let prompt_a = await_prompt(&mut first, &mut seen, "w").await;
    let prompt_b = await_prompt(&mut second, &mut seen, "w").await;
    let mut client = srv.client.clone();
    client
        .confirm(with_token(A, confirm_once("a", &prompt_a)))
        .await
        .expect("confirm a");
    until_executing(&mut first, "w").await;
    client
        .confirm(with_token(A, confirm_once("b", &prompt_b)))
        .await
        .expect("confirm b");
    // b holds no slot: it stays Scheduled until a's command stopped.
    let mut b_events = Vec::new();
    next_matching(&mut second, &mut b_events, |e| {
        matches!(e, Event::CallUpdate(u) if u.state.as_ref().map(state_name) == Some("scheduled"))
    })
    .await;
    let cancel_sent = std::time::SystemTime::now();
    cancel(&srv, A, "a").await;
    let mut executing_at = None;
    while let Some(msg) = second.message().await.expect("stream ok") {
        let event = msg.event.expect("event set");
        if executing_at.is_none()
            && matches!(&event, Event::CallUpdate(u) if u.state.as_ref().map(state_name) == Some("executing"))
        {
            let t = msg.time.expect("time");
            executing_at =
                Some(std::time::UNIX_EPOCH + Duration::new(t.seconds as u64, t.nanos as u32));
        }
        b_events.push(event);
    }
    assert_eq!(
        states(&b_events, "w"),
        ["scheduled", "executing", "success"],
        "{b_events:?}"
    );
    let executing_at = executing_at.expect("b executed");
    assert!(
        executing_at >= cancel_sent,
        "b was Executing {:?} before a's slot was given back",
        cancel_sent.duration_since(executing_at).unwrap_or_default()
    );
    let rest = collect(first).await;
    assert_eq!(terminal_name(&rest, "w"), "cancelled");
}

#[tokio::test]
async fn at_its_session_quota_a_tenant_is_refused_while_the_other_runs() {
    let srv = server(
        yolo(),
        limited(TenantQuotas {
            max_sessions: Some(1),
            ..TenantQuotas::default()
        }),
    )
    .await;
    let running = busy(&srv, A, "one", "s").await;
    let status = schedule(&srv, A, request("two", vec![read("r")]))
        .await
        .unwrap_err();
    assert_eq!(
        refusal(status, tonic::Code::ResourceExhausted),
        "tenant acme: max_sessions 1 reached (1 live, each busy)"
    );
    // Its own session takes more batches.
    let mut queued = schedule(&srv, A, request("one", vec![read("q")]))
        .await
        .expect("accepted");
    for (token, session) in [(B, "one"), (B, "two")] {
        let events = run(&srv, token, request(session, vec![read("r")])).await;
        assert_eq!(terminal_name(&events, "r"), "success");
    }
    cancel(&srv, A, "one").await;
    collect(running).await;
    while queued.message().await.expect("stream").is_some() {}
    // `one` is idle now: a new session takes its place.
    let events = run(&srv, A, request("two", vec![read("r")])).await;
    assert_eq!(terminal_name(&events, "r"), "success");
}

#[tokio::test]
async fn at_its_queued_batches_quota_a_tenant_is_refused() {
    let srv = server(
        yolo(),
        limited(TenantQuotas {
            max_queued_batches: Some(1),
            ..TenantQuotas::default()
        }),
    )
    .await;
    let running = busy(&srv, A, "s", "s").await;
    let mut waiting = schedule(&srv, A, request("s", vec![read("q")]))
        .await
        .expect("one may wait");
    let status = schedule(&srv, A, request("s", vec![read("q2")]))
        .await
        .unwrap_err();
    assert_eq!(
        refusal(status, tonic::Code::ResourceExhausted),
        "tenant acme: max_queued_batches 1 reached (1 queued)"
    );
    // Requests with one request id racing each other, each refused: every
    // one is told (none follows the empty log of a refused original).
    let racing = (0..16).map(|_| {
        let srv = &srv;
        async move {
            let mut again = request("s", vec![read("q3")]);
            again.request_id = "raced".into();
            match schedule(srv, A, again).await {
                Ok(stream) => Ok(collect(stream).await.len()),
                Err(status) => Err((status.code(), status.message().to_string())),
            }
        }
    });
    for outcome in futures::future::join_all(racing).await {
        match outcome {
            Err((tonic::Code::ResourceExhausted, message)) => {
                assert_eq!(
                    message,
                    "tenant acme: max_queued_batches 1 reached (1 queued)"
                )
            }
            Err((tonic::Code::Unavailable, message)) => assert_eq!(
                message,
                "the store is unavailable: the batch this request_id named was refused before it started (a request with the same request_id raced it); send the request again"
            ),
            other => panic!("a racing request was not told it was refused: {other:?}"),
        }
    }
    // Not queued: another session of the tenant, and the other tenant.
    let events = run(&srv, A, request("t", vec![read("r")])).await;
    assert_eq!(terminal_name(&events, "r"), "success");
    let events = run(&srv, B, request("s", vec![read("r")])).await;
    assert_eq!(terminal_name(&events, "r"), "success");
    cancel(&srv, A, "s").await;
    collect(running).await;
    while waiting.message().await.expect("stream").is_some() {}
}

#[tokio::test]
async fn over_its_shell_commands_per_minute_a_tenant_is_refused() {
    let srv = server(
        yolo(),
        limited(TenantQuotas {
            max_shell_commands_per_minute: Some(2),
            ..TenantQuotas::default()
        }),
    )
    .await;
    let events = run(
        &srv,
        A,
        request("s", vec![shell("a", "echo 1"), shell("b", "echo 2")]),
    )
    .await;
    assert_eq!(terminal_name(&events, "b"), "success");
    let status = schedule(&srv, A, request("s", vec![shell("c", "echo 3")]))
        .await
        .unwrap_err();
    assert_eq!(
        refusal(status, tonic::Code::ResourceExhausted),
        "tenant acme: max_shell_commands_per_minute 2 reached (2 in the last minute, this batch asks 1)"
    );
    // Other tools are not counted, nor the other tenant's commands.
    let events = run(&srv, A, request("s", vec![read("r")])).await;
    assert_eq!(terminal_name(&events, "r"), "success");
    let events = run(&srv, B, request("s", vec![shell("c", "echo 3")])).await;
    assert_eq!(terminal_name(&events, "c"), "success");
}

fn first_batch_id(events: &[Event]) -> String {
    match events.first() {
        Some(Event::BatchAccepted(a)) => a.batch_id.clone(),
        other => panic!("first event is not BatchAccepted: {other:?}"),
    }
}

async fn watch_as(
    srv: &TestServer,
    token: &str,
    session: &str,
    batch: &str,
) -> Result<Vec<Event>, tonic::Status> {
    let mut client = srv.client.clone();
    let stream = client
        .watch_batch(with_token(
            token,
            pb::WatchBatchRequest {
                session_id: session.into(),
                batch_id: batch.into(),
                after_sequence: 0,
            },
        ))
        .await?
        .into_inner();
    Ok(collect(stream).await)
}

#[tokio::test]
async fn over_its_retained_event_bytes_a_tenant_loses_its_oldest_events_then_is_refused() {
    const QUOTA: usize = 64 * 1024;
    let srv = server(
        yolo(),
        limited(TenantQuotas {
            max_retained_event_bytes: Some(QUOTA),
            ..TenantQuotas::default()
        }),
    )
    .await;
    // Each batch's events hold its 40,000-byte output (streamed, then in the
    // function response): more than half the quota.
    let big = |file: &str| {
        shell(
            "c",
            &format!("echo ran >> {file} && head -c 40000 /dev/zero | tr '\\0' x"),
        )
    };
    let mut first = request("one", vec![big("acme.log")]);
    first.request_id = "r-one".into();
    let first = run(&srv, A, first.clone()).await;
    assert_eq!(terminal_name(&first, "c"), "success");
    let first_id = first_batch_id(&first);
    let beta = run(&srv, B, request("one", vec![big("beta.log")])).await;
    let beta_id = first_batch_id(&beta);

    // The next batch of acme (another session) makes room: the oldest
    // completed batch's events go, the session and request id stay.
    let second = run(&srv, A, request("two", vec![big("acme.log")])).await;
    assert_eq!(terminal_name(&second, "c"), "success");
    let dropped = format!(
        "batch '{first_id}' of session 'one' completed, but its events were dropped to fit the tenant's max_retained_event_bytes: they cannot be replayed or watched (nothing was run again)"
    );
    let status = watch_as(&srv, A, "one", &first_id).await.unwrap_err();
    assert_eq!(refusal(status, tonic::Code::FailedPrecondition), dropped);
    let mut retry = request("one", vec![big("acme.log")]);
    retry.request_id = "r-one".into();
    let status = schedule(&srv, A, retry).await.unwrap_err();
    assert_eq!(refusal(status, tonic::Code::FailedPrecondition), dropped);
    let ran = std::fs::read_to_string(srv.workspace.path().join("acme.log")).unwrap();
    assert_eq!(ran, "ran\nran\n", "the retry ran nothing");
    // The other tenant's history is its own.
    let replay = watch_as(&srv, B, "one", &beta_id)
        .await
        .expect("beta's batch kept");
    assert_eq!(terminal_name(&replay, "c"), "success");

    // A running batch that holds more than the quota: acme is refused,
    // naming the quota and its use, while beta runs.
    let mut holding = schedule(
        &srv,
        A,
        request(
            "hold",
            vec![shell("h", "head -c 70000 /dev/zero | tr '\\0' x; sleep 30")],
        ),
    )
    .await
    .expect("accepted");
    let mut streamed = 0;
    while streamed < 70_000 {
        let msg = tokio::time::timeout(Duration::from_secs(60), holding.message())
            .await
            .expect("output within 60 s")
            .expect("stream ok")
            .expect("stream open");
        if let Some(Event::CallUpdate(pb::ToolCallUpdate {
            state: Some(State::Executing(x)),
            ..
        })) = msg.event
        {
            streamed += x.output_chunk.len();
        }
    }
    let status = schedule(&srv, A, request("two", vec![read("r")]))
        .await
        .unwrap_err();
    let message = refusal(status, tonic::Code::ResourceExhausted);
    let used = message
        .strip_prefix("tenant acme: max_retained_event_bytes 65536 reached (")
        .and_then(|m| m.strip_suffix(" bytes held by 1 running batch)"))
        .unwrap_or_else(|| panic!("{message}"));
    assert!(used.parse::<usize>().unwrap() >= 70_000, "{message}");
    let events = run(&srv, B, request("two", vec![shell("e", "echo b")])).await;
    assert_eq!(terminal_name(&events, "e"), "success");

    // Once the batch ended its events can go: acme runs again.
    cancel(&srv, A, "hold").await;
    let rest = collect(holding).await;
    assert_eq!(terminal_name(&rest, "h"), "cancelled");
    let events = run(&srv, A, request("two", vec![read("r")])).await;
    assert_eq!(terminal_name(&events, "r"), "success");
}

/// At the server's max_sessions a new session of a tenant forgets that
/// tenant's own least recently used idle session before another tenant's
/// (a forgotten session loses its mode and rules).
#[tokio::test]
async fn at_the_servers_session_cap_a_tenant_makes_room_from_its_own_sessions() {
    let srv = server(
        SchedulerConfig {
            max_sessions: 2,
            ..yolo()
        },
        TenantConfig::default(),
    )
    .await;
    let known = |token: &'static str, id: &'static str| {
        let mut client = srv.client.clone();
        async move {
            client
                .get_session(with_token(
                    token,
                    pb::GetSessionRequest {
                        session_id: id.into(),
                    },
                ))
                .await
                .is_ok()
        }
    };
    // beta's session is the least recently used.
    let events = run(&srv, B, request("b1", vec![read("r")])).await;
    assert_eq!(terminal_name(&events, "r"), "success");
    let events = run(&srv, A, request("a1", vec![read("r")])).await;
    assert_eq!(terminal_name(&events, "r"), "success");
    let events = run(&srv, A, request("a2", vec![read("r")])).await;
    assert_eq!(terminal_name(&events, "r"), "success");
    assert!(known(B, "b1").await, "beta's session is kept");
    assert!(!known(A, "a1").await, "acme's own idle session made room");
    assert!(known(A, "a2").await);
    // beta's next new session forgets beta's b1, not acme's newer a2.
    let events = run(&srv, B, request("b2", vec![read("r")])).await;
    assert_eq!(terminal_name(&events, "r"), "success");
    assert!(known(B, "b2").await);
    assert!(!known(B, "b1").await);
    assert!(known(A, "a2").await, "acme's session is kept");
}

/// A batch refused by any check counts nothing and drops nothing: not the
/// shell commands it asks, not the tenant's retained events.
#[tokio::test]
async fn a_refused_batch_changes_nothing_of_its_tenants() {
    let srv = server(
        SchedulerConfig {
            max_sessions: 3,
            ..yolo()
        },
        limited(TenantQuotas {
            max_queued_batches: Some(1),
            max_shell_commands_per_minute: Some(4),
            max_retained_event_bytes: Some(20_000),
            ..TenantQuotas::default()
        }),
    )
    .await;
    let occupied = busy(&srv, A, "busy", "s").await;
    let mut queued = schedule(&srv, A, request("busy", vec![read("q")]))
        .await
        .expect("one may wait");
    // Completed, and more than the retained quota on its own.
    std::fs::write(srv.workspace.path().join("big.txt"), "x".repeat(30_000)).unwrap();
    let kept = run(
        &srv,
        A,
        request(
            "kept",
            vec![call("big", "read_file", json!({"file_path": "big.txt"}))],
        ),
    )
    .await;
    let kept_id = first_batch_id(&kept);
    assert_eq!(terminal_name(&kept, "big"), "success");

    // Refused by the queue: the kept batch's events stay.
    let status = schedule(&srv, A, request("busy", vec![read("q2")]))
        .await
        .unwrap_err();
    assert_eq!(
        refusal(status, tonic::Code::ResourceExhausted),
        "tenant acme: max_queued_batches 1 reached (1 queued)"
    );
    let replay = watch_as(&srv, A, "kept", &kept_id)
        .await
        .expect("still kept");
    assert_eq!(terminal_name(&replay, "big"), "success");

    // Refused by the server's max_sessions (3 live, each busy): its two
    // shell commands are not counted against the tenant's four a minute
    // (the two sleeps hold two).
    let other = busy(&srv, B, "b", "s").await;
    let holding = busy(&srv, A, "kept", "h").await;
    let two = || vec![shell("x1", "true"), shell("x2", "true")];
    let status = schedule(&srv, A, request("new", two())).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("max_sessions"),
        "{}",
        status.message()
    );
    cancel(&srv, B, "b").await;
    collect(other).await;
    let events = run(&srv, A, request("new", two())).await;
    assert_eq!(terminal_name(&events, "x2"), "success");
    // A batch asking more than the quota alone says so.
    let five = (0..5).map(|i| shell(&format!("y{i}"), "true")).collect();
    let status = schedule(&srv, A, request("new", five)).await.unwrap_err();
    assert_eq!(
        refusal(status, tonic::Code::ResourceExhausted),
        "tenant acme: max_shell_commands_per_minute 4 reached (this batch alone asks 5)"
    );

    for session in ["busy", "kept"] {
        cancel(&srv, A, session).await;
    }
    collect(occupied).await;
    collect(holding).await;
    while queued.message().await.expect("stream").is_some() {}
}

#[tokio::test]
async fn list_tools_differs_per_tenant_and_a_hidden_tool_is_unknown() {
    use mcp_common::{py, servers};
    let config = SchedulerConfig {
        tenants: vec![acme(TenantConfig {
            mcp_servers: Some(vec!["py".into()]),
            ..TenantConfig::default()
        })],
        ..yolo()
    };
    let srv = TestServer::with_mcp_options(
        config,
        options(),
        servers(vec![("py", py(true)), ("other", py(true))]),
    )
    .await;
    let names = |token: &'static str| {
        let mut client = srv.client.clone();
        async move {
            let tools = client
                .list_tools(with_token(token, pb::ListToolsRequest {}))
                .await
                .expect("ListTools")
                .into_inner()
                .tools;
            tools
                .into_iter()
                .map(|t| t.name)
                .filter(|n| n.starts_with("mcp_"))
                .collect::<Vec<_>>()
        }
    };
    let (a, b) = (names(A).await, names(B).await);
    assert!(a.contains(&"mcp_py_whoami".to_string()), "{a:?}");
    assert!(!a.iter().any(|n| n.starts_with("mcp_other_")), "{a:?}");
    assert!(b.contains(&"mcp_other_whoami".to_string()), "{b:?}");
    assert_eq!(b.len(), 2 * a.len(), "{a:?} {b:?}");

    let hidden = || request("s", vec![call("h", "mcp_other_whoami", json!({}))]);
    let events = run(&srv, A, hidden()).await;
    assert_eq!(states(&events, "h"), ["error"]);
    let (kind, message) = error_of(&events, "h");
    assert_eq!(kind, pb::ErrorType::ToolNotRegistered);
    assert!(
        message.starts_with("Tool \"mcp_other_whoami\" not found in registry."),
        "{message}"
    );
    let events = run(&srv, B, hidden()).await;
    assert_eq!(terminal_name(&events, "h"), "success");
}

/// JSON lines of the binary's stderr until `done` holds for them (bounded
/// wait); every line must parse.
fn lines_until(bin: &Binary, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut lines = Vec::new();
    while !done(&lines) {
        let line = bin
            .stderr_lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("log lines within 60 s; got {lines:#?}"));
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("a --log-format json line does not parse ({e}): {line}"));
        lines.push(v);
    }
    lines
}

/// A config file with the three tokens and a `[[tenants]]` table for acme.
fn config_file(dir: &std::path::Path) -> std::path::PathBuf {
    let config = dir.join("toolsched.toml");
    let mut text = String::new();
    for t in tokens() {
        text.push_str(&format!(
            "[[auth_tokens]]\nsha256 = \"{}\"\ntenant = \"{}\"\nprincipal = \"{}\"\n\n",
            t.sha256, t.tenant, t.principal
        ));
    }
    text.push_str("[[tenants]]\nname = \"acme\"\nallowed_modes = [\"default\", \"auto_edit\"]\nmax_executing_calls = 4\n");
    std::fs::write(&config, text).unwrap();
    config
}

fn confirm_once(session: &str, prompt: &pb::AwaitingApproval) -> pb::ConfirmRequest {
    pb::ConfirmRequest {
        session_id: session.into(),
        call_id: "w".into(),
        correlation_id: prompt.correlation_id.clone(),
        outcome: pb::ConfirmationOutcome::ProceedOnce as i32,
        new_content: None,
    }
}

/// The `call ended` audit line of `call_id` in `lines`.
fn ended_line<'a>(lines: &'a [Value], call_id: &str) -> &'a Value {
    lines
        .iter()
        .find(|v| v["call_id"] == call_id && v["message"] == "call ended")
        .unwrap_or_else(|| panic!("no 'call ended' of {call_id}: {lines:#?}"))
}

/// A prompt of a session owned by one replica, answered by a Confirm sent
/// to another (relayed through the store, tests/services.sh's PostgreSQL):
/// the owner's audit line names the principal who sent the Confirm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_relayed_by_another_replica_names_the_principal_who_gave_it() {
    let url = replicas_support::fresh_database().await;
    let ws = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path());
    let flags = [
        "--store",
        url.as_str(),
        "--config",
        config.to_str().unwrap(),
    ];
    let owner = Binary::start(ws.path(), &flags);
    let other = Binary::start(ws.path(), &flags);
    let write = call(
        "w",
        "write_file",
        json!({"file_path": "relayed.txt", "content": "x\n"}),
    );
    let mut stream = replicas_support::client(owner.addr)
        .await
        .schedule_calls(with_token(A, request("relayed", vec![write])))
        .await
        .unwrap()
        .into_inner();
    let mut events = Vec::new();
    let prompt = await_prompt(&mut stream, &mut events, "w").await;
    replicas_support::client(other.addr)
        .await
        .confirm(with_token(A2, confirm_once("relayed", &prompt)))
        .await
        .expect("relayed to the owner");
    events.extend(collect(stream).await);
    assert_eq!(terminal_name(&events, "w"), "success");
    let lines = lines_until(&owner, |l| {
        l.iter()
            .any(|v| v["call_id"] == "w" && v["message"] == "call ended")
    });
    let line = ended_line(&lines, "w");
    assert_eq!(
        (&line["principal"], &line["approved_by"], &line["tenant"]),
        (&json!("alice"), &json!("carol"), &json!("acme")),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_names_who_asked_and_who_approved_and_never_a_token() {
    let ws = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path());
    let bin = Binary::start_with_env(
        ws.path(),
        &["--config", config.to_str().unwrap()],
        &[("RUST_LOG", "debug")],
    );
    let mut client =
        pb::tool_scheduler_client::ToolSchedulerClient::connect(format!("http://{}", bin.addr))
            .await
            .unwrap();
    let write = call(
        "w",
        "write_file",
        json!({"file_path": "notes.txt", "content": "x\n"}),
    );
    let mut stream = client
        .schedule_calls(with_token(A, request("audited", vec![write])))
        .await
        .unwrap()
        .into_inner();
    let mut events = Vec::new();
    let prompt = await_prompt(&mut stream, &mut events, "w").await;
    // Another principal of the same tenant answers.
    client
        .confirm(with_token(
            A2,
            pb::ConfirmRequest {
                session_id: "audited".into(),
                call_id: "w".into(),
                correlation_id: prompt.correlation_id.clone(),
                outcome: pb::ConfirmationOutcome::ProceedOnce as i32,
                new_content: None,
            },
        ))
        .await
        .unwrap();
    events.extend(collect(stream).await);
    assert_eq!(terminal_name(&events, "w"), "success");
    // A refused request is logged too; its token must not be.
    let yolo = with_mode(request("audited", vec![read("r")]), pb::ApprovalMode::Yolo);
    let status = client
        .schedule_calls(with_token(A, yolo))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::PermissionDenied);
    const WRONG: &str = "token-nobody-was-given-0123456789";
    let status = client
        .list_tools(with_token(WRONG, pb::ListToolsRequest::default()))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated);

    let ended = |l: &[Value]| {
        l.iter()
            .any(|v| v["call_id"] == "w" && v["message"] == "call ended")
    };
    let lines = lines_until(&bin, ended);
    let line = lines
        .iter()
        .find(|v| v["call_id"] == "w" && v["message"] == "call ended")
        .unwrap();
    for (key, value) in [
        ("target", "toolsched::audit"),
        ("tenant", "acme"),
        ("principal", "alice"),
        ("workspace", ""),
        ("session", "audited"),
        ("approval", "proceed_once"),
        ("approved_by", "carol"),
        ("state", "success"),
    ] {
        assert_eq!(line[key], value, "{key} in {line}");
    }
    let decided = lines
        .iter()
        .find(|v| v["call_id"] == "w" && v["message"] == "call decided")
        .unwrap();
    assert_eq!(decided["principal"], "alice", "{decided}");
    assert_eq!(decided["workspace"], "", "{decided}");
    drop(client);
    // Everything it logged, to its last line (SIGTERM: it drains and exits,
    // and its stderr closes).
    let pid = nix::unistd::Pid::from_raw(bin.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let mut all: Vec<String> = lines.iter().map(Value::to_string).collect();
    while let Ok(line) = bin.stderr_lines.recv_timeout(Duration::from_secs(60)) {
        all.push(line);
    }
    // Each refusal is an audit line naming why, never the credential.
    let refused: Vec<(String, String)> = all
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["message"] == "request refused")
        .map(|v| {
            assert_eq!(v["target"], "toolsched::audit", "{v}");
            (
                v["code"].as_str().unwrap_or_default().to_string(),
                v["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert!(
        refused.contains(&(
            "permission_denied".into(),
            "tenant acme may not use approval mode yolo (allowed: default, auto_edit)".into()
        )),
        "{refused:?}"
    );
    assert!(
        refused.iter().any(|(code, _)| code == "unauthenticated"),
        "{refused:?}"
    );
    for line in &all {
        for token in [A, A2, B, WRONG] {
            assert!(!line.contains(token), "a token in the log: {line}");
            assert!(
                !line.contains(&hash_hex(token)),
                "a token hash in the log: {line}"
            );
        }
    }
}
