//! Any replica is a front door for Confirm and Cancel: three `toolsched`
//! processes on one PostgreSQL (tests/services.sh) and one workspace,
//! addressed directly (no proxy). A Confirm or Cancel reaching a replica
//! that does not run the session is recorded in the store, the owner is
//! woken (LISTEN/NOTIFY) and carries it out, and the caller gets the
//! owner's answer with the owner's codes.

use crate::replicas_support;
use crate::support;

use std::time::Duration;

use replicas_support::{client, fresh_database, messages};
use serde_json::json;
use support::{Binary, Event, State, call, request};
use toolsched::api::pb;

fn replica(workspace: &std::path::Path, url: &str, extra: &[&str]) -> Binary {
    let mut flags = vec!["--store", url];
    flags.extend_from_slice(extra);
    Binary::start(workspace, &flags)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_raised_on_one_replica_is_answered_by_a_confirm_sent_to_another() {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    let a = replica(workspace.path(), &url, &[]);
    let b = replica(workspace.path(), &url, &[]);
    let c = replica(workspace.path(), &url, &[]);

    let mut on_a = client(a.addr)
        .await
        .schedule_calls(request(
            "s-confirm",
            vec![call(
                "w",
                "write_file",
                json!({"file_path": "out.txt", "content": "once\n"}),
            )],
        ))
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    let prompt = support::await_prompt(&mut on_a, &mut seen, "w").await;
    let confirm = |correlation_id: &str| pb::ConfirmRequest {
        session_id: "s-confirm".into(),
        call_id: "w".into(),
        correlation_id: correlation_id.into(),
        outcome: pb::ConfirmationOutcome::ProceedOnce as i32,
        new_content: None,
    };

    // The owner's answer, with its code, through C.
    let stale = client(c.addr)
        .await
        .confirm(confirm("not-the-prompt"))
        .await
        .unwrap_err();
    assert_eq!(stale.code(), tonic::Code::FailedPrecondition, "{stale:?}");
    assert!(!workspace.path().join("out.txt").exists());

    let mut cb = client(b.addr).await;
    let answered = cb
        .confirm(confirm(&prompt.correlation_id))
        .await
        .unwrap()
        .into_inner();
    assert!(!answered.already_applied);
    let rest = support::collect(on_a).await;
    assert!(
        matches!(support::terminal(&rest, "w"), State::Success(_)),
        "{rest:?}"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("out.txt")).unwrap(),
        "once\n"
    );
    // A retried Confirm while A still holds the session: applied once.
    let again = cb
        .confirm(confirm(&prompt.correlation_id))
        .await
        .unwrap()
        .into_inner();
    assert!(again.already_applied);
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("out.txt")).unwrap(),
        "once\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_sent_to_another_replica_stops_the_command_on_the_owner() {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    let yolo = ["--approval-mode", "yolo"];
    let a = replica(workspace.path(), &url, &yolo);
    let c = replica(workspace.path(), &url, &yolo);

    let mut on_a = client(a.addr)
        .await
        .schedule_calls(request(
            "s-cancel",
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
    let pgid = support::until_pid(&mut on_a, &mut seen, "sleep").await;

    let summary = client(c.addr)
        .await
        .cancel(pb::CancelRequest {
            session_id: "s-cancel".into(),
            batch_id: None,
            reason: "stop it".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((summary.cancelled_calls, summary.cancelled_batches), (1, 1));
    let rest = support::collect(on_a).await;
    match support::terminal(&rest, "sleep") {
        State::Cancelled(c) => assert_eq!(c.reason, "stop it"),
        other => panic!("{other:?}"),
    }
    assert!(
        support::wait_group_gone(pgid).await,
        "left running: {:?}",
        support::live_group_members(pgid)
    );

    // Nothing left to cancel: the owner says so (its session is idle).
    let nothing = client(c.addr)
        .await
        .cancel(pb::CancelRequest {
            session_id: "s-cancel".into(),
            batch_id: None,
            reason: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((nothing.cancelled_calls, nothing.cancelled_batches), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_batch_on_another_replica_follows_the_running_batch_from_the_store() {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    let a = replica(workspace.path(), &url, &[]);
    let b = replica(workspace.path(), &url, &[]);

    let mut on_a = client(a.addr)
        .await
        .schedule_calls(request(
            "s-watch",
            vec![call(
                "w",
                "write_file",
                json!({"file_path": "out.txt", "content": "once\n"}),
            )],
        ))
        .await
        .unwrap()
        .into_inner();
    let mut seen_a = Vec::new();
    let prompt = support::await_prompt(&mut on_a, &mut seen_a, "w").await;
    let batch = match &seen_a[0] {
        Event::BatchAccepted(x) => x.batch_id.clone(),
        other => panic!("{other:?}"),
    };

    let mut cb = client(b.addr).await;
    let watch = |after_sequence| pb::WatchBatchRequest {
        session_id: "s-watch".into(),
        batch_id: batch.clone(),
        after_sequence,
    };
    let mut on_b = cb.watch_batch(watch(0)).await.unwrap().into_inner();
    let mut seen_b = Vec::new();
    let prompt_b = support::await_prompt(&mut on_b, &mut seen_b, "w").await;
    assert_eq!(prompt_b.correlation_id, prompt.correlation_id);
    // From a sequence on, as on the owner.
    let mut later = cb.watch_batch(watch(2)).await.unwrap().into_inner();

    cb.confirm(pb::ConfirmRequest {
        session_id: "s-watch".into(),
        call_id: "w".into(),
        correlation_id: prompt.correlation_id.clone(),
        outcome: pb::ConfirmationOutcome::ProceedOnce as i32,
        new_content: None,
    })
    .await
    .unwrap();
    let mut a_all = Vec::new();
    while let Some(m) = on_a.message().await.unwrap() {
        a_all.push(m);
    }
    let mut b_all = Vec::new();
    while let Some(m) = on_b.message().await.unwrap() {
        b_all.push(m);
    }
    let mut later_all = Vec::new();
    while let Some(m) = later.message().await.unwrap() {
        later_all.push(m);
    }
    // B's stream went on past the prompt to the end, with the owner's
    // events and sequences.
    let tail_a: Vec<(u64, Option<Event>)> = a_all
        .iter()
        .map(|m| (m.sequence, m.event.clone()))
        .collect();
    let b_events: Vec<(u64, Option<Event>)> = b_all
        .iter()
        .map(|m| (m.sequence, m.event.clone()))
        .collect();
    assert!(matches!(
        b_events.last(),
        Some((_, Some(Event::BatchCompleted(_))))
    ));
    assert_eq!(b_events, tail_a);
    assert_eq!(later_all.first().map(|m| m.sequence), Some(3));
    assert_eq!(
        later_all.last().map(|m| m.sequence),
        a_all.last().map(|m| m.sequence)
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("out.txt")).unwrap(),
        "once\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_sent_to_another_replica_is_queued_behind_the_running_one_on_its_owner() {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    let a = replica(workspace.path(), &url, &[]);
    let b = replica(workspace.path(), &url, &[]);

    let mut first = client(a.addr)
        .await
        .schedule_calls(request(
            "s-queue",
            vec![call(
                "w",
                "write_file",
                json!({"file_path": "out.txt", "content": "first\n"}),
            )],
        ))
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    let prompt = support::await_prompt(&mut first, &mut seen, "w").await;

    // A read of what the first batch writes, sent to B while the first
    // waits for its prompt: queued behind it on A, not run beside it.
    let mut cb = client(b.addr).await;
    let mut second = cb
        .schedule_calls(request(
            "s-queue",
            vec![call("r", "read_file", json!({"file_path": "out.txt"}))],
        ))
        .await
        .unwrap()
        .into_inner();
    let accepted = second.message().await.unwrap().unwrap();
    match accepted.event {
        Some(Event::BatchAccepted(x)) => {
            assert!(x.queued, "{x:?}");
            assert_eq!(x.batches_ahead, 1);
        }
        other => panic!("{other:?}"),
    }
    cb.confirm(pb::ConfirmRequest {
        session_id: "s-queue".into(),
        call_id: "w".into(),
        correlation_id: prompt.correlation_id,
        outcome: pb::ConfirmationOutcome::ProceedOnce as i32,
        new_content: None,
    })
    .await
    .unwrap();
    let first_rest = support::collect(first).await;
    assert!(matches!(
        support::terminal(&first_rest, "w"),
        State::Success(_)
    ));
    let second_rest = support::collect(second).await;
    assert_eq!(support::success_output(&second_rest, "r"), "first\n");
    let completed = support::completed(&second_rest);
    assert_eq!(completed.calls.len(), 1);
}

/// Streams through a replica that does not run the session (a batch sent
/// there, a WatchBatch of a batch running on the owner) end once the
/// owner's completion is written, woken by notifications alone: the
/// receiving replica's poll of the store is set to an hour. The owner
/// mirrors the log (its last event, BatchCompleted, among it) and writes
/// the completion behind, in either order; a reader that read the whole log
/// before the completion was written used to wait for its poll (1 s), as
/// the completion notified nobody. Every stream must end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_through_another_replica_end_on_notifications_alone() {
    const BATCHES: usize = 40;
    const WATCHES: usize = 8;
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("notes.txt"), "n\n").unwrap();
    let hour = ["--store-tail-poll-ms", "3600000"];
    let a = replica(workspace.path(), &url, &hour);
    let b = replica(workspace.path(), &url, &hour);
    let read = || {
        request(
            "s-end",
            vec![call("r", "read_file", json!({"file_path": "notes.txt"}))],
        )
    };
    let ends = |got: &[pb::ScheduleCallsResponse]| {
        matches!(
            got.last().and_then(|m| m.event.as_ref()),
            Some(Event::BatchCompleted(_))
        )
    };
    let (mut ca, mut cb) = (client(a.addr).await, client(b.addr).await);
    // A runs the session.
    let first = messages(ca.schedule_calls(read()).await.unwrap().into_inner()).await;
    assert!(ends(&first), "{first:?}");

    let all = async {
        for i in 0..BATCHES {
            let got = messages(cb.schedule_calls(read()).await.unwrap().into_inner()).await;
            assert!(ends(&got), "batch {i} sent to B: {got:?}");
            let events: Vec<Event> = got.into_iter().filter_map(|m| m.event).collect();
            assert_eq!(support::success_output(&events, "r"), "n\n");
        }
        for i in 0..WATCHES {
            let mut on_a = ca
                .schedule_calls(request(
                    "s-end",
                    vec![call(
                        "w",
                        "write_file",
                        json!({"file_path": format!("w{i}.txt"), "content": "w\n"}),
                    )],
                ))
                .await
                .unwrap()
                .into_inner();
            let mut seen = Vec::new();
            let prompt = support::await_prompt(&mut on_a, &mut seen, "w").await;
            let batch = match &seen[0] {
                Event::BatchAccepted(x) => x.batch_id.clone(),
                other => panic!("{other:?}"),
            };
            let mut on_b = cb
                .watch_batch(pb::WatchBatchRequest {
                    session_id: "s-end".into(),
                    batch_id: batch,
                    after_sequence: 0,
                })
                .await
                .unwrap()
                .into_inner();
            let mut seen_b = Vec::new();
            support::await_prompt(&mut on_b, &mut seen_b, "w").await;
            ca.confirm(pb::ConfirmRequest {
                session_id: "s-end".into(),
                call_id: "w".into(),
                correlation_id: prompt.correlation_id,
                outcome: pb::ConfirmationOutcome::ProceedOnce as i32,
                new_content: None,
            })
            .await
            .unwrap();
            assert!(ends(&messages(on_a).await));
            let got = messages(on_b).await;
            assert!(ends(&got), "WatchBatch {i} on B: {got:?}");
        }
    };
    // Not a measure of speed: a stream that waits for the hour's poll
    // never ends within it.
    tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("a stream through B did not end: its tail was not woken");
}
