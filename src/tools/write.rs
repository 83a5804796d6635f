//! `write_file` (Gemini CLI's wire name and parameters): replaces or creates
//! a whole file, atomically.
//!
//! An existing text file keeps its encoding (BOM included) and, when its
//! lines end in `\r\n` and the new content uses bare `\n`, its line endings.
//! The approval prompt diffs the file as it is against the new content; the
//! write itself reads the file again at execution time.

use std::sync::Arc;

use serde_json::{Value, json};

use super::encoding::TextEncoding;
use super::file::{
    FileText, Target, atomic_write, blocking, encode_for, file_metadata, is_directory, load_text,
    read_existing, unified_diff,
};
use super::{
    Args, BoxFuture, ConfirmationDetails, Declaration, ExecContext, Invocation, Subject, Tool,
    ToolError, ToolKind, ToolOutcome, str_arg,
};
use crate::sandbox::Workspace;

/// `write_file`: replaces (or creates) a file with `content`, atomically.
pub struct WriteFileTool {
    ws: Arc<Workspace>,
    decl: Declaration,
}

impl WriteFileTool {
    /// The tool over the workspace `ws`; every path it is given resolves
    /// inside it.
    pub fn new(ws: Arc<Workspace>) -> Self {
        let decl = Declaration {
            name: "write_file".into(),
            description: "Writes content to a file in the workspace, replacing it if it exists and creating it (and its parent directories) if not. The write is atomic: readers see the old or the new file, never half of one. An existing file keeps its encoding (e.g. UTF-16 or windows-1252, BOM included), its permissions and, if its lines end in CRLF, CRLF line endings. For a small change to a large file prefer replace.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "minLength": 1, "description": "Path of the file, relative to the workspace root (or absolute inside it)."},
                    "content": {"type": "string", "description": "The full new content of the file."}
                },
                "required": ["file_path", "content"],
                "additionalProperties": false,
                "examples": [
                    {"file_path": "notes/todo.md", "content": "- [ ] write the tests\n"}
                ]
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
        // As Gemini CLI: refused before anything runs or asks.
        if let Some((line, text)) = super::omission::placeholders(&content).into_iter().next() {
            return Err(ToolError::invalid_params(format!(
                "argument 'content' holds an omission placeholder on line {line} (`{text}`): write_file replaces the whole file, so the omitted code would be lost. Send the complete file content, or use replace for a small change."
            )));
        }
        let target = Target::new(&self.ws, given)?;
        let path = target.path().to_path_buf();
        let display = self.ws.display(&path);
        if path.is_dir() {
            return Err(is_directory(&display, "write_file"));
        }
        Ok(Arc::new(WriteFile {
            writes_repository: target.in_git_dir(),
            target,
            display,
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
    target: Target,
    display: String,
    content: String,
    /// Inside a git repository's own directory (checked at build).
    writes_repository: bool,
}

/// What writing `content` over the current file would put on disk.
struct Planned {
    current: Option<FileText>,
    /// The text to write (line endings adapted).
    text: String,
    bytes: Vec<u8>,
    encoding: TextEncoding,
}

impl WriteFile {
    fn plan(&self) -> Result<Planned, ToolError> {
        self.target.check()?;
        // A directory or FIFO is refused before anything reads it.
        file_metadata(&self.target, "write_file")?;
        let current = load_text(&self.target, "write_file").or_else(|e| {
            // A binary file is simply replaced.
            if e.kind == super::ErrorKind::InvalidToolParams {
                Ok(None)
            } else {
                Err(e)
            }
        })?;
        let (encoding, crlf) = match &current {
            Some(f) => (f.decoded.encoding, f.crlf()),
            None => (TextEncoding::Utf8, false),
        };
        let text = if crlf && !self.content.contains("\r\n") {
            self.content.replace('\n', "\r\n")
        } else {
            self.content.clone()
        };
        let bytes = encode_for(&text, encoding, &self.display, "content")?;
        Ok(Planned {
            current,
            text,
            bytes,
            encoding,
        })
    }

    /// The bytes on disk now (None when absent), for the concurrent-change
    /// check of the write.
    fn on_disk(&self) -> Result<Option<Vec<u8>>, ToolError> {
        read_existing(&self.target, "write_file")
    }

    fn write(&self) -> Result<ToolOutcome, ToolError> {
        let plan = self.plan()?;
        let expected = match &plan.current {
            Some(f) => Some(f.bytes.clone()),
            None => self.on_disk()?,
        };
        let created = atomic_write(
            &self.target,
            "write_file",
            &plan.bytes,
            expected.as_deref(),
            self.writes_repository,
        )?;
        let mut result = Args::new();
        result.insert("created".into(), json!(created));
        result.insert("bytes_written".into(), json!(plan.bytes.len()));
        result.insert("encoding".into(), json!(plan.encoding.name()));
        let verb = if created {
            "Successfully created and wrote to new file"
        } else {
            "Successfully overwrote file"
        };
        Ok(ToolOutcome::Success {
            output: Value::String(format!("{verb}: {}.", self.display)),
            result,
        })
    }
}

impl Invocation for WriteFile {
    fn subject(&self) -> Subject {
        Subject::File {
            path: self.display.clone(),
        }
    }

    fn writes_repository(&self) -> bool {
        self.writes_repository
    }

    fn confirmation(&self) -> Result<ConfirmationDetails, ToolError> {
        let plan = self.plan()?;
        let is_new_file = file_metadata(&self.target, "write_file")?.is_none();
        let old = plan
            .current
            .as_ref()
            .map(|f| f.decoded.text.as_str())
            .unwrap_or("");
        Ok(ConfirmationDetails::Edit {
            file_path: self.display.clone(),
            diff: unified_diff(&self.display, old, &plan.text, is_new_file),
            is_new_file,
            new_content: self.content.clone(),
        })
    }

    /// Nothing to report while it runs: the call gets no progress channel.
    fn reports_progress(&self) -> bool {
        false
    }

    fn execute(self: Arc<Self>, _ctx: ExecContext) -> BoxFuture<ToolOutcome> {
        blocking(move || self.write().unwrap_or_else(Into::into))
    }
}
