//! `grep_search` (Gemini CLI's wire name and parameters): lines matching a
//! regular expression (or a fixed string) in the files under `dir_path`,
//! searched with ripgrep's own crates (`grep-regex`, `grep-searcher`) over
//! the ignore-aware walk of [`super::walk`].
//!
//! Bounded: at most `total_max_matches` matching lines, lines cut at
//! [`MAX_MATCH_LINE_CHARS`] characters, the whole at the output byte limit;
//! the result says what was cut and how to get more. Binary files are
//! skipped and counted; UTF-16 files with a BOM are searched as text.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use globset::GlobMatcher;
use grep_regex::RegexMatcher;
use grep_searcher::{
    BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::file::{MAX_OUTPUT_BYTES, Target, blocking};
use super::glob::check_search_dir;
use super::walk::{self, Ended, Flow, WalkOptions};
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

/// Files up to this size are read whole, with one `read` (the size `fstat`
/// gave on the opened fd says when it got them all), into a buffer each
/// walk thread reuses, and searched as a slice; larger ones are streamed
/// through the searcher's buffer. It is that buffer's size in grep-searcher,
/// so a small file is searched the same either way (binary detection sees
/// all of it at once in both).
pub const SLICE_SEARCH_BYTES: usize = 64 * 1024;

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
        let matcher = super::pattern::glob(field, pattern, false)?;
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
        Ok(Arc::new(self.call(args)?))
    }
}

impl GrepTool {
    /// The call `args` describe, checked.
    fn call(&self, args: &Args) -> Result<GrepCall, ToolError> {
        let pattern = str_arg(args, "pattern")?.to_string();
        let flag = |key: &str| args.get(key).and_then(Value::as_bool).unwrap_or(false);
        let case_sensitive = flag("case_sensitive");
        let fixed_strings = flag("fixed_strings");
        let matcher = super::pattern::regex(&pattern, !case_sensitive, fixed_strings)?;
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
        Ok(GrepCall {
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
        })
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

/// One line of a file's result; the flag says it was cut at
/// [`MAX_MATCH_LINE_CHARS`].
enum Line {
    Match(u64, String, bool),
    Context(u64, String, bool),
    Break,
}

impl Line {
    fn was_cut(&self) -> bool {
        matches!(self, Line::Match(_, _, true) | Line::Context(_, _, true))
    }
}

/// Collects one file's matching lines for the searcher.
struct FileSink<'a> {
    lines: Vec<Line>,
    matches: usize,
    /// Matches this file may add: every file may contribute up to the cap;
    /// the merge in walk order cuts the file that reaches it.
    budget: usize,
    binary: bool,
    token: &'a CancellationToken,
}

impl Sink for FileSink<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, m: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        let (text, cut) = line_text(m.bytes());
        self.lines
            .push(Line::Match(m.line_number().unwrap_or(0), text, cut));
        self.matches += 1;
        Ok(self.matches < self.budget && !self.token.is_cancelled())
    }

    fn context(&mut self, _: &Searcher, c: &SinkContext<'_>) -> Result<bool, Self::Error> {
        if matches!(c.kind(), SinkContextKind::Before | SinkContextKind::After) {
            let (text, cut) = line_text(c.bytes());
            self.lines
                .push(Line::Context(c.line_number().unwrap_or(0), text, cut));
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

/// A file with matches, found by some walk thread.
struct Hit {
    /// The path as shown ("File: …").
    shown: String,
    lines: Vec<Line>,
    /// Matching lines in `lines` (1 with names_only).
    matches: usize,
    /// Bytes of its block in the output, uncut.
    block_len: usize,
}

/// A file that was not searched to the end, and why.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Skipped {
    Binary,
    /// Unreadable, not a regular file, or a line over the heap limit.
    Failed,
    /// It no longer resolved inside the workspace (or was a symlink now)
    /// when opened.
    MovedOut,
}

/// The files with matches every walk thread found, in walk order, and
/// where the result is certain to end.
#[derive(Default)]
struct Hits {
    found: BTreeMap<PathBuf, Hit>,
    /// The result ends at or before this file: files after it (in walk
    /// order) cannot be in it; they are not opened, and the walk stops.
    cut: Option<PathBuf>,
}

/// Where the merge of `found` in walk order stops: the first file that
/// reaches the cap on matches or would overflow the output. Files before it
/// that are not yet found can only make it stop earlier, so everything
/// after the returned path is certain to be left out.
fn stop_point(found: &BTreeMap<PathBuf, Hit>, max: usize) -> Option<&PathBuf> {
    let mut total = 0usize;
    let mut bytes = 0usize;
    for (path, hit) in found {
        if bytes + hit.block_len > MAX_OUTPUT_BYTES {
            return Some(path);
        }
        bytes += hit.block_len;
        total += hit.matches;
        if total >= max {
            return Some(path);
        }
    }
    None
}

/// One searching thread: its searcher (and buffers) are reused for every
/// file it is handed.
struct Searching<'a> {
    call: &'a GrepCall,
    token: &'a CancellationToken,
    hits: &'a Mutex<Hits>,
    /// Set once `hits.cut` is, so threads look at it without the lock
    /// until then.
    has_cut: &'a AtomicBool,
    searcher: Searcher,
    /// [`SLICE_SEARCH_BYTES`] + 1 bytes once the thread reads a file.
    buf: Vec<u8>,
    /// Files not searched to the end, with their path (walk order).
    skipped: Vec<(PathBuf, Skipped)>,
    /// Called with each file's path (relative to the search directory)
    /// before it is opened; tests cancel from it.
    on_file: &'a (dyn Fn(&str) + Sync),
}

impl Searching<'_> {
    /// Whether `path` lies after the cut (when there is one).
    fn beyond_cut(&self, path: &std::path::Path) -> bool {
        if !self.has_cut.load(Ordering::Acquire) {
            return false;
        }
        let hits = self.hits.lock().unwrap_or_else(|e| e.into_inner());
        hits.cut.as_deref().is_some_and(|cut| path > cut)
    }

    /// Searches `file` of `len` bytes (by `fstat`): read into the thread's
    /// buffer, usually with one `read` (no second one to see the end: the
    /// size says where it is), then searched as a slice. A file that grew
    /// since the `fstat` is searched as a stream, what was read first.
    fn search_small(
        &mut self,
        mut file: &File,
        len: usize,
        sink: &mut FileSink<'_>,
    ) -> std::io::Result<()> {
        if self.buf.len() <= SLICE_SEARCH_BYTES {
            self.buf = vec![0; SLICE_SEARCH_BYTES + 1];
        }
        let mut n = 0;
        // Asks for one byte more than fstat said: getting it means the file
        // grew; getting `len` bytes means this is all of it; a short read
        // is followed by another (a file that shrank ends with 0).
        while n <= len {
            match file.read(&mut self.buf[n..=len]) {
                Ok(0) => break,
                Ok(k) => {
                    n += k;
                    if n >= len {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let matcher = &self.call.matcher;
        if n > len {
            let read = std::io::Read::chain(&self.buf[..n], file);
            self.searcher.search_reader(matcher, read, sink)
        } else {
            self.searcher.search_slice(matcher, &self.buf[..n], sink)
        }
    }

    fn add_hit(&self, path: PathBuf, hit: Hit) {
        let mut hits = self.hits.lock().unwrap_or_else(|e| e.into_inner());
        hits.found.insert(path, hit);
        let stop = stop_point(&hits.found, self.call.max).cloned();
        if let Some(stop) = stop {
            // Files after the stop point were searched in vain; drop them.
            let mut after = hits.found.split_off(&stop);
            if let Some(hit) = after.remove(&stop) {
                hits.found.insert(stop.clone(), hit);
            }
            hits.cut = Some(stop);
            self.has_cut.store(true, Ordering::Release);
        }
    }
}

impl walk::Visitor for Searching<'_> {
    fn visit(&mut self, entry: &walk::Found<'_>) -> Flow {
        if self.beyond_cut(entry.path) {
            // Everything below a directory after the cut is after it too.
            return if entry.is_dir {
                Flow::Skip
            } else {
                Flow::Continue
            };
        }
        let call = self.call;
        if !entry.is_file
            || call
                .include
                .as_ref()
                .is_some_and(|g| !g.is_match(&entry.rel))
            || call
                .exclude
                .as_ref()
                .is_some_and(|g| g.is_match(&entry.rel))
        {
            return Flow::Continue;
        }
        (self.on_file)(&entry.rel);
        // Opened beneath the workspace root, not following a symlink: in
        // the directory's fd the walk listed it through, so a directory on
        // the way swapped for a symlink out since then is not followed, and
        // the file swapped for a symlink is refused at the open.
        let file = match entry.open() {
            Ok(f) => f,
            Err(BeneathError::Outside { .. } | BeneathError::Symlink { .. }) => {
                self.skipped
                    .push((entry.path.to_path_buf(), Skipped::MovedOut));
                return Flow::Continue;
            }
            Err(_) => {
                self.skipped
                    .push((entry.path.to_path_buf(), Skipped::Failed));
                return Flow::Continue;
            }
        };
        // The type is checked on the opened fd: a FIFO swapped in would
        // never end.
        let len = match file.metadata() {
            Ok(m) if m.is_file() => m.len(),
            _ => {
                self.skipped
                    .push((entry.path.to_path_buf(), Skipped::Failed));
                return Flow::Continue;
            }
        };
        let mut sink = FileSink {
            lines: Vec::new(),
            matches: 0,
            budget: if call.names_only { 1 } else { call.max },
            binary: false,
            token: self.token,
        };
        let searched = match usize::try_from(len) {
            Ok(len) if len <= SLICE_SEARCH_BYTES => self.search_small(&file, len, &mut sink),
            _ => self.searcher.search_file(&call.matcher, &file, &mut sink),
        };
        drop(file);
        if searched.is_err() {
            self.skipped
                .push((entry.path.to_path_buf(), Skipped::Failed));
        } else if sink.binary {
            self.skipped
                .push((entry.path.to_path_buf(), Skipped::Binary));
        } else if sink.matches > 0 {
            let shown = walk::join_display(&call.display, &entry.rel);
            let matches = if call.names_only { 1 } else { sink.matches };
            let block_len = call.block(&shown, &sink.lines).len();
            self.add_hit(
                entry.path.to_path_buf(),
                Hit {
                    shown,
                    lines: sink.lines,
                    matches,
                    block_len,
                },
            );
        }
        if self.token.is_cancelled() || self.has_cut.load(Ordering::Acquire) {
            // Cancelled, or the result is known to end at a file already
            // handed out: the walk stops handing out more.
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

impl GrepCall {
    fn run(&self, ctx: &ExecContext) -> Result<ToolOutcome, ToolError> {
        self.search(&ctx.token, &|_| {})
    }

    /// The searcher every walk thread gets a copy of.
    fn searcher(&self) -> Searcher {
        SearcherBuilder::new()
            .line_number(true)
            .before_context(if self.names_only { 0 } else { self.context })
            .after_context(if self.names_only { 0 } else { self.context })
            .binary_detection(BinaryDetection::quit(b'\x00'))
            .bom_sniffing(true)
            .heap_limit(Some(MAX_SEARCH_LINE_BYTES))
            .build()
    }

    /// A file's block of the output.
    fn block(&self, shown: &str, lines: &[Line]) -> String {
        let mut block = String::new();
        if self.names_only {
            block.push_str(shown);
            block.push('\n');
            return block;
        }
        block.push_str("File: ");
        block.push_str(shown);
        block.push('\n');
        for line in lines {
            match line {
                Line::Match(n, t, _) => block.push_str(&format!("L{n}: {t}\n")),
                Line::Context(n, t, _) => block.push_str(&format!("L{n}- {t}\n")),
                Line::Break => block.push_str("--\n"),
            }
        }
        block.push_str("---\n");
        block
    }

    /// Searches the files of the walk, handed out in path order (the
    /// sequential walk sorted by file name) to one thread per core, then
    /// merges the files with matches in that order, so the result is the
    /// same whatever thread found what: the first `max` matching lines in
    /// that order. Once the result is known to end at some file, the walk
    /// stops handing out files.
    fn search(
        &self,
        token: &CancellationToken,
        on_file: &(dyn Fn(&str) + Sync),
    ) -> Result<ToolOutcome, ToolError> {
        self.target.check()?;
        check_search_dir(&self.target)?;
        let opts = WalkOptions {
            respect_git_ignore: true,
            max_depth: None,
        };
        let hits = Mutex::new(Hits::default());
        let has_cut = AtomicBool::new(false);
        let make = || Searching {
            call: self,
            token,
            hits: &hits,
            has_cut: &has_cut,
            searcher: self.searcher(),
            buf: Vec::new(),
            skipped: Vec::new(),
            on_file,
        };
        let (mut left, ended, threads) = walk::walk_files(&self.ws, &self.path, opts, token, &make);
        if ended == Ended::Cancelled || token.is_cancelled() {
            return Ok(ToolOutcome::Cancelled {
                partial_output: None,
            });
        }
        let found = std::mem::take(&mut hits.lock().unwrap_or_else(|e| e.into_inner()).found);
        let mut body = String::new();
        let mut total = 0usize;
        let mut files = 0usize;
        let mut cut_lines = 0usize;
        let mut capped = false;
        let mut budget_hit = false;
        let mut stopped_at: Option<PathBuf> = None;
        for (path, mut hit) in found {
            if !self.names_only && total + hit.matches > self.max {
                // The file that reaches the cap keeps the lines up to the
                // last match that fits, as a search stopped there would.
                let keep = self.max - total;
                let mut seen = 0;
                let end = hit
                    .lines
                    .iter()
                    .position(|l| {
                        if matches!(l, Line::Match(..)) {
                            seen += 1;
                        }
                        seen == keep
                    })
                    .map_or(hit.lines.len(), |i| i + 1);
                hit.lines.truncate(end);
                hit.matches = keep;
            }
            let block = self.block(&hit.shown, &hit.lines);
            if body.len() + block.len() > MAX_OUTPUT_BYTES {
                budget_hit = true;
                stopped_at = Some(path);
                break;
            }
            body.push_str(&block);
            files += 1;
            total += hit.matches;
            cut_lines += hit.lines.iter().filter(|l| l.was_cut()).count();
            if total >= self.max {
                capped = true;
                stopped_at = Some(path);
                break;
            }
        }
        let mut binary_files = 0usize;
        let mut failed_files = 0usize;
        let mut moved_out = 0usize;
        for (path, why) in threads.iter().flat_map(|t| &t.skipped) {
            if stopped_at.as_ref().is_some_and(|s| path > s) {
                continue;
            }
            match why {
                Skipped::Binary => binary_files += 1,
                Skipped::Failed => failed_files += 1,
                Skipped::MovedOut => moved_out += 1,
            }
        }
        if capped || budget_hit {
            // The search stopped there: what follows was not counted.
            left.ignored = None;
            left.examples.clear();
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
                "{moved_out} file(s) no longer resolved inside the workspace, or had become symlinks, when opened and were skipped."
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

    /// Nothing to report while it runs: the call gets no progress channel.
    fn reports_progress(&self) -> bool {
        false
    }

    fn execute(self: Arc<Self>, ctx: ExecContext) -> BoxFuture<ToolOutcome> {
        blocking(move || self.run(&ctx).unwrap_or_else(Into::into))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(root: &std::path::Path) -> GrepTool {
        GrepTool::new(Arc::new(Workspace::new(root).unwrap()))
    }

    fn output(tool: &GrepTool, args: Value) -> (String, Args) {
        let call = tool.call(args.as_object().unwrap()).unwrap();
        match call.search(&CancellationToken::new(), &|_| {}).unwrap() {
            ToolOutcome::Success { output, result } => {
                (output.as_str().unwrap().to_string(), result)
            }
            other => panic!("{other:?}"),
        }
    }

    fn put(root: &std::path::Path, rel: &str, content: &[u8]) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    /// Files are taken in walk order (a sequential walk sorted by file
    /// name: `a/` before `a-b/` before `a.b`, though byte order of the
    /// whole path would put `a/x.txt` last), whichever thread searched
    /// them; the file that reaches the cap keeps the lines up to it, and
    /// what lies after the cut (the binary file) is not counted.
    #[test]
    fn matches_come_in_walk_order_and_the_cap_cuts_the_same_file_as_a_sequential_search() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        put(root, "a/x.txt", b"hit 1\nmiss\nhit 2\n");
        put(root, "a-b/x.txt", b"hit 3\n");
        put(root, "a.b", b"hit 4\n");
        put(root, "b/c/d.txt", b"hit 5\nhit 6\nhit 7\n");
        put(root, "b/c.txt", b"hit 8\n");
        put(root, "bin.dat", b"hit\x00\n");
        put(root, "z.txt", b"hit 9\n");
        let t = tool(root);
        let (out, result) = output(&t, json!({"pattern": "hit", "total_max_matches": 5}));
        assert_eq!(
            out,
            "Found 5 match(es) in 4 file(s) for pattern \"hit\" in path \".\":\n---\n\
             File: a/x.txt\nL1: hit 1\nL3: hit 2\n---\n\
             File: a-b/x.txt\nL1: hit 3\n---\n\
             File: a.b\nL1: hit 4\n---\n\
             File: b/c/d.txt\nL1: hit 5\n---\n\n\
             Results were limited to the first 5 matching lines; the search stopped there. To see more, raise total_max_matches (at most 2000), or narrow the search with dir_path or include_pattern.\n"
        );
        assert_eq!(result["ignored_entries"], json!(null));
        assert_eq!(result["binary_files_skipped"], json!(0));
        let (out, result) = output(&t, json!({"pattern": "hit", "context": 1}));
        assert_eq!(
            out,
            "Found 9 match(es) in 6 file(s) for pattern \"hit\" in path \".\":\n---\n\
             File: a/x.txt\nL1: hit 1\nL2- miss\nL3: hit 2\n---\n\
             File: a-b/x.txt\nL1: hit 3\n---\n\
             File: a.b\nL1: hit 4\n---\n\
             File: b/c/d.txt\nL1: hit 5\nL2: hit 6\nL3: hit 7\n---\n\
             File: b/c.txt\nL1: hit 8\n---\n\
             File: z.txt\nL1: hit 9\n---\n\n\
             1 binary file(s) were skipped.\n"
        );
        assert_eq!(result["ignored_entries"], json!(0));
    }

    /// Many files with matches over nested directories, a .gitignore'd
    /// directory and binary files, searched on every core: the capped
    /// result is the first files in path order, the same on every run, and
    /// a prefix of the uncapped result; the ignored count is that of the
    /// tree.
    #[test]
    fn a_parallel_search_is_deterministic_and_capped_in_path_order() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join(".git")).unwrap();
        put(root, ".gitignore", b"skip/\n*.log\n");
        let mut paths = Vec::new();
        for d in 0..30 {
            for f in 0..20 {
                let rel = format!("d{d}/s{}/f{f}.txt", f % 3);
                put(root, &rel, format!("x\nneedle {d} {f}\n").as_bytes());
                paths.push(PathBuf::from(rel));
            }
            put(root, &format!("d{d}/b.bin"), b"needle\x00");
            put(root, &format!("d{d}/n.log"), b"needle\n");
        }
        put(root, "skip/f.txt", b"needle\n");
        paths.sort();
        let expected: Vec<String> = paths
            .iter()
            .take(50)
            .map(|p| format!("File: {}", p.display()))
            .collect();
        let t = tool(root);
        let files_of = |out: &str| -> Vec<String> {
            out.lines()
                .filter(|l| l.starts_with("File: "))
                .map(str::to_string)
                .collect()
        };
        let (first, _) = output(&t, json!({"pattern": "needle", "total_max_matches": 50}));
        assert_eq!(files_of(&first), expected);
        for _ in 0..5 {
            let (again, _) = output(&t, json!({"pattern": "needle", "total_max_matches": 50}));
            assert_eq!(again, first);
        }
        let (all, result) = output(&t, json!({"pattern": "needle", "total_max_matches": 2000}));
        assert_eq!(files_of(&all).len(), 600);
        assert_eq!(files_of(&all)[..50], expected[..]);
        assert_eq!(result["binary_files_skipped"], json!(30));
        // skip/ and the 30 *.log files.
        assert_eq!(result["ignored_entries"], json!(31));
        let (names, _) = output(
            &t,
            json!({"pattern": "needle", "names_only": true, "total_max_matches": 7}),
        );
        let listed: Vec<&str> = names.lines().skip(1).take(7).collect();
        let want: Vec<String> = paths
            .iter()
            .take(7)
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(listed, want);
    }

    /// Cancelled while the walk threads search (from the first file opened):
    /// the call ends Cancelled and every other thread stops after its file.
    #[test]
    fn cancellation_mid_walk_ends_cancelled() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in 0..20 {
            for f in 0..20 {
                put(root, &format!("d{d:02}/f{f:02}.txt"), b"needle\n");
            }
        }
        let t = tool(root);
        let call = t
            .call(json!({"pattern": "needle"}).as_object().unwrap())
            .unwrap();
        let token = CancellationToken::new();
        let opened = std::sync::atomic::AtomicUsize::new(0);
        let outcome = call
            .search(&token, &|_| {
                if opened.fetch_add(1, Ordering::Relaxed) == 0 {
                    token.cancel();
                }
            })
            .unwrap();
        assert_eq!(
            outcome,
            ToolOutcome::Cancelled {
                partial_output: None
            }
        );
        // Every thread stops after the file it is on: the first file, and
        // at most one more per other thread, of 400.
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(12));
        let opened = opened.load(Ordering::Relaxed);
        assert!((1..=threads).contains(&opened), "{opened} files opened");
    }
}
