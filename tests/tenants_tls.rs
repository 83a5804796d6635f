//! TLS on the listener and mTLS (issue 18), with certificates the test makes
//! with `rcgen`: a client certificate of tenant A acts as A; no
//! certificate, or one of another CA, is refused; one the CA signed but no
//! `[[tls_clients]]` maps is UNAUTHENTICATED; a rotated server certificate
//! is served from the next handshake on; grpcurl works as the README shows.

use crate::support;

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use serde_json::json;
use support::*;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use toolsched::api::pb;
use toolsched::api::pb::tool_scheduler_client::ToolSchedulerClient;

/// A CA that signs certificates into `dir`.
struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl Ca {
    fn new(name: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        Self {
            issuer: Issuer::new(params, key),
            pem: cert.pem(),
        }
    }

    /// Writes `<name>.pem` and `<name>.key` signed by this CA: a server
    /// certificate for `sans`, or a client one with the common name `cn`.
    fn sign(&self, dir: &Path, name: &str, cn: &str, sans: &[&str]) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (c, k) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(format!("{name}.pem"));
        std::fs::write(&p, &self.pem).unwrap();
        p
    }
}

async fn connect(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    identity: Option<(&Path, &Path)>,
) -> Result<ToolSchedulerClient<Channel>, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .domain_name("localhost");
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(
            std::fs::read(cert).unwrap(),
            std::fs::read(key).unwrap(),
        ));
    }
    let channel = Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(ToolSchedulerClient::new(channel))
}

fn list(id: &str) -> pb::ScheduleCallsRequest {
    request(
        "main",
        vec![call(id, "list_directory", json!({"dir_path": "."}))],
    )
}

/// What a client without an acceptable certificate gets: the handshake
/// (connect) or the first call fails, never a served call.
async fn refused(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    identity: Option<(&Path, &Path)>,
) -> String {
    match connect(addr, ca_pem, identity).await {
        Err(e) => format!("connect: {e}"),
        Ok(mut client) => {
            let err = client
                .list_tools(pb::ListToolsRequest::default())
                .await
                .expect_err("a call without an acceptable client certificate");
            assert_ne!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
            format!("call: {err}")
        }
    }
}

#[test]
fn mtls_maps_client_certificates_to_tenants_and_refuses_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = Ca::new("toolsched test CA");
    let ca_pem = ca.write(d, "ca");
    let (server_cert, server_key) = ca.sign(d, "server", "toolsched", &["localhost", "127.0.0.1"]);
    let a = ca.sign(d, "a", "agent-a", &[]);
    let b = ca.sign(d, "b", "agent-b", &[]);
    let stranger = ca.sign(d, "stranger", "stranger", &[]);
    let rogue_ca = Ca::new("another CA");
    let rogue = rogue_ca.sign(d, "rogue", "agent-a", &[]);
    let config = d.join("toolsched.toml");
    std::fs::write(
        &config,
        format!(
            "tls_cert = \"{}\"\ntls_key = \"{}\"\ntls_client_ca = \"{}\"\n\
             [[tls_clients]]\nname = \"agent-a\"\ntenant = \"acme\"\nprincipal = \"alice\"\n\
             [[tls_clients]]\nname = \"agent-b\"\ntenant = \"beta\"\nprincipal = \"bob\"\n",
            server_cert.display(),
            server_key.display(),
            ca_pem.display()
        ),
    )
    .unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let binary = Binary::start(workspace.path(), &["--config", config.to_str().unwrap()]);
    let addr = binary.addr;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut client_a = connect(addr, &ca.pem, Some((&a.0, &a.1))).await.unwrap();
        let mut client_b = connect(addr, &ca.pem, Some((&b.0, &b.1))).await.unwrap();
        // A's write waits for approval in A's `main`.
        let mut a_stream = client_a
            .schedule_calls(request(
                "main",
                vec![call(
                    "w1",
                    "write_file",
                    json!({"file_path": "a.txt", "content": "x\n"}),
                )],
            ))
            .await
            .expect("A's certificate is accepted")
            .into_inner();
        let mut seen = Vec::new();
        let prompt = await_prompt(&mut a_stream, &mut seen, "w1").await;
        let confirm = pb::ConfirmRequest {
            session_id: "main".into(),
            call_id: "w1".into(),
            correlation_id: prompt.correlation_id.clone(),
            outcome: pb::ConfirmationOutcome::ProceedOnce as i32,
            new_content: None,
        };
        // B's certificate is tenant beta: A's session does not exist for it.
        let foreign = client_b.confirm(confirm.clone()).await.unwrap_err();
        assert_eq!(foreign.code(), tonic::Code::NotFound);
        assert_eq!(foreign.message(), "no session 'main'");
        // B's own `main` runs beside A's waiting batch.
        let events = collect(
            client_b
                .schedule_calls(list("r"))
                .await
                .unwrap()
                .into_inner(),
        )
        .await;
        assert_eq!(state_name(&terminal(&events, "r")), "success");
        client_a
            .confirm(confirm)
            .await
            .expect("A answers its own prompt");
        let rest = collect(a_stream).await;
        assert_eq!(state_name(&terminal(&rest, "w1")), "success");

        // A certificate of the CA that names nobody configured.
        let mut client = connect(addr, &ca.pem, Some((&stranger.0, &stranger.1)))
            .await
            .unwrap();
        let err = client
            .list_tools(pb::ListToolsRequest::default())
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unauthenticated);
        assert_eq!(
            err.message(),
            "the client certificate names no configured tenant principal (tls_clients)"
        );
        // No certificate, and one of another CA with a configured name.
        let none = refused(addr, &ca.pem, None).await;
        let other = refused(addr, &ca.pem, Some((&rogue.0, &rogue.1))).await;
        eprintln!("no certificate: {none}\nanother CA: {other}");
    });
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("a.txt")).unwrap(),
        "x\n"
    );

    // grpcurl, as the README shows it.
    let grpcurl = venv_tool("grpcurl");
    let out = std::process::Command::new(&grpcurl)
        .args(["-cacert", ca_pem.to_str().unwrap()])
        .args(["-cert", a.0.to_str().unwrap(), "-key", a.1.to_str().unwrap()])
        .args(["-d", r#"{"session_id":"g","calls":[{"id":"1","name":"list_directory","args":{"dir_path":"."}}]}"#])
        .arg(addr.to_string())
        .arg("toolsched.v1.ToolScheduler/ScheduleCalls")
        .output()
        .expect("run grpcurl");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "grpcurl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"batchCompleted\""), "{stdout}");
    assert!(stdout.contains("a.txt"), "A's workspace listed: {stdout}");
    // `toolsched call`, with the same files.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolsched"))
        .args(["call", "--addr", &format!("https://{addr}")])
        .args(["--ca-cert", ca_pem.to_str().unwrap()])
        .args([
            "--cert",
            a.0.to_str().unwrap(),
            "--key",
            a.1.to_str().unwrap(),
        ])
        .args(["--session", "cli", "list_directory", r#"{"dir_path":"."}"#])
        .output()
        .expect("run toolsched call");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "toolsched call: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("a.txt"), "A's workspace listed: {stdout}");
    let out = std::process::Command::new(&grpcurl)
        .args(["-cacert", ca_pem.to_str().unwrap()])
        .arg(addr.to_string())
        .arg("list")
        .output()
        .expect("run grpcurl");
    assert!(
        !out.status.success(),
        "grpcurl without a client certificate is refused"
    );
    assert!(binary.terminate().success());
}

#[test]
fn a_rotated_server_certificate_is_served_from_the_next_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let old_ca = Ca::new("old CA");
    let (cert, key) = old_ca.sign(d, "server", "toolsched", &["localhost", "127.0.0.1"]);
    let workspace = tempfile::tempdir().unwrap();
    let binary = Binary::start(
        workspace.path(),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let addr = binary.addr;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut old = connect(addr, &old_ca.pem, None)
            .await
            .expect("TLS with the old CA");
        let events = collect(old.schedule_calls(list("r")).await.unwrap().into_inner()).await;
        assert_eq!(state_name(&terminal(&events, "r")), "success");
        // Plaintext to a TLS listener is no gRPC.
        let plain = ToolSchedulerClient::connect(format!("http://{addr}")).await;
        if let Ok(mut plain) = plain {
            plain
                .list_tools(pb::ListToolsRequest::default())
                .await
                .expect_err("plaintext to a TLS listener");
        }

        // cert-manager rotates: a new pair from a new CA, written in place.
        let new_ca = Ca::new("new CA");
        new_ca.sign(d, "server", "toolsched", &["localhost", "127.0.0.1"]);
        let mut new = connect(addr, &new_ca.pem, None)
            .await
            .expect("the next handshake serves the new certificate");
        let events = collect(new.schedule_calls(list("r2")).await.unwrap().into_inner()).await;
        assert_eq!(state_name(&terminal(&events, "r2")), "success");
        assert!(
            connect(addr, &old_ca.pem, None).await.is_err(),
            "the old certificate is no longer served"
        );
        // The connection made before the rotation goes on.
        old.list_tools(pb::ListToolsRequest::default())
            .await
            .expect("an established connection keeps working");
    });
    assert!(binary.terminate().success());
}
