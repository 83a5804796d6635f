//! Connecting to one MCP server and keeping it connected.
//!
//! The supervisor task of a server connects (spawning a stdio server in its
//! own process group, or opening a streamable-HTTP session), lists its tools,
//! publishes the connection to the server's tools through a `watch` channel,
//! relists on `notifications/tools/list_changed`, and when the server exits
//! or the connection drops, records why (exit status, last stderr lines),
//! which fails every in-flight call at once, then restarts with backoff.
//!
//! Stdio servers are spawned here rather than by rmcp's child-process
//! transport so that we own the `Child`: its exit status and stderr are what
//! a failed call reports.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use std::future::Future;

use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, JsonRpcMessage, ProgressNotificationParam,
    ProgressToken, ServerNotification,
};
use rmcp::service::{
    NotificationContext, Peer, RoleClient, RunningService, RxJsonRpcMessage, TxJsonRpcMessage,
};
use rmcp::transport::async_rw::TransportAdapterAsyncRW;
use rmcp::transport::{IntoTransport, Transport as RmcpTransport};
use rmcp::{ClientHandler, ServiceExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::tool::McpTool;
use super::{McpManager, McpServerConfig, McpServerStatus, Transport};
use crate::tools::Tool;

/// Lines of a stdio server's stderr kept for error messages.
const STDERR_TAIL_LINES: usize = 10;
/// Bytes of one stderr line kept (a server printing a huge line cannot bloat
/// an error message).
const STDERR_LINE_BYTES: usize = 512;
/// Progress notifications kept for a token nobody has subscribed to yet (the
/// server can answer faster than the call subscribes); the oldest go first.
const MAX_PENDING_PROGRESS: usize = 64;
/// First restart delay; doubled per failed attempt up to [`MAX_BACKOFF`].
const INITIAL_BACKOFF: Duration = Duration::from_millis(250);
/// Longest restart delay: a broken server is retried at least this often.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A connection that lived this long resets the backoff: it was healthy.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// Time the stderr reader gets after the process exited to read its last
/// lines.
const STDERR_DRAIN: Duration = Duration::from_millis(300);

/// What the tools of a server see: a live connection or why there is none.
#[derive(Clone)]
pub(crate) enum Link {
    Up(Arc<Connection>),
    Down { reason: String },
}

/// One live session with a server.
pub(crate) struct Connection {
    pub peer: Peer<RoleClient>,
    pub progress: ProgressRouter,
    closed: CancellationToken,
    death: OnceLock<String>,
}

impl Connection {
    /// Resolves when the connection is gone.
    pub async fn closed(&self) {
        self.closed.cancelled().await;
    }

    /// Whether the connection is gone (its link may still say Up for a
    /// moment).
    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Why the connection is gone, waiting at most `wait` for the supervisor
    /// to find out.
    pub async fn death_reason(&self, wait: Duration) -> Option<String> {
        let _ = tokio::time::timeout(wait, self.closed.cancelled()).await;
        self.death.get().cloned()
    }

    fn die(&self, reason: String) {
        let _ = self.death.set(reason);
        self.closed.cancel();
    }
}

// === impl ProgressRouter ===

/// Routes `notifications/progress` to the call that owns the token.
#[derive(Clone, Default)]
pub(crate) struct ProgressRouter(Arc<Mutex<RouterState>>);

#[derive(Default)]
struct RouterState {
    subscribers: HashMap<ProgressToken, mpsc::UnboundedSender<ProgressNotificationParam>>,
    pending: VecDeque<ProgressNotificationParam>,
}

/// A call's progress notifications; unsubscribes on drop.
pub(crate) struct ProgressSubscription {
    rx: mpsc::UnboundedReceiver<ProgressNotificationParam>,
    token: ProgressToken,
    router: ProgressRouter,
}

impl ProgressSubscription {
    pub async fn recv(&mut self) -> Option<ProgressNotificationParam> {
        self.rx.recv().await
    }

    /// A notification already routed, without waiting.
    pub fn try_recv(&mut self) -> Option<ProgressNotificationParam> {
        self.rx.try_recv().ok()
    }
}

impl Drop for ProgressSubscription {
    fn drop(&mut self) {
        self.router.lock().subscribers.remove(&self.token);
    }
}

impl ProgressRouter {
    fn lock(&self) -> std::sync::MutexGuard<'_, RouterState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn route(&self, p: ProgressNotificationParam) {
        let mut state = self.lock();
        if let Some(tx) = state.subscribers.get(&p.progress_token) {
            let _ = tx.send(p);
            return;
        }
        if state.pending.len() == MAX_PENDING_PROGRESS {
            state.pending.pop_front();
        }
        state.pending.push_back(p);
    }

    /// Subscribes to `token`, first receiving what arrived before.
    pub fn subscribe(&self, token: ProgressToken) -> ProgressSubscription {
        // Unbounded: routing runs on the transport's reader, which must not
        // wait; the call's loop drains it as notifications arrive and the
        // scheduler merges reports a lagging client has not read.
        let (tx, rx) = mpsc::unbounded_channel();
        let mut state = self.lock();
        let pending = std::mem::take(&mut state.pending);
        for p in pending {
            if p.progress_token == token {
                let _ = tx.send(p);
            } else {
                state.pending.push_back(p);
            }
        }
        state.subscribers.insert(token.clone(), tx);
        drop(state);
        ProgressSubscription {
            rx,
            token,
            router: self.clone(),
        }
    }
}

// === impl Tap ===

/// A transport that routes `notifications/progress` as it reads them, in
/// wire order. rmcp runs notification handlers on tasks of their own, so a
/// handler could see the last progress of a call after its result (or two
/// notifications swapped); reading them here, before the service loop sees
/// the response that follows them, keeps the order the server sent.
struct Tap<T> {
    inner: T,
    progress: ProgressRouter,
}

impl<T: RmcpTransport<RoleClient>> RmcpTransport<RoleClient> for Tap<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        let progress = self.progress.clone();
        let next = self.inner.receive();
        async move {
            let msg = next.await;
            if let Some(JsonRpcMessage::Notification(n)) = &msg
                && let ServerNotification::ProgressNotification(p) = &n.notification
            {
                progress.route(p.params.clone());
            }
            msg
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

// === impl Handler ===

/// Our side of the MCP session: tool list changes (progress is taken off
/// the wire by [`Tap`]).
struct Handler {
    list_changed: mpsc::UnboundedSender<()>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.list_changed.send(());
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("toolsched", env!("CARGO_PKG_VERSION")),
        )
    }
}

// === the supervisor ===

/// A started server: the session and, for stdio, the process.
struct Started {
    service: RunningService<RoleClient, Handler>,
    process: Option<Process>,
    progress: ProgressRouter,
    list_changed: mpsc::UnboundedReceiver<()>,
}

/// A stdio server's process and the tail of its stderr.
struct Process {
    child: tokio::process::Child,
    /// The process group (the child's pid): killed as a whole so that
    /// grandchildren (`npx` → `node`) do not outlive it.
    pgid: Option<i32>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    stderr_done: Option<tokio::task::JoinHandle<()>>,
}

impl Process {
    fn kill_group(&mut self) {
        if let Some(pgid) = self.pgid {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.start_kill();
    }

    /// "exit status 3; last stderr lines: …"
    async fn describe_exit(&mut self, status: std::io::Result<std::process::ExitStatus>) -> String {
        if let Some(done) = self.stderr_done.take() {
            let _ = tokio::time::timeout(STDERR_DRAIN, done).await;
        }
        let status = match status {
            Ok(s) => describe_status(s),
            Err(e) => format!("its exit status is unknown ({e})"),
        };
        let tail = self
            .stderr_tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect::<Vec<_>>();
        if tail.is_empty() {
            format!("the server process exited ({status}); it wrote nothing to stderr")
        } else {
            format!(
                "the server process exited ({status}); last stderr lines:\n{}",
                tail.join("\n")
            )
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill_group();
    }
}

fn describe_status(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => s.to_string(),
    }
}

/// Runs `name`'s server until `shutdown`: connect, serve, restart.
pub(crate) async fn supervise(
    name: String,
    config: Arc<McpServerConfig>,
    manager: McpManager,
    shutdown: CancellationToken,
) {
    let (link_tx, link_rx) = watch::channel(Link::Down {
        reason: "the server is starting".into(),
    });
    let sup = Supervisor {
        name: name.clone(),
        config: config.clone(),
        manager: manager.clone(),
        link_tx,
        link_rx,
        shutdown: shutdown.clone(),
    };
    let mut backoff = INITIAL_BACKOFF;
    let mut restarts = 0u32;
    loop {
        let attempt = tokio::select! {
            () = shutdown.cancelled() => return,
            r = tokio::time::timeout(config.startup_timeout(), start(&name, &config)) => match r {
                Ok(r) => r,
                Err(_) => Err(format!(
                    "it did not start within {} s (startup_timeout_ms)",
                    config.startup_timeout().as_secs_f64()
                )),
            },
        };
        let reason = match attempt {
            Ok(started) => {
                let since = Instant::now();
                let reason = sup.serve(restarts, started).await;
                if since.elapsed() >= HEALTHY_AFTER {
                    backoff = INITIAL_BACKOFF;
                }
                match reason {
                    Some(reason) => reason,
                    None => return, // shutdown
                }
            }
            Err(reason) => reason,
        };
        restarts += 1;
        tracing::warn!(server = %name, %reason, retry_in_ms = backoff.as_millis() as u64, "MCP server unavailable; restarting");
        sup.link_tx.send_replace(Link::Down {
            reason: reason.clone(),
        });
        manager.set_status(&name, McpServerStatus::Failed { reason, restarts });
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// What a server's supervisor keeps across connections.
struct Supervisor {
    name: String,
    config: Arc<McpServerConfig>,
    manager: McpManager,
    /// What the server's tools see.
    link_tx: watch::Sender<Link>,
    link_rx: watch::Receiver<Link>,
    shutdown: CancellationToken,
}

impl Supervisor {
    /// Serves one connection until it ends; returns why (`None` on shutdown).
    async fn serve(&self, restarts: u32, started: Started) -> Option<String> {
        let (name, shutdown) = (&self.name, &self.shutdown);
        let Started {
            service,
            mut process,
            progress,
            mut list_changed,
        } = started;
        let conn = Arc::new(Connection {
            peer: service.peer().clone(),
            progress,
            closed: CancellationToken::new(),
            death: OnceLock::new(),
        });
        if let Err(reason) = self.relist(restarts, &conn).await {
            conn.die(reason.clone());
            return Some(reason);
        }
        self.link_tx.send_replace(Link::Up(conn.clone()));
        let service_ended = service.waiting();
        tokio::pin!(service_ended);
        let reason = loop {
            tokio::select! {
                () = shutdown.cancelled() => {
                    conn.die("the service is shutting down".into());
                    return None;
                }
                status = async {
                    match process.as_mut() {
                        Some(p) => p.child.wait().await,
                        None => std::future::pending().await,
                    }
                } => {
                    let Some(p) = process.as_mut() else { continue };
                    // Grandchildren may still hold the pipes open.
                    p.kill_group();
                    break p.describe_exit(status).await;
                }
                quit = &mut service_ended => {
                    let why = match quit {
                        Ok(reason) => format!("the connection closed ({reason:?})"),
                        Err(e) => format!("the connection task failed ({e})"),
                    };
                    match process.as_mut() {
                        // A stdio server that closed stdout: stop it and report
                        // its exit.
                        Some(p) => {
                            p.kill_group();
                            let status = p.child.wait().await;
                            break format!("{why}; {}", p.describe_exit(status).await);
                        }
                        None => break why,
                    }
                }
                Some(()) = list_changed.recv() => {
                        // One relist covers every notification queued so far.
                        while list_changed.try_recv().is_ok() {}
                    if let Err(reason) = self.relist(restarts, &conn).await {
                        tracing::warn!(server = %name, %reason, "relisting tools failed");
                    }
                }
            }
        };
        conn.die(reason.clone());
        Some(reason)
    }

    /// Lists the server's tools and registers them.
    async fn relist(&self, restarts: u32, conn: &Arc<Connection>) -> Result<(), String> {
        let (name, config, manager, link_rx) =
            (&self.name, &self.config, &self.manager, &self.link_rx);
        let listed = conn
            .peer
            .list_all_tools()
            .await
            .map_err(|e| format!("tools/list failed: {e}"))?;
        let mut tools: Vec<Arc<dyn Tool>> = Vec::with_capacity(listed.len());
        for t in &listed {
            match McpTool::new(name, config.clone(), t, link_rx.clone()) {
                Ok(tool) => tools.push(Arc::new(tool)),
                Err(reason) => {
                    tracing::warn!(server = %name, tool = %t.name, %reason, "MCP tool left out");
                }
            }
        }
        let count = manager.set_tools(name, tools);
        tracing::info!(server = %name, tools = count, "MCP server ready");
        manager.set_status(
            name,
            McpServerStatus::Ready {
                tools: count,
                restarts,
            },
        );
        Ok(())
    }
}

/// Starts the server and runs the MCP handshake.
async fn start(name: &str, config: &McpServerConfig) -> Result<Started, String> {
    let progress = ProgressRouter::default();
    // Unbounded: a unit per notification, drained by the connection's task,
    // which relists once for however many are queued.
    let (list_tx, list_rx) = mpsc::unbounded_channel();
    let handler = Handler {
        list_changed: list_tx,
    };
    match config.transport() {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut process = spawn(name, &command, &args, &env, cwd.as_deref())?;
            let stdout = process.child.stdout.take();
            let stdin = process.child.stdin.take();
            let (Some(stdout), Some(stdin)) = (stdout, stdin) else {
                return Err("the server's stdio pipes are missing".into());
            };
            let service = tokio::select! {
                r = handler.serve(Tap {
                    inner: IntoTransport::<RoleClient, std::io::Error, TransportAdapterAsyncRW>::into_transport((stdout, stdin)),
                    progress: progress.clone(),
                }) => r,
                status = process.child.wait() => {
                    return Err(process.describe_exit(status).await);
                }
            };
            match service {
                Ok(service) => Ok(Started {
                    service,
                    process: Some(process),
                    progress,
                    list_changed: list_rx,
                }),
                Err(e) => {
                    process.kill_group();
                    let status = process.child.wait().await;
                    Err(format!(
                        "the MCP handshake failed ({e}); {}",
                        process.describe_exit(status).await
                    ))
                }
            }
        }
        Transport::Http { url, headers } => {
            use rmcp::transport::StreamableHttpClientTransport;
            use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
            let mut custom = HashMap::new();
            for (k, v) in &headers {
                let name = http::HeaderName::try_from(k.as_str())
                    .map_err(|e| format!("header name '{k}': {e}"))?;
                let value = http::HeaderValue::try_from(v.as_str())
                    .map_err(|e| format!("header '{k}' value: {e}"))?;
                custom.insert(name, value);
            }
            let transport = StreamableHttpClientTransport::from_config(
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom),
            );
            let service = handler
                .serve(Tap {
                    inner: transport,
                    progress: progress.clone(),
                })
                .await
                .map_err(|e| format!("cannot connect to {url}: {e}"))?;
            Ok(Started {
                service,
                process: None,
                progress,
                list_changed: list_rx,
            })
        }
    }
}

/// Spawns a stdio server in its own process group with stdin/stdout piped
/// for MCP, stderr captured, and only [`super::INHERITED_ENV`] plus its
/// configured `env` in its environment.
fn spawn(
    name: &str,
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: Option<&std::path::Path>,
) -> Result<Process, String> {
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(args)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    for key in super::INHERITED_ENV {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    cmd.envs(env);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start '{command}': {e}"))?;
    let pgid = child.id().and_then(|id| i32::try_from(id).ok());
    let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
    let stderr_done = child.stderr.take().map(|stderr| {
        let tail = stderr_tail.clone();
        let server = name.to_string();
        tokio::spawn(read_stderr(server, stderr, tail))
    });
    Ok(Process {
        child,
        pgid,
        stderr_tail,
        stderr_done,
    })
}

/// Reads a server's stderr to its end, keeping the last
/// [`STDERR_TAIL_LINES`] lines of at most [`STDERR_LINE_BYTES`] each. It
/// never stops early (invalid UTF-8, a line without end): a server blocked
/// on a full stderr pipe would hang its calls.
async fn read_stderr(
    server: String,
    stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<VecDeque<String>>>,
) {
    let mut reader = BufReader::new(stderr);
    let mut line: Vec<u8> = Vec::new();
    let mut cut = false;
    loop {
        // (bytes consumed, a line ended, the stream ended)
        let (consumed, newline, ended) = match reader.fill_buf().await {
            Ok([]) | Err(_) => (0, false, true),
            Ok(buf) => match buf.iter().position(|&b| b == b'\n') {
                Some(at) => {
                    keep(&mut line, &mut cut, &buf[..at]);
                    (at + 1, true, false)
                }
                None => {
                    keep(&mut line, &mut cut, buf);
                    (buf.len(), false, false)
                }
            },
        };
        reader.consume(consumed);
        if newline || (ended && !line.is_empty()) {
            let mut text = String::from_utf8_lossy(&line).into_owned();
            if cut {
                text.push('…');
            }
            tracing::debug!(server = %server, "stderr: {text}");
            let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
            if tail.len() == STDERR_TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(text);
            line.clear();
            cut = false;
        }
        if ended {
            return;
        }
    }
}

/// Appends `bytes` to `line` up to [`STDERR_LINE_BYTES`]; notes a cut.
fn keep(line: &mut Vec<u8>, cut: &mut bool, bytes: &[u8]) {
    let room = STDERR_LINE_BYTES.saturating_sub(line.len());
    line.extend_from_slice(&bytes[..bytes.len().min(room)]);
    *cut |= bytes.len() > room;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stderr_tail_keeps_last_lines_bounded_and_survives_bad_utf8() {
        // 12 lines, one of invalid UTF-8, one too long, the last without a
        // newline.
        let script = r#"for i in 1 2 3 4 5 6 7 8 9; do echo "line $i" >&2; done
printf '\377\376 bad\n' >&2
head -c 2000 /dev/zero | tr '\0' x >&2; echo >&2
printf 'last' >&2"#;
        let mut process = spawn(
            "t",
            "sh",
            &["-c".into(), script.into()],
            &BTreeMap::new(),
            None,
        )
        .unwrap();
        let status = process.child.wait().await;
        let described = process.describe_exit(status).await;
        let tail: Vec<String> = process
            .stderr_tail
            .lock()
            .unwrap()
            .iter()
            .cloned()
            .collect();
        assert_eq!(tail.len(), STDERR_TAIL_LINES);
        assert_eq!(tail[0], "line 3");
        assert_eq!(tail[7], "\u{fffd}\u{fffd} bad");
        assert_eq!(tail[8], format!("{}…", "x".repeat(STDERR_LINE_BYTES)));
        assert_eq!(tail[9], "last");
        assert!(
            described.starts_with(
                "the server process exited (exit status 0); last stderr lines:\nline 3\n"
            ),
            "{described}"
        );
    }

    #[tokio::test]
    async fn progress_that_arrives_before_its_subscriber_is_kept() {
        let router = ProgressRouter::default();
        let token = ProgressToken(rmcp::model::NumberOrString::Number(7));
        let other = ProgressToken(rmcp::model::NumberOrString::Number(8));
        router.route(ProgressNotificationParam::new(token.clone(), 1.0));
        router.route(ProgressNotificationParam::new(other.clone(), 5.0));
        let mut sub = router.subscribe(token.clone());
        router.route(ProgressNotificationParam::new(token.clone(), 2.0));
        assert_eq!(sub.recv().await.unwrap().progress, 1.0);
        assert_eq!(sub.recv().await.unwrap().progress, 2.0);
        drop(sub);
        // Unsubscribed: its later progress waits (bounded) like any other.
        router.route(ProgressNotificationParam::new(token, 3.0));
        let mut sub8 = router.subscribe(other);
        assert_eq!(sub8.try_recv().unwrap().progress, 5.0);
        assert!(sub8.try_recv().is_none());
    }
}
