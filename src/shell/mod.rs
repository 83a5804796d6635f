//! Shell command analysis with a real bash parser (tree-sitter-bash), as
//! codex-rs does: every simple command a script would run, with its words,
//! the wrappers in front of it and the redirections that apply to it.
//!
//! Threat model: an allow rule for `ls` must not let `ls && rm -rf ~` run,
//! and an allowed `wc` must not write files through `>`. So the analysis
//! finds every simple command wherever it hides: lists (`&&`, `||`, `;`,
//! `&`, newlines), pipelines, `$(…)` and backticks (also inside double
//! quotes and unquoted heredocs), `<(…)`/`>(…)`, subshells, `{ …; }`, loops,
//! functions, scripts given to `bash -c`/`sh -c`/`eval` (parsed recursively),
//! and the real command behind wrappers (`env`, `xargs`, `timeout`, `nice`,
//! `nohup`, `sudo`, `command`, `exec`, `time`). Text inside single quotes (and
//! quoted heredocs) is data. What the parser cannot resolve (a parse error, a
//! command name built from an expansion, an unknown wrapper option, a script
//! from a variable) is reported in [`ShellAnalysis::unresolved`], and policy
//! asks for it.
//!
//! A leaf module: it imports nothing of `policy`, `tools` or `scheduler`.
//! The shell tool analyses a command once, when it builds the invocation,
//! and carries the result (`Arc<ShellAnalysis>` in `Subject::Shell`) to the
//! policy and the approval prompt, so a command is parsed once per call.
//!
//! Not here: deciding anything (see `policy`), running the command.

use tree_sitter::{Node, Parser};

/// Nesting of `bash -c`/`eval` scripts followed before giving up (a script
/// that nests deeper is unresolved): bounds the work an input can cause.
pub const MAX_NESTING: usize = 8;
/// Longest script analysed, in bytes; a longer one is unresolved. Bounds
/// parse time; the tool's own argument limit is larger than any sane script.
pub const MAX_SCRIPT_BYTES: usize = 256 * 1024;
/// Simple commands analysed per script; more are unresolved. Bounds the
/// policy's work per decision (every segment is matched against every rule).
pub const MAX_SEGMENTS: usize = 4096;

/// Shells whose `-c` argument is a script to analyse.
const SHELLS: &[&str] = &[
    "bash",
    "sh",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "ash",
    "busybox-sh",
];

/// One word of a simple command: its literal value, or `None` when it
/// contains an expansion (`$x`, `$(…)`, `$'…'`) whose value the parser cannot
/// know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// The value after quote removal, when it is a literal.
    pub literal: Option<String>,
    /// The source text.
    pub text: String,
}

/// Where a redirection writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// The literal target path, or `None` when it contains an expansion.
    pub target: Option<String>,
    /// The redirection's source text, e.g. `>> log.txt`.
    pub text: String,
    /// Which redirection of the analysis this is (numbered in source
    /// order), so the walk can tell whether a segment carries it.
    id: usize,
}

/// A simple command the script runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Source text of the command as written (for `bash -c 'a; b'` the text
    /// of `a` inside the script).
    pub text: String,
    /// Words of the real command, wrappers stripped: `sudo -u x rm -rf a` →
    /// `rm -rf a`.
    pub words: Vec<Word>,
    /// Wrappers stripped in front of it, outermost first (`sudo`, `bash -c`).
    pub wrappers: Vec<String>,
    /// Names of variables assigned for this command (`FOO=1 cmd`, `env FOO=1
    /// cmd`, `export FOO=1`, a bare `FOO=1`), including those assigned by
    /// the commands that run it: `BASH_ENV=x bash -c 'ls'` gives `ls` the
    /// assignment of `BASH_ENV`, because the inner shell sees it. They can
    /// change what a command does (`PATH`, `BASH_ENV`, `GIT_PAGER`).
    pub assignments: Vec<String>,
    /// Redirections to files that apply to it (its own and those of
    /// enclosing `{ …; } > f`, subshells, loops). Duplications (`2>&1`) and
    /// `/dev/null`-like targets are left out.
    pub writes: Vec<Redirect>,
}

impl Segment {
    /// Whether the segment runs no command: a redirection or assignment on
    /// its own (`> f`, `FOO=1`, `(( x )) > f`). `words` is empty.
    pub fn is_bare(&self) -> bool {
        self.words.is_empty()
    }

    /// The command name, when it is a literal.
    pub fn name(&self) -> Option<&str> {
        self.words.first().and_then(|w| w.literal.as_deref())
    }

    /// The command name without its directory (`/usr/bin/curl` → `curl`),
    /// when it is a literal.
    pub fn base_name(&self) -> Option<&str> {
        self.name().map(base_name)
    }

    /// Literal words (`None` for dynamic ones).
    pub fn argv(&self) -> Vec<Option<&str>> {
        self.words.iter().map(|w| w.literal.as_deref()).collect()
    }

    /// The command line rules match against: the words after wrappers,
    /// literal values where known and the source text otherwise, joined by
    /// single spaces.
    pub fn command_line(&self) -> String {
        self.words
            .iter()
            .map(|w| w.literal.as_deref().unwrap_or(&w.text))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Whether every word is a literal.
    pub fn is_literal(&self) -> bool {
        self.words.iter().all(|w| w.literal.is_some())
    }
}

/// Something the parser could not resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolved {
    /// The source text concerned (the whole script for a parse error).
    pub text: String,
    /// Why, in words for the approval prompt.
    pub reason: String,
}

/// What a script does, as far as the parser can tell.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShellAnalysis {
    /// Every simple command, in source order.
    pub segments: Vec<Segment>,
    /// What could not be resolved; empty when the analysis is complete.
    pub unresolved: Vec<Unresolved>,
    /// The script changes directory (`cd`, `pushd`, `popd`), so relative
    /// write targets cannot be placed.
    pub changes_dir: bool,
    /// Redirections numbered so far (see [`Redirect`]).
    redirects_seen: usize,
}

impl ShellAnalysis {
    /// The analysis is complete: nothing unresolved.
    pub fn is_complete(&self) -> bool {
        self.unresolved.is_empty()
    }

    /// Command names of every segment, deduplicated in order of appearance;
    /// `None` when the analysis is incomplete.
    pub fn root_commands(&self) -> Option<Vec<String>> {
        if !self.is_complete() {
            return None;
        }
        let mut names: Vec<String> = Vec::new();
        for seg in &self.segments {
            if let Some(name) = seg.name()
                && !names.iter().any(|n| n == name)
            {
                names.push(name.to_string());
            }
        }
        Some(names)
    }

    /// Every write target (source text of the target), deduplicated.
    pub fn write_targets(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for seg in &self.segments {
            for w in &seg.writes {
                let t = w.target.clone().unwrap_or_else(|| w.text.clone());
                if !out.contains(&t) {
                    out.push(t);
                }
            }
        }
        out
    }

    /// Whether the script writes to any file.
    pub fn redirects(&self) -> bool {
        self.segments.iter().any(|s| !s.writes.is_empty())
    }
}

/// Analyses `script`.
pub fn analyze(script: &str) -> ShellAnalysis {
    let mut out = ShellAnalysis::default();
    analyze_into(script, 0, &Inherited::default(), &[], &mut out);
    out
}

/// What a nested script's segments inherit from the command that ran it.
#[derive(Default)]
struct Inherited {
    /// Wrappers, outermost first (`sudo`, `bash -c`).
    wrappers: Vec<String>,
    /// Variables the outer commands assigned (`BASH_ENV=x bash -c …`,
    /// `env LD_PRELOAD=x sh -c …`): the inner commands run with them.
    assignments: Vec<String>,
}

/// Analyses `script` at nesting `depth`; its segments get the wrappers and
/// assignments in `inherited` and the `writes` of the command that ran it.
fn analyze_into(
    script: &str,
    depth: usize,
    inherited: &Inherited,
    writes: &[Redirect],
    out: &mut ShellAnalysis,
) {
    if depth > MAX_NESTING {
        out.unresolved.push(Unresolved {
            text: script.to_string(),
            reason: format!("scripts nested more than {MAX_NESTING} levels deep"),
        });
        return;
    }
    if script.len() > MAX_SCRIPT_BYTES {
        out.unresolved.push(Unresolved {
            text: truncate(script),
            reason: format!("script longer than {MAX_SCRIPT_BYTES} bytes"),
        });
        return;
    }
    let mut parser = Parser::new();
    if parser
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .is_err()
    {
        out.unresolved.push(Unresolved {
            text: truncate(script),
            reason: "the bash grammar could not be loaded".into(),
        });
        return;
    }
    let Some(tree) = parser.parse(script, None) else {
        out.unresolved.push(Unresolved {
            text: truncate(script),
            reason: "the bash parser gave up".into(),
        });
        return;
    };
    let root = tree.root_node();
    if root.has_error() {
        out.unresolved.push(Unresolved {
            text: truncate(script),
            reason: "the script does not parse as bash".into(),
        });
    }
    let mut walk = Walk {
        src: script,
        depth,
        inherited,
        out,
    };
    walk.visit(root, writes);
}

fn truncate(s: &str) -> String {
    const SHOWN: usize = 200;
    if s.len() <= SHOWN {
        return s.to_string();
    }
    let mut end = SHOWN;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

struct Walk<'a, 'o> {
    src: &'a str,
    depth: usize,
    inherited: &'a Inherited,
    out: &'o mut ShellAnalysis,
}

/// Node kinds of a redirection.
const REDIRECT_KINDS: &[&str] = &["file_redirect", "heredoc_redirect", "herestring_redirect"];

/// Commands that assign the variable named by an argument (`read PATH`,
/// `printf -v PATH …`): the names are assignments for the policy.
const ASSIGNING_COMMANDS: &[&str] = &["read", "printf", "mapfile", "readarray", "getopts"];

impl Walk<'_, '_> {
    fn text(&self, node: Node<'_>) -> String {
        self.src[node.byte_range()].to_string()
    }

    /// Visits `node` with the file writes of enclosing statements.
    fn visit(&mut self, node: Node<'_>, writes: &[Redirect]) {
        match node.kind() {
            // `… > f`, and `f() { …; } > f` (applied at each call).
            "redirected_statement" | "function_definition" => {
                let start = self.out.segments.len();
                let mut inner = writes.to_vec();
                let mut cursor = node.walk();
                let redirects: Vec<Node<'_>> = node
                    .children_by_field_name("redirect", &mut cursor)
                    .collect();
                for r in &redirects {
                    self.redirect(*r, &mut inner);
                    self.visit_inside_redirect(*r, writes);
                }
                let body = node.child_by_field_name("body");
                if node.kind() == "function_definition" {
                    // Visit the rest (name, body) as before, with the writes.
                    let mut cursor = node.walk();
                    let children: Vec<Node<'_>> = node.children(&mut cursor).collect();
                    for child in children {
                        if !REDIRECT_KINDS.contains(&child.kind()) {
                            self.visit(child, &inner);
                        }
                    }
                } else if let Some(body) = body {
                    self.redirected_body(body, writes, &inner);
                }
                // A redirection no command carries (`> f`, `ls && > f`,
                // `(( x )) > f`, `case … esac > f`) still opens, and
                // truncates, its file: it is a segment of its own.
                self.carry(node, start, &inner[writes.len()..], Vec::new());
            }
            // A redirection outside any statement (`$(> f)`, or in a part
            // the parser could not read): a write of its own.
            kind if REDIRECT_KINDS.contains(&kind) => {
                let start = self.out.segments.len();
                let mut own = Vec::new();
                self.redirect(node, &mut own);
                self.visit_inside_redirect(node, writes);
                self.carry(node, start, &own, Vec::new());
            }
            "command" => self.command(node, writes),
            // A bare `FOO=1` (also in `A=1 B=2`): it changes what later
            // commands of the script do when the variable is exported or
            // special (`PATH=.; ls` runs `./ls`).
            "variable_assignment" => {
                let names = self.assigned_name(node).into_iter().collect();
                self.push_segment(node, Vec::new(), Vec::new(), names, writes);
                self.visit_children(node, writes);
            }
            // `for PATH in …; do …; done` assigns its variable.
            "for_statement" => {
                if let Some(var) = node.child_by_field_name("variable") {
                    let name = self.text(var);
                    self.push_segment(var, Vec::new(), Vec::new(), vec![name], writes);
                }
                self.visit_children(node, writes);
            }
            "declaration_command" | "unset_command" => {
                // `export PATH=…`, `declare -x …`: its words are its keyword
                // and arguments; substitutions inside are visited. The
                // variables it assigns are its assignments.
                let words = self.words_of(node);
                let mut names = Vec::new();
                let mut cursor = node.walk();
                let children: Vec<Node<'_>> = node.named_children(&mut cursor).collect();
                for child in &children {
                    if child.kind() == "variable_assignment" {
                        names.extend(self.assigned_name(*child));
                    }
                }
                self.push_segment(node, words, Vec::new(), names, writes);
                for child in children {
                    self.visit_children(child, writes);
                }
            }
            "test_command" => {
                let words = vec![Word {
                    literal: Some("[[".into()),
                    text: "[[".into(),
                }];
                self.push_segment(node, words, Vec::new(), Vec::new(), writes);
                self.visit_children(node, writes);
            }
            // Literal data: nothing runs inside.
            "raw_string" | "heredoc_content" | "comment" => {}
            _ => self.visit_children(node, writes),
        }
    }

    /// tree-sitter-bash hangs `a && b > f` and `a | b > f` as a redirect of
    /// the whole list or pipeline; bash applies it to the last command only.
    fn redirected_body(&mut self, body: Node<'_>, outer: &[Redirect], inner: &[Redirect]) {
        if !matches!(body.kind(), "list" | "pipeline") {
            self.visit(body, inner);
            return;
        }
        let mut cursor = body.walk();
        let children: Vec<Node<'_>> = body.children(&mut cursor).collect();
        let last = children
            .iter()
            .rposition(|c| c.is_named() && c.kind() != "comment");
        for (i, child) in children.into_iter().enumerate() {
            if Some(i) == last {
                self.redirected_body(child, outer, inner);
            } else {
                self.visit(child, outer);
            }
        }
    }

    fn visit_children(&mut self, node: Node<'_>, writes: &[Redirect]) {
        let mut cursor = node.walk();
        let children: Vec<Node<'_>> = node.children(&mut cursor).collect();
        for child in children {
            self.visit(child, writes);
        }
    }

    /// Visits what runs inside redirection `r` (`> $(cmd)`, a heredoc's
    /// substitutions) without counting `r` or the redirections nested in
    /// it (`cat <<EOF > f`) again: [`Walk::redirect`] recorded those.
    fn visit_inside_redirect(&mut self, r: Node<'_>, writes: &[Redirect]) {
        let mut cursor = r.walk();
        let children: Vec<Node<'_>> = r.children(&mut cursor).collect();
        for child in children {
            if REDIRECT_KINDS.contains(&child.kind()) {
                self.visit_inside_redirect(child, writes);
            } else {
                self.visit(child, writes);
            }
        }
    }

    /// Makes sure the redirections `own` of `node` are carried by a segment:
    /// when none of the segments pushed since `start` has them (no command
    /// ran under them, or the command could not be resolved), pushes a bare
    /// segment with them and `assignments`.
    fn carry(&mut self, node: Node<'_>, start: usize, own: &[Redirect], assignments: Vec<String>) {
        let Some(first) = own.first() else {
            return;
        };
        let carried = self.out.segments[start.min(self.out.segments.len())..]
            .iter()
            .any(|s| s.writes.iter().any(|w| w.id == first.id));
        if !carried {
            self.push_segment(node, Vec::new(), Vec::new(), assignments, own);
        }
    }

    /// The name a `variable_assignment` assigns (`a[0]=1` assigns `a`).
    fn assigned_name(&self, node: Node<'_>) -> Option<String> {
        let name = node.child_by_field_name("name")?;
        let text = self.text(name);
        Some(match text.split_once('[') {
            Some((base, _)) => base.to_string(),
            None => text,
        })
    }

    /// Records the file writes of redirection node `r` (and of the
    /// redirections nested in it: `cat <<EOF > f`) into `writes`.
    fn redirect(&mut self, r: Node<'_>, writes: &mut Vec<Redirect>) {
        if r.kind() != "file_redirect" {
            // heredoc / herestring: input, but `cat <<EOF > f` hangs the
            // `> f` inside the heredoc's node.
            let mut cursor = r.walk();
            let nested: Vec<Node<'_>> = r
                .named_children(&mut cursor)
                .filter(|c| REDIRECT_KINDS.contains(&c.kind()))
                .collect();
            for n in nested {
                self.redirect(n, writes);
            }
            return;
        }
        let mut op = None;
        let mut cursor = r.walk();
        for child in r.children(&mut cursor) {
            if !child.is_named() {
                op = Some(child.kind());
            }
        }
        let dest = r.child_by_field_name("destination");
        let is_write = match op {
            // `>&2`, `>&-` duplicate a descriptor; `>& file` writes it.
            Some(">&") => dest.is_some_and(|d| {
                let t = self.text(d);
                !(d.kind() == "number" || t == "-" || t.chars().all(|c| c.is_ascii_digit()))
            }),
            // `<`, `<&0`: input.
            Some(op) if op.starts_with('<') && !op.contains('>') => false,
            Some("<&-" | "<&") => false,
            // `>`, `>>`, `&>`, `&>>`, `>|`, `<>`, and any other form that
            // opens a file for output: a write.
            Some(op) => op.contains('>'),
            None => false,
        };
        if !is_write {
            return;
        }
        let target = dest.and_then(|d| literal(d, self.src));
        if let Some(t) = &target
            && is_harmless_target(t)
        {
            return;
        }
        let id = self.out.redirects_seen;
        self.out.redirects_seen += 1;
        writes.push(Redirect {
            target,
            text: self.text(r),
            id,
        });
    }

    fn words_of(&self, node: Node<'_>) -> Vec<Word> {
        let mut words = Vec::new();
        let mut cursor = node.walk();
        for child in node.named_children(&mut cursor) {
            if REDIRECT_KINDS.contains(&child.kind()) || child.kind() == "comment" {
                continue;
            }
            words.push(Word {
                literal: literal(child, self.src),
                text: self.text(child),
            });
        }
        // The keyword itself (`export`) is an anonymous child.
        if let Some(first) = node.child(0)
            && !first.is_named()
        {
            words.insert(
                0,
                Word {
                    literal: Some(first.kind().to_string()),
                    text: first.kind().to_string(),
                },
            );
        }
        words
    }

    fn command(&mut self, node: Node<'_>, writes: &[Redirect]) {
        let start = self.out.segments.len();
        let mut own_writes = writes.to_vec();
        let mut assignments = Vec::new();
        self.command_inner(node, writes, &mut own_writes, &mut assignments);
        // The command's own redirections write even when it pushed no
        // segment (a bare `FOO=1 > f`, an unresolved `$cmd > f`, a
        // `bash -c ''` script with nothing in it).
        self.carry(node, start, &own_writes[writes.len()..], assignments);
    }

    /// [`Walk::command`]: fills `own_writes` (the inherited `writes`, then
    /// the command's own) and `assignments` (the command's own) as it goes.
    fn command_inner(
        &mut self,
        node: Node<'_>,
        writes: &[Redirect],
        own_writes: &mut Vec<Redirect>,
        assignments: &mut Vec<String>,
    ) {
        let mut words = Vec::new();
        let mut cursor = node.walk();
        let children: Vec<Node<'_>> = node.named_children(&mut cursor).collect();
        for child in &children {
            match child.kind() {
                kind if REDIRECT_KINDS.contains(&kind) => {
                    self.redirect(*child, own_writes);
                }
                "variable_assignment" => {
                    assignments.extend(self.assigned_name(*child));
                }
                "comment" => {}
                // `FOO=1 > f` parses with a missing command name.
                "command_name" if child.named_child(0).is_some_and(|c| c.is_missing()) => {}
                _ => words.push(Word {
                    literal: literal(*child, self.src),
                    text: self.text(*child),
                }),
            }
        }
        // Substitutions anywhere in the command run too (the redirections
        // themselves were recorded above).
        for child in &children {
            match child.kind() {
                kind if REDIRECT_KINDS.contains(&kind) => {
                    self.visit_inside_redirect(*child, writes)
                }
                "variable_assignment" => self.visit_children(*child, writes),
                _ => self.visit(*child, writes),
            }
        }
        if words.is_empty() {
            // `FOO=1 > f`: a bare segment with the assignments and writes.
            let mut own = std::mem::take(assignments);
            if !own.is_empty() || own_writes.len() > writes.len() {
                let carried = own_writes.clone();
                self.push_segment(
                    node,
                    Vec::new(),
                    Vec::new(),
                    std::mem::take(&mut own),
                    &carried,
                );
            }
            return;
        }
        let (words, mut wrappers, more_assignments) = match strip_wrappers(words) {
            Ok(stripped) => stripped,
            Err(reason) => {
                self.out.unresolved.push(Unresolved {
                    text: self.text(node),
                    reason,
                });
                return;
            }
        };
        assignments.extend(more_assignments);
        let Some(first) = words.first() else {
            return; // a bare wrapper such as `nohup` with nothing after it
        };
        let Some(name) = first.literal.clone() else {
            self.out.unresolved.push(Unresolved {
                text: self.text(node),
                reason: format!("the command name `{}` is computed at run time", first.text),
            });
            return;
        };
        // `cur? x` or `/usr/bin/c*l` is whatever the glob finds.
        if !matches!(name.as_str(), "[" | "[[") && name.contains(['*', '?', '[', '{']) {
            self.out.unresolved.push(Unresolved {
                text: self.text(node),
                reason: format!("the command name `{name}` is a pattern expanded at run time"),
            });
            return;
        }
        if matches!(name.as_str(), "cd" | "pushd" | "popd") {
            self.out.changes_dir = true;
        }
        // `read PATH`, `printf -v PATH …` assign the variable they name.
        if ASSIGNING_COMMANDS.contains(&base_name(&name)) {
            for w in words.iter().skip(1).filter_map(|w| w.literal.as_deref()) {
                let var = w.strip_prefix("-v").unwrap_or(w);
                if !var.is_empty() && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    assignments.push(var.to_string());
                }
            }
        }
        // A script passed to a shell or eval: analyse it in place of the
        // command that runs it. Its commands inherit the wrappers, the
        // assignments (`BASH_ENV=x bash -c 'ls'`: the inner shell reads
        // BASH_ENV) and the writes of the command that runs it.
        match nested_script(&name, &words) {
            Nested::None => {}
            Nested::Script(script, how) => {
                let mut inherited = Inherited {
                    wrappers: self.inherited.wrappers.clone(),
                    assignments: self.inherited.assignments.clone(),
                };
                inherited.wrappers.append(&mut wrappers);
                inherited.wrappers.push(how);
                inherited.assignments.append(assignments);
                let depth = self.depth + 1;
                analyze_into(&script, depth, &inherited, own_writes, self.out);
                return;
            }
            Nested::Opaque(reason) => {
                self.out.unresolved.push(Unresolved {
                    text: self.text(node),
                    reason,
                });
                return;
            }
        }
        let own = std::mem::take(assignments);
        let carried = own_writes.clone();
        self.push_segment(node, words, wrappers, own, &carried);
    }

    fn push_segment(
        &mut self,
        node: Node<'_>,
        words: Vec<Word>,
        wrappers: Vec<String>,
        assignments: Vec<String>,
        writes: &[Redirect],
    ) {
        if self.out.segments.len() >= MAX_SEGMENTS {
            if !self
                .out
                .unresolved
                .iter()
                .any(|u| u.reason.contains("simple commands"))
            {
                self.out.unresolved.push(Unresolved {
                    text: truncate(self.src),
                    reason: format!("more than {MAX_SEGMENTS} simple commands"),
                });
            }
            return;
        }
        let mut all = self.inherited.wrappers.clone();
        all.extend(wrappers);
        let mut assigned = self.inherited.assignments.clone();
        assigned.extend(assignments);
        self.out.segments.push(Segment {
            text: self.text(node),
            words,
            wrappers: all,
            assignments: assigned,
            writes: writes.to_vec(),
        });
    }
}

/// `name` without its directory: `/usr/bin/curl` → `curl`.
pub fn base_name(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// Targets that are not files in any sense that matters.
fn is_harmless_target(t: &str) -> bool {
    matches!(t, "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty")
        || t.strip_prefix("/dev/fd/")
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// The literal value of a word node after quote removal, or `None` when it
/// contains an expansion.
fn literal(node: Node<'_>, src: &str) -> Option<String> {
    let text = &src[node.byte_range()];
    match node.kind() {
        "word" | "command_name" if node.named_child_count() == 0 => Some(unescape_word(text)),
        "command_name" => node.named_child(0).and_then(|c| literal(c, src)),
        "number" => Some(text.to_string()),
        "raw_string" => Some(
            text.trim_start_matches('\'')
                .trim_end_matches('\'')
                .to_string(),
        ),
        "string" => {
            let mut value = String::new();
            let mut cursor = node.walk();
            for child in node.named_children(&mut cursor) {
                match child.kind() {
                    "string_content" => value.push_str(&unescape_dquoted(&src[child.byte_range()])),
                    _ => return None,
                }
            }
            Some(value)
        }
        "concatenation" => {
            let mut value = String::new();
            let mut cursor = node.walk();
            for child in node.children(&mut cursor) {
                value.push_str(&literal(child, src)?);
            }
            Some(value)
        }
        _ => None,
    }
}

/// An unquoted word's value: a backslash quotes the next character.
fn unescape_word(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('\n') | None => {}
                Some(n) => out.push(n),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Inside double quotes a backslash only quotes `$`, `` ` ``, `"`, `\` and
/// newline.
fn unescape_dquoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('$' | '`' | '"' | '\\') => {
                    if let Some(n) = chars.next() {
                        out.push(n);
                    }
                }
                Some('\n') => {
                    chars.next();
                }
                _ => out.push(c),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Option syntax of one wrapper: options that take a separate value, and
/// whether leading `NAME=value` words are assignments.
struct WrapperSpec {
    name: &'static str,
    /// Options (exact words) followed by a value word.
    with_value: &'static [&'static str],
    /// Options (exact words, or short flags) that take no value.
    flags: &'static [&'static str],
    /// Positional words consumed before the command (`timeout DURATION`).
    positional: usize,
    /// `NAME=value` words before the command are assignments (`env`).
    assignments: bool,
    /// Options that mean the wrapper does not run the command at all
    /// (`command -v x` only looks it up).
    lookup_only: &'static [&'static str],
}

const WRAPPERS: &[WrapperSpec] = &[
    WrapperSpec {
        name: "env",
        with_value: &["-u", "--unset", "-C", "--chdir"],
        flags: &["-i", "--ignore-environment", "-0", "--null", "-"],
        positional: 0,
        assignments: true,
        lookup_only: &[],
    },
    WrapperSpec {
        name: "timeout",
        with_value: &["-s", "--signal", "-k", "--kill-after"],
        flags: &["--preserve-status", "--foreground", "-v", "--verbose"],
        positional: 1,
        assignments: false,
        lookup_only: &[],
    },
    WrapperSpec {
        name: "nice",
        with_value: &["-n", "--adjustment"],
        flags: &[],
        positional: 0,
        assignments: false,
        lookup_only: &[],
    },
    WrapperSpec {
        name: "nohup",
        with_value: &[],
        flags: &[],
        positional: 0,
        assignments: false,
        lookup_only: &[],
    },
    WrapperSpec {
        name: "sudo",
        with_value: &[
            "-u",
            "--user",
            "-g",
            "--group",
            "-C",
            "--close-from",
            "-D",
            "--chdir",
            "-h",
            "--host",
            "-p",
            "--prompt",
            "-r",
            "--role",
            "-t",
            "--type",
            "-T",
            "--command-timeout",
            "-U",
            "--other-user",
        ],
        flags: &[
            "-A",
            "-b",
            "-E",
            "-H",
            "-i",
            "-k",
            "-K",
            "-n",
            "-P",
            "-S",
            "-s",
            "--",
            "--askpass",
            "--background",
            "--preserve-env",
            "--set-home",
            "--login",
            "--non-interactive",
            "--stdin",
            "--shell",
            "--reset-timestamp",
        ],
        positional: 0,
        assignments: true,
        lookup_only: &["-l", "--list", "-v", "--validate", "-V", "--version"],
    },
    WrapperSpec {
        name: "doas",
        with_value: &["-u", "-C"],
        flags: &["-n", "-s"],
        positional: 0,
        assignments: false,
        lookup_only: &[],
    },
    WrapperSpec {
        name: "command",
        with_value: &[],
        flags: &["-p", "--"],
        positional: 0,
        assignments: false,
        lookup_only: &["-v", "-V"],
    },
    WrapperSpec {
        name: "builtin",
        with_value: &[],
        flags: &[],
        positional: 0,
        assignments: false,
        lookup_only: &[],
    },
    WrapperSpec {
        name: "exec",
        with_value: &["-a"],
        flags: &["-c", "-l", "-cl", "-lc"],
        positional: 0,
        assignments: false,
        lookup_only: &[],
    },
    WrapperSpec {
        name: "time",
        with_value: &[],
        flags: &["-p"],
        positional: 0,
        assignments: false,
        lookup_only: &[],
    },
    WrapperSpec {
        name: "xargs",
        with_value: &[
            "-I",
            "-L",
            "-n",
            "-P",
            "-d",
            "-E",
            "-s",
            "-a",
            "--arg-file",
            "--delimiter",
            "--max-args",
            "--max-procs",
            "--max-chars",
            "--max-lines",
            "--replace",
            "--eof",
            "--process-slot-var",
        ],
        flags: &[
            "-0",
            "--null",
            "-r",
            "--no-run-if-empty",
            "-t",
            "--verbose",
            "-p",
            "--interactive",
            "-x",
            "--exit",
            "-o",
            "--open-tty",
            "-i",
            "-e",
            "-l",
        ],
        positional: 0,
        assignments: false,
        lookup_only: &["--help", "--version"],
    },
    WrapperSpec {
        name: "stdbuf",
        with_value: &["-i", "-o", "-e"],
        flags: &[],
        positional: 0,
        assignments: false,
        lookup_only: &[],
    },
    WrapperSpec {
        name: "coproc",
        with_value: &[],
        flags: &[],
        positional: 0,
        assignments: false,
        lookup_only: &[],
    },
    WrapperSpec {
        name: "setsid",
        with_value: &[],
        flags: &["-f", "--fork", "-w", "--wait", "-c", "--ctty"],
        positional: 0,
        assignments: false,
        lookup_only: &[],
    },
    WrapperSpec {
        name: "chroot",
        with_value: &["--userspec", "--groups"],
        flags: &["--skip-chdir"],
        positional: 1,
        assignments: false,
        lookup_only: &[],
    },
    WrapperSpec {
        name: "ionice",
        with_value: &["-c", "--class", "-n", "--classdata"],
        flags: &["-t", "--ignore"],
        positional: 0,
        assignments: false,
        lookup_only: &["-p", "--pid", "-P", "--pgid", "-u", "--uid"],
    },
    WrapperSpec {
        name: "taskset",
        with_value: &[],
        flags: &["-a", "--all-tasks", "-c", "--cpu-list"],
        positional: 1,
        assignments: false,
        lookup_only: &["-p", "--pid"],
    },
];

/// Commands whose argument is a script for a shell: `(name, option before
/// the script or "" for the first non-option argument, join the rest)`.
const SCRIPT_TAKERS: &[(&str, &str, bool)] = &[
    ("trap", "", false),
    ("watch", "", true),
    ("su", "-c", false),
    ("runuser", "-c", false),
    ("flock", "-c", false),
];

/// Stripped words, the wrappers removed and assignments they made.
type Stripped = (Vec<Word>, Vec<String>, Vec<String>);

/// Removes wrappers in front of the real command, repeatedly (`sudo env
/// FOO=1 nice rm` → `rm`). An option the wrapper spec does not know is an
/// error: guessing whether it takes a value could pick the wrong word as the
/// command.
fn strip_wrappers(mut words: Vec<Word>) -> Result<Stripped, String> {
    let mut wrappers = Vec::new();
    let mut assignments = Vec::new();
    loop {
        let Some(name) = words.first().and_then(|w| w.literal.clone()) else {
            return Ok((words, wrappers, assignments));
        };
        // `/usr/bin/env curl` is `env curl`.
        let Some(spec) = WRAPPERS.iter().find(|s| s.name == base_name(&name)) else {
            return Ok((words, wrappers, assignments));
        };
        let mut i = 1;
        let mut positional = spec.positional;
        while i < words.len() {
            let Some(w) = words[i].literal.as_deref() else {
                return Err(format!(
                    "an argument of `{name}` is computed at run time, so the command it runs is unknown"
                ));
            };
            if spec.lookup_only.contains(&w) {
                // `command -v ls`: a lookup, nothing runs. Keep it as the
                // wrapper itself so that rules see `command -v …`.
                return Ok((words, wrappers, assignments));
            }
            if w == "--" {
                i += 1;
                break;
            }
            if spec.name == "env"
                && let Some(split) = env_split_string(&words, i)?
            {
                // `env -S 'A=1 bash -c ls'` is `env A=1 bash -c ls`.
                let (taken, split) = split;
                words.splice(i..i + taken, split);
                continue;
            }
            if w.starts_with('-') && w.len() > 1 {
                if spec.with_value.contains(&w) {
                    i += 2;
                } else if spec.flags.contains(&w)
                    || spec.with_value.iter().any(|o| {
                        o.starts_with("--") && w.starts_with(&format!("{o}="))
                            || (!o.starts_with("--") && w.starts_with(o) && w.len() > o.len())
                    })
                    || (name == "nice" && w[1..].chars().all(|c| c.is_ascii_digit()))
                {
                    i += 1;
                } else {
                    return Err(format!(
                        "`{name}` option `{w}` is not known to the analyser, so the command it runs is unclear"
                    ));
                }
                continue;
            }
            if spec.assignments && w.contains('=') && !w.starts_with('=') {
                if let Some((var, _)) = w.split_once('=') {
                    assignments.push(var.to_string());
                }
                i += 1;
                continue;
            }
            if positional > 0 {
                positional -= 1;
                i += 1;
                continue;
            }
            break;
        }
        if i >= words.len() {
            // A wrapper with no command (`env` prints the environment,
            // `xargs` runs `echo`): the wrapper is the command.
            return Ok((words, wrappers, assignments));
        }
        wrappers.push(name);
        words.drain(..i);
    }
}

/// `env -S STRING` / `--split-string=STRING` at `words[i]`: how many words
/// it takes and the words STRING splits into. `None` when `words[i]` is no
/// such option. A string with escapes or variables (`\_`, `${X}`, which env
/// treats its own way) is an error: the analyser would guess.
fn env_split_string(words: &[Word], i: usize) -> Result<Option<(usize, Vec<Word>)>, String> {
    let Some(w) = words[i].literal.as_deref() else {
        return Ok(None);
    };
    let (taken, value) = if w == "-S" || w == "--split-string" {
        match words.get(i + 1) {
            Some(Word {
                literal: Some(v), ..
            }) => (2, v.as_str()),
            _ => return Err("`env -S` of a string computed at run time".into()),
        }
    } else if let Some(v) = w.strip_prefix("--split-string=") {
        (1, v)
    } else if let Some(v) = w.strip_prefix("-S")
        && !v.is_empty()
    {
        (1, v)
    } else {
        return Ok(None);
    };
    if value.contains(['\\', '$']) {
        return Err("`env -S` with escapes or variables, which env expands its own way".into());
    }
    let Some(parts) = shlex::split(value) else {
        return Err("`env -S` string with unbalanced quotes".into());
    };
    Ok(Some((
        taken,
        parts
            .into_iter()
            .map(|p| Word {
                literal: Some(p.clone()),
                text: p,
            })
            .collect(),
    )))
}

/// The script argument of a [`SCRIPT_TAKERS`] command. `trap 'cmd' EXIT`,
/// `watch -n 1 cmd args`, `su -c 'cmd' user`, `flock -c 'cmd' file`.
fn script_argument(base: &str, option: &str, join: bool, words: &[Word]) -> Nested {
    let mut literals = Vec::with_capacity(words.len());
    for w in &words[1..] {
        match &w.literal {
            Some(l) => literals.push(l.as_str()),
            None => {
                return Nested::Opaque(format!("`{base}` with arguments computed at run time"));
            }
        }
    }
    let script = if option.is_empty() {
        // Options (`watch -n 1`, `trap -p`) until the first other word.
        let mut i = 0;
        while i < literals.len() && literals[i].starts_with('-') {
            i += if matches!(literals[i], "-n" | "--interval" | "-d") {
                2
            } else {
                1
            };
        }
        match literals.get(i..) {
            Some(rest) if !rest.is_empty() && join => rest.join(" "),
            Some(rest) if !rest.is_empty() => rest[0].to_string(),
            // `trap -p`, `trap` alone: lists traps.
            _ => return Nested::None,
        }
    } else {
        match literals.iter().position(|w| *w == option) {
            Some(i) => match literals.get(i + 1) {
                Some(s) => s.to_string(),
                None => return Nested::Opaque(format!("`{base} {option}` without a script")),
            },
            // `su user`, `flock file cmd`: an interactive shell or a command
            // the analyser does not follow.
            None => {
                return Nested::Opaque(format!("`{base}` runs a command the analyser cannot see"));
            }
        }
    };
    Nested::Script(script, base.to_string())
}

enum Nested {
    None,
    /// The script to analyse and how it was run (`bash -c`).
    Script(String, String),
    /// A script the parser cannot see.
    Opaque(String),
}

/// The script a shell or `eval` runs.
fn nested_script(name: &str, words: &[Word]) -> Nested {
    if name == "eval" {
        let mut parts = Vec::new();
        for w in &words[1..] {
            match &w.literal {
                Some(l) => parts.push(l.clone()),
                None => {
                    return Nested::Opaque("`eval` of text computed at run time".to_string());
                }
            }
        }
        return Nested::Script(parts.join(" "), "eval".into());
    }
    let base = base_name(name);
    if let Some((_, option, join)) = SCRIPT_TAKERS.iter().find(|(n, _, _)| *n == base) {
        return script_argument(base, option, *join, words);
    }
    if !SHELLS.contains(&base) {
        return Nested::None;
    }
    let mut i = 1;
    let mut has_c = false;
    while i < words.len() {
        let Some(w) = words[i].literal.as_deref() else {
            return Nested::Opaque(format!("`{base}` with arguments computed at run time"));
        };
        if w == "--" {
            i += 1;
            break;
        }
        if w.starts_with('-') || w.starts_with('+') {
            if w.starts_with('-') && !w.starts_with("--") && w.contains('c') {
                has_c = true;
            }
            // `-o option` / `+O shopt` take a value.
            if matches!(w, "-o" | "+o" | "-O" | "+O" | "--rcfile" | "--init-file") {
                i += 1;
            }
            i += 1;
            continue;
        }
        break;
    }
    if has_c {
        return match words.get(i) {
            Some(Word {
                literal: Some(script),
                ..
            }) => Nested::Script(script.clone(), format!("{base} -c")),
            Some(_) => Nested::Opaque(format!("`{base} -c` of a script computed at run time")),
            None => Nested::Opaque(format!("`{base} -c` without a script")),
        };
    }
    Nested::Opaque(format!(
        "`{base}` runs a script (a file or standard input) the analyser cannot see"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(script: &str) -> Vec<String> {
        analyze(script)
            .segments
            .iter()
            .map(|s| s.command_line())
            .collect()
    }

    #[test]
    fn compound_commands_and_substitutions() {
        let a = analyze("ls -la && echo \"$(whoami)\" | wc -l; git status");
        assert!(a.is_complete(), "{a:?}");
        assert_eq!(
            a.root_commands(),
            Some(vec![
                "ls".into(),
                "whoami".into(),
                "echo".into(),
                "wc".into(),
                "git".into()
            ])
        );
        assert!(!a.redirects());
    }

    #[test]
    fn redirection_is_a_write_but_dev_null_and_dups_are_not() {
        assert_eq!(analyze("wc -l > out.txt").write_targets(), ["out.txt"]);
        assert!(!analyze("ls 2>/dev/null").redirects());
        assert!(!analyze("ls 2>&1 >&2").redirects());
        assert_eq!(analyze("{ ls; rm x; } >> log").segments[1].writes.len(), 1);
        assert_eq!(analyze(">f echo a").write_targets(), ["f"]);
        let a = analyze("ls && wc | tee x > f");
        let writes: Vec<usize> = a.segments.iter().map(|s| s.writes.len()).collect();
        assert_eq!(writes, [0, 0, 1]);
        assert_eq!(analyze("echo a &> 'b c'").write_targets(), ["b c"]);
    }

    /// (segment text, write targets) of every segment that writes.
    fn writers(script: &str) -> Vec<(String, Vec<String>)> {
        analyze(script)
            .segments
            .iter()
            .filter(|s| !s.writes.is_empty())
            .map(|s| {
                let targets = s
                    .writes
                    .iter()
                    .map(|w| w.target.clone().unwrap_or_else(|| w.text.clone()))
                    .collect();
                (s.text.clone(), targets)
            })
            .collect()
    }

    #[test]
    fn a_redirection_without_a_command_is_a_segment_that_writes() {
        let w = |s: &str, t: &str| (s.to_string(), vec![t.to_string()]);
        assert_eq!(
            writers("ls && > important.txt"),
            [w("> important.txt", "important.txt")]
        );
        for form in [">f", ">>f", "&>f", "&>>f", "2>f", "2>>f", ">|f", "1>f"] {
            assert_eq!(writers(form), [w(form, "f")], "{form}");
        }
        // `<>` is not in the grammar: unresolved, and still a write.
        let a = analyze("<>f");
        assert!(!a.is_complete());
        assert_eq!(a.write_targets(), ["f"]);
        assert_eq!(analyze("cat <>f").write_targets(), ["f"]);
        assert_eq!(writers("ls | > f"), [w("> f", "f")]);
        assert_eq!(writers("ls && >f || >>g").len(), 2);
        assert_eq!(writers("echo $(> f)"), [w("> f", "f")]);
        assert_eq!(writers("echo \"$(>f)\""), [w(">f", "f")]);
        assert_eq!(writers("x=$(>f)"), [w(">f", "f")]);
        assert_eq!(writers("echo `> f`"), [w("> f", "f")]);
        assert_eq!(writers("diff <(> f) a"), [w("> f", "f")]);
        assert_eq!(writers("bash -c '> f'"), [w("> f", "f")]);
        assert_eq!(writers("bash -c '' > f"), [w("bash -c '' > f", "f")]);
        assert_eq!(writers("(( 1 )) > f"), [w("(( 1 )) > f", "f")]);
        assert_eq!(writers("case a in b) ;; esac > f").len(), 1);
        // Compound commands: every command inside carries it.
        assert_eq!(writers("{ ls; } > f"), [w("ls", "f")]);
        assert_eq!(writers("(ls) > f"), [w("ls", "f")]);
        assert_eq!(
            writers("while false; do :; done > f"),
            [w("false", "f"), w(":", "f")]
        );
        assert_eq!(writers("f() { ls; } > f; f"), [w("ls", "f")]);
        // Nested in a heredoc's node, and after an assignment.
        assert_eq!(writers("cat <<EOF > f\nhi\nEOF"), [w("cat", "f")]);
        let a = analyze("FOO=1 > f");
        assert_eq!(a.write_targets(), ["f"]);
        assert_eq!(a.segments[0].assignments, ["FOO"]);
        // Reading is not writing; duplications are not either.
        assert!(writers("< f").is_empty());
        assert!(writers("cat < f 2>&1").is_empty());
        assert!(writers("> /dev/null").is_empty());
    }

    #[test]
    fn assignments_of_outer_commands_reach_what_they_run() {
        let assigned = |script: &str| -> Vec<Vec<String>> {
            analyze(script)
                .segments
                .iter()
                .map(|s| s.assignments.clone())
                .collect()
        };
        assert_eq!(assigned("BASH_ENV=./x bash -c 'ls'"), [["BASH_ENV"]]);
        assert_eq!(
            assigned("env BASH_ENV=./x bash -c 'ls; cat a'"),
            [["BASH_ENV"], ["BASH_ENV"]]
        );
        assert_eq!(assigned("env -S 'LD_PRELOAD=x.so ls'"), [["LD_PRELOAD"]]);
        assert_eq!(names("env -S 'LD_PRELOAD=x.so ls -la'"), ["ls -la"]);
        assert_eq!(assigned("env -SPATH=. ls"), [["PATH"]]);
        assert_eq!(assigned("sudo PATH=. sh -c \"bash -c 'ls'\""), [["PATH"]]);
        assert_eq!(assigned("PATH=. xargs bash -c ls"), [["PATH"]]);
        assert_eq!(assigned("ENV=x timeout 5 nice sh -c 'ls'"), [["ENV"]]);
        assert_eq!(assigned("PATH=.; ls"), [vec!["PATH".to_string()], vec![]]);
        assert_eq!(assigned("export PATH=. A=1"), [["PATH", "A"]]);
        assert_eq!(
            assigned("for PATH in .; do ls; done"),
            [vec!["PATH".to_string()], vec![]]
        );
        assert_eq!(assigned("read PATH"), [["PATH"]]);
        assert_eq!(assigned("a[0]=1"), [["a"]]);
        assert!(!analyze("env -S 'A=${X} ls'").is_complete());
        assert!(!analyze("env -S 'ls\\_-la'").is_complete());
    }

    #[test]
    fn too_many_segments_are_unresolved() {
        let script = "true;".repeat(MAX_SEGMENTS + 10);
        let a = analyze(&script);
        assert_eq!(a.segments.len(), MAX_SEGMENTS);
        assert_eq!(a.unresolved.len(), 1);
        assert_eq!(
            a.unresolved[0].reason,
            format!("more than {MAX_SEGMENTS} simple commands")
        );
    }

    #[test]
    fn dynamic_command_name_and_parse_errors_are_unresolved() {
        assert_eq!(analyze("$cmd arg").root_commands(), None);
        assert_eq!(analyze("echo 'unterminated").root_commands(), None);
        assert!(!analyze("bash script.sh").is_complete());
        assert!(!analyze("sudo --weird rm x").is_complete());
    }

    #[test]
    fn wrappers_and_nested_scripts_resolve_to_the_real_command() {
        assert_eq!(
            names("sudo -u bob env A=1 nice -n 5 rm -rf x"),
            ["rm -rf x"]
        );
        assert_eq!(names("timeout -s KILL 5 git push"), ["git push"]);
        assert_eq!(names("bash -c 'ls && rm x'"), ["ls", "rm x"]);
        assert_eq!(names("sh -c \"echo hi; touch y\""), ["echo hi", "touch y"]);
        assert_eq!(names("eval 'rm' '-rf' a"), ["rm -rf a"]);
        assert_eq!(names("find . | xargs -0 rm"), ["find .", "rm"]);
        assert_eq!(names("command -v ls"), ["command -v ls"]);
        assert_eq!(names("trap 'rm x' EXIT; ls"), ["rm x", "ls"]);
        assert_eq!(names("watch -n 1 du -sh ."), ["du -sh ."]);
        assert_eq!(names("su -c 'curl x' bob"), ["curl x"]);
        assert_eq!(
            names("setsid chroot / ionice -c 3 taskset -c 1 curl x"),
            ["curl x"]
        );
        assert!(!analyze("cur? x").is_complete());
        assert!(!analyze("{curl,x} y").is_complete());
        assert_eq!(names("echo 'rm -rf /; $(x)'"), ["echo rm -rf /; $(x)"]);
        assert_eq!(names("cat <<'EOF'\n$(rm -rf /)\nEOF"), ["cat"]);
        assert_eq!(names("cat <<EOF\n$(rm -rf /)\nEOF"), ["rm -rf /", "cat"]);
        assert_eq!(
            names("diff <(ls a) >(tee b)"),
            ["ls a", "tee b", "diff <(ls a) >(tee b)"]
        );
        let a = analyze("bash -c 'echo hi > f'");
        assert_eq!(a.write_targets(), ["f"]);
        assert_eq!(a.segments[0].wrappers, ["bash -c"]);
    }
}
