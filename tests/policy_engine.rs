//! The policy engine on its own: rule priority and ties, modes, the
//! interactive flag, args patterns independent of key order, MCP server
//! spoofing, "always allow" narrowing, plan-mode messages and bad files.
//! (MCP tools arrive through another module, so they are decided here from a
//! `Subject::Mcp` as the MCP tools report it.)

use std::path::Path;

use serde_json::{Value, json};
use toolsched::policy::{
    AlwaysScope, ApprovalMode, Decision, Policy, PolicyInput, SessionRules, parse_rules,
};
use toolsched::tools::{Args, Declaration, Subject, ToolKind};

fn decl(name: &str, kind: ToolKind, read_only: bool) -> Declaration {
    Declaration {
        name: name.into(),
        description: String::new(),
        parameters: json!({"type": "object"}),
        kind,
        parallelizable: read_only,
        read_only,
    }
}

fn args(v: Value) -> Args {
    match v {
        Value::Object(m) => m,
        _ => panic!("object"),
    }
}

fn policy(toml: &str) -> Policy {
    Policy::with_rules(parse_rules(toml, "ops.toml").expect("valid policy"), None)
}

fn shell_subject(command: &str) -> Subject {
    Subject::Shell {
        command: command.into(),
        analysis: std::sync::Arc::new(toolsched::shell::analyze(command)),
        dir_path: ".".into(),
    }
}

struct Case<'a> {
    decl: Declaration,
    subject: Subject,
    args: Args,
    mode: ApprovalMode,
    interactive: bool,
    rules: &'a SessionRules,
}

impl Case<'_> {
    fn decide(&self, p: &Policy) -> Decision {
        self.decide_as(p, false)
    }

    /// The decision for the call sent with `client_initiated`.
    fn decide_as(&self, p: &Policy, client_initiated: bool) -> Decision {
        p.decide_in(
            PolicyInput {
                decl: &self.decl,
                subject: &self.subject,
                args: &self.args,
                mode: self.mode,
                interactive: self.interactive,
                rules: self.rules,
                client_initiated,
                writes_repository: false,
            },
            Some(Path::new("/ws")),
        )
    }
}

fn shell<'a>(command: &str, rules: &'a SessionRules) -> Case<'a> {
    Case {
        decl: decl("run_shell_command", ToolKind::Execute, false),
        subject: shell_subject(command),
        args: args(json!({"command": command})),
        mode: ApprovalMode::Default,
        interactive: true,
        rules,
    }
}

fn mcp<'a>(server: &str, tool: &str, a: Value, rules: &'a SessionRules) -> Case<'a> {
    Case {
        decl: decl(&format!("mcp_{server}_{tool}"), ToolKind::Other, false),
        subject: Subject::Mcp {
            server: server.into(),
            tool: tool.into(),
        },
        args: args(a),
        mode: ApprovalMode::Default,
        interactive: true,
        rules,
    }
}

/// "allow", "ask" or "deny" and the rule label of the source.
fn short(d: &Decision) -> (&'static str, String) {
    match d {
        Decision::Allow => ("allow", String::new()),
        Decision::AskUser { source, .. } => ("ask", source.rule.clone()),
        Decision::Deny { source, .. } => ("deny", source.rule.clone()),
    }
}

#[test]
fn highest_priority_wins_and_ties_keep_file_order() {
    let none = SessionRules::default();
    let p = policy(
        r#"
[[rule]]
name = "low-allow"
tool_name = "mcp_db_*"
decision = "allow"
priority = 1

[[rule]]
name = "high-deny"
tool_name = "mcp_db_*"
decision = "deny"
priority = 5

[[rule]]
name = "tie-first"
tool_name = "mcp_git_*"
decision = "ask_user"
priority = 3

[[rule]]
name = "tie-second"
tool_name = "mcp_git_*"
decision = "allow"
priority = 3
"#,
    );
    assert_eq!(
        short(&mcp("db", "query", json!({}), &none).decide(&p)),
        ("deny", "high-deny".into())
    );
    assert_eq!(
        short(&mcp("git", "log", json!({}), &none).decide(&p)),
        ("ask", "tie-first".into())
    );
    // Operator rules beat every built-in rule, whatever the priority:
    // yolo's built-in allow does not override an operator ask.
    let mut c = mcp("git", "log", json!({}), &none);
    c.mode = ApprovalMode::Yolo;
    assert_eq!(short(&c.decide(&p)), ("ask", "tie-first".into()));
}

#[test]
fn modes_and_interactive_flags_select_rules() {
    let none = SessionRules::default();
    let p = policy(
        r#"
[[rule]]
name = "yolo-only-deny"
tool_name = "mcp_db_drop"
decision = "deny"
modes = ["yolo"]

[[rule]]
name = "batch-allow"
tool_name = "mcp_db_query"
decision = "allow"
interactive = false

[[rule]]
name = "any"
tool_name = "mcp_db_stats"
decision = "allow"
interactive = "any"
"#,
    );
    let mut c = mcp("db", "drop", json!({}), &none);
    assert_eq!(short(&c.decide(&p)), ("ask", "ask-by-default".into()));
    c.mode = ApprovalMode::Yolo;
    assert_eq!(short(&c.decide(&p)), ("deny", "yolo-only-deny".into()));
    let mut c = mcp("db", "query", json!({}), &none);
    assert_eq!(short(&c.decide(&p)), ("ask", "ask-by-default".into()));
    c.interactive = false;
    assert_eq!(short(&c.decide(&p)), ("allow", String::new()));
    let mut c = mcp("db", "stats", json!({}), &none);
    assert_eq!(short(&c.decide(&p)).0, "allow");
    c.interactive = false;
    assert_eq!(short(&c.decide(&p)).0, "allow");
}

#[test]
fn args_patterns_see_sorted_delimited_keys_whatever_the_call_order() {
    let none = SessionRules::default();
    let p = policy(
        r#"
[[rule]]
name = "prod-deny"
tool_name = "mcp_db_query"
args_pattern = '\x00"database":"prod"\x00'
decision = "deny"
deny_message = "production is read through the replica"
"#,
    );
    let mut a = Args::new();
    a.insert("sql".into(), json!("select 1"));
    a.insert("database".into(), json!("prod"));
    let mut b = Args::new();
    b.insert("database".into(), json!("prod"));
    b.insert("sql".into(), json!("select 1"));
    for order in [a, b] {
        let mut c = mcp("db", "query", json!({}), &none);
        c.args = order;
        let d = c.decide(&p);
        assert_eq!(short(&d), ("deny", "prod-deny".into()));
        let Decision::Deny { message, .. } = d else {
            unreachable!()
        };
        assert_eq!(
            message,
            "Tool 'mcp_db_query' denied: production is read through the replica [rule 'prod-deny' (ops.toml:2)]."
        );
    }
    // A value that merely contains the text does not match the anchored pair.
    let c = mcp(
        "db",
        "query",
        json!({"database": "prod-copy", "sql": "\"database\":\"prod\""}),
        &none,
    );
    assert_eq!(short(&c.decide(&p)).0, "ask");
}

#[test]
fn mcp_server_wildcards_and_mcp_server_field_are_not_spoofed_by_tool_names() {
    let none = SessionRules::default();
    let p = policy(
        r#"
[[rule]]
name = "trust-srv"
tool_name = "mcp_srv_*"
decision = "allow"

[[rule]]
name = "trust-by-field"
mcp_server = "docs"
decision = "allow"
"#,
    );
    // Really from server `srv`.
    assert_eq!(
        short(&mcp("srv", "x_y", json!({}), &none).decide(&p)).0,
        "allow"
    );
    // Server `srv_x` exposing `y` is also named `mcp_srv_x_y`: not trusted.
    assert_eq!(
        short(&mcp("srv_x", "y", json!({}), &none).decide(&p)),
        ("ask", "ask-by-default".into())
    );
    // A tool whose name says `docs` but comes from elsewhere.
    let mut c = mcp("evil", "docs_search", json!({}), &none);
    c.decl.name = "mcp_docs_search".into();
    assert_eq!(short(&c.decide(&p)).0, "ask");
    assert_eq!(
        short(&mcp("docs", "search", json!({}), &none).decide(&p)).0,
        "allow"
    );
}

#[test]
fn proceed_always_narrowing() {
    let p = Policy::builtin();
    let mut rules = SessionRules::default();
    // MCP tool: only that tool of that server.
    let c = mcp("db", "query", json!({}), &rules);
    let subject = c.subject.clone();
    rules.allow_always("mcp_db_query", &subject, AlwaysScope::Narrow);
    assert_eq!(
        short(&mcp("db", "query", json!({}), &rules).decide(&p)).0,
        "allow"
    );
    assert_eq!(
        short(&mcp("db", "drop", json!({}), &rules).decide(&p)).0,
        "ask"
    );
    assert_eq!(
        short(&mcp("other", "query", json!({}), &rules).decide(&p)).0,
        "ask"
    );
    // MCP server: every tool of it, no other server.
    let subject = mcp("db", "x", json!({}), &rules).subject.clone();
    rules.allow_always("mcp_db_x", &subject, AlwaysScope::Server);
    assert_eq!(
        short(&mcp("db", "drop", json!({}), &rules).decide(&p)).0,
        "allow"
    );
    assert_eq!(
        short(&mcp("dbx", "drop", json!({}), &rules).decide(&p)).0,
        "ask"
    );
    // File tools: that exact path.
    rules.allow_always(
        "delete_file",
        &Subject::File {
            path: "a.txt".into(),
        },
        AlwaysScope::Narrow,
    );
    let file = |path: &str, rules: &SessionRules| {
        Case {
            decl: decl("delete_file", ToolKind::Delete, false),
            subject: Subject::File { path: path.into() },
            args: args(json!({"file_path": path})),
            mode: ApprovalMode::Default,
            interactive: true,
            rules,
        }
        .decide(&p)
    };
    assert_eq!(short(&file("a.txt", &rules)).0, "allow");
    assert_eq!(short(&file("b.txt", &rules)).0, "ask");
    assert_eq!(short(&file("sub/a.txt", &rules)).0, "ask");
    // Shell: the root commands seen, never interpreters or wrappers whole.
    rules.allow_always(
        "run_shell_command",
        &shell_subject("npm test && python3 x.py"),
        AlwaysScope::Narrow,
    );
    assert_eq!(short(&shell("npm run build", &rules).decide(&p)).0, "allow");
    assert_eq!(short(&shell("python3 y.py", &rules).decide(&p)).0, "ask");
    assert_eq!(
        short(&shell("npm test && make", &rules).decide(&p)).0,
        "ask"
    );
    // A redirection, a dangerous form or an unresolved part still asks.
    assert_eq!(
        short(&shell("npm test > out.txt", &rules).decide(&p)).0,
        "ask"
    );
    assert_eq!(short(&shell("sudo npm test", &rules).decide(&p)).0, "ask");
    assert_eq!(short(&shell("npm $X", &rules).decide(&p)).0, "allow");
    assert_eq!(short(&shell("$X test", &rules).decide(&p)).0, "ask");
}

#[test]
fn session_rules_never_override_a_deny() {
    let p = policy(
        r#"
[[rule]]
name = "no-npm-publish"
command_prefix = "npm publish"
decision = "deny"
"#,
    );
    let mut rules = SessionRules::default();
    rules.allow_always(
        "run_shell_command",
        &shell_subject("npm test"),
        AlwaysScope::Narrow,
    );
    assert_eq!(short(&shell("npm test", &rules).decide(&p)).0, "allow");
    assert_eq!(
        short(&shell("npm test && npm publish", &rules).decide(&p)),
        ("deny", "no-npm-publish".into())
    );
}

#[test]
fn plan_mode_denies_everything_but_read_only_tools_with_a_message() {
    let none = SessionRules::default();
    let p = Policy::builtin();
    let read = Case {
        decl: decl("read_file", ToolKind::Read, true),
        subject: Subject::File {
            path: "a.txt".into(),
        },
        args: args(json!({"file_path": "a.txt"})),
        mode: ApprovalMode::Plan,
        interactive: true,
        rules: &none,
    };
    assert_eq!(read.decide(&p), Decision::Allow);
    let mut write = shell("ls", &none);
    write.mode = ApprovalMode::Plan;
    let Decision::Deny { message, source } = write.decide(&p) else {
        panic!("plan denies the shell");
    };
    assert_eq!(source.rule, "plan-mode");
    assert_eq!(
        message,
        "Tool 'run_shell_command' denied: only read-only tools run in plan mode. Switch the session to another approval mode (default, auto_edit or yolo) to make changes. [rule 'plan-mode' (<built-in>), segment `ls`]."
    );
    let mut edit = Case {
        decl: decl("write_file", ToolKind::Edit, false),
        subject: Subject::File {
            path: "a.txt".into(),
        },
        args: args(json!({"file_path": "a.txt", "content": "x"})),
        mode: ApprovalMode::Plan,
        interactive: true,
        rules: &none,
    };
    assert!(matches!(edit.decide(&p), Decision::Deny { .. }));
    edit.mode = ApprovalMode::AutoEdit;
    assert_eq!(edit.decide(&p), Decision::Allow);
    edit.mode = ApprovalMode::Default;
    assert_eq!(short(&edit.decide(&p)), ("ask", "ask-by-default".into()));
}

#[test]
fn yolo_allows_all_but_denies_and_dangerous_forms() {
    let none = SessionRules::default();
    let p = policy(
        r#"
[[rule]]
name = "no-curl"
command_prefix = "curl"
decision = "deny"

[[rule]]
name = "cleanup"
command_prefix = "rm -rf build"
decision = "allow"
"#,
    );
    let decide = |cmd: &str| {
        let mut c = shell(cmd, &none);
        c.mode = ApprovalMode::Yolo;
        short(&c.decide(&p))
    };
    assert_eq!(decide("make && ./run.sh").0, "allow");
    assert_eq!(decide("make; curl x"), ("deny", "no-curl".into()));
    assert_eq!(decide("rm -rf dist"), ("ask", "dangerous-shell".into()));
    assert_eq!(decide("rm -rf build"), ("allow", String::new()));
    assert_eq!(
        decide("git push --force"),
        ("ask", "dangerous-shell".into())
    );
    assert_eq!(
        decide("echo x > /etc/passwd"),
        ("deny", "write-outside-workspace".into())
    );
    assert_eq!(decide("echo x > /ws/inside.txt").0, "allow");
}

#[test]
fn bad_policy_files_name_file_line_and_reason() {
    let cases = [
        (
            "[[rule]]\ndecision = \"allow\"\nprority = 3\n",
            3,
            "unknown field `prority`",
        ),
        (
            "[[rule]]\ntool_name = \"x\"\n",
            1,
            "missing field `decision`",
        ),
        (
            "\n[[rule]]\ndecision = \"deny\"\nargs_pattern = \"[a-\"\n",
            4,
            "args_pattern is not a valid regex",
        ),
        (
            "[[rule]]\ndecision = \"allow\"\ninteractive = \"sometimes\"\n",
            1,
            "interactive must be",
        ),
        (
            "[[rule]]\ndecision = \"allow\"\nmodes = [\"turbo\"]\n",
            3,
            "unknown variant `turbo`",
        ),
        (
            "[[rule]]\ndecision = \"allow\"\ndeny_message = \"x\"\n",
            1,
            "deny_message needs decision",
        ),
        (
            "[[rule]]\ndecision = \"allow\"\npriority = 99999999\n",
            1,
            "priority 99999999",
        ),
    ];
    for (text, line, reason) in cases {
        let e = parse_rules(text, "ops.toml").unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("policy file ops.toml, line {line}: ")) && e.contains(reason),
            "{text:?} gave {e}"
        );
    }
}

/// Issue 11 items 1 and 2 as a table over every mode: a redirection with no
/// command writes; a dangerous assignment reaches what its command runs and
/// asks even where an operator rule allows that inner command (a deny rule
/// still denies; plan mode still denies).
#[test]
fn bare_redirections_write_and_inherited_assignments_stay_dangerous() {
    let none = SessionRules::default();
    let p = policy(
        r#"
[[rule]]
name = "git-status-ok"
command_prefix = "git status"
decision = "allow"

[[rule]]
name = "ls-pattern"
args_pattern = '\x00"command":"ls"\x00'
decision = "allow"

[[rule]]
name = "no-curl"
command_prefix = "curl"
decision = "deny"
"#,
    );
    use ApprovalMode::{AutoEdit, Default as Dflt, Plan, Yolo};
    let rows: &[(&str, ApprovalMode, &str, &str)] = &[
        ("ls && > important.txt", Dflt, "ask", "read-only-shell"),
        ("ls && > important.txt", AutoEdit, "ask", "read-only-shell"),
        ("ls && > important.txt", Yolo, "allow", ""),
        ("ls && > important.txt", Plan, "deny", "plan-mode"),
        (
            "ls && > /etc/passwd",
            Yolo,
            "deny",
            "write-outside-workspace",
        ),
        ("git status; 2>>log", Dflt, "ask", "read-only-shell"),
        ("echo $(&>f)", Dflt, "ask", "read-only-shell"),
        ("ls | >|f", Dflt, "ask", "read-only-shell"),
        ("(( 1 )) > /ws/f", Dflt, "ask", "read-only-shell"),
        ("{ ls; } >../up", Yolo, "deny", "write-outside-workspace"),
        ("sh -c '>../up'", Yolo, "deny", "write-outside-workspace"),
        ("ls", Dflt, "allow", ""),
        ("git status", Yolo, "allow", ""),
        (
            "BASH_ENV=./h.sh bash -c 'git status'",
            Dflt,
            "ask",
            "dangerous-shell",
        ),
        (
            "BASH_ENV=./h.sh bash -c 'git status'",
            Yolo,
            "ask",
            "dangerous-shell",
        ),
        (
            "env BASH_ENV=./h.sh sh -c 'ls'",
            Yolo,
            "ask",
            "dangerous-shell",
        ),
        ("env -S 'PATH=. git status'", Yolo, "ask", "dangerous-shell"),
        (
            "sudo env LD_PRELOAD=x nice git status",
            AutoEdit,
            "ask",
            "dangerous-shell",
        ),
        (
            "echo . | PROMPT_COMMAND=x xargs bash -c ls",
            Yolo,
            "ask",
            "dangerous-shell",
        ),
        (
            "timeout 5 env GIT_CONFIG_KEY_0=core.fsmonitor git status",
            Yolo,
            "ask",
            "dangerous-shell",
        ),
        ("LD_PRELOAD=x ls", Yolo, "ask", "dangerous-shell"),
        ("PATH=.; git status", Yolo, "ask", "dangerous-shell"),
        ("export PATH=.; ls", Yolo, "ask", "dangerous-shell"),
        ("BASH_ENV=x bash -c 'curl x'", Yolo, "deny", "no-curl"),
        ("BASH_ENV=x bash -c 'touch a'", Plan, "deny", "plan-mode"),
        ("A=1 bash -c 'git status'", Yolo, "allow", ""),
        ("x=1; git status", Dflt, "allow", ""),
    ];
    let mut failures = Vec::new();
    for (cmd, mode, want, rule) in rows {
        let mut c = shell(cmd, &none);
        c.mode = *mode;
        let got = short(&c.decide(&p));
        if got != (*want, rule.to_string()) {
            failures.push(format!(
                "{cmd:?} in {mode:?}: want {want} {rule}, got {got:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Issue 11 item 3: a writing file tool on a path inside a `.git` (any
/// depth, any case) asks in every mode; a deny rule or plan mode denies;
/// read-only tools and other paths are unaffected; "always allow" of the
/// path does not lift it.
#[test]
fn protected_paths_ask_for_file_writes_in_every_mode() {
    let p = policy(
        r#"
[[rule]]
name = "edits-ok"
tool_name = "write_file"
args_pattern = 'file_path'
decision = "allow"

[[rule]]
name = "no-hooks"
tool_name = "replace"
args_pattern = 'hooks'
decision = "deny"
"#,
    );
    let mut rules = SessionRules::default();
    let case =
        |tool: &str, kind: ToolKind, path: &str, mode: ApprovalMode, rules: &SessionRules| {
            Case {
                decl: decl(tool, kind, kind == ToolKind::Read),
                subject: Subject::File { path: path.into() },
                args: args(json!({"file_path": path})),
                mode,
                interactive: true,
                rules,
            }
            .decide(&p)
        };
    use ApprovalMode::{AutoEdit, Default as Dflt, Plan, Yolo};
    for path in [
        ".git/config",
        ".git/hooks/pre-commit",
        "a/b/.git/config",
        "x/.GIT/HEAD",
        ".git",
    ] {
        for mode in [Dflt, AutoEdit, Yolo] {
            assert_eq!(
                short(&case("write_file", ToolKind::Edit, path, mode, &rules)),
                ("ask", "protected-path".into()),
                "{path} {mode:?}"
            );
        }
        // (An operator allow rule applies in plan mode too, so plan's deny
        // is seen on a tool no operator rule allows.)
        let plan_rule = if path.contains("hooks") {
            "no-hooks"
        } else {
            "plan-mode"
        };
        assert_eq!(
            short(&case("replace", ToolKind::Edit, path, Plan, &rules)),
            ("deny", plan_rule.into())
        );
        assert_eq!(
            case("read_file", ToolKind::Read, path, Dflt, &rules),
            Decision::Allow
        );
    }
    assert_eq!(
        short(&case(
            "replace",
            ToolKind::Edit,
            ".git/hooks/x",
            Yolo,
            &rules
        )),
        ("deny", "no-hooks".into())
    );
    for path in [
        ".gitignore",
        ".github/workflows/ci.yml",
        "src/git/a.rs",
        "a.git/b",
    ] {
        assert_eq!(
            case("write_file", ToolKind::Edit, path, Yolo, &rules),
            Decision::Allow,
            "{path}"
        );
    }
    rules.allow_always(
        "write_file",
        &Subject::File {
            path: ".git/config".into(),
        },
        AlwaysScope::Narrow,
    );
    assert_eq!(
        short(&case(
            "write_file",
            ToolKind::Edit,
            ".git/config",
            Dflt,
            &rules
        )),
        ("ask", "protected-path".into())
    );
}

/// Issue 11 item 19: `client_initiated` turns every ask into allow (rules,
/// dangerous forms, protected paths, non-interactive batches) and leaves
/// every deny a deny. Not an ask for a command the analysis cannot see (a
/// computed command name, `find -exec`, a command-line git alias): a deny
/// rule could not have matched what runs there (`$CMD` may be `curl`), so
/// it still asks.
#[test]
fn client_initiated_skips_asks_but_never_denies() {
    let none = SessionRules::default();
    let p = policy(
        r#"
[[rule]]
name = "no-curl"
command_prefix = "curl"
decision = "deny"
"#,
    );
    let shell_in = |cmd: &str, mode: ApprovalMode, interactive: bool| {
        let mut c = shell(cmd, &none);
        c.mode = mode;
        c.interactive = interactive;
        (short(&c.decide(&p)), short(&c.decide_as(&p, true)))
    };
    use ApprovalMode::{AutoEdit, Default as Dflt, Plan, Yolo};
    let ask_then_allow = [
        ("touch a", Dflt, true),
        ("touch a", AutoEdit, false),
        ("rm -rf build", Yolo, true),
        ("BASH_ENV=x bash -c ls", Yolo, true),
        ("ls && > f", Dflt, false),
    ];
    for (cmd, mode, interactive) in ask_then_allow {
        let (model, user) = shell_in(cmd, mode, interactive);
        assert_eq!(model.0, "ask", "{cmd}");
        assert_eq!(user, ("allow", String::new()), "{cmd}");
    }
    for cmd in [
        "$CMD x",
        "find . -exec curl x ';'",
        "git -c 'alias.x=!curl x' x",
    ] {
        let (model, user) = shell_in(cmd, Dflt, true);
        assert_eq!(model.0, "ask", "{cmd}");
        assert_eq!(user.0, "ask", "{cmd}");
    }
    let denied = [
        ("curl x", Yolo, "no-curl"),
        ("touch a", Plan, "plan-mode"),
        ("echo > /etc/x", Yolo, "write-outside-workspace"),
    ];
    for (cmd, mode, rule) in denied {
        let (model, user) = shell_in(cmd, mode, true);
        assert_eq!(model, ("deny", rule.to_string()), "{cmd}");
        assert_eq!(user, model, "{cmd}");
    }
    let protected = Case {
        decl: decl("write_file", ToolKind::Edit, false),
        subject: Subject::File {
            path: ".git/config".into(),
        },
        args: args(json!({"file_path": ".git/config"})),
        mode: Yolo,
        interactive: true,
        rules: &none,
    };
    assert_eq!(short(&protected.decide(&p)).1, "protected-path");
    assert_eq!(protected.decide_as(&p, true), Decision::Allow);
}

/// Tiers (issue 18): built-in < server operator < tenant < session. A
/// tenant's rule beats any server rule whatever its priority; the session's
/// "always" answers still only turn an ask into an allow, never a tenant's
/// deny.
#[test]
fn a_tenant_tier_sits_between_the_servers_rules_and_the_sessions() {
    let server = policy(
        r#"
[[rule]]
name = "server-allows-git"
command_prefix = "git"
decision = "allow"
priority = 100

[[rule]]
name = "server-denies-curl"
command_prefix = "curl"
decision = "deny"
"#,
    );
    let tenant = Policy::with_rules(
        parse_rules(
            r#"
[[rule]]
name = "tenant-denies-git-push"
command_prefix = "git push"
decision = "deny"
deny_message = "tenant: no pushing"

[[rule]]
name = "tenant-allows-curl"
command_prefix = "curl"
decision = "allow"
"#,
            "acme.toml",
        )
        .expect("valid policy"),
        None,
    );
    let layered = server.layered(&tenant);
    let none = SessionRules::default();
    assert_eq!(
        short(&shell("git push origin", &none).decide(&server)),
        ("allow", String::new())
    );
    assert_eq!(
        short(&shell("git push origin", &none).decide(&layered)),
        ("deny", "tenant-denies-git-push".into())
    );
    // What the tenant does not name, the server's rules still decide.
    assert_eq!(
        short(&shell("git status", &none).decide(&layered)),
        ("allow", String::new())
    );
    assert_eq!(
        short(&shell("curl example.com", &none).decide(&layered)),
        ("allow", String::new())
    );
    // A session "always" rule does not lift the tenant's deny.
    let mut always = SessionRules::default();
    always.allow_always(
        "run_shell_command",
        &shell_subject("git push"),
        AlwaysScope::Narrow,
    );
    let Decision::Deny { message, source } = shell("git push origin", &always).decide(&layered)
    else {
        panic!("the tenant's deny holds");
    };
    assert!(message.contains("tenant: no pushing"), "{message}");
    assert_eq!(source.file, "acme.toml");
}
