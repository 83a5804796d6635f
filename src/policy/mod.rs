//! Policy decisions: may a call run, must a person approve it, or is it
//! denied? Decided from rules in tiers (built-in defaults < the operator's
//! TOML file < the session's "always allow" answers), the tool's declaration,
//! what the call would do ([`Subject`]), its arguments, the session's
//! approval mode and whether a person can answer.
//!
//! A shell command is decided per simple command ("segment", found by
//! [`crate::shell::analyze`] with a real bash parser) and the strictest decision
//! wins, so an allow rule for `ls` never lets `ls && rm -rf ~` through. Every
//! decision names the rule that made it and, for the shell, the segment.
//!
//! The policy in force can be replaced while sessions run (file change,
//! SIGHUP): sessions read it through a [`PolicyHandle`] (a `watch` channel),
//! never through a lock. See [`reload`].
//!
//! Not here: asking the person (the scheduler does), running the call.

pub mod defaults;
pub mod outcomes;
pub mod reload;
pub mod rules;

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::shell::{self, Segment, ShellAnalysis};
use crate::tools::{Args, Declaration, Subject};
use rules::{MatchInput, Rule, RuleDecision, Tier};

pub use outcomes::ConfirmationOutcome;
pub use reload::{ReloadStatus, watch_file};
pub use rules::{PolicyError, load_file, parse_rules};

/// How much runs without asking (Gemini CLI's approval modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    /// Read-only tools (and known read-only shell commands) run; edits, other
    /// shell commands and MCP tools ask.
    #[default]
    Default,
    /// Like `Default`, and file edits run without asking.
    AutoEdit,
    /// Everything runs unless a rule denies it or it is a dangerous form.
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

/// Which rule decided, and for a shell command which segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionSource {
    /// `<built-in>`, `<session>` or the operator policy file's path.
    pub file: String,
    /// 1-based line of the rule in `file`, when it has one.
    pub line: Option<usize>,
    /// The rule's name, or `#index` (1-based position in its file).
    pub rule: String,
    /// The shell segment that caused the decision (its source text).
    pub segment: Option<String>,
}

impl fmt::Display for DecisionSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rule = if self.rule.starts_with('#') {
            self.rule.clone()
        } else {
            format!("'{}'", self.rule)
        };
        match self.line {
            Some(line) => write!(f, "rule {rule} ({}:{line})", self.file)?,
            None => write!(f, "rule {rule} ({})", self.file)?,
        }
        if let Some(seg) = &self.segment {
            write!(f, ", segment `{seg}`")?;
        }
        Ok(())
    }
}

/// A policy decision with the reason shown to the client. `reason` and
/// `message` already name the deciding rule and segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run without asking.
    Allow,
    /// Ask a person; the reason says why.
    AskUser {
        reason: String,
        source: DecisionSource,
    },
    /// Deny; the message says why and what would be allowed.
    Deny {
        message: String,
        source: DecisionSource,
    },
}

/// Rules a session gathered from `proceed_always` answers, narrowed as in
/// Gemini CLI: shell by root command, file tools by exact path, MCP by tool or
/// server. They only turn an "ask" into an "allow": never a deny, a dangerous
/// form, a write through a redirection or something the parser could not
/// resolve.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SessionRules {
    shell_roots: BTreeSet<String>,
    /// (tool name, path relative to the workspace root).
    paths: BTreeSet<(String, String)>,
    mcp_tools: BTreeSet<(String, String)>,
    mcp_servers: BTreeSet<String>,
}

/// Root commands never added as a whole by "always allow": allowing them
/// would allow any script or program they run.
const NEVER_ALWAYS: &[&str] = &[
    "bash", "sh", "zsh", "dash", "ksh", "eval", "exec", "env", "sudo", "doas", "xargs", "python",
    "python3", "node", "perl", "ruby", "php", "deno", "bun", "npx", "source", ".", "command",
    "builtin", "timeout", "nice", "nohup", "time", "stdbuf",
];

/// Whether "always allow" may be recorded for root command `root`.
pub fn can_always_allow(root: &str) -> bool {
    !NEVER_ALWAYS.contains(&shell::base_name(root))
}

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
            (Subject::Shell { analysis, .. }, _) => {
                for root in analysis.root_commands().iter().flatten() {
                    if can_always_allow(root) {
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

    /// Whether a session rule allows shell root command `root`.
    pub fn allows_root(&self, root: &str) -> bool {
        self.shell_roots.contains(root)
    }

    /// Whether a session rule allows this (non-shell) call.
    pub fn allows(&self, tool: &str, subject: &Subject) -> bool {
        match subject {
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
    /// The tool's declaration (name, kind, read-only).
    pub decl: &'a Declaration,
    /// What the call would do, as its invocation reports it.
    pub subject: &'a Subject,
    /// The call's (schema-checked) arguments, for `args_pattern`.
    pub args: &'a Args,
    /// The session's approval mode.
    pub mode: ApprovalMode,
    /// Whether a person can answer a prompt (the batch's `interactive`).
    pub interactive: bool,
    /// The session's "always allow" rules.
    pub rules: &'a SessionRules,
    /// The user asked for the call directly (a frontend's `!ls`): what
    /// would ask is allowed, in every mode, but a deny stays a deny (a deny
    /// rule, plan mode, a write outside the workspace), as in Gemini CLI.
    /// A shell command whose analysis cannot see what it runs (a computed
    /// command name, `find -exec …`) still asks: no deny rule could have
    /// been matched against it.
    pub client_initiated: bool,
    /// The call writes inside a git repository's own directory that its
    /// path does not name as `.git` (see
    /// [`crate::tools::Invocation::writes_repository`]).
    pub writes_repository: bool,
}

/// How strict a verdict is; the strictest over segments wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Allow,
    Ask,
    Deny,
}

/// One segment's (or the call's) decision before it becomes a [`Decision`].
struct Verdict {
    level: Level,
    source: DecisionSource,
    /// Why, without the source.
    why: String,
    /// An ask because the analysis cannot see which command will run (a
    /// computed command name, `find -exec` and the other forms that run a
    /// command of their own): no rule, a deny rule included, could be
    /// matched against it, so a client-initiated call still asks.
    opaque: bool,
}

/// Where a redirection writes, relative to the workspace.
enum Place {
    Inside,
    Outside,
    Unknown,
}

const SESSION_FILE: &str = "<session>";

/// A compiled policy: the built-in rules and the operator's, in decision
/// order. Immutable; replaced as a whole on reload.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Sorted: higher tier first, then higher priority, then file order.
    rules: Vec<Rule>,
    /// Where the operator rules came from, for logs.
    source: Option<PathBuf>,
}

impl Default for Policy {
    fn default() -> Self {
        Self::builtin()
    }
}

impl Policy {
    /// The built-in default policy alone.
    pub fn builtin() -> Self {
        Self::with_rules(Vec::new(), None)
    }

    /// The built-in rules plus operator `rules` (from `source`).
    pub fn with_rules(rules: Vec<Rule>, source: Option<PathBuf>) -> Self {
        let mut all = rules;
        all.extend(defaults::builtin_rules());
        // Stable: equal tier and priority keep file order.
        all.sort_by_key(|r| (std::cmp::Reverse(r.tier), std::cmp::Reverse(r.priority)));
        Self { rules: all, source }
    }

    /// The policy of the file at `path` over the built-in rules.
    pub fn from_file(path: &Path) -> Result<Self, PolicyError> {
        Ok(Self::with_rules(load_file(path)?, Some(path.to_path_buf())))
    }

    /// The operator file this policy was loaded from, if any.
    pub fn source(&self) -> Option<&Path> {
        self.source.as_deref()
    }

    /// This policy with the operator rules of `tenant` (a policy loaded
    /// from a tenant's file) as the tenant tier over its own: a tenant rule
    /// beats any server rule, and the session's "always" answers still
    /// only turn its asks into allows.
    pub fn layered(&self, tenant: &Policy) -> Policy {
        let mut all = self.rules.clone();
        all.extend(
            tenant
                .rules
                .iter()
                .filter(|r| r.tier == Tier::Operator)
                .cloned()
                .map(|mut r| {
                    r.tier = Tier::Tenant;
                    r
                }),
        );
        all.sort_by_key(|r| (std::cmp::Reverse(r.tier), std::cmp::Reverse(r.priority)));
        Policy {
            rules: all,
            source: self.source.clone(),
        }
    }

    /// Number of operator rules.
    pub fn operator_rules(&self) -> usize {
        self.rules
            .iter()
            .filter(|r| r.tier == Tier::Operator)
            .count()
    }

    /// Decides `input` for a workspace rooted at `workspace` (absolute; used
    /// to place redirection targets; `None` treats absolute targets as
    /// outside).
    pub fn decide_in(&self, input: PolicyInput<'_>, workspace: Option<&Path>) -> Decision {
        let args_text = rules::serialize_args(input.args);
        let verdict = match input.subject {
            Subject::Shell {
                analysis, dir_path, ..
            } => self.shell_verdict(&input, analysis, dir_path, workspace),
            _ => self.call_verdict(&input, &args_text),
        };
        if input.client_initiated && verdict.level == Level::Ask && !verdict.opaque {
            // The person asking is the one a prompt would ask. Not when the
            // analysis cannot see what runs: a deny rule could not have
            // matched it, and a deny stays a deny.
            return Decision::Allow;
        }
        into_decision(verdict, input.decl)
    }

    /// Decides `input` without a workspace root.
    pub fn decide(&self, input: PolicyInput<'_>) -> Decision {
        self.decide_in(input, None)
    }

    fn first_match(&self, m: &MatchInput<'_>) -> &Rule {
        // The built-in `ask-by-default` rule matches everything, so there is
        // always a match; the fallback only satisfies the type.
        self.rules
            .iter()
            .find(|r| r.matches(m))
            .unwrap_or_else(|| &self.rules[self.rules.len() - 1])
    }

    /// A non-shell call: the first matching rule, then session rules.
    fn call_verdict(&self, input: &PolicyInput<'_>, args_text: &str) -> Verdict {
        let rule = self.first_match(&MatchInput {
            decl: input.decl,
            subject: input.subject,
            mode: input.mode,
            interactive: input.interactive,
            args: args_text,
            segment: None,
            read_only_segment: false,
        });
        let mut v = rule_verdict(rule, None);
        if v.level < Level::Deny
            && let Some(path) = protected_write(input)
        {
            // A hook or config planted in `.git` runs at the next git
            // command, outside any sandbox: a dangerous form that no allow
            // rule, mode or "always allow" lifts (a deny still denies).
            return builtin_verdict(
                Level::Ask,
                "protected-path",
                None,
                format!(
                    "it writes {path}, inside a git repository's directory (the sandbox's protected paths): it asks in every mode"
                ),
            );
        }
        if v.level == Level::Ask && input.rules.allows(&input.decl.name, input.subject) {
            v = session_verdict(
                None,
                "approved with \"always allow\" earlier in this session",
            );
        }
        v
    }

    fn shell_verdict(
        &self,
        input: &PolicyInput<'_>,
        analysis: &ShellAnalysis,
        dir_path: &str,
        workspace: Option<&Path>,
    ) -> Verdict {
        let mut verdicts = Vec::new();
        for seg in &analysis.segments {
            verdicts.push(self.segment_verdict(input, seg, analysis, dir_path, workspace));
        }
        for u in &analysis.unresolved {
            // What the parser cannot see: the tool-level rules (no command
            // prefix can match) may still deny; otherwise it asks.
            let rule = self.first_match(&MatchInput {
                decl: input.decl,
                subject: input.subject,
                mode: input.mode,
                interactive: input.interactive,
                args: &rules::serialize_args(input.args),
                segment: None,
                read_only_segment: false,
            });
            if rule.decision == RuleDecision::Deny {
                verdicts.push(rule_verdict(rule, Some(&u.text)));
            } else {
                let mut v = builtin_verdict(
                    Level::Ask,
                    "unresolved-shell",
                    Some(&u.text),
                    format!("the command cannot be analysed fully: {}", u.reason),
                );
                v.opaque = true;
                verdicts.push(v);
            }
        }
        if verdicts.is_empty() {
            // Only comments or assignments: decided as the tool itself.
            return self.call_verdict(input, &rules::serialize_args(input.args));
        }
        // The strictest; the first one of that level names the segment.
        // Opaque if any ask is: one hidden command hides it from the rules
        // whichever segment names the decision.
        let opaque = verdicts.iter().any(|v| v.opaque && v.level == Level::Ask);
        let mut best = verdicts.remove(0);
        for v in verdicts {
            if v.level > best.level {
                best = v;
            }
        }
        best.opaque = best.level == Level::Ask && opaque;
        best
    }

    fn segment_verdict(
        &self,
        input: &PolicyInput<'_>,
        seg: &Segment,
        analysis: &ShellAnalysis,
        dir_path: &str,
        workspace: Option<&Path>,
    ) -> Verdict {
        // The rule sees this segment as if it were the whole command.
        // Built without copying the whole script once per segment (a long
        // script of many segments would cost quadratic time).
        let mut args: Args = input
            .args
            .iter()
            .filter(|(k, _)| k.as_str() != "command")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        args.insert(
            "command".into(),
            serde_json::Value::String(seg.command_line()),
        );
        let args_text = rules::serialize_args(&args);
        let read_only = defaults::is_read_only(seg);
        let rule = self.first_match(&MatchInput {
            decl: input.decl,
            subject: input.subject,
            mode: input.mode,
            interactive: input.interactive,
            args: &args_text,
            segment: Some(seg),
            read_only_segment: read_only,
        });
        let text = seg.text.as_str();
        let mut v = rule_verdict(rule, Some(text));
        let mut session_may_allow = v.level == Level::Ask;
        let explicit = rule.tier >= Tier::Operator
            && rule.is_specific()
            && rule.decision == RuleDecision::Allow;
        if v.level < Level::Deny
            && let Some(form) = defaults::context_danger(seg)
        {
            v = builtin_verdict(
                Level::Ask,
                "dangerous-shell",
                Some(text),
                format!(
                    "`{form}` is a dangerous form: it asks in every mode, whatever rule allows the command it runs"
                ),
            );
            session_may_allow = false;
        } else if v.level < Level::Deny
            && !explicit
            && let Some(form) = defaults::dangerous_form(seg)
        {
            v = builtin_verdict(
                Level::Ask,
                "dangerous-shell",
                Some(text),
                format!(
                    "`{form}` is a dangerous form: it asks unless an operator rule naming it allows it"
                ),
            );
            session_may_allow = false;
        }
        if v.level == Level::Ask && defaults::runs_hidden_command(seg) {
            v.opaque = true;
        }
        for w in &seg.writes {
            let shown = w.target.as_deref().unwrap_or(&w.text);
            match place(
                w.target.as_deref(),
                dir_path,
                workspace,
                analysis.changes_dir,
            ) {
                Place::Outside => {
                    return builtin_verdict(
                        Level::Deny,
                        "write-outside-workspace",
                        Some(text),
                        format!("it writes to {shown}, outside the workspace"),
                    );
                }
                Place::Unknown => {
                    session_may_allow = false;
                    if v.level < Level::Ask {
                        v = builtin_verdict(
                            Level::Ask,
                            "unresolved-write",
                            Some(text),
                            format!(
                                "it writes to `{}`, whose location cannot be known before it runs",
                                w.text
                            ),
                        );
                    }
                }
                Place::Inside => {
                    session_may_allow = false;
                    if v.level == Level::Allow && !rule.allow_redirection {
                        v = Verdict {
                            level: Level::Ask,
                            why: format!(
                                "it writes to {shown} through a redirection, and the rule that allows it has no allow_redirection"
                            ),
                            source: v.source,
                            opaque: false,
                        };
                    }
                }
            }
        }
        if session_may_allow
            && v.level == Level::Ask
            && seg.name().is_some_and(|n| input.rules.allows_root(n))
        {
            v = session_verdict(
                Some(text),
                "its command was approved with \"always allow\" earlier in this session",
            );
        }
        v
    }
}

/// The path a writing file tool's call writes, when it is protected (a
/// `.git` at any depth, as the sandbox protects it from commands).
fn protected_write<'a>(input: &PolicyInput<'a>) -> Option<&'a str> {
    match input.subject {
        Subject::File { path }
            if !input.decl.read_only
                && (input.writes_repository
                    || crate::sandbox::protected::is_protected_path(Path::new(path))) =>
        {
            Some(path.as_str())
        }
        _ => None,
    }
}

fn rule_verdict(rule: &Rule, segment: Option<&str>) -> Verdict {
    let source = DecisionSource {
        file: rule.origin.file.to_string(),
        line: (rule.origin.line > 0).then_some(rule.origin.line),
        rule: rule
            .name
            .clone()
            .unwrap_or_else(|| format!("#{}", rule.origin.index)),
        segment: segment.map(str::to_string),
    };
    let (level, why) = match rule.decision {
        RuleDecision::Allow => (Level::Allow, String::new()),
        RuleDecision::AskUser => (Level::Ask, "the rule asks for approval".to_string()),
        RuleDecision::Deny => (
            Level::Deny,
            rule.deny_message
                .clone()
                .unwrap_or_else(|| "the rule denies it".to_string()),
        ),
    };
    Verdict {
        level,
        source,
        why,
        opaque: false,
    }
}

fn builtin_verdict(level: Level, rule: &str, segment: Option<&str>, why: String) -> Verdict {
    Verdict {
        level,
        source: DecisionSource {
            file: defaults::BUILTIN_FILE.into(),
            line: None,
            rule: rule.into(),
            segment: segment.map(str::to_string),
        },
        why,
        opaque: false,
    }
}

fn session_verdict(segment: Option<&str>, why: &str) -> Verdict {
    Verdict {
        level: Level::Allow,
        source: DecisionSource {
            file: SESSION_FILE.into(),
            line: None,
            rule: "always-allow".into(),
            segment: segment.map(str::to_string),
        },
        why: why.into(),
        opaque: false,
    }
}

fn into_decision(v: Verdict, decl: &Declaration) -> Decision {
    match v.level {
        Level::Allow => Decision::Allow,
        Level::Ask => Decision::AskUser {
            reason: format!(
                "Approval required for '{}': {} [{}].",
                decl.name, v.why, v.source
            ),
            source: v.source,
        },
        Level::Deny => Decision::Deny {
            message: format!("Tool '{}' denied: {} [{}].", decl.name, v.why, v.source),
            source: v.source,
        },
    }
}

/// Places a redirection target: `dir_path` is the command's working
/// directory relative to the workspace root. Lexical only: a symlink inside
/// the workspace pointing out is the sandbox's to stop.
fn place(
    target: Option<&str>,
    dir_path: &str,
    workspace: Option<&Path>,
    changes_dir: bool,
) -> Place {
    let Some(t) = target else {
        return Place::Unknown;
    };
    if t.starts_with('~') {
        return Place::Outside;
    }
    if t.contains(['*', '?', '[']) {
        return Place::Unknown;
    }
    let path = Path::new(t);
    if path.is_absolute() {
        let Some(root) = workspace else {
            return Place::Outside;
        };
        return match normalize(path) {
            Some(p) if p.starts_with(root) => Place::Inside,
            _ => Place::Outside,
        };
    }
    if changes_dir {
        return Place::Unknown;
    }
    // Relative to the workspace root: `..` past it is outside.
    let mut depth: usize = 0;
    for c in Path::new(dir_path).join(path).components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::ParentDir => {
                if depth == 0 {
                    return Place::Outside;
                }
                depth -= 1;
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return Place::Outside,
        }
    }
    Place::Inside
}

/// `path` with `.` and `..` removed lexically; `None` if `..` climbs past `/`.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

/// What sessions hold to read the policy in force: a `watch` receiver (no
/// lock shared with anyone) and the workspace root decisions place
/// redirection targets in.
#[derive(Clone)]
pub struct PolicyHandle {
    rx: watch::Receiver<Arc<Policy>>,
    workspace: Option<Arc<Path>>,
}

impl Default for PolicyHandle {
    fn default() -> Self {
        Self::fixed(Policy::builtin())
    }
}

impl PolicyHandle {
    /// A handle to a policy that never changes.
    pub fn fixed(policy: Policy) -> Self {
        let (tx, rx) = watch::channel(Arc::new(policy));
        // The receiver keeps the last value after the sender is gone.
        drop(tx);
        Self {
            rx,
            workspace: None,
        }
    }

    /// A handle following `rx` (see [`reload::watch_file`]).
    pub fn from_watch(rx: watch::Receiver<Arc<Policy>>) -> Self {
        Self {
            rx,
            workspace: None,
        }
    }

    /// The same handle, placing redirection targets in `root` (absolute).
    pub fn with_workspace(mut self, root: &Path) -> Self {
        self.workspace = Some(Arc::from(root));
        self
    }

    /// This handle with `tenant`'s rules as the tenant tier over it
    /// ([`Policy::layered`]), following both as they reload, until
    /// `shutdown`. Placed in this handle's workspace.
    pub fn layered(&self, tenant: &PolicyHandle, shutdown: CancellationToken) -> PolicyHandle {
        let (mut base, mut upper) = (self.rx.clone(), tenant.rx.clone());
        let combine = |b: &Policy, t: &Policy| Arc::new(b.layered(t));
        let (tx, rx) = watch::channel(combine(
            &base.borrow_and_update(),
            &upper.borrow_and_update(),
        ));
        // Built outside a runtime (unit tests, library use): a fixed layer.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                // A fixed policy's sender is gone: its side never changes.
                let (mut base_open, mut upper_open) = (true, true);
                loop {
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        changed = base.changed(), if base_open => base_open = changed.is_ok(),
                        changed = upper.changed(), if upper_open => upper_open = changed.is_ok(),
                        else => return,
                    }
                    let next = combine(&base.borrow_and_update(), &upper.borrow_and_update());
                    if tx.send(next).is_err() {
                        return;
                    }
                }
            });
        }
        PolicyHandle {
            rx,
            workspace: self.workspace.clone(),
        }
    }

    /// The policy in force now.
    pub fn current(&self) -> Arc<Policy> {
        self.rx.borrow().clone()
    }

    /// Decides `input` with the policy in force now.
    pub fn decide(&self, input: PolicyInput<'_>) -> Decision {
        self.current().decide_in(input, self.workspace.as_deref())
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
