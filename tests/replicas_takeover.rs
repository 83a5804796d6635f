//! A replica that dies (`kill -9`) mid-batch, with real `toolsched`
//! processes sharing one PostgreSQL (tests/services.sh) and one workspace:
//! another replica takes the batch over from what the store recorded. A
//! side-effecting call recorded Executing ends `outcome_unknown` and is
//! never run again; calls not yet started run; an open prompt is offered
//! again with a new correlation id (the old one is stale).

use crate::replicas_support;
use crate::support;

use std::time::Duration;

use replicas_support::{batch_id, client, fresh_database, messages, run_until_executing};
use serde_json::json;
use support::{
    Binary, Event, State, call, live_group_members, next_matching, request, wait_for_file,
};
use toolsched::api::pb;

/// Leases of the replicas under test: a dead owner's sessions are taken
/// over this long after its last renewal.
pub(crate) const LEASE_SECS: &str = "2";

pub(crate) fn replica(workspace: &std::path::Path, url: &str, extra: &[&str]) -> Binary {
    let mut flags = vec!["--store", url, "--store-lease-secs", LEASE_SECS];
    flags.extend_from_slice(extra);
    Binary::start(workspace, &flags)
}

/// Kills the replica as `kill -9` does and reaps it.
pub(crate) fn kill_9(mut replica: Binary) {
    replica.child.kill().expect("SIGKILL");
    replica.child.wait().expect("reap");
}

/// WatchBatch through a replica that does not own the batch: UNAVAILABLE
/// (naming the owner) until the dead owner's lease runs out, then the
/// taken-over batch's stream. Bounded: the lease is `LEASE_SECS`.
pub(crate) async fn watch_once_taken_over(
    addr: std::net::SocketAddr,
    session: &str,
    batch: &str,
) -> tonic::Streaming<pb::ScheduleCallsResponse> {
    watch_after_taken_over(addr, session, batch, 0).await
}

/// [`watch_once_taken_over`] from `after_sequence`.
async fn watch_after_taken_over(
    addr: std::net::SocketAddr,
    session: &str,
    batch: &str,
    after_sequence: u64,
) -> tonic::Streaming<pb::ScheduleCallsResponse> {
    let mut c = client(addr).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match c
            .watch_batch(pb::WatchBatchRequest {
                session_id: session.into(),
                batch_id: batch.into(),
                after_sequence,
            })
            .await
        {
            Ok(stream) => return stream.into_inner(),
            Err(status) => {
                // The dead owner still holds the lease: a request for it
                // waits at most the lease for its answer.
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                assert!(
                    status.message().starts_with(&format!(
                        "the replica running session '{session}' did not answer within 2 s (it may have stopped"
                    )),
                    "{}",
                    status.message()
                );
                assert!(
                    std::time::Instant::now() < deadline,
                    "not taken over within 30 s"
                );
                // The lease runs out on the database's clock: retried.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The batch id of the BatchAccepted that starts `events`.
pub(crate) fn accepted(events: &[Event]) -> String {
    match events.first() {
        Some(Event::BatchAccepted(a)) => a.batch_id.clone(),
        other => panic!("first event is not BatchAccepted: {other:?}"),
    }
}

pub(crate) fn events_of(messages: &[pb::ScheduleCallsResponse]) -> Vec<Event> {
    messages.iter().filter_map(|m| m.event.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_running_when_its_replica_is_killed_ends_outcome_unknown_and_the_rest_runs_elsewhere()
 {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    let yolo = ["--approval-mode", "yolo"];
    let a = replica(workspace.path(), &url, &yolo);
    let b = replica(workspace.path(), &url, &yolo);

    let mut second = call(
        "second",
        "run_shell_command",
        json!({"command": "echo y >> log2"}),
    );
    second.wait_for_previous = true;
    let mut running = client(a.addr)
        .await
        .schedule_calls(request(
            "s-kill",
            vec![
                call(
                    "first",
                    "run_shell_command",
                    json!({"command": "echo x >> log; sleep 30"}),
                ),
                second,
            ],
        ))
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    let pgid = support::until_pid(&mut running, &mut seen, "first").await;
    let batch = accepted(&seen);
    // The command had its effect before the replica dies.
    wait_for_file(&workspace.path().join("log"), "x\n").await;

    kill_9(a);
    drop(running);
    // The command dies with its server (the sandbox's parent-death signal).
    assert!(
        support::wait_group_gone(pgid).await,
        "left running: {:?}",
        live_group_members(pgid)
    );

    let taken = messages(watch_once_taken_over(b.addr, "s-kill", &batch).await).await;
    assert_eq!(batch_id(&taken), batch);
    let events = events_of(&taken);
    let (kind, message) = support::error_of(&events, "first");
    assert_eq!(kind, pb::ErrorType::OutcomeUnknown);
    assert_eq!(
        message,
        "the server running this call stopped; it was not re-run"
    );
    assert_eq!(support::states(&events, "first"), ["error"]);
    assert!(
        matches!(support::terminal(&events, "second"), State::Success(_)),
        "{events:?}"
    );
    let completed = support::completed(&events);
    let finals: Vec<(String, i32, i32)> = completed
        .calls
        .iter()
        .map(|c| (c.call_id.clone(), c.state, c.error_type))
        .collect();
    assert_eq!(
        finals,
        [
            (
                "first".to_string(),
                pb::FinalState::Error as i32,
                pb::ErrorType::OutcomeUnknown as i32
            ),
            (
                "second".to_string(),
                pb::FinalState::Success as i32,
                pb::ErrorType::Unspecified as i32
            ),
        ]
    );
    // Never run again: one line; the second call ran once.
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("log")).unwrap(),
        "x\n"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("log2")).unwrap(),
        "y\n"
    );

    // Completed: a third replica serves it from the store, as B sent it.
    let c = replica(workspace.path(), &url, &yolo);
    let replay = messages(
        client(c.addr)
            .await
            .watch_batch(pb::WatchBatchRequest {
                session_id: "s-kill".into(),
                batch_id: batch.clone(),
                after_sequence: 0,
            })
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    // The same events (times are kept to the microsecond by the store).
    assert_eq!(events_of(&replay), events);
    assert_eq!(
        replay.iter().map(|m| m.sequence).collect::<Vec<_>>(),
        taken.iter().map(|m| m.sequence).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_open_when_its_replica_is_killed_comes_back_with_a_new_correlation_id() {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    let a = replica(workspace.path(), &url, &[]);
    let b = replica(workspace.path(), &url, &[]);
    let mut req = request(
        "s-prompt",
        vec![call(
            "w",
            "write_file",
            json!({"file_path": "out.txt", "content": "once\n"}),
        )],
    );
    req.request_id = "r-prompt".into();

    let mut running = client(a.addr)
        .await
        .schedule_calls(req.clone())
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    let old = support::await_prompt(&mut running, &mut seen, "w").await;
    kill_9(a);
    drop(running);

    // The client retries its request on B: the same batch, taken over (not
    // a second one), its prompt offered again.
    let mut cb = client(b.addr).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut retried = loop {
        match cb.schedule_calls(req.clone()).await {
            Ok(stream) => break stream.into_inner(),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                assert!(std::time::Instant::now() < deadline, "not taken over");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let mut again = Vec::new();
    let new = support::await_prompt(&mut retried, &mut again, "w").await;
    assert_eq!(accepted(&again), accepted(&seen));
    assert_ne!(new.correlation_id, old.correlation_id);

    let confirm = |correlation_id: String| pb::ConfirmRequest {
        session_id: "s-prompt".into(),
        call_id: "w".into(),
        correlation_id,
        outcome: pb::ConfirmationOutcome::ProceedOnce as i32,
        new_content: None,
    };
    let stale = cb.confirm(confirm(old.correlation_id)).await.unwrap_err();
    assert_eq!(stale.code(), tonic::Code::FailedPrecondition, "{stale:?}");
    assert!(!workspace.path().join("out.txt").exists());
    cb.confirm(confirm(new.correlation_id)).await.unwrap();
    let rest = support::collect(retried).await;
    assert!(
        matches!(support::terminal(&rest, "w"), State::Success(_)),
        "{rest:?}"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("out.txt")).unwrap(),
        "once\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_over_batch_continues_its_sequence_numbers_after_the_last_one_seen() {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    let yolo = ["--approval-mode", "yolo"];
    let a = replica(workspace.path(), &url, &yolo);
    let b = replica(workspace.path(), &url, &yolo);

    let mut second = call("second", "run_shell_command", json!({"command": "echo y"}));
    second.wait_for_previous = true;
    let mut running = client(a.addr)
        .await
        .schedule_calls(request(
            "s-seq",
            vec![
                call("first", "run_shell_command", json!({"command": "sleep 30"})),
                second,
            ],
        ))
        .await
        .unwrap()
        .into_inner();
    // Read on A up to the first call's Executing with its process.
    let mut seen_on_a = Vec::new();
    loop {
        let m = running
            .message()
            .await
            .unwrap()
            .expect("A's stream ended early");
        let executing = matches!(&m.event, Some(Event::CallUpdate(u)) if u.call_id == "first"
            && matches!(&u.state, Some(State::Executing(x)) if x.pid.is_some()));
        seen_on_a.push(m);
        if executing {
            break;
        }
    }
    let batch = batch_id(&seen_on_a);
    let last_seen = seen_on_a.last().unwrap().sequence;
    assert_eq!(
        seen_on_a.iter().map(|m| m.sequence).collect::<Vec<_>>(),
        (1..=last_seen).collect::<Vec<_>>()
    );
    kill_9(a);
    drop(running);

    // Re-attached through B after the last sequence seen on A: the new
    // owner's log, every sequence after it, numbered on without gaps.
    let taken = messages(watch_after_taken_over(b.addr, "s-seq", &batch, last_seen).await).await;
    let sequences: Vec<u64> = taken.iter().map(|m| m.sequence).collect();
    let first = toolsched::store::SEQUENCES_PER_OWNER + 1;
    assert_eq!(
        sequences,
        (first..first + taken.len() as u64).collect::<Vec<_>>()
    );
    assert!(first > last_seen);
    let events = events_of(&taken);
    assert_eq!(
        support::error_of(&events, "first").0,
        pb::ErrorType::OutcomeUnknown
    );
    assert!(
        matches!(support::terminal(&events, "second"), State::Success(_)),
        "{events:?}"
    );
    let completed = support::completed(&events);
    assert_eq!(completed.calls.len(), 2);

    // From a position in the new log: exactly what follows it, here and
    // through a third replica reading the store.
    let c = replica(workspace.path(), &url, &yolo);
    for addr in [b.addr, c.addr] {
        let rest = messages(
            client(addr)
                .await
                .watch_batch(pb::WatchBatchRequest {
                    session_id: "s-seq".into(),
                    batch_id: batch.clone(),
                    after_sequence: first,
                })
                .await
                .unwrap()
                .into_inner(),
        )
        .await;
        assert_eq!(
            rest.iter().map(|m| m.sequence).collect::<Vec<_>>(),
            sequences[1..]
        );
        assert_eq!(events_of(&rest), events[1..]);
        // And from the old owner's position: the whole new log, once.
        let again = messages(
            client(addr)
                .await
                .watch_batch(pb::WatchBatchRequest {
                    session_id: "s-seq".into(),
                    batch_id: batch.clone(),
                    after_sequence: last_seen,
                })
                .await
                .unwrap()
                .into_inner(),
        )
        .await;
        assert_eq!(
            again.iter().map(|m| m.sequence).collect::<Vec<_>>(),
            sequences
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_confirm_after_its_replica_stopped_is_already_applied_from_the_store() {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    let a = replica(workspace.path(), &url, &[]);
    let b = replica(workspace.path(), &url, &[]);
    let mut running = client(a.addr)
        .await
        .schedule_calls(request(
            "s-again",
            vec![call(
                "w",
                "write_file",
                json!({"file_path": "once.txt", "content": "once\n"}),
            )],
        ))
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    let prompt = support::await_prompt(&mut running, &mut seen, "w").await;
    let confirm = |outcome: pb::ConfirmationOutcome| pb::ConfirmRequest {
        session_id: "s-again".into(),
        call_id: "w".into(),
        correlation_id: prompt.correlation_id.clone(),
        outcome: outcome as i32,
        new_content: None,
    };
    let first = client(a.addr)
        .await
        .confirm(confirm(pb::ConfirmationOutcome::ProceedOnce))
        .await
        .unwrap()
        .into_inner();
    assert!(!first.already_applied);
    let rest = support::collect(running).await;
    assert!(matches!(support::terminal(&rest, "w"), State::Success(_)));
    // The batch (and the answer, written before it in order) is in the
    // store before A dies.
    let db = replicas_support::sql(&url).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let done: bool = db
            .query_one(
                "SELECT count(*) = 1 FROM toolsched_batches WHERE completed_at IS NOT NULL",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if done {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    kill_9(a);

    // The client repeats its Confirm (say its answer was lost) through B:
    // UNAVAILABLE while A's lease lasts, then answered from the store.
    let mut cb = client(b.addr).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let again = loop {
        match cb
            .confirm(confirm(pb::ConfirmationOutcome::ProceedOnce))
            .await
        {
            Ok(answer) => break answer.into_inner(),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                assert!(std::time::Instant::now() < deadline, "never answered");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(again.already_applied);
    // Another answer to the same prompt is refused naming the winner.
    let other = cb
        .confirm(confirm(pb::ConfirmationOutcome::Cancel))
        .await
        .unwrap_err();
    assert_eq!(other.code(), tonic::Code::FailedPrecondition, "{other:?}");
    assert!(
        other.message().contains("proceed_once"),
        "{}",
        other.message()
    );
    // Nothing ran twice.
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("once.txt")).unwrap(),
        "once\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_batch_for_a_session_whose_replica_stopped_resumes_the_stopped_batch_first() {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    let yolo = ["--approval-mode", "yolo"];
    let a = replica(workspace.path(), &url, &yolo);
    let b = replica(workspace.path(), &url, &yolo);

    let mut second = call(
        "second",
        "run_shell_command",
        json!({"command": "echo second >> order"}),
    );
    second.wait_for_previous = true;
    let mut running = client(a.addr)
        .await
        .schedule_calls(request(
            "s-resume",
            vec![
                call(
                    "first",
                    "run_shell_command",
                    json!({"command": "echo x >> log; sleep 30"}),
                ),
                second,
            ],
        ))
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    support::until_pid(&mut running, &mut seen, "first").await;
    let stopped = accepted(&seen);
    wait_for_file(&workspace.path().join("log"), "x\n").await;
    kill_9(a);
    drop(running);

    // The client goes on with a new batch through B (no WatchBatch, no
    // request id): UNAVAILABLE while A's lease lasts, then accepted.
    let mut cb = client(b.addr).await;
    let new = request(
        "s-resume",
        vec![call(
            "third",
            "run_shell_command",
            json!({"command": "echo third >> order"}),
        )],
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let stream = loop {
        match cb.schedule_calls(new.clone()).await {
            Ok(stream) => break stream.into_inner(),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                assert!(std::time::Instant::now() < deadline, "not taken over");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let third = messages(stream).await;
    assert_ne!(batch_id(&third), stopped);
    assert!(matches!(
        support::terminal(&events_of(&third), "third"),
        State::Success(_)
    ));
    // The stopped batch went on first, in queue order: its waiting call ran
    // before the new batch's; its running call was not run again.
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("order")).unwrap(),
        "second\nthird\n"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("log")).unwrap(),
        "x\n"
    );
    let resumed = messages(
        cb.watch_batch(pb::WatchBatchRequest {
            session_id: "s-resume".into(),
            batch_id: stopped.clone(),
            after_sequence: 0,
        })
        .await
        .unwrap()
        .into_inner(),
    )
    .await;
    let finals: Vec<(String, i32, i32)> = support::completed(&events_of(&resumed))
        .calls
        .iter()
        .map(|c| (c.call_id.clone(), c.state, c.error_type))
        .collect();
    assert_eq!(
        finals,
        [
            (
                "first".to_string(),
                pb::FinalState::Error as i32,
                pb::ErrorType::OutcomeUnknown as i32
            ),
            (
                "second".to_string(),
                pb::FinalState::Success as i32,
                pb::ErrorType::Unspecified as i32
            ),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_ended_before_its_replica_was_killed_keeps_its_result_in_the_taken_over_batch()
{
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    let yolo = ["--approval-mode", "yolo"];
    let a = replica(workspace.path(), &url, &yolo);
    let b = replica(workspace.path(), &url, &yolo);

    let mut second = call(
        "second",
        "run_shell_command",
        json!({"command": "sleep 30"}),
    );
    second.wait_for_previous = true;
    let mut running = client(a.addr)
        .await
        .schedule_calls(request(
            "s-ended",
            vec![
                call(
                    "first",
                    "run_shell_command",
                    json!({"command": "echo x >> log; echo first-done"}),
                ),
                second,
            ],
        ))
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    next_matching(&mut running, &mut seen, |e| {
        matches!(e, Event::CallUpdate(u) if u.call_id == "second"
            && matches!(&u.state, Some(State::Executing(x)) if x.pid.is_some()))
    })
    .await;
    let batch = accepted(&seen);
    let output_on_a = support::success_output(&seen, "first");
    assert!(output_on_a.contains("first-done"), "{output_on_a}");
    // The first call's end reaches the store (written behind, in order).
    let db = replicas_support::sql(&url).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let rows = db
            .query(
                "SELECT call_id FROM toolsched_executing WHERE ended IS NOT NULL",
                &[],
            )
            .await
            .unwrap();
        if !rows.is_empty() {
            let ended: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
            assert_eq!(ended, ["first"]);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "end not recorded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    kill_9(a);
    drop(running);

    let taken = messages(watch_once_taken_over(b.addr, "s-ended", &batch).await).await;
    let events = events_of(&taken);
    // Its real result, as A reported it; the call running at the kill is
    // the one that ends outcome_unknown.
    assert_eq!(support::states(&events, "first"), ["success"]);
    assert_eq!(support::success_output(&events, "first"), output_on_a);
    assert_eq!(
        support::error_of(&events, "second").0,
        pb::ErrorType::OutcomeUnknown
    );
    let finals: Vec<(String, i32, i32)> = support::completed(&events)
        .calls
        .iter()
        .map(|c| (c.call_id.clone(), c.state, c.error_type))
        .collect();
    assert_eq!(
        finals,
        [
            (
                "first".to_string(),
                pb::FinalState::Success as i32,
                pb::ErrorType::Unspecified as i32
            ),
            (
                "second".to_string(),
                pb::FinalState::Error as i32,
                pb::ErrorType::OutcomeUnknown as i32
            ),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("log")).unwrap(),
        "x\n"
    );
}

/// The client is told a side-effecting call's end only once the store has
/// it: with the store cut while the command ends, the stream waits; the
/// store back, the end is written and shown; the replica killed at once
/// after, the batch taken over elsewhere says the same (not
/// outcome_unknown).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_a_client_was_shown_survives_its_replica_being_killed() {
    let url = fresh_database().await;
    let (relay, relayed) = replicas_support::Relay::to_store(&url).await;
    let workspace = tempfile::tempdir().unwrap();
    let yolo = ["--approval-mode", "yolo"];
    let a = replica(workspace.path(), &relayed, &yolo);
    let b = replica(workspace.path(), &url, &yolo);

    let (mut stream, mut seen, pgid) =
        run_until_executing(a.addr, "s-shown", "echo x >> log; sleep 0.5").await;
    let batch = accepted(&seen);
    relay.cut();
    // The command ends while its end cannot be written.
    wait_for_file(&workspace.path().join("log"), "x\n").await;
    assert!(
        support::wait_group_gone(pgid).await,
        "command still running"
    );
    relay.restore();
    let shown = next_matching(&mut stream, &mut seen, |e| {
        matches!(e, Event::CallUpdate(u) if u.call_id == "w"
            && matches!(u.state, Some(State::Success(_) | State::Error(_) | State::Cancelled(_))))
    })
    .await;
    assert!(
        matches!(&shown, Event::CallUpdate(u) if matches!(u.state, Some(State::Success(_)))),
        "{shown:?}"
    );
    // Shown, so recorded: the row has its end already.
    let ended: Vec<String> = replicas_support::sql(&url)
        .await
        .query(
            "SELECT call_id FROM toolsched_executing WHERE ended IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ended, ["w"]);
    kill_9(a);
    drop(stream);

    let events = events_of(&messages(watch_once_taken_over(b.addr, "s-shown", &batch).await).await);
    // Replayed as A logged it (its completion was written), or taken over
    // with the end A recorded: Success either way, and only Success.
    let states = support::states(&events, "w");
    assert!(
        states == ["validating", "scheduled", "executing", "success"] || states == ["success"],
        "{events:?}"
    );
    assert_eq!(
        support::completed(&events).calls[0].state,
        pb::FinalState::Success as i32
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("log")).unwrap(),
        "x\n"
    );
}

/// A replica killed while a side-effecting call's end could not be written
/// never told its client that end: the batch taken over elsewhere ends the
/// call outcome_unknown, and that is the only end any stream shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_end_the_store_never_had_was_never_shown() {
    let url = fresh_database().await;
    let (relay, relayed) = replicas_support::Relay::to_store(&url).await;
    let workspace = tempfile::tempdir().unwrap();
    let yolo = ["--approval-mode", "yolo"];
    let a = replica(workspace.path(), &relayed, &yolo);
    let b = replica(workspace.path(), &url, &yolo);

    let (mut stream, mut seen, pgid) =
        run_until_executing(a.addr, "s-unshown", "echo x >> log").await;
    let batch = accepted(&seen);
    relay.cut();
    wait_for_file(&workspace.path().join("log"), "x\n").await;
    assert!(
        support::wait_group_gone(pgid).await,
        "command still running"
    );
    kill_9(a);
    // Everything A sent before it died.
    while let Ok(Some(m)) = stream.message().await {
        seen.extend(m.event);
    }
    assert_eq!(
        support::states(&seen, "w"),
        ["validating", "scheduled", "executing"]
    );
    relay.restore();

    let events =
        events_of(&messages(watch_once_taken_over(b.addr, "s-unshown", &batch).await).await);
    assert_eq!(support::states(&events, "w"), ["error"], "{events:?}");
    assert_eq!(
        support::error_of(&events, "w").0,
        pb::ErrorType::OutcomeUnknown
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("log")).unwrap(),
        "x\n"
    );
}

/// A batch taken over through WatchBatch brings the stopped owner's other
/// batches of its session with it: the one queued behind it runs after it
/// on the new owner, although its own client never came back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_taken_over_by_a_watch_brings_the_batch_queued_behind_it() {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    let yolo = ["--approval-mode", "yolo"];
    let a = replica(workspace.path(), &url, &yolo);
    let b = replica(workspace.path(), &url, &yolo);

    let (running, seen, _) =
        run_until_executing(a.addr, "s-behind", "echo x >> log; sleep 30").await;
    let first = accepted(&seen);
    let mut queued = client(a.addr)
        .await
        .schedule_calls(request(
            "s-behind",
            vec![call(
                "q",
                "run_shell_command",
                json!({"command": "echo queued >> log"}),
            )],
        ))
        .await
        .unwrap()
        .into_inner();
    let behind = match queued.message().await.unwrap().and_then(|m| m.event) {
        Some(Event::BatchAccepted(x)) => {
            assert!(x.queued, "{x:?}");
            x.batch_id
        }
        other => panic!("{other:?}"),
    };
    wait_for_file(&workspace.path().join("log"), "x\n").await;
    kill_9(a);
    drop((running, queued));

    let events =
        events_of(&messages(watch_once_taken_over(b.addr, "s-behind", &first).await).await);
    assert_eq!(
        support::error_of(&events, "w").0,
        pb::ErrorType::OutcomeUnknown
    );
    // The queued batch runs next on B, with nobody asking for it.
    wait_for_file(&workspace.path().join("log"), "x\nqueued\n").await;
    let db = replicas_support::sql(&url).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !db
        .query_one(
            "SELECT completed_at IS NOT NULL FROM toolsched_batches WHERE batch_id = $1",
            &[&behind],
        )
        .await
        .unwrap()
        .get::<_, bool>(0)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "queued batch not completed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let replay = events_of(
        &messages(
            client(b.addr)
                .await
                .watch_batch(pb::WatchBatchRequest {
                    session_id: "s-behind".into(),
                    batch_id: behind.clone(),
                    after_sequence: 0,
                })
                .await
                .unwrap()
                .into_inner(),
        )
        .await,
    );
    assert_eq!(
        support::states(&replay, "q"),
        ["validating", "scheduled", "executing", "success"]
    );
}

/// A stream through a replica that does not own the session, whose owner
/// is killed mid-batch, ends `UNAVAILABLE`, never OK without
/// `BatchCompleted`; `WatchBatch` after the last sequence it saw follows
/// the batch where it is taken over (README, "What every client must do",
/// item 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_through_another_replica_whose_owner_is_killed_ends_unavailable() {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    let yolo = ["--approval-mode", "yolo"];
    let a = replica(workspace.path(), &url, &yolo);
    let b = replica(workspace.path(), &url, &yolo);
    // A owns the session.
    let first = messages(
        client(a.addr)
            .await
            .schedule_calls(request(
                "s-relay-kill",
                vec![call(
                    "hello",
                    "run_shell_command",
                    json!({"command": "true"}),
                )],
            ))
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    support::completed(&events_of(&first));

    let mut through_b = client(b.addr)
        .await
        .schedule_calls(request(
            "s-relay-kill",
            vec![call(
                "long",
                "run_shell_command",
                json!({"command": "echo x >> log; sleep 30"}),
            )],
        ))
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    next_matching(&mut through_b, &mut seen, |e| {
        matches!(e, Event::CallUpdate(u) if u.call_id == "long"
            && matches!(u.state, Some(State::Executing(_))))
    })
    .await;
    let batch = accepted(&seen);
    // A WatchBatch of it through B too (the same class: a tail of the
    // store's log).
    let mut watched = client(b.addr)
        .await
        .watch_batch(pb::WatchBatchRequest {
            session_id: "s-relay-kill".into(),
            batch_id: batch.clone(),
            after_sequence: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let mut seen_watching = Vec::new();
    next_matching(&mut watched, &mut seen_watching, |e| {
        matches!(e, Event::CallUpdate(u) if u.call_id == "long"
            && matches!(u.state, Some(State::Executing(_))))
    })
    .await;
    wait_for_file(&workspace.path().join("log"), "x\n").await;
    kill_9(a);

    let mut last = 0;
    for (stream, seen) in [
        (&mut through_b, &mut seen),
        (&mut watched, &mut seen_watching),
    ] {
        let status = loop {
            match stream.message().await {
                Ok(Some(m)) => {
                    last = m.sequence;
                    seen.extend(m.event);
                }
                Ok(None) => panic!("the stream ended OK without BatchCompleted: {seen:?}"),
                Err(status) => break status,
            }
        };
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        assert_eq!(
            status.message(),
            "the replica running this batch stopped before it completed: WatchBatch after \
             the last sequence seen follows it where it is taken over"
        );
        assert!(
            !seen.iter().any(|e| matches!(e, Event::BatchCompleted(_))),
            "{seen:?}"
        );
    }

    let taken = messages(watch_after_taken_over(b.addr, "s-relay-kill", &batch, last).await).await;
    let events = events_of(&taken);
    let (kind, _) = support::error_of(&events, "long");
    assert_eq!(kind, pb::ErrorType::OutcomeUnknown);
    assert_eq!(support::completed(&events).calls.len(), 1);
}
