//! `/metrics` as Prometheus scrapes it, from the real binary after a batch:
//! build info, process, gRPC server, approval wait, sandbox denials, lagging
//! clients. `promtool check metrics` (Debian's prometheus package, installed
//! by deploy/tools/setup.sh) must accept the output, and every family's HELP
//! text must be the one the README's Metrics table gives.

use crate::support;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::json;
use support::*;
use toolsched::api::pb;
use toolsched::api::pb::tool_scheduler_client::ToolSchedulerClient;

/// `GET /metrics` over a plain TCP connection: the body.
fn scrape(addr: std::net::SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let (_, body) = text.split_once("\r\n\r\n").expect("a body");
    body.to_string()
}

/// promtool from deploy/tools/setup.sh (or the PATH).
fn promtool() -> PathBuf {
    let local =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/tools/prometheus/usr/bin/promtool");
    if local.is_file() {
        return local;
    }
    let on_path = std::process::Command::new("promtool")
        .arg("--version")
        .output();
    assert!(
        on_path.is_ok_and(|o| o.status.success()),
        "promtool is missing: run `bash tests/setup.sh` (deploy/tools/setup.sh extracts it from Debian's prometheus package)"
    );
    PathBuf::from("promtool")
}

/// The value of the sample `line_prefix` (metric name and labels, exactly).
fn value(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {sample} in\n{text}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_after_a_batch_has_every_family_and_passes_promtool() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a"), "a\n").unwrap();
    let bin = Binary::start(ws.path(), &["--metrics-listen", "127.0.0.1:0"]);
    let metrics = bin.metrics_addr.expect("metrics address logged");
    let mut client = ToolSchedulerClient::connect(format!("http://{}", bin.addr))
        .await
        .unwrap();

    // A read that runs and a write that asks and is approved once.
    let mut batch = request(
        "m",
        vec![
            call("r", "read_file", json!({"file_path": "a"})),
            call(
                "w",
                "write_file",
                json!({"file_path": "b", "content": "b\n"}),
            ),
        ],
    );
    batch.approval_mode = pb::ApprovalMode::Default as i32;
    let mut stream = client.schedule_calls(batch).await.unwrap().into_inner();
    let mut events = Vec::new();
    let prompt = await_prompt(&mut stream, &mut events, "w").await;
    let answer = |correlation_id: &str| pb::ConfirmRequest {
        session_id: "m".into(),
        call_id: "w".into(),
        correlation_id: correlation_id.into(),
        outcome: pb::ConfirmationOutcome::ProceedOnce as i32,
        new_content: None,
    };
    // A stale correlation id first: FAILED_PRECONDITION, nothing changes.
    let stale = client.confirm(answer("not-the-one")).await.unwrap_err();
    client
        .confirm(answer(&prompt.correlation_id))
        .await
        .unwrap();
    events.extend(collect(stream).await);
    assert_eq!(std::fs::read_to_string(ws.path().join("b")).unwrap(), "b\n");
    let text = scrape(metrics);

    let sample = |s: &str| value(&text, s);
    let version = env!("CARGO_PKG_VERSION");
    let (os, arch) = (std::env::consts::OS, std::env::consts::ARCH);
    assert_eq!(
        sample(&format!(
            r#"toolsched_build_info{{arch="{arch}",os="{os}",version="{version}"}}"#
        )),
        1.0
    );
    // The process, as every dashboard names it.
    // Whole seconds (the prometheus crate's collector): 0 this early.
    assert!(sample("process_cpu_seconds_total") >= 0.0);
    assert!(sample("process_resident_memory_bytes") > 1e6);
    assert!(sample("process_open_fds") >= 3.0);
    assert!(sample("process_max_fds") >= sample("process_open_fds"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = sample("process_start_time_seconds");
    assert!(
        started <= now && started > now - 600.0,
        "{started} vs {now}"
    );

    // gRPC: one stream, two answers (one refused), by method and code.
    let schedule = "toolsched.v1.ToolScheduler/ScheduleCalls";
    let confirm = "toolsched.v1.ToolScheduler/Confirm";
    let code = tonic::Code::FailedPrecondition;
    assert_eq!(stale.code(), code);
    for (method, code, n) in [
        (schedule, "OK", 1.0),
        (confirm, "OK", 1.0),
        (confirm, "FAILED_PRECONDITION", 1.0),
    ] {
        assert_eq!(
            sample(&format!(
                r#"toolsched_grpc_server_handled_total{{code="{code}",method="{method}"}}"#
            )),
            n,
            "{method} {code}"
        );
    }
    assert_eq!(
        sample(&format!(
            r#"toolsched_grpc_server_handling_seconds_count{{method="{confirm}"}}"#
        )),
        2.0
    );
    // The stream is timed to its end: at least as long as the prompt was open.
    let stream_secs = sample(&format!(
        r#"toolsched_grpc_server_handling_seconds_sum{{method="{schedule}"}}"#
    ));
    let wait_secs = sample(r#"toolsched_approval_wait_seconds_sum{outcome="proceed_once"}"#);
    assert!(stream_secs >= wait_secs, "{stream_secs} < {wait_secs}");
    assert_eq!(
        sample(r#"toolsched_approval_wait_seconds_count{outcome="proceed_once"}"#),
        1.0
    );
    // Counted from zero, so that rates exist before the first one.
    for kind in ["filesystem", "syscall", "processes", "network", "setup"] {
        assert_eq!(
            sample(&format!(
                r#"toolsched_sandbox_denials_total{{kind="{kind}"}}"#
            )),
            0.0
        );
    }
    for action in ["merged", "dropped"] {
        assert_eq!(
            sample(&format!(
                r#"toolsched_events_lagged_total{{action="{action}"}}"#
            )),
            0.0
        );
    }
    // No MCP server configured: no MCP families.
    assert!(!text.contains("toolsched_mcp_server"), "{text}");

    // promtool parses and lints the exposition.
    let mut check = std::process::Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        check
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics:\n{}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Every family's HELP is the README's meaning for it, word for word.
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let documented: BTreeMap<&str, &str> = readme
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            let meaning = *cells.get(3)?;
            (name.starts_with("toolsched_") || name.starts_with("process_"))
                .then_some((name, meaning))
        })
        .collect();
    let mut families = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# HELP ") else {
            continue;
        };
        let (name, help) = rest.split_once(' ').unwrap();
        families.push(name);
        assert_eq!(
            documented.get(name).copied(),
            Some(help),
            "README's Metrics table for {name}"
        );
    }
    // And the README lists nothing that is not served (the MCP families
    // are absent without MCP servers; a unit test covers them).
    families.sort();
    let listed: Vec<&str> = documented
        .keys()
        .copied()
        .filter(|name| !name.starts_with("toolsched_mcp_"))
        .collect();
    assert_eq!(families, listed);
}
