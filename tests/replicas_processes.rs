//! Two `toolsched` processes sharing one PostgreSQL and one workspace: one
//! session runs on one replica at a time (the other refuses it, UNAVAILABLE
//! naming the owner, rather than interleave its batches), and a replica
//! stopped with SIGTERM lets go of its sessions so the next request on
//! another replica runs at once.

use crate::replicas_support;
use crate::support;

use replicas_support::{client, fresh_database, messages};
use serde_json::json;
use support::{Binary, Event, State, call, next_matching, request};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_runs_on_one_replica_and_sigterm_hands_it_over() {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    let flags = [
        "--store",
        &url,
        "--approval-mode",
        "yolo",
        "--shutdown-grace-secs",
        "0",
    ];
    let a = Binary::start(workspace.path(), &flags);
    let b = Binary::start(workspace.path(), &flags);
    let (mut ca, mut cb) = (client(a.addr).await, client(b.addr).await);

    let mut running = ca
        .schedule_calls(request(
            "s-one",
            vec![call(
                "sleep",
                "run_shell_command",
                json!({"command": "sleep 60"}),
            )],
        ))
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    next_matching(&mut running, &mut seen, |e| {
        matches!(e, Event::CallUpdate(u) if u.call_id == "sleep"
            && matches!(u.state, Some(State::Executing(_))))
    })
    .await;

    // B does not run a second batch of the session beside A's: it is
    // queued behind A's, on A, through the store (as on one replica).
    let mut queued = cb
        .schedule_calls(request(
            "s-one",
            vec![call(
                "echo",
                "run_shell_command",
                json!({"command": "echo b >> log"}),
            )],
        ))
        .await
        .unwrap()
        .into_inner();
    let first = queued.message().await.unwrap().unwrap();
    match first.event {
        Some(Event::BatchAccepted(a)) => assert!(a.queued, "{a:?}"),
        other => panic!("{other:?}"),
    }
    assert!(!workspace.path().join("log").exists());

    // A is rolled: SIGTERM, no grace. Its batch ends; its lease is let go.
    assert_eq!(a.terminate().code(), Some(0));
    let rest = messages(running).await;
    assert!(
        matches!(
            rest.last().and_then(|m| m.event.as_ref()),
            Some(Event::BatchCompleted(_))
        ),
        "{rest:?}"
    );

    // The queued batch ended with A, never run.
    let rest_b = messages(queued).await;
    assert!(!workspace.path().join("log").exists(), "{rest_b:?}");

    // The next request on B runs at once.
    let done = messages(
        cb.schedule_calls(request(
            "s-one",
            vec![call(
                "echo",
                "run_shell_command",
                json!({"command": "echo b >> log"}),
            )],
        ))
        .await
        .unwrap()
        .into_inner(),
    )
    .await;
    assert!(matches!(
        done.last().and_then(|m| m.event.as_ref()),
        Some(Event::BatchCompleted(_))
    ));
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("log")).unwrap(),
        "b\n"
    );
}
