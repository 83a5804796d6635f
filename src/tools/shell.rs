//! `run_shell_command`: a bash script run as its own process group in the
//! workspace, with live output, an execution timeout and bounded output.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::kept::OutputKeeper;
use super::{
    Args, BoxFuture, ConfirmationDetails, Declaration, ErrorKind, ExecContext, Invocation,
    ProgressSender, Subject, Tool, ToolError, ToolKind, ToolOutcome, opt_str_arg, opt_u64_arg,
    str_arg,
};
use crate::sandbox::process::{ProcessEvent, ProcessEvents};
use crate::sandbox::{ProcessOutcome, ProcessSpec, Spill, Workspace, run_process};
use crate::shell::{ShellAnalysis, analyze};

/// The tool's wire name.
pub const SHELL_TOOL_NAME: &str = "run_shell_command";

/// `run_shell_command`.
pub struct ShellTool {
    ws: Arc<Workspace>,
    decl: Declaration,
    /// Where output beyond the cap is kept (none: only head and tail).
    kept: Option<Arc<OutputKeeper>>,
}

impl ShellTool {
    pub fn new(ws: Arc<Workspace>) -> Self {
        let decl = Declaration {
            name: SHELL_TOOL_NAME.into(),
            description: "Runs a bash command (`bash -c <command>`) in the workspace, in its own process group with stdin closed. Returns stdout and stderr interleaved, the exit code and any signal. Output is bounded (head and tail kept; beyond the cap the whole output is kept for a while and the response names a path to read it with read_file). Background processes the command leaves behind are stopped when it ends.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "minLength": 1, "description": "The bash command to run."},
                    "description": {"type": "string", "description": "A short description of what the command does, shown to the person approving it."},
                    "dir_path": {"type": "string", "minLength": 1, "description": "Working directory, relative to the workspace root. Defaults to the root."},
                    "timeout": {"type": "integer", "minimum": 1, "description": "Execution timeout in seconds; at most the server's execution timeout, which is also the default."}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
            kind: ToolKind::Execute,
            parallelizable: false,
            read_only: false,
        };
        Self {
            ws,
            decl,
            kept: None,
        }
    }

    /// Keeps the whole output of commands that outgrow the cap in `kept`.
    pub fn with_kept_output(mut self, kept: Option<Arc<OutputKeeper>>) -> Self {
        self.kept = kept;
        self
    }
}

/// The longest command `bash -c` can be given: Linux refuses one argument
/// of `MAX_ARG_STRLEN` (32 pages, 131,072 bytes with its NUL) with E2BIG,
/// which would otherwise reach the caller as a sandbox failure.
pub const MAX_COMMAND_BYTES: usize = 131_071;

impl Tool for ShellTool {
    fn declaration(&self) -> &Declaration {
        &self.decl
    }

    fn build(&self, args: &Args) -> Result<Arc<dyn Invocation>, ToolError> {
        let command = str_arg(args, "command")?.to_string();
        // The schema's minLength lets "   " through; bash would run nothing
        // (Gemini CLI refuses it too).
        if command.trim().is_empty() {
            return Err(ToolError::invalid_params(
                "argument 'command' is empty or only whitespace; send the bash command to run.",
            ));
        }
        if command.len() > MAX_COMMAND_BYTES {
            return Err(ToolError::invalid_params(format!(
                "argument 'command' is {} bytes; bash takes at most {MAX_COMMAND_BYTES} (Linux's \
                 limit on one argument): write the script to a file with write_file and run the file",
                command.len()
            )));
        }
        let dir_given = opt_str_arg(args, "dir_path").unwrap_or(".");
        let dir = self.ws.resolve(dir_given).map_err(|e| match e {
            crate::sandbox::PathError::OutsideWorkspace { .. } => {
                ToolError::new(ErrorKind::PathNotInWorkspace, e.to_string())
            }
            crate::sandbox::PathError::RootMoved { .. } => {
                ToolError::new(ErrorKind::UnhandledException, e.to_string())
            }
            other => ToolError::invalid_params(format!("argument 'dir_path': {other}")),
        })?;
        if !dir.is_dir() {
            return Err(ToolError::invalid_params(format!(
                "argument 'dir_path': {dir_given} is not an existing directory"
            )));
        }
        // Parsed once here; the policy and the prompt read this analysis.
        let analysis = Arc::new(analyze(&command));
        Ok(Arc::new(ShellInvocation {
            analysis,
            workspace: self.ws.root().to_path_buf(),
            dir_display: self.ws.display(&dir),
            dir,
            timeout: opt_u64_arg(args, "timeout").map(Duration::from_secs),
            command,
            kept: self.kept.clone(),
        }))
    }
}

/// The process's events go straight to the call's progress: no relay task.
impl ProcessEvents for ProgressSender {
    fn send_event(&self, event: ProcessEvent) {
        self.send(event.into());
    }
}

struct ShellInvocation {
    command: String,
    analysis: Arc<ShellAnalysis>,
    workspace: std::path::PathBuf,
    dir: std::path::PathBuf,
    dir_display: String,
    timeout: Option<Duration>,
    kept: Option<Arc<OutputKeeper>>,
}

/// Where one command's whole output went, once known.
struct KeptSlot {
    keeper: Arc<OutputKeeper>,
    path: Arc<std::sync::Mutex<Option<std::path::PathBuf>>>,
    written: Arc<std::sync::atomic::AtomicU64>,
}

impl KeptSlot {
    fn new(keeper: Arc<OutputKeeper>, session: Arc<str>) -> (Self, Spill) {
        let path = Arc::new(std::sync::Mutex::new(None));
        let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (k, p) = (keeper.clone(), path.clone());
        let spill = Spill {
            open: Box::new(move || match k.create(&session) {
                Ok(Some(f)) => {
                    *p.lock().unwrap_or_else(|e| e.into_inner()) = Some(f.path);
                    Some((f.file, f.cap))
                }
                Ok(None) => None,
                Err(e) => {
                    tracing::warn!(error = %e, "could not keep a command's whole output");
                    None
                }
            }),
            written: written.clone(),
        };
        (
            Self {
                keeper,
                path,
                written,
            },
            spill,
        )
    }

    /// The kept file's path and size, after the command ended.
    fn settle(&self) -> Option<(std::path::PathBuf, u64)> {
        let path = self.path.lock().unwrap_or_else(|e| e.into_inner()).take()?;
        let bytes = self.written.load(std::sync::atomic::Ordering::Relaxed);
        self.keeper.settle(&path, bytes);
        Some((path, bytes))
    }

    /// The sentence telling the model where the rest is.
    fn note(&self, path: &std::path::Path, bytes: u64) -> String {
        format!(
            "\n[The output was longer than the cap; the whole output ({bytes} bytes of text) is kept for {} min: read it with read_file and file_path \"{}\" (start_line/end_line to page through it).]",
            self.keeper.ttl().as_secs() / 60,
            path.display()
        )
    }
}

impl Invocation for ShellInvocation {
    fn subject(&self) -> Subject {
        Subject::Shell {
            command: self.command.clone(),
            analysis: self.analysis.clone(),
            dir_path: self.dir_display.clone(),
        }
    }

    fn confirmation(&self) -> Result<ConfirmationDetails, ToolError> {
        Ok(ConfirmationDetails::Exec {
            command: self.command.clone(),
            root_commands: self.analysis.root_commands().unwrap_or_default(),
            dir_path: self.dir_display.clone(),
            write_targets: self.analysis.write_targets(),
        })
    }

    fn execute(self: Arc<Self>, ctx: ExecContext) -> BoxFuture<ToolOutcome> {
        Box::pin(async move {
            let timeout = self.timeout.map_or(ctx.timeout, |t| t.min(ctx.timeout));
            let (kept, spill) = match &self.kept {
                Some(k) => {
                    let (slot, spill) = KeptSlot::new(k.clone(), ctx.session.clone());
                    (Some(slot), Some(spill))
                }
                None => (None, None),
            };
            let spec = ProcessSpec {
                program: "bash".into(),
                args: vec!["-c".into(), self.command.clone()],
                cwd: self.dir.clone(),
                timeout,
                limits: ctx.output,
                sandbox: ctx.sandbox.clone(),
                workspace: self.workspace.clone(),
                spill,
            };
            let outcome = run_process(spec, ctx.token.clone(), ctx.progress.clone()).await;
            let kept = kept.and_then(|slot| {
                let (path, bytes) = slot.settle()?;
                Some((slot.note(&path, bytes), path, bytes))
            });
            let with_note = |output: String| match &kept {
                Some((note, ..)) => output + note,
                None => output,
            };
            match outcome {
                ProcessOutcome::Exited {
                    exit_code,
                    signal,
                    output,
                } => {
                    let mut result = Args::new();
                    result.insert("exit_code".into(), json!(exit_code));
                    result.insert("signal".into(), json!(signal));
                    let mut text = format!("Command: {}\nDirectory: {}\nOutput: {}", self.command, self.dir_display, if output.is_empty() { "(empty)" } else { &output });
                    if let Some(code) = exit_code.filter(|c| *c != 0) {
                        text.push_str(&format!("\nExit Code: {code}"));
                    }
                    if let Some(sig) = signal {
                        text.push_str(&format!("\nSignal: {sig}"));
                    }
                    if let Some((note, path, bytes)) = &kept {
                        text.push_str(note);
                        result.insert("full_output_path".into(), json!(path));
                        result.insert("full_output_bytes".into(), json!(bytes));
                    }
                    // The output is in the response text once; a second
                    // copy here would double the event (issue 11 item 4).
                    result.insert("output_bytes".into(), json!(output.len()));
                    ToolOutcome::Success {
                        output: Value::String(text),
                        result,
                    }
                }
                ProcessOutcome::TimedOut { output } => ToolError {
                    kind: ErrorKind::ExecutionTimeout,
                    message: format!(
                        "Command timed out after {} s and was stopped (its whole process group was killed). Run it with a larger 'timeout' or make it finish sooner.",
                        timeout.as_secs_f64()
                    ),
                    partial_output: Some(with_note(output)),
                }
                .into(),
                ProcessOutcome::Cancelled { output } => ToolOutcome::Cancelled {
                    partial_output: Some(with_note(output)),
                },
                ProcessOutcome::SandboxDenied {
                    exit_code,
                    output,
                    evidence,
                    ..
                } => ToolError {
                    kind: ErrorKind::SandboxDenied,
                    message: format!(
                        "The sandbox ({level}) refused an operation of this command (exit code {code}): {evidence}. At this level commands may {allowed}.",
                        level = ctx.sandbox.config.level,
                        code = exit_code.map_or("none".to_string(), |c| c.to_string()),
                        evidence = evidence.trim(),
                        allowed = crate::sandbox::allowed_summary(ctx.sandbox.config.level),
                    ),
                    partial_output: Some(with_note(output)),
                }
                .into(),
                ProcessOutcome::SandboxSetupFailed { message, output } => ToolError {
                    kind: ErrorKind::SandboxDenied,
                    message: format!(
                        "The sandbox could not be set up, so the command did not run: {message}"
                    ),
                    partial_output: Some(with_note(output)),
                }
                .into(),
                ProcessOutcome::SpawnFailed { message } => {
                    ToolError::new(ErrorKind::UnhandledException, message).into()
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command is parsed once, when the invocation is built: the policy
    /// and every later `subject()` read that one analysis.
    #[test]
    fn the_analysis_is_made_once_per_call() {
        let dir = tempfile::tempdir().unwrap();
        let tool = ShellTool::new(Arc::new(Workspace::new(dir.path()).unwrap()));
        let mut args = Args::new();
        args.insert("command".into(), json!("ls && > f"));
        let invocation = tool.build(&args).unwrap();
        let (Subject::Shell { analysis: a, .. }, Subject::Shell { analysis: b, .. }) =
            (invocation.subject(), invocation.subject())
        else {
            panic!("not a shell subject");
        };
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.write_targets(), ["f"]);
        let Ok(ConfirmationDetails::Exec { write_targets, .. }) = invocation.confirmation() else {
            panic!("not an exec prompt");
        };
        assert_eq!(write_targets, ["f"]);
    }
}
