//! The tool registry and the `Tool` / `Invocation` traits.
//!
//! A tool declares itself (name, description, JSON Schema, kind) and turns
//! schema-checked arguments into an [`Invocation`]: a value that knows what it
//! would do (for policy and the approval prompt) and how to do it. The
//! registry checks arguments against each tool's JSON Schema with the
//! `jsonschema` crate before a tool ever sees them.
//!
//! Not here: deciding whether a call may run (`policy`), when it runs
//! (`scheduler`), and confining what it does (`sandbox`).

mod edit;
mod encoding;
mod file;
mod glob;
mod grep;
pub mod kept;
mod list;
pub mod mcp;
mod omission;
pub mod pattern;
mod read;
mod shell;
pub use shell::MAX_COMMAND_BYTES;
mod topic;
mod walk;
mod write;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::sandbox::{OutputLimits, SharedSandbox, Workspace};
use crate::shell::ShellAnalysis;

pub use edit::ReplaceTool;
pub use glob::GlobTool;
pub use grep::GrepTool;
pub use list::ListDirectoryTool;
pub use read::ReadFileTool;
pub use shell::{SHELL_TOOL_NAME, ShellTool};
pub use topic::{TOPIC_TOOL_NAME, UpdateTopicTool};
pub use write::WriteFileTool;

/// JSON object arguments of a function call.
pub type Args = Map<String, Value>;

/// A boxed future, as returned by [`Invocation::execute`].
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Gemini CLI's tool kinds; `Read`, `Search` and `Think` have no side effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    Read,
    Edit,
    Delete,
    Move,
    Search,
    Execute,
    Think,
    Fetch,
    Other,
}

/// What a tool tells the model and the scheduler about itself.
#[derive(Debug, Clone)]
pub struct Declaration {
    /// Wire name, e.g. `read_file`.
    pub name: String,
    pub description: String,
    /// JSON Schema (an object schema) of the arguments.
    pub parameters: Value,
    pub kind: ToolKind,
    /// Consecutive parallelizable calls run concurrently in one wave.
    pub parallelizable: bool,
    /// No side effects: allowed in every approval mode.
    pub read_only: bool,
}

/// Stable error types of a failed call (mirrored by the proto's `ErrorType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    ToolNotRegistered,
    InvalidToolParams,
    PolicyViolation,
    FileNotFound,
    TargetIsDirectory,
    PathNotInWorkspace,
    FileTooLarge,
    PermissionDenied,
    NoSpaceLeft,
    EditNoOccurrenceFound,
    EditExpectedOccurrenceMismatch,
    EditNoChange,
    AttemptToCreateExistingFile,
    SearchPathNotFound,
    ExecutionTimeout,
    SandboxDenied,
    McpToolError,
    UnhandledException,
    /// A directory tool (list_directory, glob, grep_search) was given a file.
    PathIsNotADirectory,
    /// The file changed on disk while an edit was being written; nothing
    /// was written.
    FileChangedConcurrently,
    /// The server running the call stopped while it executed (another
    /// replica took the batch over): it may have had its effect; it was
    /// not run again.
    OutcomeUnknown,
}

impl ErrorKind {
    /// Every kind (to read a name back).
    pub const ALL: [ErrorKind; 21] = [
        Self::ToolNotRegistered,
        Self::InvalidToolParams,
        Self::PolicyViolation,
        Self::FileNotFound,
        Self::TargetIsDirectory,
        Self::PathNotInWorkspace,
        Self::FileTooLarge,
        Self::PermissionDenied,
        Self::NoSpaceLeft,
        Self::EditNoOccurrenceFound,
        Self::EditExpectedOccurrenceMismatch,
        Self::EditNoChange,
        Self::AttemptToCreateExistingFile,
        Self::SearchPathNotFound,
        Self::ExecutionTimeout,
        Self::SandboxDenied,
        Self::McpToolError,
        Self::UnhandledException,
        Self::PathIsNotADirectory,
        Self::FileChangedConcurrently,
        Self::OutcomeUnknown,
    ];

    /// The kind named `name` ([`ErrorKind::as_str`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The stable snake_case name (as in the proto's `ErrorType`, lower-cased).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ToolNotRegistered => "tool_not_registered",
            Self::InvalidToolParams => "invalid_tool_params",
            Self::PolicyViolation => "policy_violation",
            Self::FileNotFound => "file_not_found",
            Self::TargetIsDirectory => "target_is_directory",
            Self::PathNotInWorkspace => "path_not_in_workspace",
            Self::FileTooLarge => "file_too_large",
            Self::PermissionDenied => "permission_denied",
            Self::NoSpaceLeft => "no_space_left",
            Self::EditNoOccurrenceFound => "edit_no_occurrence_found",
            Self::EditExpectedOccurrenceMismatch => "edit_expected_occurrence_mismatch",
            Self::EditNoChange => "edit_no_change",
            Self::AttemptToCreateExistingFile => "attempt_to_create_existing_file",
            Self::SearchPathNotFound => "search_path_not_found",
            Self::ExecutionTimeout => "execution_timeout",
            Self::SandboxDenied => "sandbox_denied",
            Self::McpToolError => "mcp_tool_error",
            Self::UnhandledException => "unhandled_exception",
            Self::PathIsNotADirectory => "path_is_not_a_directory",
            Self::FileChangedConcurrently => "file_changed_concurrently",
            Self::OutcomeUnknown => "outcome_unknown",
        }
    }
}

/// A failed call: a stable type, a message that tells the caller what to do
/// next, and any output produced before the failure.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    pub kind: ErrorKind,
    pub message: String,
    /// Output produced before the failure (e.g. a timed-out command's).
    pub partial_output: Option<String>,
}

impl ToolError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            partial_output: None,
        }
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidToolParams, message)
    }

    /// Maps an I/O error on `path` to the closest stable error type.
    pub fn io(err: &std::io::Error, path: &str) -> Self {
        use std::io::ErrorKind as Io;
        let (kind, message) = match err.kind() {
            Io::NotFound => (
                ErrorKind::FileNotFound,
                format!(
                    "File not found: {path}. Check the path (relative to the workspace root) and try again."
                ),
            ),
            Io::PermissionDenied => (
                ErrorKind::PermissionDenied,
                format!("Permission denied: {path}."),
            ),
            Io::IsADirectory => (
                ErrorKind::TargetIsDirectory,
                format!(
                    "{path} is a directory, not a file. Use list_directory to see its entries."
                ),
            ),
            Io::StorageFull => (
                ErrorKind::NoSpaceLeft,
                format!("No space left on the device while writing {path}."),
            ),
            _ => (
                ErrorKind::UnhandledException,
                format!("I/O error on {path}: {err}"),
            ),
        };
        Self::new(kind, message)
    }
}

/// What the approval prompt shows, per the kind of side effect.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfirmationDetails {
    /// A file edit: path relative to the workspace, unified diff, the full
    /// proposed content.
    Edit {
        file_path: String,
        diff: String,
        is_new_file: bool,
        new_content: String,
    },
    /// A shell command with the root commands it runs and the files it
    /// writes through redirections.
    Exec {
        command: String,
        root_commands: Vec<String>,
        dir_path: String,
        write_targets: Vec<String>,
    },
    /// A tool of an MCP server.
    Mcp {
        server_name: String,
        tool_name: String,
        args: Args,
        description: String,
    },
    Info {
        prompt: String,
    },
}

/// What policy and "always allow" rules look at in a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Subject {
    /// A shell command and its analysis, parsed once when the invocation
    /// was built (root commands, segments, write targets).
    Shell {
        command: String,
        analysis: Arc<ShellAnalysis>,
        /// Working directory relative to the workspace root (`.` for the
        /// root): policy places relative redirection targets from it.
        dir_path: String,
    },
    /// A file tool on one path, relative to the workspace root.
    File { path: String },
    /// A tool of an MCP server.
    Mcp { server: String, tool: String },
    /// Nothing narrower than the tool itself.
    Tool,
}

/// Live progress of an executing call, one report at a time.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// The call's process started (the shell's worker pid).
    Started { pid: u32 },
    /// A chunk of live output (bounded per call by
    /// [`OutputLimits::max_streamed_bytes`]).
    Output(String),
    /// A progress report (MCP `notifications/progress`): the latest values
    /// so far. A later report supersedes an earlier one, so reports may be
    /// merged while a reader lags.
    Report {
        /// `None` when the tool's value was not a finite number.
        progress: Option<f64>,
        total: Option<f64>,
        /// `progress / total` in percent, when total is positive.
        percent: Option<f64>,
        message: String,
    },
}

/// Where a running tool sends its [`Progress`]: one channel per call of a
/// tool that reports progress ([`Invocation::reports_progress`]), none for
/// the others (a channel is two allocations made and freed per call).
///
/// The channel carries boxes: a tokio channel allocates its first block of
/// 32 message slots when it is made, so a slot is a pointer (a 256-byte
/// block) rather than a `Progress` (about 2.5 KB).
#[derive(Debug, Clone)]
pub struct ProgressSender(Option<mpsc::UnboundedSender<Box<Progress>>>);

/// The scheduler's end of a [`ProgressSender`].
pub type ProgressReceiver = mpsc::UnboundedReceiver<Box<Progress>>;

impl ProgressSender {
    /// A call's progress channel.
    pub fn channel() -> (Self, ProgressReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self(Some(tx)), rx)
    }

    /// The sender of a call whose tool said it reports no progress: what
    /// is sent on it is dropped.
    pub fn none() -> Self {
        Self(None)
    }

    /// Sends `progress`; false once the scheduler stopped listening (the
    /// call is over), which a tool may ignore, and always on
    /// [`ProgressSender::none`].
    pub fn send(&self, progress: Progress) -> bool {
        match &self.0 {
            Some(tx) => tx.send(Box::new(progress)).is_ok(),
            None => false,
        }
    }
}

impl From<crate::sandbox::process::ProcessEvent> for Progress {
    fn from(event: crate::sandbox::process::ProcessEvent) -> Self {
        use crate::sandbox::process::ProcessEvent;
        match event {
            ProcessEvent::Started { pid } => Self::Started { pid },
            ProcessEvent::Output(chunk) => Self::Output(chunk),
        }
    }
}

/// What an invocation gets to run with.
#[derive(Debug, Clone)]
pub struct ExecContext {
    /// Cancelled when the call is cancelled; the tool stops promptly and
    /// returns [`ToolOutcome::Cancelled`].
    pub token: CancellationToken,
    /// Live progress; the scheduler turns each into an Executing update.
    /// Unbounded: shell output is capped per call
    /// (`max_streamed_bytes`), and the scheduler drains it without waiting
    /// and merges consecutive reports (see `scheduler::exec`).
    pub progress: ProgressSender,
    /// The execution timeout for this call.
    pub timeout: Duration,
    /// Output bounds.
    pub output: OutputLimits,
    /// The sandbox side effects run in.
    pub sandbox: SharedSandbox,
    /// The session the call belongs to (what per-session bounds count by,
    /// e.g. kept output).
    pub session: Arc<str>,
}

/// How an execution ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome {
    /// `output` becomes the function response's `output`; `result` is the
    /// structured result (e.g. `{"exit_code": 0}`).
    Success {
        output: Value,
        result: Args,
    },
    Error(ToolErrorData),
    /// The tool stopped because its token was cancelled.
    Cancelled {
        partial_output: Option<String>,
    },
}

/// [`ToolError`] as plain data (comparable, for outcomes).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolErrorData {
    pub kind: ErrorKind,
    pub message: String,
    pub partial_output: Option<String>,
}

impl From<ToolError> for ToolOutcome {
    fn from(e: ToolError) -> Self {
        ToolOutcome::Error(ToolErrorData {
            kind: e.kind,
            message: e.message,
            partial_output: e.partial_output,
        })
    }
}

/// A built, schema-checked call that knows what it would do.
pub trait Invocation: Send + Sync + 'static {
    /// What policy rules match against.
    fn subject(&self) -> Subject;

    /// The approval prompt's details. May read files: call it off the async
    /// runtime (`spawn_blocking`).
    fn confirmation(&self) -> Result<ConfirmationDetails, ToolError>;

    /// Runs the call. Side-effecting tools read their target here, never from
    /// what the prompt showed.
    fn execute(self: Arc<Self>, ctx: ExecContext) -> BoxFuture<ToolOutcome>;

    /// Whether `execute` may send [`Progress`] on `ctx.progress`: when
    /// false the call gets [`ProgressSender::none`] and no channel is made
    /// for it (a small read, the common call, reports nothing). True unless
    /// a tool says otherwise, so that a tool that reports is never silenced.
    fn reports_progress(&self) -> bool {
        true
    }

    /// Whether the call writes inside a git repository's own directory
    /// that its path does not name as `.git` (a repository a `.git`
    /// symlink or gitlink leads to, a bare one): policy asks for it as for
    /// a `.git` path ([`crate::sandbox::protected::inside_git_dir`]).
    fn writes_repository(&self) -> bool {
        false
    }
}

/// A tool: a declaration and a way to build invocations.
pub trait Tool: Send + Sync + 'static {
    fn declaration(&self) -> &Declaration;

    /// Builds an invocation from arguments that already passed the JSON
    /// Schema; checks what a schema cannot (paths inside the workspace,
    /// line ranges). Errors are `invalid_tool_params` or a path error.
    fn build(&self, args: &Args) -> Result<Arc<dyn Invocation>, ToolError>;

    /// The arguments with the approval prompt's inline `new_content`
    /// applied, or `None` when this tool's calls cannot be modified.
    fn with_new_content(&self, _args: &Args, _new_content: &str) -> Option<Args> {
        None
    }

    /// The MCP server this tool belongs to (`None` for built-ins): a
    /// tenant limited to some servers sees only their tools.
    fn mcp_server(&self) -> Option<&str> {
        None
    }
}

/// A registered tool with its compiled argument validator (shared, so that
/// a registry overlaid on another reuses what was compiled).
#[derive(Clone)]
struct Entry {
    tool: Arc<dyn Tool>,
    validator: Arc<jsonschema::Validator>,
}

/// Why the registry could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("tool {name}: invalid JSON Schema for its parameters: {reason}")]
    InvalidSchema { name: String, reason: String },
    #[error("tool {name} is registered twice")]
    Duplicate { name: String },
}

/// All tools by wire name. Immutable once built; shared as `Arc<Registry>`
/// through a [`SharedRegistry`] so that a new one (MCP servers' tool lists
/// changed) can replace it for batches that start later.
pub struct Registry {
    /// Shared entries: a tenant's view ([`Registry::restricted`]) copies no
    /// compiled schema.
    tools: BTreeMap<String, Arc<Entry>>,
}

impl Registry {
    /// The built-in tools over `workspace`.
    pub fn builtin(workspace: Arc<Workspace>) -> Result<Self, RegistryError> {
        Self::builtin_with(workspace, None)
    }

    /// The built-in tools over `workspace`; the shell keeps the whole output
    /// of a command beyond the cap in `kept`, and `read_file` reads it.
    pub fn builtin_with(
        workspace: Arc<Workspace>,
        kept: Option<Arc<kept::OutputKeeper>>,
    ) -> Result<Self, RegistryError> {
        Self::new(vec![
            Arc::new(ReadFileTool::new(workspace.clone()).with_kept_output(kept.clone())),
            Arc::new(ListDirectoryTool::new(workspace.clone())),
            Arc::new(WriteFileTool::new(workspace.clone())),
            Arc::new(ReplaceTool::new(workspace.clone())),
            Arc::new(GlobTool::new(workspace.clone())),
            Arc::new(GrepTool::new(workspace.clone())),
            Arc::new(ShellTool::new(workspace).with_kept_output(kept)),
            Arc::new(UpdateTopicTool::new()),
        ])
    }

    /// A registry of `tools`, compiling each one's JSON Schema.
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Result<Self, RegistryError> {
        let mut map = BTreeMap::new();
        for tool in tools {
            let decl = tool.declaration();
            let validator = jsonschema::validator_for(&decl.parameters).map_err(|e| {
                RegistryError::InvalidSchema {
                    name: decl.name.clone(),
                    reason: e.to_string(),
                }
            })?;
            let name = decl.name.clone();
            let validator = Arc::new(validator);
            if map
                .insert(name.clone(), Arc::new(Entry { tool, validator }))
                .is_some()
            {
                return Err(RegistryError::Duplicate { name });
            }
        }
        Ok(Self { tools: map })
    }

    /// This registry with every tool of `over` in place of the one of the
    /// same name (and any other tool of `over` added): a workspace's
    /// built-ins over the shared registry, whose MCP tools stay shared.
    /// Compiles nothing (the validators are shared).
    pub fn overlaid(&self, over: &Registry) -> Registry {
        let mut tools = self.tools.clone();
        for (name, entry) in &over.tools {
            tools.insert(name.clone(), entry.clone());
        }
        Registry { tools }
    }

    /// The same registry without the tools of the MCP servers `visible`
    /// refuses (built-ins always stay): what one tenant sees.
    pub fn restricted(&self, visible: &dyn Fn(&str) -> bool) -> Registry {
        let tools = self
            .tools
            .iter()
            .filter(|(_, e)| e.tool.mcp_server().is_none_or(visible))
            .map(|(name, e)| (name.clone(), e.clone()))
            .collect();
        Registry { tools }
    }

    /// Every registered tool, in name order (to build a registry with more).
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tools.values().map(|e| e.tool.clone()).collect()
    }

    /// Declarations in name order, for `ListTools`.
    pub fn declarations(&self) -> impl Iterator<Item = &Declaration> {
        self.tools.values().map(|e| e.tool.declaration())
    }

    /// The tool named `name`, or `tool_not_registered` naming the closest
    /// registered names.
    pub fn get(&self, name: &str) -> Result<&Arc<dyn Tool>, ToolError> {
        match self.tools.get(name) {
            Some(entry) => Ok(&entry.tool),
            None => Err(self.not_registered(name)),
        }
    }

    /// Checks `args` against the tool's JSON Schema, then builds the
    /// invocation. The error names the offending field.
    pub fn build(&self, name: &str, args: &Args) -> Result<Arc<dyn Invocation>, ToolError> {
        let entry = self
            .tools
            .get(name)
            .ok_or_else(|| self.not_registered(name))?;
        let value = Value::Object(args.clone());
        // Valid arguments are the common case: skip collecting errors.
        if entry.validator.is_valid(&value) {
            return entry.tool.build(args);
        }
        let mut problems: Vec<String> = Vec::new();
        let mut more = 0usize;
        for e in entry.validator.iter_errors(&value) {
            if problems.len() == MAX_REPORTED_PROBLEMS {
                more += 1;
                continue;
            }
            let at = e.instance_path().to_string();
            let field = if at.is_empty() {
                "arguments".to_string()
            } else {
                format!("argument '{}'", at.trim_start_matches('/'))
            };
            problems.push(clip(&format!("{field}: {e}"), MAX_PROBLEM_CHARS));
        }
        if !problems.is_empty() {
            let tail = if more > 0 {
                format!(" (and {more} more)")
            } else {
                String::new()
            };
            return Err(ToolError::invalid_params(format!(
                "Invalid arguments for {name}: {}{tail}",
                problems.join("; ")
            )));
        }
        entry.tool.build(args)
    }

    fn not_registered(&self, name: &str) -> ToolError {
        let name = &clip(name, MAX_PROBLEM_CHARS);
        let mut scored: Vec<(f64, &str)> = self
            .tools
            .keys()
            .map(|k| (strsim::normalized_levenshtein(name, k), k.as_str()))
            .filter(|(score, _)| *score >= 0.4)
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        let suggestions: Vec<&str> = scored.iter().take(3).map(|(_, k)| *k).collect();
        let hint = if suggestions.is_empty() {
            "Call ListTools for the registered tools.".to_string()
        } else {
            format!("Did you mean: {}?", suggestions.join(", "))
        };
        ToolError::new(
            ErrorKind::ToolNotRegistered,
            format!("Tool \"{name}\" not found in registry. {hint}"),
        )
    }
}

/// The current registry, replaceable as a whole: readers take a snapshot
/// ([`SharedRegistry::load`]) at the start of a batch and keep it for the
/// batch, so a batch never sees two registries. Cheap to clone.
#[derive(Clone)]
pub struct SharedRegistry(Arc<tokio::sync::watch::Sender<Arc<Registry>>>);

impl SharedRegistry {
    pub fn new(registry: Arc<Registry>) -> Self {
        Self(Arc::new(tokio::sync::watch::Sender::new(registry)))
    }

    /// The current registry.
    pub fn load(&self) -> Arc<Registry> {
        self.0.borrow().clone()
    }

    /// Replaces the registry for every later [`load`](Self::load).
    pub fn store(&self, registry: Arc<Registry>) {
        self.0.send_replace(registry);
    }

    /// A receiver that sees every replacement.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Arc<Registry>> {
        self.0.subscribe()
    }
}

impl From<Arc<Registry>> for SharedRegistry {
    fn from(registry: Arc<Registry>) -> Self {
        Self::new(registry)
    }
}

/// Problems listed in one `invalid_tool_params` message; the rest are
/// counted. The message goes to the model, which needs the first few.
const MAX_REPORTED_PROBLEMS: usize = 5;
/// Characters kept of one problem (a schema error can quote the whole
/// argument object).
const MAX_PROBLEM_CHARS: usize = 300;

/// `text` cut to `max` characters, marked when cut.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// Reads a required string argument (already schema-checked to be present).
pub(crate) fn str_arg<'a>(args: &'a Args, key: &str) -> Result<&'a str, ToolError> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::invalid_params(format!("argument '{key}' must be a string")))
}

/// Reads an optional string argument.
pub(crate) fn opt_str_arg<'a>(args: &'a Args, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

/// Reads an optional non-negative integer argument.
pub(crate) fn opt_u64_arg(args: &Args, key: &str) -> Option<u64> {
    args.get(key).and_then(Value::as_u64)
}

#[cfg(test)]
mod overlay_tests {
    use super::*;

    #[test]
    fn an_overlay_replaces_tools_by_name_and_keeps_the_rest() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let ws = |d: &tempfile::TempDir| Arc::new(Workspace::new(d.path()).unwrap());
        let shared = Registry::new(vec![
            Arc::new(ReadFileTool::new(ws(&a))),
            Arc::new(UpdateTopicTool::new()),
        ])
        .unwrap();
        let over = Registry::new(vec![Arc::new(ReadFileTool::new(ws(&b)))]).unwrap();
        std::fs::write(b.path().join("f.txt"), "b").unwrap();
        let merged = shared.overlaid(&over);
        let names: Vec<_> = merged.declarations().map(|d| d.name.clone()).collect();
        assert_eq!(names, ["read_file", "update_topic"]);
        // read_file resolves in b: f.txt exists only there, and a's path is
        // outside b.
        let args = |p: &str| {
            serde_json::json!({ "file_path": p })
                .as_object()
                .cloned()
                .unwrap()
        };
        assert!(merged.build("read_file", &args("f.txt")).is_ok());
        let outside = a.path().join("f.txt");
        let err = merged
            .build("read_file", &args(outside.to_str().unwrap()))
            .err()
            .unwrap();
        assert_eq!(err.kind, ErrorKind::PathNotInWorkspace);
    }
}
