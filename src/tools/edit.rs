//! `replace` (Gemini CLI's wire name and parameters): replaces exact text in
//! a file, or creates a new file when `old_string` is empty.
//!
//! What users lost elsewhere and this module guards:
//! - `new_string` is inserted literally: no `$1`, `$&`, `$$` or `\1`
//!   expansion (no regex replacement is involved at all).
//! - Line endings: `\n` in `old_string` matches `\r\n` in the file, and the
//!   inserted text takes the file's line endings; everything outside the
//!   matched ranges stays byte-identical, including a BOM, a missing final
//!   newline, trailing spaces and the file's encoding.
//! - The approval prompt shows a diff, but execution re-reads the file and
//!   applies the edit to what is on disk then; if it no longer applies the
//!   call fails saying so, and a change racing the write is not overwritten.

use std::sync::Arc;

use serde_json::{Value, json};

use super::encoding::TextEncoding;
use super::file::{
    FileText, Target, atomic_write, blocking, encode_for, is_directory, load_text, unified_diff,
};
use super::{
    Args, BoxFuture, ConfirmationDetails, Declaration, ErrorKind, ExecContext, Invocation, Subject,
    Tool, ToolError, ToolKind, ToolOutcome, str_arg,
};
use crate::sandbox::Workspace;

/// `replace`: exact-text replacement in one file.
pub struct ReplaceTool {
    ws: Arc<Workspace>,
    decl: Declaration,
}

impl ReplaceTool {
    /// The tool over the workspace `ws`; every path it is given resolves
    /// inside it.
    pub fn new(ws: Arc<Workspace>) -> Self {
        let decl = Declaration {
            name: "replace".into(),
            description: "Replaces text within a file. old_string must match the file's text exactly (whitespace and indentation included; a line break matches both LF and CRLF) and, unless allow_multiple is true, occur exactly once: include enough surrounding lines to make it unique. new_string is inserted literally ($1, $& and \\1 are not special) and takes the file's line endings; the file keeps its encoding, BOM and final newline. With an empty old_string, creates a new file containing new_string (only if the file does not exist). Read the file first to copy old_string exactly.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "minLength": 1, "description": "Path of the file to edit, relative to the workspace root (or absolute inside it)."},
                    "old_string": {"type": "string", "description": "The exact text to replace, with enough context (e.g. 3 lines before and after) to occur only once. Empty to create a new file."},
                    "new_string": {"type": "string", "description": "The exact text to put in its place, inserted literally."},
                    "allow_multiple": {"type": "boolean", "description": "Replace every occurrence of old_string instead of requiring exactly one. Default false."}
                },
                "required": ["file_path", "old_string", "new_string"],
                "additionalProperties": false,
                "examples": [
                    {"file_path": "src/main.rs", "old_string": "    println!(\"hello\");\n", "new_string": "    println!(\"hello, world\");\n"},
                    {"file_path": "notes/new.md", "old_string": "", "new_string": "# Notes\n"}
                ]
            }),
            kind: ToolKind::Edit,
            parallelizable: false,
            read_only: false,
        };
        Self { ws, decl }
    }
}

impl Tool for ReplaceTool {
    fn declaration(&self) -> &Declaration {
        &self.decl
    }

    fn build(&self, args: &Args) -> Result<Arc<dyn Invocation>, ToolError> {
        let given = str_arg(args, "file_path")?;
        let old_string = str_arg(args, "old_string")?.to_string();
        let new_string = str_arg(args, "new_string")?.to_string();
        let allow_multiple = args
            .get("allow_multiple")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        // As Gemini CLI: a placeholder in new_string that old_string does
        // not hold would replace real code with the placeholder's text.
        let old_placeholders = super::omission::placeholders(&old_string);
        if let Some((line, text)) = super::omission::placeholders(&new_string)
            .into_iter()
            .find(|(_, p)| !old_placeholders.iter().any(|(_, o)| o == p))
        {
            return Err(ToolError::invalid_params(format!(
                "argument 'new_string' holds an omission placeholder on line {line} (`{text}`) that old_string does not: the file would get the placeholder instead of the code. Send the exact, complete replacement text."
            )));
        }
        let target = Target::new(&self.ws, given)?;
        let path = target.path().to_path_buf();
        let display = self.ws.display(&path);
        if path.is_dir() {
            return Err(is_directory(&display, "replace"));
        }
        if old_string == new_string {
            return Err(ToolError::new(
                ErrorKind::EditNoChange,
                format!(
                    "No changes to apply to {display}: old_string and new_string are identical. Send the text to change in old_string and its replacement in new_string."
                ),
            ));
        }
        Ok(Arc::new(Replace {
            writes_repository: target.in_git_dir(),
            target,
            display,
            old_string,
            new_string,
            allow_multiple,
        }))
    }

    /// An inline modification from the approval prompt replaces
    /// `new_string` (the prompt's `new_content` is `new_string`).
    fn with_new_content(&self, args: &Args, new_content: &str) -> Option<Args> {
        let mut args = args.clone();
        args.insert("new_string".into(), Value::String(new_content.to_string()));
        Some(args)
    }
}

struct Replace {
    target: Target,
    /// Inside a git repository's own directory (checked at build).
    writes_repository: bool,
    display: String,
    old_string: String,
    new_string: String,
    allow_multiple: bool,
}

/// An edit computed against the file as it is now.
struct Plan {
    current: Option<FileText>,
    old_text: String,
    new_text: String,
    bytes: Vec<u8>,
    occurrences: usize,
    encoding: TextEncoding,
}

impl Replace {
    fn plan(&self) -> Result<Plan, ToolError> {
        self.target.check()?;
        let current = load_text(&self.target, "replace")?;
        let Some(file) = current else {
            if self.old_string.is_empty() {
                let bytes = self.new_string.as_bytes().to_vec();
                return Ok(Plan {
                    current: None,
                    old_text: String::new(),
                    new_text: self.new_string.clone(),
                    bytes,
                    occurrences: 0,
                    encoding: TextEncoding::Utf8,
                });
            }
            return Err(ToolError::new(
                ErrorKind::FileNotFound,
                format!(
                    "File not found: {}. To create a new file, send an empty old_string (or use write_file); to edit an existing one, check its path with glob.",
                    self.display
                ),
            ));
        };
        if self.old_string.is_empty() {
            return Err(ToolError::new(
                ErrorKind::AttemptToCreateExistingFile,
                format!(
                    "Failed to edit: {} already exists, and an empty old_string only creates new files. Send the text to replace in old_string, or use write_file to overwrite the file.",
                    self.display
                ),
            ));
        }
        let edited = apply(
            &file.decoded.text,
            &self.old_string,
            &self.new_string,
            file.crlf(),
        );
        let (new_text, occurrences) = match edited {
            Applied::Edited { text, occurrences } => (text, occurrences),
            Applied::NotFound => {
                return Err(ToolError::new(
                    ErrorKind::EditNoOccurrenceFound,
                    format!(
                        "Failed to edit, 0 occurrences found for old_string in {}. No edits were made. The file may have changed since you read it, or old_string does not match its text exactly (whitespace, indentation, escaping). Use read_file to see the current content and try again.",
                        self.display
                    ),
                ));
            }
        };
        if occurrences > 1 && !self.allow_multiple {
            return Err(ToolError::new(
                ErrorKind::EditExpectedOccurrenceMismatch,
                format!(
                    "Failed to edit, expected 1 occurrence but found {occurrences} for old_string in {}. No edits were made. Add more surrounding context to old_string so it matches exactly once, or set allow_multiple to true to replace all {occurrences}.",
                    self.display
                ),
            ));
        }
        if new_text == file.decoded.text {
            return Err(ToolError::new(
                ErrorKind::EditNoChange,
                format!(
                    "No changes to apply to {}: the edit leaves the file as it is.",
                    self.display
                ),
            ));
        }
        let encoding = file.decoded.encoding;
        let bytes = encode_for(&new_text, encoding, &self.display, "new_string")?;
        Ok(Plan {
            old_text: file.decoded.text.clone(),
            current: Some(file),
            new_text,
            bytes,
            occurrences,
            encoding,
        })
    }

    fn run(&self) -> Result<ToolOutcome, ToolError> {
        let plan = self.plan()?;
        let expected = plan.current.as_ref().map(|f| f.bytes.as_slice());
        let created = atomic_write(
            &self.target,
            "replace",
            &plan.bytes,
            expected,
            self.writes_repository,
        )?;
        let mut result = Args::new();
        result.insert("created".into(), json!(created));
        result.insert("occurrences".into(), json!(plan.occurrences));
        result.insert("encoding".into(), json!(plan.encoding.name()));
        let output = if created {
            format!(
                "Created new file: {} with the provided content.",
                self.display
            )
        } else {
            format!(
                "Successfully modified file: {} ({} replacement{}).",
                self.display,
                plan.occurrences,
                if plan.occurrences == 1 { "" } else { "s" }
            )
        };
        Ok(ToolOutcome::Success {
            output: Value::String(output),
            result,
        })
    }
}

impl Invocation for Replace {
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
        let is_new_file = plan.current.is_none();
        Ok(ConfirmationDetails::Edit {
            file_path: self.display.clone(),
            diff: unified_diff(&self.display, &plan.old_text, &plan.new_text, is_new_file),
            is_new_file,
            new_content: self.new_string.clone(),
        })
    }

    /// Nothing to report while it runs: the call gets no progress channel.
    fn reports_progress(&self) -> bool {
        false
    }

    fn execute(self: Arc<Self>, _ctx: ExecContext) -> BoxFuture<ToolOutcome> {
        blocking(move || self.run().unwrap_or_else(Into::into))
    }
}

// === the edit itself ===

/// The result of applying an edit to a text.
#[derive(Debug, PartialEq, Eq)]
enum Applied {
    Edited { text: String, occurrences: usize },
    NotFound,
}

/// `old` replaced by `new` in `text` at every non-overlapping occurrence,
/// matching line breaks tolerantly (`\n` and `\r\n` in either `old` or
/// `text` match each other). `new`'s line breaks become `\r\n` when
/// `crlf`, else `\n`. Bytes outside the matched ranges are copied as they
/// are; `new` is copied literally.
fn apply(text: &str, old: &str, new: &str, crlf: bool) -> Applied {
    let old_n = old.replace("\r\n", "\n");
    let new_n = new.replace("\r\n", "\n");
    let new_t = if crlf {
        new_n.replace('\n', "\r\n")
    } else {
        new_n
    };
    // `norm` is `text` with the '\r' of every "\r\n" removed; `removed`
    // holds, in order, the index in `norm` of each '\n' that lost its '\r'.
    let (norm, removed) = normalize(text);
    // Offset in `text` of byte `i` of `norm`: a '\n' that lost its '\r'
    // starts at that '\r'.
    let orig = |i: usize| i + removed.partition_point(|&r| r < i);
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut occurrences = 0;
    for (start, m) in norm.match_indices(old_n.as_str()) {
        let (s, e) = (orig(start), orig(start + m.len()));
        out.push_str(&text[copied..s]);
        out.push_str(&new_t);
        copied = e;
        occurrences += 1;
    }
    if occurrences == 0 {
        return Applied::NotFound;
    }
    out.push_str(&text[copied..]);
    Applied::Edited {
        text: out,
        occurrences,
    }
}

fn normalize(text: &str) -> (std::borrow::Cow<'_, str>, Vec<usize>) {
    if !text.contains("\r\n") {
        return (std::borrow::Cow::Borrowed(text), Vec::new());
    }
    let mut norm = String::with_capacity(text.len());
    let mut removed = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("\r\n") {
        norm.push_str(&rest[..i]);
        removed.push(norm.len());
        norm.push('\n');
        rest = &rest[i + 2..];
    }
    norm.push_str(rest);
    (std::borrow::Cow::Owned(norm), removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edited(text: &str, old: &str, new: &str, crlf: bool) -> String {
        match apply(text, old, new, crlf) {
            Applied::Edited { text, .. } => text,
            Applied::NotFound => panic!("not found"),
        }
    }

    #[test]
    fn crlf_is_matched_tolerantly_and_preserved() {
        let text = "a\r\nb\r\nc\r\n";
        assert_eq!(edited(text, "a\nb\n", "x\ny\n", true), "x\r\ny\r\nc\r\n");
        assert_eq!(edited(text, "\nb", "\nz", true), "a\r\nz\r\nc\r\n");
        assert_eq!(edited(text, "b", "q", true), "a\r\nq\r\nc\r\n");
        assert_eq!(edited(text, "c\r\n", "d\n", true), "a\r\nb\r\nd\r\n");
    }

    #[test]
    fn new_string_is_literal() {
        let new = r"$1 $& $$ \1 \n ${x} $0";
        assert_eq!(edited("k = v;", "v", new, false), format!("k = {new};"));
    }

    #[test]
    fn counts_non_overlapping_occurrences_and_not_found() {
        assert_eq!(
            apply("aaaa", "aa", "b", false),
            Applied::Edited {
                text: "bb".into(),
                occurrences: 2
            }
        );
        assert_eq!(apply("abc", "x", "y", false), Applied::NotFound);
    }

    #[test]
    fn mixed_line_endings_outside_the_match_are_kept() {
        let text = "one\ntwo\r\nthree\n";
        assert_eq!(edited(text, "two", "2", false), "one\n2\r\nthree\n");
    }
}
