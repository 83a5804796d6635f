//! Settings from flags, environment variables (`TOOLSCHED_<FLAG>`) and a TOML
//! file: flags beat the environment, which beats the file, which beats the
//! built-in defaults.
//!
//! Every setting is declared once, in the [`settings!`] list below: its
//! flag, environment variable, file key (the same snake_case name) and
//! default. clap reads flags and environment into a [`ServeArgs`], serde
//! reads the file into another, and one generic step ([`ServeArgs::over`])
//! layers them before the defaults fill what is left. What the kernel can
//! enforce is not configuration: the sandbox is probed once, when the
//! scheduler is built (`crate::build_scheduler`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde::Deserialize;

use crate::api::ServerOptions;
use crate::policy::ApprovalMode;
use crate::sandbox::{OutputLimits, ResourceLimits, SandboxConfig, SandboxLevel};
use crate::scheduler::SchedulerConfig;
use crate::tools::mcp::McpServerConfig;

/// Default listen address: loopback only, so a fresh start exposes nothing.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 50051);

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
    /// The session's workspace, on a server with --workspaces-root.
    #[arg(long)]
    pub workspace: Option<String>,
    /// PEM file of the CA that signed the server's certificate: connect
    /// over TLS (the address may say https://).
    #[arg(long)]
    pub ca_cert: Option<std::path::PathBuf>,
    /// PEM client certificate for a server that requires one (mTLS), with
    /// --key.
    #[arg(long, requires = "key")]
    pub cert: Option<std::path::PathBuf>,
    /// PEM private key of --cert.
    #[arg(long, requires = "cert")]
    pub key: Option<std::path::PathBuf>,
    /// Seconds the batch keeps running if the connection drops; the client
    /// re-attaches (WatchBatch) within them [default: the server's].
    #[arg(long)]
    pub disconnect_grace_secs: Option<u32>,
    /// Pairs of tool name and JSON arguments, e.g.
    /// `read_file '{"file_path":"README.md"}' list_directory '{"dir_path":"."}'`.
    #[arg(required = true, num_args = 2.., value_names = ["TOOL", "ARGS_JSON"])]
    pub calls: Vec<String>,
}

/// Declares every setting once: `name: Type = default` (or without a
/// default: unset means off). It makes
/// - [`ServeArgs`]: one `Option` per setting, read by clap (flags and
///   environment) and by serde (the file, unknown keys rejected);
/// - [`ServeArgs::over`]: one layer over another, setting by setting;
/// - `Values`: the merged settings with the defaults filled in.
macro_rules! settings {
    (@type $ty:ty) => { Option<$ty> };
    (@type $ty:ty, $default:expr) => { $ty };
    (@value $v:expr) => { $v };
    (@value $v:expr, $default:expr) => { $v.unwrap_or_else(|| $default) };
    ($( $(#[$attr:meta])* $name:ident : $ty:ty $(= $default:expr)? ),* $(,)?) => {
        /// Flags of `serve`, and keys of its config file: every setting
        /// optional (unset falls through to the next layer). Every flag also
        /// reads `TOOLSCHED_<NAME>`.
        #[derive(Debug, Clone, Default, Args, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct ServeArgs {
            $( $(#[$attr])* pub $name: Option<$ty>, )*
        }

        impl ServeArgs {
            /// `self` over `lower`: each setting `self` leaves unset comes
            /// from `lower`.
            pub fn over(self, lower: ServeArgs) -> ServeArgs {
                ServeArgs { $( $name: self.$name.or(lower.$name), )* }
            }

            /// The defaults under what is set.
            fn values(self) -> Values {
                Values { $( $name: settings!(@value self.$name $(, $default)?), )* }
            }
        }

        /// Every setting merged, the defaults filled in. (The token's two
        /// settings are read before the merge, to name where it came from.)
        #[allow(dead_code)]
        struct Values {
            $( $name: settings!(@type $ty $(, $default)?), )*
        }
    };
}

settings! {
    /// Address to listen on [default: 127.0.0.1:50051]. A non-loopback address
    /// needs --auth-token (or --insecure-no-auth).
    #[arg(long, env = "TOOLSCHED_LISTEN")]
    listen: SocketAddr = DEFAULT_LISTEN,
    /// Workspace root: tools act inside it only [default: current directory].
    #[arg(long, env = "TOOLSCHED_WORKSPACE")]
    workspace: PathBuf = PathBuf::from("."),
    /// TOML config file with the same keys as these flags (snake_case).
    #[arg(long, env = "TOOLSCHED_CONFIG")]
    #[serde(skip)]
    config: PathBuf,
    /// Approval mode of new sessions: default, auto_edit, yolo, plan.
    #[arg(long, env = "TOOLSCHED_APPROVAL_MODE")]
    approval_mode: ApprovalMode = SchedulerConfig::default().default_mode,
    /// Policy rules (TOML) over the built-in defaults; reloaded on change
    /// and on SIGHUP [default: built-in policy only].
    #[arg(long, env = "TOOLSCHED_POLICY_FILE")]
    policy_file: PathBuf,
    /// Seconds an approval prompt waits before the call is cancelled; 0 = wait
    /// forever [default: 600].
    #[arg(long, env = "TOOLSCHED_CONFIRMATION_TIMEOUT_SECS")]
    confirmation_timeout_secs: u64 = SchedulerConfig::default()
        .confirmation_timeout
        .map_or(0, |d| d.as_secs()),
    /// Longest a call may execute, in seconds [default: 300].
    #[arg(long, env = "TOOLSCHED_EXECUTION_TIMEOUT_SECS")]
    execution_timeout_secs: u64 = SchedulerConfig::default().execution_timeout.as_secs(),
    /// Bytes of a command's output kept (head and tail) [default: 1048576].
    #[arg(long, env = "TOOLSCHED_OUTPUT_CAP_BYTES")]
    output_cap_bytes: usize = SchedulerConfig::default().output.max_bytes,
    /// Calls in one batch [default: 128].
    #[arg(long, env = "TOOLSCHED_MAX_CALLS_PER_BATCH")]
    max_calls_per_batch: usize = SchedulerConfig::default().max_calls_per_batch,
    /// Live sessions; at the cap a new one evicts the least recently used
    /// idle session (one with no open stream) [default: 10000].
    #[arg(long, env = "TOOLSCHED_MAX_SESSIONS")]
    max_sessions: usize = SchedulerConfig::default().max_sessions,
    /// Seconds an idle session is kept (mode, rules, topic) [default: 1800].
    #[arg(long, env = "TOOLSCHED_SESSION_IDLE_TTL_SECS")]
    session_idle_ttl_secs: u64 = SchedulerConfig::default().session_idle_ttl.as_secs(),
    /// HTTP/2 streams per connection [default: 1024].
    #[arg(long, env = "TOOLSCHED_MAX_CONCURRENT_STREAMS")]
    max_concurrent_streams: u32 = ServerOptions::default().max_concurrent_streams,
    /// Largest request message in bytes [default: 4194304].
    #[arg(long, env = "TOOLSCHED_MAX_REQUEST_BYTES")]
    max_request_bytes: usize = ServerOptions::default().max_request_bytes,
    /// Largest message sent, in bytes: an event over it has its largest
    /// strings cut, with a note (a default gRPC client receives at most
    /// 4 MiB) [default: 4194304].
    #[arg(long, env = "TOOLSCHED_MAX_EVENT_BYTES")]
    max_event_bytes: usize = ServerOptions::default().max_event_bytes,
    /// Seconds without anything from a client before the server pings its
    /// connection (HTTP/2 PING) [default: 30].
    #[arg(long, env = "TOOLSCHED_HTTP2_KEEPALIVE_INTERVAL_SECS")]
    http2_keepalive_interval_secs: u64 = ServerOptions::default().http2_keepalive_interval.as_secs(),
    /// Seconds a ping may go unanswered before the connection is closed and
    /// its batches are cancelled as disconnected [default: 20].
    #[arg(long, env = "TOOLSCHED_HTTP2_KEEPALIVE_TIMEOUT_SECS")]
    http2_keepalive_timeout_secs: u64 = ServerOptions::default().http2_keepalive_timeout.as_secs(),
    /// Seconds running batches get after SIGTERM before they are cancelled
    /// [default: 10].
    #[arg(long, env = "TOOLSCHED_SHUTDOWN_GRACE_SECS")]
    shutdown_grace_secs: u64 = ServerOptions::default().shutdown_grace.as_secs(),
    /// After the grace, seconds streams and connections get to close before
    /// they are dropped (a client not reading, an open health Watch)
    /// [default: 5].
    #[arg(long, env = "TOOLSCHED_SHUTDOWN_CLOSE_SECS")]
    shutdown_close_secs: u64 = ServerOptions::default().shutdown_close.as_secs(),
    // -- batches that outlive their connection (issue 13) --
    /// Seconds a batch runs on after its last stream went away, when its
    /// request sets no disconnect_grace_secs; 0 cancels it at once
    /// [default: 0].
    #[arg(long, env = "TOOLSCHED_DISCONNECT_GRACE_SECS")]
    disconnect_grace_secs: u64 = SchedulerConfig::default().disconnect_grace.as_secs(),
    /// Longest disconnect grace a request may ask for, in seconds: a
    /// detached batch holds its processes that long [default: 600].
    #[arg(long, env = "TOOLSCHED_MAX_DISCONNECT_GRACE_SECS")]
    max_disconnect_grace_secs: u64 = SchedulerConfig::default().max_disconnect_grace.as_secs(),
    /// Seconds a completed batch stays watchable and its request_id
    /// replayable [default: 300].
    #[arg(long, env = "TOOLSCHED_BATCH_RETENTION_SECS")]
    batch_retention_secs: u64 = crate::store::Retention::default().completed_for.as_secs(),
    /// Batches retained per session, oldest completed dropped first
    /// [default: 64].
    #[arg(long, env = "TOOLSCHED_MAX_RETAINED_BATCHES")]
    max_retained_batches: usize = crate::store::Retention::default().max_batches_per_session,
    /// Estimated log bytes retained per session, oldest completed batch
    /// dropped first [default: 67108864].
    #[arg(long, env = "TOOLSCHED_MAX_RETAINED_BYTES")]
    max_retained_bytes: usize = crate::store::Retention::default().max_bytes_per_session,
    /// Where batches, logs, request ids and answers are kept: `memory`
    /// (this process) or a PostgreSQL URL `postgres://…` (restarts and
    /// replicas) [default: memory].
    #[arg(long, env = "TOOLSCHED_STORE", hide_env_values = true)]
    store: String,
    /// Seconds a replica's lease on a session lasts unrenewed (a replica
    /// that died holds its sessions at most this long; renewed every third
    /// of it) [default: 10].
    #[arg(long, env = "TOOLSCHED_STORE_LEASE_SECS")]
    store_lease_secs: u64 = crate::store::LEASE_TTL.as_secs(),
    /// Milliseconds between a tail's reads of the store when nothing woke
    /// it (`store::TAIL_POLL`). Hidden: for tests, which set it very long
    /// to show that notifications alone carry a relayed batch to its end.
    #[arg(long, env = "TOOLSCHED_STORE_TAIL_POLL_MS", hide = true)]
    store_tail_poll_ms: u64 = crate::store::TAIL_POLL.as_millis() as u64,
    /// Directory where the whole output of a shell command beyond
    /// --output-cap-bytes is kept for read_file [default: a private temp
    /// directory, removed when the server stops].
    #[arg(long, env = "TOOLSCHED_KEPT_OUTPUT_DIR")]
    kept_output_dir: PathBuf,
    /// Bytes of one command's whole output kept beyond the cap; 0 keeps
    /// none [default: 67108864].
    #[arg(long, env = "TOOLSCHED_MAX_KEPT_OUTPUT_BYTES")]
    max_kept_output_bytes: u64 = crate::tools::kept::KeptOutputConfig::default().per_call,
    /// Bytes of kept output per session, its oldest removed first
    /// [default: 268435456].
    #[arg(long, env = "TOOLSCHED_MAX_KEPT_OUTPUT_SESSION_BYTES")]
    max_kept_output_session_bytes: u64 =
        crate::tools::kept::KeptOutputConfig::default().per_session,
    /// Seconds a kept output stays readable [default: 1800].
    #[arg(long, env = "TOOLSCHED_KEPT_OUTPUT_TTL_SECS")]
    kept_output_ttl_secs: u64 = crate::tools::kept::KeptOutputConfig::default().ttl.as_secs(),
    /// Bearer token every ToolScheduler RPC must carry.
    #[arg(long, env = "TOOLSCHED_AUTH_TOKEN", hide_env_values = true)]
    auth_token: String,
    /// File holding the bearer token (e.g. a Kubernetes Secret mounted as a
    /// file); surrounding whitespace is ignored. Not with --auth-token.
    #[arg(long, env = "TOOLSCHED_AUTH_TOKEN_FILE", conflicts_with = "auth_token")]
    auth_token_file: PathBuf,
    /// Allow a non-loopback listen address without authentication.
    #[arg(long, env = "TOOLSCHED_INSECURE_NO_AUTH", num_args = 0..=1,
          require_equals = true, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    insecure_no_auth: bool = false,
    /// Log format: text or json [default: text].
    #[arg(long, env = "TOOLSCHED_LOG_FORMAT")]
    log_format: LogFormat = LogFormat::Text,
    /// Serve Prometheus metrics at http://ADDR/metrics [default: off].
    #[arg(long, env = "TOOLSCHED_METRICS_LISTEN")]
    metrics_listen: SocketAddr,
    /// Export traces over OTLP to this collector, e.g.
    /// http://127.0.0.1:4317 (gRPC, or http/protobuf with
    /// OTEL_EXPORTER_OTLP_PROTOCOL) [default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
    /// or OTEL_EXPORTER_OTLP_ENDPOINT; off when none is set].
    #[arg(long, env = "TOOLSCHED_OTLP_ENDPOINT")]
    otlp_endpoint: String,
    /// Do all file I/O of tools on the blocking thread pool, small reads
    /// included (for a workspace on a network filesystem, where an open can
    /// stall) [default: files up to 64 KiB are read inline].
    #[arg(long, env = "TOOLSCHED_BLOCKING_FILE_IO", num_args = 0..=1,
          require_equals = true, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    blocking_file_io: bool = false,
    /// `[[auth_tokens]]` tables: static bearer tokens by SHA-256 hash, each
    /// with its `tenant` and `principal` (file only: no flag).
    #[arg(skip)]
    auth_tokens: Vec<crate::api::auth::StaticToken> = Vec::new(),
    /// `[jwt]` table: JWT bearer tokens verified against a JWKS file, with
    /// `issuer`, `audience`, `tenant_claim`, `principal_claim`,
    /// `leeway_secs` (file only: no flag).
    #[arg(skip)]
    jwt: crate::api::jwt::JwtConfig,
    /// PEM certificate chain of the listener: serve TLS (with --tls-key);
    /// re-read when the file changes [default: plaintext].
    #[arg(long, env = "TOOLSCHED_TLS_CERT")]
    tls_cert: PathBuf,
    /// PEM private key of --tls-cert; re-read when the file changes.
    #[arg(long, env = "TOOLSCHED_TLS_KEY")]
    tls_key: PathBuf,
    /// PEM CA certificates: require client certificates signed by one
    /// (mTLS), each mapped to a principal by `[[tls_clients]]`.
    #[arg(long, env = "TOOLSCHED_TLS_CLIENT_CA")]
    tls_client_ca: PathBuf,
    /// What names a client certificate: cn (subject common name) or
    /// san_dns (a DNS subject alternative name) [default: cn].
    #[arg(long, env = "TOOLSCHED_TLS_CLIENT_IDENTITY")]
    tls_client_identity: crate::api::tls::ClientIdentity = crate::api::tls::ClientIdentity::Cn,
    /// `[[tls_clients]]` tables: a client certificate `name` is `principal`
    /// of `tenant` (file only: no flag).
    #[arg(skip)]
    tls_clients: Vec<crate::api::tls::TlsClient> = Vec::new(),
    /// Allow bearer tokens on a non-loopback address without TLS (only
    /// where a service mesh terminates TLS in front of the server).
    #[arg(long, env = "TOOLSCHED_ALLOW_PLAINTEXT_BEARER", num_args = 0..=1,
          require_equals = true, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    allow_plaintext_bearer: bool = false,
    /// `[mcp_servers.<name>]` tables: MCP servers whose tools are registered
    /// as `mcp_<name>_<tool>` (file only: no flag).
    #[arg(skip)]
    mcp_servers: BTreeMap<String, McpServerConfig> = BTreeMap::new(),
    /// `[[tenants]]` tables: per tenant, its allowed modes, most permissive
    /// sandbox level, MCP servers, policy file, quotas and the `workspaces`
    /// (names or globs) it may use (file only: no flag).
    #[arg(skip)]
    tenants: Vec<crate::tenant::TenantConfig> = Vec::new(),
    /// What commands may do: read_only, workspace_write, workspace_write_network,
    /// none (no Landlock/seccomp; only where a pod or VM is the boundary)
    /// [default: workspace_write].
    #[arg(long, env = "TOOLSCHED_SANDBOX_LEVEL")]
    sandbox_level: SandboxLevel = SandboxLevel::default(),
    /// Start even when the kernel cannot enforce the sandbox level (commands
    /// then run with what it does enforce; the gap is logged and reported).
    #[arg(long, env = "TOOLSCHED_SANDBOX_ALLOW_WEAKER", num_args = 0..=1,
          require_equals = true, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    sandbox_allow_weaker: bool = false,
    /// Keep protected paths with Landlock alone, without the per-command
    /// mount namespace (read-only .git mounts, a /proc showing only the
    /// command's processes); the fallback where namespaces are unavailable.
    #[arg(long, env = "TOOLSCHED_SANDBOX_LANDLOCK_ONLY", num_args = 0..=1,
          require_equals = true, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    sandbox_landlock_only: bool = false,
    /// CPU seconds per command (RLIMIT_CPU) [default: 300].
    #[arg(long, env = "TOOLSCHED_SANDBOX_CPU_SECS")]
    sandbox_cpu_secs: u64 = ResourceLimits::default().cpu_secs,
    /// Address space per command process in bytes (RLIMIT_AS) [default: 8 GiB].
    #[arg(long, env = "TOOLSCHED_SANDBOX_ADDRESS_SPACE_BYTES")]
    sandbox_address_space_bytes: u64 = ResourceLimits::default().address_space_bytes,
    /// Largest file a command may write, in bytes (RLIMIT_FSIZE) [default: 4 GiB].
    #[arg(long, env = "TOOLSCHED_SANDBOX_FILE_SIZE_BYTES")]
    sandbox_file_size_bytes: u64 = ResourceLimits::default().file_size_bytes,
    /// Processes per command (pids cgroup where delegated, and RLIMIT_NPROC)
    /// [default: 512].
    #[arg(long, env = "TOOLSCHED_SANDBOX_MAX_PROCESSES")]
    sandbox_max_processes: u64 = ResourceLimits::default().processes,
    /// Open files per command process (RLIMIT_NOFILE) [default: 4096].
    #[arg(long, env = "TOOLSCHED_SANDBOX_OPEN_FILES")]
    sandbox_open_files: u64 = ResourceLimits::default().open_files,
    /// The toolsched binary to run as the sandbox worker [default: this one].
    #[arg(long, env = "TOOLSCHED_SANDBOX_WORKER_EXE")]
    sandbox_worker_exe: PathBuf,
    /// Directories commands may read and execute besides the system ones,
    /// e.g. toolchains under a home directory (repeat the flag, or separate
    /// with ':' in the environment variable).
    #[arg(long, env = "TOOLSCHED_SANDBOX_EXTRA_READ_PATHS", value_delimiter = ':')]
    sandbox_extra_read_paths: Vec<PathBuf> = Vec::new(),
    // --- named workspaces (issue 18 item 1) ---
    /// Serve named workspaces: a session works in DIR/<tenant>/<name>
    /// (ScheduleCallsRequest.workspace) instead of --workspace.
    #[arg(long, env = "TOOLSCHED_WORKSPACES_ROOT")]
    workspaces_root: PathBuf,
    /// With --workspaces-root: create a missing workspace (empty, 0700)
    /// instead of refusing it (NOT_FOUND).
    #[arg(long, env = "TOOLSCHED_CREATE_WORKSPACES", num_args = 0..=1,
          require_equals = true, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    create_workspaces: bool = false,
    /// Workspaces kept open at once (an fd and the built-in tools each)
    /// [default: 1024].
    #[arg(long, env = "TOOLSCHED_MAX_OPEN_WORKSPACES")]
    max_open_workspaces: usize = crate::workspaces::DEFAULT_MAX_OPEN_WORKSPACES,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    Json,
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
    #[error(
        "listen address {addr} is not loopback and bearer tokens are configured without TLS: they would cross the network in clear; set --tls-cert/--tls-key, or --allow-plaintext-bearer where a service mesh terminates TLS"
    )]
    BearerInClear { addr: SocketAddr },
    #[error("{0}")]
    Tls(&'static str),
    #[error("{0}")]
    Workspaces(&'static str),
    #[error("{0}")]
    TlsFiles(String),
    #[error("auth_tokens: {0}")]
    AuthTokens(crate::api::auth::TokenConfigError),
    #[error(
        "the auth token {from} is not usable on the non-loopback address {addr}: {reason}; generate one with e.g. `openssl rand -hex 32`"
    )]
    WeakToken {
        addr: SocketAddr,
        from: String,
        reason: String,
    },
    #[error("cannot read the auth token file {path}: {source}")]
    TokenFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{first} and {second} are both set; give the token one way")]
    TokenTwice {
        first: &'static str,
        second: &'static str,
    },
    #[error("{field} must be greater than 0")]
    Zero { field: &'static str },
    #[error(transparent)]
    Tenant(#[from] crate::tenant::TenantConfigError),
    #[error("mcp_servers.{name}: {message}")]
    McpServer { name: String, message: String },
    #[error("store '{prefix}…' is neither 'memory' nor a postgres:// URL")]
    Store { prefix: String },
    #[error(
        "output_cap_bytes = {output_cap} does not fit in one event: at most max_event_bytes - {headroom} = {limit} (raise max_event_bytes too, for clients that receive larger messages)"
    )]
    OutputCapOverEvent {
        output_cap: usize,
        headroom: usize,
        limit: usize,
    },
}

/// Room an event needs besides a call's output (the command, the
/// directory, ids, the structured result): `output_cap_bytes` may be at
/// most `max_event_bytes` minus this.
pub const EVENT_HEADROOM_BYTES: usize = 256 * 1024;

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
    /// How long a session's lease lasts unrenewed, how often a tail reads
    /// unwoken (a durable store).
    pub store_timing: crate::store::StoreTiming,
}

impl Settings {
    /// Layers flags and environment (already in `args`) over the file over
    /// the defaults, and checks the result.
    pub fn resolve(args: ServeArgs) -> Result<Self, ConfigError> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => ServeArgs::default(),
        };
        let (auth_token, token_file) = auth::resolve_token(&args, &file)?;
        let v = args.over(file).values();
        crate::api::auth::Authenticator::new(
            auth_token.as_ref().map(|(t, _)| t.as_str()),
            &v.auth_tokens,
            v.jwt.as_ref(),
        )
        .map_err(ConfigError::AuthTokens)?;
        let tls = match (v.tls_cert, v.tls_key) {
            (Some(cert), Some(key)) => Some(crate::api::tls::TlsSettings {
                cert,
                key,
                client_ca: v.tls_client_ca.clone(),
                client_identity: v.tls_client_identity,
                clients: v.tls_clients.clone(),
            }),
            (None, None) if v.tls_client_ca.is_some() => {
                return Err(ConfigError::Tls(
                    "tls_client_ca needs tls_cert and tls_key (client certificates are a TLS feature)",
                ));
            }
            (None, None) => None,
            _ => {
                return Err(ConfigError::Tls(
                    "tls_cert and tls_key go together: set both or neither",
                ));
            }
        };
        if let Some(tls) = &tls {
            // Checked now, so that a bad file stops start-up with its path.
            crate::api::tls::TlsAcceptor::new(tls)
                .map_err(|e| ConfigError::TlsFiles(e.to_string()))?;
        }
        let bearer = auth_token.is_some() || !v.auth_tokens.is_empty() || v.jwt.is_some();
        let mtls = tls.as_ref().is_some_and(|t| t.client_ca.is_some());
        if !v.listen.ip().is_loopback() {
            match &auth_token {
                None if !v.insecure_no_auth && !bearer && !mtls => {
                    return Err(ConfigError::NeedsAuth { addr: v.listen });
                }
                None => {}
                Some((token, from)) => auth::check_strength(token, from, v.listen)?,
            }
        }
        // After the strength check: a weak token is the first thing to fix.
        if !v.listen.ip().is_loopback() && bearer && tls.is_none() && !v.allow_plaintext_bearer {
            return Err(ConfigError::BearerInClear { addr: v.listen });
        }
        let auth_token = auth_token.map(|(token, _)| token);
        for (field, value) in [
            ("execution_timeout_secs", v.execution_timeout_secs),
            ("output_cap_bytes", v.output_cap_bytes as u64),
            ("max_calls_per_batch", v.max_calls_per_batch as u64),
            ("max_sessions", v.max_sessions as u64),
            ("max_open_workspaces", v.max_open_workspaces as u64),
            ("max_event_bytes", v.max_event_bytes as u64),
            (
                "http2_keepalive_interval_secs",
                v.http2_keepalive_interval_secs,
            ),
            (
                "http2_keepalive_timeout_secs",
                v.http2_keepalive_timeout_secs,
            ),
            ("sandbox_cpu_secs", v.sandbox_cpu_secs),
            ("sandbox_address_space_bytes", v.sandbox_address_space_bytes),
            ("sandbox_file_size_bytes", v.sandbox_file_size_bytes),
            ("sandbox_max_processes", v.sandbox_max_processes),
            ("sandbox_open_files", v.sandbox_open_files),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero { field });
            }
        }
        let limit = v.max_event_bytes.saturating_sub(EVENT_HEADROOM_BYTES);
        if v.output_cap_bytes > limit {
            return Err(ConfigError::OutputCapOverEvent {
                output_cap: v.output_cap_bytes,
                headroom: EVENT_HEADROOM_BYTES,
                limit,
            });
        }
        if v.workspaces_root.is_some() && v.sandbox_level == SandboxLevel::None {
            // Without the sandbox nothing keeps a command of one workspace
            // out of another's.
            return Err(ConfigError::Workspaces(
                "workspaces_root needs a sandbox: with sandbox_level = none nothing keeps a command of one workspace out of another",
            ));
        }
        if v.create_workspaces && v.workspaces_root.is_none() {
            return Err(ConfigError::Workspaces(
                "create_workspaces needs workspaces_root",
            ));
        }
        for (name, server) in &v.mcp_servers {
            server
                .check(name)
                .map_err(|message| ConfigError::McpServer {
                    name: name.clone(),
                    message,
                })?;
        }
        let mut seen = std::collections::BTreeSet::new();
        for tenant in &v.tenants {
            tenant.check(v.approval_mode, &|server| {
                v.mcp_servers.contains_key(server)
            })?;
            if !seen.insert(tenant.name.as_str()) {
                return Err(crate::tenant::TenantConfigError::Duplicate {
                    name: tenant.name.clone(),
                }
                .into());
            }
        }
        // The service's own config is never writable by a command (it
        // could grant itself more on the next start) nor readable, inside
        // the workspace or out (it may hold the auth token); the token file
        // likewise, and the policy file (a command must not rewrite the
        // rules that judge it, nor read them).
        let protected_paths = v
            .config
            .iter()
            .chain(token_file.iter())
            .chain(v.policy_file.iter())
            // The TLS key (a command must not read the server's identity)
            // and the JWKS (nor swap in keys of its own).
            .chain(tls.iter().map(|t| &t.key))
            .chain(v.jwt.iter().map(|j| &j.jwks_file))
            // Tenants' policy files, as the server's.
            .chain(v.tenants.iter().filter_map(|t| t.policy_file.as_ref()))
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .collect();
        let sandbox = SandboxConfig {
            level: v.sandbox_level,
            allow_weaker: v.sandbox_allow_weaker,
            limits: ResourceLimits {
                cpu_secs: v.sandbox_cpu_secs,
                address_space_bytes: v.sandbox_address_space_bytes,
                file_size_bytes: v.sandbox_file_size_bytes,
                processes: v.sandbox_max_processes,
                open_files: v.sandbox_open_files,
            },
            worker_exe: v.sandbox_worker_exe,
            protected_paths,
            extra_read_paths: v.sandbox_extra_read_paths,
            landlock_only: v.sandbox_landlock_only,
        };
        let scheduler = SchedulerConfig {
            default_mode: v.approval_mode,
            confirmation_timeout: Some(v.confirmation_timeout_secs)
                .filter(|s| *s > 0)
                .map(Duration::from_secs),
            execution_timeout: Duration::from_secs(v.execution_timeout_secs),
            output: OutputLimits {
                max_bytes: v.output_cap_bytes,
                max_streamed_bytes: v.output_cap_bytes,
            },
            max_calls_per_batch: v.max_calls_per_batch,
            max_sessions: v.max_sessions,
            session_idle_ttl: Duration::from_secs(v.session_idle_ttl_secs),
            sandbox,
            blocking_file_io: v.blocking_file_io,
            disconnect_grace: Duration::from_secs(v.disconnect_grace_secs),
            max_disconnect_grace: Duration::from_secs(v.max_disconnect_grace_secs),
            retention: crate::store::Retention {
                completed_for: Duration::from_secs(v.batch_retention_secs),
                max_batches_per_session: v.max_retained_batches,
                max_bytes_per_session: v.max_retained_bytes,
            },
            // Connected in main (from `store_url`): connecting is async.
            store: None,
            // Set by `crate::build_scheduler` (the API's codec).
            log_codec: None,
            kept_output: crate::tools::kept::KeptOutputConfig {
                dir: v.kept_output_dir,
                per_call: v.max_kept_output_bytes,
                per_session: v.max_kept_output_session_bytes,
                ttl: Duration::from_secs(v.kept_output_ttl_secs),
            },
            workspaces: v
                .workspaces_root
                .map(|root| crate::workspaces::WorkspacesConfig {
                    root,
                    create: v.create_workspaces,
                    max_open: v.max_open_workspaces,
                    tenants: v.tenants.clone(),
                }),
            tenants: v.tenants,
            // Loaded in main: following a file is async.
            tenant_policies: Default::default(),
        };
        let server = ServerOptions {
            auth_token,
            auth_tokens: v.auth_tokens,
            jwt: v.jwt,
            tls,
            max_concurrent_streams: v.max_concurrent_streams,
            max_request_bytes: v.max_request_bytes,
            max_event_bytes: v.max_event_bytes,
            http2_keepalive_interval: Duration::from_secs(v.http2_keepalive_interval_secs),
            http2_keepalive_timeout: Duration::from_secs(v.http2_keepalive_timeout_secs),
            shutdown_grace: Duration::from_secs(v.shutdown_grace_secs),
            shutdown_close: Duration::from_secs(v.shutdown_close_secs),
        };
        Ok(Settings {
            listen: v.listen,
            workspace: v.workspace,
            scheduler,
            server,
            log_format: v.log_format,
            metrics_listen: v.metrics_listen,
            otlp_endpoint: v.otlp_endpoint.filter(|e| !e.trim().is_empty()),
            policy_file: v.policy_file,
            mcp_servers: v.mcp_servers,
            store_url: store_url(v.store)?,
            store_timing: crate::store::StoreTiming {
                lease_ttl: Duration::from_secs(v.store_lease_secs.max(1)),
                // At most a day: a longer sleep is no different in a test,
                // and a deadline that far never overflows.
                tail_poll: Duration::from_millis(v.store_tail_poll_ms.clamp(1, 86_400_000)),
            },
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

/// The bearer token: where it comes from, and whether it is fit for a
/// network.
mod auth {
    use super::*;

    /// Fewest bytes a token must have on a non-loopback address: 32 random
    /// bytes (or their 64 hex digits) cannot be guessed online, a word can.
    pub const MIN_TOKEN_BYTES: usize = 32;

    /// Words of example and template tokens ("change-me" was the one our own
    /// manifests shipped): a token containing one was never generated.
    const PLACEHOLDERS: &[&str] = &[
        "change-me",
        "changeme",
        "change_me",
        "replace-me",
        "replaceme",
        "placeholder",
        "example",
        "secret",
        "password",
        "your-token",
    ];

    /// The token and a description of its source, flag/environment before
    /// the file, inline before a token file; and the token file's path (to
    /// keep it from commands).
    #[allow(clippy::type_complexity)]
    pub(super) fn resolve_token(
        args: &ServeArgs,
        file: &ServeArgs,
    ) -> Result<(Option<(String, String)>, Option<PathBuf>), ConfigError> {
        if file.auth_token.is_some() && file.auth_token_file.is_some() {
            return Err(ConfigError::TokenTwice {
                first: "auth_token",
                second: "auth_token_file in the config file",
            });
        }
        let inline = |token: &Option<String>, from: &str| {
            token
                .clone()
                .filter(|t| !t.is_empty())
                .map(|t| (t, from.to_string()))
        };
        if let Some(token) = inline(&args.auth_token, "from --auth-token (TOOLSCHED_AUTH_TOKEN)") {
            return Ok((Some(token), None));
        }
        if let Some(path) = &args.auth_token_file {
            return Ok((Some(read_token(path)?), Some(path.clone())));
        }
        if let Some(token) = inline(&file.auth_token, "from auth_token in the config file") {
            return Ok((Some(token), None));
        }
        if let Some(path) = &file.auth_token_file {
            return Ok((Some(read_token(path)?), Some(path.clone())));
        }
        Ok((None, None))
    }

    fn read_token(path: &Path) -> Result<(String, String), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::TokenFile {
            path: path.to_path_buf(),
            source,
        })?;
        let from = format!("in {}", path.display());
        // `kubectl create secret --from-file` and editors keep a final
        // newline; it is not part of the token.
        Ok((text.trim().to_string(), from))
    }

    /// Refuses a token a network attacker could guess: shorter than
    /// [`MIN_TOKEN_BYTES`] or a placeholder. The message names the rule
    /// broken, never the token.
    pub(super) fn check_strength(
        token: &str,
        from: &str,
        addr: SocketAddr,
    ) -> Result<(), ConfigError> {
        let weak = |reason: String| ConfigError::WeakToken {
            addr,
            from: from.to_string(),
            reason,
        };
        let lower = token.to_ascii_lowercase();
        if let Some(word) = PLACEHOLDERS.iter().find(|w| lower.contains(*w)) {
            return Err(weak(format!("it contains the placeholder word '{word}'")));
        }
        if token.len() < MIN_TOKEN_BYTES {
            return Err(weak(format!(
                "it is {} bytes; at least {MIN_TOKEN_BYTES} are needed",
                token.len()
            )));
        }
        let mut bytes = token.bytes();
        let first = bytes.next();
        if bytes.all(|b| Some(b) == first) {
            return Err(weak("it repeats one character".into()));
        }
        Ok(())
    }
}

fn read_file(path: &Path) -> Result<ServeArgs, ConfigError> {
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
    fn workspaces_root_and_tenants_from_the_file_and_flags() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            "workspaces_root = \"/srv/ws\"\nmax_open_workspaces = 8\n\n[[tenants]]\nname = \"acme\"\nworkspaces = [\"main\", \"proj-*\"]\n\n[[tenants]]\nname = \"beta\"\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(file.clone()),
            create_workspaces: Some(true),
            ..ServeArgs::default()
        };
        let ws = Settings::resolve(args)
            .unwrap()
            .scheduler
            .workspaces
            .unwrap();
        assert_eq!(ws.root, PathBuf::from("/srv/ws"));
        assert!(ws.create);
        assert_eq!(ws.max_open, 8);
        assert_eq!(
            ws.tenants,
            [
                crate::tenant::TenantConfig {
                    name: "acme".into(),
                    workspaces: vec!["main".into(), "proj-*".into()],
                    ..Default::default()
                },
                crate::tenant::TenantConfig {
                    name: "beta".into(),
                    workspaces: vec![],
                    ..Default::default()
                },
            ]
        );
        assert!(
            Settings::resolve(ServeArgs::default())
                .unwrap()
                .scheduler
                .workspaces
                .is_none()
        );
        // Without a sandbox nothing keeps workspaces apart; creating needs
        // a root.
        let none = ServeArgs {
            config: Some(file),
            sandbox_level: Some(SandboxLevel::None),
            ..ServeArgs::default()
        };
        let err = Settings::resolve(none).unwrap_err().to_string();
        assert!(err.starts_with("workspaces_root needs a sandbox"), "{err}");
        let create = ServeArgs {
            create_workspaces: Some(true),
            ..ServeArgs::default()
        };
        let err = Settings::resolve(create).unwrap_err().to_string();
        assert_eq!(err, "create_workspaces needs workspaces_root");
    }

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

    /// One declaration feeds clap and serde: a bool setting is a bare flag,
    /// `--flag=false`, or a file key; the flag beats the file, the file
    /// beats the default, and a key the flag leaves unset comes from the
    /// file.
    #[test]
    fn one_declaration_layers_flags_over_file_over_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            "blocking_file_io = true\nsandbox_allow_weaker = true\nmax_sessions = 5\nsandbox_extra_read_paths = [\"/opt\"]\n",
        )
        .unwrap();
        let cli = Cli::try_parse_from([
            "toolsched",
            "--config",
            file.to_str().unwrap(),
            "--blocking-file-io=false",
            "--insecure-no-auth",
            "--listen",
            "0.0.0.0:7",
        ])
        .unwrap();
        let s = Settings::resolve(cli.serve).unwrap();
        assert!(!s.scheduler.blocking_file_io, "the flag beats the file");
        assert!(s.scheduler.sandbox.allow_weaker, "from the file");
        assert_eq!(s.scheduler.max_sessions, 5);
        assert_eq!(s.listen, "0.0.0.0:7".parse().unwrap());
        assert_eq!(
            s.scheduler.sandbox.extra_read_paths,
            [PathBuf::from("/opt")]
        );
        // Unset everywhere: the defaults of the domain types.
        assert_eq!(
            s.scheduler.execution_timeout,
            SchedulerConfig::default().execution_timeout
        );
        assert_eq!(
            s.server.max_request_bytes,
            ServerOptions::default().max_request_bytes
        );
        assert_eq!(
            s.scheduler.sandbox.protected_paths,
            [file.canonicalize().unwrap()]
        );

        let cli = Cli::try_parse_from([
            "toolsched",
            "serve",
            "--sandbox-extra-read-paths",
            "/a",
            "--sandbox-extra-read-paths",
            "/b",
        ])
        .unwrap();
        let Some(Command::Serve(args)) = cli.command else {
            panic!("serve subcommand");
        };
        let s = Settings::resolve(*args).unwrap();
        assert_eq!(
            s.scheduler.sandbox.extra_read_paths,
            [PathBuf::from("/a"), PathBuf::from("/b")]
        );
        assert_eq!(s.listen, DEFAULT_LISTEN);
        assert!(!s.scheduler.blocking_file_io);

        // A raised output cap must still fit one event.
        let cli = Cli::try_parse_from(["toolsched", "--output-cap-bytes", "4194304"]).unwrap();
        let err = Settings::resolve(cli.serve).unwrap_err().to_string();
        assert_eq!(
            err,
            "output_cap_bytes = 4194304 does not fit in one event: at most max_event_bytes - 262144 = 3932160 (raise max_event_bytes too, for clients that receive larger messages)"
        );
        let cli = Cli::try_parse_from([
            "toolsched",
            "--output-cap-bytes",
            "4194304",
            "--max-event-bytes",
            "8388608",
        ])
        .unwrap();
        let s = Settings::resolve(cli.serve).unwrap();
        assert_eq!(s.server.max_event_bytes, 8 << 20);
        assert_eq!(s.scheduler.output.max_bytes, 4 << 20);
    }

    /// A bearer token crossing a network in clear needs TLS or the explicit
    /// flag; TLS files go in pairs.
    #[test]
    fn a_bearer_token_on_a_network_needs_tls_or_the_explicit_flag() {
        let good = "Zq81f0c4a9d2e7b6a5c3d1e0f9a8b7c6d5e4";
        let resolve = |allow: Option<bool>| {
            Settings::resolve(ServeArgs {
                listen: Some("0.0.0.0:1".parse().unwrap()),
                auth_token: Some(good.into()),
                allow_plaintext_bearer: allow,
                ..ServeArgs::default()
            })
        };
        match resolve(None) {
            Err(e @ ConfigError::BearerInClear { .. }) => {
                let m = e.to_string();
                assert!(
                    m.contains("0.0.0.0:1") && m.contains("--allow-plaintext-bearer"),
                    "{m}"
                );
                assert!(!m.contains(good));
            }
            other => panic!("{:?}", other.map(|s| s.listen)),
        }
        assert!(resolve(Some(true)).is_ok());
        // Loopback: no network to cross.
        assert!(
            Settings::resolve(ServeArgs {
                auth_token: Some(good.into()),
                ..ServeArgs::default()
            })
            .is_ok()
        );
        let only_cert = Settings::resolve(ServeArgs {
            tls_cert: Some("/c.pem".into()),
            ..ServeArgs::default()
        });
        assert_eq!(
            only_cert.map(|_| ()).unwrap_err().to_string(),
            "tls_cert and tls_key go together: set both or neither"
        );
        let only_ca = Settings::resolve(ServeArgs {
            tls_client_ca: Some("/ca.pem".into()),
            ..ServeArgs::default()
        });
        assert_eq!(
            only_ca.map(|_| ()).unwrap_err().to_string(),
            "tls_client_ca needs tls_cert and tls_key (client certificates are a TLS feature)"
        );
    }

    /// On a non-loopback address a placeholder or short token stops
    /// start-up with the rule it broke, never the token; a token file is
    /// read (trimmed), kept from commands, and exclusive with an inline one.
    #[test]
    fn network_tokens_must_be_long_and_not_placeholders() {
        let dir = tempfile::tempdir().unwrap();
        let token_file = dir.path().join("token");
        let resolve = |token: Option<&str>, file: Option<&Path>| {
            Settings::resolve(ServeArgs {
                listen: Some("0.0.0.0:1".parse().unwrap()),
                auth_token: token.map(String::from),
                auth_token_file: file.map(Path::to_path_buf),
                allow_plaintext_bearer: Some(true),
                ..ServeArgs::default()
            })
        };
        let weak = |r: Result<Settings, ConfigError>| match r {
            Err(e @ ConfigError::WeakToken { .. }) => e.to_string(),
            other => panic!("{:?}", other.map(|s| s.server.auth_token)),
        };
        let message = weak(resolve(Some("change-me"), None));
        assert!(
            message.contains("from --auth-token (TOOLSCHED_AUTH_TOKEN)")
                && message.contains("the placeholder word 'change-me'")
                && message.contains("0.0.0.0:1"),
            "{message}"
        );
        let message = weak(resolve(Some("s3cret-but-short"), None));
        assert!(
            message.contains("it is 16 bytes; at least 32 are needed"),
            "{message}"
        );
        assert!(!message.contains("s3cret-but-short"), "{message}");
        let message = weak(resolve(Some(&"a".repeat(40)), None));
        assert!(message.contains("repeats one character"), "{message}");

        let good = "4f9c2a7e1b3d5f60718293a4b5c6d7e8f9011223344556677";
        std::fs::write(&token_file, format!("{good}\n")).unwrap();
        let s = resolve(None, Some(&token_file)).unwrap();
        assert_eq!(s.server.auth_token.as_deref(), Some(good));
        let canonical = std::fs::canonicalize(&token_file).unwrap();
        assert!(s.scheduler.sandbox.protected_paths.contains(&canonical));
        std::fs::write(&token_file, "CHANGE-ME-CHANGE-ME-CHANGE-ME-CHANGE-ME\n").unwrap();
        let message = weak(resolve(None, Some(&token_file)));
        assert!(
            message.contains(&format!("in {}", token_file.display())),
            "{message}"
        );
        let missing = dir.path().join("missing");
        assert!(matches!(
            resolve(None, Some(&missing)),
            Err(ConfigError::TokenFile { .. })
        ));
        // On loopback nothing is exposed: a short token is the user's call.
        let s = Settings::resolve(ServeArgs {
            auth_token: Some("dev".into()),
            ..ServeArgs::default()
        })
        .unwrap();
        assert_eq!(s.server.auth_token.as_deref(), Some("dev"));

        let config = dir.path().join("c.toml");
        std::fs::write(
            &config,
            format!(
                "auth_token = \"{good}\"\nauth_token_file = \"{}\"\n",
                token_file.display()
            ),
        )
        .unwrap();
        let twice = Settings::resolve(ServeArgs {
            config: Some(config),
            ..ServeArgs::default()
        });
        assert!(matches!(twice, Err(ConfigError::TokenTwice { .. })));
    }

    /// The config files the Kubernetes manifests ship are valid config files
    /// (unknown keys are errors, so a renamed key would stop the pod).
    #[test]
    fn shipped_kubernetes_config_files_parse() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
        for file in [
            "base/toolsched.toml",
            "overlays/dev/toolsched.toml",
            "overlays/production/toolsched.toml",
            "overlays/tenants/toolsched.toml",
        ] {
            let parsed = read_file(&root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(
                parsed.auth_token_file.as_deref(),
                Some(Path::new("/var/run/secrets/toolsched/auth/token")),
                "{file}"
            );
            assert_eq!(parsed.auth_token, None, "{file}: no token in a ConfigMap");
            assert_eq!(
                parsed.sandbox_address_space_bytes,
                Some(1 << 30),
                "{file}: fits the pod's 2 GiB"
            );
        }
        let policy = root.join("base/policy.toml");
        crate::policy::Policy::from_file(&policy).unwrap();
        // The tenants overlay's tables pass the start-up checks.
        let tenants = read_file(&root.join("overlays/tenants/toolsched.toml")).unwrap();
        let names: Vec<_> = tenants
            .tenants
            .iter()
            .flatten()
            .map(|t| {
                t.check(ApprovalMode::Default, &|_| false)
                    .map(|id| id.to_string())
            })
            .collect();
        assert_eq!(names, [Ok("acme".to_string()), Ok("beta".to_string())]);
        assert_eq!(
            tenants.jwt.map(|j| j.jwks_file),
            Some(PathBuf::from(
                "/var/run/secrets/toolsched/tenants/jwks.json"
            ))
        );
    }

    /// `[[tenants]]` tables: parsed with their quotas, checked against the
    /// server (its default mode allowed, configured MCP servers, no zero
    /// quota, no name twice), their policy files kept from commands.
    #[test]
    fn tenant_tables_are_parsed_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        let policy = dir.path().join("acme.toml");
        std::fs::write(&policy, "").unwrap();
        let resolve = |text: String| {
            std::fs::write(&file, text).unwrap();
            Settings::resolve(ServeArgs {
                config: Some(file.clone()),
                ..ServeArgs::default()
            })
        };
        let s = resolve(format!(
            "[mcp_servers.docs]\ncommand = \"x\"\n\n[[tenants]]\nname = \"acme\"\nallowed_modes = [\"default\", \"plan\"]\nmax_sandbox_level = \"read_only\"\nmcp_servers = [\"docs\"]\npolicy_file = \"{}\"\nmax_sessions = 3\nmax_executing_calls = 2\nmax_queued_batches = 4\nmax_shell_commands_per_minute = 5\nmax_retained_event_bytes = 1048576\n",
            policy.display()
        ))
        .unwrap();
        let t = &s.scheduler.tenants[0];
        assert_eq!(t.name, "acme");
        assert_eq!(
            t.quotas,
            crate::tenant::TenantQuotas {
                max_sessions: Some(3),
                max_executing_calls: Some(2),
                max_queued_batches: Some(4),
                max_shell_commands_per_minute: Some(5),
                max_retained_event_bytes: Some(1_048_576),
            }
        );
        assert_eq!(t.max_sandbox_level, Some(SandboxLevel::ReadOnly));
        assert!(
            s.scheduler
                .sandbox
                .protected_paths
                .contains(&policy.canonicalize().unwrap())
        );
        let err = |text: &str| {
            resolve(text.to_string())
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("[[tenants]]\nname = \"a\"\nallowed_modes = [\"plan\"]\n"),
            "tenants.a: allowed_modes does not include the server's approval_mode default (the mode of a new session)"
        );
        assert_eq!(
            err("[[tenants]]\nname = \"a\"\nmcp_servers = [\"nope\"]\n"),
            "tenants.a: mcp_servers names 'nope', which is not configured"
        );
        assert_eq!(
            err("[[tenants]]\nname = \"a\"\nmax_executing_calls = 0\n"),
            "tenants.a: max_executing_calls must be greater than 0 (leave it out for no quota)"
        );
        assert_eq!(
            err("[[tenants]]\nname = \"a\"\n\n[[tenants]]\nname = \"a\"\n"),
            "tenants: 'a' is configured twice"
        );
        assert_eq!(
            err("[[tenants]]\nname = \"a/b\"\n"),
            "tenants: tenant name may hold only letters, digits, '-', '_' and '.'"
        );
        assert!(err("[[tenants]]\nname = \"a\"\nmax_cpus = 1\n").contains("max_cpus"));
    }
}
