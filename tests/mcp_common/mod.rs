//! MCP test servers and helpers shared by the `mcp_*` tests: the real
//! `@modelcontextprotocol/server-everything` (npm, installed into tests/mcp
//! by tests/setup.sh) and tests/mcp/py_server.py on PyPI's `mcp` package
//! (installed into .venv by tests/setup.sh).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::support::*;
use toolsched::api::pb;
use toolsched::tools::mcp::{McpServerConfig, McpServerStatus};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `node` from PATH; panics loudly when missing.
pub fn node() -> String {
    let found = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join("node").is_file()));
    assert!(
        found,
        "node is not on PATH: the MCP tests need Node.js 20 (apt-get install nodejs npm), then `bash tests/setup.sh`"
    );
    "node".into()
}

/// server-everything's entry point; panics with how to install it.
pub fn everything_js() -> String {
    let js =
        root().join("tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        js.exists(),
        "{} is missing: run `bash tests/setup.sh` (npm ci in tests/mcp)",
        js.display()
    );
    js.display().to_string()
}

/// server-everything over stdio.
pub fn everything(trust: bool) -> McpServerConfig {
    McpServerConfig {
        command: Some(node()),
        args: vec![everything_js(), "stdio".into()],
        trust,
        ..McpServerConfig::default()
    }
}

/// tests/mcp/py_server.py over stdio, with the venv's Python.
pub fn py(trust: bool) -> McpServerConfig {
    let python = venv_tool("python");
    let script = root().join("tests/mcp/py_server.py");
    let check = std::process::Command::new(&python)
        .args(["-c", "import mcp.server.fastmcp"])
        .status()
        .expect("run the venv's python");
    assert!(
        check.success(),
        "the `mcp` Python package is missing: run `bash tests/setup.sh` (tests/requirements.txt)"
    );
    McpServerConfig {
        command: Some(python.display().to_string()),
        args: vec!["-W".into(), "ignore".into(), script.display().to_string()],
        trust,
        ..McpServerConfig::default()
    }
}

pub fn servers(list: Vec<(&str, McpServerConfig)>) -> BTreeMap<String, McpServerConfig> {
    list.into_iter().map(|(n, c)| (n.to_string(), c)).collect()
}

/// Names of the registered tools.
pub async fn tool_names(srv: &TestServer) -> Vec<String> {
    list_tools(srv).await.into_iter().map(|t| t.name).collect()
}

pub async fn list_tools(srv: &TestServer) -> Vec<pb::FunctionDeclaration> {
    srv.client
        .clone()
        .list_tools(pb::ListToolsRequest {})
        .await
        .expect("list_tools")
        .into_inner()
        .tools
}

/// (progress, total, percent, message) of an Executing update.
pub type ProgressRow = (Option<f64>, Option<f64>, Option<f64>, String);

/// The Executing updates of `call_id` that carry progress.
pub fn progress_of(events: &[Event], call_id: &str) -> Vec<ProgressRow> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::CallUpdate(u) if u.call_id == call_id => match &u.state {
                Some(State::Executing(x)) if x.progress.is_some() => {
                    Some((x.progress, x.total, x.percent, x.message.clone()))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The error message of a function response.
pub fn response_error(events: &[Event], call_id: &str) -> String {
    let done = completed(events);
    let r = done
        .responses
        .iter()
        .find(|r| r.id == call_id)
        .expect("response");
    response_json(r)["error"]
        .as_str()
        .expect("error string")
        .to_string()
}

/// Waits (bounded) until `server`'s status satisfies `pred`; returns it.
pub async fn wait_status(
    srv: &TestServer,
    server: &str,
    pred: impl Fn(&McpServerStatus) -> bool,
) -> McpServerStatus {
    let mut rx = srv
        .mcp
        .as_ref()
        .expect("started with MCP servers")
        .watch_status(server)
        .expect("configured server");
    tokio::time::timeout(Duration::from_secs(60), rx.wait_for(|s| pred(s)))
        .await
        .unwrap_or_else(|_| panic!("{server} did not reach the expected status within 60 s"))
        .expect("status channel open")
        .clone()
}

/// The Cancel RPC for a session.
pub async fn cancel(srv: &TestServer, session: &str) -> pb::CancelResponse {
    srv.client
        .clone()
        .cancel(pb::CancelRequest {
            session_id: session.into(),
            batch_id: None,
            reason: "stop it".into(),
        })
        .await
        .expect("cancel")
        .into_inner()
}
