//! Scenario `instr`: instructions per RPC, toolsched beside the floor, each
//! server run under `valgrind --tool=callgrind`.
//!
//! Time on a shared 2-core machine moves by ±30% between runs of the same
//! binary (the host's other guests); an instruction count does not. Each
//! server serves S1's batch (one small `read_file`) for a warm-up, its
//! counters are zeroed (`callgrind_control --zero`), it serves exactly
//! `sessions × per_session` more RPCs, and its counters are dumped: the
//! figure is the dump's total over the RPCs, every thread of the server
//! included (runtime, log thread). The clients run outside valgrind.
//!
//! `TOOLSCHED_BENCH_KEEP=1` keeps the dumps, for `callgrind_annotate`.
//!
//! toolsched runs with `--sandbox-level none`: valgrind does not know the
//! Landlock system calls, and a read runs in the server at every level.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, bail};

use super::{
    Env, Row, Served, connections, read_small, record, run_batch, start, start_floor,
    toolsched_args,
};

/// Sessions served at once (over as many connections as S1 uses).
const SESSIONS: usize = 16;
const CONNECTIONS: usize = 4;

pub(super) async fn instructions(env: &Env) -> anyhow::Result<Vec<Row>> {
    let (warm, per_session) = if env.quick { (2, 8) } else { (8, 64) };
    let dir = tempfile::tempdir()?;
    let template = {
        let plain = super::start_toolsched(env, &["--sandbox-level", "none"])?;
        record(plain.addr, read_small("record")).await?
    };
    // valgrind does not know Landlock's system calls.
    let ts_args = toolsched_args(env, &["--sandbox-level", "none"]);
    let mut t = Vec::new();
    let mut f = Vec::new();
    for run in 0..env.runs {
        super::progress(&format!("[instr] run {}/{}: toolsched", run + 1, env.runs));
        let args: Vec<&str> = ts_args.iter().map(String::as_str).collect();
        let served = under_callgrind(&env.server, &args, dir.path(), &format!("ts{run}"))?;
        t.push(count(&served, dir.path(), &format!("ts{run}"), warm, per_session).await?);
        super::progress(&format!("[instr] run {}/{}: floor", run + 1, env.runs));
        let (floor, _file) = start_floor(env, &template, None)?;
        // The floor again, under valgrind (start_floor's arguments).
        let floor_args = floor_args(&floor)?;
        drop(floor);
        let args: Vec<&str> = floor_args.iter().map(String::as_str).collect();
        let served = under_callgrind(&env.me, &args, dir.path(), &format!("floor{run}"))?;
        f.push(
            count(
                &served,
                dir.path(),
                &format!("floor{run}"),
                warm,
                per_session,
            )
            .await?,
        );
    }
    if std::env::var_os("TOOLSCHED_BENCH_KEEP").is_some() {
        // For `callgrind_annotate --inclusive=yes <dir>/ts0.1`.
        super::progress(&format!("[instr] dumps kept in {}", dir.keep().display()));
    }
    let ratios: Vec<f64> = t.iter().zip(&f).map(|(t, f)| t / f).collect();
    Ok(vec![Row::paired(
        "instr",
        format!(
            "instructions per RPC (callgrind), 1 read_file per batch, {SESSIONS} sessions over {CONNECTIONS} connections, {} RPCs counted",
            SESSIONS * per_session
        ),
        t,
        f,
        ratios,
        "≤ 1.25× the floor's",
    )])
}

/// The arguments the floor child was started with.
fn floor_args(floor: &Served) -> anyhow::Result<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{}/cmdline", floor.child.id()))?;
    Ok(raw
        .split(|b| *b == 0)
        .skip(1)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect())
}

fn under_callgrind(
    program: &Path,
    args: &[&str],
    dir: &Path,
    name: &str,
) -> anyhow::Result<Served> {
    let out = format!("--callgrind-out-file={}", dir.join(name).display());
    let program = program.to_string_lossy();
    let mut all = vec!["--tool=callgrind", out.as_str(), program.as_ref()];
    all.extend_from_slice(args);
    start(Path::new("valgrind"), &all).context("valgrind (apt-get install valgrind)")
}

/// Warms `served` up, zeroes its counters, serves the counted RPCs, dumps:
/// the instructions per counted RPC.
async fn count(
    served: &Served,
    dir: &Path,
    name: &str,
    warm: usize,
    per_session: usize,
) -> anyhow::Result<f64> {
    serve(served, warm).await?;
    control(served, "--zero")?;
    let served_rpcs = serve(served, per_session).await?;
    control(served, "--dump")?;
    let dump = dump_file(dir, name)?;
    let text = std::fs::read_to_string(&dump)?;
    let total: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("totals: "))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no totals line in {}", dump.display()))?;
    Ok(total / served_rpcs as f64)
}

/// `per_session` batches from each of [`SESSIONS`] sessions; how many ran.
async fn serve(served: &Served, per_session: usize) -> anyhow::Result<usize> {
    let clients = connections(served.addr, CONNECTIONS).await?;
    let mut tasks = Vec::new();
    for s in 0..SESSIONS {
        let mut client = clients[s % CONNECTIONS].clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..per_session {
                let timing = run_batch(&mut client, read_small(&format!("instr-{s}"))).await?;
                if timing.events < 2 {
                    bail!("a batch ended after {} events", timing.events);
                }
            }
            anyhow::Ok(per_session)
        }));
    }
    let mut n = 0;
    for t in tasks {
        n += t.await??;
    }
    Ok(n)
}

fn control(served: &Served, what: &str) -> anyhow::Result<()> {
    let status = Command::new("callgrind_control")
        .args([what, &served.child.id().to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .context("callgrind_control")?;
    if !status.success() {
        bail!("callgrind_control {what} failed: {status}");
    }
    Ok(())
}

/// The dump callgrind wrote last for `name` (`<name>.<n>`), waiting for it
/// to appear: `callgrind_control` returns once the command is queued.
fn dump_file(dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut dumps: Vec<PathBuf> = std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{name}.")))
            })
            .collect();
        dumps.sort();
        if let Some(last) = dumps.pop()
            && std::fs::read_to_string(&last).is_ok_and(|t| t.contains("\ntotals: "))
        {
            return Ok(last);
        }
        if std::time::Instant::now() > deadline {
            bail!("callgrind wrote no dump for {name} within 60 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
