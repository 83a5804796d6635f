//! Policy rules: the TOML format, its validation (errors name the file, the
//! line and the reason), and matching one rule against one call or one shell
//! segment.
//!
//! ```toml
//! [[rule]]
//! name = "git read-only"
//! tool_name = "run_shell_command"
//! command_prefix = ["git status", "git log"]
//! decision = "allow"
//! priority = 10
//! ```
//!
//! Not here: combining rules into a decision (`policy::Policy`), the
//! built-in defaults (`policy::defaults`).

use std::path::Path;
use std::sync::Arc;

use regex::{Regex, RegexBuilder};
use serde::Deserialize;
use serde_json::Value;

use super::ApprovalMode;
use crate::shell::{Segment, base_name};
use crate::tools::{Args, Declaration, SHELL_TOOL_NAME, Subject, ToolKind};

/// Compiled size limit of one `args_pattern`, in bytes: a pattern such as
/// `(a{1000}){1000}` is refused at load time instead of eating memory.
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// Largest policy file read, in bytes: a policy is a few hundred rules at
/// most; anything bigger is a mistake (or a misdirected path).
pub const MAX_POLICY_FILE_BYTES: u64 = 1 << 20;
/// Largest absolute `priority`: keeps priorities human-sized and comparable.
pub const MAX_PRIORITY: i64 = 1_000_000;

/// What a rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleDecision {
    Allow,
    Deny,
    AskUser,
}

/// Which set of rules a rule comes from; a higher tier beats any priority
/// of a lower one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// The embedded defaults (`policy::defaults`).
    BuiltIn,
    /// The operator's policy file.
    Operator,
    /// A tenant's policy file (`[[tenants]] policy_file`): over the
    /// server's, under the session's "always" answers.
    Tenant,
}

/// Where a rule was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleOrigin {
    /// `<built-in>` or the policy file's path.
    pub file: Arc<str>,
    /// 1-based line of its `[[rule]]` header; 0 for built-in rules.
    pub line: usize,
    /// 1-based position in its file.
    pub index: usize,
}

/// Which tools a rule names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameMatch {
    /// `*`: every tool.
    Any,
    /// An exact wire name.
    Exact(String),
    /// `mcp_<server>_*`: every tool that really comes from MCP server
    /// `<server>` (a tool named `mcp_srv_x…` served by another server does
    /// not match `mcp_srv_*`).
    McpServer(String),
}

/// Matchers only the built-in rules use (not expressible in TOML).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuiltinMatch {
    /// The tool declares itself read-only.
    ReadOnlyTool,
    /// The tool edits files (`ToolKind::Edit`).
    EditTool,
    /// A shell segment that is a known read-only command.
    ReadOnlyShell,
}

/// One rule, validated and compiled.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The rule's `name`, if it has one.
    pub name: Option<String>,
    /// File, line and position it was written at.
    pub origin: RuleOrigin,
    /// Built-in or operator.
    pub tier: Tier,
    /// Empty means every tool.
    pub tools: Vec<NameMatch>,
    /// The MCP server the call must really come from.
    pub mcp_server: Option<String>,
    /// Searched in [`serialize_args`] of the call (per shell segment).
    pub args_pattern: Option<Regex>,
    /// Each prefix split into words; empty means any command.
    pub command_prefixes: Vec<Vec<String>>,
    pub decision: RuleDecision,
    /// Highest wins within a tier; ties keep file order.
    pub priority: i64,
    /// `None` means every mode.
    pub modes: Option<Vec<ApprovalMode>>,
    /// `None` means either.
    pub interactive: Option<bool>,
    /// Shown in the error of a deny.
    pub deny_message: Option<String>,
    /// An allow stays an allow when the command redirects into a file inside
    /// the workspace.
    pub allow_redirection: bool,
    pub(crate) builtin: Option<BuiltinMatch>,
}

/// What a rule is matched against.
pub(crate) struct MatchInput<'a> {
    pub decl: &'a Declaration,
    pub subject: &'a Subject,
    pub mode: ApprovalMode,
    pub interactive: bool,
    /// The serialised arguments (see [`serialize_args`]).
    pub args: &'a str,
    /// The shell segment decided, when deciding one.
    pub segment: Option<&'a Segment>,
    /// Whether that segment is a known read-only command.
    pub read_only_segment: bool,
}

impl Rule {
    /// How the rule is named in messages: `'name'` or `#index`, with its file
    /// and line.
    pub fn label(&self) -> String {
        let name = match &self.name {
            Some(n) => format!("'{n}'"),
            None => format!("#{}", self.origin.index),
        };
        if self.origin.line > 0 {
            format!("rule {name} ({}:{})", self.origin.file, self.origin.line)
        } else {
            format!("rule {name} ({})", self.origin.file)
        }
    }

    /// A rule that names what it allows (a command prefix or an args
    /// pattern) rather than a whole tool or everything.
    pub fn is_specific(&self) -> bool {
        !self.command_prefixes.is_empty() || self.args_pattern.is_some()
    }

    pub(crate) fn matches(&self, m: &MatchInput<'_>) -> bool {
        if let Some(b) = self.builtin {
            let ok = match b {
                BuiltinMatch::ReadOnlyTool => m.decl.read_only,
                BuiltinMatch::EditTool => m.decl.kind == ToolKind::Edit,
                BuiltinMatch::ReadOnlyShell => m.segment.is_some() && m.read_only_segment,
            };
            if !ok {
                return false;
            }
        }
        if !self.tools.is_empty() && !self.tools.iter().any(|t| name_matches(t, m)) {
            return false;
        }
        if let Some(server) = &self.mcp_server
            && !matches!(m.subject, Subject::Mcp { server: s, .. } if s == server)
        {
            return false;
        }
        if let Some(modes) = &self.modes
            && !modes.contains(&m.mode)
        {
            return false;
        }
        if let Some(i) = self.interactive
            && i != m.interactive
        {
            return false;
        }
        if !self.command_prefixes.is_empty() {
            let Some(seg) = m.segment else {
                return false;
            };
            let argv = seg.argv();
            // A deny or ask rule for `curl` also catches `/usr/bin/curl`; an
            // allow for `ls` does not allow `./ls` (a script the agent wrote).
            let by_base = self.decision != RuleDecision::Allow;
            let hit = self.command_prefixes.iter().any(|prefix| {
                prefix.len() <= argv.len()
                    && prefix.iter().zip(&argv).enumerate().all(|(i, (p, w))| {
                        w.is_some_and(|w| w == p || (by_base && i == 0 && base_name(w) == p))
                    })
            });
            if !hit {
                return false;
            }
        }
        if let Some(re) = &self.args_pattern
            && !re.is_match(m.args)
        {
            return false;
        }
        true
    }
}

fn name_matches(t: &NameMatch, m: &MatchInput<'_>) -> bool {
    match t {
        NameMatch::Any => true,
        NameMatch::Exact(n) => *n == m.decl.name,
        NameMatch::McpServer(server) => {
            matches!(m.subject, Subject::Mcp { server: s, .. } if s == server)
        }
    }
}

/// The arguments as `args_pattern` sees them: JSON with keys sorted at every
/// level, no whitespace, and each top-level `"key":value` pair wrapped in NUL
/// characters (`\0`), so that `\x00"command":"git ` anchors on the start of a
/// whole property whatever the key order of the call.
pub fn serialize_args(args: &Args) -> String {
    let mut keys: Vec<&String> = args.keys().collect();
    keys.sort();
    let mut out = String::from("{");
    for (i, k) in keys.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('\0');
        out.push_str(&json_string(k));
        out.push(':');
        if let Some(v) = args.get(*k) {
            canonical(v, &mut out);
        }
        out.push('\0');
    }
    out.push('}');
    out
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&json_string(k));
                out.push(':');
                if let Some(v) = map.get(*k) {
                    canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

// === loading ===

/// Why a policy file is unusable.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read policy file {file}: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("policy file {file} is larger than {limit} bytes")]
    TooLarge { file: String, limit: u64 },
    #[error("policy file {file}, line {line}: {reason}")]
    Invalid {
        file: String,
        line: usize,
        reason: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    rule: Vec<toml::Spanned<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: Option<String>,
    tool_name: Option<OneOrMany>,
    mcp_server: Option<String>,
    args_pattern: Option<toml::Spanned<String>>,
    command_prefix: Option<OneOrMany>,
    decision: RuleDecision,
    #[serde(default)]
    priority: i64,
    modes: Option<Vec<ApprovalMode>>,
    interactive: Option<Interactive>,
    deny_message: Option<String>,
    #[serde(default)]
    allow_redirection: bool,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Interactive {
    Bool(bool),
    Word(String),
}

/// Reads and validates the policy file at `path`.
pub fn load_file(path: &Path) -> Result<Vec<Rule>, PolicyError> {
    let file = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|source| PolicyError::Read {
        file: file.clone(),
        source,
    })?;
    if meta.len() > MAX_POLICY_FILE_BYTES {
        return Err(PolicyError::TooLarge {
            file,
            limit: MAX_POLICY_FILE_BYTES,
        });
    }
    let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
        file: file.clone(),
        source,
    })?;
    parse_rules(&text, &file)
}

/// Parses policy TOML `text`; `file` names it in errors and rule labels.
pub fn parse_rules(text: &str, file: &str) -> Result<Vec<Rule>, PolicyError> {
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let raw: RawFile = toml::from_str(text).map_err(|e| PolicyError::Invalid {
        file: file.to_string(),
        line: e.span().map_or(1, |s| line_of(s.start)),
        reason: e.message().trim().to_string(),
    })?;
    let origin_file: Arc<str> = Arc::from(file);
    let mut rules = Vec::with_capacity(raw.rule.len());
    for (i, spanned) in raw.rule.into_iter().enumerate() {
        let line = line_of(spanned.span().start);
        let invalid = |reason: String| PolicyError::Invalid {
            file: file.to_string(),
            line,
            reason,
        };
        let r = spanned.into_inner();
        let label = match &r.name {
            Some(n) => format!("rule '{n}'"),
            None => format!("rule #{}", i + 1),
        };
        let command_prefixes: Vec<Vec<String>> = match r.command_prefix {
            None => Vec::new(),
            Some(p) => {
                let mut out = Vec::new();
                for prefix in p.into_vec() {
                    let words: Vec<String> =
                        prefix.split_whitespace().map(str::to_string).collect();
                    if words.is_empty() {
                        return Err(invalid(format!("{label}: command_prefix is empty")));
                    }
                    out.push(words);
                }
                if out.is_empty() {
                    return Err(invalid(format!("{label}: command_prefix is an empty list")));
                }
                out
            }
        };
        let tool_names = match r.tool_name {
            Some(t) => {
                let names = t.into_vec();
                if names.is_empty() {
                    return Err(invalid(format!("{label}: tool_name is an empty list")));
                }
                names
            }
            None if !command_prefixes.is_empty() => vec![SHELL_TOOL_NAME.to_string()],
            None => Vec::new(),
        };
        let mut tools = Vec::new();
        for name in &tool_names {
            tools.push(parse_name(name).map_err(|reason| invalid(format!("{label}: {reason}")))?);
        }
        if !command_prefixes.is_empty()
            && !tools.iter().any(|t| {
                matches!(t, NameMatch::Any) || *t == NameMatch::Exact(SHELL_TOOL_NAME.into())
            })
        {
            return Err(invalid(format!(
                "{label}: command_prefix applies only to {SHELL_TOOL_NAME}, which tool_name does not include"
            )));
        }
        let args_pattern = match r.args_pattern {
            None => None,
            Some(p) => {
                let pline = line_of(p.span().start);
                Some(
                    RegexBuilder::new(p.get_ref())
                        .size_limit(REGEX_SIZE_LIMIT)
                        .dfa_size_limit(REGEX_SIZE_LIMIT)
                        .build()
                        .map_err(|e| PolicyError::Invalid {
                            file: file.to_string(),
                            line: pline,
                            reason: format!("{label}: args_pattern is not a valid regex: {e}"),
                        })?,
                )
            }
        };
        if r.priority.abs() > MAX_PRIORITY {
            return Err(invalid(format!(
                "{label}: priority {} is outside -{MAX_PRIORITY}..={MAX_PRIORITY}",
                r.priority
            )));
        }
        let interactive = match r.interactive {
            None => None,
            Some(Interactive::Bool(b)) => Some(b),
            Some(Interactive::Word(w)) if w == "any" => None,
            Some(Interactive::Word(w)) => {
                return Err(invalid(format!(
                    "{label}: interactive must be true, false or \"any\", not \"{w}\""
                )));
            }
        };
        if r.deny_message.is_some() && r.decision != RuleDecision::Deny {
            return Err(invalid(format!(
                "{label}: deny_message needs decision = \"deny\""
            )));
        }
        if r.allow_redirection && r.decision != RuleDecision::Allow {
            return Err(invalid(format!(
                "{label}: allow_redirection needs decision = \"allow\""
            )));
        }
        if let Some(modes) = &r.modes
            && modes.is_empty()
        {
            return Err(invalid(format!(
                "{label}: modes is an empty list (leave it out to match every mode)"
            )));
        }
        rules.push(Rule {
            name: r.name,
            origin: RuleOrigin {
                file: origin_file.clone(),
                line,
                index: i + 1,
            },
            tier: Tier::Operator,
            tools,
            mcp_server: r.mcp_server,
            args_pattern,
            command_prefixes,
            decision: r.decision,
            priority: r.priority,
            modes: r.modes,
            interactive,
            deny_message: r.deny_message,
            allow_redirection: r.allow_redirection,
            builtin: None,
        });
    }
    Ok(rules)
}

/// Parses one `tool_name` entry: `*`, `mcp_<server>_*`, or an exact name.
fn parse_name(name: &str) -> Result<NameMatch, String> {
    if name == "*" {
        return Ok(NameMatch::Any);
    }
    if let Some(server) = name
        .strip_prefix("mcp_")
        .and_then(|rest| rest.strip_suffix("_*"))
    {
        if server.is_empty() || server.contains('*') {
            return Err(format!(
                "tool_name \"{name}\": the server name is empty or has a *"
            ));
        }
        return Ok(NameMatch::McpServer(server.to_string()));
    }
    if name.contains('*') {
        return Err(format!(
            "tool_name \"{name}\": only \"*\" and \"mcp_<server>_*\" may contain a wildcard"
        ));
    }
    if name.is_empty() {
        return Err("tool_name is empty".into());
    }
    Ok(NameMatch::Exact(name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn serialisation_sorts_keys_and_delimits_top_level_pairs() {
        let a = json!({"b": {"z": 1, "a": [2, {"y": 0, "x": 1}]}, "a": "x"});
        let Value::Object(a) = a else { unreachable!() };
        assert_eq!(
            serialize_args(&a),
            "{\0\"a\":\"x\"\0,\0\"b\":{\"a\":[2,{\"x\":1,\"y\":0}],\"z\":1}\0}"
        );
    }

    #[test]
    fn errors_name_file_line_and_reason() {
        let text = "[[rule]]\ndecision = \"allow\"\n\n[[rule]]\ntool_name = \"x\"\nargs_pattern = \"(\"\ndecision = \"deny\"\n";
        let e = parse_rules(text, "p.toml").unwrap_err().to_string();
        assert!(
            e.starts_with("policy file p.toml, line 6: rule #2: args_pattern is not a valid regex"),
            "{e}"
        );
        let e = parse_rules("[[rule]]\ndecision = \"maybe\"\n", "p.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("policy file p.toml, line 2:"), "{e}");
        let e = parse_rules(
            "[[rule]]\ntool_name = \"read_*\"\ndecision = \"allow\"\n",
            "p.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 1") && e.contains("wildcard"), "{e}");
        let e = parse_rules("[[rule]]\ndecision = \"allow\"\nbogus = 1\n", "p.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3") && e.contains("bogus"), "{e}");
        let e = parse_rules(
            "[[rule]]\ntool_name = \"write_file\"\ncommand_prefix = \"ls\"\ndecision = \"allow\"\n",
            "p.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("command_prefix applies only"), "{e}");
    }

    #[test]
    fn huge_regex_is_refused() {
        let text = "[[rule]]\nargs_pattern = \"(\\\\w{100}){100}\"\ndecision = \"deny\"\n";
        let e = parse_rules(text, "p.toml").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("size limit"), "{e}");
    }
}
