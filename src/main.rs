//! `toolsched serve` (the default command): parse settings, set up logging
//! and traces, build the scheduler, serve until SIGTERM or Ctrl-C, drain,
//! flush the traces. `toolsched call` is a small client for manual use (see
//! `client.rs`).

mod client;

use anyhow::Context;
use clap::Parser;
use tokio_util::sync::CancellationToken;
use toolsched::config::{Cli, Command, LogFormat, ServeArgs, Settings};
use toolsched::telemetry::lines::JsonLines;
use toolsched::telemetry::log_writer::{FdSink, LogWriter, LogWriterGuard};

/// mimalloc for the server (and the sandbox worker, the same binary): each
/// event of a batch allocates and frees a few small buffers on whichever
/// runtime thread handles it, and glibc's malloc/free took 23% of S1's CPU
/// (BENCHMARKS.md, "Session 6").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's own defaults hold a held stream's freed memory: its arena is
/// committed eagerly and a free page is given back only a second later, so
/// a server holding many streams (each at a prompt, say) kept about 6 KiB
/// more per stream (BENCHMARKS.md, "Session 11"). Committing on demand and
/// giving pages back at once costs no measured throughput. These are set
/// as defaults, before the first allocation (the runtime allocates before
/// `main`, and mimalloc commits its first arena then), from a prioritized
/// initializer that runs ahead of mimalloc's own: an operator's
/// `MIMALLOC_ARENA_EAGER_COMMIT` or `MIMALLOC_PURGE_DELAY` still wins.
#[used]
#[unsafe(link_section = ".init_array.00101")]
static ALLOCATOR_DEFAULTS: extern "C" fn() = allocator_defaults;

extern "C" fn allocator_defaults() {
    // mimalloc v3's `mi_option_arena_eager_commit` and `mi_option_purge_delay`
    // (its include/mimalloc.h), which the bindings do not name;
    // tests/allocator.rs checks by their names that these are the two set.
    const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
    const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: sets two entries of mimalloc's static option table; it
    // allocates nothing and needs no initialized runtime.
    unsafe {
        libmimalloc_sys::mi_option_set_default(ARENA_EAGER_COMMIT, 0);
        libmimalloc_sys::mi_option_set_default(PURGE_DELAY, 0);
    }
}

fn main() -> anyhow::Result<()> {
    // The sandbox zygote: single-threaded, before anything else runs
    // (and without building the server's command line).
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(toolsched::sandbox::zygote::SUBCOMMAND))
    {
        toolsched::sandbox::zygote::main()
    }
    let cli = Cli::parse();
    // The worker must stay single-threaded (Landlock and seccomp bind the
    // calling thread): it runs before any async runtime exists.
    if let Some(Command::SandboxExec(worker)) = cli.command {
        toolsched::sandbox::worker::main(worker)
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match cli.command {
        Some(Command::Call(args)) => runtime.block_on(client::run(args)),
        Some(Command::Serve(args)) => runtime.block_on(serve(*args)),
        Some(Command::SandboxExec(_)) | None => runtime.block_on(serve(cli.serve)),
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let settings = Settings::resolve(args)?;
    // Held to the end of `serve`: dropping it writes the lines still queued.
    let _log_writer = init_tracing(settings.log_format)?;
    let telemetry = toolsched::telemetry::init(settings.otlp_endpoint.as_deref())?;
    if let Some(endpoint) = telemetry.endpoint() {
        tracing::info!(%endpoint, protocol = telemetry.protocol(), "exporting traces over OTLP");
    }

    // What killed servers left in the temp dir (their anchors, kept outputs
    // and commands' tmps): removed before this one makes its own.
    let swept = tokio::task::spawn_blocking(toolsched::scratch::sweep_stale).await?;
    // Said whenever there was anything of these names: kept or removed.
    if swept.removed + swept.failed + swept.in_use > 0 {
        tracing::info!(
            removed = swept.removed,
            failed = swept.failed,
            in_use = swept.in_use,
            temp_dir = %toolsched::scratch::temp_dir().display(),
            "swept the temporary directories of servers that are gone"
        );
    }

    let shutdown = CancellationToken::new();
    // A bad policy file stops start-up here, naming file, line and reason.
    let policy = match &settings.policy_file {
        Some(path) => {
            let interval = toolsched::policy::reload::POLL_INTERVAL;
            toolsched::policy::watch_file(path, interval, shutdown.clone())?.0
        }
        None => toolsched::policy::PolicyHandle::default(),
    };
    let mut config = settings.scheduler.clone();
    // The worker is this very binary, whatever its file is called (the
    // library's guess looks for a `toolsched` beside test executables).
    if config.sandbox.worker_exe.is_none() {
        config.sandbox.worker_exe = std::env::current_exe().ok();
    }
    let mut durable = None;
    if let Some(url) = &settings.store_url {
        // Unreachable at start-up: the server does not start (the reason is
        // the error).
        let store = toolsched::store::PostgresStore::connect_with(
            url,
            config.retention,
            std::sync::Arc::new(toolsched::api::WireCodec),
            settings.store_timing,
        )
        .await?;
        // The id GetServerInfo reports and lease rows (GetSession's
        // owner_replica) name.
        tracing::info!(replica = %store.replica(), "store: PostgreSQL");
        config.store = Some(toolsched::scheduler::DurableStore(store.clone()));
        durable = Some(store);
    }
    let (scheduler, _mcp) = toolsched::build_scheduler_with_mcp(
        &settings.workspace,
        config,
        policy,
        &settings.mcp_servers,
        shutdown.clone(),
    )
    .await?;
    if let Some(addr) = settings.metrics_listen {
        spawn_metrics(addr, &scheduler, shutdown.clone()).await?;
    }
    let signal = termination()?;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    tracing::info!(
        listen = %listener.local_addr()?,
        workspace = %std::fs::canonicalize(&settings.workspace)
            .unwrap_or_else(|_| settings.workspace.clone())
            .display(),
        workspaces_root = settings
            .scheduler
            .workspaces
            .as_ref()
            .map(|w| w.root.display().to_string()),
        mode = toolsched::policy::mode_name(settings.scheduler.default_mode),
        "toolsched serving"
    );
    let close = settings.server.shutdown_close;
    let served =
        toolsched::api::serve(listener, scheduler, shutdown, settings.server, signal).await;
    // After the drain: what the store writes behind goes in before exit.
    if let Some(store) = durable {
        store.flush(close).await;
        store.release().await;
    }
    // After the drain: the last batches' spans are complete by now.
    telemetry.shutdown().await;
    served?;
    tracing::info!("toolsched stopped");
    Ok(())
}

/// Serves `/metrics` on `addr` until `shutdown`.
async fn spawn_metrics(
    addr: std::net::SocketAddr,
    scheduler: &toolsched::scheduler::Scheduler,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for metrics"))?;
    tracing::info!(listen = %listener.local_addr()?, "metrics at /metrics");
    let scheduler = scheduler.clone();
    tokio::spawn(async move {
        let stop = async move { shutdown.cancelled().await };
        if let Err(e) = toolsched::api::metrics::serve_metrics(listener, scheduler, stop).await {
            tracing::error!(error = %e, "metrics endpoint failed");
        }
    });
    Ok(())
}

/// Log lines are written by a thread of their own: every call writes two
/// audit lines, and a write to stderr on a runtime thread is a syscall per
/// line (about 7% of a small read's CPU in the S1 profile), a wake of a
/// writer thread per line a context switch. The thread gathers lines for a
/// few milliseconds and writes them at once; not lossy (see
/// [`toolsched::telemetry::log_writer`]).
fn init_tracing(format: LogFormat) -> anyhow::Result<LogWriterGuard> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // rmcp logs every MCP message at info.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=warn"));
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    let (writer, guard) = LogWriter::spawn("toolsched-log", FdSink::stderr())
        .context("cannot start the log writer thread")?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer);
    match format {
        // Fields at the top level of each line (`"call_id": …`), not under
        // "fields": what log pipelines index without a nested path.
        // tracing-subscriber's JSON, the audit lines serialized in one
        // buffer (see `telemetry::lines`).
        LogFormat::Json => builder
            .fmt_fields(JsonLines::fields())
            .event_format(JsonLines::new())
            .init(),
        LogFormat::Text => builder.init(),
    }
    Ok(guard)
}

/// Registers for SIGTERM (Kubernetes) and SIGINT (Ctrl-C) now, so that a
/// signal arriving right after start-up is not lost, and returns a future
/// that resolves on the first of them.
fn termination() -> anyhow::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
