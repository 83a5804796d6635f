//! `toolsched call`: a small client for manual use. Sends one batch, prints
//! every event as a line, asks the person at the terminal to answer approval
//! prompts (or approves them all once with `--yes`), and prints the function
//! responses as JSON at the end.

use std::io::{BufRead, Write};

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
    let channel = tonic::transport::Endpoint::from_shared(args.addr.clone())?
        .connect()
        .await
        .with_context(|| {
            format!(
                "cannot connect to {}: is `toolsched serve` running there? (set --addr)",
                args.addr
            )
        })?;
    let token = args.auth_token.clone();
    let mut client = pb::tool_scheduler_client::ToolSchedulerClient::with_interceptor(
        channel,
        move |mut req: tonic::Request<()>| {
            if let Some(t) = &token {
                let value = format!("Bearer {t}")
                    .parse()
                    .map_err(|_| tonic::Status::invalid_argument("token is not valid metadata"))?;
                req.metadata_mut().insert("authorization", value);
            }
            Ok(req)
        },
    );
    let mut stream = client
        .schedule_calls(pb::ScheduleCallsRequest {
            session_id: args.session.clone(),
            calls,
            approval_mode: mode as i32,
            interactive: Some(true),
            sandbox_level: 0,
        })
        .await?
        .into_inner();
    let mut failed = 0usize;
    let mut total = 0usize;
    while let Some(event) = stream.message().await? {
        use pb::schedule_calls_response::Event;
        match event.event {
            Some(Event::BatchAccepted(a)) => {
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
