//! Backpressure: a client that stops reading costs the server a bounded
//! amount. An MCP server (tests/mcp/py_server.py) floods progress while the
//! batch's stream is not read; the reports queued for the stream merge into
//! the latest, so the client, reading at last, gets far fewer reports than
//! were sent, still in order and ending with the last one.

use crate::mcp_common;
use crate::support;

use mcp_common::*;
use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::api::pb::tool_scheduler_client::ToolSchedulerClient;
use toolsched::scheduler::SchedulerConfig;

fn yolo_request(session: &str, calls: Vec<pb::FunctionCall>) -> pb::ScheduleCallsRequest {
    pb::ScheduleCallsRequest {
        approval_mode: pb::ApprovalMode::Yolo as i32,
        ..request(session, calls)
    }
}

/// The lagging client's HTTP/2 stream window, in bytes.
const STREAM_WINDOW: u32 = 4096;

#[tokio::test]
async fn a_progress_flood_to_a_client_that_stops_reading_is_merged_to_the_latest() {
    const SENT: u32 = 5_000;
    let srv =
        TestServer::with_mcp(SchedulerConfig::default(), servers(vec![("py", py(true))])).await;
    // A client whose stream window is small, so that the transport buffers
    // little (by default a client's window holds megabytes) and the lag
    // reaches the server's queue.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", srv.addr))
        .expect("endpoint")
        .initial_stream_window_size(Some(STREAM_WINDOW))
        .connect()
        .await
        .expect("connect");
    let flood = ToolSchedulerClient::new(channel)
        .schedule_calls(yolo_request(
            "s",
            vec![call("f", "mcp_py_flood_progress", json!({"count": SENT}))],
        ))
        .await
        .expect("accepted")
        .into_inner();
    // The flood's stream is not read. A second batch of the session starts
    // only once the flood's batch has completed, so by its Started event
    // every event of the flood is queued for the first stream.
    let mut next = srv
        .schedule_with(yolo_request(
            "s",
            vec![call("w", "mcp_py_whoami", json!({}))],
        ))
        .await;
    let mut seen = Vec::new();
    next_matching(&mut next, &mut seen, |e| {
        matches!(e, Event::BatchStarted(_))
    })
    .await;

    let events = collect(flood).await;
    assert_eq!(
        states(&events, "f"),
        ["validating", "scheduled", "executing", "success"]
    );
    assert_eq!(success_output(&events, "f"), format!("flooded {SENT}"));
    let reports = progress_of(&events, "f");
    let total = f64::from(SENT);
    assert_eq!(
        reports.last(),
        Some(&(
            Some(total),
            Some(total),
            Some(100.0),
            format!("flood {SENT}")
        ))
    );
    assert!(
        reports.windows(2).all(|w| w[0].0 < w[1].0),
        "reports arrive in order"
    );
    // What the transport buffered before the client stopped, plus the
    // feed's lag allowance: far below what was sent.
    assert!(
        reports.len() < (SENT / 2) as usize,
        "{} of {SENT} reports were queued",
        reports.len()
    );
    eprintln!("{} of {SENT} reports reached the client", reports.len());
    // Every report the client did not get one by one is counted as merged.
    let text = srv.metrics.render(&Default::default());
    let merged: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("toolsched_events_lagged_total{action=\"merged\"} "))
        .expect("the merged series is exported")
        .parse()
        .expect("a count");
    assert_eq!(
        merged + reports.len() as u64,
        u64::from(SENT),
        "merged + delivered = sent"
    );
    let rest = collect(next).await;
    assert_eq!(states(&rest, "w").last(), Some(&"success"));
}
