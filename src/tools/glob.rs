//! `glob` (Gemini CLI's wire name and parameters): files whose path
//! relative to `dir_path` matches a glob pattern (`globset`, the matcher of
//! ripgrep), recently modified ones first as in Gemini CLI, with the ignore
//! rules of [`super::walk`].

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use globset::GlobMatcher;
use serde_json::{Value, json};

use super::file::{
    MAX_OUTPUT_BYTES, Target, beneath_error, blocking, is_not_found, not_a_directory,
};
use super::walk::{self, Flow, WalkOptions};
use super::{
    Args, BoxFuture, ConfirmationDetails, Declaration, ErrorKind, ExecContext, Invocation, Subject,
    Tool, ToolError, ToolKind, ToolOutcome, opt_str_arg, str_arg,
};
use crate::sandbox::Workspace;

/// Paths returned by one call; the rest are counted.
pub const MAX_GLOB_RESULTS: usize = 500;

/// Files modified this recently come first, newest first (Gemini CLI's
/// recency window); older ones follow in path order.
pub const RECENT_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// `glob`: finds files by path pattern.
pub struct GlobTool {
    ws: Arc<Workspace>,
    decl: Declaration,
}

impl GlobTool {
    /// The tool over the workspace `ws`; every path it is given resolves
    /// inside it.
    pub fn new(ws: Arc<Workspace>) -> Self {
        let decl = Declaration {
            name: "glob".into(),
            description: format!(
                "Finds files whose path (relative to dir_path) matches a glob pattern such as 'src/**/*.rs' or '*.md' ('*' stays within one directory, '**' crosses directories, '{{a,b}}' alternates). Returns paths relative to the workspace root, files modified in the last 24 hours first (newest first), then the rest in path order; at most {MAX_GLOB_RESULTS}. Entries ignored by .gitignore or the project ignore files ({}) are left out and counted.",
                walk::PROJECT_IGNORE_FILES.join(", ")
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "minLength": 1, "description": "Glob pattern matched against each file's path relative to dir_path, e.g. '**/*.py' or 'docs/*.md'."},
                    "dir_path": {"type": "string", "minLength": 1, "description": "Directory to search in, relative to the workspace root. Default: the workspace root."},
                    "case_sensitive": {"type": "boolean", "description": "Match letter case exactly. Default false."},
                    "respect_git_ignore": {"type": "boolean", "description": "Leave out files ignored by .gitignore. Default true."}
                },
                "required": ["pattern"],
                "additionalProperties": false,
                "examples": [
                    {"pattern": "**/*.rs"},
                    {"pattern": "*.md", "dir_path": ".", "case_sensitive": true}
                ]
            }),
            kind: ToolKind::Search,
            parallelizable: true,
            read_only: true,
        };
        Self { ws, decl }
    }
}

impl Tool for GlobTool {
    fn declaration(&self) -> &Declaration {
        &self.decl
    }

    fn build(&self, args: &Args) -> Result<Arc<dyn Invocation>, ToolError> {
        let pattern = str_arg(args, "pattern")?.to_string();
        // Before anything repeats or compiles it.
        super::pattern::check_length("pattern", &pattern, super::pattern::MAX_GLOB_PATTERN_BYTES)?;
        let case_sensitive = args
            .get("case_sensitive")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let respect_git_ignore = args
            .get("respect_git_ignore")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        if Path::new(&pattern).is_absolute()
            || Path::new(&pattern)
                .components()
                .any(|c| c == Component::ParentDir)
        {
            return Err(ToolError::invalid_params(format!(
                "argument 'pattern': '{pattern}' must be relative to dir_path and must not contain '..'. Put the directory in dir_path and the file pattern in pattern."
            )));
        }
        let matcher = super::pattern::glob("pattern", &pattern, !case_sensitive)?;
        let dir = opt_str_arg(args, "dir_path").unwrap_or(".");
        let target = Target::new(&self.ws, dir)?;
        let path = target.path().to_path_buf();
        Ok(Arc::new(GlobCall {
            target,
            display: self.ws.display(&path),
            path,
            ws: self.ws.clone(),
            pattern,
            matcher,
            respect_git_ignore,
        }))
    }
}

struct GlobCall {
    target: Target,
    ws: Arc<Workspace>,
    path: PathBuf,
    display: String,
    pattern: String,
    matcher: GlobMatcher,
    respect_git_ignore: bool,
}

/// `search_path_not_found` / `path_is_not_a_directory` for a search root,
/// looked up beneath the workspace root.
pub(crate) fn check_search_dir(target: &Target) -> Result<(), ToolError> {
    let display = target.display();
    match target.metadata() {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(not_a_directory(&display)),
        Err(e) if is_not_found(&e) => Err(ToolError::new(
            ErrorKind::SearchPathNotFound,
            format!(
                "Search path not found: {display}. Pass an existing directory in dir_path (omit it to search the whole workspace)."
            ),
        )),
        Err(e) => Err(beneath_error(e, &display)),
    }
}

impl GlobCall {
    fn run(&self, ctx: &ExecContext) -> Result<ToolOutcome, ToolError> {
        self.target.check()?;
        check_search_dir(&self.target)?;
        let mut found: Vec<(String, Option<SystemTime>)> = Vec::new();
        let opts = WalkOptions {
            respect_git_ignore: self.respect_git_ignore,
            max_depth: None,
        };
        let left = walk::walk(&self.ws, &self.path, opts, &ctx.token, |entry| {
            if !entry.is_dir && self.matcher.is_match(&entry.rel) {
                let modified = self
                    .ws
                    .metadata_beneath(&entry.target)
                    .ok()
                    .and_then(|m| m.modified().ok())
                    .map(|t| t.into_std());
                found.push((walk::join_display(&self.display, &entry.rel), modified));
            }
            Flow::Continue
        });
        if ctx.token.is_cancelled() {
            return Ok(ToolOutcome::Cancelled {
                partial_output: None,
            });
        }
        let now = SystemTime::now();
        let recent = |m: &Option<SystemTime>| {
            m.and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age <= RECENT_WINDOW)
        };
        found.sort_by(|a, b| match (recent(&a.1), recent(&b.1)) {
            (true, true) => b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)),
            (true, false) => std::cmp::Ordering::Less,
            (false, true) => std::cmp::Ordering::Greater,
            (false, false) => a.0.cmp(&b.0),
        });
        let total = found.len();
        let hint = if self.respect_git_ignore {
            "; set respect_git_ignore to false to include git-ignored files"
        } else {
            ""
        };
        let left_note = left.describe(hint);
        let mut out = if total == 0 {
            format!(
                "No files found matching pattern \"{}\" within \"{}\".\n",
                self.pattern, self.display
            )
        } else {
            format!(
                "Found {total} file(s) matching \"{}\" within \"{}\", sorted by modification time (newest first):\n",
                self.pattern, self.display
            )
        };
        let mut shown = 0usize;
        for (path, _) in &found {
            if shown == MAX_GLOB_RESULTS || out.len() + path.len() + 1 > MAX_OUTPUT_BYTES {
                break;
            }
            out.push_str(path);
            out.push('\n');
            shown += 1;
        }
        if shown < total {
            out.push_str(&format!(
                "\nShowing {shown} of {total} files; {} more not shown. Narrow the pattern or dir_path to see them.\n",
                total - shown
            ));
        }
        if !left_note.is_empty() {
            out.push_str(&format!("\n{left_note}\n"));
        }
        let mut result = Args::new();
        result.insert("matches".into(), json!(total));
        result.insert("shown".into(), json!(shown));
        left.to_result(&mut result);
        Ok(ToolOutcome::Success {
            output: Value::String(out),
            result,
        })
    }
}

impl Invocation for GlobCall {
    fn subject(&self) -> Subject {
        Subject::File {
            path: self.display.clone(),
        }
    }

    fn confirmation(&self) -> Result<ConfirmationDetails, ToolError> {
        Ok(ConfirmationDetails::Info {
            prompt: format!("Find files matching {} in {}", self.pattern, self.display),
        })
    }

    /// Nothing to report while it runs: the call gets no progress channel.
    fn reports_progress(&self) -> bool {
        false
    }

    fn execute(self: Arc<Self>, ctx: ExecContext) -> BoxFuture<ToolOutcome> {
        blocking(move || self.run(&ctx).unwrap_or_else(Into::into))
    }
}
