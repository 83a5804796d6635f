//! The built-in default policy (DESIGN §5, after Gemini CLI's defaults) and
//! the shell command classes it relies on: known read-only commands and
//! known-dangerous forms.
//!
//! | mode | read-only tools | read-only shell | edits | other shell, MCP, … |
//! | --- | --- | --- | --- | --- |
//! | `default` | allow | allow | ask | ask |
//! | `auto_edit` | allow | allow | allow | ask |
//! | `yolo` | allow | allow | allow | allow (redirections too) |
//! | `plan` | allow | deny | deny | deny |
//!
//! Dangerous forms (`rm -rf`, `find -delete`, `git push --force`, `sudo`, …)
//! ask in every mode unless an operator rule naming them allows them.
//!
//! Not here: operator rules (`rules`), combining decisions (`policy`).

use std::sync::Arc;

use super::ApprovalMode;
use super::rules::{BuiltinMatch, NameMatch, Rule, RuleDecision, RuleOrigin, Tier};
use crate::shell::Segment;
use crate::tools::SHELL_TOOL_NAME;

/// How built-in rules are named in messages.
pub const BUILTIN_FILE: &str = "<built-in>";

/// The built-in rules, highest priority first.
pub fn builtin_rules() -> Vec<Rule> {
    let file: Arc<str> = Arc::from(BUILTIN_FILE);
    let rule = |index: usize,
                name: &str,
                priority: i64,
                decision: RuleDecision,
                modes: Option<Vec<ApprovalMode>>,
                tools: Vec<NameMatch>,
                builtin: Option<BuiltinMatch>,
                deny_message: Option<&str>| Rule {
        name: Some(name.to_string()),
        origin: RuleOrigin {
            file: file.clone(),
            line: 0,
            index,
        },
        tier: Tier::BuiltIn,
        tools,
        mcp_server: None,
        args_pattern: None,
        command_prefixes: Vec::new(),
        decision,
        priority,
        modes,
        interactive: None,
        deny_message: deny_message.map(str::to_string),
        allow_redirection: false,
        builtin,
    };
    use ApprovalMode as M;
    let mut rules = vec![
        rule(
            1,
            "read-only-tools",
            100,
            RuleDecision::Allow,
            None,
            Vec::new(),
            Some(BuiltinMatch::ReadOnlyTool),
            None,
        ),
        rule(
            2,
            "plan-mode",
            90,
            RuleDecision::Deny,
            Some(vec![M::Plan]),
            Vec::new(),
            None,
            Some(
                "only read-only tools run in plan mode. Switch the session to another approval mode (default, auto_edit or yolo) to make changes.",
            ),
        ),
        rule(
            3,
            "read-only-shell",
            50,
            RuleDecision::Allow,
            Some(vec![M::Default, M::AutoEdit]),
            vec![NameMatch::Exact(SHELL_TOOL_NAME.into())],
            Some(BuiltinMatch::ReadOnlyShell),
            None,
        ),
        rule(
            4,
            "yolo-mode",
            40,
            RuleDecision::Allow,
            Some(vec![M::Yolo]),
            Vec::new(),
            None,
            None,
        ),
        rule(
            5,
            "auto-edit-mode",
            30,
            RuleDecision::Allow,
            Some(vec![M::AutoEdit]),
            Vec::new(),
            Some(BuiltinMatch::EditTool),
            None,
        ),
        rule(
            6,
            "ask-by-default",
            0,
            RuleDecision::AskUser,
            None,
            Vec::new(),
            None,
            None,
        ),
    ];
    // yolo writes where it likes inside the workspace.
    if let Some(yolo) = rules
        .iter_mut()
        .find(|r| r.name.as_deref() == Some("yolo-mode"))
    {
        yolo.allow_redirection = true;
    }
    rules
}

/// Commands that only read, whatever their (possibly dynamic) arguments.
const READ_ONLY: &[&str] = &[
    "ls",
    "cat",
    "head",
    "tail",
    "wc",
    "grep",
    "egrep",
    "fgrep",
    "echo",
    "printf",
    "pwd",
    "whoami",
    "id",
    "true",
    "false",
    "which",
    "type",
    "stat",
    "du",
    "df",
    "uname",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "diff",
    "cmp",
    "cut",
    "tr",
    "nl",
    "comm",
    "test",
    "[",
    "[[",
    "seq",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "tac",
    "rev",
    "column",
    "cd",
    "jq",
    "sleep",
    "printenv",
    "nproc",
    "locale",
];

/// Commands read-only unless given one of these options; their words must
/// all be literal (a `$opt` could be `-delete`).
const READ_ONLY_UNLESS: &[(&str, &[&str])] = &[
    (
        "find",
        &[
            "-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf",
            "-fls",
        ],
    ),
    // `--compress-program` runs a program.
    ("sort", &["-o", "--output", "--compress-program"]),
    ("tree", &["-o", "-R"]),
    ("rg", &["--pre", "--pre-glob"]),
    ("date", &["-s", "--set"]),
];

/// `git` subcommands that only read; git's global options (`-c`, `-C`) are
/// not accepted before them (`git -c core.fsmonitor=cmd status` runs `cmd`).
const GIT_READ_ONLY: &[&str] = &[
    "status",
    "log",
    "diff",
    "show",
    "ls-files",
    "rev-parse",
    "blame",
    "shortlog",
    "describe",
];
/// git options that write or run other programs.
const GIT_UNSAFE_OPTIONS: &[&str] = &["--output", "--ext-diff", "--textconv", "-o"];

/// Whether `seg` is a known read-only command: it changes nothing and runs
/// nothing else. Environment assignments disqualify it (`GIT_PAGER=…`,
/// `PATH=…` change what runs).
pub fn is_read_only(seg: &Segment) -> bool {
    if seg.is_bare() {
        // `x=1` alone only sets a shell variable; one that changes what
        // later commands run is a dangerous form (see [`dangerous_form`]).
        // Its redirections (`> f`) are writes, decided by the caller.
        return seg.wrappers.is_empty()
            && !seg.assignments.iter().any(|a| is_dangerous_variable(a));
    }
    if !seg.assignments.is_empty() || !seg.wrappers.iter().all(|w| w == "time" || w == "nice") {
        return false;
    }
    let Some(name) = seg.name() else {
        return false;
    };
    if READ_ONLY.contains(&name) {
        return true;
    }
    let argv = seg.argv();
    if !seg.is_literal() {
        return false;
    }
    let args: Vec<&str> = argv.iter().skip(1).filter_map(|w| *w).collect();
    if let Some((_, unsafe_opts)) = READ_ONLY_UNLESS.iter().find(|(n, _)| *n == name) {
        return !args.iter().any(|a| {
            unsafe_opts.iter().any(|o| {
                a == o
                    || (o.starts_with("--") && a.starts_with(&format!("{o}=")))
                    // A one-letter option inside a cluster: `sort -ro f`.
                    || (name != "find"
                        && o.len() == 2
                        && !a.starts_with("--")
                        && a.starts_with('-')
                        && o[1..].chars().all(|c| a[1..].contains(c)))
            })
        });
    }
    if name == "git" {
        return args.first().is_some_and(|sub| GIT_READ_ONLY.contains(sub))
            && !args.iter().skip(1).any(|a| {
                GIT_UNSAFE_OPTIONS
                    .iter()
                    .any(|o| a == o || a.starts_with(&format!("{o}=")))
            });
    }
    false
}

/// Environment variables whose assignment changes what runs: the program a
/// name finds (`PATH`), code a shell or the loader runs at start-up
/// (`BASH_ENV`, `ENV`, `LD_PRELOAD`, exported functions), or a command git
/// runs (`GIT_SSH_COMMAND`, `core.fsmonitor` through `GIT_CONFIG_*` or a
/// `HOME` whose `.gitconfig` the command chose).
const DANGEROUS_VARIABLES: &[&str] = &[
    "PATH",
    "BASH_ENV",
    "ENV",
    "IFS",
    "PROMPT_COMMAND",
    "PS4",
    "SHELLOPTS",
    "BASHOPTS",
    "HOME",
    "XDG_CONFIG_HOME",
    "NODE_OPTIONS",
    "PYTHONSTARTUP",
    "PERL5OPT",
    "RUBYOPT",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_EXEC_PATH",
    "GIT_EXTERNAL_DIFF",
    "GIT_PAGER",
    "GIT_EDITOR",
    "GIT_ASKPASS",
    "GIT_DIR",
    "GIT_CONFIG",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
];
/// Prefixes of such variables: the loader's (`LD_PRELOAD`, `LD_AUDIT`,
/// `DYLD_INSERT_LIBRARIES`), bash's exported functions (`BASH_FUNC_ls%%`)
/// and git's numbered config entries (`GIT_CONFIG_KEY_0`).
const DANGEROUS_VARIABLE_PREFIXES: &[&str] = &["LD_", "DYLD_", "BASH_FUNC_", "GIT_CONFIG_"];

/// Whether assigning `name` changes what runs (see [`DANGEROUS_VARIABLES`]).
pub fn is_dangerous_variable(name: &str) -> bool {
    DANGEROUS_VARIABLES.contains(&name)
        || DANGEROUS_VARIABLE_PREFIXES
            .iter()
            .any(|p| name.starts_with(p))
}

/// A dangerous form in how `seg` is run rather than in its words: behind
/// `sudo`/`doas`, or with a dangerous variable assigned, by itself or by a
/// command that runs it (`env BASH_ENV=x bash -c 'ls'` gives `ls` the
/// assignment). A rule matches a segment's words, which do not show these,
/// so no allow rule lifts them: they always ask (a deny still denies).
pub fn context_danger(seg: &Segment) -> Option<String> {
    if let Some(w) = seg.wrappers.iter().find(|w| *w == "sudo" || *w == "doas") {
        return Some(format!("{w} (runs as another user)"));
    }
    if let Some(v) = seg.assignments.iter().find(|a| is_dangerous_variable(a)) {
        return Some(format!("assigning {v}"));
    }
    None
}

/// Whether `seg` runs a command that its words do not show to the rules:
/// `find -exec/-execdir/-ok/-okdir` (what follows is find's argument, not a
/// segment), a git alias defined on the command line (`git -c
/// alias.x='!cmd' x`), or `find`/`git` with arguments computed at run time.
/// A deny rule cannot match what runs there.
pub fn runs_hidden_command(seg: &Segment) -> bool {
    let Some(name) = seg.base_name() else {
        return true;
    };
    if !matches!(name, "find" | "git") {
        return false;
    }
    if !seg.is_literal() {
        return true;
    }
    seg.words.iter().skip(1).any(|w| {
        let a = w.literal.as_deref().unwrap_or("");
        match name {
            "find" => matches!(a, "-exec" | "-execdir" | "-ok" | "-okdir"),
            _ => a.starts_with("alias.") || a.contains("=!"),
        }
    })
}

/// The dangerous form `seg`'s words take, if any (shown in the prompt): an
/// operator rule naming the command (`command_prefix`, `args_pattern`) may
/// allow it.
pub fn dangerous_form(seg: &Segment) -> Option<String> {
    let name = seg.base_name()?;
    // `rm $opts x` may well be `rm -rf x`.
    if matches!(
        name,
        "rm" | "find" | "chmod" | "chown" | "chgrp" | "git" | "dd"
    ) && !seg.is_literal()
    {
        return Some(format!("{name} with arguments computed at run time"));
    }
    let args: Vec<&str> = seg
        .words
        .iter()
        .skip(1)
        .map(|w| w.literal.as_deref().unwrap_or(""))
        .collect();
    let short_has = |c: char| {
        args.iter()
            .any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains(c))
    };
    let long_has = |o: &str| args.contains(&o);
    match name {
        "rm" if short_has('r')
            || short_has('R')
            || short_has('f')
            || long_has("--recursive")
            || long_has("--force") =>
        {
            Some("rm -r/-f".into())
        }
        "find" => args
            .iter()
            .find(|a| {
                matches!(
                    **a,
                    "-delete"
                        | "-exec"
                        | "-execdir"
                        | "-ok"
                        | "-okdir"
                        | "-fprint"
                        | "-fprint0"
                        | "-fprintf"
                        | "-fls"
                )
            })
            .map(|a| format!("find {a}")),
        "git" => {
            // Skip git's global options (`git -C dir push --force`).
            let mut i = 0;
            while i < args.len() && args[i].starts_with('-') {
                let takes_value = matches!(
                    args[i],
                    "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace" | "--exec-path"
                );
                i += if takes_value { 2 } else { 1 };
            }
            let sub = args.get(i).copied().unwrap_or("");
            match sub {
                "push"
                    if args.iter().any(|a| {
                        matches!(
                            *a,
                            "-f" | "--force"
                                | "--force-with-lease"
                                | "--mirror"
                                | "--delete"
                                | "-d"
                        ) || a.starts_with("--force")
                            || a.starts_with('+')
                    }) =>
                {
                    Some("git push --force".into())
                }
                "reset" if long_has("--hard") => Some("git reset --hard".into()),
                "clean" => Some("git clean".into()),
                "branch" if long_has("-D") => Some("git branch -D".into()),
                "checkout" if long_has("--") || long_has(".") || long_has("-f") => {
                    Some("git checkout (discarding changes)".into())
                }
                _ => None,
            }
        }
        "chmod" | "chown" | "chgrp" if short_has('R') || long_has("--recursive") => {
            Some(format!("{name} -R"))
        }
        "dd" | "shred" | "mkfs" | "fdisk" | "sfdisk" | "parted" | "wipefs" | "shutdown"
        | "reboot" | "halt" | "poweroff" | "kill" | "killall" | "pkill" => Some(name.into()),
        n if n.starts_with("mkfs.") => Some(n.into()),
        _ => None,
    }
}
