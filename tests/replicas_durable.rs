//! What a client is told, the store has: real `toolsched` processes sharing
//! one PostgreSQL (tests/services.sh) and one workspace. A Confirm is OK
//! only once its answer is recorded (a replica taking the session over
//! applies it, never offers the prompt again); a call whose end could not
//! be recorded ends `outcome_unknown` on its old owner as on the new one;
//! a session's mode and "always" rules follow it to the next replica.

use crate::replicas_support;
use crate::replicas_takeover::{accepted, kill_9, replica, watch_once_taken_over};
use crate::support;

use std::time::Duration;

use replicas_support::{
    Relay, client, fresh_database, messages, run_shell, run_until_executing, sql,
};
use serde_json::json;
use support::{Event, State, call, next_matching, request, wait_for_file};
use toolsched::api::pb;

/// ScheduleCalls through `addr` until the session's dead owner's lease ran
/// out: UNAVAILABLE meanwhile (bounded: the lease is `LEASE_SECS`).
async fn schedule_once_taken_over(
    addr: std::net::SocketAddr,
    req: pb::ScheduleCallsRequest,
) -> tonic::Streaming<pb::ScheduleCallsResponse> {
    let mut c = client(addr).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match c.schedule_calls(req.clone()).await {
            Ok(stream) => return stream.into_inner(),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
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

fn proceed(
    session: &str,
    call_id: &str,
    prompt: &pb::AwaitingApproval,
    outcome: pb::ConfirmationOutcome,
) -> pb::ConfirmRequest {
    pb::ConfirmRequest {
        session_id: session.into(),
        call_id: call_id.into(),
        correlation_id: prompt.correlation_id.clone(),
        outcome: outcome as i32,
        new_content: None,
    }
}

fn no_prompt(events: &[Event], call_id: &str) {
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::CallUpdate(u) if u.call_id == call_id
            && matches!(u.state, Some(State::AwaitingApproval(_))))),
        "{call_id} was prompted: {events:?}"
    );
}

/// Waits (bounded, 10 s) until `query` (one boolean) holds on the store.
async fn until_stored(
    url: &str,
    query: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) {
    let db = sql(url).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !db.query_one(query, params).await.unwrap().get::<_, bool>(0) {
        assert!(std::time::Instant::now() < deadline, "never held: {query}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The call waits for an execution slot of its tenant (a quota of one,
/// taken by a `sleep` of another session) after its Confirm was OK, so it
/// has not begun when its replica is killed: the replica taking the batch
/// over applies the recorded answer and runs it once, never prompting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_call_that_had_not_begun_when_its_replica_was_killed_runs_once_elsewhere_unprompted()
 {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("quota.toml");
    std::fs::write(
        &config,
        "[[tenants]]\nname = \"default\"\nmax_executing_calls = 1\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let a = replica(workspace.path(), &url, &["--config", config]);
    let b = replica(workspace.path(), &url, &["--config", config]);

    let mut req = request(
        "s-once",
        vec![call(
            "w",
            "run_shell_command",
            json!({"command": "echo run >> count"}),
        )],
    );
    req.request_id = "r-once".into();
    let mut running = client(a.addr)
        .await
        .schedule_calls(req.clone())
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    let prompt = support::await_prompt(&mut running, &mut seen, "w").await;
    let batch = accepted(&seen);
    // The tenant's one execution slot, taken on A by another session.
    let mut blocker_call = call("b", "run_shell_command", json!({"command": "sleep 30"}));
    blocker_call.client_initiated = true;
    let mut blocker = client(a.addr)
        .await
        .schedule_calls(request("s-block", vec![blocker_call]))
        .await
        .unwrap()
        .into_inner();
    support::until_pid(&mut blocker, &mut Vec::new(), "b").await;

    // Answered through B, the front door: OK once A recorded it.
    let confirmed = client(b.addr)
        .await
        .confirm(proceed(
            "s-once",
            "w",
            &prompt,
            pb::ConfirmationOutcome::ProceedOnce,
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(!confirmed.already_applied);
    let db = sql(&url).await;
    let answers: Vec<(String, String)> = db
        .query(
            "SELECT call_id, outcome FROM toolsched_answers WHERE batch_id = $1",
            &[&batch],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(answers, [("w".to_string(), "proceed_once".to_string())]);
    // Scheduled, waiting for the slot: it has not begun.
    next_matching(&mut running, &mut seen, |e| {
        matches!(e, Event::CallUpdate(u) if u.call_id == "w"
            && matches!(u.state, Some(State::Scheduled(_))))
    })
    .await;
    let begun: i64 = db
        .query_one(
            "SELECT count(*) FROM toolsched_executing WHERE batch_id = $1",
            &[&batch],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(begun, 0);
    kill_9(a);
    drop((running, blocker));

    // The client retries its request on B: the same batch, taken over, its
    // call run on the recorded answer.
    let events = support::collect(schedule_once_taken_over(b.addr, req).await).await;
    assert_eq!(accepted(&events), batch, "{events:?}");
    no_prompt(&events, "w");
    assert_eq!(
        support::states(&events, "w"),
        ["validating", "scheduled", "executing", "success"],
        "{events:?}"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("count")).unwrap(),
        "run\n"
    );
    // The old prompt is answered already: the same answer is OK again.
    let again = client(b.addr)
        .await
        .confirm(proceed(
            "s-once",
            "w",
            &prompt,
            pb::ConfirmationOutcome::ProceedOnce,
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(again.already_applied);
}

/// A recorded "cancel" applies too: the call ends Cancelled "User denied
/// execution." on the replica taking the batch over, unprompted, while its
/// sibling of the same wave (reads asked for by policy), unanswered, is
/// prompted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_cancel_answer_cancels_the_call_on_the_replica_taking_over() {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("ask-reads.toml");
    std::fs::write(
        &policy,
        "[[rule]]\nname = \"ask-reads\"\ntool_name = \"read_file\"\ndecision = \"ask_user\"\n",
    )
    .unwrap();
    std::fs::write(workspace.path().join("f1.txt"), "one\n").unwrap();
    std::fs::write(workspace.path().join("f2.txt"), "two\n").unwrap();
    let flags = ["--policy-file", policy.to_str().unwrap()];
    let a = replica(workspace.path(), &url, &flags);
    let b = replica(workspace.path(), &url, &flags);
    let mut req = request(
        "s-deny",
        vec![
            call("r1", "read_file", json!({"file_path": "f1.txt"})),
            call("r2", "read_file", json!({"file_path": "f2.txt"})),
        ],
    );
    req.request_id = "r-deny".into();
    let mut running = client(a.addr)
        .await
        .schedule_calls(req.clone())
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    // Both prompts of the wave are open at once, in either order.
    let [first, second] = support::await_prompts(&mut running, &mut seen, ["r1", "r2"]).await;
    let confirmed = client(a.addr)
        .await
        .confirm(proceed(
            "s-deny",
            "r1",
            &first,
            pb::ConfirmationOutcome::Cancel,
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(!confirmed.already_applied);
    next_matching(&mut running, &mut seen, |e| {
        matches!(e, Event::CallUpdate(u) if u.call_id == "r1"
            && matches!(u.state, Some(State::Cancelled(_))))
    })
    .await;
    kill_9(a);
    drop(running);

    let mut taken = schedule_once_taken_over(b.addr, req).await;
    let mut events = Vec::new();
    let again = support::await_prompt(&mut taken, &mut events, "r2").await;
    assert_ne!(again.correlation_id, second.correlation_id);
    client(b.addr)
        .await
        .confirm(proceed(
            "s-deny",
            "r2",
            &again,
            pb::ConfirmationOutcome::ProceedOnce,
        ))
        .await
        .unwrap();
    events.extend(support::collect(taken).await);
    no_prompt(&events, "r1");
    assert_eq!(support::states(&events, "r1"), ["validating", "cancelled"]);
    match support::terminal(&events, "r1") {
        State::Cancelled(c) => assert_eq!(c.reason, "User denied execution."),
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(support::terminal(&events, "r2"), State::Success(_)),
        "{events:?}"
    );
}

/// With the store unreachable a Confirm is UNAVAILABLE and changes
/// nothing: the same prompt is still open, and answered once the store is
/// back, its call runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirm_the_store_cannot_record_is_unavailable_and_applies_nothing() {
    let url = fresh_database().await;
    let (relay, relayed) = Relay::to_store(&url).await;
    let workspace = tempfile::tempdir().unwrap();
    let a = replica(workspace.path(), &relayed, &[]);
    let mut running = run_shell(a.addr, "s-cut", "w", "echo run >> count").await;
    let mut seen = Vec::new();
    let prompt = support::await_prompt(&mut running, &mut seen, "w").await;
    let answer = proceed("s-cut", "w", &prompt, pb::ConfirmationOutcome::ProceedOnce);
    let mut ca = client(a.addr).await;

    relay.cut();
    let refused = ca.confirm(answer.clone()).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(
        refused.message().starts_with(
            "the answer to the prompt of call 'w' was not applied: it could not be recorded in the store ("
        ),
        "{}",
        refused.message()
    );
    assert!(
        refused
            .message()
            .ends_with("); nothing changed, send the Confirm again"),
        "{}",
        refused.message()
    );
    relay.restore();

    let confirmed = ca.confirm(answer).await.unwrap().into_inner();
    assert!(!confirmed.already_applied);
    let rest = support::collect(running).await;
    seen.extend(rest);
    // One prompt, answered once: nothing happened between the refusal and
    // the answer that was recorded.
    assert_eq!(
        support::states(&seen, "w"),
        [
            "validating",
            "awaiting_approval",
            "scheduled",
            "executing",
            "success"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("count")).unwrap(),
        "run\n"
    );
}

/// The old owner of a session, cut from the store while its call ended,
/// cannot record that end once another replica took the session over
/// (LeaseLost): its stream ends the call `outcome_unknown`, as the new
/// owner's does, instead of showing the end the store never had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_end_lost_to_a_takeover_is_outcome_unknown_on_both_replicas() {
    let url = fresh_database().await;
    let (relay, relayed) = Relay::to_store(&url).await;
    let workspace = tempfile::tempdir().unwrap();
    let yolo = ["--approval-mode", "yolo"];
    let a = replica(workspace.path(), &relayed, &yolo);
    let b = replica(workspace.path(), &url, &yolo);

    let (stream, mut seen, pgid) = run_until_executing(
        a.addr,
        "s-lost",
        "echo x >> log; while [ ! -e go ]; do sleep 0.05; done",
    )
    .await;
    let batch = accepted(&seen);
    wait_for_file(&workspace.path().join("log"), "x\n").await;
    relay.cut();
    // The command ends while A cannot reach the store.
    std::fs::write(workspace.path().join("go"), "").unwrap();
    assert!(
        support::wait_group_gone(pgid).await,
        "command still running"
    );

    // A cannot renew its lease: B takes the batch over once it ran out.
    let taken = crate::replicas_takeover::events_of(
        &messages(watch_once_taken_over(b.addr, "s-lost", &batch).await).await,
    );
    assert_eq!(support::states(&taken, "w"), ["error"], "{taken:?}");
    let on_b = support::error_of(&taken, "w");
    assert_eq!(on_b.0, pb::ErrorType::OutcomeUnknown);

    // A reaches the store again: its end is refused (the lease is B's).
    relay.restore();
    let rest = support::collect(stream).await;
    seen.extend(rest);
    assert_eq!(
        support::states(&seen, "w"),
        ["validating", "scheduled", "executing", "error"]
    );
    assert_eq!(support::error_of(&seen, "w"), on_b);
    assert_eq!(
        on_b.1,
        "the server running this call stopped; it was not re-run"
    );
    let completed = support::completed(&seen);
    assert_eq!(
        (completed.calls[0].state, completed.calls[0].error_type),
        (
            pb::FinalState::Error as i32,
            pb::ErrorType::OutcomeUnknown as i32
        )
    );
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("log")).unwrap(),
        "x\n"
    );
}

/// A session's "always" rule and approval mode are in the store: after its
/// replica is killed, the next batches through another replica are
/// approved by them as on the first one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_rules_and_mode_follow_it_to_the_next_replica() {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    let a = replica(workspace.path(), &url, &[]);
    let b = replica(workspace.path(), &url, &[]);

    // A rule: "always" for `touch` in session s-rules.
    let mut running = run_shell(a.addr, "s-rules", "t1", "touch one.txt").await;
    let mut seen = Vec::new();
    let prompt = support::await_prompt(&mut running, &mut seen, "t1").await;
    let first = accepted(&seen);
    client(a.addr)
        .await
        .confirm(proceed(
            "s-rules",
            "t1",
            &prompt,
            pb::ConfirmationOutcome::ProceedAlways,
        ))
        .await
        .unwrap();
    let rest = support::collect(running).await;
    assert!(matches!(support::terminal(&rest, "t1"), State::Success(_)));
    // A mode: auto_edit, asked by a batch of session s-mode.
    let mut edit = request(
        "s-mode",
        vec![call(
            "e1",
            "write_file",
            json!({"file_path": "a.txt", "content": "a\n"}),
        )],
    );
    edit.approval_mode = pb::ApprovalMode::AutoEdit as i32;
    let events = messages(
        client(a.addr)
            .await
            .schedule_calls(edit)
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    let second = replicas_support::batch_id(&events);
    // Both batches completed in the store (their logs are written behind),
    // and the mode with them.
    for batch in [&first, &second] {
        until_stored(
            &url,
            "SELECT completed_at IS NOT NULL FROM toolsched_batches WHERE batch_id = $1",
            &[batch],
        )
        .await;
    }
    until_stored(&url, "SELECT count(*) = 2 FROM toolsched_sessions", &[]).await;
    kill_9(a);

    let events = support::collect(
        schedule_once_taken_over(
            b.addr,
            request(
                "s-rules",
                vec![call(
                    "t2",
                    "run_shell_command",
                    json!({"command": "touch two.txt"}),
                )],
            ),
        )
        .await,
    )
    .await;
    no_prompt(&events, "t2");
    assert_eq!(
        support::states(&events, "t2"),
        ["validating", "scheduled", "executing", "success"]
    );
    assert!(workspace.path().join("two.txt").exists());
    // Another command is not covered by the rule: still prompted.
    let mut other = run_shell(b.addr, "s-rules", "m", "mkdir d").await;
    support::await_prompt(&mut other, &mut Vec::new(), "m").await;
    drop(other);

    // No approval_mode: the session's auto_edit runs the edit unprompted.
    let events = support::collect(
        schedule_once_taken_over(
            b.addr,
            request(
                "s-mode",
                vec![call(
                    "e2",
                    "write_file",
                    json!({"file_path": "b.txt", "content": "b\n"}),
                )],
            ),
        )
        .await,
    )
    .await;
    no_prompt(&events, "e2");
    assert!(matches!(
        support::terminal(&events, "e2"),
        State::Success(_)
    ));
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("b.txt")).unwrap(),
        "b\n"
    );
}

/// GetSession on a replica that does not run the session answers from the
/// store: the replica holding its lease (by the id GetServerInfo of that
/// replica reports), its mode, its running batch and the one queued behind
/// it; a session the store never had is NOT_FOUND.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_session_on_another_replica_answers_from_the_store() {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    let a = replica(workspace.path(), &url, &[]);
    let b = replica(workspace.path(), &url, &[]);

    let mut first = request(
        "s-view",
        vec![call(
            "w",
            "run_shell_command",
            json!({"command": "sleep 30"}),
        )],
    );
    first.approval_mode = pb::ApprovalMode::Yolo as i32;
    let mut running = client(a.addr)
        .await
        .schedule_calls(first)
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    support::until_pid(&mut running, &mut seen, "w").await;
    let batch = accepted(&seen);
    let mut queued = run_shell(a.addr, "s-view", "q", "true").await;
    let behind = match queued.message().await.unwrap().and_then(|m| m.event) {
        Some(Event::BatchAccepted(x)) => x.batch_id,
        other => panic!("{other:?}"),
    };
    // The mode the first batch asked for is written behind.
    until_stored(
        &url,
        "SELECT count(*) = 1 FROM toolsched_sessions WHERE session_id = 'default/s-view'",
        &[],
    )
    .await;
    let owner: String = sql(&url)
        .await
        .query_one(
            "SELECT owner FROM toolsched_leases WHERE session_id = 'default/s-view'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // Each replica names itself: the owner is A by the id A reports.
    let mut ids = Vec::new();
    for addr in [a.addr, b.addr] {
        let info = client(addr)
            .await
            .get_server_info(pb::GetServerInfoRequest {})
            .await
            .unwrap()
            .into_inner();
        ids.push(info.replica_id);
    }
    assert!(!ids[0].is_empty() && ids[0] != ids[1], "{ids:?}");
    assert_eq!(owner, ids[0]);

    let mut cb = client(b.addr).await;
    let view = cb
        .get_session(pb::GetSessionRequest {
            session_id: "s-view".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        view,
        pb::GetSessionResponse {
            session_id: "s-view".into(),
            workspace: String::new(),
            approval_mode: pb::ApprovalMode::Yolo as i32,
            running_batch_id: batch,
            queued_batch_ids: vec![behind],
            owner_replica: owner,
        }
    );
    // On its owner: the live session, no owner named.
    let live = client(a.addr)
        .await
        .get_session(pb::GetSessionRequest {
            session_id: "s-view".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (live.approval_mode, live.owner_replica.as_str()),
        (pb::ApprovalMode::Yolo as i32, "")
    );
    let unknown = cb
        .get_session(pb::GetSessionRequest {
            session_id: "s-never".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown:?}");
    drop((running, queued));
}
