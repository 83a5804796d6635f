//! Search patterns from the model, bounded before they compile: a length
//! limit checked first (a 3 MB `grep_search` pattern allocated about 1 GB
//! in the parser before any compiled-size limit could fire), then a
//! compiled-size limit that the regex compiler checks as it builds.
//! Used by `grep_search` (pattern, include/exclude globs), `glob` and
//! `list_directory` (ignore globs). Errors repeat at most a short prefix
//! of the pattern.

use globset::{GlobBuilder, GlobMatcher};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};

use super::ToolError;
use crate::text::Shown;

/// Longest regular expression accepted, in bytes: far above any pattern a
/// person or model writes, far below what makes the parser allocate much.
pub const MAX_REGEX_PATTERN_BYTES: usize = 8 * 1024;
/// Longest glob accepted, in bytes: a path pattern; globset compiles it to
/// a regex, so it gets the same kind of bound.
pub const MAX_GLOB_PATTERN_BYTES: usize = 1024;
/// Most `list_directory` ignore patterns in one call: they compile into one
/// set.
pub const MAX_IGNORE_PATTERNS: usize = 256;
/// Compiled size of a search regex (its NFA), checked while it compiles:
/// ripgrep's default is 100 MiB; a tool call needs far less.
pub const REGEX_SIZE_LIMIT_BYTES: usize = 16 * 1024 * 1024;
/// Lazy-DFA cache of a search regex, per searching thread.
pub const REGEX_DFA_SIZE_LIMIT_BYTES: usize = 16 * 1024 * 1024;
/// Bytes of a compiler error message kept (the regex crate's message quotes
/// the pattern).
const MAX_ERROR_BYTES: usize = 512;

/// `pattern` of argument `field` is at most `limit` bytes.
pub fn check_length(field: &str, pattern: &str, limit: usize) -> Result<(), ToolError> {
    if pattern.len() > limit {
        return Err(ToolError::invalid_params(format!(
            "argument '{field}': the pattern is {} bytes; at most {limit} (it begins '{}')",
            pattern.len(),
            Shown(pattern)
        )));
    }
    Ok(())
}

/// An error text cut to [`MAX_ERROR_BYTES`].
fn bounded_error(e: impl std::fmt::Display) -> String {
    let mut text = e.to_string();
    if text.len() > MAX_ERROR_BYTES {
        let mut end = MAX_ERROR_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// The search regex of `grep_search`: length first, then compiled within
/// the size limits.
pub fn regex(
    pattern: &str,
    case_insensitive: bool,
    fixed_strings: bool,
) -> Result<RegexMatcher, ToolError> {
    check_length("pattern", pattern, MAX_REGEX_PATTERN_BYTES)?;
    RegexMatcherBuilder::new()
        .case_insensitive(case_insensitive)
        .fixed_strings(fixed_strings)
        .crlf(true)
        .line_terminator(Some(b'\n'))
        .size_limit(REGEX_SIZE_LIMIT_BYTES)
        .dfa_size_limit(REGEX_DFA_SIZE_LIMIT_BYTES)
        .build(pattern)
        .map_err(|e| {
            ToolError::invalid_params(format!(
                "argument 'pattern': not a valid regular expression (or larger than {REGEX_SIZE_LIMIT_BYTES} bytes compiled): {}. Fix the pattern, or set fixed_strings to true to search for the text literally.",
                bounded_error(e)
            ))
        })
}

/// A path glob of argument `field`: length first, then compiled.
pub fn glob(field: &str, pattern: &str, case_insensitive: bool) -> Result<GlobMatcher, ToolError> {
    check_length(field, pattern, MAX_GLOB_PATTERN_BYTES)?;
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .case_insensitive(case_insensitive)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| {
            ToolError::invalid_params(format!(
                "argument '{field}': '{}' is not a valid glob: {}",
                Shown(pattern),
                bounded_error(e)
            ))
        })
}
