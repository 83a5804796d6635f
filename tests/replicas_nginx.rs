//! Three `toolsched` replicas on one PostgreSQL and one workspace, behind
//! nginx running the deploy overlay's nginx.conf (loopback addresses
//! swapped in): the proxy hashes x-toolsched-session, so every batch of a
//! session reaches the replica holding its lease (a batch reaching another
//! one would be refused UNAVAILABLE while the lease holds).

use crate::replicas_support;
use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use replicas_support::{fresh_database, messages, sql};
use serde_json::json;
use support::{Binary, call, request};
use toolsched::api::pb;
use toolsched::api::pb::tool_scheduler_client::ToolSchedulerClient;

struct Nginx {
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM to the master, which ends its workers (SIGKILL would
        // leave them running).
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}

fn nginx_binary() -> &'static str {
    ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or_else(|| {
            panic!("nginx is required by this test and is not installed: run `bash tests/services.sh` (tests/setup.sh does)")
        })
}

fn start_nginx(replicas: [SocketAddr; 3]) -> (Nginx, SocketAddr) {
    let conf = include_str!("../deploy/kubernetes/overlays/replicas/nginx.conf");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut conf = conf.replace(
        "listen 50051 http2;",
        &format!("listen 127.0.0.1:{port} http2;"),
    );
    for (i, addr) in replicas.iter().enumerate() {
        let name = format!("server toolsched-{i}.toolsched-replicas:50051;");
        assert!(conf.contains(&name), "nginx.conf names {name}");
        conf = conf.replace(&name, &format!("server {addr};"));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
    let child = std::process::Command::new(nginx_binary())
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(dir.path().join("nginx.conf"))
        .arg("-g")
        .arg(format!(
            "daemon off; pid {}/nginx.pid; error_log stderr;",
            dir.path().display()
        ))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start nginx");
    (Nginx { child, _dir: dir }, ([127, 0, 0, 1], port).into())
}

fn with_session<T>(session: &str, body: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(body);
    r.metadata_mut()
        .insert("x-toolsched-session", session.parse().unwrap());
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_nginx_every_batch_of_a_session_reaches_its_owner() {
    let url = fresh_database().await;
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("notes.txt"), "shared\n").unwrap();
    let flags = ["--store", url.as_str()];
    let replicas = [
        Binary::start(workspace.path(), &flags),
        Binary::start(workspace.path(), &flags),
        Binary::start(workspace.path(), &flags),
    ];
    let (_nginx, proxy) = start_nginx([replicas[0].addr, replicas[1].addr, replicas[2].addr]);
    // nginx says nothing when it listens: wait for its port to accept.
    let channel = async {
        loop {
            if let Ok(c) = tonic::transport::Endpoint::from_shared(format!("http://{proxy}"))
                .unwrap()
                .connect()
                .await
            {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let channel = tokio::time::timeout(Duration::from_secs(30), channel)
        .await
        .expect("nginx listening within 30 s");
    let mut client = ToolSchedulerClient::new(channel);

    let sessions: Vec<String> = (0..12).map(|i| format!("s-nginx-{i}")).collect();
    for round in 0..2 {
        for s in &sessions {
            let read = call(
                &format!("r{round}"),
                "read_file",
                json!({"file_path": "notes.txt"}),
            );
            let stream = client
                .schedule_calls(with_session(s, request(s, vec![read])))
                .await
                .unwrap_or_else(|e| panic!("{s} round {round}: {e}"))
                .into_inner();
            let events = messages(stream).await;
            match events.last().and_then(|m| m.event.as_ref()) {
                Some(pb::schedule_calls_response::Event::BatchCompleted(c)) => {
                    assert_eq!(c.responses.len(), 1);
                }
                other => panic!("{s}: {other:?}"),
            }
        }
    }
    // Each session was claimed once (epoch 1: never taken over).
    let db = sql(&url).await;
    let rows = db
        .query(
            "SELECT session_id, epoch FROM toolsched_leases ORDER BY session_id",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), sessions.len());
    for r in rows {
        assert_eq!(r.get::<_, i64>(1), 1, "{}", r.get::<_, String>(0));
    }
}
