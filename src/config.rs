//! Settings from flags, environment variables (`TOOLSCHED_<FLAG>`) and a TOML
//! file: flags beat the environment, which beats the file, which beats the
//! built-in defaults.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde::Deserialize;

use crate::api::ServerOptions;
use crate::policy::ApprovalMode;
use crate::sandbox::{OutputLimits, ResourceLimits, Sandbox, SandboxConfig, SandboxLevel};
use crate::scheduler::SchedulerConfig;
use crate::tools::mcp::McpServerConfig;

/// Default listen address: loopback only, so a fresh start exposes nothing.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:50051";

/// toolsched: schedules, approves and executes the tool calls of LLM agents
/// over gRPC.
#[derive(Debug, Parser)]
#[command(name = "toolsched", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// `serve` flags, also accepted without the subcommand.
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the gRPC API (the default command).
    Serve(Box<ServeArgs>),
    /// Send one batch of function calls to a running server, print every
    /// event, and answer approval prompts from the terminal.
    Call(CallArgs),
    /// Internal: the sandbox worker the server runs every command through.
    #[command(hide = true)]
    SandboxExec(crate::sandbox::WorkerArgs),
}

/// Flags of `call`, the small client for manual use.
#[derive(Debug, Clone, Args)]
pub struct CallArgs {
    /// Server address.
    #[arg(long, env = "TOOLSCHED_ADDR", default_value = "http://127.0.0.1:50051")]
    pub addr: String,
    /// Session id.
    #[arg(long, default_value = "cli")]
    pub session: String,
    /// Switch the session to this approval mode first.
    #[arg(long)]
    pub approval_mode: Option<ApprovalMode>,
    /// Approve every prompt once without asking.
    #[arg(long)]
    pub yes: bool,
    /// Bearer token, when the server requires one.
    #[arg(long, env = "TOOLSCHED_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    /// Seconds the batch keeps running if the connection drops; the client
    /// re-attaches (WatchBatch) within them [default: the server's].
    #[arg(long)]
    pub disconnect_grace_secs: Option<u32>,
    /// Pairs of tool name and JSON arguments, e.g.
    /// `read_file '{"file_path":"README.md"}' list_directory '{"dir_path":"."}'`.
    #[arg(required = true, num_args = 2.., value_names = ["TOOL", "ARGS_JSON"])]
    pub calls: Vec<String>,
}

/// Flags of `serve`. Every one also reads `TOOLSCHED_<NAME>`.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:50051]. A non-loopback address
    /// needs --auth-token (or --insecure-no-auth).
    #[arg(long, env = "TOOLSCHED_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Workspace root: tools act inside it only [default: current directory].
    #[arg(long, env = "TOOLSCHED_WORKSPACE")]
    pub workspace: Option<PathBuf>,
    /// TOML config file with the same keys as these flags (snake_case).
    #[arg(long, env = "TOOLSCHED_CONFIG")]
    pub config: Option<PathBuf>,
    /// Approval mode of new sessions: default, auto_edit, yolo, plan.
    #[arg(long, env = "TOOLSCHED_APPROVAL_MODE")]
    pub approval_mode: Option<ApprovalMode>,
    /// Policy rules (TOML) over the built-in defaults; reloaded on change
    /// and on SIGHUP [default: built-in policy only].
    #[arg(long, env = "TOOLSCHED_POLICY_FILE")]
    pub policy_file: Option<PathBuf>,
    /// Seconds an approval prompt waits before the call is cancelled; 0 = wait
    /// forever [default: 600].
    #[arg(long, env = "TOOLSCHED_CONFIRMATION_TIMEOUT_SECS")]
    pub confirmation_timeout_secs: Option<u64>,
    /// Longest a call may execute, in seconds [default: 300].
    #[arg(long, env = "TOOLSCHED_EXECUTION_TIMEOUT_SECS")]
    pub execution_timeout_secs: Option<u64>,
    /// Bytes of a command's output kept (head and tail) [default: 1048576].
    #[arg(long, env = "TOOLSCHED_OUTPUT_CAP_BYTES")]
    pub output_cap_bytes: Option<usize>,
    /// Calls in one batch [default: 128].
    #[arg(long, env = "TOOLSCHED_MAX_CALLS_PER_BATCH")]
    pub max_calls_per_batch: Option<usize>,
    /// Live sessions [default: 100000].
    #[arg(long, env = "TOOLSCHED_MAX_SESSIONS")]
    pub max_sessions: Option<usize>,
    /// Seconds an idle session is kept (mode, rules, topic) [default: 3600].
    #[arg(long, env = "TOOLSCHED_SESSION_IDLE_TTL_SECS")]
    pub session_idle_ttl_secs: Option<u64>,
    /// HTTP/2 streams per connection [default: 1024].
    #[arg(long, env = "TOOLSCHED_MAX_CONCURRENT_STREAMS")]
    pub max_concurrent_streams: Option<u32>,
    /// Largest request message in bytes [default: 4194304].
    #[arg(long, env = "TOOLSCHED_MAX_REQUEST_BYTES")]
    pub max_request_bytes: Option<usize>,
    /// Seconds running batches get after SIGTERM before they are cancelled
    /// [default: 10].
    #[arg(long, env = "TOOLSCHED_SHUTDOWN_GRACE_SECS")]
    pub shutdown_grace_secs: Option<u64>,
    /// After the grace, seconds streams and connections get to close before
    /// they are dropped (a client not reading, an open health Watch)
    /// [default: 5].
    #[arg(long, env = "TOOLSCHED_SHUTDOWN_CLOSE_SECS")]
    pub shutdown_close_secs: Option<u64>,
    // -- batches that outlive their connection (issue 13) --
    /// Seconds a batch runs on after its last stream went away, when its
    /// request sets no disconnect_grace_secs; 0 cancels it at once
    /// [default: 0].
    #[arg(long, env = "TOOLSCHED_DISCONNECT_GRACE_SECS")]
    pub disconnect_grace_secs: Option<u64>,
    /// Longest disconnect grace a request may ask for, in seconds: a
    /// detached batch holds its processes that long [default: 600].
    #[arg(long, env = "TOOLSCHED_MAX_DISCONNECT_GRACE_SECS")]
    pub max_disconnect_grace_secs: Option<u64>,
    /// Seconds a completed batch stays watchable and its request_id
    /// replayable [default: 300].
    #[arg(long, env = "TOOLSCHED_BATCH_RETENTION_SECS")]
    pub batch_retention_secs: Option<u64>,
    /// Batches retained per session, oldest completed dropped first
    /// [default: 64].
    #[arg(long, env = "TOOLSCHED_MAX_RETAINED_BATCHES")]
    pub max_retained_batches: Option<usize>,
    /// Estimated log bytes retained per session, oldest completed batch
    /// dropped first [default: 67108864].
    #[arg(long, env = "TOOLSCHED_MAX_RETAINED_BYTES")]
    pub max_retained_bytes: Option<usize>,
    /// Where batches, logs, request ids and answers are kept: `memory`
    /// (this process) or a PostgreSQL URL `postgres://…` (restarts and
    /// replicas) [default: memory].
    #[arg(long, env = "TOOLSCHED_STORE", hide_env_values = true)]
    pub store: Option<String>,
    /// Bearer token every ToolScheduler RPC must carry.
    #[arg(long, env = "TOOLSCHED_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    /// Allow a non-loopback listen address without authentication.
    #[arg(long, env = "TOOLSCHED_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,
    /// Log format: text or json [default: text].
    #[arg(long, env = "TOOLSCHED_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Serve Prometheus metrics at http://ADDR/metrics [default: off].
    #[arg(long, env = "TOOLSCHED_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Export traces over OTLP/gRPC to this collector, e.g.
    /// http://127.0.0.1:4317 [default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
    /// OTEL_EXPORTER_OTLP_ENDPOINT; off when none is set].
    #[arg(long, env = "TOOLSCHED_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Do all file I/O of tools on the blocking thread pool, small reads
    /// included (for a workspace on a network filesystem, where an open can
    /// stall) [default: files up to 64 KiB are read inline].
    #[arg(long, env = "TOOLSCHED_BLOCKING_FILE_IO")]
    pub blocking_file_io: bool,
    /// What commands may do: read_only, workspace_write, workspace_write_network,
    /// none (no Landlock/seccomp; only where a pod or VM is the boundary)
    /// [default: workspace_write].
    #[arg(long, env = "TOOLSCHED_SANDBOX_LEVEL")]
    pub sandbox_level: Option<SandboxLevel>,
    /// Start even when the kernel cannot enforce the sandbox level (commands
    /// then run with what it does enforce; the gap is logged and reported).
    #[arg(long, env = "TOOLSCHED_SANDBOX_ALLOW_WEAKER")]
    pub sandbox_allow_weaker: bool,
    /// CPU seconds per command (RLIMIT_CPU) [default: 300].
    #[arg(long, env = "TOOLSCHED_SANDBOX_CPU_SECS")]
    pub sandbox_cpu_secs: Option<u64>,
    /// Address space per command process in bytes (RLIMIT_AS) [default: 8 GiB].
    #[arg(long, env = "TOOLSCHED_SANDBOX_ADDRESS_SPACE_BYTES")]
    pub sandbox_address_space_bytes: Option<u64>,
    /// Largest file a command may write, in bytes (RLIMIT_FSIZE) [default: 4 GiB].
    #[arg(long, env = "TOOLSCHED_SANDBOX_FILE_SIZE_BYTES")]
    pub sandbox_file_size_bytes: Option<u64>,
    /// Processes per command (pids cgroup where delegated, and RLIMIT_NPROC)
    /// [default: 512].
    #[arg(long, env = "TOOLSCHED_SANDBOX_MAX_PROCESSES")]
    pub sandbox_max_processes: Option<u64>,
    /// Open files per command process (RLIMIT_NOFILE) [default: 4096].
    #[arg(long, env = "TOOLSCHED_SANDBOX_OPEN_FILES")]
    pub sandbox_open_files: Option<u64>,
    /// The toolsched binary to run as the sandbox worker [default: this one].
    #[arg(long, env = "TOOLSCHED_SANDBOX_WORKER_EXE")]
    pub sandbox_worker_exe: Option<PathBuf>,
    /// Directories commands may read and execute besides the system ones,
    /// e.g. toolchains under a home directory (repeat the flag, or separate
    /// with ':' in the environment variable).
    #[arg(
        long,
        env = "TOOLSCHED_SANDBOX_EXTRA_READ_PATHS",
        value_delimiter = ':'
    )]
    pub sandbox_extra_read_paths: Vec<PathBuf>,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    Json,
}

/// The TOML file: every key optional, unknown keys rejected.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    workspace: Option<PathBuf>,
    approval_mode: Option<ApprovalMode>,
    policy_file: Option<PathBuf>,
    confirmation_timeout_secs: Option<u64>,
    execution_timeout_secs: Option<u64>,
    output_cap_bytes: Option<usize>,
    max_calls_per_batch: Option<usize>,
    max_sessions: Option<usize>,
    session_idle_ttl_secs: Option<u64>,
    max_concurrent_streams: Option<u32>,
    max_request_bytes: Option<usize>,
    shutdown_grace_secs: Option<u64>,
    shutdown_close_secs: Option<u64>,
    disconnect_grace_secs: Option<u64>,
    max_disconnect_grace_secs: Option<u64>,
    batch_retention_secs: Option<u64>,
    max_retained_batches: Option<usize>,
    max_retained_bytes: Option<usize>,
    store: Option<String>,
    auth_token: Option<String>,
    blocking_file_io: Option<bool>,
    insecure_no_auth: Option<bool>,
    log_format: Option<LogFormat>,
    metrics_listen: Option<SocketAddr>,
    otlp_endpoint: Option<String>,
    /// `[mcp_servers.<name>]` tables: MCP servers whose tools are registered
    /// as `mcp_<name>_<tool>` (file only: no flag).
    #[serde(default)]
    mcp_servers: BTreeMap<String, McpServerConfig>,
    sandbox_level: Option<SandboxLevel>,
    sandbox_allow_weaker: Option<bool>,
    sandbox_cpu_secs: Option<u64>,
    sandbox_address_space_bytes: Option<u64>,
    sandbox_file_size_bytes: Option<u64>,
    sandbox_max_processes: Option<u64>,
    sandbox_open_files: Option<u64>,
    sandbox_worker_exe: Option<PathBuf>,
    sandbox_extra_read_paths: Option<Vec<PathBuf>>,
}

/// Why the settings are unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error(
        "listen address {addr} is not loopback: set --auth-token (TOOLSCHED_AUTH_TOKEN) or, where the network is already private, --insecure-no-auth"
    )]
    NeedsAuth { addr: SocketAddr },
    #[error("{field} must be greater than 0")]
    Zero { field: &'static str },
    #[error("mcp_servers.{name}: {message}")]
    McpServer { name: String, message: String },
    #[error("store '{prefix}…' is neither 'memory' nor a postgres:// URL")]
    Store { prefix: String },
}

/// The resolved settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    pub workspace: PathBuf,
    pub scheduler: SchedulerConfig,
    pub server: ServerOptions,
    pub log_format: LogFormat,
    /// Where `/metrics` is served, if anywhere.
    pub metrics_listen: Option<SocketAddr>,
    /// The OTLP/gRPC collector traces go to; `None` leaves it to the
    /// `OTEL_EXPORTER_OTLP_*` environment (see `crate::telemetry::init`).
    pub otlp_endpoint: Option<String>,
    /// The operator's policy file, if any.
    pub policy_file: Option<PathBuf>,
    /// Configured MCP servers by name (checked: each has a command or a URL).
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
    /// The PostgreSQL store's URL; `None` is the memory store.
    pub store_url: Option<String>,
}

impl Settings {
    /// Merges flags/environment (already in `args`) over the file over the
    /// defaults, and checks the result.
    pub fn resolve(args: ServeArgs) -> Result<Self, ConfigError> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let defaults = SchedulerConfig::default();
        let server_defaults = ServerOptions::default();
        let listen = args
            .listen
            .or(file.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.parse().unwrap_or_else(|_| unreachable!()));
        let auth_token = args
            .auth_token
            .or(file.auth_token)
            .filter(|t| !t.is_empty());
        let insecure = args.insecure_no_auth || file.insecure_no_auth.unwrap_or(false);
        if !listen.ip().is_loopback() && auth_token.is_none() && !insecure {
            return Err(ConfigError::NeedsAuth { addr: listen });
        }
        let secs = |v: Option<u64>| v.map(Duration::from_secs);
        let confirmation_timeout = match args
            .confirmation_timeout_secs
            .or(file.confirmation_timeout_secs)
        {
            Some(0) => None,
            Some(s) => Some(Duration::from_secs(s)),
            None => defaults.confirmation_timeout,
        };
        let output_cap = args
            .output_cap_bytes
            .or(file.output_cap_bytes)
            .unwrap_or(defaults.output.max_bytes);
        let limit_defaults = ResourceLimits::default();
        let limits = ResourceLimits {
            cpu_secs: args
                .sandbox_cpu_secs
                .or(file.sandbox_cpu_secs)
                .unwrap_or(limit_defaults.cpu_secs),
            address_space_bytes: args
                .sandbox_address_space_bytes
                .or(file.sandbox_address_space_bytes)
                .unwrap_or(limit_defaults.address_space_bytes),
            file_size_bytes: args
                .sandbox_file_size_bytes
                .or(file.sandbox_file_size_bytes)
                .unwrap_or(limit_defaults.file_size_bytes),
            processes: args
                .sandbox_max_processes
                .or(file.sandbox_max_processes)
                .unwrap_or(limit_defaults.processes),
            open_files: args
                .sandbox_open_files
                .or(file.sandbox_open_files)
                .unwrap_or(limit_defaults.open_files),
        };
        // The service's own config is never writable by a command (it
        // could grant itself more on the next start) nor readable outside
        // the workspace (it may hold the auth token).
        let protected_paths = args
            .config
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .collect();
        let sandbox = SandboxConfig {
            level: args
                .sandbox_level
                .or(file.sandbox_level)
                .unwrap_or_default(),
            allow_weaker: args.sandbox_allow_weaker || file.sandbox_allow_weaker.unwrap_or(false),
            limits,
            worker_exe: args.sandbox_worker_exe.or(file.sandbox_worker_exe),
            protected_paths,
            extra_read_paths: if args.sandbox_extra_read_paths.is_empty() {
                file.sandbox_extra_read_paths.unwrap_or_default()
            } else {
                args.sandbox_extra_read_paths
            },
        };
        let scheduler = SchedulerConfig {
            default_mode: args
                .approval_mode
                .or(file.approval_mode)
                .unwrap_or(defaults.default_mode),
            confirmation_timeout,
            execution_timeout: secs(args.execution_timeout_secs.or(file.execution_timeout_secs))
                .unwrap_or(defaults.execution_timeout),
            output: OutputLimits {
                max_bytes: output_cap,
                max_streamed_bytes: output_cap,
            },
            max_calls_per_batch: args
                .max_calls_per_batch
                .or(file.max_calls_per_batch)
                .unwrap_or(defaults.max_calls_per_batch),
            max_sessions: args
                .max_sessions
                .or(file.max_sessions)
                .unwrap_or(defaults.max_sessions),
            session_idle_ttl: secs(args.session_idle_ttl_secs.or(file.session_idle_ttl_secs))
                .unwrap_or(defaults.session_idle_ttl),
            sandbox: std::sync::Arc::new(Sandbox::new(sandbox)),
            blocking_file_io: args.blocking_file_io || file.blocking_file_io.unwrap_or(false),
            disconnect_grace: secs(args.disconnect_grace_secs.or(file.disconnect_grace_secs))
                .unwrap_or(defaults.disconnect_grace),
            max_disconnect_grace: secs(
                args.max_disconnect_grace_secs
                    .or(file.max_disconnect_grace_secs),
            )
            .unwrap_or(defaults.max_disconnect_grace),
            retention: crate::store::Retention {
                completed_for: secs(args.batch_retention_secs.or(file.batch_retention_secs))
                    .unwrap_or(defaults.retention.completed_for),
                max_batches_per_session: args
                    .max_retained_batches
                    .or(file.max_retained_batches)
                    .unwrap_or(defaults.retention.max_batches_per_session),
                max_bytes_per_session: args
                    .max_retained_bytes
                    .or(file.max_retained_bytes)
                    .unwrap_or(defaults.retention.max_bytes_per_session),
            },
            // Connected in main (from `store_url`): connecting is async.
            store: None,
        };
        for (field, value) in [
            (
                "execution_timeout_secs",
                scheduler.execution_timeout.as_secs(),
            ),
            ("output_cap_bytes", output_cap as u64),
            ("max_calls_per_batch", scheduler.max_calls_per_batch as u64),
            ("max_sessions", scheduler.max_sessions as u64),
            ("sandbox_cpu_secs", limits.cpu_secs),
            ("sandbox_address_space_bytes", limits.address_space_bytes),
            ("sandbox_file_size_bytes", limits.file_size_bytes),
            ("sandbox_max_processes", limits.processes),
            ("sandbox_open_files", limits.open_files),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero { field });
            }
        }
        for (name, server) in &file.mcp_servers {
            server
                .check(name)
                .map_err(|message| ConfigError::McpServer {
                    name: name.clone(),
                    message,
                })?;
        }
        let server = ServerOptions {
            auth_token,
            max_concurrent_streams: args
                .max_concurrent_streams
                .or(file.max_concurrent_streams)
                .unwrap_or(server_defaults.max_concurrent_streams),
            max_request_bytes: args
                .max_request_bytes
                .or(file.max_request_bytes)
                .unwrap_or(server_defaults.max_request_bytes),
            shutdown_grace: secs(args.shutdown_grace_secs.or(file.shutdown_grace_secs))
                .unwrap_or(server_defaults.shutdown_grace),
            shutdown_close: secs(args.shutdown_close_secs.or(file.shutdown_close_secs))
                .unwrap_or(server_defaults.shutdown_close),
        };
        Ok(Settings {
            listen,
            workspace: args
                .workspace
                .or(file.workspace)
                .unwrap_or_else(|| PathBuf::from(".")),
            scheduler,
            server,
            log_format: args
                .log_format
                .or(file.log_format)
                .unwrap_or(LogFormat::Text),
            metrics_listen: args.metrics_listen.or(file.metrics_listen),
            otlp_endpoint: args
                .otlp_endpoint
                .or(file.otlp_endpoint)
                .filter(|e| !e.trim().is_empty()),
            policy_file: args.policy_file.or(file.policy_file),
            mcp_servers: file.mcp_servers,
            store_url: store_url(args.store.or(file.store))?,
        })
    }
}

/// `memory` (or nothing) is `None`; a PostgreSQL URL is kept as given. An
/// error shows only a short prefix (a URL may hold a password).
fn store_url(given: Option<String>) -> Result<Option<String>, ConfigError> {
    match given.as_deref().map(str::trim) {
        None | Some("" | "memory") => Ok(None),
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            Ok(Some(url.to_string()))
        }
        Some(other) => Err(ConfigError::Store {
            prefix: other.chars().take(12).collect(),
        }),
    }
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace_and_retention_from_the_file_and_the_flag_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            "disconnect_grace_secs = 30\nbatch_retention_secs = 60\nmax_retained_batches = 5\nmax_retained_bytes = 1000\nmax_disconnect_grace_secs = 90\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(file),
            disconnect_grace_secs: Some(7),
            ..ServeArgs::default()
        };
        let s = Settings::resolve(args).unwrap().scheduler;
        assert_eq!(s.disconnect_grace, Duration::from_secs(7));
        assert_eq!(s.max_disconnect_grace, Duration::from_secs(90));
        assert_eq!(
            s.retention,
            crate::store::Retention {
                completed_for: Duration::from_secs(60),
                max_batches_per_session: 5,
                max_bytes_per_session: 1000,
            }
        );
        let defaults = Settings::resolve(ServeArgs::default()).unwrap().scheduler;
        assert_eq!(defaults.disconnect_grace, Duration::ZERO);
        assert_eq!(defaults.retention, crate::store::Retention::default());
    }

    #[test]
    fn flags_beat_file_and_non_loopback_needs_auth() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            "execution_timeout_secs = 7\nmax_sessions = 3\nconfirmation_timeout_secs = 0\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(file.clone()),
            max_sessions: Some(9),
            ..ServeArgs::default()
        };
        let s = Settings::resolve(args).unwrap();
        assert_eq!(s.scheduler.execution_timeout, Duration::from_secs(7));
        assert_eq!(s.scheduler.max_sessions, 9);
        assert_eq!(s.scheduler.confirmation_timeout, None);
        assert_eq!(s.otlp_endpoint, None);
        assert!(!s.scheduler.blocking_file_io);
        assert_eq!(s.server.shutdown_close, Duration::from_secs(5));

        std::fs::write(&file, "blocking_file_io = true\nshutdown_close_secs = 2\n").unwrap();
        let args = ServeArgs {
            config: Some(file.clone()),
            shutdown_close_secs: Some(1),
            ..ServeArgs::default()
        };
        let s = Settings::resolve(args).unwrap();
        assert!(s.scheduler.blocking_file_io);
        assert_eq!(s.server.shutdown_close, Duration::from_secs(1));

        std::fs::write(&file, "otlp_endpoint = \"http://file:4317\"\n").unwrap();
        let args = ServeArgs {
            config: Some(file.clone()),
            ..ServeArgs::default()
        };
        let s = Settings::resolve(args).unwrap();
        assert_eq!(s.otlp_endpoint.as_deref(), Some("http://file:4317"));
        let args = ServeArgs {
            config: Some(file.clone()),
            otlp_endpoint: Some("http://flag:4317".into()),
            ..ServeArgs::default()
        };
        let s = Settings::resolve(args).unwrap();
        assert_eq!(s.otlp_endpoint.as_deref(), Some("http://flag:4317"));

        let args = ServeArgs {
            listen: Some("0.0.0.0:1".parse().unwrap()),
            ..ServeArgs::default()
        };
        assert!(matches!(
            Settings::resolve(args),
            Err(ConfigError::NeedsAuth { .. })
        ));

        std::fs::write(
            &file,
            "[mcp_servers.fs]\ncommand = \"mcp-fs\"\nargs = [\"/srv\"]\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(file.clone()),
            ..ServeArgs::default()
        };
        let s = Settings::resolve(args).unwrap();
        assert_eq!(s.mcp_servers["fs"].command.as_deref(), Some("mcp-fs"));
        assert_eq!(s.mcp_servers["fs"].args, ["/srv"]);
        std::fs::write(&file, "[mcp_servers.fs]\nargs = []\n").unwrap();
        let args = ServeArgs {
            config: Some(file.clone()),
            ..ServeArgs::default()
        };
        let err = Settings::resolve(args).unwrap_err().to_string();
        assert!(err.contains("mcp_servers.fs: set command"), "{err}");

        std::fs::write(&file, "no_such_key = 1\n").unwrap();
        let args = ServeArgs {
            config: Some(file),
            ..ServeArgs::default()
        };
        let err = Settings::resolve(args).unwrap_err().to_string();
        assert!(err.contains("no_such_key"), "{err}");
    }
}
