//! Tenants (issue 18): static tokens configured by SHA-256 hash map to a
//! (tenant, principal); sessions are namespaced by tenant, and another
//! tenant's session, call or batch behaves as if it did not exist.

use crate::support;

use serde_json::json;
use support::*;
use toolsched::api::ServerOptions;
use toolsched::api::auth::{StaticToken, hash_hex};
use toolsched::api::pb;
use toolsched::scheduler::SchedulerConfig;

const A: &str = "token-of-tenant-a";
const B: &str = "token-of-tenant-b";

async fn two_tenants() -> TestServer {
    let tokens = [(A, "acme", "alice"), (B, "beta", "bob")]
        .into_iter()
        .map(|(token, tenant, principal)| StaticToken {
            sha256: hash_hex(token),
            tenant: tenant.into(),
            principal: principal.into(),
        })
        .collect();
    TestServer::with_options(
        SchedulerConfig::default(),
        ServerOptions {
            auth_tokens: tokens,
            ..ServerOptions::default()
        },
    )
    .await
}

fn write(id: &str, path: &str) -> pb::FunctionCall {
    call(
        id,
        "write_file",
        json!({"file_path": path, "content": "x\n"}),
    )
}

/// The first event of `stream`: BatchAccepted.
async fn accepted(stream: &mut tonic::Streaming<pb::ScheduleCallsResponse>) -> pb::BatchAccepted {
    let first = stream.message().await.expect("stream").expect("an event");
    match first.event {
        Some(Event::BatchAccepted(a)) => a,
        other => panic!("expected BatchAccepted, got {other:?}"),
    }
}

#[tokio::test]
async fn another_tenants_session_behaves_as_if_it_did_not_exist() {
    let server = two_tenants().await;
    let mut client = server.client.clone();

    // B's batch in `main` waits for approval of a write.
    let mut b_stream = client
        .schedule_calls(with_token(B, request("main", vec![write("w1", "b.txt")])))
        .await
        .expect("B schedules")
        .into_inner();
    let b_batch = accepted(&mut b_stream).await.batch_id;
    let mut seen = Vec::new();
    let prompt = await_prompt(&mut b_stream, &mut seen, "w1").await;

    // A's `main` is its own session: not queued behind B's open batch.
    let mut a_stream = client
        .schedule_calls(with_token(A, request("main", vec![write("w1", "a.txt")])))
        .await
        .expect("A schedules")
        .into_inner();
    let a_accepted = accepted(&mut a_stream).await;
    assert!(!a_accepted.queued, "A's main is not B's main");
    assert_eq!(a_accepted.batches_ahead, 0);
    let mut a_seen = Vec::new();
    let a_prompt = await_prompt(&mut a_stream, &mut a_seen, "w1").await;

    // A answering B's prompt (B's session id, call id and correlation id):
    // NOT_FOUND with the same message as a session of A's that does not
    // exist... A's own `main` has a call w1, so use B's other ids in a
    // session A never used.
    let confirm = |session: &str, correlation: &str| pb::ConfirmRequest {
        session_id: session.into(),
        call_id: "w1".into(),
        correlation_id: correlation.into(),
        outcome: pb::ConfirmationOutcome::ProceedOnce as i32,
        new_content: None,
    };
    // B's session under a name only B uses.
    let mut b2 = client
        .schedule_calls(with_token(B, request("b-only", vec![write("w1", "c.txt")])))
        .await
        .expect("B schedules b-only")
        .into_inner();
    let b2_batch = accepted(&mut b2).await.batch_id;
    let mut b2_seen = Vec::new();
    let b2_prompt = await_prompt(&mut b2, &mut b2_seen, "w1").await;

    let foreign = client
        .confirm(with_token(A, confirm("b-only", &b2_prompt.correlation_id)))
        .await
        .unwrap_err();
    let never = client
        .confirm(with_token(
            A,
            confirm("never-used", &b2_prompt.correlation_id),
        ))
        .await
        .unwrap_err();
    assert_eq!(foreign.code(), tonic::Code::NotFound);
    assert_eq!(foreign.message(), "no session 'b-only'");
    assert_eq!(never.message(), "no session 'never-used'");

    // Cancel of B's session or batch: NOT_FOUND as well, and nothing is
    // cancelled.
    let cancel = |session: &str, batch: Option<&str>| pb::CancelRequest {
        session_id: session.into(),
        batch_id: batch.map(Into::into),
        reason: "A tries".into(),
    };
    let foreign = client
        .cancel(with_token(A, cancel("b-only", None)))
        .await
        .unwrap_err();
    assert_eq!(foreign.code(), tonic::Code::NotFound);
    assert_eq!(foreign.message(), "no session 'b-only'");
    // A's own `main` exists, but B's batch id is not in it.
    let foreign = client
        .cancel(with_token(A, cancel("main", Some(&b_batch))))
        .await
        .unwrap_err();
    let never = client
        .cancel(with_token(A, cancel("main", Some("no-such-batch"))))
        .await
        .unwrap_err();
    assert_eq!(foreign.code(), tonic::Code::NotFound);
    assert_eq!(
        foreign.message(),
        format!("no batch '{b_batch}' running or queued in session 'main'")
    );
    assert_eq!(
        never.message(),
        "no batch 'no-such-batch' running or queued in session 'main'"
    );

    // WatchBatch of B's batch: NOT_FOUND, worded as for a batch that never
    // existed.
    let watch = |session: &str, batch: &str| pb::WatchBatchRequest {
        session_id: session.into(),
        batch_id: batch.into(),
        after_sequence: 0,
    };
    let foreign = client
        .watch_batch(with_token(A, watch("b-only", &b2_batch)))
        .await
        .expect_err("A cannot watch B's batch");
    let never = client
        .watch_batch(with_token(A, watch("b-only", "no-such-batch")))
        .await
        .expect_err("no such batch");
    assert_eq!(foreign.code(), tonic::Code::NotFound);
    assert_eq!(
        foreign.message(),
        never.message().replace("no-such-batch", &b2_batch)
    );
    assert!(
        foreign
            .message()
            .starts_with(&format!("no batch '{b2_batch}' in session 'b-only'"))
    );

    // B's calls still wait: B answers its own prompts and they run. B can
    // watch its own batch.
    client
        .confirm(with_token(B, confirm("b-only", &b2_prompt.correlation_id)))
        .await
        .expect("B confirms its own prompt");
    client
        .confirm(with_token(B, confirm("main", &prompt.correlation_id)))
        .await
        .expect("B confirms its own prompt");
    client
        .confirm(with_token(A, confirm("main", &a_prompt.correlation_id)))
        .await
        .expect("A confirms its own prompt");
    for stream in [b_stream, b2, a_stream] {
        let events = collect(stream).await;
        assert_eq!(
            state_name(&terminal(&events, "w1")),
            "success",
            "each tenant's own call ran"
        );
    }
    let watched = client
        .watch_batch(with_token(B, watch("b-only", &b2_batch)))
        .await
        .expect("B watches its own batch")
        .into_inner();
    let events = collect(watched).await;
    assert_eq!(completed(&events).responses.len(), 1);
    for file in ["a.txt", "b.txt", "c.txt"] {
        assert_eq!(std::fs::read_to_string(server.path(file)).unwrap(), "x\n");
    }
}

#[tokio::test]
async fn a_missing_or_unknown_token_is_unauthenticated_without_echoing_it() {
    let server = two_tenants().await;
    let mut client = server.client.clone();
    let err = client
        .schedule_calls(request("main", vec![write("w1", "a.txt")]))
        .await
        .expect_err("no token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    assert_eq!(
        err.message(),
        "missing 'authorization: Bearer <token>' metadata"
    );
    let err = client
        .schedule_calls(with_token(
            "a-guess-0123",
            request("main", vec![write("w1", "a.txt")]),
        ))
        .await
        .expect_err("unknown token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    assert_eq!(err.message(), "invalid bearer token");
    // The hash of a token is not a token.
    let err = client
        .schedule_calls(with_token(
            &hash_hex(A),
            request("main", vec![write("w1", "a.txt")]),
        ))
        .await
        .expect_err("a hash is no credential");
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    assert!(!server.path("a.txt").exists());
}

/// The binary reads `[[auth_tokens]]` from its config file: the file holds
/// only hashes, a token of the file works, and no log line holds it.
#[test]
fn the_binary_takes_token_hashes_from_the_config_file_and_never_logs_a_token() {
    let workspace = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("toolsched.toml");
    std::fs::write(
        &config,
        format!(
            "[[auth_tokens]]\nsha256 = \"{}\"\ntenant = \"acme\"\nprincipal = \"alice\"\n",
            hash_hex(A)
        ),
    )
    .unwrap();
    // Debug logging: the most a log could give away.
    let mut binary = Binary::start_with_env(
        workspace.path(),
        &["--config", config.to_str().unwrap()],
        &[("RUST_LOG", "debug")],
    );
    let lines = std::mem::replace(&mut binary.stderr_lines, std::sync::mpsc::channel().1);
    let addr = binary.addr;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (ok, refused) = runtime.block_on(async {
        let mut client =
            pb::tool_scheduler_client::ToolSchedulerClient::connect(format!("http://{addr}"))
                .await
                .unwrap();
        let ok = client
            .schedule_calls(with_token(
                A,
                request(
                    "main",
                    vec![call("r", "list_directory", json!({"dir_path": "."}))],
                ),
            ))
            .await
            .map(|r| r.into_inner());
        let refused = client
            .list_tools(with_token(B, pb::ListToolsRequest::default()))
            .await
            .unwrap_err();
        (ok, refused)
    });
    let events = runtime.block_on(collect(ok.expect("the file's token is accepted")));
    assert_eq!(state_name(&terminal(&events, "r")), "success");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    assert!(binary.terminate().success());
    // Every line it logged, to its exit (the reader ends at EOF).
    let logged: Vec<String> = lines.iter().collect();
    assert!(
        logged
            .iter()
            .any(|l| l.contains("\"tenant\":\"acme\"") && l.contains("\"principal\":\"alice\"")),
        "the batch's log line names tenant and principal"
    );
    for line in &logged {
        assert!(
            !line.contains(A) && !line.contains(B),
            "a token in a log line: {line}"
        );
    }
}
