//! Batches that survive a dropped connection: a cut stream re-attached with
//! WatchBatch from the last sequence seen, the disconnect grace (and its
//! expiry), prompts answered after a re-attach and idempotent Confirm,
//! request_id retries that run nothing again, several watchers, retention,
//! and a client that stops reading while a command prints without end.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::scheduler::SchedulerConfig;

/// One event with its sequence.
type Seq = (u64, Event);

fn shell(id: &str, command: &str) -> pb::FunctionCall {
    call(id, "run_shell_command", json!({ "command": command }))
}

fn with_grace(session: &str, calls: Vec<pb::FunctionCall>, secs: u32) -> pb::ScheduleCallsRequest {
    pb::ScheduleCallsRequest {
        disconnect_grace_secs: Some(secs),
        ..request(session, calls)
    }
}

fn with_request_id(
    session: &str,
    calls: Vec<pb::FunctionCall>,
    request_id: &str,
) -> pb::ScheduleCallsRequest {
    pb::ScheduleCallsRequest {
        request_id: request_id.into(),
        ..request(session, calls)
    }
}

async fn next_seq(stream: &mut tonic::Streaming<pb::ScheduleCallsResponse>) -> Option<Seq> {
    let msg = tokio::time::timeout(Duration::from_secs(60), stream.message())
        .await
        .expect("an event within 60 s")
        .expect("stream ok")?;
    Some((msg.sequence, msg.event.expect("event set")))
}

/// Reads until (and including) the first event `pred` accepts.
async fn read_until(
    stream: &mut tonic::Streaming<pb::ScheduleCallsResponse>,
    pred: impl Fn(&Event) -> bool,
) -> Vec<Seq> {
    let mut out = Vec::new();
    loop {
        let seq = next_seq(stream).await.expect("stream still open");
        let done = pred(&seq.1);
        out.push(seq);
        if done {
            return out;
        }
    }
}

/// Every event to the end of the stream (which must end OK).
async fn collect_seq(mut stream: tonic::Streaming<pb::ScheduleCallsResponse>) -> Vec<Seq> {
    let mut out = Vec::new();
    while let Some(seq) = next_seq(&mut stream).await {
        out.push(seq);
    }
    out
}

fn events(seqs: &[Seq]) -> Vec<Event> {
    seqs.iter().map(|(_, e)| e.clone()).collect()
}

fn sequences(seqs: &[Seq]) -> Vec<u64> {
    seqs.iter().map(|(s, _)| *s).collect()
}

fn batch_id(seqs: &[Seq]) -> String {
    match &seqs.first().expect("an event").1 {
        Event::BatchAccepted(a) => a.batch_id.clone(),
        other => panic!("first event is not BatchAccepted: {other:?}"),
    }
}

fn is_executing(call_id: &str) -> impl Fn(&Event) -> bool + '_ {
    move |e| {
        matches!(e, Event::CallUpdate(u) if u.call_id == call_id
            && matches!(u.state, Some(State::Executing(_))))
    }
}

fn output_contains<'a>(call_id: &'a str, text: &'a str) -> impl Fn(&Event) -> bool + 'a {
    move |e| {
        matches!(e, Event::CallUpdate(u) if u.call_id == call_id
            && matches!(&u.state, Some(State::Executing(x)) if x.output_chunk.contains(text)))
    }
}

fn pid_of(seqs: &[Seq]) -> i32 {
    seqs.iter()
        .find_map(|(_, e)| match e {
            Event::CallUpdate(pb::ToolCallUpdate {
                state: Some(State::Executing(x)),
                ..
            }) => x.pid,
            _ => None,
        })
        .expect("a pid was reported") as i32
}

async fn watch(
    srv: &TestServer,
    session: &str,
    batch: &str,
    after: u64,
) -> Result<tonic::Streaming<pb::ScheduleCallsResponse>, tonic::Status> {
    srv.client
        .clone()
        .watch_batch(pb::WatchBatchRequest {
            session_id: session.into(),
            batch_id: batch.into(),
            after_sequence: after,
        })
        .await
        .map(tonic::Response::into_inner)
}

/// The whole log of a retained batch, read by a new watcher from the start.
async fn whole_log(srv: &TestServer, session: &str, batch: &str) -> Vec<Seq> {
    collect_seq(watch(srv, session, batch, 0).await.expect("batch retained")).await
}

async fn confirm(
    srv: &TestServer,
    session: &str,
    call_id: &str,
    correlation_id: &str,
    outcome: pb::ConfirmationOutcome,
) -> Result<pb::ConfirmResponse, tonic::Status> {
    srv.client
        .clone()
        .confirm(pb::ConfirmRequest {
            session_id: session.into(),
            call_id: call_id.into(),
            correlation_id: correlation_id.into(),
            outcome: outcome as i32,
            new_content: None,
        })
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test]
async fn a_cut_stream_is_re_attached_with_exactly_the_missing_events() {
    let srv = TestServer::with_config(yolo()).await;
    let mut stream = srv
        .schedule_with(with_grace(
            "s",
            vec![shell("sh", "echo begun; sleep 2; echo done >> marker")],
            60,
        ))
        .await;
    let before = read_until(&mut stream, output_contains("sh", "begun")).await;
    let batch = batch_id(&before);
    let last_seen = before.last().expect("events").0;
    drop(stream);

    let after = collect_seq(
        watch(&srv, "s", &batch, last_seen)
            .await
            .expect("re-attach"),
    )
    .await;
    assert_eq!(
        sequences(&after),
        ((last_seen + 1)..=(last_seen + after.len() as u64)).collect::<Vec<_>>(),
        "the missing events, in order, without gap or duplicate"
    );
    let all_events: Vec<Event> = events(&before).into_iter().chain(events(&after)).collect();
    assert_eq!(
        states(&all_events, "sh"),
        ["validating", "scheduled", "executing", "success"]
    );
    assert!(matches!(all_events.last(), Some(Event::BatchCompleted(_))));
    assert_eq!(
        std::fs::read_to_string(srv.path("marker")).unwrap(),
        "done\n"
    );
    // The log is the same for a reader from the start: the first stream's
    // events, then the re-attached ones.
    let whole = whole_log(&srv, "s", &batch).await;
    assert_eq!(whole, [before, after].concat());
}

#[tokio::test]
async fn without_a_grace_a_cut_stream_cancels_the_batch_as_before() {
    let srv = TestServer::with_config(yolo()).await;
    let mut stream = srv
        .schedule(
            "s",
            vec![shell("sh", "echo begun; sleep 2; echo done >> marker")],
        )
        .await;
    let before = read_until(&mut stream, output_contains("sh", "begun")).await;
    let batch = batch_id(&before);
    let pgid = pid_of(&before);
    drop(stream);
    let whole = whole_log(&srv, "s", &batch).await;
    let all = events(&whole);
    assert_eq!(
        states(&all, "sh"),
        ["validating", "scheduled", "executing", "cancelled"]
    );
    assert!(wait_group_gone(pgid).await, "process group {pgid} survived");
    assert!(!srv.path("marker").exists());
}

#[tokio::test]
async fn with_a_grace_and_nobody_back_the_batch_is_cancelled_with_the_grace_reason() {
    let srv = TestServer::with_config(yolo()).await;
    let mut stream = srv
        .schedule_with(with_grace(
            "s",
            vec![shell("sh", "echo begun; sleep 1000; touch after")],
            1,
        ))
        .await;
    let before = read_until(&mut stream, output_contains("sh", "begun")).await;
    let batch = batch_id(&before);
    let pgid = pid_of(&before);
    drop(stream);
    // Nobody reads: the grace runs out and the command is stopped.
    assert!(wait_group_gone(pgid).await, "process group {pgid} survived");
    let whole = whole_log(&srv, "s", &batch).await;
    match terminal(&events(&whole), "sh") {
        State::Cancelled(c) => assert_eq!(
            c.reason,
            "the client went away and did not come back within 1 s"
        ),
        other => panic!("{other:?}"),
    }
    assert!(!srv.path("after").exists());
}

#[tokio::test]
async fn cancel_works_on_a_detached_batch() {
    let srv = TestServer::with_config(yolo()).await;
    let mut stream = srv
        .schedule_with(with_grace(
            "s",
            vec![shell("sh", "echo begun; sleep 1000")],
            600,
        ))
        .await;
    let before = read_until(&mut stream, output_contains("sh", "begun")).await;
    let batch = batch_id(&before);
    let pgid = pid_of(&before);
    drop(stream);
    let summary = srv
        .client
        .clone()
        .cancel(pb::CancelRequest {
            session_id: "s".into(),
            batch_id: Some(batch.clone()),
            reason: "stop please".into(),
        })
        .await
        .expect("cancel")
        .into_inner();
    assert_eq!(summary.cancelled_calls, 1);
    assert_eq!(summary.cancelled_batches, 1);
    let whole = whole_log(&srv, "s", &batch).await;
    match terminal(&events(&whole), "sh") {
        State::Cancelled(c) => assert_eq!(c.reason, "stop please"),
        other => panic!("{other:?}"),
    }
    assert!(wait_group_gone(pgid).await, "process group {pgid} survived");
}

#[tokio::test]
async fn a_prompt_open_when_the_stream_dropped_is_answered_after_re_attaching() {
    let srv = TestServer::start().await;
    let write = call(
        "w",
        "write_file",
        json!({"file_path": "a.txt", "content": "hello\n"}),
    );
    let mut stream = srv.schedule_with(with_grace("s", vec![write], 60)).await;
    let before = read_until(&mut stream, |e| {
        matches!(e, Event::CallUpdate(u) if matches!(u.state, Some(State::AwaitingApproval(_))))
    })
    .await;
    let batch = batch_id(&before);
    let (prompt_seq, prompt) = before.last().cloned().expect("the prompt");
    drop(stream);

    // A reconnecting UI re-reads from just before the prompt and sees it.
    let mut watcher = watch(&srv, "s", &batch, prompt_seq - 1)
        .await
        .expect("re-attach");
    assert_eq!(
        next_seq(&mut watcher).await,
        Some((prompt_seq, prompt.clone()))
    );
    let correlation = match &prompt {
        Event::CallUpdate(pb::ToolCallUpdate {
            state: Some(State::AwaitingApproval(a)),
            ..
        }) => a.correlation_id.clone(),
        other => panic!("{other:?}"),
    };
    let first = confirm(
        &srv,
        "s",
        "w",
        &correlation,
        pb::ConfirmationOutcome::ProceedOnce,
    )
    .await
    .expect("first answer");
    assert!(!first.already_applied);
    let again = confirm(
        &srv,
        "s",
        "w",
        &correlation,
        pb::ConfirmationOutcome::ProceedOnce,
    )
    .await
    .expect("the same answer again is OK");
    assert!(again.already_applied);
    let other = confirm(
        &srv,
        "s",
        "w",
        &correlation,
        pb::ConfirmationOutcome::Cancel,
    )
    .await
    .expect_err("a different answer");
    assert_eq!(other.code(), tonic::Code::FailedPrecondition);
    assert!(
        other.message().contains("proceed_once"),
        "names the answer that won: {}",
        other.message()
    );
    let rest = collect_seq(watcher).await;
    let all: Vec<Event> = events(&before).into_iter().chain(events(&rest)).collect();
    assert_eq!(
        states(&all, "w"),
        [
            "validating",
            "awaiting_approval",
            "scheduled",
            "executing",
            "success"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(srv.path("a.txt")).unwrap(),
        "hello\n"
    );
}

#[tokio::test]
async fn a_request_id_retried_after_completion_runs_nothing_again() {
    let srv = TestServer::with_config(yolo()).await;
    let calls = || vec![shell("sh", "echo once >> log")];
    let first = collect_seq(
        srv.schedule_with(with_request_id("s", calls(), "r-1"))
            .await,
    )
    .await;
    let retried = collect_seq(
        srv.schedule_with(with_request_id("s", calls(), "r-1"))
            .await,
    )
    .await;
    assert_eq!(std::fs::read_to_string(srv.path("log")).unwrap(), "once\n");
    assert_eq!(batch_id(&retried), batch_id(&first));
    match &retried[0].1 {
        Event::BatchAccepted(a) => assert!(a.replayed, "{a:?}"),
        other => panic!("{other:?}"),
    }
    match &first[0].1 {
        Event::BatchAccepted(a) => assert!(!a.replayed, "{a:?}"),
        other => panic!("{other:?}"),
    }
    // Every event, with the original sequences; only the replayed mark differs.
    let unmark = |mut seqs: Vec<Seq>| {
        if let Some((_, Event::BatchAccepted(a))) = seqs.first_mut() {
            a.replayed = false;
        }
        seqs
    };
    assert_eq!(unmark(retried), first);
    assert!(matches!(terminal(&events(&first), "sh"), State::Success(_)));
}

#[tokio::test]
async fn a_request_id_retried_while_running_attaches_to_the_running_batch() {
    let srv = TestServer::with_config(yolo()).await;
    let calls = || {
        vec![shell(
            "sh",
            "echo once >> log; while [ ! -e go ]; do sleep 0.05; done; echo finished",
        )]
    };
    let mut first = srv
        .schedule_with(with_request_id("s", calls(), "r-2"))
        .await;
    let first_part = read_until(&mut first, is_executing("sh")).await;
    let retried = srv
        .schedule_with(with_request_id("s", calls(), "r-2"))
        .await;
    std::fs::write(srv.path("go"), "").unwrap();
    let first_rest = collect_seq(first).await;
    let retried = collect_seq(retried).await;
    let first_all = [first_part, first_rest].concat();
    assert_eq!(std::fs::read_to_string(srv.path("log")).unwrap(), "once\n");
    assert_eq!(batch_id(&retried), batch_id(&first_all));
    assert_eq!(sequences(&retried), sequences(&first_all));
    assert_eq!(events(&retried)[1..], events(&first_all)[1..]);
    assert!(success_output(&events(&retried), "sh").ends_with("Output: finished\n"));
}

#[tokio::test]
async fn a_request_id_with_other_calls_is_already_exists_naming_the_batch() {
    let srv = TestServer::with_config(yolo()).await;
    let first = collect_seq(
        srv.schedule_with(with_request_id("s", vec![shell("sh", "true")], "r-3"))
            .await,
    )
    .await;
    let status = srv
        .client
        .clone()
        .schedule_calls(with_request_id("s", vec![shell("sh", "false")], "r-3"))
        .await
        .expect_err("other calls under a known request_id");
    assert_eq!(status.code(), tonic::Code::AlreadyExists);
    assert!(
        status.message().contains(&batch_id(&first)),
        "names the batch: {}",
        status.message()
    );
    // The same calls asking for another approval mode, sandbox level or
    // interactivity are another batch too: refused, nothing replayed.
    type Change = fn(&mut pb::ScheduleCallsRequest);
    let modes: [(&str, Change); 3] = [
        ("approval_mode", |r| {
            r.approval_mode = pb::ApprovalMode::Plan as i32
        }),
        ("sandbox_level", |r| {
            r.sandbox_level = pb::SandboxLevel::ReadOnly as i32
        }),
        ("interactive", |r| r.interactive = Some(false)),
    ];
    for (what, change) in modes {
        let mut retry = with_request_id("s", vec![shell("sh", "true")], "r-3");
        change(&mut retry);
        let status = srv
            .client
            .clone()
            .schedule_calls(retry)
            .await
            .expect_err(what);
        assert_eq!(status.code(), tonic::Code::AlreadyExists, "{what}");
        assert_eq!(
            status.message(),
            format!(
                "request_id 'r-3' was already used in this session by batch '{}' with different calls or settings (approval_mode, sandbox_level, workspace, interactive); use a new request_id for a new batch",
                batch_id(&first)
            ),
            "{what}"
        );
    }
    // Another session has its own request ids.
    let other = collect_seq(
        srv.schedule_with(with_request_id("t", vec![shell("sh", "false")], "r-3"))
            .await,
    )
    .await;
    assert_ne!(batch_id(&other), batch_id(&first));
}

#[tokio::test]
async fn two_watchers_get_the_whole_log_and_one_leaving_does_not_cancel() {
    // No grace: only the last reader going away cancels.
    let srv = TestServer::with_config(yolo()).await;
    let mut stream = srv
        .schedule(
            "s",
            vec![shell(
                "sh",
                "echo begun; while [ ! -e go ]; do sleep 0.05; done; echo finished",
            )],
        )
        .await;
    let before = read_until(&mut stream, output_contains("sh", "begun")).await;
    let batch = batch_id(&before);
    let mut leaving = watch(&srv, "s", &batch, 0).await.expect("watcher");
    let staying = watch(&srv, "s", &batch, 0).await.expect("watcher");
    drop(stream);
    let partial = read_until(&mut leaving, is_executing("sh")).await;
    assert_eq!(partial[0], before[0]);
    drop(leaving);
    std::fs::write(srv.path("go"), "").unwrap();
    let followed = collect_seq(staying).await;
    assert_eq!(
        sequences(&followed),
        (1..=followed.len() as u64).collect::<Vec<_>>()
    );
    assert!(success_output(&events(&followed), "sh").ends_with("Output: begun\nfinished\n"));
    assert_eq!(followed[..before.len()], before[..]);
    // A watcher arriving after the end reads the same whole log.
    assert_eq!(whole_log(&srv, "s", &batch).await, followed);
}

#[tokio::test]
async fn watch_batch_refuses_what_it_cannot_serve() {
    let srv = TestServer::with_config(SchedulerConfig {
        retention: toolsched::store::Retention {
            completed_for: Duration::ZERO,
            ..Default::default()
        },
        ..yolo()
    })
    .await;
    let unknown = watch(&srv, "s", "no-such-batch", 0)
        .await
        .expect_err("unknown");
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    assert!(
        unknown.message().contains("batch_retention_secs = 0 s"),
        "{}",
        unknown.message()
    );
    // Every limit that drops a completed batch is named with its value.
    let kept = toolsched::store::Retention::default();
    assert!(
        unknown.message().contains(&format!(
            "max_retained_batches = {} batches and max_retained_bytes = {} bytes",
            kept.max_batches_per_session, kept.max_bytes_per_session
        )),
        "{}",
        unknown.message()
    );
    let empty = watch(&srv, "s", "", 0).await.expect_err("empty id");
    assert_eq!(empty.code(), tonic::Code::InvalidArgument);

    let mut running = srv
        .schedule(
            "s",
            vec![shell(
                "sh",
                "echo begun; while [ ! -e go ]; do sleep 0.05; done",
            )],
        )
        .await;
    let before = read_until(&mut running, output_contains("sh", "begun")).await;
    let batch = batch_id(&before);
    let beyond = watch(&srv, "s", &batch, 1_000_000)
        .await
        .expect_err("beyond");
    assert_eq!(beyond.code(), tonic::Code::OutOfRange);
    std::fs::write(srv.path("go"), "").unwrap();
    let _ = collect_seq(running).await;
    // Retention 0: a completed batch is gone at once.
    let expired = watch(&srv, "s", &batch, 0).await.expect_err("expired");
    assert_eq!(expired.code(), tonic::Code::NotFound);
}

/// Resident set and its peak of process `pid`, in KiB, from /proc.
fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[tokio::test]
async fn a_client_that_stops_reading_does_not_grow_the_servers_memory() {
    let workspace = tempfile::tempdir().unwrap();
    let mut server = Binary::start(workspace.path(), &["--approval-mode", "yolo"]);
    let addr = format!("http://{}", server.addr);
    let (rss_before, _) = rss_kib(server.child.id());
    let mut stalled = pb::tool_scheduler_client::ToolSchedulerClient::connect(addr.clone())
        .await
        .unwrap();
    // `yes` prints without end until its 3 s timeout; nobody reads.
    let mut stream = stalled
        .schedule_calls(request(
            "s",
            vec![call(
                "sh",
                "run_shell_command",
                json!({"command": "yes", "timeout": 3}),
            )],
        ))
        .await
        .unwrap()
        .into_inner();
    let accepted = next_seq(&mut stream).await.expect("accepted");
    let batch = batch_id(&[accepted]);
    // A second client follows the batch to its end: the event to wait for.
    let mut follower = pb::tool_scheduler_client::ToolSchedulerClient::connect(addr)
        .await
        .unwrap();
    let followed = collect_seq(
        follower
            .watch_batch(pb::WatchBatchRequest {
                session_id: "s".into(),
                batch_id: batch,
                after_sequence: 0,
            })
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    let (type_, _) = error_of(&events(&followed), "sh");
    assert_eq!(type_, pb::ErrorType::ExecutionTimeout);
    let (rss_after, peak) = rss_kib(server.child.id());
    let growth = peak.saturating_sub(rss_before);
    println!(
        "server RSS: {rss_before} KiB before, {rss_after} KiB after, peak {peak} KiB (growth {growth} KiB) while a client did not read"
    );
    // The log of the call holds at most the streamed-output cap (1 MiB) plus
    // the kept head and tail (1 MiB) in its terminal and completion events:
    // a few MiB, whatever `yes` printed (gigabytes in 3 s).
    assert!(
        growth < 64 * 1024,
        "server grew by {growth} KiB while a client did not read"
    );
    drop(stream);
    let _ = server.child.kill();
    let _ = server.child.wait();
}

#[tokio::test]
async fn a_long_request_id_or_a_grace_over_the_limit_is_refused_naming_it() {
    let srv = TestServer::with_config(SchedulerConfig {
        max_disconnect_grace: Duration::from_secs(10),
        ..yolo()
    })
    .await;
    let long = srv
        .client
        .clone()
        .schedule_calls(with_request_id(
            "s",
            vec![shell("sh", "true")],
            &"r".repeat(129),
        ))
        .await
        .expect_err("a request id over 128 bytes");
    assert_eq!(long.code(), tonic::Code::InvalidArgument);
    assert!(
        long.message()
            .contains("request_id is 129 bytes; at most 128"),
        "{}",
        long.message()
    );
    let greedy = srv
        .client
        .clone()
        .schedule_calls(pb::ScheduleCallsRequest {
            request_id: "r-g".into(),
            ..with_grace("s", vec![shell("sh", "true")], 11)
        })
        .await
        .expect_err("a grace over the limit");
    assert_eq!(greedy.code(), tonic::Code::ResourceExhausted);
    assert!(
        greedy.message().contains("max_disconnect_grace_secs = 10"),
        "{}",
        greedy.message()
    );
    // The refused batch's request id was not kept: the same request with an
    // allowed grace runs a new batch.
    let ok = collect_seq(
        srv.schedule_with(pb::ScheduleCallsRequest {
            request_id: "r-g".into(),
            ..with_grace("s", vec![shell("sh", "true")], 5)
        })
        .await,
    )
    .await;
    match &ok[0].1 {
        Event::BatchAccepted(a) => assert!(!a.replayed),
        other => panic!("{other:?}"),
    }
    assert!(matches!(terminal(&events(&ok), "sh"), State::Success(_)));
}

#[tokio::test]
async fn a_detached_batch_keeps_its_session_from_being_evicted() {
    let srv = TestServer::with_config(SchedulerConfig {
        max_sessions: 1,
        ..yolo()
    })
    .await;
    let mut stream = srv
        .schedule_with(with_grace(
            "a",
            vec![shell(
                "sh",
                "echo begun; while [ ! -e go ]; do sleep 0.05; done; echo finished",
            )],
            60,
        ))
        .await;
    let before = read_until(&mut stream, output_contains("sh", "begun")).await;
    let batch = batch_id(&before);
    drop(stream);
    // Nobody reads session a, but its batch runs: it is busy, not evictable.
    let refused = srv
        .client
        .clone()
        .schedule_calls(request("b", vec![shell("sh", "true")]))
        .await
        .expect_err("the only session is busy");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    let watcher = watch(&srv, "a", &batch, before.last().expect("events").0)
        .await
        .expect("re-attach");
    std::fs::write(srv.path("go"), "").unwrap();
    let rest = collect_seq(watcher).await;
    assert!(success_output(&events(&rest), "sh").ends_with("Output: begun\nfinished\n"));
}
