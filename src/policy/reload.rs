//! Reloading the operator's policy file while the server runs: on SIGHUP,
//! and when its content changes (checked every [`POLL_INTERVAL`]).
//!
//! Polling the content rather than watching the inode is deliberate: a
//! Kubernetes ConfigMap update swaps a `..data` symlink, which an inotify
//! watch on the old file never reports. A file that does not load is
//! rejected with a logged reason and the policy in force stays.
//!
//! The new policy reaches sessions through a `tokio::sync::watch` channel;
//! nothing is locked.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{Policy, PolicyError, PolicyHandle};

/// How often the file's content is compared with the loaded one: a ConfigMap
/// update takes about a minute to reach a pod anyway; reading a small file
/// every 2 s costs nothing.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// What happened to reloads so far (observable by tests and health checks).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadStatus {
    /// New policies put in force after start-up.
    pub applied: u64,
    /// New file contents rejected.
    pub rejected: u64,
    /// Why the last rejected content was rejected; cleared by a success.
    pub last_error: Option<String>,
}

/// Loads the policy file at `path` (an error here is a start-up error) and
/// starts reloading it on SIGHUP and on content change every `interval`,
/// until `shutdown`. Returns the handle sessions read and the reload status.
pub fn watch_file(
    path: &Path,
    interval: Duration,
    shutdown: CancellationToken,
) -> Result<(PolicyHandle, watch::Receiver<ReloadStatus>), PolicyError> {
    let initial = Policy::from_file(path)?;
    let mut last = std::fs::read(path).map_err(|source| PolicyError::Read {
        file: path.display().to_string(),
        source,
    })?;
    tracing::info!(
        file = %path.display(),
        rules = initial.operator_rules(),
        "policy loaded"
    );
    let (tx, rx) = watch::channel(Arc::new(initial));
    let (status_tx, status_rx) = watch::channel(ReloadStatus::default());
    // Installed before returning so that a SIGHUP sent right after start-up
    // reloads instead of killing the process (the default action).
    #[cfg(unix)]
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).map_err(
        |source| PolicyError::Read {
            file: "SIGHUP handler".into(),
            source,
        },
    )?;
    let path: PathBuf = path.to_path_buf();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first tick is immediate
        loop {
            #[cfg(unix)]
            let forced = tokio::select! {
                () = shutdown.cancelled() => break,
                _ = tick.tick() => false,
                _ = hup.recv() => true,
            };
            #[cfg(not(unix))]
            let forced = tokio::select! {
                () = shutdown.cancelled() => break,
                _ = tick.tick() => false,
            };
            let bytes = match std::fs::read(&path) {
                Ok(b) => b,
                Err(e) => {
                    if forced || !last.is_empty() {
                        tracing::warn!(file = %path.display(), error = %e, "policy file unreadable; keeping the policy in force");
                    }
                    continue;
                }
            };
            if !forced && bytes == last {
                continue;
            }
            last = bytes;
            match Policy::from_file(&path) {
                Ok(policy) => {
                    tracing::info!(
                        file = %path.display(),
                        rules = policy.operator_rules(),
                        trigger = if forced { "SIGHUP" } else { "change" },
                        "policy reloaded"
                    );
                    let _ = tx.send(Arc::new(policy));
                    status_tx.send_modify(|s| {
                        s.applied += 1;
                        s.last_error = None;
                    });
                }
                Err(e) => {
                    tracing::error!(error = %e, "policy reload rejected; keeping the policy in force");
                    status_tx.send_modify(|s| {
                        s.rejected += 1;
                        s.last_error = Some(e.to_string());
                    });
                }
            }
        }
    });
    Ok((PolicyHandle::from_watch(rx), status_rx))
}
