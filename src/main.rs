//! `toolsched serve` (the default command): parse settings, set up logging,
//! build the scheduler, serve until SIGTERM or Ctrl-C, drain. `toolsched
//! call` is a small client for manual use (see `client.rs`).

mod client;

use anyhow::Context;
use clap::Parser;
use tokio_util::sync::CancellationToken;
use toolsched::config::{Cli, Command, LogFormat, Settings};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let args = match cli.command {
        Some(Command::Serve(args)) => args,
        Some(Command::Call(args)) => return client::run(args).await,
        None => cli.serve,
    };
    let settings = Settings::resolve(args)?;
    init_tracing(settings.log_format);

    let shutdown = CancellationToken::new();
    // A bad policy file stops start-up here, naming file, line and reason.
    let policy = match &settings.policy_file {
        Some(path) => {
            let interval = toolsched::policy::reload::POLL_INTERVAL;
            toolsched::policy::watch_file(path, interval, shutdown.clone())?.0
        }
        None => toolsched::policy::PolicyHandle::default(),
    };
    let scheduler = toolsched::build_scheduler_with_policy(
        &settings.workspace,
        settings.scheduler.clone(),
        policy,
        shutdown.clone(),
    )?;
    if let Some(addr) = settings.metrics_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr} for metrics"))?;
        tracing::info!(listen = %listener.local_addr()?, "metrics at /metrics");
        let metrics = scheduler.metrics().clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let served = toolsched::api::metrics::serve_metrics(listener, metrics, async move {
                stop.cancelled().await
            });
            if let Err(e) = served.await {
                tracing::error!(error = %e, "metrics endpoint failed");
            }
        });
    }
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    tracing::info!(
        listen = %listener.local_addr()?,
        workspace = %std::fs::canonicalize(&settings.workspace)
            .unwrap_or_else(|_| settings.workspace.clone())
            .display(),
        mode = toolsched::policy::mode_name(settings.scheduler.default_mode),
        "toolsched serving"
    );
    toolsched::api::serve(
        listener,
        scheduler,
        shutdown,
        settings.server,
        termination(),
    )
    .await?;
    tracing::info!("toolsched stopped");
    Ok(())
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
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
