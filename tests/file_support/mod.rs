//! Helpers shared by the file and search tool tests: one-call batches, the
//! structured result and raw output of a call, and a YOLO configuration so
//! edits run without a prompt.
#![allow(dead_code)]

use serde_json::{Map, Value};
use toolsched::api::convert::struct_to_json;
use toolsched::api::pb;
use toolsched::scheduler::SchedulerConfig;

use crate::support::*;

/// Runs one call as a batch of its own and returns its events.
pub async fn run_one(srv: &TestServer, name: &str, args: Value) -> Vec<Event> {
    srv.run("s", vec![call("c", name, args)]).await
}

/// The states of the single call "c", asserting it ran to Success.
pub fn assert_ran(events: &[Event]) {
    assert_eq!(
        states(events, "c"),
        ["validating", "scheduled", "executing", "success"],
        "{events:?}"
    );
}

/// The `output` string of call "c", asserting the state sequence.
pub fn ok_output(events: &[Event]) -> String {
    assert_ran(events);
    success_output(events, "c")
}

/// The function response `output` of a successful call, as JSON.
pub fn output_json(events: &[Event], id: &str) -> Value {
    match terminal(events, id) {
        State::Success(s) => {
            response_json(s.response.as_ref().expect("response"))["output"].clone()
        }
        other => panic!("{id} did not succeed: {other:?}"),
    }
}

/// The structured result of a successful call.
pub fn result_of(events: &[Event], id: &str) -> Map<String, Value> {
    match terminal(events, id) {
        State::Success(s) => struct_to_json(s.result.expect("result")),
        other => panic!("{id} did not succeed: {other:?}"),
    }
}

/// The error of call "c" and its state sequence: `built` is true when the
/// call failed when built (straight to Error), false when it failed while
/// executing.
pub fn failed(events: &[Event], built: bool) -> (pb::ErrorType, String) {
    let expected: &[&str] = if built {
        &["error"]
    } else {
        &["validating", "scheduled", "executing", "error"]
    };
    assert_eq!(states(events, "c"), expected, "{events:?}");
    let (kind, message) = error_of(events, "c");
    // The function response carries the same message for the model.
    match terminal(events, "c") {
        State::Error(e) => {
            let response = response_json(e.response.as_ref().expect("response"));
            assert_eq!(response["error"], Value::String(message.clone()));
        }
        _ => unreachable!(),
    }
    (kind, message)
}

/// Writes `bytes` to `rel` in the server's workspace, creating parents.
pub fn put(srv: &TestServer, rel: &str, bytes: impl AsRef<[u8]>) {
    let path = srv.path(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, bytes).unwrap();
}

/// The bytes of `rel` in the server's workspace.
pub fn bytes(srv: &TestServer, rel: &str) -> Vec<u8> {
    std::fs::read(srv.path(rel)).unwrap()
}

/// A server whose workspace is `repo/<sub>`: a directory inside a larger
/// repository (whose `.git` and `.gitignore` lie above the workspace root).
pub struct NestedServer {
    pub repo: tempfile::TempDir,
    pub workspace: std::path::PathBuf,
    client:
        toolsched::api::pb::tool_scheduler_client::ToolSchedulerClient<tonic::transport::Channel>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl NestedServer {
    /// `prepare` fills the repository before the server starts.
    pub async fn start(sub: &str, prepare: impl FnOnce(&std::path::Path)) -> Self {
        let repo = tempfile::tempdir().unwrap();
        let workspace = repo.path().join(sub);
        std::fs::create_dir_all(&workspace).unwrap();
        prepare(repo.path());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = tokio_util::sync::CancellationToken::new();
        let scheduler =
            toolsched::build_scheduler(&workspace, SchedulerConfig::default(), shutdown.clone())
                .unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            toolsched::api::serve(
                listener,
                scheduler,
                shutdown,
                toolsched::api::ServerOptions::default(),
                async {
                    let _ = stopped.await;
                },
            )
            .await
            .unwrap();
        });
        let client = toolsched::api::pb::tool_scheduler_client::ToolSchedulerClient::connect(
            format!("http://{addr}"),
        )
        .await
        .unwrap();
        Self {
            repo,
            workspace,
            client,
            stop: Some(stop),
            server: Some(server),
        }
    }

    /// Runs one call "c" and returns its events.
    pub async fn run_one(&self, name: &str, args: Value) -> Vec<Event> {
        let stream = self
            .client
            .clone()
            .schedule_calls(request("s", vec![call("c", name, args)]))
            .await
            .unwrap()
            .into_inner();
        collect(stream).await
    }
}

impl Drop for NestedServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}
