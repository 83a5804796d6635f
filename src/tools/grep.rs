//! `grep_search` (Gemini CLI's wire name and parameters): lines matching a
//! regular expression (or a fixed string) in the files under `dir_path`,
//! searched with ripgrep's own crates (`grep-regex`, `grep-searcher`) over
//! the ignore-aware walk of [`super::walk`].
//!
//! Bounded: at most `total_max_matches` matching lines, lines cut at
//! [`MAX_MATCH_LINE_CHARS`] characters, the whole at the output byte limit;
//! the result says what was cut and how to get more. Binary files are
//! skipped and counted; UTF-16 files with a BOM are searched as text.

use std::path::PathBuf;
use std::sync::Arc;

use globset::{GlobBuilder, GlobMatcher};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{
    BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::file::{MAX_OUTPUT_BYTES, Target, blocking};
use super::glob::check_search_dir;
use super::walk::{self, Flow, WalkOptions};
use super::{
    Args, BoxFuture, ConfirmationDetails, Declaration, ExecContext, Invocation, Subject, Tool,
    ToolError, ToolKind, ToolOutcome, opt_str_arg, opt_u64_arg, str_arg,
};
use crate::sandbox::{BeneathError, Workspace};

/// Matching lines returned when `total_max_matches` is not given.
pub const DEFAULT_TOTAL_MAX_MATCHES: u64 = 100;
/// The most `total_max_matches` may ask for (the output limit cuts earlier
/// when lines are long).
pub const MAX_TOTAL_MATCHES: u64 = 2000;
/// Most lines of context before and after a match.
pub const MAX_CONTEXT: u64 = 10;
/// Characters kept of one matching or context line.
pub const MAX_MATCH_LINE_CHARS: usize = 500;
/// Longest line the searcher buffers; a file with a longer one is skipped
/// and counted (ripgrep's heap limit).
pub const MAX_SEARCH_LINE_BYTES: usize = 64 * 1024 * 1024;

/// `grep_search`: searches file contents.
pub struct GrepTool {
    ws: Arc<Workspace>,
    decl: Declaration,
}

impl GrepTool {
    /// The tool over the workspace `ws`; every path it is given resolves
    /// inside it.
    pub fn new(ws: Arc<Workspace>) -> Self {
        let decl = Declaration {
            name: "grep_search".into(),
            description: format!(
                "Searches the contents of files under a directory for a regular expression (Rust/ripgrep syntax) or, with fixed_strings, a literal text. Returns matching lines as 'File: path' then 'L<line>: text' (context lines as 'L<line>- text'), at most total_max_matches lines (default {DEFAULT_TOTAL_MAX_MATCHES}), each cut at {MAX_MATCH_LINE_CHARS} characters. Files ignored by .gitignore or the project ignore files ({}) and binary files are skipped and counted.",
                walk::PROJECT_IGNORE_FILES.join(", ")
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "minLength": 1, "description": "Regular expression to search for, e.g. 'fn\\s+main' (or the exact text with fixed_strings)."},
                    "dir_path": {"type": "string", "minLength": 1, "description": "Directory to search in, relative to the workspace root. Default: the workspace root."},
                    "include_pattern": {"type": "string", "minLength": 1, "description": "Only search files matching this glob, e.g. '*.rs' (a pattern without '/' matches file names) or 'src/**/*.{ts,tsx}'."},
                    "exclude_pattern": {"type": "string", "minLength": 1, "description": "Skip files matching this glob, e.g. '*_test.go'."},
                    "case_sensitive": {"type": "boolean", "description": "Match letter case exactly. Default false."},
                    "fixed_strings": {"type": "boolean", "description": "Treat pattern as literal text, not a regular expression. Default false."},
                    "context": {"type": "integer", "minimum": 0, "maximum": MAX_CONTEXT, "description": "Lines of context to show before and after each match. Default 0."},
                    "names_only": {"type": "boolean", "description": "Return only the paths of files that contain a match. Default false."},
                    "total_max_matches": {"type": "integer", "minimum": 1, "maximum": MAX_TOTAL_MATCHES, "description": format!("Most matching lines (or, with names_only, files) to return. Default {DEFAULT_TOTAL_MAX_MATCHES}.")}
                },
                "required": ["pattern"],
                "additionalProperties": false,
                "examples": [
                    {"pattern": "fn main"},
                    {"pattern": "hello", "dir_path": "src", "include_pattern": "*.rs", "context": 1},
                    {"pattern": "TODO", "fixed_strings": true, "names_only": true, "total_max_matches": 10}
                ]
            }),
            kind: ToolKind::Search,
            parallelizable: true,
            read_only: true,
        };
        Self { ws, decl }
    }
}

/// A glob of `include_pattern` / `exclude_pattern`, with ripgrep's `--glob`
/// rule: a pattern without `/` matches the file name at any depth.
struct PathGlob {
    matcher: GlobMatcher,
    name_only: bool,
}

impl PathGlob {
    fn new(field: &str, pattern: &str) -> Result<Self, ToolError> {
        let matcher = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| {
                ToolError::invalid_params(format!(
                    "argument '{field}': '{pattern}' is not a valid glob: {e}"
                ))
            })?
            .compile_matcher();
        Ok(Self {
            matcher,
            name_only: !pattern.contains('/'),
        })
    }

    fn is_match(&self, rel: &str) -> bool {
        if self.name_only {
            let name = rel.rsplit('/').next().unwrap_or(rel);
            self.matcher.is_match(name)
        } else {
            self.matcher.is_match(rel)
        }
    }
}

impl Tool for GrepTool {
    fn declaration(&self) -> &Declaration {
        &self.decl
    }

    fn build(&self, args: &Args) -> Result<Arc<dyn Invocation>, ToolError> {
        let pattern = str_arg(args, "pattern")?.to_string();
        let flag = |key: &str| args.get(key).and_then(Value::as_bool).unwrap_or(false);
        let case_sensitive = flag("case_sensitive");
        let fixed_strings = flag("fixed_strings");
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(!case_sensitive)
            .fixed_strings(fixed_strings)
            .crlf(true)
            .line_terminator(Some(b'\n'))
            .build(&pattern)
            .map_err(|e| {
                ToolError::invalid_params(format!(
                    "argument 'pattern': not a valid regular expression: {e}. Fix the pattern, or set fixed_strings to true to search for the text literally."
                ))
            })?;
        let include = opt_str_arg(args, "include_pattern")
            .map(|p| PathGlob::new("include_pattern", p))
            .transpose()?;
        let exclude = opt_str_arg(args, "exclude_pattern")
            .map(|p| PathGlob::new("exclude_pattern", p))
            .transpose()?;
        let dir = opt_str_arg(args, "dir_path").unwrap_or(".");
        let target = Target::new(&self.ws, dir)?;
        let path = target.path().to_path_buf();
        let filter = [
            opt_str_arg(args, "include_pattern").map(|p| format!("include: \"{p}\"")),
            opt_str_arg(args, "exclude_pattern").map(|p| format!("exclude: \"{p}\"")),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ");
        Ok(Arc::new(GrepCall {
            target,
            ws: self.ws.clone(),
            display: self.ws.display(&path),
            path,
            pattern,
            matcher,
            include,
            exclude,
            filter,
            context: opt_u64_arg(args, "context").unwrap_or(0).min(MAX_CONTEXT) as usize,
            names_only: flag("names_only"),
            max: opt_u64_arg(args, "total_max_matches")
                .unwrap_or(DEFAULT_TOTAL_MAX_MATCHES)
                .clamp(1, MAX_TOTAL_MATCHES) as usize,
        }))
    }
}

struct GrepCall {
    target: Target,
    ws: Arc<Workspace>,
    path: PathBuf,
    display: String,
    pattern: String,
    matcher: RegexMatcher,
    include: Option<PathGlob>,
    exclude: Option<PathGlob>,
    /// "include: …, exclude: …" for the header.
    filter: String,
    context: usize,
    names_only: bool,
    max: usize,
}

/// One line of a file's result.
enum Line {
    Match(u64, String),
    Context(u64, String),
    Break,
}

/// Collects one file's matching lines for the searcher.
struct FileSink<'a> {
    lines: Vec<Line>,
    matches: usize,
    /// Matches this file may still add before the total cap.
    budget: usize,
    binary: bool,
    cut_lines: usize,
    token: &'a CancellationToken,
}

impl FileSink<'_> {
    fn text(&mut self, bytes: &[u8]) -> String {
        let (text, cut) = line_text(bytes);
        if cut {
            self.cut_lines += 1;
        }
        text
    }
}

impl Sink for FileSink<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, m: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        let text = self.text(m.bytes());
        self.lines
            .push(Line::Match(m.line_number().unwrap_or(0), text));
        self.matches += 1;
        Ok(self.matches < self.budget && !self.token.is_cancelled())
    }

    fn context(&mut self, _: &Searcher, c: &SinkContext<'_>) -> Result<bool, Self::Error> {
        if matches!(c.kind(), SinkContextKind::Before | SinkContextKind::After) {
            let text = self.text(c.bytes());
            self.lines
                .push(Line::Context(c.line_number().unwrap_or(0), text));
        }
        Ok(!self.token.is_cancelled())
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, Self::Error> {
        self.lines.push(Line::Break);
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _: u64) -> Result<bool, Self::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// A line as text without its line break, cut at [`MAX_MATCH_LINE_CHARS`].
/// Bytes that are not UTF-8 are decoded as windows-1252 and the line says
/// so, rather than showing U+FFFD.
fn line_text(bytes: &[u8]) -> (String, bool) {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    let (mut text, legacy) = match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_string(), false),
        Err(_) => (
            encoding_rs::WINDOWS_1252
                .decode_without_bom_handling(bytes)
                .0
                .into_owned(),
            true,
        ),
    };
    let mut cut = false;
    if let Some((i, _)) = text.char_indices().nth(MAX_MATCH_LINE_CHARS) {
        let chars = text.chars().count();
        text.truncate(i);
        text.push_str(&format!("... [line truncated, {chars} characters]"));
        cut = true;
    }
    if legacy {
        text.push_str(" [not UTF-8; shown as windows-1252]");
    }
    (text, cut)
}

impl GrepCall {
    fn run(&self, ctx: &ExecContext) -> Result<ToolOutcome, ToolError> {
        self.target.check()?;
        check_search_dir(&self.target)?;
        let mut searcher = SearcherBuilder::new()
            .line_number(true)
            .before_context(if self.names_only { 0 } else { self.context })
            .after_context(if self.names_only { 0 } else { self.context })
            .binary_detection(BinaryDetection::quit(b'\x00'))
            .bom_sniffing(true)
            .heap_limit(Some(MAX_SEARCH_LINE_BYTES))
            .build();
        let mut body = String::new();
        let mut total = 0usize;
        let mut files = 0usize;
        let mut binary_files = 0usize;
        let mut failed_files = 0usize;
        let mut moved_out = 0usize;
        let mut cut_lines = 0usize;
        let mut capped = false;
        let mut budget_hit = false;
        let opts = WalkOptions {
            respect_git_ignore: true,
            max_depth: None,
        };
        let left = walk::walk(&self.ws, &self.path, opts, &ctx.token, |entry| {
            if !entry.is_file
                || self
                    .include
                    .as_ref()
                    .is_some_and(|g| !g.is_match(&entry.rel))
                || self
                    .exclude
                    .as_ref()
                    .is_some_and(|g| g.is_match(&entry.rel))
            {
                return Flow::Continue;
            }
            // Opened beneath the workspace root: a directory on the way
            // swapped for a symlink out since the walk listed it (or a link
            // whose target moved out) is refused at the open, not followed.
            let file = match self.ws.open_beneath(&entry.target) {
                Ok(f) => f,
                Err(BeneathError::Outside { .. }) => {
                    moved_out += 1;
                    return Flow::Continue;
                }
                Err(_) => {
                    failed_files += 1;
                    return Flow::Continue;
                }
            };
            // The type is checked on the opened fd: a FIFO swapped in would
            // never end.
            if !file.metadata().is_ok_and(|m| m.is_file()) {
                failed_files += 1;
                return Flow::Continue;
            }
            let mut sink = FileSink {
                lines: Vec::new(),
                matches: 0,
                budget: if self.names_only { 1 } else { self.max - total },
                binary: false,
                cut_lines: 0,
                token: &ctx.token,
            };
            if searcher
                .search_file(&self.matcher, &file, &mut sink)
                .is_err()
            {
                failed_files += 1;
                return Flow::Continue;
            }
            if sink.binary {
                binary_files += 1;
                return Flow::Continue;
            }
            if sink.matches == 0 {
                return if ctx.token.is_cancelled() {
                    Flow::Stop
                } else {
                    Flow::Continue
                };
            }
            let shown = walk::join_display(&self.display, &entry.rel);
            let mut block = String::new();
            if self.names_only {
                block.push_str(&shown);
                block.push('\n');
            } else {
                block.push_str(&format!("File: {shown}\n"));
                for line in &sink.lines {
                    match line {
                        Line::Match(n, t) => block.push_str(&format!("L{n}: {t}\n")),
                        Line::Context(n, t) => block.push_str(&format!("L{n}- {t}\n")),
                        Line::Break => block.push_str("--\n"),
                    }
                }
                block.push_str("---\n");
            }
            if body.len() + block.len() > MAX_OUTPUT_BYTES {
                budget_hit = true;
                return Flow::Stop;
            }
            body.push_str(&block);
            files += 1;
            total += if self.names_only { 1 } else { sink.matches };
            cut_lines += sink.cut_lines;
            if total >= self.max {
                capped = true;
                return Flow::Stop;
            }
            if ctx.token.is_cancelled() {
                Flow::Stop
            } else {
                Flow::Continue
            }
        });
        if ctx.token.is_cancelled() {
            return Ok(ToolOutcome::Cancelled {
                partial_output: None,
            });
        }
        let filter = if self.filter.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.filter)
        };
        let what = if self.names_only {
            format!("{files} file(s) with matches")
        } else {
            format!("{total} match(es) in {files} file(s)")
        };
        let mut out = if total == 0 {
            format!(
                "No matches found for pattern \"{}\" in path \"{}\"{filter}.\n",
                self.pattern, self.display
            )
        } else {
            format!(
                "Found {what} for pattern \"{}\" in path \"{}\"{filter}:\n{}",
                self.pattern,
                self.display,
                if self.names_only { "" } else { "---\n" }
            )
        };
        out.push_str(&body);
        let mut notes = Vec::new();
        if capped {
            notes.push(format!(
                "Results were limited to the first {} {}; the search stopped there. To see more, raise total_max_matches (at most {MAX_TOTAL_MATCHES}), or narrow the search with dir_path or include_pattern.",
                self.max,
                if self.names_only { "files" } else { "matching lines" }
            ));
        }
        if budget_hit {
            notes.push(format!(
                "Results were cut at {MAX_OUTPUT_BYTES} bytes of output; the search stopped there. Narrow the search with dir_path, include_pattern or a more specific pattern."
            ));
        }
        if cut_lines > 0 {
            notes.push(format!(
                "{cut_lines} line(s) longer than {MAX_MATCH_LINE_CHARS} characters were cut; read them with read_file."
            ));
        }
        if binary_files > 0 {
            notes.push(format!("{binary_files} binary file(s) were skipped."));
        }
        if moved_out > 0 {
            notes.push(format!(
                "{moved_out} file(s) no longer resolved inside the workspace when opened and were skipped."
            ));
        }
        if failed_files > 0 {
            notes.push(format!(
                "{failed_files} file(s) could not be searched (unreadable, or a line longer than {MAX_SEARCH_LINE_BYTES} bytes)."
            ));
        }
        let left_note = left.describe("");
        if !left_note.is_empty() {
            notes.push(left_note);
        }
        if !notes.is_empty() {
            out.push('\n');
            out.push_str(&notes.join("\n"));
            out.push('\n');
        }
        let mut result = Args::new();
        result.insert("matches".into(), json!(total));
        result.insert("files".into(), json!(files));
        result.insert("truncated".into(), json!(capped || budget_hit));
        result.insert("binary_files_skipped".into(), json!(binary_files));
        left.to_result(&mut result);
        Ok(ToolOutcome::Success {
            output: Value::String(out),
            result,
        })
    }
}

impl Invocation for GrepCall {
    fn subject(&self) -> Subject {
        Subject::File {
            path: self.display.clone(),
        }
    }

    fn confirmation(&self) -> Result<ConfirmationDetails, ToolError> {
        Ok(ConfirmationDetails::Info {
            prompt: format!("Search for \"{}\" in {}", self.pattern, self.display),
        })
    }

    fn execute(self: Arc<Self>, ctx: ExecContext) -> BoxFuture<ToolOutcome> {
        blocking(move || self.run(&ctx).unwrap_or_else(Into::into))
    }
}
