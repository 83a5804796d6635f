//! Built-in file tools: `read_file`, `list_directory`, `write_file`, with
//! Gemini CLI's wire names and parameters.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{
    Args, BoxFuture, ConfirmationDetails, Declaration, ErrorKind, ExecContext, Invocation,
    Subject, Tool, ToolError, ToolKind, ToolOutcome, opt_u64_arg, str_arg,
};
use crate::sandbox::{PathError, Workspace};

/// Lines returned by one `read_file` call when no window is given.
pub const DEFAULT_MAX_LINES: u64 = 2000;
/// Characters kept of one line; longer lines are cut and marked.
pub const MAX_LINE_CHARS: usize = 2000;
/// Files larger than this are refused by `read_file` (`file_too_large`).
pub const MAX_READ_BYTES: u64 = 20 * 1024 * 1024;

fn path_error(e: PathError) -> ToolError {
    match e {
        PathError::OutsideWorkspace { .. } => {
            ToolError::new(ErrorKind::PathNotInWorkspace, e.to_string())
        }
        PathError::Empty | PathError::Nul { .. } => ToolError::invalid_params(e.to_string()),
        PathError::Io { .. } => ToolError::new(ErrorKind::UnhandledException, e.to_string()),
    }
}

/// Runs blocking file work off the async runtime.
fn blocking<F>(f: F) -> BoxFuture<ToolOutcome>
where
    F: FnOnce() -> ToolOutcome + Send + 'static,
{
    Box::pin(async move {
        tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
            ToolError::new(ErrorKind::UnhandledException, format!("tool task failed: {e}")).into()
        })
    })
}

// === impl ReadFileTool ===

/// `read_file`: a text file's lines (`start_line`..=`end_line`, 1-based).
pub struct ReadFileTool {
    ws: Arc<Workspace>,
    decl: Declaration,
}

impl ReadFileTool {
    pub fn new(ws: Arc<Workspace>) -> Self {
        let decl = Declaration {
            name: "read_file".into(),
            description: format!(
                "Reads a text file from the workspace and returns its content. By default at most {DEFAULT_MAX_LINES} lines are returned; use start_line and end_line (1-based, inclusive) to read a window of a larger file. The result says which lines were shown and how to read more."
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "minLength": 1, "description": "Path of the file, relative to the workspace root (or absolute inside it)."},
                    "start_line": {"type": "integer", "minimum": 1, "description": "First line to read, 1-based."},
                    "end_line": {"type": "integer", "minimum": 1, "description": "Last line to read, 1-based, inclusive."}
                },
                "required": ["file_path"],
                "additionalProperties": false
            }),
            kind: ToolKind::Read,
            parallelizable: true,
            read_only: true,
        };
        Self { ws, decl }
    }
}

impl Tool for ReadFileTool {
    fn declaration(&self) -> &Declaration {
        &self.decl
    }

    fn build(&self, args: &Args) -> Result<Arc<dyn Invocation>, ToolError> {
        let given = str_arg(args, "file_path")?;
        let path = self.ws.resolve(given).map_err(path_error)?;
        let start = opt_u64_arg(args, "start_line");
        let end = opt_u64_arg(args, "end_line");
        if let (Some(s), Some(e)) = (start, end)
            && s > e
        {
            return Err(ToolError::invalid_params(format!(
                "argument 'start_line' ({s}) must not be greater than 'end_line' ({e})"
            )));
        }
        Ok(Arc::new(ReadFile {
            display: self.ws.display(&path),
            path,
            start,
            end,
        }))
    }
}

struct ReadFile {
    path: PathBuf,
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

    fn execute(self: Arc<Self>, _ctx: ExecContext) -> BoxFuture<ToolOutcome> {
        blocking(move || match self.read() {
            Ok((output, result)) => ToolOutcome::Success {
                output: Value::String(output),
                result,
            },
            Err(e) => e.into(),
        })
    }
}

impl ReadFile {
    fn read(&self) -> Result<(String, Args), ToolError> {
        let meta = std::fs::metadata(&self.path).map_err(|e| ToolError::io(&e, &self.display))?;
        if meta.is_dir() {
            return Err(ToolError::new(
                ErrorKind::TargetIsDirectory,
                format!(
                    "{} is a directory, not a file. Use list_directory to see its entries.",
                    self.display
                ),
            ));
        }
        if meta.len() > MAX_READ_BYTES {
            return Err(ToolError::new(
                ErrorKind::FileTooLarge,
                format!(
                    "{} is {} bytes, over the {MAX_READ_BYTES}-byte limit of read_file. Use grep_search to find the part you need.",
                    self.display,
                    meta.len()
                ),
            ));
        }
        let bytes = std::fs::read(&self.path).map_err(|e| ToolError::io(&e, &self.display))?;
        if bytes.iter().take(8192).any(|&b| b == 0) {
            let mut result = Args::new();
            result.insert("binary".into(), json!(true));
            result.insert("size_bytes".into(), json!(bytes.len()));
            return Ok((format!("binary file, {} bytes", bytes.len()), result));
        }
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        let total = lines.len() as u64;
        let start = self.start.unwrap_or(1).max(1);
        let end = self
            .end
            .unwrap_or(start + DEFAULT_MAX_LINES - 1)
            .min(start + DEFAULT_MAX_LINES - 1)
            .min(total);
        let mut out = String::new();
        let mut cut_lines = 0u64;
        if start <= end {
            for line in &lines[(start - 1) as usize..end as usize] {
                if line.chars().count() > MAX_LINE_CHARS {
                    cut_lines += 1;
                    out.extend(line.chars().take(MAX_LINE_CHARS));
                    out.push_str("... [line truncated]");
                } else {
                    out.push_str(line);
                }
                out.push('\n');
            }
        }
        let shown_all = start == 1 && end == total && cut_lines == 0;
        if !shown_all {
            let mut note = format!(
                "[Showing lines {start}-{end} of {total} from {}",
                self.display
            );
            if cut_lines > 0 {
                note.push_str(&format!(
                    "; {cut_lines} lines longer than {MAX_LINE_CHARS} characters were cut"
                ));
            }
            if end < total {
                note.push_str(&format!(
                    ". To read more, call read_file with start_line={}",
                    end + 1
                ));
            }
            note.push_str("]\n");
            out = note + &out;
        }
        let mut result = Args::new();
        result.insert("total_lines".into(), json!(total));
        result.insert("start_line".into(), json!(start));
        result.insert("end_line".into(), json!(end));
        Ok((out, result))
    }
}

// === impl ListDirectoryTool ===

/// `list_directory`: the entries of one directory, directories first.
pub struct ListDirectoryTool {
    ws: Arc<Workspace>,
    decl: Declaration,
}

impl ListDirectoryTool {
    pub fn new(ws: Arc<Workspace>) -> Self {
        let decl = Declaration {
            name: "list_directory".into(),
            description: "Lists the files and subdirectories of a directory in the workspace, directories first, each name marked [DIR] when it is a directory.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "dir_path": {"type": "string", "minLength": 1, "description": "Directory to list, relative to the workspace root ('.' for the root)."}
                },
                "required": ["dir_path"],
                "additionalProperties": false
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
        let path = self.ws.resolve(given).map_err(path_error)?;
        Ok(Arc::new(ListDirectory {
            display: self.ws.display(&path),
            path,
        }))
    }
}

struct ListDirectory {
    path: PathBuf,
    display: String,
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

    fn execute(self: Arc<Self>, _ctx: ExecContext) -> BoxFuture<ToolOutcome> {
        blocking(move || {
            let entries = match std::fs::read_dir(&self.path) {
                Ok(rd) => rd,
                Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
                    return ToolError::new(
                        ErrorKind::InvalidToolParams,
                        format!("{} is a file, not a directory. Use read_file to read it.", self.display),
                    )
                    .into();
                }
                Err(e) => return ToolError::io(&e, &self.display).into(),
            };
            let mut dirs = Vec::new();
            let mut files = Vec::new();
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                match entry.file_type() {
                    Ok(t) if t.is_dir() => dirs.push(name),
                    _ => files.push(name),
                }
            }
            dirs.sort();
            files.sort();
            let mut out = format!("Directory listing for {}:\n", self.display);
            for d in &dirs {
                out.push_str(&format!("[DIR] {d}\n"));
            }
            for f in &files {
                out.push_str(f);
                out.push('\n');
            }
            let mut result = Args::new();
            result.insert("directories".into(), json!(dirs.len()));
            result.insert("files".into(), json!(files.len()));
            ToolOutcome::Success {
                output: Value::String(out),
                result,
            }
        })
    }
}

// === impl WriteFileTool ===

/// `write_file`: replaces (or creates) a file with `content`, atomically.
pub struct WriteFileTool {
    ws: Arc<Workspace>,
    decl: Declaration,
}

impl WriteFileTool {
    pub fn new(ws: Arc<Workspace>) -> Self {
        let decl = Declaration {
            name: "write_file".into(),
            description: "Writes content to a file in the workspace, replacing it if it exists and creating it (and its parent directories) if not. The write is atomic: readers see the old or the new file, never half of one.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "minLength": 1, "description": "Path of the file, relative to the workspace root."},
                    "content": {"type": "string", "description": "The full new content of the file."}
                },
                "required": ["file_path", "content"],
                "additionalProperties": false
            }),
            kind: ToolKind::Edit,
            parallelizable: false,
            read_only: false,
        };
        Self { ws, decl }
    }
}

impl Tool for WriteFileTool {
    fn declaration(&self) -> &Declaration {
        &self.decl
    }

    fn build(&self, args: &Args) -> Result<Arc<dyn Invocation>, ToolError> {
        let given = str_arg(args, "file_path")?;
        let content = str_arg(args, "content")?.to_string();
        let path = self.ws.resolve(given).map_err(path_error)?;
        if path == self.ws.root() {
            return Err(ToolError::new(
                ErrorKind::TargetIsDirectory,
                "file_path names the workspace root, which is a directory.",
            ));
        }
        Ok(Arc::new(WriteFile {
            display: self.ws.display(&path),
            path,
            content,
        }))
    }

    fn with_new_content(&self, args: &Args, new_content: &str) -> Option<Args> {
        let mut args = args.clone();
        args.insert("content".into(), Value::String(new_content.to_string()));
        Some(args)
    }
}

struct WriteFile {
    path: PathBuf,
    display: String,
    content: String,
}

impl Invocation for WriteFile {
    fn subject(&self) -> Subject {
        Subject::File {
            path: self.display.clone(),
        }
    }

    fn confirmation(&self) -> Result<ConfirmationDetails, ToolError> {
        let (old, is_new_file) = match std::fs::read(&self.path) {
            Ok(bytes) => (String::from_utf8_lossy(&bytes).into_owned(), false),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), true),
            Err(e) => return Err(ToolError::io(&e, &self.display)),
        };
        if self.path.is_dir() {
            return Err(ToolError::new(
                ErrorKind::TargetIsDirectory,
                format!("{} is a directory; write_file writes files.", self.display),
            ));
        }
        let diff = similar::TextDiff::from_lines(&old, &self.content)
            .unified_diff()
            .header(
                &format!("a/{}", self.display),
                &format!("b/{}", self.display),
            )
            .to_string();
        Ok(ConfirmationDetails::Edit {
            file_path: self.display.clone(),
            diff,
            is_new_file,
            new_content: self.content.clone(),
        })
    }

    fn execute(self: Arc<Self>, _ctx: ExecContext) -> BoxFuture<ToolOutcome> {
        blocking(move || match self.write() {
            Ok(created) => {
                let mut result = Args::new();
                result.insert("created".into(), json!(created));
                result.insert("bytes_written".into(), json!(self.content.len()));
                let verb = if created {
                    "Successfully created and wrote to new file"
                } else {
                    "Successfully overwrote file"
                };
                ToolOutcome::Success {
                    output: Value::String(format!("{verb}: {}.", self.display)),
                    result,
                }
            }
            Err(e) => e.into(),
        })
    }
}

impl WriteFile {
    /// Writes through a temp file in the same directory and renames it over
    /// the target, so a crash never leaves half a file. Keeps the target's
    /// permissions. Returns whether the file was created.
    fn write(&self) -> Result<bool, ToolError> {
        let parent = self.path.parent().ok_or_else(|| {
            ToolError::new(ErrorKind::UnhandledException, "path has no parent directory")
        })?;
        std::fs::create_dir_all(parent).map_err(|e| ToolError::io(&e, &self.display))?;
        let existing = match std::fs::metadata(&self.path) {
            Ok(m) if m.is_dir() => {
                return Err(ToolError::new(
                    ErrorKind::TargetIsDirectory,
                    format!("{} is a directory; write_file writes files.", self.display),
                ));
            }
            Ok(m) => Some(m.permissions()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(ToolError::io(&e, &self.display)),
        };
        let mut tmp = tempfile::Builder::new()
            .prefix(".toolsched-")
            .tempfile_in(parent)
            .map_err(|e| ToolError::io(&e, &self.display))?;
        tmp.write_all(self.content.as_bytes())
            .and_then(|()| tmp.as_file().sync_all())
            .map_err(|e| ToolError::io(&e, &self.display))?;
        // A temp file is created 0600; a new file gets the usual 0644.
        let perms = existing.clone().unwrap_or_else(|| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::Permissions::from_mode(0o644)
        });
        std::fs::set_permissions(tmp.path(), perms)
            .map_err(|e| ToolError::io(&e, &self.display))?;
        tmp.persist(&self.path)
            .map_err(|e| ToolError::io(&e.error, &self.display))?;
        Ok(existing.is_none())
    }
}
