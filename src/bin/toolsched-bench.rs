//! `toolsched-bench`: the load generator. It starts the release server
//! itself on a loopback port, drives it with real tonic clients over K
//! connections and C concurrent sessions, and prints every figure beside the
//! transport floor's: a minimal tonic server-streaming service (built into
//! this binary, run as its own process) that answers each request with the
//! same number and size of events toolsched sent for the measured batch, with
//! a spawned task and a channel per call as a real service would.
//!
//! Every figure is a ratio measured in one run (these machines are noisy);
//! nothing here asserts a time. Run it with:
//!
//! ```sh
//! cargo build --release && target/release/toolsched-bench
//! ```

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use prost::Message;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::Stream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};
use toolsched::api::convert::json_to_struct;
use toolsched::api::pb;
use toolsched::api::pb::tool_scheduler_client::ToolSchedulerClient;

#[path = "toolsched-bench/instr.rs"]
mod instr;
#[path = "toolsched-bench/soak.rs"]
mod soak;

#[derive(Parser)]
#[command(
    name = "toolsched-bench",
    about = "Load generator for toolsched, beside the transport floor"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    /// Scenarios to run, comma-separated (s1,s2,s3,s4,s5,s6, and `sweep`:
    /// the curves over concurrency, batch size and idle sessions; `idle`:
    /// the sweep's idle sessions alone; `store` and `soak` need --store;
    /// `instr`: instructions per RPC under callgrind, needs valgrind).
    #[arg(long, default_value = "s1,s2,s3,s4,s5,s6")]
    scenarios: String,
    /// Runs per figure; the table shows the median with min and max.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Smaller counts everywhere (a smoke test of the suite).
    #[arg(long)]
    quick: bool,
    /// The toolsched binary [default: `toolsched` beside this one].
    #[arg(long)]
    server: Option<PathBuf>,
    /// A PostgreSQL URL: scenario `store` runs S1 and S2 with
    /// `--store <URL>` beside `--store memory` (tests/services.sh writes
    /// one to .services/postgres.url).
    #[arg(long, env = "TOOLSCHED_BENCH_STORE", hide_env_values = true)]
    store: Option<String>,
    /// Scenario `soak`: seconds the clients send new batches.
    #[arg(long, default_value_t = 180)]
    soak_secs: u64,
    /// Scenario `soak`: concurrent sessions (one client loop each).
    #[arg(long, default_value_t = 64)]
    sessions: usize,
    /// Scenario `soak`: a replica is killed (SIGKILL) and restarted on its
    /// port this often, in turn (0: never).
    #[arg(long, default_value_t = 30)]
    kill_every_secs: u64,
    /// Scenario `soak`: the replicas' --store-lease-secs (how soon a
    /// killed replica's sessions can be taken over).
    #[arg(long, default_value_t = 5)]
    soak_lease_secs: u64,
    /// Scenario S6: sequential calls per figure (more for a steadier
    /// figure, or to profile; `--quick` uses 20).
    #[arg(long, default_value_t = 100)]
    s6_calls: usize,
}

#[derive(Subcommand)]
enum Cmd {
    /// (internal) Serve the transport floor: replay the events in FILE.
    Floor {
        #[arg(long)]
        template: PathBuf,
        /// Index of the event after which each stream waits for Confirm.
        #[arg(long)]
        pause_after: Option<usize>,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Some(Cmd::Floor {
            template,
            pause_after,
        }) => rt.block_on(floor::serve(&template, pause_after)),
        None => rt.block_on(suite(cli)),
    }
}

// === the suite ===

/// One line of the result table.
struct Row {
    scenario: &'static str,
    metric: String,
    toolsched: Stat,
    floor: Option<Stat>,
    /// How to read the ratio, and the target.
    target: String,
    ratio: Option<f64>,
}

impl Row {
    /// A figure measured beside its floor in each run: the medians, and
    /// the median of the runs' own ratios.
    fn paired(
        scenario: &'static str,
        metric: String,
        toolsched: Vec<f64>,
        floor: Vec<f64>,
        ratios: Vec<f64>,
        target: &str,
    ) -> Row {
        Row {
            scenario,
            metric,
            toolsched: Stat::of(toolsched),
            floor: Some(Stat::of(floor)),
            ratio: Some(Stat::of(ratios).median),
            target: target.into(),
        }
    }
}

/// Median, min and max of a figure over runs.
#[derive(Clone, Copy)]
struct Stat {
    median: f64,
    min: f64,
    max: f64,
}

impl Stat {
    fn of(mut xs: Vec<f64>) -> Stat {
        xs.sort_by(f64::total_cmp);
        Stat {
            median: xs[xs.len() / 2],
            min: xs[0],
            max: xs[xs.len() - 1],
        }
    }
}

fn fmt_stat(s: &Stat) -> String {
    format!("{} ({}–{})", num(s.median), num(s.min), num(s.max))
}

fn num(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.4}")
    }
}

fn progress(msg: &str) {
    eprint!("\r\x1b[2K{msg}");
    let _ = std::io::stderr().flush();
}

async fn suite(cli: Cli) -> anyhow::Result<()> {
    let me = std::env::current_exe()?;
    let server = cli
        .server
        .clone()
        .unwrap_or_else(|| me.with_file_name("toolsched"));
    if !server.exists() {
        bail!(
            "{} not found: build it first with `cargo build --release`",
            server.display()
        );
    }
    let ws = tempfile::tempdir()?;
    std::fs::write(ws.path().join("small.txt"), "a small file\nof two lines\n")?;
    let big: String = (0..40_000)
        .map(|i| format!("line {i} of a larger file to read\n"))
        .collect();
    std::fs::write(ws.path().join("big.txt"), big)?;

    let scenarios: Vec<String> = cli
        .scenarios
        .split(',')
        .map(|s| s.trim().to_lowercase())
        .collect();
    let mut rows = Vec::new();
    let env = Env {
        server,
        me,
        ws: ws.path().to_path_buf(),
        runs: cli.runs.max(1),
        quick: cli.quick,
        store: cli.store.clone(),
        s6_calls: cli.s6_calls.max(1),
        soak: soak::SoakOptions {
            secs: cli.soak_secs,
            sessions: cli.sessions,
            kill_every_secs: cli.kill_every_secs,
            lease_secs: cli.soak_lease_secs.max(1),
        },
    };
    type Scenario = for<'a> fn(
        &'a Env,
    ) -> Pin<
        Box<dyn std::future::Future<Output = anyhow::Result<Vec<Row>>> + 'a>,
    >;
    let all: [(&str, &'static str, Scenario); 11] = [
        ("s1", "S1", |e| Box::pin(s1_throughput(e))),
        ("s2", "S2", |e| Box::pin(s2_latency(e))),
        ("s3", "S3", |e| Box::pin(s3_waves(e))),
        ("s4", "S4", |e| Box::pin(s4_scale(e))),
        ("s5", "S5", |e| Box::pin(s5_search(e))),
        ("s6", "S6", |e| Box::pin(s6_shell(e))),
        ("store", "store", |e| Box::pin(store_beside_memory(e))),
        ("sweep", "sweep", |e| Box::pin(sweep(e))),
        ("idle", "sweep", |e| Box::pin(idle_sessions(e))),
        ("soak", "soak", |e| Box::pin(soak::soak(e, e.soak))),
        ("instr", "instr", |e| Box::pin(instr::instructions(e))),
    ];
    for (key, name, run) in all {
        if !scenarios.iter().any(|s| s == key) {
            continue;
        }
        // A failed scenario is a row of the table, not the end of the suite.
        match run(&env).await {
            Ok(r) => rows.extend(r),
            Err(e) => rows.push(Row {
                scenario: name,
                metric: format!("FAILED: {e:#}"),
                toolsched: Stat::of(vec![0.0]),
                floor: None,
                ratio: None,
                target: String::new(),
            }),
        }
    }
    progress("");
    eprintln!();
    print_table(&rows);
    println!(
        "\nratio: toolsched ÷ floor unless the row says otherwise. Targets: issue 17's (BENCHMARKS.md, \"Issue 17: where each target stands\"){}",
        if env.quick {
            "; --quick uses smaller inputs, so its figures do not show whether a target is met"
        } else {
            ""
        }
    );
    let failed = rows
        .iter()
        .filter(|r| r.metric.starts_with("FAILED"))
        .count();
    if failed > 0 {
        bail!("{failed} rows FAILED");
    }
    Ok(())
}

fn print_table(rows: &[Row]) {
    println!(
        "| scenario | metric | toolsched median (min–max) | floor median (min–max) | ratio | target |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            r.scenario,
            r.metric,
            fmt_stat(&r.toolsched),
            r.floor.as_ref().map_or("–".into(), fmt_stat),
            r.ratio.map_or("–".into(), num),
            r.target
        );
    }
}

struct Env {
    server: PathBuf,
    me: PathBuf,
    ws: PathBuf,
    runs: usize,
    quick: bool,
    store: Option<String>,
    s6_calls: usize,
    soak: soak::SoakOptions,
}

/// A child process serving on a loopback port.
struct Served {
    child: Child,
    addr: SocketAddr,
}

/// How long a served process has to stop on SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How often a stopping process is looked at (std's `Child` has no wait
/// with a timeout).
const STOP_POLL: Duration = Duration::from_millis(10);

impl Drop for Served {
    /// SIGTERM first, so that a toolsched server removes its temporary
    /// directories (its sandbox's anchor and kept outputs under `/tmp`) as
    /// it does when an operator stops it; SIGKILL if it has not exited
    /// within [`STOP_GRACE`].
    fn drop(&mut self) {
        if !stopped_by_sigterm(&mut self.child) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sends `child` SIGTERM and waits up to [`STOP_GRACE`] for it to exit.
fn stopped_by_sigterm(child: &mut Child) -> bool {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let Ok(pid) = i32::try_from(child.id()) else {
        return false;
    };
    if kill(Pid::from_raw(pid), Signal::SIGTERM).is_err() {
        return false;
    }
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) => std::thread::sleep(STOP_POLL),
            Err(_) => return false,
        }
    }
    false
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Starts `program args…`, which must log a JSON line with
/// `fields.message == "toolsched serving"` or print `floor serving ADDR`.
fn start(program: &Path, args: &[&str]) -> anyhow::Result<Served> {
    start_logged(program, args, None)
}

/// [`start`], every line the child prints also appended to `log`.
fn start_logged(program: &Path, args: &[&str], log: Option<&Path>) -> anyhow::Result<Served> {
    let log = match log {
        Some(path) => Some(Arc::new(Mutex::new(
            std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?,
        ))),
        None => None,
    };
    let mut child = Command::new(program)
        .args(args)
        .env("RUST_LOG", "warn,toolsched=info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("start {}", program.display()))?;
    let stderr = child.stderr.take().context("stderr")?;
    let stdout = child.stdout.take().context("stdout")?;
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    for reader in [
        Box::new(stderr) as Box<dyn std::io::Read + Send>,
        Box::new(stdout),
    ] {
        let tx = tx.clone();
        let log = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(reader)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(file) = &log
                    && let Ok(mut f) = file.lock()
                {
                    let _ = writeln!(f, "{line}");
                }
                let _ = tx.send(line);
            }
        });
    }
    let addr = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .context("server did not report its address within 60 s")?;
        if let Some(a) = line.strip_prefix("floor serving ") {
            break a.trim().parse()?;
        }
        if let Ok(v) = serde_json::from_str::<Value>(&line)
            && v["message"] == "toolsched serving"
        {
            break v["listen"].as_str().context("listen")?.parse()?;
        }
    };
    Ok(Served { child, addr })
}

fn start_toolsched(env: &Env, extra: &[&str]) -> anyhow::Result<Served> {
    let args = toolsched_args(env, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    start(&env.server, &args)
}

/// The server's arguments in every scenario, then `extra`.
fn toolsched_args(env: &Env, extra: &[&str]) -> Vec<String> {
    let ws = env.ws.to_string_lossy();
    [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
        "--workspace",
        &ws,
        "--max-sessions",
        "1000000",
        "--max-concurrent-streams",
        "100000",
    ]
    .iter()
    .chain(extra)
    .map(|a| a.to_string())
    .collect()
}

fn start_floor(
    env: &Env,
    template: &[pb::ScheduleCallsResponse],
    pause_after: Option<usize>,
) -> anyhow::Result<(Served, tempfile::NamedTempFile)> {
    let mut file = tempfile::NamedTempFile::new()?;
    for ev in template {
        file.write_all(&ev.encode_length_delimited_to_vec())?;
    }
    file.flush()?;
    let path = file.path().to_string_lossy().to_string();
    let pause = pause_after.map(|p| p.to_string());
    let mut args = vec!["floor", "--template", path.as_str()];
    if let Some(p) = &pause {
        args.extend(["--pause-after", p.as_str()]);
    }
    Ok((start(&env.me, &args)?, file))
}

async fn connections(
    addr: SocketAddr,
    k: usize,
) -> anyhow::Result<Vec<ToolSchedulerClient<Channel>>> {
    let mut out = Vec::with_capacity(k);
    for _ in 0..k {
        // Default windows, as a frontend would have. (With
        // http2_adaptive_window the window starts at 64 KiB and h2 >= 0.4.20
        // answers a burst of small buffered events with GOAWAY
        // ENHANCE_YOUR_CALM "too_many_data_frames"; see BENCHMARKS.md.)
        let ch = Endpoint::from_shared(format!("http://{addr}"))?
            .tcp_nodelay(true)
            .connect()
            .await?;
        out.push(ToolSchedulerClient::new(ch).max_decoding_message_size(64 * 1024 * 1024));
    }
    Ok(out)
}

fn fcall(id: &str, name: &str, args: Value, wait: bool) -> pb::FunctionCall {
    let Value::Object(map) = args else {
        unreachable!("object literal")
    };
    pb::FunctionCall {
        id: id.into(),
        name: name.into(),
        args: Some(json_to_struct(&map)),
        wait_for_previous: wait,
        client_initiated: false,
    }
}

fn batch(session: &str, calls: Vec<pb::FunctionCall>) -> pb::ScheduleCallsRequest {
    pb::ScheduleCallsRequest {
        session_id: session.into(),
        calls,
        approval_mode: 0,
        interactive: Some(false),
        sandbox_level: 0,
        ..Default::default()
    }
}

/// Timing of one batch.
struct BatchTiming {
    first_event: Duration,
    end: Duration,
    events: usize,
}

async fn run_batch(
    client: &mut ToolSchedulerClient<Channel>,
    req: pb::ScheduleCallsRequest,
) -> anyhow::Result<BatchTiming> {
    let t0 = Instant::now();
    let mut stream = client.schedule_calls(req).await?.into_inner();
    let mut first = None;
    let mut events = 0;
    while let Some(_ev) = stream.message().await? {
        events += 1;
        first.get_or_insert_with(|| t0.elapsed());
    }
    Ok(BatchTiming {
        first_event: first.unwrap_or_default(),
        end: t0.elapsed(),
        events,
    })
}

/// Records what toolsched sends for `req`, to replay from the floor.
async fn record(
    addr: SocketAddr,
    req: pb::ScheduleCallsRequest,
) -> anyhow::Result<Vec<pb::ScheduleCallsResponse>> {
    let mut client = connections(addr, 1).await?.remove(0);
    let mut stream = client.schedule_calls(req).await?.into_inner();
    let mut out = Vec::new();
    while let Some(ev) = stream.message().await? {
        out.push(ev);
    }
    Ok(out)
}

/// Load: `c` sessions over `k` connections for `duration`; each session
/// sends its next batch when the previous stream has ended.
struct Load {
    calls_per_s: f64,
    events_per_s: f64,
    first: Vec<Duration>,
    end: Vec<Duration>,
}

async fn load(
    addr: SocketAddr,
    k: usize,
    c: usize,
    duration: Duration,
    make: Arc<dyn Fn(usize) -> pb::ScheduleCallsRequest + Send + Sync>,
    calls_per_batch: usize,
) -> anyhow::Result<Load> {
    let clients = connections(addr, k).await?;
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for s in 0..c {
        let mut client = clients[s % k].clone();
        let make = make.clone();
        tasks.push(tokio::spawn(async move {
            let mut timings = Vec::new();
            while Instant::now() < deadline {
                timings.push(run_batch(&mut client, make(s)).await?);
            }
            anyhow::Ok(timings)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let events: usize = all.iter().map(|t| t.events).sum();
    Ok(Load {
        calls_per_s: (all.len() * calls_per_batch) as f64 / elapsed,
        events_per_s: events as f64 / elapsed,
        first: all.iter().map(|t| t.first_event).collect(),
        end: all.iter().map(|t| t.end).collect(),
    })
}

fn percentile(xs: &[Duration], p: f64) -> f64 {
    let mut v: Vec<f64> = xs.iter().map(|d| d.as_secs_f64() * 1e6).collect();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn read_small(session: &str) -> pb::ScheduleCallsRequest {
    batch(
        session,
        vec![fcall(
            "r",
            "read_file",
            json!({"file_path": "small.txt"}),
            false,
        )],
    )
}

// === S1: throughput ===

async fn s1_throughput(env: &Env) -> anyhow::Result<Vec<Row>> {
    let (k, c) = (8, 64);
    let secs = if env.quick { 1 } else { 4 };
    let ts = start_toolsched(env, &[])?;
    let template = record(ts.addr, read_small("record")).await?;
    let (floor, _file) = start_floor(env, &template, None)?;
    let make: Arc<dyn Fn(usize) -> pb::ScheduleCallsRequest + Send + Sync> =
        Arc::new(|s| read_small(&format!("s1-{s}")));
    let mut t_rps = Vec::new();
    let mut f_rps = Vec::new();
    let mut t_eps = Vec::new();
    let mut f_eps = Vec::new();
    let mut ratios = Vec::new();
    for run in 0..env.runs {
        progress(&format!(
            "[S1] throughput run {}/{}: toolsched",
            run + 1,
            env.runs
        ));
        let t = load(ts.addr, k, c, Duration::from_secs(secs), make.clone(), 1).await?;
        progress(&format!(
            "[S1] throughput run {}/{}: floor",
            run + 1,
            env.runs
        ));
        let f = load(floor.addr, k, c, Duration::from_secs(secs), make.clone(), 1).await?;
        ratios.push(t.calls_per_s / f.calls_per_s);
        t_rps.push(t.calls_per_s);
        f_rps.push(f.calls_per_s);
        t_eps.push(t.events_per_s);
        f_eps.push(f.events_per_s);
    }
    Ok(vec![
        Row::paired(
            "S1",
            format!(
                "RPC/s, 1 read_file per batch, C={c} sessions over K={k} connections ({} events per RPC)",
                template.len()
            ),
            t_rps,
            f_rps,
            ratios,
            "≥ 0.8 of floor (issue 17 item 1)",
        ),
        Row {
            scenario: "S1",
            metric: "events/s".into(),
            toolsched: Stat::of(t_eps),
            floor: Some(Stat::of(f_eps)),
            ratio: None,
            target: String::new(),
        },
    ])
}

// === store: S1 and S2 with --store postgres beside --store memory ===

/// A write in yolo mode: a side-effecting call (recorded Executing in a
/// durable store before it starts).
fn write_small(session: &str) -> pb::ScheduleCallsRequest {
    let mut request = batch(
        session,
        vec![fcall(
            "w",
            "write_file",
            json!({"file_path": format!("w-{session}.txt"), "content": "written\n"}),
            false,
        )],
    );
    request.approval_mode = pb::ApprovalMode::Yolo as i32;
    request
}

async fn store_beside_memory(env: &Env) -> anyhow::Result<Vec<Row>> {
    let Some(url) = env.store.as_deref() else {
        bail!("scenario 'store' needs --store postgres://… (see tests/services.sh)");
    };
    let (k, c) = (8, 64);
    let secs = if env.quick { 1 } else { 4 };
    // A fresh database per run: the servers of an earlier run were killed
    // (SIGKILL) holding the leases of the same session names, so reusing
    // its tables would measure takeovers (a lease's wait, resumed batches).
    let name = format!("bench_{}", uuid::Uuid::new_v4().simple());
    let url = &soak::fresh_database(url, &name).await?;
    let memory = start_toolsched(env, &[])?;
    let durable = start_toolsched(env, &["--store", url])?;
    let reads: Arc<dyn Fn(usize) -> pb::ScheduleCallsRequest + Send + Sync> =
        Arc::new(|s| read_small(&format!("st-{s}")));
    let writes: Arc<dyn Fn(usize) -> pb::ScheduleCallsRequest + Send + Sync> =
        Arc::new(|s| write_small(&format!("sw-{s}")));
    let one_read: Arc<dyn Fn(usize) -> pb::ScheduleCallsRequest + Send + Sync> =
        Arc::new(|_| read_small("st-one"));
    let one_write: Arc<dyn Fn(usize) -> pb::ScheduleCallsRequest + Send + Sync> =
        Arc::new(|_| write_small("sw-one"));
    // (metric, memory runs, postgres runs)
    let mut figures: Vec<(String, Vec<f64>, Vec<f64>)> = vec![
        (
            format!("S1 RPC/s, 1 read_file per batch, C={c} over K={k}"),
            vec![],
            vec![],
        ),
        (
            format!("S1 RPC/s, 1 write_file (yolo) per batch, C={c} over K={k}"),
            vec![],
            vec![],
        ),
        (
            "S2 read_file end of stream p50 (µs), C=1".into(),
            vec![],
            vec![],
        ),
        (
            "S2 write_file end of stream p50 (µs), C=1".into(),
            vec![],
            vec![],
        ),
        (
            "S2 write_file end of stream p99 (µs), C=1".into(),
            vec![],
            vec![],
        ),
    ];
    for run in 0..env.runs {
        // Interleaved: memory then postgres, each figure, each run.
        for (i, server) in [&memory, &durable].into_iter().enumerate() {
            let name = if i == 0 { "memory" } else { "postgres" };
            progress(&format!("[store] run {}/{}: {name}", run + 1, env.runs));
            let push = |figures: &mut Vec<(String, Vec<f64>, Vec<f64>)>, at: usize, x: f64| {
                if i == 0 {
                    figures[at].1.push(x)
                } else {
                    figures[at].2.push(x)
                }
            };
            let r = load(
                server.addr,
                k,
                c,
                Duration::from_secs(secs),
                reads.clone(),
                1,
            )
            .await?;
            push(&mut figures, 0, r.calls_per_s);
            let w = load(
                server.addr,
                k,
                c,
                Duration::from_secs(secs),
                writes.clone(),
                1,
            )
            .await?;
            push(&mut figures, 1, w.calls_per_s);
            let r1 = load(
                server.addr,
                1,
                1,
                Duration::from_secs(secs),
                one_read.clone(),
                1,
            )
            .await?;
            push(&mut figures, 2, percentile(&r1.end, 0.5));
            let w1 = load(
                server.addr,
                1,
                1,
                Duration::from_secs(secs),
                one_write.clone(),
                1,
            )
            .await?;
            push(&mut figures, 3, percentile(&w1.end, 0.5));
            push(&mut figures, 4, percentile(&w1.end, 0.99));
        }
    }
    drop(durable);
    soak::drop_database(env.store.as_deref().unwrap_or_default(), &name).await;
    Ok(figures
        .into_iter()
        .enumerate()
        .map(|(i, (metric, m, p))| {
            let (ms, ps) = (Stat::of(m), Stat::of(p));
            let throughput = i < 2;
            Row {
                scenario: "store",
                metric: format!(
                    "{metric}; toolsched column --store postgres, floor column --store memory"
                ),
                toolsched: ps,
                floor: Some(ms),
                ratio: throughput.then(|| ps.median / ms.median),
                target: if i == 0 {
                    "≥ 0.5 of memory".into()
                } else if throughput {
                    String::new()
                } else {
                    format!("postgres − memory = {:.0} µs", ps.median - ms.median)
                },
            }
        })
        .collect())
}

// === S2: latency ===

async fn s2_latency(env: &Env) -> anyhow::Result<Vec<Row>> {
    let secs = if env.quick { 1 } else { 3 };
    let ts = start_toolsched(env, &[])?;
    let template = record(ts.addr, read_small("record")).await?;
    let (floor, _file) = start_floor(env, &template, None)?;
    let make: Arc<dyn Fn(usize) -> pb::ScheduleCallsRequest + Send + Sync> =
        Arc::new(|_| read_small("s2"));
    let mut rows: Vec<(String, Vec<f64>, Vec<f64>)> = vec![
        ("first event p50 (µs)".into(), vec![], vec![]),
        ("first event p99 (µs)".into(), vec![], vec![]),
        ("end of stream p50 (µs)".into(), vec![], vec![]),
        ("end of stream p99 (µs)".into(), vec![], vec![]),
    ];
    for run in 0..env.runs {
        progress(&format!("[S2] latency run {}/{}", run + 1, env.runs));
        let t = load(ts.addr, 1, 1, Duration::from_secs(secs), make.clone(), 1).await?;
        let f = load(floor.addr, 1, 1, Duration::from_secs(secs), make.clone(), 1).await?;
        for (i, (xs_t, xs_f)) in [(&t.first, &f.first), (&t.end, &f.end)]
            .into_iter()
            .enumerate()
        {
            rows[i * 2].1.push(percentile(xs_t, 0.5));
            rows[i * 2].2.push(percentile(xs_f, 0.5));
            rows[i * 2 + 1].1.push(percentile(xs_t, 0.99));
            rows[i * 2 + 1].2.push(percentile(xs_f, 0.99));
        }
    }
    Ok(rows
        .into_iter()
        .enumerate()
        .map(|(i, (metric, t, f))| {
            let (ts, fs) = (Stat::of(t), Stat::of(f));
            Row {
                scenario: "S2",
                metric: format!("{metric}, C=1"),
                toolsched: ts,
                floor: Some(fs),
                ratio: None,
                target: match i {
                    0 => format!(
                        "≤ floor + 50 µs (item 2; now floor + {:.0} µs)",
                        ts.median - fs.median
                    ),
                    1 => format!(
                        "≤ floor + 100 µs (item 2; now floor + {:.0} µs)",
                        ts.median - fs.median
                    ),
                    _ => format!("toolsched − floor = {:.0} µs", ts.median - fs.median),
                },
            }
        })
        .collect())
}

// === S3: waves ===

/// Wall time of `make(false)` (one parallel wave) and `make(true)` (each
/// call waits for the previous), median of `reps` each per run.
async fn wave_ratio(
    env: &Env,
    addr: SocketAddr,
    label: &str,
    reps: usize,
    make: &dyn Fn(bool) -> pb::ScheduleCallsRequest,
) -> anyhow::Result<(Stat, Stat, f64)> {
    let mut client = connections(addr, 1).await?.remove(0);
    let mut par = Vec::new();
    let mut ser = Vec::new();
    let mut ratios = Vec::new();
    for run in 0..env.runs {
        progress(&format!("[S3] {label} run {}/{}", run + 1, env.runs));
        let mut p = Vec::new();
        let mut s = Vec::new();
        for _ in 0..reps {
            p.push(run_batch(&mut client, make(false)).await?.end.as_secs_f64() * 1e3);
            s.push(run_batch(&mut client, make(true)).await?.end.as_secs_f64() * 1e3);
        }
        let (p, s) = (Stat::of(p).median, Stat::of(s).median);
        par.push(p);
        ser.push(s);
        ratios.push(s / p);
    }
    Ok((Stat::of(par), Stat::of(ser), Stat::of(ratios).median))
}

async fn s3_waves(env: &Env) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let reps = if env.quick { 2 } else { 5 };
    // (a) CPU-bound read tools: read_file of the last lines of 8 files of
    // ~24 MiB each, so each call decodes and counts a whole file (from the
    // page cache) on one thread. Not grep_search: it walks and searches on
    // every core by itself, so even its serial runs use both cores.
    let line = "alpha beta gamma delta epsilon zeta eta theta\n";
    let lines = if env.quick { 50_000 } else { 530_000 };
    let dir = env.ws.join("s3");
    std::fs::create_dir_all(&dir)?;
    let text = line.repeat(lines);
    for i in 0..8 {
        std::fs::write(dir.join(format!("big{i}.txt")), &text)?;
    }
    drop(text);
    let ts = start_toolsched(env, &[])?;
    let read = |wait: bool| {
        batch(
            "s3a",
            (0..8)
                .map(|i| {
                    fcall(
                        &format!("r{i}"),
                        "read_file",
                        json!({"file_path": format!("s3/big{i}.txt"), "start_line": lines - 9}),
                        wait && i > 0,
                    )
                })
                .collect(),
        )
    };
    let (par, ser, ratio) = wave_ratio(env, ts.addr, "read_file", reps, &read).await?;
    rows.push(Row {
        scenario: "S3",
        metric: format!("wall ms: 8 read_file of the last lines of a {} MiB file each (CPU-bound: decode and count every line) in one wave vs with wait_for_previous ('floor' column = serial)", (line.len() * lines) >> 20),
        toolsched: par,
        floor: Some(ser),
        ratio: Some(ratio),
        target: "serial ÷ parallel ≥ 1.8 on 2 cores".into(),
    });
    drop(ts);
    // (b) Calls that wait: a read-only MCP tool that sleeps 200 ms.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join(".venv/bin/python");
    let server = root.join("tests/mcp/py_server.py");
    if !python.exists() {
        eprintln!(
            "\n[S3] waiting calls skipped: {} missing (run `bash tests/setup.sh`)",
            python.display()
        );
        return Ok(rows);
    }
    let config = env.ws.join("s3-mcp.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.py]\ncommand = {:?}\nargs = [{:?}]\ntrust = true\n",
            python.display().to_string(),
            server.display().to_string()
        ),
    )?;
    let config = config.to_string_lossy().to_string();
    let ts = start_toolsched(env, &["--config", &config])?;
    let wait = |w: bool| {
        batch(
            "s3b",
            (0..8)
                .map(|i| {
                    fcall(
                        &format!("w{i}"),
                        "mcp_py_wait",
                        json!({"seconds": 0.2}),
                        w && i > 0,
                    )
                })
                .collect(),
        )
    };
    let (par, ser, ratio) = wave_ratio(
        env,
        ts.addr,
        "waiting MCP calls",
        if env.quick { 1 } else { 2 },
        &wait,
    )
    .await?;
    rows.push(Row {
        scenario: "S3",
        metric: "wall ms: 8 read-only MCP calls that each wait 200 ms, one wave vs with wait_for_previous".into(),
        toolsched: par,
        floor: Some(ser),
        ratio: Some(ratio),
        target: "serial ÷ parallel ≥ 6".into(),
    });
    Ok(rows)
}

// === S4: scale ===

async fn s4_scale(env: &Env) -> anyhow::Result<Vec<Row>> {
    let n: usize = if env.quick { 1000 } else { 10_000 };
    let k = 100;
    let write = |s: usize| pb::ScheduleCallsRequest {
        interactive: Some(true),
        ..batch(
            &format!("s4-{s}"),
            vec![fcall(
                "w",
                "write_file",
                json!({"file_path": format!("s4/{s}.txt"), "content": "x"}),
                false,
            )],
        )
    };
    // toolsched: hold n prompts open.
    let ts = start_toolsched(env, &["--confirmation-timeout-secs", "0"])?;
    // What toolsched sends after the prompt once confirmed (recorded in
    // yolo mode: Scheduled, Executing, Success, Completed).
    let template = {
        let yolo = start_toolsched(env, &["--approval-mode", "yolo"])?;
        record(yolo.addr, write(0)).await?
    };
    let (t_rss, t_done) = hold_and_confirm(ts.addr, ts.child.id(), n, k, &write, true).await?;
    drop(ts);
    // The floor: the same events up to the prompt, then wait for Confirm.
    let awaiting: Vec<pb::ScheduleCallsResponse> = {
        let ts = start_toolsched(env, &["--confirmation-timeout-secs", "0"])?;
        let mut client = connections(ts.addr, 1).await?.remove(0);
        let mut stream = client.schedule_calls(write(0)).await?.into_inner();
        let mut out = Vec::new();
        while let Some(ev) = stream.message().await? {
            let prompt = matches!(&ev.event, Some(pb::schedule_calls_response::Event::CallUpdate(u)) if matches!(u.state, Some(pb::tool_call_update::State::AwaitingApproval(_))));
            out.push(ev);
            if prompt {
                break;
            }
        }
        out
    };
    let pause_at = awaiting.len() - 1;
    // Events up to the prompt, then the rest of a completed write.
    let mut full = awaiting.clone();
    full.extend(
        template
            .iter()
            .skip_while(|e| !matches!(&e.event, Some(pb::schedule_calls_response::Event::CallUpdate(u)) if matches!(u.state, Some(pb::tool_call_update::State::Scheduled(_)))))
            .cloned(),
    );
    let (floor, _file) = start_floor(env, &full, Some(pause_at))?;
    let (f_rss, f_done) =
        hold_and_confirm(floor.addr, floor.child.id(), n, k, &write, false).await?;
    Ok(vec![
        Row {
            scenario: "S4",
            metric: format!(
                "server RSS per held stream (KiB), {n} sessions each awaiting approval over {k} connections"
            ),
            toolsched: Stat::of(vec![t_rss]),
            floor: Some(Stat::of(vec![f_rss])),
            ratio: Some(t_rss / f_rss),
            target: "≤ 1.2× floor (item 4)".into(),
        },
        Row {
            scenario: "S4",
            metric: format!("seconds from confirming all {n} until every stream completed"),
            toolsched: Stat::of(vec![t_done]),
            floor: Some(Stat::of(vec![f_done])),
            ratio: Some(t_done / f_done),
            target: "no stream lost".into(),
        },
    ])
}

/// Opens `n` streams that each stop at a prompt, measures the server's RSS
/// growth per stream, confirms all and times until every stream completed.
async fn hold_and_confirm(
    addr: SocketAddr,
    pid: u32,
    n: usize,
    k: usize,
    make: &dyn Fn(usize) -> pb::ScheduleCallsRequest,
    check_done: bool,
) -> anyhow::Result<(f64, f64)> {
    let clients = connections(addr, k).await?;
    let before = rss_kib(pid);
    let (prompt_tx, mut prompt_rx) = mpsc::unbounded_channel::<(usize, String)>();
    let mut tasks = Vec::with_capacity(n);
    for s in 0..n {
        if s % 500 == 0 {
            progress(&format!("[S4] opening streams {s}/{n}"));
        }
        let mut client = clients[s % k].clone();
        let req = make(s);
        let tx = prompt_tx.clone();
        tasks.push(tokio::spawn(async move {
            let mut stream = client.schedule_calls(req).await?.into_inner();
            let mut completed = false;
            while let Some(ev) = stream.message().await? {
                match ev.event {
                    Some(pb::schedule_calls_response::Event::CallUpdate(pb::ToolCallUpdate {
                        state: Some(pb::tool_call_update::State::AwaitingApproval(a)),
                        ..
                    })) => {
                        let _ = tx.send((s, a.correlation_id));
                    }
                    Some(pb::schedule_calls_response::Event::BatchCompleted(_)) => completed = true,
                    _ => {}
                }
            }
            anyhow::Ok(completed)
        }));
    }
    drop(prompt_tx);
    let mut prompts = Vec::with_capacity(n);
    while prompts.len() < n {
        let p = prompt_rx
            .recv()
            .await
            .context("a stream ended before its prompt")?;
        prompts.push(p);
        if prompts.len() % 500 == 0 {
            progress(&format!("[S4] prompts open {}/{n}", prompts.len()));
        }
    }
    let after = rss_kib(pid);
    let per = (after.saturating_sub(before)) as f64 / n as f64;
    let t0 = Instant::now();
    let mut confirms = Vec::with_capacity(n);
    for (s, corr) in prompts {
        let mut client = clients[s % k].clone();
        confirms.push(tokio::spawn(async move {
            client
                .confirm(pb::ConfirmRequest {
                    session_id: format!("s4-{s}"),
                    call_id: "w".into(),
                    correlation_id: corr,
                    outcome: pb::ConfirmationOutcome::ProceedOnce as i32,
                    new_content: None,
                })
                .await
        }));
    }
    for c in confirms {
        c.await??;
    }
    let mut lost = 0;
    for t in tasks {
        if !t.await?? {
            lost += 1;
        }
    }
    let done = t0.elapsed().as_secs_f64();
    if check_done && lost > 0 {
        bail!("{lost} streams ended without BatchCompleted");
    }
    Ok((per, done))
}

// === S5: search ===

/// A repository-like tree: `dirs` × `per_dir` files of ~10.5 KiB, a
/// `.gitignore`d directory, and `NEEDLE_<n>` planted in every 1000th file
/// (and in every ignored file, which must not be found).
fn make_repo(root: &Path, dirs: usize, per_dir: usize) -> anyhow::Result<usize> {
    std::fs::create_dir_all(root)?;
    let status = Command::new("git")
        .args(["init", "-q"])
        .current_dir(root)
        .status()?;
    if !status.success() {
        bail!("git init failed in {}", root.display());
    }
    std::fs::write(root.join(".gitignore"), "ignored/\n*.log\n")?;
    let filler: String = (0..150)
        .map(|i| format!("let value_{i} = compute({i}, \"text\");\n"))
        .collect();
    let mut planted = 0;
    for d in 0..dirs {
        let dir = root.join(format!("src{d:03}"));
        std::fs::create_dir_all(&dir)?;
        for f in 0..per_dir {
            let n = d * per_dir + f;
            let mut text = filler.clone();
            if n.is_multiple_of(1000) {
                text.push_str(&format!("// NEEDLE_{n}\n"));
                planted += 1;
            }
            std::fs::write(dir.join(format!("m{f:03}.rs")), text)?;
        }
    }
    let ignored = root.join("ignored");
    std::fs::create_dir_all(&ignored)?;
    for f in 0..200 {
        std::fs::write(
            ignored.join(format!("i{f}.rs")),
            format!("{filler}// NEEDLE_ignored_{f}\n"),
        )?;
    }
    // Measure the tree, not its first seconds: the sandbox reads again
    // every directory changed less than RACY_MARGIN before its walk (the
    // "racy git" rule), so S6 started right after this loop re-read up to
    // all 503 directories per command (15–30 ms) and moved between 48 and
    // 145 calls/s for one binary. The ~530 MB just written are also
    // written back first, not during the measurement.
    rustix::fs::sync();
    std::thread::sleep(toolsched::sandbox::protected::RACY_MARGIN + Duration::from_millis(100));
    Ok(planted)
}

async fn s5_search(env: &Env) -> anyhow::Result<Vec<Row>> {
    let Ok(rg) = which("rg") else {
        eprintln!("\n[S5] skipped: no `rg` binary (apt-get install ripgrep)");
        return Ok(Vec::new());
    };
    let (dirs, per_dir) = if env.quick { (50, 100) } else { (500, 100) };
    progress(&format!("[S5] generating {} files", dirs * per_dir));
    let repo = env.ws.join("repo");
    let planted = make_repo(&repo, dirs, per_dir)?;
    let ts = start_toolsched(env, &[])?;
    let mut client = connections(ts.addr, 1).await?.remove(0);
    let req = || {
        batch(
            "s5",
            vec![fcall(
                "g",
                "grep_search",
                json!({"pattern": "NEEDLE_[0-9]+", "dir_path": "repo", "total_max_matches": 2000}),
                false,
            )],
        )
    };
    let rg_run = || -> anyhow::Result<(f64, usize)> {
        let t0 = Instant::now();
        let out = Command::new(&rg)
            .args(["--no-messages", "-n", "NEEDLE_[0-9]+", "."])
            .current_dir(&repo)
            .output()?;
        let secs = t0.elapsed().as_secs_f64();
        Ok((secs, String::from_utf8_lossy(&out.stdout).lines().count()))
    };
    let matches_of = |events: &[pb::ScheduleCallsResponse]| -> Option<u64> {
        events.iter().find_map(|e| match &e.event {
            Some(pb::schedule_calls_response::Event::CallUpdate(pb::ToolCallUpdate {
                state: Some(pb::tool_call_update::State::Success(s)),
                ..
            })) => s
                .result
                .as_ref()
                .and_then(|r| r.fields.get("matches"))
                .and_then(|v| match v.kind {
                    Some(prost_types::value::Kind::NumberValue(n)) => Some(n as u64),
                    _ => None,
                }),
            _ => None,
        })
    };
    // Warm the page cache for both.
    let warm = record(ts.addr, req()).await?;
    let ts_matches = matches_of(&warm).context("grep_search did not succeed")?;
    let (_, rg_matches) = rg_run()?;
    if ts_matches as usize != rg_matches || rg_matches != planted {
        bail!("different matches: toolsched {ts_matches}, rg {rg_matches}, planted {planted}");
    }
    let mut t = Vec::new();
    let mut r = Vec::new();
    let mut ratios = Vec::new();
    for run in 0..env.runs {
        progress(&format!("[S5] search run {}/{}", run + 1, env.runs));
        let a = run_batch(&mut client, req()).await?.end.as_secs_f64() * 1e3;
        let b = rg_run()?.0 * 1e3;
        t.push(a);
        r.push(b);
        ratios.push(a / b);
    }
    Ok(vec![Row::paired(
        "S5",
        format!(
            "ms: grep_search vs `rg -n` over {} files ({planted} matches, .gitignore'd dir), 'floor' = rg",
            dirs * per_dir
        ),
        t,
        r,
        ratios,
        "≤ 1.0× rg (item 5)",
    )])
}

fn which(name: &str) -> anyhow::Result<PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .with_context(|| format!("{name} not on PATH"))
}

// === S6: shell ===

async fn s6_shell(env: &Env) -> anyhow::Result<Vec<Row>> {
    let n = if env.quick { 20 } else { env.s6_calls };
    // The confined figure depends on the workspace's size (the sandbox keeps
    // every `.git` read-only): measure with S5's repository in it, made here
    // when S5 did not run.
    let repo = env.ws.join("repo");
    if !repo.exists() {
        let (dirs, per_dir) = if env.quick { (50, 100) } else { (500, 100) };
        progress(&format!("[S6] generating {} files", dirs * per_dir));
        make_repo(&repo, dirs, per_dir)?;
    }
    let confined = start_toolsched(env, &["--approval-mode", "yolo"])?;
    let unconfined = start_toolsched(env, &["--approval-mode", "yolo", "--sandbox-level", "none"])?;
    let mut c_client = connections(confined.addr, 1).await?.remove(0);
    let mut u_client = connections(unconfined.addr, 1).await?.remove(0);
    let shell_true = || {
        batch(
            "s6",
            vec![fcall(
                "sh",
                "run_shell_command",
                json!({"command": "true"}),
                false,
            )],
        )
    };
    let (mut c_rate, mut u_rate, mut d_rate) = (Vec::new(), Vec::new(), Vec::new());
    let (mut c_ratio, mut u_ratio, mut cu_ratio) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..env.runs {
        progress(&format!("[S6] shell run {}/{}", run + 1, env.runs));
        let t0 = Instant::now();
        for _ in 0..n {
            run_batch(&mut c_client, shell_true()).await?;
        }
        let c = n as f64 / t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        for _ in 0..n {
            run_batch(&mut u_client, shell_true()).await?;
        }
        let u = n as f64 / t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        for _ in 0..n {
            tokio::process::Command::new("bash")
                .args(["-c", "true"])
                .status()
                .await?;
        }
        let d = n as f64 / t0.elapsed().as_secs_f64();
        c_rate.push(c);
        u_rate.push(u);
        d_rate.push(d);
        c_ratio.push(c / d);
        u_ratio.push(u / d);
        cu_ratio.push(u / c);
    }
    Ok(vec![
        Row {
            scenario: "S6",
            metric: "calls/s of `run_shell_command true`, sequential, sandbox workspace_write, S5's repository in the workspace (floor: `bash -c true` spawned from Rust)".into(),
            toolsched: Stat::of(c_rate.clone()),
            floor: Some(Stat::of(d_rate.clone())),
            ratio: Some(Stat::of(c_ratio).median),
            target: "≥ 0.5 of floor (item 3)".into(),
        },
        Row {
            scenario: "S6",
            metric: "the same with --sandbox-level none (floor: bash -c true)".into(),
            toolsched: Stat::of(u_rate.clone()),
            floor: Some(Stat::of(d_rate)),
            ratio: Some(Stat::of(u_ratio).median),
            target: "ratio reported".into(),
        },
        Row {
            scenario: "S6",
            metric: "cost of confinement: unconfined calls/s ('toolsched') vs confined ('floor')".into(),
            toolsched: Stat::of(u_rate),
            floor: Some(Stat::of(c_rate)),
            ratio: Some(Stat::of(cu_ratio).median),
            target: "unconfined ÷ confined, reported".into(),
        },
    ])
}

// === sweep: the curves ===

/// Server CPU time (user + system, every thread), in seconds: fields 14
/// and 15 of `/proc/<pid>/stat`, in USER_HZ ticks (100 per second on
/// Linux, whatever the kernel's own tick).
fn cpu_secs(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // The command name (field 2) may hold spaces: count after it.
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = f.get(11)?.parse().ok()?;
            let stime: f64 = f.get(12)?.parse().ok()?;
            Some((utime + stime) / 100.0)
        })
        .unwrap_or(0.0)
}

/// One load run with the server's CPU time per call.
async fn load_with_cpu(
    served: &Served,
    k: usize,
    c: usize,
    duration: Duration,
    make: Arc<dyn Fn(usize) -> pb::ScheduleCallsRequest + Send + Sync>,
    calls_per_batch: usize,
) -> anyhow::Result<(Load, f64)> {
    let pid = served.child.id();
    let cpu0 = cpu_secs(pid);
    let t0 = Instant::now();
    let l = load(served.addr, k, c, duration, make, calls_per_batch).await?;
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu = cpu_secs(pid) - cpu0;
    let calls = l.calls_per_s * elapsed;
    Ok((l, cpu / calls.max(1.0) * 1e6))
}

/// Per figure of a sweep point: toolsched's and the floor's value of each
/// run, and the ratio of each run.
#[derive(Default)]
struct Series {
    t: Vec<f64>,
    f: Vec<f64>,
    ratio: Vec<f64>,
}

impl Series {
    fn push(&mut self, t: f64, f: f64) {
        self.t.push(t);
        self.f.push(f);
        self.ratio.push(t / f);
    }

    fn row(self, metric: String, target: &str) -> Row {
        Row {
            scenario: "sweep",
            metric,
            toolsched: Stat::of(self.t),
            floor: Some(Stat::of(self.f)),
            ratio: Some(Stat::of(self.ratio).median),
            target: target.into(),
        }
    }
}

async fn sweep(env: &Env) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let secs = Duration::from_millis(if env.quick { 500 } else { 2000 });
    // (a) Concurrency: one read_file per batch, C sessions over
    // K = min(C, 8) connections.
    let ts = start_toolsched(env, &[])?;
    let template = record(ts.addr, read_small("record")).await?;
    let (floor, _file) = start_floor(env, &template, None)?;
    for c in [1usize, 4, 16, 64, 256, 1024] {
        let k = c.min(8);
        let make: Arc<dyn Fn(usize) -> pb::ScheduleCallsRequest + Send + Sync> =
            Arc::new(|s| read_small(&format!("sweep-{s}")));
        let (mut rps, mut p99, mut cpu) = (Series::default(), Series::default(), Series::default());
        for run in 0..env.runs {
            progress(&format!("[sweep] C={c} run {}/{}", run + 1, env.runs));
            let (t, t_cpu) = load_with_cpu(&ts, k, c, secs, make.clone(), 1).await?;
            let (f, f_cpu) = load_with_cpu(&floor, k, c, secs, make.clone(), 1).await?;
            rps.push(t.calls_per_s, f.calls_per_s);
            p99.push(percentile(&t.end, 0.99), percentile(&f.end, 0.99));
            cpu.push(t_cpu, f_cpu);
        }
        rows.push(rps.row(
            format!("C={c} (K={k}): RPC/s, 1 read_file per batch"),
            "≥ 0.8 of floor",
        ));
        rows.push(p99.row(format!("C={c}: end of stream p99 (µs)"), "reported"));
        rows.push(cpu.row(format!("C={c}: server CPU µs per RPC"), "≤ 1.25× floor"));
    }
    drop(floor);
    // (b) Batch size: N read_file calls of the small file per batch (one
    // wave): time to BatchCompleted at C=1, calls/s and CPU per call at
    // C=16.
    for n in [1usize, 8, 32, 128] {
        let make_n = move |s: &str| {
            batch(
                s,
                (0..n)
                    .map(|i| {
                        fcall(
                            &format!("r{i}"),
                            "read_file",
                            json!({"file_path": "small.txt"}),
                            false,
                        )
                    })
                    .collect(),
            )
        };
        let template = record(ts.addr, make_n("record")).await?;
        let (floor, _file) = start_floor(env, &template, None)?;
        let one: Arc<dyn Fn(usize) -> pb::ScheduleCallsRequest + Send + Sync> =
            Arc::new(move |_| make_n("sweep-n"));
        let many: Arc<dyn Fn(usize) -> pb::ScheduleCallsRequest + Send + Sync> =
            Arc::new(move |s| make_n(&format!("sweep-n-{s}")));
        let (mut end, mut per_call, mut cps, mut cpu) = (
            Series::default(),
            Series::default(),
            Series::default(),
            Series::default(),
        );
        for run in 0..env.runs {
            progress(&format!("[sweep] N={n} run {}/{}", run + 1, env.runs));
            let t = load(ts.addr, 1, 1, secs, one.clone(), n).await?;
            let f = load(floor.addr, 1, 1, secs, one.clone(), n).await?;
            let (te, fe) = (percentile(&t.end, 0.5), percentile(&f.end, 0.5));
            end.push(te, fe);
            per_call.push(te / n as f64, fe / n as f64);
            let (t, t_cpu) = load_with_cpu(&ts, 8, 16, secs, many.clone(), n).await?;
            let (f, f_cpu) = load_with_cpu(&floor, 8, 16, secs, many.clone(), n).await?;
            cps.push(t.calls_per_s, f.calls_per_s);
            cpu.push(t_cpu, f_cpu);
        }
        rows.push(end.row(
            format!("N={n} reads per batch: time to BatchCompleted p50 (µs), C=1"),
            "reported",
        ));
        rows.push(per_call.row(format!("N={n}: µs per call at C=1"), "reported"));
        rows.push(cps.row(format!("N={n}: calls/s at C=16 (K=8)"), "≥ 0.8 of floor"));
        rows.push(cpu.row(
            format!("N={n}: server CPU µs per call at C=16"),
            "≤ 1.25× floor",
        ));
    }
    drop(ts);
    rows.extend(idle_sessions(env).await?);
    Ok(rows)
}

/// How long the idle-session sweep waits before reading RSS: past the
/// server's one second before an idle session's actor ends.
const IDLE_SETTLE: Duration = Duration::from_secs(3);

/// The sweep's idle sessions (also `--scenarios idle` alone): each ran one
/// read_file batch and is now idle (its completed batch retained, as after
/// a real agent turn). RSS grows per session on a fresh server.
async fn idle_sessions(env: &Env) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let ts = start_toolsched(env, &[])?;
    record(ts.addr, read_small("warm")).await?;
    let rss0 = rss_kib(ts.child.id());
    let clients = connections(ts.addr, 8).await?;
    let mut made = 0usize;
    let targets: &[usize] = if env.quick {
        &[1000, 10_000]
    } else {
        &[1000, 10_000, 100_000]
    };
    let mut last = (0usize, rss0);
    for &target in targets {
        progress(&format!("[sweep] idle sessions: {made} → {target}"));
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(made));
        let mut tasks = Vec::new();
        for w in 0..64 {
            let mut client = clients[w % clients.len()].clone();
            let next = next.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let s = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if s >= target {
                        return anyhow::Ok(());
                    }
                    run_batch(&mut client, read_small(&format!("idle-{s}"))).await?;
                }
            }));
        }
        for t in tasks {
            t.await??;
        }
        made = target;
        // A session's actor ends after a second idle (its state kept as
        // data): measured once they have.
        tokio::time::sleep(IDLE_SETTLE).await;
        let rss = rss_kib(ts.child.id());
        let per = (rss.saturating_sub(rss0)) as f64 * 1024.0 / target as f64;
        let marginal = (rss.saturating_sub(last.1)) as f64 * 1024.0 / (target - last.0) as f64;
        rows.push(Row {
            scenario: "sweep",
            metric: format!(
                "RSS per idle session (bytes) at {target} sessions (marginal since {}: {marginal:.0}); server RSS {} MiB",
                last.0,
                rss / 1024
            ),
            toolsched: Stat::of(vec![per]),
            floor: None,
            ratio: None,
            target: "≤ 4 KB".into(),
        });
        last = (target, rss);
    }
    Ok(rows)
}

// === the transport floor ===

mod floor {
    use super::*;
    use pb::tool_scheduler_server::{ToolScheduler, ToolSchedulerServer};

    type Waiters = Arc<Mutex<HashMap<String, oneshot::Sender<()>>>>;

    struct Floor {
        template: Arc<Vec<pb::ScheduleCallsResponse>>,
        pause_after: Option<usize>,
        waiters: Waiters,
    }

    type EventStream =
        Pin<Box<dyn Stream<Item = Result<pb::ScheduleCallsResponse, Status>> + Send>>;

    #[tonic::async_trait]
    impl ToolScheduler for Floor {
        type ScheduleCallsStream = EventStream;

        async fn schedule_calls(
            &self,
            request: Request<pb::ScheduleCallsRequest>,
        ) -> Result<Response<EventStream>, Status> {
            let session = request.into_inner().session_id;
            let (tx, rx) = mpsc::unbounded_channel();
            let template = self.template.clone();
            let pause = self.pause_after;
            let (go_tx, go_rx) = oneshot::channel();
            if pause.is_some()
                && let Ok(mut w) = self.waiters.lock()
            {
                w.insert(session, go_tx);
            }
            // A task and a channel per call, as a real service would.
            tokio::spawn(async move {
                let mut go = Some(go_rx);
                for (i, ev) in template.iter().enumerate() {
                    if tx.send(Ok(ev.clone())).is_err() {
                        return;
                    }
                    if Some(i) == pause
                        && let Some(g) = go.take()
                    {
                        let _ = g.await;
                    }
                }
            });
            Ok(Response::new(Box::pin(
                tokio_stream::wrappers::UnboundedReceiverStream::new(rx),
            )))
        }

        async fn confirm(
            &self,
            request: Request<pb::ConfirmRequest>,
        ) -> Result<Response<pb::ConfirmResponse>, Status> {
            let session = request.into_inner().session_id;
            let waiter = self
                .waiters
                .lock()
                .ok()
                .and_then(|mut w| w.remove(&session));
            match waiter {
                Some(tx) => {
                    let _ = tx.send(());
                    Ok(Response::new(pb::ConfirmResponse::default()))
                }
                None => Err(Status::not_found("no waiting stream")),
            }
        }

        async fn cancel(
            &self,
            _request: Request<pb::CancelRequest>,
        ) -> Result<Response<pb::CancelResponse>, Status> {
            Ok(Response::new(pb::CancelResponse::default()))
        }

        async fn list_tools(
            &self,
            _request: Request<pb::ListToolsRequest>,
        ) -> Result<Response<pb::ListToolsResponse>, Status> {
            Ok(Response::new(pb::ListToolsResponse::default()))
        }

        async fn get_server_info(
            &self,
            _request: Request<pb::GetServerInfoRequest>,
        ) -> Result<Response<pb::GetServerInfoResponse>, Status> {
            Ok(Response::new(pb::GetServerInfoResponse::default()))
        }

        type WatchBatchStream = EventStream;

        async fn watch_batch(
            &self,
            _request: Request<pb::WatchBatchRequest>,
        ) -> Result<Response<EventStream>, Status> {
            Err(Status::unimplemented("the transport floor keeps no logs"))
        }

        async fn list_workspaces(
            &self,
            _request: Request<pb::ListWorkspacesRequest>,
        ) -> Result<Response<pb::ListWorkspacesResponse>, Status> {
            Err(Status::unimplemented(
                "the transport floor has no workspaces",
            ))
        }

        async fn get_session(
            &self,
            _request: Request<pb::GetSessionRequest>,
        ) -> Result<Response<pb::GetSessionResponse>, Status> {
            Err(Status::unimplemented(
                "the transport floor keeps no sessions",
            ))
        }
    }

    pub async fn serve(template: &Path, pause_after: Option<usize>) -> anyhow::Result<()> {
        let bytes = std::fs::read(template)?;
        let mut buf = bytes.as_slice();
        let mut events = Vec::new();
        while !buf.is_empty() {
            events.push(pb::ScheduleCallsResponse::decode_length_delimited(
                &mut buf,
            )?);
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!("floor serving {}", listener.local_addr()?);
        let floor = Floor {
            template: Arc::new(events),
            pause_after,
            waiters: Arc::new(Mutex::new(HashMap::new())),
        };
        tonic::transport::Server::builder()
            .max_concurrent_streams(100_000)
            .add_service(ToolSchedulerServer::new(floor))
            .serve_with_incoming(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            )
            .await?;
        Ok(())
    }
}
