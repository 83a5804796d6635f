//! `toolsched serve` (the default command): parse settings, set up logging,
//! build the scheduler, serve until SIGTERM or Ctrl-C, drain.

use anyhow::Context;
use clap::Parser;
use tokio_util::sync::CancellationToken;
use toolsched::config::{Cli, Command, LogFormat, ServeArgs, Settings};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let args = match cli.command {
        // The worker must stay single-threaded (Landlock and seccomp bind
        // the calling thread): it runs before any async runtime exists.
        Some(Command::SandboxExec(worker)) => toolsched::sandbox::worker::main(worker),
        Some(Command::Serve(args)) => args,
        None => cli.serve,
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(serve(args))
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let settings = Settings::resolve(args)?;
    init_tracing(settings.log_format);

    let shutdown = CancellationToken::new();
    let scheduler =
        toolsched::build_scheduler(&settings.workspace, settings.scheduler.clone(), shutdown.clone())?;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    tracing::info!(
        listen = %listener.local_addr()?,
        workspace = %settings.workspace.display(),
        mode = toolsched::policy::mode_name(settings.scheduler.default_mode),
        "toolsched serving"
    );
    toolsched::api::serve(listener, scheduler, shutdown, settings.server, termination()).await?;
    tracing::info!("toolsched stopped");
    Ok(())
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// Resolves on SIGTERM (Kubernetes) or Ctrl-C.
async fn termination() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
