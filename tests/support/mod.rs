//! Test harness: the real service stack on `127.0.0.1:0` over a temp
//! workspace, with a connected tonic client. Shuts down on drop.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use toolsched::api::convert::{json_to_struct, struct_to_json};
use toolsched::api::pb;
use toolsched::api::pb::tool_scheduler_client::ToolSchedulerClient;
use toolsched::api::{ServerOptions, serve};
use toolsched::scheduler::SchedulerConfig;

pub use pb::schedule_calls_response::Event;
pub use pb::tool_call_update::State;

/// A running server and a client connected to it.
pub struct TestServer {
    pub addr: SocketAddr,
    pub client: ToolSchedulerClient<Channel>,
    pub workspace: tempfile::TempDir,
    /// The MCP servers' manager, when started with [`TestServer::with_mcp`].
    pub mcp: Option<toolsched::tools::mcp::McpManager>,
    /// The scheduler's metrics (what `/metrics` renders).
    pub metrics: std::sync::Arc<toolsched::scheduler::Metrics>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    /// Cancels every batch of `session` (the Cancel RPC must succeed).
    pub async fn cancel_session(&self, session: &str) {
        self.client
            .clone()
            .cancel(pb::CancelRequest {
                session_id: session.into(),
                batch_id: None,
                reason: "the test is done with it".into(),
            })
            .await
            .expect("cancel");
    }

    /// A server with the default configuration.
    pub async fn start() -> Self {
        Self::with_config(SchedulerConfig::default()).await
    }

    /// A server with `config` over a fresh temp workspace.
    pub async fn with_config(config: SchedulerConfig) -> Self {
        Self::with_options(config, ServerOptions::default()).await
    }

    pub async fn with_options(config: SchedulerConfig, options: ServerOptions) -> Self {
        Self::with_policy(config, options, toolsched::policy::PolicyHandle::default()).await
    }

    /// A server deciding with `policy` (e.g. from `policy::watch_file`).
    pub async fn with_policy(
        config: SchedulerConfig,
        options: ServerOptions,
        policy: toolsched::policy::PolicyHandle,
    ) -> Self {
        Self::launch(config, options, policy, Default::default()).await
    }

    /// A server with the MCP servers `servers` (name → config) configured,
    /// started once each has finished its first connection attempt.
    pub async fn with_mcp(
        config: SchedulerConfig,
        servers: std::collections::BTreeMap<String, toolsched::tools::mcp::McpServerConfig>,
    ) -> Self {
        let policy = toolsched::policy::PolicyHandle::default();
        Self::launch(config, ServerOptions::default(), policy, servers).await
    }

    /// [`TestServer::with_mcp`] with transport `options` (e.g. tokens).
    pub async fn with_mcp_options(
        config: SchedulerConfig,
        options: ServerOptions,
        servers: std::collections::BTreeMap<String, toolsched::tools::mcp::McpServerConfig>,
    ) -> Self {
        let policy = toolsched::policy::PolicyHandle::default();
        Self::launch(config, options, policy, servers).await
    }

    async fn launch(
        config: SchedulerConfig,
        options: ServerOptions,
        policy: toolsched::policy::PolicyHandle,
        servers: std::collections::BTreeMap<String, toolsched::tools::mcp::McpServerConfig>,
    ) -> Self {
        let workspace = tempfile::tempdir().expect("temp workspace");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let shutdown = CancellationToken::new();
        let (scheduler, mcp) = toolsched::build_scheduler_with_mcp(
            workspace.path(),
            config,
            policy,
            &servers,
            shutdown.clone(),
        )
        .await
        .expect("scheduler");
        let metrics = scheduler.metrics().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            serve(listener, scheduler, shutdown, options, async {
                let _ = stopped.await;
            })
            .await
            .expect("server ran");
        });
        let client = ToolSchedulerClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
        Self {
            addr,
            client,
            workspace,
            mcp: (!servers.is_empty()).then_some(mcp),
            metrics,
            stop: Some(stop),
            server: Some(server),
        }
    }

    /// Path of `rel` inside the workspace.
    pub fn path(&self, rel: &str) -> std::path::PathBuf {
        self.workspace.path().join(rel)
    }

    /// Starts a batch; returns the open stream.
    pub async fn schedule(
        &self,
        session: &str,
        calls: Vec<pb::FunctionCall>,
    ) -> tonic::Streaming<pb::ScheduleCallsResponse> {
        self.schedule_with(request(session, calls)).await
    }

    pub async fn schedule_with(
        &self,
        req: pb::ScheduleCallsRequest,
    ) -> tonic::Streaming<pb::ScheduleCallsResponse> {
        self.client
            .clone()
            .schedule_calls(req)
            .await
            .expect("schedule_calls accepted")
            .into_inner()
    }

    /// Starts a batch of one call that asks for approval and reads its
    /// stream up to the prompt: (the open stream, the events so far, the
    /// prompt).
    pub async fn prompt(
        &self,
        session: &str,
        call: pb::FunctionCall,
    ) -> (
        tonic::Streaming<pb::ScheduleCallsResponse>,
        Vec<Event>,
        pb::AwaitingApproval,
    ) {
        let call_id = call.id.clone();
        let mut stream = self.schedule(session, vec![call]).await;
        let mut seen = Vec::new();
        let prompt = await_prompt(&mut stream, &mut seen, &call_id).await;
        (stream, seen, prompt)
    }

    /// Runs a batch to completion and returns all its events.
    pub async fn run(&self, session: &str, calls: Vec<pb::FunctionCall>) -> Vec<Event> {
        collect(self.schedule(session, calls).await).await
    }

    /// Confirms a prompt.
    pub async fn confirm(
        &self,
        session: &str,
        call_id: &str,
        correlation_id: &str,
        outcome: pb::ConfirmationOutcome,
        new_content: Option<&str>,
    ) -> Result<(), tonic::Status> {
        self.client
            .clone()
            .confirm(pb::ConfirmRequest {
                session_id: session.into(),
                call_id: call_id.into(),
                correlation_id: correlation_id.into(),
                outcome: outcome as i32,
                new_content: new_content.map(Into::into),
            })
            .await
            .map(|_| ())
    }

    /// A client of the server's `grpc.health.v1.Health` service, on its own
    /// connection (no bearer token: health stays open for probes).
    pub async fn health(
        &self,
    ) -> tonic_health::pb::health_client::HealthClient<tonic::transport::Channel> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", self.addr))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        tonic_health::pb::health_client::HealthClient::new(channel)
    }

    /// Sends the shutdown signal (like SIGTERM) without waiting.
    pub fn begin_shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Stops the server gracefully and waits for it.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.expect("server task did not panic");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

/// A ScheduleCalls request (interactive).
pub fn request(session: &str, calls: Vec<pb::FunctionCall>) -> pb::ScheduleCallsRequest {
    pb::ScheduleCallsRequest {
        session_id: session.into(),
        calls,
        approval_mode: 0,
        interactive: Some(true),
        sandbox_level: 0,
        ..Default::default()
    }
}

/// A function call with JSON arguments.
pub fn call(id: &str, name: &str, args: Value) -> pb::FunctionCall {
    let Value::Object(map) = args else {
        panic!("args must be a JSON object");
    };
    pb::FunctionCall {
        id: id.into(),
        name: name.into(),
        args: Some(json_to_struct(&map)),
        wait_for_previous: false,
        ..Default::default()
    }
}

/// Every event until the stream ends; panics if it ends with an error or
/// takes longer than a minute (a hung test should fail, not hang CI).
pub async fn collect(mut stream: tonic::Streaming<pb::ScheduleCallsResponse>) -> Vec<Event> {
    let mut events = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(60), stream.message()).await {
            Ok(Ok(Some(msg))) => events.push(msg.event.expect("event set")),
            Ok(Ok(None)) => return events,
            Ok(Err(status)) => panic!("stream failed: {status:?}; events so far: {events:?}"),
            Err(_) => panic!("stream did not end within 60 s; events so far: {events:?}"),
        }
    }
}

/// Reads events until `pred` matches one; returns it (and keeps the stream).
pub async fn next_matching(
    stream: &mut tonic::Streaming<pb::ScheduleCallsResponse>,
    seen: &mut Vec<Event>,
    pred: impl Fn(&Event) -> bool,
) -> Event {
    loop {
        let msg = match tokio::time::timeout(Duration::from_secs(60), stream.message()).await {
            Ok(Ok(Some(msg))) => msg,
            Ok(Ok(None)) => panic!("stream ended before the event; events seen: {seen:?}"),
            Ok(Err(status)) => panic!("stream failed: {status:?}; events seen: {seen:?}"),
            Err(_) => panic!("no matching event within 60 s; events seen: {seen:?}"),
        };
        let event = msg.event.expect("event set");
        seen.push(event.clone());
        if pred(&event) {
            return event;
        }
    }
}

/// The AwaitingApproval of `call_id`, read from the stream.
pub async fn await_prompt(
    stream: &mut tonic::Streaming<pb::ScheduleCallsResponse>,
    seen: &mut Vec<Event>,
    call_id: &str,
) -> pb::AwaitingApproval {
    let ev = next_matching(stream, seen, |e| {
        matches!(e, Event::CallUpdate(u) if u.call_id == call_id
            && matches!(u.state, Some(State::AwaitingApproval(_))))
    })
    .await;
    match ev {
        Event::CallUpdate(pb::ToolCallUpdate {
            state: Some(State::AwaitingApproval(a)),
            ..
        }) => a,
        _ => unreachable!(),
    }
}

/// The AwaitingApproval of each of `call_ids`, read from the stream in
/// whatever order they come: the prompts of one wave are prepared in
/// parallel (`spawn_blocking`), so their order is not fixed, and waiting
/// for them one by one would skip a prompt that came first.
pub async fn await_prompts<const N: usize>(
    stream: &mut tonic::Streaming<pb::ScheduleCallsResponse>,
    seen: &mut Vec<Event>,
    call_ids: [&str; N],
) -> [pb::AwaitingApproval; N] {
    let mut prompts: [Option<pb::AwaitingApproval>; N] = std::array::from_fn(|_| None);
    while prompts.iter().any(Option::is_none) {
        let ev = next_matching(stream, seen, |e| {
            matches!(e, Event::CallUpdate(u) if call_ids.contains(&u.call_id.as_str())
                && matches!(u.state, Some(State::AwaitingApproval(_))))
        })
        .await;
        let Event::CallUpdate(pb::ToolCallUpdate {
            call_id,
            state: Some(State::AwaitingApproval(a)),
            ..
        }) = ev
        else {
            unreachable!()
        };
        let i = call_ids
            .iter()
            .position(|c| *c == call_id)
            .expect("matched");
        assert!(
            prompts[i].replace(a).is_none(),
            "{call_id} prompted twice: {seen:?}"
        );
    }
    prompts.map(|p| p.expect("every prompt read"))
}

/// Short name of a state.
pub fn state_name(state: &State) -> &'static str {
    match state {
        State::Validating(_) => "validating",
        State::Scheduled(_) => "scheduled",
        State::AwaitingApproval(_) => "awaiting_approval",
        State::Executing(_) => "executing",
        State::Success(_) => "success",
        State::Error(_) => "error",
        State::Cancelled(_) => "cancelled",
    }
}

/// The states `call_id` went through, with repeated Executing progress
/// updates folded into one.
pub fn states(events: &[Event], call_id: &str) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for e in events {
        if let Event::CallUpdate(u) = e
            && u.call_id == call_id
            && let Some(s) = &u.state
        {
            let name = state_name(s);
            if name == "executing" && out.last() == Some(&"executing") {
                continue;
            }
            out.push(name);
        }
    }
    out
}

/// The terminal state of `call_id`.
pub fn terminal(events: &[Event], call_id: &str) -> State {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            Event::CallUpdate(u) if u.call_id == call_id => u.state.clone(),
            _ => None,
        })
        .expect("call has a state")
}

/// The BatchCompleted event (the last one).
pub fn completed(events: &[Event]) -> pb::BatchCompleted {
    match events.last() {
        Some(Event::BatchCompleted(c)) => c.clone(),
        other => panic!("last event is not BatchCompleted: {other:?}"),
    }
}

/// A function response's JSON `response` object.
pub fn response_json(r: &pb::FunctionResponse) -> serde_json::Map<String, Value> {
    struct_to_json(r.response.clone().unwrap_or_default())
}

/// The arguments each Scheduled event of `call_id` carried (`None` when the
/// call runs as the model proposed it).
pub fn scheduled_args(
    events: &[Event],
    call_id: &str,
) -> Vec<Option<serde_json::Map<String, Value>>> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::CallUpdate(u) if u.call_id == call_id => match &u.state {
                Some(State::Scheduled(s)) => Some(s.args.clone().map(struct_to_json)),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The function response object of a successful call.
pub fn success_response(events: &[Event], call_id: &str) -> serde_json::Map<String, Value> {
    match terminal(events, call_id) {
        State::Success(s) => response_json(s.response.as_ref().expect("response")),
        other => panic!("{call_id} did not succeed: {other:?}"),
    }
}

/// The `output` string of a successful call.
pub fn success_output(events: &[Event], call_id: &str) -> String {
    match terminal(events, call_id) {
        State::Success(s) => response_json(s.response.as_ref().expect("response"))["output"]
            .as_str()
            .expect("output is a string")
            .to_string(),
        other => panic!("{call_id} did not succeed: {other:?}"),
    }
}

/// The error (type, message) of a failed call.
pub fn error_of(events: &[Event], call_id: &str) -> (pb::ErrorType, String) {
    match terminal(events, call_id) {
        State::Error(e) => (
            pb::ErrorType::try_from(e.r#type).expect("known error type"),
            e.message,
        ),
        other => panic!("{call_id} did not fail: {other:?}"),
    }
}

/// A tool installed by `tests/setup.sh` into `.venv/bin`. Panics with how to
/// install it when missing: a test that cannot run says so, loudly.
pub fn venv_tool(name: &str) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".venv/bin")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run `bash tests/setup.sh` first (it installs the test tools)",
        path.display()
    );
    path
}

/// Reads `stream` (into `seen`) until call `call_id` is Executing with its
/// command's pid, which is its process group; returns it.
pub async fn until_pid(
    stream: &mut tonic::Streaming<pb::ScheduleCallsResponse>,
    seen: &mut Vec<Event>,
    call_id: &str,
) -> i32 {
    let executing = next_matching(stream, seen, |e| {
        matches!(e, Event::CallUpdate(u) if u.call_id == call_id
            && matches!(&u.state, Some(State::Executing(x)) if x.pid.is_some()))
    })
    .await;
    match executing {
        Event::CallUpdate(pb::ToolCallUpdate {
            state: Some(State::Executing(pb::Executing { pid: Some(pid), .. })),
            ..
        }) => pid as i32,
        other => unreachable!("{other:?}"),
    }
}

/// Makes a FIFO at `path` (coreutils' `mkfifo`): a command that reads it
/// waits until the test writes.
pub fn mkfifo(path: &std::path::Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo (coreutils) runs");
    assert!(made.success(), "mkfifo {}", path.display());
}

/// Waits (bounded, 10 s) until `check` holds, for what happens behind a
/// call's end (a command's effect, its worker's exit and cleanup); `what`
/// says what never happened.
pub async fn eventually(what: impl Fn() -> String, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(std::time::Instant::now() < deadline, "{}", what());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits (bounded, 10 s) until `path` holds `text`: a command's effect.
pub async fn wait_for_file(path: &std::path::Path, text: &str) {
    eventually(
        || format!("{} never held {text:?}", path.display()),
        || std::fs::read_to_string(path).unwrap_or_default() == text,
    )
    .await;
}

/// Command lines of the processes whose command line starts with `prefix`
/// (a test's unique marker), from /proc: what a test left running.
pub fn running_with_cmdline(prefix: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| c.starts_with(prefix.as_bytes()))
        .map(|c| String::from_utf8_lossy(&c).into_owned())
        .collect()
}

/// Pids of live (not zombie) processes in process group `pgid`, from /proc.
pub fn live_group_members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the parenthesised command name: state ppid pgrp …
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string() {
            out.push(pid);
        }
    }
    out
}

/// Waits (bounded, 10 s) until process group `pgid` has no live member.
/// A SIGKILL is delivered asynchronously, so "gone" is an event to wait for.
pub async fn wait_group_gone(pgid: i32) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if live_group_members(pgid).is_empty() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The built `toolsched` binary, running as a child process.
pub struct Binary {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    /// The metrics endpoint's address, when started with --metrics-listen.
    pub metrics_addr: Option<SocketAddr>,
    pub stderr_lines: std::sync::mpsc::Receiver<String>,
}

impl Binary {
    /// Starts `toolsched serve --listen 127.0.0.1:0 --log-format json` over
    /// `workspace` with `extra` flags, and waits for its "serving" log line,
    /// which carries the bound address.
    pub fn start(workspace: &std::path::Path, extra: &[&str]) -> Self {
        Self::start_with_env(workspace, extra, &[])
    }

    /// Like [`Binary::start`], with the environment variables `env` set and
    /// none of the `OTEL_*` ones this process has (the test says where
    /// traces go).
    pub fn start_with_env(
        workspace: &std::path::Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let program = std::path::Path::new(env!("CARGO_BIN_EXE_toolsched"));
        Self::start_via(&[], program, workspace, extra, env)
    }

    /// Like [`Binary::start_with_env`], running `program` through
    /// `launcher` (e.g. `setpriv` and its options) when it is not empty.
    pub fn start_via(
        launcher: &[&str],
        program: &std::path::Path,
        workspace: &std::path::Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        use std::io::BufRead;
        let mut command = match launcher.split_first() {
            Some((first, rest)) => {
                let mut c = std::process::Command::new(first);
                c.args(rest).arg(program);
                c
            }
            None => std::process::Command::new(program),
        };
        for (var, _) in std::env::vars_os() {
            if var.to_string_lossy().starts_with("OTEL_") {
                command.env_remove(var);
            }
        }
        let mut child = command
            .envs(env.iter().copied())
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--log-format",
                "json",
                "--workspace",
            ])
            .arg(workspace)
            .args(extra)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start toolsched binary");
        let stderr = child.stderr.take().expect("stderr piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut metrics_addr = None;
        let addr = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("toolsched logged 'toolsched serving' within 60 s");
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            // `--log-format json` puts the fields at the top level.
            if v["message"] == "metrics at /metrics" {
                metrics_addr = v["listen"].as_str().and_then(|a| a.parse().ok());
            }
            if v["message"] == "toolsched serving" {
                break v["listen"]
                    .as_str()
                    .expect("listen field")
                    .parse()
                    .expect("socket address");
            }
        };
        Self {
            child,
            addr,
            metrics_addr,
            stderr_lines: rx,
        }
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        self.child.wait().expect("wait for toolsched")
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config whose sessions start in yolo mode (every call allowed unless a
/// rule denies it), with the test default sandbox.
pub fn yolo() -> SchedulerConfig {
    SchedulerConfig {
        default_mode: toolsched::policy::ApprovalMode::Yolo,
        ..SchedulerConfig::default()
    }
}

/// [`yolo`] with commands confined at the default level (workspace_write).
pub fn yolo_confined() -> SchedulerConfig {
    SchedulerConfig {
        sandbox: toolsched::sandbox::SandboxConfig::default(),
        ..yolo()
    }
}

/// Whether the kernel enforces sandbox `level`; prints why not, loudly, so
/// that a test returning early because of it never passes silently.
pub fn kernel_enforces(level: toolsched::sandbox::SandboxLevel) -> bool {
    let probe = toolsched::sandbox::probe::probe(level);
    if probe.missing.is_empty() {
        return true;
    }
    eprintln!(
        "\n*** the kernel cannot enforce sandbox level {level}: missing {} ***\n",
        probe.missing.join(", ")
    );
    false
}

/// How [`run_worker_process`] starts the worker besides the fixed options.
#[derive(Default)]
pub struct WorkerRun<'a> {
    /// Shell run before the worker is exec'd, e.g. `ulimit -n 64 && `.
    pub prelude: &'a str,
    /// More redirections on the exec, e.g. `4<"$PROTECTED"`.
    pub redirects: &'a str,
    /// Environment the prelude and redirections may use.
    pub env: Vec<(&'a str, std::ffi::OsString)>,
    /// Worker options before `--`, e.g. `--protected-fd 4`.
    pub extra: Vec<String>,
    /// The level (`workspace_write` when `None`).
    pub level: Option<&'a str>,
    /// The program and its arguments, instead of `bash -c COMMAND`.
    pub program: Option<Vec<String>>,
}

/// Runs the sandbox worker binary (`toolsched sandbox-exec`) directly at
/// level `workspace_write` with small fixed limits, `command` under
/// `bash -c` in `workspace`. bash opens the status report on fd 3 and execs
/// the worker with it. Returns (exit status, stdout+stderr, status report).
pub fn run_worker_process(
    workspace: &std::path::Path,
    run: WorkerRun<'_>,
    command: &str,
) -> (Option<i32>, String, String) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let status_file = tmp.path().join("status");
    let private_tmp = tmp.path().join("tmp");
    std::fs::create_dir(&private_tmp).expect("private tmp");
    let script = format!("{}exec \"$@\" 3>\"$STATUS\" {}", run.prelude, run.redirects);
    let mut args: Vec<String> = vec![
        "-c".into(),
        script,
        "bash".into(),
        env!("CARGO_BIN_EXE_toolsched").into(),
        "sandbox-exec".into(),
        "--level".into(),
        run.level.unwrap_or("workspace_write").into(),
        "--workspace".into(),
        workspace.display().to_string(),
        "--tmp".into(),
        private_tmp.display().to_string(),
        "--cpu-secs".into(),
        "10".into(),
        "--address-space-bytes".into(),
        (4u64 << 30).to_string(),
        "--file-size-bytes".into(),
        (1u64 << 20).to_string(),
        "--processes".into(),
        "64".into(),
        "--open-files".into(),
        "256".into(),
        "--kill-grace-ms".into(),
        "200".into(),
    ];
    args.extend(run.extra);
    args.push("--".into());
    match run.program {
        Some(program) => args.extend(program),
        None => args.extend(["bash".into(), "-c".into(), command.into()]),
    }
    let out = std::process::Command::new("bash")
        .args(&args)
        .current_dir(workspace)
        .env("STATUS", &status_file)
        .envs(run.env)
        .output()
        .expect("run the worker");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let status = std::fs::read_to_string(&status_file).unwrap_or_default();
    (out.status.code(), text, status)
}

/// `message` with `authorization: Bearer <token>` metadata.
pub fn with_token<T>(token: &str, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("metadata value"),
    );
    request
}

/// How a test runs a server as a non-root user: as root, through
/// `setpriv` (util-linux) as `nobody` (uid and gid 65534; the files it
/// needs must be theirs); otherwise as the user running the tests. Fails
/// (never skips) when root has no `setpriv`.
pub fn as_nobody() -> &'static [&'static str] {
    if !rustix::process::geteuid().is_root() {
        return &[];
    }
    assert!(
        std::process::Command::new("setpriv")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "this test runs the server as nobody with setpriv (util-linux), which is missing"
    );
    &[
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ]
}
