//! The benchmark's soak (`toolsched-bench --scenarios soak`) for a few
//! seconds: three real `toolsched` processes sharing one PostgreSQL
//! (tests/services.sh) and one workspace, clients sending each request to
//! a replica picked at random. Keeps the scenario building and working in
//! CI; no replica is killed here (that is the benchmark's three minutes,
//! see BENCHMARKS.md), so every check of the scenario must hold.

use crate::replicas_support;

/// The rows of the scenario's table: (metric, value, target).
fn rows(table: &str) -> Vec<(String, String, String)> {
    table
        .lines()
        .filter(|l| l.starts_with("| soak |"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").map(str::trim).collect();
            // | soak | metric | value | floor | ratio | target |
            (
                cells[1].to_string(),
                cells[2].to_string(),
                cells[5].trim_end_matches(" |").to_string(),
            )
        })
        .collect()
}

/// The median of a value cell, "112 (112–112)".
fn value(cell: &str) -> f64 {
    cell.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("not a value: {cell}"))
}

#[test]
fn the_soak_runs_over_three_replicas_and_every_check_holds() {
    let url = replicas_support::server_url();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolsched-bench"))
        .args([
            "--server",
            env!("CARGO_BIN_EXE_toolsched"),
            "--scenarios",
            "soak",
            "--store",
            &url,
            "--soak-secs",
            "3",
            "--sessions",
            "6",
            "--kill-every-secs",
            "0",
            "--soak-lease-secs",
            "2",
        ])
        .output()
        .expect("run toolsched-bench");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{table}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = rows(&table);
    let get = |prefix: &str| {
        rows.iter()
            .find(|(m, _, _)| m.starts_with(prefix))
            .unwrap_or_else(|| panic!("no row '{prefix}' in\n{table}"))
    };
    let accepted = value(&get("batches accepted").1);
    let completed = value(&get("batches completed").1);
    assert!(accepted >= 6.0, "{table}");
    assert_eq!(accepted, completed, "{table}");
    assert_eq!(value(&get("calls completed").1), 3.0 * completed);
    assert_eq!(value(&get("shell calls ended outcome_unknown").1), 0.0);
    assert_eq!(value(&get("completed batches replayed").1), completed);
    let checks: Vec<&(String, String, String)> = rows
        .iter()
        .filter(|(m, _, _)| m.starts_with("check: ") || m.starts_with("FAILED"))
        .collect();
    let names: Vec<&str> = checks.iter().map(|(m, _, _)| m.as_str()).collect();
    assert_eq!(
        names,
        [
            "check: batches accepted = batches completed",
            "check: every call one terminal state, the expected one; one batch per request; sequences without gaps",
            "check: no side effect twice",
            "check: every Success shell call's effect exactly once",
            "check: nothing left running",
            "check: a replay shows the final states its client saw live",
        ],
        "{table}"
    );
    assert!(
        checks.iter().all(|(_, _, target)| target == "holds"),
        "{table}"
    );
}
