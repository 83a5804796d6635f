//! Policy decisions: may a call run, must a person approve it, or is it
//! denied? Decided from the tool's declaration, what the call would do
//! ([`Subject`]), the session's approval mode, whether a person can answer,
//! and the session's "always allow" rules.
//!
//! This is the built-in default policy (DESIGN §5): read-only tools and
//! `update_topic` run; edits and shell ask; `auto_edit` lets edits run;
//! `yolo` runs everything; `plan` denies everything that is not read-only.
//!
//! Not here: asking the person (the scheduler does), running the call.

pub mod shell;

use std::collections::BTreeSet;

use crate::tools::{Declaration, Subject, ToolKind};

/// How much runs without asking (Gemini CLI's approval modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    /// Read-only tools run; edits, shell and MCP tools ask.
    #[default]
    Default,
    /// Like `Default`, and file edits run without asking.
    AutoEdit,
    /// Everything runs unless a rule denies it.
    Yolo,
    /// Only read-only tools; everything else is denied.
    Plan,
}

impl std::str::FromStr for ApprovalMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "default" => Ok(Self::Default),
            "auto_edit" => Ok(Self::AutoEdit),
            "yolo" => Ok(Self::Yolo),
            "plan" => Ok(Self::Plan),
            other => Err(format!(
                "unknown approval mode '{other}' (expected default, auto_edit, yolo or plan)"
            )),
        }
    }
}

/// A policy decision with the reason shown to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Ask a person; the reason says why.
    AskUser { reason: String },
    /// Deny; the message says why and what would be allowed.
    Deny { message: String },
}

/// Rules a session gathered from `proceed_always` answers, narrowed as in
/// Gemini CLI: shell by root command, file tools by exact path, MCP by tool or
/// server.
#[derive(Debug, Clone, Default)]
pub struct SessionRules {
    shell_roots: BTreeSet<String>,
    /// (tool name, path relative to the workspace root).
    paths: BTreeSet<(String, String)>,
    mcp_tools: BTreeSet<(String, String)>,
    mcp_servers: BTreeSet<String>,
}

/// Root commands never added as a whole by "always allow": allowing them
/// would allow any script they run.
const NEVER_ALWAYS: &[&str] = &[
    "bash", "sh", "zsh", "dash", "eval", "exec", "env", "sudo", "xargs", "python", "python3",
    "node", "perl", "ruby",
];

/// Which "always" narrowing an approval asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlwaysScope {
    /// Shell root commands, file path or MCP tool, by the call's subject.
    Narrow,
    /// Every tool of the call's MCP server.
    Server,
}

impl SessionRules {
    /// Records "always allow" for what `subject` does with `tool`.
    pub fn allow_always(&mut self, tool: &str, subject: &Subject, scope: AlwaysScope) {
        match (subject, scope) {
            (Subject::Shell { root_commands, .. }, _) => {
                for root in root_commands.iter().flatten() {
                    if !NEVER_ALWAYS.contains(&root.as_str()) {
                        self.shell_roots.insert(root.clone());
                    }
                }
            }
            (Subject::File { path }, _) => {
                self.paths.insert((tool.to_string(), path.clone()));
            }
            (Subject::Mcp { server, tool }, AlwaysScope::Narrow) => {
                self.mcp_tools.insert((server.clone(), tool.clone()));
            }
            (Subject::Mcp { server, .. }, AlwaysScope::Server) => {
                self.mcp_servers.insert(server.clone());
            }
            (Subject::Tool, _) => {
                self.paths.insert((tool.to_string(), String::new()));
            }
        }
    }

    /// Whether a session rule allows this call.
    pub fn allows(&self, tool: &str, subject: &Subject) -> bool {
        match subject {
            Subject::Shell {
                root_commands: Some(roots),
                redirects: false,
                ..
            } => !roots.is_empty() && roots.iter().all(|r| self.shell_roots.contains(r)),
            Subject::Shell { .. } => false,
            Subject::File { path } => self.paths.contains(&(tool.to_string(), path.clone())),
            Subject::Mcp { server, tool } => {
                self.mcp_servers.contains(server)
                    || self.mcp_tools.contains(&(server.clone(), tool.clone()))
            }
            Subject::Tool => self.paths.contains(&(tool.to_string(), String::new())),
        }
    }
}

/// What the policy is asked about.
#[derive(Debug, Clone, Copy)]
pub struct PolicyInput<'a> {
    pub decl: &'a Declaration,
    pub subject: &'a Subject,
    pub mode: ApprovalMode,
    pub rules: &'a SessionRules,
}

/// The built-in default policy.
#[derive(Debug, Clone, Default)]
pub struct Policy;

impl Policy {
    /// Decides `input`. Read-only tools always run; in `plan` nothing else
    /// does; `yolo` runs everything; a session rule allows its narrowed
    /// calls; `auto_edit` runs edits; everything else asks.
    pub fn decide(&self, input: PolicyInput<'_>) -> Decision {
        let decl = input.decl;
        if decl.read_only {
            return Decision::Allow;
        }
        match input.mode {
            ApprovalMode::Plan => Decision::Deny {
                message: format!(
                    "Tool '{}' is not allowed in plan mode: only read-only tools run. Switch the session to another approval mode to make changes.",
                    decl.name
                ),
            },
            ApprovalMode::Yolo => Decision::Allow,
            _ if input.rules.allows(&decl.name, input.subject) => Decision::Allow,
            ApprovalMode::AutoEdit if decl.kind == ToolKind::Edit => Decision::Allow,
            _ => Decision::AskUser {
                reason: format!(
                    "Tool '{}' has side effects ({:?}); the default policy asks in {} mode.",
                    decl.name,
                    decl.kind,
                    mode_name(input.mode)
                ),
            },
        }
    }
}

/// Wire name of a mode.
pub fn mode_name(mode: ApprovalMode) -> &'static str {
    match mode {
        ApprovalMode::Default => "default",
        ApprovalMode::AutoEdit => "auto_edit",
        ApprovalMode::Yolo => "yolo",
        ApprovalMode::Plan => "plan",
    }
}
