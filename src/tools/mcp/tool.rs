//! One MCP server tool as a toolsched [`Tool`], and its calls.
//!
//! A call sends `tools/call` with a progress token (rmcp assigns one to every
//! request), turns each `notifications/progress` into a [`Progress`] update
//! (fields missing from a later notification keep their earlier values),
//! restarts the inactivity timeout on progress while the maximum total time
//! still applies, sends `notifications/cancelled` when its token is
//! cancelled, and fails fast with the exit status and last stderr lines when
//! the server dies mid-call.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, CancelledNotificationParam, ClientRequest, ContentBlock,
    ProgressNotificationParam, Request, ResourceContents, ServerResult,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use super::McpServerConfig;
use super::connection::{Connection, Link};
use crate::tools::{
    Args, BoxFuture, ConfirmationDetails, Declaration, ErrorKind, ExecContext, Invocation,
    Progress, Subject, Tool, ToolError, ToolKind, ToolOutcome,
};

/// Longest wire name a model accepts (Gemini's function-name limit).
const MAX_NAME_LEN: usize = 64;
/// How long a call whose connection broke waits for the supervisor to learn
/// why (exit status, stderr) before it reports the bare broken connection.
const DEATH_REPORT_WAIT: Duration = Duration::from_millis(900);
/// How long a call waits for a restarting server to come back before it
/// fails (the first restarts come after 0.25 s, 0.5 s, 1 s, …).
const RECONNECT_WAIT: Duration = Duration::from_secs(10);

/// `mcp_<server>_<tool>` with every character a model's function name cannot
/// hold replaced by `_`, shortened in the middle to [`MAX_NAME_LEN`] as
/// Gemini CLI does.
pub fn registered_name(server: &str, tool: &str) -> String {
    let raw = format!("mcp_{server}_{tool}");
    let clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= MAX_NAME_LEN {
        return clean;
    }
    // ASCII only by now, so byte slicing is on char boundaries.
    let head = 30;
    let tail = MAX_NAME_LEN - head - 3;
    format!("{}___{}", &clean[..head], &clean[clean.len() - tail..])
}

/// A tool of an MCP server.
pub struct McpTool {
    decl: Declaration,
    server: String,
    /// The tool's name on its server.
    remote_name: String,
    config: Arc<McpServerConfig>,
    link: watch::Receiver<Link>,
}

impl McpTool {
    /// Wraps `tool` of `server`, or says why it cannot be registered (its
    /// input schema does not compile).
    pub(crate) fn new(
        server: &str,
        config: Arc<McpServerConfig>,
        tool: &rmcp::model::Tool,
        link: watch::Receiver<Link>,
    ) -> Result<Self, String> {
        let parameters = Value::Object((*tool.input_schema).clone());
        jsonschema::validator_for(&parameters).map_err(|e| format!("invalid input schema: {e}"))?;
        let read_only_hint = tool
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false);
        Ok(Self {
            decl: Declaration {
                name: registered_name(server, &tool.name),
                description: tool.description.as_deref().unwrap_or_default().to_string(),
                parameters,
                kind: if read_only_hint {
                    ToolKind::Read
                } else {
                    ToolKind::Other
                },
                // The server says the tool changes nothing: it may share a
                // wave with other read-only calls.
                parallelizable: read_only_hint,
                // Running without approval takes more than the server's
                // word: only a trusted server's hint counts.
                read_only: read_only_hint && config.trust,
            },
            server: server.to_string(),
            remote_name: tool.name.to_string(),
            config,
            link,
        })
    }
}

impl Tool for McpTool {
    fn declaration(&self) -> &Declaration {
        &self.decl
    }

    fn mcp_server(&self) -> Option<&str> {
        Some(&self.server)
    }

    fn build(&self, args: &Args) -> Result<Arc<dyn Invocation>, ToolError> {
        Ok(Arc::new(McpInvocation {
            server: self.server.clone(),
            tool: self.remote_name.clone(),
            description: self.decl.description.clone(),
            args: args.clone(),
            config: self.config.clone(),
            link: self.link.clone(),
        }))
    }
}

/// A call of an MCP tool.
struct McpInvocation {
    server: String,
    tool: String,
    description: String,
    args: Args,
    config: Arc<McpServerConfig>,
    link: watch::Receiver<Link>,
}

impl Invocation for McpInvocation {
    fn subject(&self) -> Subject {
        Subject::Mcp {
            server: self.server.clone(),
            tool: self.tool.clone(),
        }
    }

    fn confirmation(&self) -> Result<ConfirmationDetails, ToolError> {
        Ok(ConfirmationDetails::Mcp {
            server_name: self.server.clone(),
            tool_name: self.tool.clone(),
            args: self.args.clone(),
            description: self.description.clone(),
        })
    }

    fn execute(self: Arc<Self>, ctx: ExecContext) -> BoxFuture<ToolOutcome> {
        Box::pin(async move { self.run(ctx).await.unwrap_or_else(Into::into) })
    }
}

fn mcp_error(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorKind::McpToolError, message)
}

impl McpInvocation {
    async fn run(&self, ctx: ExecContext) -> Result<ToolOutcome, ToolError> {
        let Some(conn) = self.connection(&ctx).await? else {
            return Ok(ToolOutcome::Cancelled {
                partial_output: None,
            });
        };
        let params =
            CallToolRequestParams::new(self.tool.clone()).with_arguments(self.args.clone());
        let request = ClientRequest::CallToolRequest(Request::new(params));
        let handle = tokio::select! {
            biased;
            () = ctx.token.cancelled() => return Ok(ToolOutcome::Cancelled { partial_output: None }),
            sent = conn.peer.send_cancellable_request(request, PeerRequestOptions::no_options()) => match sent {
                Ok(handle) => handle,
                Err(e) => return Err(self.broken(&conn, &e).await),
            },
        };
        let request_id = handle.id.clone();
        // Whatever ends this call early (cancellation, a timeout, the
        // scheduler dropping it) tells the server.
        let mut remote = RemoteCancel {
            conn: Some(conn.clone()),
            id: request_id.clone(),
            reason: "Cancelled by the client.",
        };
        let mut progress = conn.progress.subscribe(handle.progress_token.clone());
        let mut response = handle.rx;
        let inactivity = self.config.call_timeout(ctx.timeout);
        let idle = tokio::time::sleep(inactivity);
        tokio::pin!(idle);
        let total_limit = self.config.max_total_time();
        let total = tokio::time::sleep(total_limit.unwrap_or(Duration::MAX / 4));
        tokio::pin!(total);
        let mut merged = Merged::default();
        loop {
            tokio::select! {
                biased;
                () = ctx.token.cancelled() => {
                    // `remote` tells the server without waiting for it: the
                    // call ends now and a late result is dropped with
                    // `response`. A progress message is not output: the
                    // response is the cancellation alone.
                    return Ok(ToolOutcome::Cancelled { partial_output: None });
                }
                Some(p) = progress.recv() => {
                    idle.as_mut().reset(tokio::time::Instant::now() + inactivity);
                    ctx.progress.send(merged.merge(p));
                }
                result = &mut response => {
                    // Progress the server sent before its result was routed
                    // before it (see `Tap`): report it first.
                    remote.disarm();
                    while let Some(p) = progress.try_recv() {
                        ctx.progress.send(merged.merge(p));
                    }
                    return match result {
                        Ok(Ok(ServerResult::CallToolResult(result))) => Ok(map_result(result, ctx.output.max_bytes)),
                        Ok(Ok(other)) => Err(mcp_error(format!(
                            "MCP server '{}' answered tools/call for '{}' with an unexpected result: {}",
                            self.server, self.tool, serde_json::to_string(&other).unwrap_or_default()
                        ))),
                        Ok(Err(ServiceError::McpError(e))) => Err(mcp_error(format!(
                            "MCP server '{}' refused tool '{}': {} (code {})",
                            self.server, self.tool, e.message, e.code.0
                        ))),
                        Ok(Err(e)) => Err(self.broken(&conn, &e).await),
                        Err(_) => Err(self.broken(&conn, &ServiceError::TransportClosed).await),
                    };
                }
                () = conn.closed() => {
                    remote.disarm();
                    return Err(self.broken(&conn, &ServiceError::TransportClosed).await);
                }
                () = &mut idle => {
                    remote.reason = "timeout";
                    return Err(ToolError::new(ErrorKind::ExecutionTimeout, format!(
                        "MCP tool '{}' of server '{}' sent neither a result nor progress for {} s (the server's timeout_ms); the call was cancelled.",
                        self.tool, self.server, inactivity.as_secs_f64()
                    )));
                }
                () = &mut total, if total_limit.is_some() => {
                    remote.reason = "maximum total time exceeded";
                    return Err(ToolError::new(ErrorKind::ExecutionTimeout, format!(
                        "MCP tool '{}' of server '{}' did not finish within its maximum total time of {} s (max_total_time_ms); the call was cancelled.",
                        self.tool, self.server, total_limit.unwrap_or_default().as_secs_f64()
                    )));
                }
            }
        }
    }

    /// The server's live connection; while it is restarting, waits for it
    /// up to [`RECONNECT_WAIT`]. `None` when the call was cancelled meanwhile.
    async fn connection(&self, ctx: &ExecContext) -> Result<Option<Arc<Connection>>, ToolError> {
        let mut link = self.link.clone();
        let wait = link.wait_for(|l| matches!(l, Link::Up(c) if !c.is_closed()));
        let waited = tokio::select! {
            () = ctx.token.cancelled() => return Ok(None),
            r = tokio::time::timeout(RECONNECT_WAIT, wait) => r.map(|r| r.map(|l| l.clone())),
        };
        match waited {
            Ok(Ok(Link::Up(conn))) if !conn.is_closed() => Ok(Some(conn)),
            _ => {
                let reason = match &*self.link.borrow() {
                    Link::Down { reason } => reason.clone(),
                    Link::Up(_) => "it is restarting".to_string(),
                };
                Err(mcp_error(format!(
                    "MCP server '{}' is not connected: {reason}",
                    self.server
                )))
            }
        }
    }

    /// The error of a call whose connection broke: the exit status and last
    /// stderr lines once the supervisor knows them.
    async fn broken(&self, conn: &Connection, err: &ServiceError) -> ToolError {
        let reason = conn
            .death_reason(DEATH_REPORT_WAIT)
            .await
            .unwrap_or_else(|| format!("the connection failed: {err}"));
        mcp_error(format!(
            "MCP server '{}' failed during the call of '{}': {reason}",
            self.server, self.tool
        ))
    }
}

/// Sends `notifications/cancelled` for a request when dropped armed: the
/// call ended (or was dropped) before the server answered.
struct RemoteCancel {
    conn: Option<Arc<Connection>>,
    id: rmcp::model::RequestId,
    reason: &'static str,
}

impl RemoteCancel {
    fn disarm(&mut self) {
        self.conn = None;
    }
}

impl Drop for RemoteCancel {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        let param =
            CancelledNotificationParam::new(Some(self.id.clone()), Some(self.reason.into()));
        // Drop may run outside a runtime (at shutdown): then there is no
        // server left to tell.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = conn.peer.notify_cancelled(param).await {
                    tracing::debug!(error = %e, "could not send notifications/cancelled");
                }
            });
        }
    }
}

/// Progress of one call so far: a field missing from a notification keeps
/// its earlier value; so does a total of 0 (servers send it for "unknown").
/// A progress or total that is NaN or infinite is dropped (debug log): it
/// would make every later percent meaningless.
#[derive(Debug, Default)]
struct Merged {
    progress: Option<f64>,
    total: Option<f64>,
    message: Option<String>,
}

impl Merged {
    fn merge(&mut self, p: ProgressNotificationParam) -> Progress {
        if p.progress.is_finite() {
            self.progress = Some(p.progress);
        } else {
            tracing::debug!(
                progress = p.progress,
                "MCP progress value is not finite; dropped"
            );
        }
        match p.total {
            Some(total) if total.is_finite() && total > 0.0 => self.total = Some(total),
            Some(total) if !total.is_finite() => {
                tracing::debug!(total, "MCP progress total is not finite; dropped");
            }
            // 0, negative or absent: the known total stays.
            _ => {}
        }
        if let Some(message) = p.message {
            self.message = Some(message);
        }
        Progress::Report {
            progress: self.progress,
            total: self.total,
            percent: percent(self.progress, self.total),
            message: self.message.clone().unwrap_or_default(),
        }
    }
}

/// `progress / total` in percent, only when total is a positive finite
/// number; capped at 100.
fn percent(progress: Option<f64>, total: Option<f64>) -> Option<f64> {
    let (p, t) = (progress?, total?);
    (t.is_finite() && t > 0.0).then(|| (p / t * 100.0).clamp(0.0, 100.0))
}

/// Maps a `tools/call` result to an outcome: text joined by newlines (the
/// output is that string); with images, audio or binary resources, the
/// output is a list of Gemini parts (`{"text"}` and
/// `{"inlineData": {"mimeType", "data"}}`); `isError: true` is an
/// `mcp_tool_error` with the server's text. Structured content goes into the
/// structured result as `structured_content`.
///
/// Bounded like a command's output (`output_cap_bytes`): text beyond the
/// cap keeps its head and tail around a note with the counts; inline data
/// and structured content that do not fit in what is left are replaced by a
/// note (a server returning 3 MB must not make an event a client cannot
/// receive; FastMCP repeats a text result as structured content).
fn map_result(result: CallToolResult, cap: usize) -> ToolOutcome {
    let mut texts: Vec<String> = Vec::new();
    let mut parts: Vec<Value> = Vec::new();
    let mut has_inline = false;
    let mut text = |t: String, parts: &mut Vec<Value>| {
        parts.push(json!({ "text": t }));
        texts.push(t);
    };
    for block in result.content {
        match block {
            ContentBlock::Text(t) => text(t.text, &mut parts),
            ContentBlock::Image(i) => {
                has_inline = true;
                parts.push(json!({ "inlineData": { "mimeType": i.mime_type, "data": i.data } }));
            }
            ContentBlock::Audio(a) => {
                has_inline = true;
                parts.push(json!({ "inlineData": { "mimeType": a.mime_type, "data": a.data } }));
            }
            ContentBlock::Resource(r) => match r.resource {
                ResourceContents::TextResourceContents { text: t, .. } => text(t, &mut parts),
                ResourceContents::BlobResourceContents {
                    blob, mime_type, ..
                } => {
                    has_inline = true;
                    parts.push(json!({ "inlineData": {
                        "mimeType": mime_type.unwrap_or_else(|| "application/octet-stream".into()),
                        "data": blob,
                    }}));
                }
                other => text(unknown_block(&other), &mut parts),
            },
            ContentBlock::ResourceLink(link) => {
                text(
                    format!("Resource link: {} ({})", link.name, link.uri),
                    &mut parts,
                );
            }
            other => text(unknown_block(&other), &mut parts),
        }
    }
    let joined = head_and_tail(texts.join("\n"), cap);
    if result.is_error == Some(true) {
        let message = if joined.is_empty() {
            "The MCP tool reported an error without a message.".to_string()
        } else {
            joined
        };
        return mcp_error(message).into();
    }
    let mut budget = cap;
    let output = if has_inline {
        let parts = parts
            .into_iter()
            .map(|part| {
                let size = json_size(&part);
                let part = match part.get("text").and_then(Value::as_str) {
                    Some(t) if size > budget => json!({ "text": head_and_tail(t.to_string(), budget) }),
                    _ if size > budget => json!({ "text": format!(
                        "[inline data of {size} bytes left out: over the output cap of {cap} bytes (output_cap_bytes)]"
                    ) }),
                    _ => part,
                };
                budget = budget.saturating_sub(json_size(&part));
                part
            })
            .collect();
        Value::Array(parts)
    } else {
        budget = budget.saturating_sub(joined.len());
        Value::String(joined)
    };
    let mut structured = Map::new();
    if let Some(s) = result.structured_content {
        let size = json_size(&s);
        if size <= budget {
            structured.insert("structured_content".into(), s);
        } else {
            structured.insert(
                "structured_content_omitted".into(),
                json!(format!(
                    "structured content of {size} bytes left out: over what the output cap of {cap} bytes (output_cap_bytes) leaves after the output"
                )),
            );
        }
    }
    ToolOutcome::Success {
        output,
        result: structured,
    }
}

/// Bytes of `v` as JSON.
fn json_size(v: &Value) -> usize {
    serde_json::to_string(v).map_or(0, |s| s.len())
}

/// `text` within `cap` bytes: its first and last halves around a note with
/// the counts, as a command's output is kept.
fn head_and_tail(text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let mut head = cap / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - cap / 2;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n... [{} of {} bytes of the MCP result left out: over the output cap of {cap} bytes (output_cap_bytes)] ...\n{}",
        &text[..head],
        tail - head,
        text.len(),
        &text[tail..]
    )
}

/// A content kind this build does not know, as its JSON (newer protocol
/// versions may add kinds; the model still sees them).
fn unknown_block(block: &impl serde::Serialize) -> String {
    serde_json::to_string(block).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised_and_bounded() {
        assert_eq!(
            registered_name("everything", "get-sum"),
            "mcp_everything_get-sum"
        );
        assert_eq!(registered_name("s", "a b/c"), "mcp_s_a_b_c");
        let long = registered_name("server", &"x".repeat(100));
        assert_eq!(long.len(), MAX_NAME_LEN);
        assert!(long.starts_with("mcp_server_") && long.contains("___"));
    }

    fn note(progress: f64, total: Option<f64>) -> ProgressNotificationParam {
        let mut p = ProgressNotificationParam::new(
            rmcp::model::ProgressToken(rmcp::model::NumberOrString::Number(1)),
            progress,
        );
        p.total = total;
        p
    }

    #[test]
    fn a_zero_absent_or_non_finite_total_keeps_the_known_one() {
        let mut m = Merged::default();
        let seen: Vec<_> = [
            note(1.0, Some(0.0)),
            note(2.0, Some(8.0)),
            note(3.0, Some(0.0)),
            note(4.0, None),
            note(f64::NAN, Some(f64::INFINITY)),
            note(5.0, Some(f64::NAN)),
            note(f64::INFINITY, Some(-1.0)),
        ]
        .into_iter()
        .map(|p| match m.merge(p) {
            Progress::Report {
                progress,
                total,
                percent,
                ..
            } => (progress, total, percent),
            other => panic!("a report: {other:?}"),
        })
        .collect();
        assert_eq!(
            seen,
            [
                (Some(1.0), None, None),
                (Some(2.0), Some(8.0), Some(25.0)),
                (Some(3.0), Some(8.0), Some(37.5)),
                (Some(4.0), Some(8.0), Some(50.0)),
                (Some(4.0), Some(8.0), Some(50.0)),
                (Some(5.0), Some(8.0), Some(62.5)),
                (Some(5.0), Some(8.0), Some(62.5)),
            ]
        );
    }

    #[test]
    fn percent_needs_a_positive_finite_total_and_is_capped() {
        assert_eq!(percent(Some(1.0), Some(4.0)), Some(25.0));
        assert_eq!(percent(Some(9.0), Some(4.0)), Some(100.0));
        assert_eq!(percent(Some(1.0), Some(0.0)), None);
        assert_eq!(percent(Some(1.0), Some(f64::INFINITY)), None);
        assert_eq!(percent(Some(1.0), None), None);
    }
}
