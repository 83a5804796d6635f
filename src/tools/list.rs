//! `list_directory` (Gemini CLI's wire name and parameters): the entries of
//! one directory, directories first, with the same ignore rules as `glob`
//! and `grep_search` and a count of what they left out.

use std::path::PathBuf;
use std::sync::Arc;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde_json::{Value, json};

use super::file::{
    MAX_OUTPUT_BYTES, Target, beneath_error, blocking, is_not_found, not_a_directory,
};
use super::walk::{self, Flow, WalkOptions};
use super::{
    Args, BoxFuture, ConfirmationDetails, Declaration, ErrorKind, ExecContext, Invocation, Subject,
    Tool, ToolError, ToolKind, ToolOutcome, str_arg,
};
use crate::sandbox::Workspace;

/// Entries listed by one call; the rest are counted.
pub const MAX_LIST_ENTRIES: usize = 1000;

/// `list_directory`: the entries of one directory, directories first.
pub struct ListDirectoryTool {
    ws: Arc<Workspace>,
    decl: Declaration,
}

impl ListDirectoryTool {
    /// The tool over the workspace `ws`; every path it is given resolves
    /// inside it.
    pub fn new(ws: Arc<Workspace>) -> Self {
        let decl = Declaration {
            name: "list_directory".into(),
            description: format!(
                "Lists the files and subdirectories of a directory in the workspace, directories first (marked [DIR]), at most {MAX_LIST_ENTRIES} entries. Entries ignored by .gitignore or the project ignore files ({}) are left out and counted; so are symlinks leading outside the workspace.",
                walk::PROJECT_IGNORE_FILES.join(", ")
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "dir_path": {"type": "string", "minLength": 1, "description": "Directory to list, relative to the workspace root ('.' for the root) or absolute inside it."},
                    "ignore": {"type": "array", "items": {"type": "string", "minLength": 1}, "description": "Glob patterns of entry names to leave out, e.g. [\"*.log\", \"tmp*\"]."},
                    "respect_git_ignore": {"type": "boolean", "description": "Leave out entries ignored by .gitignore. Default true."}
                },
                "required": ["dir_path"],
                "additionalProperties": false,
                "examples": [
                    {"dir_path": "."},
                    {"dir_path": "src", "ignore": ["*.tmp"]}
                ]
            }),
            kind: ToolKind::Read,
            parallelizable: true,
            read_only: true,
        };
        Self { ws, decl }
    }
}

impl Tool for ListDirectoryTool {
    fn declaration(&self) -> &Declaration {
        &self.decl
    }

    fn build(&self, args: &Args) -> Result<Arc<dyn Invocation>, ToolError> {
        let given = str_arg(args, "dir_path")?;
        let target = Target::new(&self.ws, given)?;
        let path = target.path().to_path_buf();
        let mut set = GlobSetBuilder::new();
        let patterns: Vec<&str> = args
            .get("ignore")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if patterns.len() > super::pattern::MAX_IGNORE_PATTERNS {
            return Err(ToolError::invalid_params(format!(
                "argument 'ignore': {} patterns; at most {}",
                patterns.len(),
                super::pattern::MAX_IGNORE_PATTERNS
            )));
        }
        for (i, p) in patterns.iter().enumerate() {
            super::pattern::check_length(
                &format!("ignore/{i}"),
                p,
                super::pattern::MAX_GLOB_PATTERN_BYTES,
            )?;
            let glob = Glob::new(p).map_err(|e| {
                ToolError::invalid_params(format!(
                    "argument 'ignore/{i}': '{p}' is not a valid glob pattern: {e}"
                ))
            })?;
            set.add(glob);
        }
        let ignore = set
            .build()
            .map_err(|e| ToolError::invalid_params(format!("argument 'ignore': {e}")))?;
        let respect_git_ignore = args
            .get("respect_git_ignore")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        Ok(Arc::new(ListDirectory {
            target,
            display: self.ws.display(&path),
            path,
            ws: self.ws.clone(),
            ignore,
            respect_git_ignore,
        }))
    }
}

struct ListDirectory {
    target: Target,
    ws: Arc<Workspace>,
    path: PathBuf,
    display: String,
    ignore: GlobSet,
    respect_git_ignore: bool,
}

impl ListDirectory {
    fn list(&self, ctx: &ExecContext) -> Result<ToolOutcome, ToolError> {
        self.target.check()?;
        match self.target.metadata() {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(not_a_directory(&self.display)),
            Err(e) if is_not_found(&e) => {
                return Err(ToolError::new(
                    ErrorKind::FileNotFound,
                    format!(
                        "Directory not found: {}. List its parent directory to see what exists.",
                        self.display
                    ),
                ));
            }
            Err(e) => return Err(beneath_error(e, &self.display)),
        }
        let mut dirs = Vec::new();
        let mut files = Vec::new();
        let mut by_pattern = 0usize;
        let opts = WalkOptions {
            respect_git_ignore: self.respect_git_ignore,
            max_depth: Some(1),
        };
        let left = walk::walk(&self.ws, &self.path, opts, &ctx.token, |entry| {
            if self.ignore.is_match(&entry.rel) {
                by_pattern += 1;
            } else if entry.is_dir {
                dirs.push(entry.rel);
            } else {
                files.push(entry.rel);
            }
            Flow::Continue
        });
        if ctx.token.is_cancelled() {
            return Ok(ToolOutcome::Cancelled {
                partial_output: None,
            });
        }
        let total = dirs.len() + files.len();
        let mut out = format!("Directory listing for {}:\n", self.display);
        let mut shown = 0usize;
        let lines = dirs
            .iter()
            .map(|d| format!("[DIR] {d}\n"))
            .chain(files.iter().map(|f| format!("{f}\n")));
        for line in lines {
            if shown == MAX_LIST_ENTRIES || out.len() + line.len() > MAX_OUTPUT_BYTES {
                break;
            }
            out.push_str(&line);
            shown += 1;
        }
        if total == 0 {
            out.push_str("(empty)\n");
        }
        let mut notes = Vec::new();
        if shown < total {
            notes.push(format!(
                "Showing {shown} of {total} entries; list a subdirectory or use glob with a pattern to see the rest."
            ));
        }
        if by_pattern > 0 {
            notes.push(format!(
                "Left out {by_pattern} entr{} matching the ignore patterns.",
                if by_pattern == 1 { "y" } else { "ies" }
            ));
        }
        let hint = if self.respect_git_ignore {
            "; set respect_git_ignore to false to include git-ignored entries"
        } else {
            ""
        };
        let left_note = left.describe(hint);
        if !left_note.is_empty() {
            notes.push(left_note);
        }
        if !notes.is_empty() {
            out.push('\n');
            out.push_str(&notes.join("\n"));
            out.push('\n');
        }
        let mut result = Args::new();
        result.insert("directories".into(), json!(dirs.len()));
        result.insert("files".into(), json!(files.len()));
        result.insert("shown".into(), json!(shown));
        result.insert("ignored_by_pattern".into(), json!(by_pattern));
        left.to_result(&mut result);
        Ok(ToolOutcome::Success {
            output: Value::String(out),
            result,
        })
    }
}

impl Invocation for ListDirectory {
    fn subject(&self) -> Subject {
        Subject::File {
            path: self.display.clone(),
        }
    }

    fn confirmation(&self) -> Result<ConfirmationDetails, ToolError> {
        Ok(ConfirmationDetails::Info {
            prompt: format!("List {}", self.display),
        })
    }

    /// Nothing to report while it runs: the call gets no progress channel.
    fn reports_progress(&self) -> bool {
        false
    }

    fn execute(self: Arc<Self>, ctx: ExecContext) -> BoxFuture<ToolOutcome> {
        blocking(move || self.list(&ctx).unwrap_or_else(Into::into))
    }
}
