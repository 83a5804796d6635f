//! A batch of a session in a named workspace outlives its replica: two
//! `toolsched` processes share one PostgreSQL (tests/services.sh) and one
//! workspaces root; the one taking the batch over runs it in the workspace
//! the session named (re-opened from the recorded request), never in its
//! own `--workspace`.

use crate::replicas_support;
use crate::support;

use std::time::Duration;

use replicas_support::{client, fresh_database, messages};
use serde_json::json;
use support::{Binary, Event, State, await_prompt, call, request};
use toolsched::api::pb;

fn replica(single: &std::path::Path, root: &std::path::Path, url: &str) -> Binary {
    Binary::start(
        single,
        &[
            "--store",
            url,
            "--store-lease-secs",
            "2",
            "--workspaces-root",
            root.to_str().expect("utf-8"),
            "--create-workspaces",
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_over_batch_runs_in_the_sessions_workspace() {
    let url = fresh_database().await;
    let dir = tempfile::tempdir().expect("dir");
    let (single, root) = (dir.path().join("single"), dir.path().join("root"));
    std::fs::create_dir(&single).expect("single");
    std::fs::create_dir(&root).expect("root");
    let mut a = replica(&single, &root, &url);
    let b = replica(&single, &root, &url);

    // Default mode: the write waits for approval on A.
    let mut stream = client(a.addr)
        .await
        .schedule_calls(pb::ScheduleCallsRequest {
            workspace: "main".into(),
            ..request(
                "s",
                vec![call(
                    "w",
                    "write_file",
                    json!({"file_path": "f.txt", "content": "x\n"}),
                )],
            )
        })
        .await
        .expect("scheduled")
        .into_inner();
    let mut seen = Vec::new();
    let first = await_prompt(&mut stream, &mut seen, "w").await;
    let batch = match seen.first() {
        Some(Event::BatchAccepted(acc)) => acc.batch_id.clone(),
        other => panic!("{other:?}"),
    };
    a.child.kill().expect("SIGKILL");
    a.child.wait().expect("reap");
    drop(stream);

    // B takes the batch over once A's lease ran out (on the database's
    // clock: retried, bounded).
    let mut c = client(b.addr).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut taken = loop {
        match c
            .watch_batch(pb::WatchBatchRequest {
                session_id: "s".into(),
                batch_id: batch.clone(),
                after_sequence: 0,
            })
            .await
        {
            Ok(s) => break s.into_inner(),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                assert!(std::time::Instant::now() < deadline, "not taken over");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let mut seen = Vec::new();
    let again = await_prompt(&mut taken, &mut seen, "w").await;
    assert_ne!(again.correlation_id, first.correlation_id);
    c.confirm(pb::ConfirmRequest {
        session_id: "s".into(),
        call_id: "w".into(),
        correlation_id: again.correlation_id,
        outcome: pb::ConfirmationOutcome::ProceedOnce as i32,
        new_content: None,
    })
    .await
    .expect("confirmed on B");
    let rest = messages(taken).await;
    let events: Vec<Event> = seen
        .into_iter()
        .chain(rest.into_iter().filter_map(|m| m.event))
        .collect();
    assert!(
        matches!(support::terminal(&events, "w"), State::Success(_)),
        "{events:?}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("default/main/f.txt")).expect("written"),
        "x\n"
    );
    assert!(!single.join("f.txt").exists());
    let view = c
        .get_session(pb::GetSessionRequest {
            session_id: "s".into(),
        })
        .await
        .expect("B runs the session now")
        .into_inner();
    assert_eq!(view.workspace, "main");
}
