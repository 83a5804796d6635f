//! `toolsched call`: a small client for manual use. Sends one batch, prints
//! every event as a line, asks the person at the terminal to answer approval
//! prompts (or approves them all once with `--yes`), and prints the function
//! responses as JSON at the end.

use std::io::{BufRead, Write};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;
use toolsched::api::convert::{json_to_struct, struct_to_json};
use toolsched::api::pb::{self, ConfirmationOutcome as O, tool_call_update::State};
use toolsched::config::CallArgs;
use toolsched::policy::ApprovalMode;

pub async fn run(args: CallArgs) -> anyhow::Result<()> {
    let mut calls = Vec::new();
    for (i, pair) in args.calls.chunks(2).enumerate() {
        let [name, json] = pair else {
            bail!("calls come in pairs: TOOL ARGS_JSON (the last tool has no arguments)");
        };
        let parsed: Value = serde_json::from_str(json)
            .with_context(|| format!("arguments of {name} are not JSON: {json}"))?;
        let Value::Object(map) = parsed else {
            bail!("arguments of {name} must be a JSON object, got {json}");
        };
        calls.push(pb::FunctionCall {
            id: format!("call-{}", i + 1),
            name: name.clone(),
            args: Some(json_to_struct(&map)),
            wait_for_previous: false,
            client_initiated: false,
        });
    }
    let mode = match args.approval_mode {
        None => pb::ApprovalMode::Unspecified,
        Some(ApprovalMode::Default) => pb::ApprovalMode::Default,
        Some(ApprovalMode::AutoEdit) => pb::ApprovalMode::AutoEdit,
        Some(ApprovalMode::Yolo) => pb::ApprovalMode::Yolo,
        Some(ApprovalMode::Plan) => pb::ApprovalMode::Plan,
    };
    let mut client = connect(&args).await?;
    let mut stream = client
        .schedule_calls(pb::ScheduleCallsRequest {
            session_id: args.session.clone(),
            calls,
            approval_mode: mode as i32,
            interactive: Some(true),
            sandbox_level: 0,
            disconnect_grace_secs: args.disconnect_grace_secs,
            workspace: args.workspace.clone().unwrap_or_default(),
            ..Default::default()
        })
        .await?
        .into_inner();
    // Where to re-attach from if the connection drops: the batch and the
    // last sequence printed.
    let mut batch_id: Option<String> = None;
    let mut last_sequence = 0u64;
    let mut completed = false;
    let mut failed = 0usize;
    let mut total = 0usize;
    loop {
        let event = match stream.message().await {
            Ok(Some(event)) => event,
            Ok(None) if completed => break,
            // The connection dropped (or a proxy ended the stream early):
            // the batch may still run on the server; read on from where we
            // were.
            lost => {
                let Some(batch) = batch_id.clone() else {
                    lost?;
                    bail!("the stream ended before the batch was accepted");
                };
                let why = lost
                    .err()
                    .map_or("stream ended early".into(), |e| e.to_string());
                let (c, s) = reattach(&args, &batch, last_sequence, &why).await?;
                client = c;
                stream = s;
                continue;
            }
        };
        if event.sequence <= last_sequence {
            continue; // already printed before a re-attach
        }
        last_sequence = event.sequence;
        use pb::schedule_calls_response::Event;
        match event.event {
            Some(Event::BatchAccepted(a)) => {
                batch_id = Some(a.batch_id.clone());
                println!(
                    "batch {} accepted{}",
                    a.batch_id,
                    if a.queued { " (queued)" } else { "" }
                )
            }
            Some(Event::BatchStarted(_)) => println!("batch started"),
            Some(Event::CallUpdate(u)) => {
                let Some(state) = u.state else { continue };
                match state {
                    State::Executing(x) if !x.output_chunk.is_empty() => {
                        print!("{}", x.output_chunk);
                    }
                    // Progress of a running call, not a second Executing.
                    State::Executing(pb::Executing { pid: Some(pid), .. }) => {
                        println!("{} {}: running (pid {pid})", u.call_id, u.tool_name);
                    }
                    State::Executing(x) if x.progress.is_some() || !x.message.is_empty() => {
                        let percent = x.percent.map(|p| format!(" {p:.0}%")).unwrap_or_default();
                        println!(
                            "{} {}: progress{percent} {}",
                            u.call_id, u.tool_name, x.message
                        );
                    }
                    State::AwaitingApproval(a) => {
                        println!(
                            "{} {}: awaiting approval ({})",
                            u.call_id, u.tool_name, a.reason
                        );
                        print_details(&a);
                        let outcome = if args.yes {
                            O::ProceedOnce
                        } else {
                            tokio::task::spawn_blocking(ask).await??
                        };
                        client
                            .confirm(pb::ConfirmRequest {
                                session_id: args.session.clone(),
                                call_id: u.call_id.clone(),
                                correlation_id: a.correlation_id,
                                outcome: outcome as i32,
                                new_content: None,
                            })
                            .await?;
                    }
                    State::Error(e) => {
                        failed += 1;
                        println!("{} {}: error: {}", u.call_id, u.tool_name, e.message)
                    }
                    State::Cancelled(c) => {
                        failed += 1;
                        println!("{} {}: cancelled: {}", u.call_id, u.tool_name, c.reason)
                    }
                    other => println!("{} {}: {}", u.call_id, u.tool_name, state_name(&other)),
                }
            }
            Some(Event::BatchCompleted(done)) => {
                completed = true;
                total = done.responses.len();
                let responses: Vec<Value> = done
                    .responses
                    .into_iter()
                    .map(|r| {
                        serde_json::json!({
                            "id": r.id,
                            "name": r.name,
                            "response": struct_to_json(r.response.unwrap_or_default()),
                        })
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&responses)?);
            }
            None => {}
        }
    }
    // A script can tell: the exit status is non-zero unless every call
    // succeeded.
    if failed > 0 {
        bail!("{failed} of {total} calls did not succeed");
    }
    Ok(())
}

/// Adds the bearer token to each request.
type Auth = Box<dyn FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Send>;
type Client = pb::tool_scheduler_client::ToolSchedulerClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Auth>,
>;

/// How long the client keeps trying to re-attach after its connection
/// dropped, at least: the batch's grace may be longer (then that).
const REATTACH_WINDOW: Duration = Duration::from_secs(10);
/// Wait between two re-attach attempts.
const REATTACH_BACKOFF: Duration = Duration::from_millis(250);

/// The address as an endpoint, over TLS when a CA or client certificate is
/// given (the scheme becomes https).
fn endpoint(args: &CallArgs) -> anyhow::Result<tonic::transport::Endpoint> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
    };
    if args.ca_cert.is_none() && args.cert.is_none() {
        return Ok(tonic::transport::Endpoint::from_shared(args.addr.clone())?);
    }
    let addr = match args.addr.strip_prefix("http://") {
        Some(rest) => format!("https://{rest}"),
        None => args.addr.clone(),
    };
    let mut tls = tonic::transport::ClientTlsConfig::new();
    if let Some(ca) = &args.ca_cert {
        tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(read(ca)?));
    }
    if let (Some(cert), Some(key)) = (&args.cert, &args.key) {
        tls = tls.identity(tonic::transport::Identity::from_pem(
            read(cert)?,
            read(key)?,
        ));
    }
    Ok(tonic::transport::Endpoint::from_shared(addr)?.tls_config(tls)?)
}

async fn connect(args: &CallArgs) -> anyhow::Result<Client> {
    let channel = endpoint(args)?.connect().await.with_context(|| {
        format!(
            "cannot connect to {}: is `toolsched serve` running there? (set --addr)",
            args.addr
        )
    })?;
    let token = args.auth_token.clone();
    let auth: Auth = Box::new(move |mut req: tonic::Request<()>| {
        if let Some(t) = &token {
            let value = format!("Bearer {t}")
                .parse()
                .map_err(|_| tonic::Status::invalid_argument("token is not valid metadata"))?;
            req.metadata_mut().insert("authorization", value);
        }
        Ok(req)
    });
    Ok(pb::tool_scheduler_client::ToolSchedulerClient::with_interceptor(channel, auth))
}

/// Re-attaches to `batch` after `after` on a new connection, retrying for
/// the batch's grace (at least [`REATTACH_WINDOW`]).
async fn reattach(
    args: &CallArgs,
    batch: &str,
    after: u64,
    why: &str,
) -> anyhow::Result<(Client, tonic::Streaming<pb::ScheduleCallsResponse>)> {
    println!("connection lost ({why}); re-attaching to batch {batch} after sequence {after}");
    let window = REATTACH_WINDOW.max(Duration::from_secs(
        args.disconnect_grace_secs.unwrap_or(0).into(),
    ));
    let deadline = tokio::time::Instant::now() + window;
    loop {
        let attempt = async {
            let mut client = connect(args).await?;
            let stream = client
                .watch_batch(pb::WatchBatchRequest {
                    session_id: args.session.clone(),
                    batch_id: batch.to_string(),
                    after_sequence: after,
                })
                .await?
                .into_inner();
            anyhow::Ok((client, stream))
        };
        match attempt.await {
            Ok(attached) => {
                println!("re-attached to batch {batch}");
                return Ok(attached);
            }
            Err(e) if tokio::time::Instant::now() + REATTACH_BACKOFF < deadline => {
                tracing::debug!(error = %e, "re-attach failed; retrying");
                tokio::time::sleep(REATTACH_BACKOFF).await;
            }
            Err(e) => {
                return Err(e.context(format!(
                    "could not re-attach to batch {batch} within {} s",
                    window.as_secs()
                )));
            }
        }
    }
}

fn state_name(s: &State) -> &'static str {
    match s {
        State::Validating(_) => "validating",
        State::Scheduled(_) => "scheduled",
        State::AwaitingApproval(_) => "awaiting approval",
        State::Executing(_) => "executing",
        State::Success(_) => "success",
        State::Error(_) => "error",
        State::Cancelled(_) => "cancelled",
    }
}

fn print_details(a: &pb::AwaitingApproval) {
    use pb::awaiting_approval::Details;
    match &a.details {
        Some(Details::Edit(e)) => println!("{}", e.diff),
        Some(Details::Exec(x)) => println!("  $ {}   (in {})", x.command, x.dir_path),
        Some(Details::Mcp(m)) => println!("  {} / {}", m.server_name, m.tool_name),
        Some(Details::Info(i)) => println!("  {}", i.prompt),
        None => {}
    }
}

/// Asks at the terminal; end of input rejects.
fn ask() -> anyhow::Result<O> {
    let stdin = std::io::stdin();
    loop {
        print!("approve? [y]es once, [a]lways, [n]o: ");
        std::io::stdout().flush()?;
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            println!("(end of input: rejected)");
            return Ok(O::Cancel);
        }
        if !std::io::IsTerminal::is_terminal(&stdin) {
            // Piped answers are not echoed by a terminal.
            println!("{}", line.trim());
        }
        match line.trim() {
            "y" | "yes" => return Ok(O::ProceedOnce),
            "a" | "always" => return Ok(O::ProceedAlways),
            "n" | "no" => return Ok(O::Cancel),
            _ => continue,
        }
    }
}
