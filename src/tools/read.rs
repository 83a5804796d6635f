//! `read_file` (Gemini CLI's wire name and parameters): a window of a text
//! file's lines in its detected encoding, "binary file, N bytes" for binary
//! files, and images and PDF as inline data.
//!
//! The file is streamed, never held whole: a 200 MB log costs one chunk of
//! memory, and what comes back is bounded by lines, characters per line and
//! bytes, with a note saying what was cut and how to read on.

use std::fs::File;
use std::io::{Read, Seek};

use std::sync::Arc;

use base64::Engine;
use serde_json::{Value, json};

use super::encoding::{self, NotText, Sniffed, TextEncoding};
use super::file::{MAX_OUTPUT_BYTES, Target, blocking, is_directory, not_regular};
use super::{
    Args, BoxFuture, ConfirmationDetails, Declaration, ErrorKind, ExecContext, Invocation, Subject,
    Tool, ToolError, ToolKind, ToolOutcome, opt_u64_arg, str_arg,
};
use crate::sandbox::Workspace;

/// Lines returned by one call (Gemini CLI's default window).
pub const DEFAULT_MAX_LINES: u64 = 2000;
/// Characters kept of one line; the rest is cut and counted (Gemini CLI's).
pub const MAX_LINE_CHARS: usize = 2000;
/// Files larger than this are refused (`file_too_large`): even streamed,
/// counting their lines would hold the call for too long.
pub const MAX_READ_BYTES: u64 = 512 * 1024 * 1024;
/// Images and PDF larger than this are refused: their base64 must fit in one
/// gRPC message of a default client (4 MiB) with room to spare.
pub const MAX_INLINE_BYTES: u64 = 2 * 1024 * 1024;
/// Files up to this size are read with one `read` into memory and decoded
/// there; larger ones are streamed in passes over the fd. Most source files
/// are smaller, and for them the passes' `lseek`s and reads and the 64 KiB
/// chunk buffers cost more than the file itself.
const READ_WHOLE_BYTES: u64 = 64 * 1024;
/// Lines longer than [`MAX_LINE_CHARS`] named one by one in the note.
const CUT_LINES_NAMED: usize = 5;

/// `read_file`: a text file's lines (`start_line`..=`end_line`, 1-based).
pub struct ReadFileTool {
    ws: Arc<Workspace>,
    decl: Declaration,
    /// Whole outputs of shell commands, readable by the path the shell
    /// tool's response names (the one place outside the workspace).
    kept: Option<Arc<super::kept::OutputKeeper>>,
}

impl ReadFileTool {
    /// The tool over the workspace `ws`; every path it is given resolves
    /// inside it.
    pub fn new(ws: Arc<Workspace>) -> Self {
        let decl = Declaration {
            name: "read_file".into(),
            description: format!(
                "Reads a file in the workspace. Text comes back in its detected encoding (UTF-8, UTF-8 or UTF-16 with BOM, or a legacy encoding such as windows-1252, which is named), at most {DEFAULT_MAX_LINES} lines and {MAX_LINE_CHARS} characters per line at a time; use start_line and end_line (1-based, inclusive) to read a part or to continue. Binary files come back as 'binary file, N bytes'; images and PDF files (up to {MAX_INLINE_BYTES} bytes) as inline data with their MIME type."
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "minLength": 1, "description": "Path of the file, relative to the workspace root (or absolute inside it), or the path of a command's whole output that run_shell_command named."},
                    "start_line": {"type": "integer", "minimum": 1, "description": "First line to read, 1-based. Default 1."},
                    "end_line": {"type": "integer", "minimum": 1, "description": format!("Last line to read, 1-based, inclusive. Default: start_line + {}.", DEFAULT_MAX_LINES - 1)}
                },
                "required": ["file_path"],
                "additionalProperties": false,
                "examples": [
                    {"file_path": "README.md"},
                    {"file_path": "src/main.rs", "start_line": 1, "end_line": 2}
                ]
            }),
            kind: ToolKind::Read,
            parallelizable: true,
            read_only: true,
        };
        Self {
            ws,
            decl,
            kept: None,
        }
    }

    /// Also reads the kept outputs of `kept` (by their exact paths).
    pub fn with_kept_output(mut self, kept: Option<Arc<super::kept::OutputKeeper>>) -> Self {
        self.kept = kept;
        self
    }
}

impl Tool for ReadFileTool {
    fn declaration(&self) -> &Declaration {
        &self.decl
    }

    fn build(&self, args: &Args) -> Result<Arc<dyn Invocation>, ToolError> {
        let given = str_arg(args, "file_path")?;
        let kept = self.kept.as_ref().and_then(|k| k.lookup_owned(given));
        let (target, display) = match kept {
            Some((path, owner)) => {
                let display = path.display().to_string();
                (Source::Kept(path, owner), display)
            }
            None => {
                let target = Target::new(&self.ws, given)?;
                let display = self.ws.display(target.path());
                (Source::Workspace(target), display)
            }
        };
        let start = opt_u64_arg(args, "start_line");
        let end = opt_u64_arg(args, "end_line");
        if let (Some(s), Some(e)) = (start, end)
            && s > e
        {
            return Err(ToolError::invalid_params(format!(
                "argument 'start_line' ({s}) must not be greater than 'end_line' ({e}). Send start_line <= end_line."
            )));
        }
        Ok(Arc::new(ReadFile {
            target,
            display,
            start,
            end,
        }))
    }
}

/// What a read opens: a workspace file, or a kept shell output.
enum Source {
    Workspace(Target),
    /// A kept output and the session whose command kept it.
    Kept(std::path::PathBuf, String),
}

impl Source {
    fn blocking_io(&self) -> bool {
        match self {
            Self::Workspace(t) => t.workspace().blocking_io(),
            Self::Kept(..) => false,
        }
    }

    fn open(&self, display: &str) -> Result<std::fs::File, ToolError> {
        match self {
            Self::Workspace(t) => t.open_unchanged(),
            Self::Kept(path, _) => {
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(path)
                    .map_err(|e| ToolError::io(&e, display))
            }
        }
    }
}

struct ReadFile {
    target: Source,
    display: String,
    start: Option<u64>,
    end: Option<u64>,
}

impl Invocation for ReadFile {
    fn subject(&self) -> Subject {
        Subject::File {
            path: self.display.clone(),
        }
    }

    fn confirmation(&self) -> Result<ConfirmationDetails, ToolError> {
        Ok(ConfirmationDetails::Info {
            prompt: format!("Read {}", self.display),
        })
    }

    /// A file of at most [`READ_WHOLE_BYTES`] is opened and read on the
    /// runtime thread: on a local filesystem that is a few microseconds, less
    /// than the hand-off to the blocking pool (two thread wakeups), the
    /// largest cost of a small read under load. Larger files are streamed on
    /// the blocking pool; with [`Workspace::blocking_io`] (a network
    /// filesystem, where an open can stall) every read is.
    /// Nothing to report while it runs: the call gets no progress channel.
    fn reports_progress(&self) -> bool {
        false
    }

    fn execute(self: Arc<Self>, ctx: ExecContext) -> BoxFuture<ToolOutcome> {
        if let Source::Kept(_, owner) = &self.target
            && **owner != *ctx.session
        {
            // Another session's kept output: as if the path were not there.
            let e = ToolError::new(
                ErrorKind::PathNotInWorkspace,
                format!(
                    "{} is not a kept output of this session; read_file reads only the workspace and this session's kept outputs.",
                    self.display
                ),
            );
            return Box::pin(async move { e.into() });
        }
        if self.target.blocking_io() {
            return blocking(move || {
                self.open_checked()
                    .and_then(|file| self.read(file, &ctx))
                    .unwrap_or_else(Into::into)
            });
        }
        Box::pin(async move {
            let file = match self.open_checked() {
                Ok(file) => file,
                Err(e) => return e.into(),
            };
            if file.size <= READ_WHOLE_BYTES {
                match self.read_whole(&file, &ctx) {
                    Ok(Some(outcome)) => return outcome,
                    Err(e) => return e.into(),
                    Ok(None) => {} // it grew since the stat: streamed below
                }
            }
            blocking(move || self.read_streamed(file, &ctx).unwrap_or_else(Into::into)).await
        })
    }
}

/// The file a call reads, opened and checked: a regular file within
/// [`MAX_READ_BYTES`].
struct Opened {
    file: File,
    size: u64,
}

impl ReadFile {
    /// Opens the file the call was built (and approved) for, beneath the
    /// root, and checks what it is. One fd serves every later pass: the
    /// type and size checked are those of the file read, and a directory
    /// swapped for a symlink after the check cannot redirect any pass.
    fn open_checked(&self) -> Result<Opened, ToolError> {
        let file = self.target.open(&self.display)?;
        let meta = file
            .metadata()
            .map_err(|e| ToolError::io(&e, &self.display))?;
        if meta.is_dir() {
            return Err(is_directory(&self.display, "read_file"));
        }
        if !meta.is_file() {
            return Err(not_regular(&self.display, "read_file"));
        }
        let size = meta.len();
        if size > MAX_READ_BYTES {
            return Err(ToolError::new(
                ErrorKind::FileTooLarge,
                format!(
                    "{} is {size} bytes, over the {MAX_READ_BYTES}-byte limit of read_file. Use grep_search to find the lines you need.",
                    self.display
                ),
            ));
        }
        Ok(Opened { file, size })
    }

    fn read(&self, opened: Opened, ctx: &ExecContext) -> Result<ToolOutcome, ToolError> {
        if opened.size <= READ_WHOLE_BYTES
            && let Some(outcome) = self.read_whole(&opened, ctx)?
        {
            return Ok(outcome);
        }
        self.read_streamed(opened, ctx)
    }

    /// A file of at most [`READ_WHOLE_BYTES`] (by its stat) read with one
    /// `read` and decoded in memory; `None` when it has grown past that
    /// since, for [`ReadFile::read_streamed`] (on the blocking pool).
    fn read_whole(
        &self,
        opened: &Opened,
        ctx: &ExecContext,
    ) -> Result<Option<ToolOutcome>, ToolError> {
        let file = &opened.file;
        // One more byte than the stat said: the read that returns 0 ends it.
        let mut bytes = Vec::with_capacity(opened.size as usize + 1);
        file.take(READ_WHOLE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| ToolError::io(&e, &self.display))?;
        if bytes.len() as u64 > READ_WHOLE_BYTES {
            return Ok(None);
        }
        self.read_in_memory(&bytes, ctx).map(Some)
    }

    /// The file streamed in passes over its fd, at most [`MAX_READ_BYTES`]
    /// of it however much it grows meanwhile.
    fn read_streamed(&self, opened: Opened, ctx: &ExecContext) -> Result<ToolOutcome, ToolError> {
        let io = |e: std::io::Error| ToolError::io(&e, &self.display);
        let Opened { file, size } = opened;
        // Each pass reads the same fd from its start.
        let open = || -> std::io::Result<std::io::Take<&File>> {
            let mut f = &file;
            f.rewind()?;
            Ok(f.take(MAX_READ_BYTES))
        };
        let mut head = Vec::new();
        open()
            .map_err(io)?
            .take(encoding::SNIFF_BYTES as u64)
            .read_to_end(&mut head)
            .map_err(io)?;
        if let Sniffed::Media(mime) = encoding::sniff(&head) {
            let reader = open().map_err(io)?;
            return self.inline(reader, mime, size);
        }
        let enc = match encoding::detect_stream(open).map_err(io)? {
            Ok(enc) => enc,
            Err(not_text) => return Ok(binary(size, not_text)),
        };
        let (start, end) = self.window();
        let mut window = LineWindow::new(start, end);
        let mut reader = open().map_err(io)?;
        // UTF-16 is decoded to the end (its line breaks are two bytes); an
        // ASCII-compatible encoding stops decoding once the window is full.
        let stop_early = enc.ascii_compatible();
        let decoded = encoding::decode_stream(&mut reader, enc, |text| {
            window.push(text);
            !(ctx.token.is_cancelled() || stop_early && window.done())
        })
        .map_err(io)?;
        if let Err(not_text) = decoded {
            return Ok(binary(size, not_text));
        }
        // Count the remaining lines from the raw bytes, where `\n` is 0x0A.
        if stop_early && window.done() {
            let mut chunk = vec![0u8; encoding::CHUNK_BYTES];
            loop {
                let n = reader.read(&mut chunk).map_err(io)?;
                if n == 0 || ctx.token.is_cancelled() {
                    break;
                }
                window.count_raw(&chunk[..n]);
            }
        }
        if ctx.token.is_cancelled() {
            return Ok(ToolOutcome::Cancelled {
                partial_output: None,
            });
        }
        window.finish();
        self.text_outcome(window, enc, start)
    }

    /// [`ReadFile::read`] for a file held whole in memory: the same sniff,
    /// detection and decoding as the streamed passes, without their
    /// syscalls and chunk buffers.
    fn read_in_memory(&self, bytes: &[u8], ctx: &ExecContext) -> Result<ToolOutcome, ToolError> {
        let size = bytes.len() as u64;
        if let Sniffed::Media(mime) = encoding::sniff(bytes) {
            return self.inline(bytes, mime, size);
        }
        let decoded = match encoding::decode(bytes) {
            Ok(decoded) => decoded,
            Err(not_text) => return Ok(binary(size, not_text)),
        };
        let (start, end) = self.window();
        let mut window = LineWindow::new(start, end);
        window.push(&decoded.text);
        if ctx.token.is_cancelled() {
            return Ok(ToolOutcome::Cancelled {
                partial_output: None,
            });
        }
        window.finish();
        self.text_outcome(window, decoded.encoding, start)
    }

    /// The requested window, capped at [`DEFAULT_MAX_LINES`] lines.
    fn window(&self) -> (u64, u64) {
        let start = self.start.unwrap_or(1);
        let last = start.saturating_add(DEFAULT_MAX_LINES - 1);
        let end = self.end.map_or(last, |e| e.min(last));
        (start, end)
    }

    fn text_outcome(
        &self,
        w: LineWindow,
        enc: TextEncoding,
        start: u64,
    ) -> Result<ToolOutcome, ToolError> {
        let total = w.total_lines;
        if total > 0 && start > total {
            return Err(ToolError::invalid_params(format!(
                "argument 'start_line' ({start}) is past the end of {}, which has {total} lines. Send a start_line between 1 and {total}.",
                self.display
            )));
        }
        let shown_end = w.shown_end;
        let partial = start > 1 || shown_end < total || !w.cut.is_empty();
        let mut notes = Vec::new();
        if partial {
            notes.push("IMPORTANT: The file content has been truncated.".to_string());
            if shown_end >= start {
                notes.push(format!(
                    "Status: Showing lines {start}-{shown_end} of {total} total lines of {}.",
                    self.display
                ));
            } else {
                notes.push(format!(
                    "Status: Showing no lines of {} ({total} total lines).",
                    self.display
                ));
            }
            if w.budget_hit {
                notes.push(format!(
                    "The window was cut at {MAX_OUTPUT_BYTES} bytes of output."
                ));
            }
            if shown_end < total {
                notes.push(format!(
                    "Action: To read more of the file, call read_file again with start_line: {}.",
                    shown_end + 1
                ));
            }
            if !w.cut.is_empty() {
                let named: Vec<String> = w
                    .cut
                    .iter()
                    .take(CUT_LINES_NAMED)
                    .map(|(line, chars)| format!("line {line} has {chars}"))
                    .collect();
                notes.push(format!(
                    "{} line(s) longer than {MAX_LINE_CHARS} characters were cut after {MAX_LINE_CHARS} characters and marked '... [line truncated]' ({}{}). Use grep_search to find text in them.",
                    w.cut.len(),
                    named.join(", "),
                    if w.cut.len() > CUT_LINES_NAMED { ", …" } else { "" }
                ));
            }
        }
        if enc != TextEncoding::Utf8 {
            notes.push(format!(
                "Encoding: {}. The text below is decoded; edits keep the file's encoding.",
                enc.name()
            ));
        }
        let output = if notes.is_empty() {
            w.out
        } else {
            let sep = if partial {
                "--- FILE CONTENT (truncated) ---"
            } else {
                "--- FILE CONTENT ---"
            };
            format!("{}\n\n{sep}\n{}", notes.join("\n"), w.out)
        };
        let mut result = Args::new();
        result.insert("encoding".into(), json!(enc.name()));
        result.insert("total_lines".into(), json!(total));
        result.insert("start_line".into(), json!(start));
        result.insert("end_line".into(), json!(shown_end));
        result.insert("truncated".into(), json!(partial));
        result.insert("cut_lines".into(), json!(w.cut.len()));
        result.insert("crlf_lines".into(), json!(w.crlf_lines));
        Ok(ToolOutcome::Success {
            output: Value::String(output),
            result,
        })
    }

    /// An image or PDF as Gemini's inline data part.
    fn inline(&self, reader: impl Read, mime: &str, size: u64) -> Result<ToolOutcome, ToolError> {
        if size > MAX_INLINE_BYTES {
            return Err(ToolError::new(
                ErrorKind::FileTooLarge,
                format!(
                    "{} is a {mime} file of {size} bytes, over the {MAX_INLINE_BYTES}-byte limit for inline data. Ask for a smaller version of it.",
                    self.display
                ),
            ));
        }
        let mut bytes = Vec::new();
        reader
            .take(MAX_INLINE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| ToolError::io(&e, &self.display))?;
        if bytes.len() as u64 > MAX_INLINE_BYTES {
            return Err(ToolError::new(
                ErrorKind::FileTooLarge,
                format!(
                    "{} grew past the {MAX_INLINE_BYTES}-byte limit for inline data while it was read.",
                    self.display
                ),
            ));
        }
        let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
        let mut result = Args::new();
        result.insert("mime_type".into(), json!(mime));
        result.insert("size_bytes".into(), json!(bytes.len()));
        Ok(ToolOutcome::Success {
            output: json!({"inlineData": {"mimeType": mime, "data": data}}),
            result,
        })
    }
}

/// "binary file, N bytes" as a Success (Gemini CLI does not fail on them).
fn binary(size: u64, why: NotText) -> ToolOutcome {
    let mut result = Args::new();
    result.insert("binary".into(), json!(true));
    result.insert("size_bytes".into(), json!(size));
    let output = match why {
        NotText::Binary | NotText::Media(_) => format!("binary file, {size} bytes"),
        NotText::Undecodable { reason } => {
            result.insert("reason".into(), json!(reason));
            format!("binary file, {size} bytes ({reason}; no text encoding decodes it)")
        }
    };
    ToolOutcome::Success {
        output: Value::String(output),
        result,
    }
}

/// Collects the lines `start..=end` of a stream of decoded text, each cut at
/// [`MAX_LINE_CHARS`], the whole cut at [`MAX_OUTPUT_BYTES`], and counts all
/// lines. A line is shown without its `\r\n` / `\n`, followed by `\n` when
/// the file had a line break there.
struct LineWindow {
    start: u64,
    end: u64,
    /// 1-based number of the line being read.
    line: u64,
    /// Characters of the current line seen so far.
    chars: usize,
    /// The current line's kept text (only inside the window).
    current: String,
    /// Whether the current line has any character (for the last line).
    started: bool,
    /// Whether the current line's text so far ends in `\r`.
    ends_cr: bool,
    out: String,
    /// Last line appended to `out` (start - 1 when none).
    shown_end: u64,
    /// (line, characters) of every line cut at MAX_LINE_CHARS.
    cut: Vec<(u64, usize)>,
    budget_hit: bool,
    total_lines: u64,
    crlf_lines: u64,
}

impl LineWindow {
    fn new(start: u64, end: u64) -> Self {
        Self {
            start,
            end,
            line: 1,
            chars: 0,
            current: String::new(),
            started: false,
            ends_cr: false,
            out: String::new(),
            shown_end: start - 1,
            cut: Vec::new(),
            budget_hit: false,
            total_lines: 0,
            crlf_lines: 0,
        }
    }

    /// Every line of the window has been collected (or the budget is spent).
    fn done(&self) -> bool {
        self.budget_hit || self.line > self.end
    }

    fn in_window(&self) -> bool {
        self.line >= self.start && self.line <= self.end && !self.budget_hit
    }

    fn push(&mut self, text: &str) {
        let mut rest = text;
        while !rest.is_empty() {
            let (part, newline) = match rest.find('\n') {
                Some(i) => (&rest[..i], Some(i)),
                None => (rest, None),
            };
            if !part.is_empty() {
                self.started = true;
                self.ends_cr = part.ends_with('\r');
                if self.in_window() {
                    let room = MAX_LINE_CHARS.saturating_sub(self.chars);
                    if room > 0 {
                        match part.char_indices().nth(room) {
                            Some((i, _)) => self.current.push_str(&part[..i]),
                            None => self.current.push_str(part),
                        }
                    }
                    self.chars += part.chars().count();
                }
            }
            match newline {
                Some(i) => {
                    self.end_line(true);
                    rest = &rest[i + 1..];
                }
                None => break,
            }
        }
    }

    /// Counts the line breaks of raw bytes after the window is complete.
    /// `\r\n` breaks are counted too (a `\r` ending the previous chunk
    /// included), so `crlf_lines` is the same as when every line is decoded.
    fn count_raw(&mut self, bytes: &[u8]) {
        let mut previous_cr = self.ends_cr;
        for &b in bytes {
            if b == b'\n' {
                self.total_lines += 1;
                self.line += 1;
                if previous_cr {
                    self.crlf_lines += 1;
                }
            }
            previous_cr = b == b'\r';
        }
        if let Some(&last) = bytes.last() {
            self.started = last != b'\n';
            self.ends_cr = previous_cr;
        }
    }

    fn end_line(&mut self, had_break: bool) {
        let crlf = had_break && self.ends_cr;
        if crlf {
            self.crlf_lines += 1;
        }
        if self.in_window() {
            let mut text = std::mem::take(&mut self.current);
            let mut chars = self.chars;
            if crlf {
                chars -= 1;
                if text.ends_with('\r') {
                    text.pop();
                }
            }
            if chars > MAX_LINE_CHARS {
                self.cut.push((self.line, chars));
                text.push_str("... [line truncated]");
            }
            if self.out.len() + text.len() + 1 > MAX_OUTPUT_BYTES {
                self.budget_hit = true;
            } else {
                self.out.push_str(&text);
                if had_break {
                    self.out.push('\n');
                }
                self.shown_end = self.line;
            }
        }
        self.current.clear();
        self.chars = 0;
        self.started = false;
        self.ends_cr = false;
        self.total_lines += 1;
        self.line += 1;
    }

    /// The last line when the file does not end with a line break.
    fn finish(&mut self) {
        if self.started {
            self.end_line(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(text: &str, start: u64, end: u64) -> LineWindow {
        let mut w = LineWindow::new(start, end);
        for chunk in text.as_bytes().chunks(3) {
            w.push(std::str::from_utf8(chunk).unwrap());
        }
        w.finish();
        w
    }

    #[test]
    fn window_keeps_final_newline_state_and_strips_crlf() {
        let w = window("a\r\nb\r\nc", 1, 10);
        assert_eq!(w.out, "a\nb\nc");
        assert_eq!((w.total_lines, w.shown_end, w.crlf_lines), (3, 3, 2));
        let w = window("a\nb\n", 2, 2);
        assert_eq!(w.out, "b\n");
        assert_eq!((w.total_lines, w.shown_end), (2, 2));
        assert_eq!(window("", 1, 10).total_lines, 0);
    }

    /// Both paths of [`ReadFile::read`] (whole in memory, streamed in
    /// passes) give the same outcome for the same bytes, in every encoding.
    #[test]
    fn in_memory_and_streamed_reads_agree() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Arc::new(Workspace::new(dir.path()).unwrap());
        let (progress, _rx) = crate::tools::ProgressSender::channel();
        let ctx = ExecContext {
            token: Default::default(),
            progress,
            timeout: std::time::Duration::from_secs(10),
            output: Default::default(),
            sandbox: Default::default(),
            session: "s".into(),
        };
        let big = 2 * READ_WHOLE_BYTES as usize;
        let line = "caf\u{e9} line\r\n";
        let text: String = line.repeat(big / line.len() + 1);
        let utf16: Vec<u8> = [0xFF, 0xFE]
            .into_iter()
            .chain(text.encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        let (latin1, _, _) = encoding_rs::WINDOWS_1252.encode(&text);
        let mut binary = text.clone().into_bytes();
        binary[10] = 0;
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("utf8", text.clone().into_bytes()),
            ("utf16", utf16),
            ("latin1", latin1.into_owned()),
            ("binary", binary),
            (
                "bad-utf16",
                [&[0xFF, 0xFE][..], &[0x00, 0xD8, b'a', 0]]
                    .concat()
                    .repeat(big / 4),
            ),
        ];
        for (name, bytes) in cases {
            assert!(bytes.len() as u64 > READ_WHOLE_BYTES, "{name}");
            std::fs::write(dir.path().join(name), &bytes).unwrap();
            let read = ReadFile {
                target: Source::Workspace(Target::new(&ws, name).unwrap()),
                display: name.to_string(),
                start: Some(2),
                end: Some(40),
            };
            let streamed = read.read(read.open_checked().unwrap(), &ctx).unwrap();
            let whole = read.read_in_memory(&bytes, &ctx).unwrap();
            assert_eq!(streamed, whole, "{name}");
        }
    }

    #[test]
    fn long_lines_are_cut_and_counted() {
        let long = "x".repeat(MAX_LINE_CHARS + 10);
        let w = window(&format!("{long}\nshort\n"), 1, 10);
        assert_eq!(w.cut, vec![(1, MAX_LINE_CHARS + 10)]);
        assert!(w.out.starts_with(&"x".repeat(MAX_LINE_CHARS)));
        assert!(w.out.contains("... [line truncated]\nshort\n"));
    }
}
