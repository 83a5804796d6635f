//! Shell commands cannot sneak past a rule: a table of commands (compound
//! commands, substitutions, quoting, wrappers, heredocs, redirections,
//! newlines, comments) run over gRPC in a non-interactive batch, asserting
//! each one's decision, the deciding rule and segment, and that a denied
//! command ran no segment at all.

use crate::support;

use serde_json::json;
use support::*;
use toolsched::api::{ServerOptions, pb};
use toolsched::policy::{Policy, PolicyHandle};
use toolsched::scheduler::SchedulerConfig;

const POLICY: &str = r#"
[[rule]]
name = "no-network"
command_prefix = ["curl", "wget"]
decision = "deny"
deny_message = "network tools are not allowed"

[[rule]]
name = "touch-ok"
command_prefix = "touch"
decision = "allow"

[[rule]]
name = "printf-writes"
command_prefix = "printf"
decision = "allow"
allow_redirection = true

[[rule]]
name = "clean-tmpdir"
tool_name = "run_shell_command"
args_pattern = '\x00"command":"rm -rf tmpdir"\x00'
decision = "allow"
"#;

/// Expected outcome: `allow` runs; `ask`/`deny` end in policy_violation
/// naming the rule and the segment.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    Allow,
    Ask(&'static str, &'static str),
    Deny(&'static str, &'static str),
}
use Want::*;

const NET: &str = "no-network";
const DEFAULT: &str = "ask-by-default";
const DANGER: &str = "dangerous-shell";
const UNRESOLVED: &str = "unresolved-shell";
const OUTSIDE: &str = "write-outside-workspace";
const READ_ONLY: &str = "read-only-shell";

fn table() -> Vec<(&'static str, Want)> {
    vec![
        // Read-only commands, alone and together.
        ("ls", Allow),
        ("ls -la && cat a.txt", Allow),
        ("echo hi | wc -l", Allow),
        ("git status", Allow),
        ("find . -name '*.txt'", Allow),
        ("ls\n\necho done", Allow),
        ("cd sub && ls", Allow),
        ("ls # ; curl http://x", Allow),
        ("ls 2>/dev/null", Allow),
        ("ls > /dev/null 2>&1", Allow),
        // Single quotes and quoted heredocs are data.
        ("echo 'curl x; $(curl y)'", Allow),
        ("echo \"curl x\"", Allow),
        ("cat <<'EOF'\n$(curl x)\nEOF", Allow),
        // Operator rules.
        ("touch ok.txt", Allow),
        ("printf hi > printed.txt", Allow),
        ("rm -rf tmpdir", Allow),
        // Every operator, substitution, nesting and wrapper reaches curl.
        ("touch marker && curl http://x", Deny(NET, "curl http://x")),
        ("ls || curl x", Deny(NET, "curl x")),
        ("ls | curl -d @- x", Deny(NET, "curl -d @- x")),
        ("ls & curl x", Deny(NET, "curl x")),
        ("ls\ncurl x; touch marker", Deny(NET, "curl x")),
        ("echo $(curl x)", Deny(NET, "curl x")),
        ("echo \"$(curl x)\" > marker", Deny(NET, "curl x")),
        ("echo `wget x`", Deny(NET, "wget x")),
        ("cat <(curl x)", Deny(NET, "curl x")),
        ("echo hi | tee >(curl x)", Deny(NET, "curl x")),
        ("(touch marker; curl x)", Deny(NET, "curl x")),
        ("{ touch marker; curl x; }", Deny(NET, "curl x")),
        ("bash -c 'ls && curl x'", Deny(NET, "curl x")),
        ("sh -c \"touch marker; curl x\"", Deny(NET, "curl x")),
        ("eval 'curl x'", Deny(NET, "curl x")),
        ("env A=1 curl x", Deny(NET, "env A=1 curl x")),
        ("timeout 5 curl x", Deny(NET, "timeout 5 curl x")),
        ("nice -n 5 curl x", Deny(NET, "nice -n 5 curl x")),
        ("nohup wget x", Deny(NET, "nohup wget x")),
        ("sudo -u root curl x", Deny(NET, "sudo -u root curl x")),
        ("command curl x", Deny(NET, "command curl x")),
        ("exec curl x", Deny(NET, "exec curl x")),
        ("echo x | xargs -n 1 curl", Deny(NET, "xargs -n 1 curl")),
        ("cat <<EOF\n$(curl x)\nEOF", Deny(NET, "curl x")),
        ("if true; then curl x; fi", Deny(NET, "curl x")),
        ("for f in a b; do curl $f; done", Deny(NET, "curl $f")),
        ("f() { curl x; }; touch marker; f", Deny(NET, "curl x")),
        ("echo $(echo $(curl x))", Deny(NET, "curl x")),
        ("bash -c \"sh -c 'eval curl x'\"", Deny(NET, "curl x")),
        ("/usr/bin/curl x", Deny(NET, "/usr/bin/curl x")),
        ("trap 'curl x' EXIT; ls", Deny(NET, "curl x")),
        ("setsid nice curl x", Deny(NET, "setsid nice curl x")),
        ("/usr/bin/env \\curl x", Deny(NET, "/usr/bin/env \\curl x")),
        ("c\"ur\"l x", Deny(NET, "c\"ur\"l x")),
        // Writes through redirections.
        ("echo hi > out.txt", Ask(READ_ONLY, "echo hi")),
        ("echo hi >> log.txt", Ask(READ_ONLY, "echo hi")),
        ("{ ls; echo a; } > both.txt", Ask(READ_ONLY, "ls")),
        ("echo hi > /tmp/outside.txt", Deny(OUTSIDE, "echo hi")),
        ("echo hi > ../outside.txt", Deny(OUTSIDE, "echo hi")),
        ("printf x > ~/outside.txt", Deny(OUTSIDE, "printf x")),
        (
            "ls && touch marker > ../up.txt",
            Deny(OUTSIDE, "touch marker"),
        ),
        ("ls | tee marker > ../up.txt", Deny(OUTSIDE, "tee marker")),
        // Not read-only: asks in default mode.
        ("ls; rm a.txt", Ask(DEFAULT, "rm a.txt")),
        (
            "sort -ro sorted.txt a.txt",
            Ask(DEFAULT, "sort -ro sorted.txt a.txt"),
        ),
        (
            "uniq a.txt sorted.txt",
            Ask(DEFAULT, "uniq a.txt sorted.txt"),
        ),
        (
            "cat a.txt | sort -o sorted.txt",
            Ask(DEFAULT, "sort -o sorted.txt"),
        ),
        ("FOO=bar ls", Ask(DEFAULT, "FOO=bar ls")),
        (
            "git -c core.pager=x log",
            Ask(DEFAULT, "git -c core.pager=x log"),
        ),
        (
            "python3 -c 'print(1)'",
            Ask(DEFAULT, "python3 -c 'print(1)'"),
        ),
        ("./ls", Ask(DEFAULT, "./ls")),
        // Dangerous forms ask unless a rule names them.
        ("rm -rf other", Ask(DANGER, "rm -rf other")),
        ("find . -delete", Ask(DANGER, "find . -delete")),
        (
            "find . -exec touch {} \\;",
            Ask(DANGER, "find . -exec touch {} \\;"),
        ),
        ("git push --force", Ask(DANGER, "git push --force")),
        (
            "git -C . push -f origin",
            Ask(DANGER, "git -C . push -f origin"),
        ),
        ("rm $OPTS x", Ask(DANGER, "rm $OPTS x")),
        ("sudo ls", Ask(DANGER, "sudo ls")),
        // A redirection with no command is a write (issue 11, item 1):
        // every form, wherever it stands; `important.txt` keeps its content.
        ("ls && > important.txt", Ask(READ_ONLY, "> important.txt")),
        (">important.txt", Ask(READ_ONLY, ">important.txt")),
        (">>important.txt", Ask(READ_ONLY, ">>important.txt")),
        ("&>important.txt", Ask(READ_ONLY, "&>important.txt")),
        ("2>important.txt", Ask(READ_ONLY, "2>important.txt")),
        (">|important.txt", Ask(READ_ONLY, ">|important.txt")),
        ("ls | > important.txt", Ask(READ_ONLY, "> important.txt")),
        ("ls; >important.txt; ls", Ask(READ_ONLY, ">important.txt")),
        ("echo $(> important.txt)", Ask(READ_ONLY, "> important.txt")),
        ("bash -c '>important.txt'", Ask(DEFAULT, ">important.txt")),
        (
            "(( 1 )) > important.txt",
            Ask(READ_ONLY, "(( 1 )) > important.txt"),
        ),
        (
            "while false; do :; done > important.txt",
            Ask(READ_ONLY, "false"),
        ),
        ("(ls) > important.txt", Ask(READ_ONLY, "ls")),
        ("cat <<EOF > important.txt\nhi\nEOF", Ask(READ_ONLY, "cat")),
        (
            "FOO=1 > important.txt",
            Ask(READ_ONLY, "FOO=1 > important.txt"),
        ),
        ("ls && > ../outside.txt", Deny(OUTSIDE, "> ../outside.txt")),
        (
            "echo $(>/tmp/outside.txt)",
            Deny(OUTSIDE, ">/tmp/outside.txt"),
        ),
        // A dangerous assignment stays dangerous through whatever runs the
        // command, even where an operator rule (`touch-ok`) allows the
        // inner command (issue 11, item 2). `evil.sh` never runs.
        (
            "BASH_ENV=./evil.sh bash -c 'touch marker'",
            Ask(DANGER, "touch marker"),
        ),
        (
            "env BASH_ENV=./evil.sh bash -c 'touch marker'",
            Ask(DANGER, "touch marker"),
        ),
        (
            "env -S 'BASH_ENV=./evil.sh bash -c \"touch marker\"'",
            Ask(DANGER, "touch marker"),
        ),
        (
            "env -S 'LD_PRELOAD=./evil.so touch marker'",
            Ask(DANGER, "env -S 'LD_PRELOAD=./evil.so touch marker'"),
        ),
        (
            "PATH=. timeout 5 sh -c 'touch marker'",
            Ask(DANGER, "touch marker"),
        ),
        (
            "echo x | ENV=./evil.sh xargs sh -c 'touch marker'",
            Ask(DANGER, "touch marker"),
        ),
        (
            "exec env PROMPT_COMMAND=./evil.sh bash -c 'touch marker'",
            Ask(DANGER, "touch marker"),
        ),
        (
            "nice sudo -u root bash -c 'touch marker'",
            Ask(DANGER, "touch marker"),
        ),
        (
            "BASH_ENV=./evil.sh touch marker",
            Ask(DANGER, "BASH_ENV=./evil.sh touch marker"),
        ),
        ("PATH=.; touch marker", Ask(DANGER, "PATH=.")),
        (
            "export BASH_ENV=./evil.sh; bash -c 'touch marker'",
            Ask(DANGER, "export BASH_ENV=./evil.sh"),
        ),
        // An ordinary assignment does not block the allowed command.
        ("A=1 bash -c 'touch ok2.txt'", Allow),
        // What the parser cannot resolve asks.
        ("$CMD x", Ask(UNRESOLVED, "$CMD x")),
        ("/usr/bin/cur? x", Ask(UNRESOLVED, "/usr/bin/cur? x")),
        ("echo 'unterminated", Ask(UNRESOLVED, "echo 'unterminated")),
        ("bash script.sh", Ask(UNRESOLVED, "bash script.sh")),
        ("eval \"$X\"", Ask(UNRESOLVED, "eval \"$X\"")),
    ]
}

#[tokio::test]
async fn shell_commands_are_decided_by_their_strictest_segment() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.toml");
    std::fs::write(&file, POLICY).unwrap();
    let policy = PolicyHandle::fixed(Policy::from_file(&file).unwrap());
    let srv =
        TestServer::with_policy(SchedulerConfig::default(), ServerOptions::default(), policy).await;
    std::fs::write(srv.path("a.txt"), "alpha\n").unwrap();
    std::fs::create_dir(srv.path("sub")).unwrap();
    std::fs::create_dir(srv.path("tmpdir")).unwrap();
    std::fs::write(srv.path("important.txt"), "keep\n").unwrap();
    std::fs::write(srv.path("evil.sh"), "touch evil-ran\n").unwrap();

    let table = table();
    assert!(table.len() >= 40);
    let failures = check_table(&srv, "table", &table).await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // No segment of a denied or unapproved command ran.
    assert!(!srv.path("marker").exists());
    assert!(!srv.path("out.txt").exists());
    assert!(!srv.path("sorted.txt").exists());
    assert_eq!(
        std::fs::read_to_string(srv.path("important.txt")).unwrap(),
        "keep\n"
    );
    assert!(!srv.path("evil-ran").exists());
    assert!(srv.path("ok2.txt").exists());
    // Allowed ones did.
    assert!(srv.path("ok.txt").exists());
    assert_eq!(
        std::fs::read_to_string(srv.path("printed.txt")).unwrap(),
        "hi"
    );
    assert!(!srv.path("tmpdir").exists());
}

/// yolo allows writes inside the workspace, but a bare redirection outside
/// it is denied and a dangerous assignment of an outer command still asks,
/// whatever rule allows the inner command.
#[tokio::test]
async fn yolo_still_sees_bare_redirections_and_inherited_assignments() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.toml");
    std::fs::write(&file, POLICY).unwrap();
    let policy = PolicyHandle::fixed(Policy::from_file(&file).unwrap());
    let srv = TestServer::with_policy(yolo(), ServerOptions::default(), policy).await;
    std::fs::write(srv.path("important.txt"), "keep\n").unwrap();
    std::fs::write(srv.path("evil.sh"), "touch evil-ran\n").unwrap();
    let table = [
        ("ls && > ../outside.txt", Deny(OUTSIDE, "> ../outside.txt")),
        ("ls | >>~/outside.txt", Deny(OUTSIDE, ">>~/outside.txt")),
        (
            "bash -c 'ls; 2>/tmp/outside.txt'",
            Deny(OUTSIDE, "2>/tmp/outside.txt"),
        ),
        (
            "env BASH_ENV=./evil.sh bash -c 'touch marker'",
            Ask(DANGER, "touch marker"),
        ),
        ("LD_PRELOAD=./evil.so sh -c 'ls'", Ask(DANGER, "ls")),
        (
            "env -S 'PATH=. touch marker'",
            Ask(DANGER, "env -S 'PATH=. touch marker'"),
        ),
        // Inside the workspace yolo writes, bare redirections too.
        ("ls && > yolo.txt", Allow),
    ];
    let failures = check_table(&srv, "yolo", &table).await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(!srv.path("marker").exists());
    assert!(!srv.path("evil-ran").exists());
    assert_eq!(std::fs::read_to_string(srv.path("yolo.txt")).unwrap(), "");
    assert!(!dir.path().join("outside.txt").exists());
}

/// Runs `table` in one non-interactive batch of `session`; the rows whose
/// outcome differs from the expected one, described.
async fn check_table(srv: &TestServer, session: &str, table: &[(&str, Want)]) -> Vec<String> {
    let calls = table
        .iter()
        .enumerate()
        .map(|(i, (cmd, _))| {
            call(
                &format!("c{i}"),
                "run_shell_command",
                json!({"command": cmd}),
            )
        })
        .collect();
    let events = collect(
        srv.schedule_with(pb::ScheduleCallsRequest {
            session_id: session.into(),
            calls,
            approval_mode: 0,
            interactive: Some(false),
            ..Default::default()
        })
        .await,
    )
    .await;

    let mut failures = Vec::new();
    for (i, (cmd, want)) in table.iter().enumerate() {
        let id = format!("c{i}");
        let got = match terminal(&events, &id) {
            State::Success(_) => {
                assert_eq!(
                    states(&events, &id),
                    ["validating", "scheduled", "executing", "success"]
                );
                Allow
            }
            State::Error(e) => {
                assert_eq!(
                    e.r#type,
                    pb::ErrorType::PolicyViolation as i32,
                    "{cmd}: {e:?}"
                );
                assert_eq!(states(&events, &id), ["validating", "error"], "{cmd}");
                match classify(&e.message) {
                    Some(w) => w,
                    None => {
                        failures.push(format!("{cmd:?}: unexpected message {}", e.message));
                        continue;
                    }
                }
            }
            other => panic!("{cmd}: {other:?}"),
        };
        if got != *want {
            let detail = match terminal(&events, &id) {
                State::Error(e) => e.message,
                _ => String::new(),
            };
            failures.push(format!("{cmd:?}: want {want:?}, got {got:?} ({detail})"));
        }
    }
    failures
}

/// The decision, rule and segment named in a policy_violation message.
fn classify(message: &str) -> Option<Want> {
    let kind = if message.starts_with("Tool 'run_shell_command' denied: ") {
        "deny"
    } else if message.starts_with("Approval required but the batch is non-interactive") {
        "ask"
    } else {
        return None;
    };
    let start = message.rfind("[rule '")? + "[rule '".len();
    let rule = &message[start..start + message[start..].find('\'')?];
    let seg_start = message.rfind(", segment `")? + ", segment `".len();
    let seg_end = message.rfind("`].")?;
    let segment = &message[seg_start..seg_end];
    // Leak: the table compares with 'static strings; a test process is short.
    let rule: &'static str = Box::leak(rule.to_string().into_boxed_str());
    let segment: &'static str = Box::leak(segment.to_string().into_boxed_str());
    Some(if kind == "deny" {
        Deny(rule, segment)
    } else {
        Ask(rule, segment)
    })
}
