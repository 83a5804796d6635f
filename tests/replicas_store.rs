//! `--store postgres://…` against a real PostgreSQL (started by
//! tests/services.sh): the schema applied once, a store unreachable at
//! start-up stopping the server, a store lost later turning health
//! NOT_SERVING and new batches UNAVAILABLE until it is back, and completed
//! batches (and their request ids) surviving a restart.

use crate::replicas_support;
use crate::support;

use replicas_support::{Relay, batch_id, client, fresh_database, messages, sql, wait_health};
use serde_json::json;
use support::{Binary, call, request};
use tonic_health::pb::health_check_response::ServingStatus;
use toolsched::api::pb;

/// The service readiness probes check.
const SERVICE: &str = "toolsched.v1.ToolScheduler";

fn read(id: &str) -> pb::FunctionCall {
    call(id, "read_file", json!({"file_path": "notes.txt"}))
}

fn with_request_id(session: &str, id: &str) -> pb::ScheduleCallsRequest {
    let mut r = request(session, vec![read("r1"), read("r2")]);
    r.request_id = id.into();
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_batch_stays_watchable_and_replayable_across_a_restart() {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("notes.txt"), "kept\n").unwrap();

    let first = Binary::start(workspace.path(), &["--store", &url]);
    let mut c = client(first.addr).await;
    let live = messages(
        c.schedule_calls(with_request_id("s-restart", "req-1"))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    let id = batch_id(&live);
    assert_eq!(
        live.iter().map(|m| m.sequence).collect::<Vec<_>>(),
        (1..=live.len() as u64).collect::<Vec<_>>()
    );
    assert!(matches!(
        live.last().and_then(|m| m.event.as_ref()),
        Some(pb::schedule_calls_response::Event::BatchCompleted(_))
    ));
    // SIGTERM: what the store wrote behind is in before the exit.
    assert_eq!(first.terminate().code(), Some(0));
    let db = sql(&url).await;
    let events: i64 = db
        .query_one(
            "SELECT coalesce(cardinality(log_bodies), 0)::bigint FROM toolsched_batches \
             WHERE batch_id = $1 AND completed_at IS NOT NULL",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(events, live.len() as i64);

    let second = Binary::start(workspace.path(), &["--store", &url]);
    let mut c = client(second.addr).await;
    // WatchBatch from the start: the same messages, byte for byte.
    let watched = messages(
        c.watch_batch(pb::WatchBatchRequest {
            session_id: "s-restart".into(),
            batch_id: id.clone(),
            after_sequence: 0,
        })
        .await
        .unwrap()
        .into_inner(),
    )
    .await;
    assert_eq!(watched, live);
    // From the middle: the rest.
    let tail = messages(
        c.watch_batch(pb::WatchBatchRequest {
            session_id: "s-restart".into(),
            batch_id: id.clone(),
            after_sequence: 2,
        })
        .await
        .unwrap()
        .into_inner(),
    )
    .await;
    assert_eq!(tail, live[2..].to_vec());
    // The request id replays the batch: nothing new is scheduled.
    let replay = messages(
        c.schedule_calls(with_request_id("s-restart", "req-1"))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    assert_eq!(batch_id(&replay), id);
    match replay[0].event.as_ref() {
        Some(pb::schedule_calls_response::Event::BatchAccepted(a)) => assert!(a.replayed),
        other => panic!("not BatchAccepted: {other:?}"),
    }
    assert_eq!(replay[1..], live[1..]);
    let batches: i64 = db
        .query_one("SELECT count(*) FROM toolsched_batches", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(batches, 1);
    // The same request id with other calls is refused, naming the batch.
    let mut other = request("s-restart", vec![read("r9")]);
    other.request_id = "req-1".into();
    let err = c.schedule_calls(other).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::AlreadyExists);
    assert!(err.message().contains(&id), "{}", err.message());
    // Unknown batches are still NOT_FOUND.
    let err = c
        .watch_batch(pb::WatchBatchRequest {
            session_id: "s-restart".into(),
            batch_id: "no-such-batch".into(),
            after_sequence: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn migrations_are_applied_once_by_replicas_starting_together() {
    let url = fresh_database().await;
    let open = || {
        toolsched::store::PostgresStore::<toolsched::scheduler::BatchEvent>::connect(
            &url,
            Default::default(),
            std::sync::Arc::new(toolsched::api::WireCodec),
        )
    };
    let (a, b, c) = tokio::join!(open(), open(), open());
    let (_a, _b, _c) = (a.unwrap(), b.unwrap(), c.unwrap());
    // Again, on a database already at the newest version.
    let _d = open().await.unwrap();
    let rows = sql(&url)
        .await
        .query(
            "SELECT version, name FROM toolsched_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap();
    let applied: Vec<(i32, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        applied,
        vec![
            (1, "batches".to_string()),
            (2, "leases".to_string()),
            (3, "takeover".to_string()),
            (4, "inbox".to_string()),
            (5, "call_ends".to_string()),
            (6, "batch_log".to_string()),
            (7, "session_settings".to_string()),
        ]
    );
}

#[tokio::test]
async fn a_database_at_an_older_version_gets_only_the_newer_migrations() {
    let url = fresh_database().await;
    let db = sql(&url).await;
    db.batch_execute(&format!(
        "CREATE TABLE toolsched_migrations (version int PRIMARY KEY, name text NOT NULL, \
         applied_at timestamptz NOT NULL DEFAULT now()); {} \
         INSERT INTO toolsched_migrations (version, name) VALUES (1, 'batches'); \
         INSERT INTO toolsched_batches (session_id, batch_id, digest) VALUES ('s', 'old', '')",
        include_str!("../migrations/0001_batches.sql")
    ))
    .await
    .unwrap();
    let _store = toolsched::store::PostgresStore::<toolsched::scheduler::BatchEvent>::connect(
        &url,
        Default::default(),
        std::sync::Arc::new(toolsched::api::WireCodec),
    )
    .await
    .unwrap();
    let versions: Vec<i32> = db
        .query(
            "SELECT version FROM toolsched_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, vec![1, 2, 3, 4, 5, 6, 7]);
    // The batch recorded before the upgrade is kept, at epoch 0.
    let epoch: i64 = db
        .query_one(
            "SELECT epoch FROM toolsched_batches WHERE batch_id = 'old'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(epoch, 0);
}

#[tokio::test]
async fn a_newer_schema_is_refused() {
    let url = fresh_database().await;
    let db = sql(&url).await;
    db.batch_execute(
        "CREATE TABLE toolsched_migrations (version int PRIMARY KEY, name text NOT NULL, \
         applied_at timestamptz NOT NULL DEFAULT now()); \
         INSERT INTO toolsched_migrations VALUES (999, 'future')",
    )
    .await
    .unwrap();
    let err = toolsched::store::PostgresStore::<toolsched::scheduler::BatchEvent>::connect(
        &url,
        Default::default(),
        std::sync::Arc::new(toolsched::api::WireCodec),
    )
    .await
    .err()
    .expect("refused");
    assert_eq!(
        err.to_string(),
        "the store's schema is at version 999, newer than this toolsched knows (7); run a newer toolsched"
    );
}

#[test]
fn an_unreachable_store_at_start_up_stops_the_server_with_the_reason() {
    // A port nobody listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let workspace = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolsched"))
        .args(["serve", "--listen", "127.0.0.1:0", "--workspace"])
        .arg(workspace.path())
        .env(
            "TOOLSCHED_STORE",
            format!("postgres://postgres@127.0.0.1:{port}/x"),
        )
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot reach the store (PostgreSQL)") && stderr.contains("refused"),
        "{stderr}"
    );

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolsched"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            "mysql://secret@db/x",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("store 'mysql://secr…' is neither 'memory' nor a postgres:// URL"),
        "{stderr}"
    );
    assert!(!stderr.contains("secret@db"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_lost_later_is_not_serving_and_refuses_new_batches_until_back() {
    let url = fresh_database().await;
    let (relay, relayed) = Relay::to_store(&url).await;
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("notes.txt"), "kept\n").unwrap();
    let server = Binary::start(workspace.path(), &["--store", &relayed]);
    wait_health(server.addr, SERVICE, ServingStatus::Serving).await;
    let mut c = client(server.addr).await;
    let before = messages(
        c.schedule_calls(request("s-lost", vec![read("r1")]))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;

    relay.cut();
    wait_health(server.addr, SERVICE, ServingStatus::NotServing).await;
    // The process as a whole stays SERVING (liveness): restarting it would
    // not bring the store back.
    let whole = replicas_support::health(server.addr)
        .await
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(whole.status, ServingStatus::Serving as i32);
    let err = c
        .schedule_calls(request("s-lost", vec![read("r2")]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    assert!(
        err.message().starts_with("the store is unavailable: "),
        "{}",
        err.message()
    );

    relay.restore();
    wait_health(server.addr, SERVICE, ServingStatus::Serving).await;
    let after = messages(
        c.schedule_calls(request("s-lost", vec![read("r3")]))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    assert!(matches!(
        after.last().and_then(|m| m.event.as_ref()),
        Some(pb::schedule_calls_response::Event::BatchCompleted(_))
    ));
    // What was recorded behind while the store was lost is written once
    // it is back: after the exit (which flushes), both batches are there
    // and the refused one left nothing.
    assert_eq!(server.terminate().code(), Some(0));
    let rows = sql(&url)
        .await
        .query(
            "SELECT batch_id FROM toolsched_batches WHERE completed_at IS NOT NULL ORDER BY began_at",
            &[],
        )
        .await
        .unwrap();
    let ids: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(ids, vec![batch_id(&before), batch_id(&after)]);
}
