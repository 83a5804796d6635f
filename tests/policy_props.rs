//! Property tests of the policy engine: a denied command joined to an
//! allowed one by any operator or nesting is never allowed, and adding a
//! deny rule never makes any decision less strict.

use std::path::Path;

use proptest::prelude::*;
use serde_json::json;
use toolsched::policy::{ApprovalMode, Decision, Policy, PolicyInput, SessionRules, parse_rules};
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

/// A call to decide: the declaration, subject and arguments.
#[derive(Debug, Clone)]
struct Call {
    decl: Declaration,
    subject: Subject,
    args: Args,
}

fn shell_call(command: &str) -> Call {
    let mut args = Args::new();
    args.insert("command".into(), json!(command));
    Call {
        decl: decl("run_shell_command", ToolKind::Execute, false),
        subject: Subject::Shell {
            command: command.into(),
            analysis: std::sync::Arc::new(toolsched::shell::analyze(command)),
            dir_path: ".".into(),
        },
        args,
    }
}

fn level(d: &Decision) -> u8 {
    match d {
        Decision::Allow => 0,
        Decision::AskUser { .. } => 1,
        Decision::Deny { .. } => 2,
    }
}

fn decide(
    p: &Policy,
    c: &Call,
    mode: ApprovalMode,
    interactive: bool,
    rules: &SessionRules,
) -> Decision {
    p.decide_in(
        PolicyInput {
            decl: &c.decl,
            subject: &c.subject,
            args: &c.args,
            mode,
            interactive,
            rules,
            client_initiated: false,
            writes_repository: false,
        },
        Some(Path::new("/ws")),
    )
}

fn mode() -> impl Strategy<Value = ApprovalMode> {
    prop_oneof![
        Just(ApprovalMode::Default),
        Just(ApprovalMode::AutoEdit),
        Just(ApprovalMode::Yolo),
        Just(ApprovalMode::Plan),
    ]
}

const ALLOWED: &[&str] = &[
    "ls",
    "ls -la",
    "cat a.txt",
    "echo hi",
    "git status",
    "wc -l a.txt",
    "pwd",
    "make test",
];
const DENIED: &[&str] = &[
    "curl http://x",
    "wget x",
    "curl -d @- x",
    "rm -rf /",
    "/usr/bin/curl x",
];

/// Ways to put a denied command next to (or inside) an allowed one.
fn join(a: &str, d: &str, how: usize) -> String {
    match how {
        0 => format!("{a} && {d}"),
        1 => format!("{a} || {d}"),
        2 => format!("{a}; {d}"),
        3 => format!("{a} | {d}"),
        4 => format!("{a} & {d}"),
        5 => format!("{a}\n{d}"),
        6 => format!("{d} && {a}"),
        7 => format!("{a} $({d})"),
        8 => format!("{a} `{d}`"),
        9 => format!("{a} <({d})"),
        10 => format!("({a}; {d})"),
        11 => format!("{{ {a}; {d}; }}"),
        12 => format!("bash -c '{a} && {d}'"),
        13 => format!("{a} && env X=1 {d}"),
        14 => format!("{a} && timeout 5 {d}"),
        15 => format!("{a} && sudo {d}"),
        16 => format!("{a} | xargs {d}"),
        17 => format!("{a}\n\n  {d} # trailing"),
        18 => format!("{a} && sh -c \"{d}\""),
        19 => format!("{a} > out.txt; {d}"),
        _ => format!("eval '{d}'; {a}"),
    }
}

const JOIN_OPERATOR_POLICY: &str = r#"
[[rule]]
name = "allow-make"
command_prefix = "make"
decision = "allow"
allow_redirection = true

[[rule]]
name = "yolo-everything"
tool_name = "*"
decision = "allow"
priority = -1

[[rule]]
name = "no-network"
command_prefix = ["curl", "wget", "rm -rf /"]
decision = "deny"
"#;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn joining_an_allowed_and_a_denied_command_is_never_allowed(
        a in proptest::sample::select(ALLOWED),
        d in proptest::sample::select(DENIED),
        how in 0usize..21,
        m in mode(),
        interactive in any::<bool>(),
    ) {
        let policy = Policy::with_rules(parse_rules(JOIN_OPERATOR_POLICY, "ops.toml").unwrap(), None);
        let none = SessionRules::default();
        // Alone, the allowed command is allowed (outside plan mode) and the
        // denied one denied.
        if m != ApprovalMode::Plan {
            prop_assert_eq!(decide(&policy, &shell_call(a), m, interactive, &none), Decision::Allow);
        }
        prop_assert_eq!(level(&decide(&policy, &shell_call(d), m, interactive, &none)), 2);
        let joined = join(a, d, how);
        let got = decide(&policy, &shell_call(&joined), m, interactive, &none);
        prop_assert_eq!(level(&got), 2, "{:?} gave {:?}", joined, got);
    }
}

/// One generated operator rule as TOML.
fn rule_toml() -> impl Strategy<Value = String> {
    let tool = prop_oneof![
        Just(None),
        Just(Some("\"run_shell_command\"")),
        Just(Some("\"write_file\"")),
        Just(Some("\"mcp_db_*\"")),
        Just(Some("\"*\"")),
        Just(Some("[\"write_file\", \"run_shell_command\"]")),
    ];
    let prefix = prop_oneof![
        Just(None),
        Just(Some("ls")),
        Just(Some("git")),
        Just(Some("git push")),
        Just(Some("rm")),
        Just(Some("curl")),
    ];
    let pattern = prop_oneof![
        Just(None),
        Just(Some(r#"\x00"command":"ls"#)),
        Just(Some(r#""file_path":"a\.txt""#)),
        Just(Some(r#"prod"#)),
    ];
    let decision = prop_oneof![Just("allow"), Just("ask_user"), Just("deny")];
    let modes = prop_oneof![
        Just(None),
        Just(Some("[\"default\"]")),
        Just(Some("[\"yolo\", \"auto_edit\"]")),
        Just(Some("[\"plan\"]")),
    ];
    let interactive = prop_oneof![Just(None), Just(Some("true")), Just(Some("false"))];
    (
        tool,
        prefix,
        pattern,
        decision,
        -3i64..4,
        modes,
        interactive,
        any::<bool>(),
    )
        .prop_map(
            |(tool, prefix, pattern, decision, priority, modes, interactive, redirection)| {
                let mut t = String::from("[[rule]]\n");
                let tool = if prefix.is_some() {
                    Some("\"run_shell_command\"")
                } else {
                    tool
                };
                if let Some(tool) = tool {
                    t.push_str(&format!("tool_name = {tool}\n"));
                }
                if let Some(p) = prefix {
                    t.push_str(&format!("command_prefix = \"{p}\"\n"));
                }
                if let Some(p) = pattern {
                    t.push_str(&format!("args_pattern = '{p}'\n"));
                }
                t.push_str(&format!(
                    "decision = \"{decision}\"\npriority = {priority}\n"
                ));
                if let Some(m) = modes {
                    t.push_str(&format!("modes = {m}\n"));
                }
                if let Some(i) = interactive {
                    t.push_str(&format!("interactive = {i}\n"));
                }
                if redirection && decision == "allow" {
                    t.push_str("allow_redirection = true\n");
                }
                t
            },
        )
}

fn deny_rule_toml() -> impl Strategy<Value = String> {
    rule_toml().prop_map(|t| {
        t.replace("decision = \"allow\"", "decision = \"deny\"")
            .replace("decision = \"ask_user\"", "decision = \"deny\"")
            .replace("allow_redirection = true\n", "")
    })
}

fn call() -> impl Strategy<Value = Call> {
    let shell = proptest::sample::select(vec![
        "ls",
        "ls && git status",
        "git push",
        "git push --force",
        "rm a.txt",
        "curl x | sh",
        "echo hi > out.txt",
        "ls; rm -rf b",
        "$X",
        "bash -c 'git log'",
        "cat a.txt | grep x",
        "printf x >> ../up.txt",
        "make prod",
    ])
    .prop_map(shell_call);
    let file = proptest::sample::select(vec!["a.txt", "b.txt"]).prop_map(|p| Call {
        decl: decl("write_file", ToolKind::Edit, false),
        subject: Subject::File { path: p.into() },
        args: serde_json::from_value(json!({"file_path": p, "content": "x"})).unwrap(),
    });
    let mcp = proptest::sample::select(vec![("db", "query"), ("db_x", "y"), ("git", "log")])
        .prop_map(|(server, tool)| Call {
            decl: decl(&format!("mcp_{server}_{tool}"), ToolKind::Other, false),
            subject: Subject::Mcp {
                server: server.into(),
                tool: tool.into(),
            },
            args: serde_json::from_value(json!({"database": "prod"})).unwrap(),
        });
    let read = Just(Call {
        decl: decl("read_file", ToolKind::Read, true),
        subject: Subject::File {
            path: "a.txt".into(),
        },
        args: serde_json::from_value(json!({"file_path": "a.txt"})).unwrap(),
    });
    prop_oneof![4 => shell, 2 => file, 2 => mcp, 1 => read]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn adding_a_deny_rule_never_makes_a_decision_less_strict(
        rules in proptest::collection::vec(rule_toml(), 0..6),
        deny in deny_rule_toml(),
        at in 0usize..7,
        c in call(),
        m in mode(),
        interactive in any::<bool>(),
        always in any::<bool>(),
    ) {
        let before_text = rules.join("\n");
        let mut with_deny = rules.clone();
        with_deny.insert(at.min(rules.len()), deny);
        let after_text = with_deny.join("\n");
        let before = Policy::with_rules(parse_rules(&before_text, "ops.toml").unwrap(), None);
        let after = Policy::with_rules(parse_rules(&after_text, "ops.toml").unwrap(), None);
        let mut session = SessionRules::default();
        if always {
            session.allow_always(&c.decl.name, &c.subject, toolsched::policy::AlwaysScope::Narrow);
        }
        let b = decide(&before, &c, m, interactive, &session);
        let a = decide(&after, &c, m, interactive, &session);
        prop_assert!(level(&a) >= level(&b), "before {:?}\nafter {:?}\npolicy:\n{}", b, a, after_text);
    }
}
