//! The integration tests, in one test binary: each module is one file of
//! `tests/` (a real server on a loopback port, real clients, processes and
//! files). One binary links the crate and its dependencies once, where one per
//! file linked them 60 times (about 90 MB each: a clean `cargo test` ran out
//! of disk on CI). `clients` and `sandbox_escape` stay binaries of their own:
//! the first is named in the clients' READMEs, the second measures this
//! process's peak memory and runs a fork bomb.
//!
//! Run one file's tests with `cargo test --test integration <file>::`.

mod file_support;
mod mcp_common;
mod replicas_support;
mod support;

mod allocator;
mod approval;
mod audit;
mod auth_token_file;
mod backpressure;
mod bad_input;
mod batch_completed;
mod beneath_race;
mod cancellation;
mod cli_client;
mod disk_full;
mod dropped_at_once;
mod edit_tools;
mod event_bounds;
mod file_tools;
mod frozen_client;
mod grpcurl;
mod idle_sessions;
mod kept_output;
mod large_files;
mod mcp_everything;
mod mcp_policy;
mod mcp_python;
mod metrics;
mod operations;
mod pattern_bounds;
mod policy_approval;
mod policy_client_initiated;
mod policy_engine;
mod policy_invalid_params;
mod policy_props;
mod policy_protected;
mod policy_reload;
mod policy_shell;
mod policy_sighup;
mod python_client;
mod queueing;
mod replicas_durable;
mod replicas_front_door;
mod replicas_lease;
mod replicas_mirror;
mod replicas_nginx;
mod replicas_processes;
mod replicas_routing;
mod replicas_soak;
mod replicas_store;
mod replicas_takeover;
mod resume;
mod sandbox_config;
mod sandbox_entries;
mod sandbox_metadata;
mod sandbox_namespace;
mod sandbox_protected;
mod sandbox_worker;
mod sandbox_zygote;
mod search_tools;
mod session_cap;
mod shell;
mod telemetry;
mod tenant_limits;
mod tenants;
mod tenants_jwt;
mod tenants_tls;
mod tool_declarations;
mod waves;
mod workspaces;
mod workspaces_takeover;
