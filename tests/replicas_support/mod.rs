//! What the replica tests share: a fresh database on the PostgreSQL that
//! `tests/services.sh` started, the `toolsched` binary started with
//! `--store`, and a TCP relay that can cut the store away.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::watch;
use tonic::transport::Channel;
use toolsched::api::pb;
use toolsched::api::pb::tool_scheduler_client::ToolSchedulerClient;

/// The URL of the test PostgreSQL server. Fails (never skips) when
/// `tests/services.sh` has not run or its server does not answer.
pub fn server_url() -> String {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/.services/postgres.url");
    match std::fs::read_to_string(file) {
        Ok(url) if !url.trim().is_empty() => url.trim().to_string(),
        _ => panic!(
            "PostgreSQL is required by this test and {file} is missing: run `bash tests/services.sh` (tests/setup.sh does)"
        ),
    }
}

/// A new empty database on the test server; its URL.
pub async fn fresh_database() -> String {
    let url = server_url();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!("PostgreSQL at {url} (from tests/services.sh) does not answer: {e}; run `bash tests/services.sh` again")
        });
    tokio::spawn(connection);
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create a test database");
    let base = url.rsplit_once('/').map_or(url.as_str(), |(b, _)| b);
    format!("{base}/{name}")
}

/// A client of `url`'s database (for checking what the store wrote).
pub async fn sql(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(connection);
    client
}

/// A connected client of a server at `addr`.
pub async fn client(addr: SocketAddr) -> ToolSchedulerClient<Channel> {
    ToolSchedulerClient::connect(format!("http://{addr}"))
        .await
        .expect("connect")
}

/// The stream of a batch of one `run_shell_command` call (`call_id`,
/// `command`) in `session`, sent to the server at `addr`.
pub async fn run_shell(
    addr: SocketAddr,
    session: &str,
    call_id: &str,
    command: &str,
) -> tonic::Streaming<toolsched::api::pb::ScheduleCallsResponse> {
    client(addr)
        .await
        .schedule_calls(crate::support::request(
            session,
            vec![crate::support::call(
                call_id,
                "run_shell_command",
                serde_json::json!({ "command": command }),
            )],
        ))
        .await
        .expect("batch accepted")
        .into_inner()
}

/// Starts `command` as call "w" of session `session` on `addr`; returns the
/// stream, the events seen up to the call's Executing with a pid, and that
/// pid (its process group).
pub async fn run_until_executing(
    addr: SocketAddr,
    session: &str,
    command: &str,
) -> (
    tonic::Streaming<toolsched::api::pb::ScheduleCallsResponse>,
    Vec<toolsched::api::pb::schedule_calls_response::Event>,
    i32,
) {
    let mut stream = run_shell(addr, session, "w", command).await;
    let mut seen = Vec::new();
    let pgid = crate::support::until_pid(&mut stream, &mut seen, "w").await;
    (stream, seen, pgid)
}

/// A health client of a server at `addr`.
pub async fn health(addr: SocketAddr) -> tonic_health::pb::health_client::HealthClient<Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    tonic_health::pb::health_client::HealthClient::new(channel)
}

/// Every message of a stream, in order.
pub async fn messages(
    mut stream: tonic::Streaming<pb::ScheduleCallsResponse>,
) -> Vec<pb::ScheduleCallsResponse> {
    let mut out = Vec::new();
    while let Some(m) = stream.message().await.expect("stream message") {
        out.push(m);
    }
    out
}

/// The batch id a stream's BatchAccepted names.
pub fn batch_id(messages: &[pb::ScheduleCallsResponse]) -> String {
    match messages.first().and_then(|m| m.event.as_ref()) {
        Some(pb::schedule_calls_response::Event::BatchAccepted(a)) => a.batch_id.clone(),
        other => panic!("first event is not BatchAccepted: {other:?}"),
    }
}

/// A TCP relay to `target` that can be cut (every connection dropped, new
/// ones closed at once) and restored: a store lost and back.
pub struct Relay {
    pub addr: SocketAddr,
    up: watch::Sender<bool>,
}

impl Relay {
    pub async fn start(target: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind relay");
        let addr = listener.local_addr().expect("relay addr");
        let (up, up_rx) = watch::channel(true);
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !*up_rx.borrow() {
                    continue; // dropped: closed at once
                }
                let mut up_rx = up_rx.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = up_rx.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Self { addr, up }
    }

    /// A relay to the PostgreSQL server of `url`, and `url` through it.
    pub async fn to_store(url: &str) -> (Self, String) {
        let (target, _) = via(url, "127.0.0.1:1".parse().expect("addr"));
        let relay = Self::start(target).await;
        let (_, relayed) = via(url, relay.addr);
        (relay, relayed)
    }

    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    pub fn restore(&self) {
        self.up.send_replace(true);
    }
}

/// The host:port of a postgres:// URL, and the URL with it replaced.
pub fn via(url: &str, relay: SocketAddr) -> (SocketAddr, String) {
    let (scheme, rest) = url.split_once("://").expect("scheme");
    let (userinfo, hostpath) = rest.rsplit_once('@').expect("user@host");
    let (hostport, path) = hostpath.split_once('/').expect("host/path");
    (
        hostport.parse().expect("host:port"),
        format!("{scheme}://{userinfo}@{relay}/{path}"),
    )
}

/// Waits (on the health Watch stream, not a timer) until `service` ("" is
/// the server as a whole) reports
/// `status`.
pub async fn wait_health(
    addr: SocketAddr,
    service: &str,
    status: tonic_health::pb::health_check_response::ServingStatus,
) {
    let mut health = health(addr).await;
    let mut watch = health
        .watch(tonic_health::pb::HealthCheckRequest {
            service: service.into(),
        })
        .await
        .expect("health watch")
        .into_inner();
    let wait = async {
        while let Some(m) = watch.message().await.expect("health message") {
            if m.status == status as i32 {
                return;
            }
        }
        panic!("health watch ended before {status:?}");
    };
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .unwrap_or_else(|_| panic!("health did not become {status:?} within 30 s"));
}
