//! MCP servers as tool providers.
//!
//! Each configured server (a stdio child process or a streamable-HTTP URL)
//! gets a supervisor task ([`connection`]) that connects with the official
//! Rust SDK (`rmcp`), lists the server's tools, relists them when the server
//! sends `notifications/tools/list_changed`, and restarts the server with
//! backoff when it exits or drops the connection. Every tool is registered as
//! `mcp_<server>_<tool>` ([`tool`]) with the server's description and input
//! schema; the [`McpManager`] rebuilds the [`Registry`] (built-ins plus every
//! server's tools) and swaps it into the [`SharedRegistry`] the scheduler
//! reads at the start of each batch.
//!
//! A server that cannot start does not stop the service: its tools are
//! absent, the reason is logged and kept in [`McpManager::statuses`].
//!
//! Not here: whether a call may run (`policy` sees `Subject::Mcp` with the
//! configured server name) and when (`scheduler`).

mod connection;
mod tool;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{Registry, SharedRegistry, Tool};

pub use tool::{McpTool, registered_name};

/// How long connecting (spawn or HTTP, `initialize`, `tools/list`) may take
/// before the attempt counts as failed.
pub const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 30_000;

/// One `[mcp_servers.<name>]` table of the config file. Exactly one of
/// `command` (stdio) and `url` (streamable HTTP) is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Program of a stdio server, found on `PATH` when not a path.
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment added to the few variables a stdio server inherits
    /// (`PATH`, `HOME`, locale, …; see [`INHERITED_ENV`]).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory of a stdio server [default: the service's].
    pub cwd: Option<PathBuf>,
    /// URL of a streamable-HTTP server (`http://` only in this build: the
    /// HTTP client is built without TLS).
    pub url: Option<String>,
    /// HTTP headers sent with every request to `url` (e.g. `Authorization`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Milliseconds a call may go without a result or a progress
    /// notification; progress restarts this clock [default, and upper
    /// bound: the service's execution timeout, whose guard in the scheduler
    /// also restarts on progress].
    pub timeout_ms: Option<u64>,
    /// Milliseconds a call may take in all, progress or not [default: no
    /// limit beyond `timeout_ms`].
    pub max_total_time_ms: Option<u64>,
    /// Milliseconds a start (connect, initialize, list tools) may take
    /// [default: 30000].
    pub startup_timeout_ms: Option<u64>,
    /// Trust the server's `readOnlyHint` annotations: its read-only tools
    /// then run without approval (and in plan mode). Untrusted servers'
    /// tools always ask in default mode, as in Gemini CLI.
    #[serde(default)]
    pub trust: bool,
}

/// Environment variables a stdio server inherits from the service; all
/// others (tokens, credentials of the service itself) are withheld.
pub const INHERITED_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TERM",
];

/// How a server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

impl McpServerConfig {
    /// Checks the table: a valid name, exactly one of `command` and `url`,
    /// non-zero limits. The error says what to change.
    pub fn check(&self, name: &str) -> Result<(), String> {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!(
                "server name '{name}' must be non-empty ASCII letters, digits, '-' or '_'"
            ));
        }
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => {
                return Err("set either command (stdio) or url (HTTP), not both".into());
            }
            (None, None) => return Err("set command (stdio) or url (HTTP)".into()),
            (Some(c), None) if c.trim().is_empty() => return Err("command is empty".into()),
            (None, Some(u)) if !u.starts_with("http://") => {
                return Err(format!(
                    "url '{u}' must start with http:// (this build's MCP HTTP client has no TLS)"
                ));
            }
            _ => {}
        }
        for (field, value) in [
            ("timeout_ms", self.timeout_ms),
            ("max_total_time_ms", self.max_total_time_ms),
            ("startup_timeout_ms", self.startup_timeout_ms),
        ] {
            if value == Some(0) {
                return Err(format!("{field} must be greater than 0"));
            }
        }
        Ok(())
    }

    pub(crate) fn transport(&self) -> Transport {
        match (&self.command, &self.url) {
            (Some(command), _) => Transport::Stdio {
                command: command.clone(),
                args: self.args.clone(),
                env: self.env.clone(),
                cwd: self.cwd.clone(),
            },
            (None, url) => Transport::Http {
                url: url.clone().unwrap_or_default(),
                headers: self.headers.clone(),
            },
        }
    }

    /// The inactivity timeout of a call under the service's execution
    /// timeout `execution`: `timeout_ms`, at most `execution`. (Beyond it the
    /// scheduler's guard would end the call first, without telling the
    /// server.)
    pub fn call_timeout(&self, execution: Duration) -> Duration {
        self.timeout_ms
            .map_or(execution, |ms| Duration::from_millis(ms).min(execution))
    }

    /// The maximum total time of a call, if any.
    pub fn max_total_time(&self) -> Option<Duration> {
        self.max_total_time_ms.map(Duration::from_millis)
    }

    pub(crate) fn startup_timeout(&self) -> Duration {
        Duration::from_millis(
            self.startup_timeout_ms
                .unwrap_or(DEFAULT_STARTUP_TIMEOUT_MS),
        )
    }
}

/// Where a server stands, for logs and operators.
#[derive(Debug, Clone, PartialEq)]
pub enum McpServerStatus {
    /// The first connection attempt has not finished yet.
    Starting,
    /// Connected; `tools` of its tools are registered; `restarts` counts the
    /// failures before this connection.
    Ready { tools: usize, restarts: u32 },
    /// Not connected; a restart is scheduled. `reason` names the exit status
    /// and the last stderr lines, or the connection error.
    Failed { reason: String, restarts: u32 },
}

/// The MCP servers of the service: their supervisors and the registry they
/// feed. Dropping it does not stop them; the shutdown token does.
#[derive(Clone)]
pub struct McpManager {
    inner: Arc<ManagerInner>,
}

struct ManagerInner {
    /// Built-in tools, present in every rebuilt registry.
    base: Vec<Arc<dyn Tool>>,
    registry: SharedRegistry,
    /// Each connected server's tools; a lock held only to rebuild.
    tools: Mutex<BTreeMap<String, Vec<Arc<dyn Tool>>>>,
    statuses: BTreeMap<String, watch::Sender<McpServerStatus>>,
}

impl McpManager {
    /// Starts a supervisor per server over the tools of `base` and returns
    /// the manager and the registry it keeps current. Connections start in
    /// the background: see [`McpManager::wait_started`]. `shutdown` stops
    /// every server (its process group is killed).
    pub fn start(
        base: &Registry,
        servers: &BTreeMap<String, McpServerConfig>,
        shutdown: CancellationToken,
    ) -> Result<(Self, SharedRegistry), super::RegistryError> {
        let base_tools = base.tools();
        let registry = SharedRegistry::new(Arc::new(Registry::new(base_tools.clone())?));
        let statuses = servers
            .keys()
            .map(|name| (name.clone(), watch::Sender::new(McpServerStatus::Starting)))
            .collect();
        let manager = Self {
            inner: Arc::new(ManagerInner {
                base: base_tools,
                registry: registry.clone(),
                tools: Mutex::new(BTreeMap::new()),
                statuses,
            }),
        };
        for (name, config) in servers {
            tokio::spawn(connection::supervise(
                name.clone(),
                Arc::new(config.clone()),
                manager.clone(),
                shutdown.clone(),
            ));
        }
        Ok((manager, registry))
    }

    /// Waits until every server has finished its first connection attempt
    /// (ready or failed); each attempt is bounded by the server's
    /// `startup_timeout_ms`.
    pub async fn wait_started(&self) {
        for status in self.inner.statuses.values() {
            let mut rx = status.subscribe();
            let _ = rx
                .wait_for(|s| !matches!(s, McpServerStatus::Starting))
                .await;
        }
    }

    /// Every server's status by name.
    pub fn statuses(&self) -> BTreeMap<String, McpServerStatus> {
        self.inner
            .statuses
            .iter()
            .map(|(name, s)| (name.clone(), s.borrow().clone()))
            .collect()
    }

    /// A receiver of `server`'s status changes (`None`: no such server).
    pub fn watch_status(&self, server: &str) -> Option<watch::Receiver<McpServerStatus>> {
        self.inner
            .statuses
            .get(server)
            .map(watch::Sender::subscribe)
    }

    pub(crate) fn set_status(&self, server: &str, status: McpServerStatus) {
        if let Some(s) = self.inner.statuses.get(server) {
            s.send_replace(status);
        }
    }

    /// Replaces `server`'s tools and swaps in a registry of the built-ins
    /// and every server's tools. A name registered twice (two servers whose
    /// names run together, e.g. `a` + `b_c` and `a_b` + `c`) keeps the first
    /// in server order; the other is left out and logged. Returns how many
    /// of `server`'s tools are registered.
    pub(crate) fn set_tools(&self, server: &str, tools: Vec<Arc<dyn Tool>>) -> usize {
        let mut all = self
            .inner
            .tools
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        all.insert(server.to_string(), tools);
        let mut seen: std::collections::BTreeSet<String> = self
            .inner
            .base
            .iter()
            .map(|t| t.declaration().name.clone())
            .collect();
        let mut list = self.inner.base.clone();
        let mut registered = 0;
        for (name, tools) in all.iter() {
            for t in tools {
                let wire = &t.declaration().name;
                if seen.insert(wire.clone()) {
                    list.push(t.clone());
                    if name == server {
                        registered += 1;
                    }
                } else {
                    tracing::warn!(server = %name, tool = %wire, "MCP tool name already registered; this one is left out");
                }
            }
        }
        match Registry::new(list) {
            Ok(registry) => self.inner.registry.store(Arc::new(registry)),
            // Schemas are compiled before they get here; keep the old one.
            Err(e) => tracing::error!(error = %e, "cannot rebuild the registry with MCP tools"),
        }
        registered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct File {
        mcp_servers: BTreeMap<String, McpServerConfig>,
    }

    #[test]
    fn stdio_and_http_tables_parse_and_check() {
        let file: File = toml::from_str(
            r#"
            [mcp_servers.everything]
            command = "npx"
            args = ["-y", "@modelcontextprotocol/server-everything"]
            env = { DEBUG = "1" }
            cwd = "/tmp"
            timeout_ms = 120000
            max_total_time_ms = 900000
            trust = true

            [mcp_servers.search]
            url = "http://127.0.0.1:3001/mcp"
            headers = { Authorization = "Bearer abc" }
            "#,
        )
        .unwrap();
        let e = &file.mcp_servers["everything"];
        e.check("everything").unwrap();
        let execution = Duration::from_secs(300);
        assert_eq!(e.call_timeout(execution), Duration::from_secs(120));
        assert_eq!(
            e.call_timeout(Duration::from_secs(60)),
            Duration::from_secs(60)
        );
        assert_eq!(e.max_total_time(), Some(Duration::from_secs(900)));
        assert!(matches!(e.transport(), Transport::Stdio { ref command, .. } if command == "npx"));
        let s = &file.mcp_servers["search"];
        s.check("search").unwrap();
        assert_eq!(s.call_timeout(execution), execution);
        assert!(!s.trust);
        assert!(
            matches!(s.transport(), Transport::Http { ref headers, .. } if headers["Authorization"] == "Bearer abc")
        );
    }

    #[tokio::test]
    async fn a_name_registered_twice_keeps_the_first_server_in_order() {
        let base = Registry::new(Vec::new()).unwrap();
        let (manager, registry) =
            McpManager::start(&base, &BTreeMap::new(), CancellationToken::new()).unwrap();
        let (_tx, link) = watch::channel(connection::Link::Down {
            reason: "test".into(),
        });
        let schema: Arc<serde_json::Map<String, serde_json::Value>> = Arc::new(
            serde_json::json!({"type": "object"})
                .as_object()
                .unwrap()
                .clone(),
        );
        let tool = |server: &str, name: &'static str| -> Arc<dyn Tool> {
            let t = rmcp::model::Tool::new(name, "d", schema.clone());
            Arc::new(
                McpTool::new(
                    server,
                    Arc::new(McpServerConfig::default()),
                    &t,
                    link.clone(),
                )
                .unwrap(),
            )
        };
        // "a" + "b_c" and "a_b" + "c" both make mcp_a_b_c.
        assert_eq!(
            manager.set_tools("a_b", vec![tool("a_b", "c"), tool("a_b", "d")]),
            2
        );
        assert_eq!(manager.set_tools("a", vec![tool("a", "b_c")]), 1);
        let names: Vec<String> = registry
            .load()
            .declarations()
            .map(|d| d.name.clone())
            .collect();
        assert_eq!(names, ["mcp_a_b_c", "mcp_a_b_d"]);
        let subject = registry
            .load()
            .build("mcp_a_b_c", &Default::default())
            .unwrap()
            .subject();
        assert_eq!(
            subject,
            crate::tools::Subject::Mcp {
                server: "a".into(),
                tool: "b_c".into()
            }
        );
        // A tool with a schema that does not compile is left out.
        let bad = rmcp::model::Tool::new(
            "bad",
            "d",
            Arc::new(serde_json::json!({"type": 5}).as_object().unwrap().clone()),
        );
        assert!(
            McpTool::new(
                "a",
                Arc::new(McpServerConfig::default()),
                &bad,
                link.clone()
            )
            .is_err()
        );
    }

    #[test]
    fn bad_tables_are_refused_with_what_to_change() {
        let both = McpServerConfig {
            command: Some("x".into()),
            url: Some("http://h/".into()),
            ..McpServerConfig::default()
        };
        assert!(both.check("a").unwrap_err().contains("not both"));
        assert!(
            McpServerConfig::default()
                .check("a")
                .unwrap_err()
                .contains("set command")
        );
        let tls = McpServerConfig {
            url: Some("https://h/".into()),
            ..McpServerConfig::default()
        };
        assert!(tls.check("a").unwrap_err().contains("http://"));
        let zero = McpServerConfig {
            command: Some("x".into()),
            timeout_ms: Some(0),
            ..McpServerConfig::default()
        };
        assert!(zero.check("a").unwrap_err().contains("timeout_ms"));
        let ok = McpServerConfig {
            command: Some("x".into()),
            ..McpServerConfig::default()
        };
        assert!(ok.check("a b").unwrap_err().contains("server name"));
        let unknown: Result<File, _> =
            toml::from_str("[mcp_servers.a]\ncommand = \"x\"\ntimeout = 5\n");
        assert!(unknown.err().unwrap().to_string().contains("timeout"));
    }
}
