//! JWT bearer tokens (issue 18): verified against a JWKS file with RS256 and
//! ES256 keys the test makes with `openssl`; tenant and principal from
//! claims; every refusal UNAUTHENTICATED with a fixed reason, and no token
//! in any log line.

use crate::support;

use std::path::Path;
use std::process::Command;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use support::*;
use toolsched::api::ServerOptions;
use toolsched::api::jwt::JwtConfig;
use toolsched::api::pb;
use toolsched::scheduler::SchedulerConfig;

const ISSUER: &str = "https://issuer.test";
const AUDIENCE: &str = "toolsched";

fn openssl(args: &[&str]) -> Vec<u8> {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Signing keys made by the test, and the JWKS of the trusted ones.
struct Keys {
    rsa: EncodingKey,
    ec: EncodingKey,
    /// An RSA key with the same kid as the trusted one, not in the JWKS.
    other_rsa: EncodingKey,
    jwks: Value,
}

fn rsa_key(dir: &Path, name: &str) -> (EncodingKey, Value) {
    let path = dir.join(name);
    let path = path.to_str().unwrap();
    openssl(&["genrsa", "-traditional", "-out", path, "2048"]);
    let modulus = String::from_utf8(openssl(&["rsa", "-in", path, "-noout", "-modulus"])).unwrap();
    let hex = modulus.trim().trim_start_matches("Modulus=");
    let n: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let pem = std::fs::read(path).unwrap();
    let jwk = json!({
        "kty": "RSA", "kid": "rsa-1", "alg": "RS256", "use": "sig",
        "n": URL_SAFE_NO_PAD.encode(&n), "e": "AQAB",
    });
    (EncodingKey::from_rsa_pem(&pem).unwrap(), jwk)
}

fn ec_key(dir: &Path) -> (EncodingKey, Value) {
    let path = dir.join("ec.pem");
    let path = path.to_str().unwrap();
    openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        path,
    ]);
    let der = openssl(&["pkey", "-in", path, "-pubout", "-outform", "DER"]);
    // The SubjectPublicKeyInfo ends with the uncompressed point 04 || x || y.
    let point = &der[der.len() - 65..];
    assert_eq!(point[0], 4);
    let pem = std::fs::read(path).unwrap();
    let jwk = json!({
        "kty": "EC", "kid": "ec-1", "crv": "P-256", "alg": "ES256",
        "x": URL_SAFE_NO_PAD.encode(&point[1..33]), "y": URL_SAFE_NO_PAD.encode(&point[33..]),
    });
    (EncodingKey::from_ec_pem(&pem).unwrap(), jwk)
}

fn keys(dir: &Path) -> Keys {
    let (rsa, rsa_jwk) = rsa_key(dir, "rsa.pem");
    let (other_rsa, _) = rsa_key(dir, "other.pem");
    let (ec, ec_jwk) = ec_key(dir);
    Keys {
        rsa,
        ec,
        other_rsa,
        jwks: json!({"keys": [rsa_jwk, ec_jwk]}),
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Claims of a valid token of `tenant`/`sub`, changed by `edit`.
fn claims(tenant: &str, sub: &str, edit: impl FnOnce(&mut Value)) -> Value {
    let mut c = json!({
        "iss": ISSUER, "aud": AUDIENCE, "sub": sub, "tenant": tenant,
        "iat": now(), "nbf": now() - 10, "exp": now() + 600,
    });
    edit(&mut c);
    c
}

fn sign(alg: Algorithm, kid: &str, key: &EncodingKey, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

fn jwt_config(jwks_file: &Path) -> JwtConfig {
    JwtConfig {
        jwks_file: jwks_file.to_path_buf(),
        issuer: ISSUER.into(),
        audience: AUDIENCE.into(),
        tenant_claim: "tenant".into(),
        principal_claim: "sub".into(),
        leeway_secs: 0,
        tenants: Vec::new(),
    }
}

fn write(id: &str, path: &str) -> pb::FunctionCall {
    call(
        id,
        "write_file",
        json!({"file_path": path, "content": "x\n"}),
    )
}

/// With `jwt.tenants`, a validly signed token naming another tenant is
/// UNAUTHENTICATED: the issuer cannot mint tenants the server never meant to
/// serve (each is a metric label and a directory).
#[tokio::test]
async fn jwt_tenants_bounds_the_tenants_a_token_may_name() {
    let dir = tempfile::tempdir().unwrap();
    let keys = keys(dir.path());
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, keys.jwks.to_string()).unwrap();
    let server = TestServer::with_options(
        SchedulerConfig::default(),
        ServerOptions {
            jwt: Some(JwtConfig {
                tenants: vec!["acme".into()],
                ..jwt_config(&jwks)
            }),
            ..ServerOptions::default()
        },
    )
    .await;
    let mut client = server.client.clone();
    let acme = sign(
        Algorithm::RS256,
        "rsa-1",
        &keys.rsa,
        &claims("acme", "alice", |_| {}),
    );
    let gamma = sign(
        Algorithm::RS256,
        "rsa-1",
        &keys.rsa,
        &claims("gamma", "eve", |_| {}),
    );
    client
        .list_tools(with_token(&acme, pb::ListToolsRequest::default()))
        .await
        .expect("a listed tenant");
    let status = client
        .list_tools(with_token(&gamma, pb::ListToolsRequest::default()))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated);
    assert_eq!(
        status.message(),
        "invalid JWT: the tenant claim names a tenant this server does not serve (jwt.tenants)"
    );
    // A name that is no tenant name stops start-up.
    let err = toolsched::api::jwt::JwtVerifier::load(&JwtConfig {
        tenants: vec!["a/b".into()],
        ..jwt_config(&jwks)
    })
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "jwt.tenants: 'a/b' is not a valid tenant name"
    );
}

#[tokio::test]
async fn a_valid_jwt_acts_as_its_tenant_and_a_bad_one_is_unauthenticated_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let keys = keys(dir.path());
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, keys.jwks.to_string()).unwrap();
    let server = TestServer::with_options(
        SchedulerConfig::default(),
        ServerOptions {
            jwt: Some(jwt_config(&jwks)),
            ..ServerOptions::default()
        },
    )
    .await;
    let mut client = server.client.clone();
    // Tenant acme signs with the RSA key, tenant beta with the EC key.
    let a = sign(
        Algorithm::RS256,
        "rsa-1",
        &keys.rsa,
        &claims("acme", "alice", |_| {}),
    );
    let b = sign(
        Algorithm::ES256,
        "ec-1",
        &keys.ec,
        &claims("beta", "bob", |_| {}),
    );

    // A's write waits for A's approval in A's `main`.
    let mut a_stream = client
        .schedule_calls(with_token(&a, request("main", vec![write("w1", "a.txt")])))
        .await
        .expect("A's JWT is accepted")
        .into_inner();
    let mut a_seen = Vec::new();
    let prompt = await_prompt(&mut a_stream, &mut a_seen, "w1").await;
    let confirm = pb::ConfirmRequest {
        session_id: "main".into(),
        call_id: "w1".into(),
        correlation_id: prompt.correlation_id.clone(),
        outcome: pb::ConfirmationOutcome::ProceedOnce as i32,
        new_content: None,
    };
    // B (the ES256 token) cannot answer it: for B there is no such session.
    let foreign = client
        .confirm(with_token(&b, confirm.clone()))
        .await
        .expect_err("B answering A's prompt");
    assert_eq!(foreign.code(), tonic::Code::NotFound);
    assert_eq!(foreign.message(), "no session 'main'");
    // B's own `main` runs at once, beside A's waiting batch.
    let b_stream = client
        .schedule_calls(with_token(
            &b,
            request(
                "main",
                vec![call("r", "list_directory", json!({"dir_path": "."}))],
            ),
        ))
        .await
        .expect("B's JWT is accepted")
        .into_inner();
    let events = collect(b_stream).await;
    assert_eq!(state_name(&terminal(&events, "r")), "success");
    client
        .confirm(with_token(&a, confirm))
        .await
        .expect("A answers its own prompt");
    let rest = collect(a_stream).await;
    assert_eq!(state_name(&terminal(&rest, "w1")), "success");
    assert_eq!(
        std::fs::read_to_string(server.path("a.txt")).unwrap(),
        "x\n"
    );

    let rsa = |edit: fn(&mut Value)| {
        sign(
            Algorithm::RS256,
            "rsa-1",
            &keys.rsa,
            &claims("acme", "alice", edit),
        )
    };
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "expired",
            rsa(|c| c["exp"] = json!(now() - 3600)),
            "invalid JWT: expired",
        ),
        (
            "not yet valid",
            rsa(|c| c["nbf"] = json!(now() + 3600)),
            "invalid JWT: not yet valid (nbf)",
        ),
        (
            "wrong audience",
            rsa(|c| c["aud"] = json!("another-service")),
            "invalid JWT: wrong audience",
        ),
        (
            "wrong issuer",
            rsa(|c| c["iss"] = json!("https://evil.test")),
            "invalid JWT: wrong issuer",
        ),
        (
            "no exp",
            rsa(|c| {
                c.as_object_mut().unwrap().remove("exp");
            }),
            "invalid JWT: a required claim (exp, iss, aud) is missing or malformed",
        ),
        (
            "no tenant",
            rsa(|c| {
                c.as_object_mut().unwrap().remove("tenant");
            }),
            "invalid JWT: the tenant claim is missing or not a valid tenant name",
        ),
        (
            "tenant with a slash",
            rsa(|c| c["tenant"] = json!("acme/../beta")),
            "invalid JWT: the tenant claim is missing or not a valid tenant name",
        ),
        (
            "signed by another key with the trusted kid",
            sign(
                Algorithm::RS256,
                "rsa-1",
                &keys.other_rsa,
                &claims("acme", "alice", |_| {}),
            ),
            "invalid JWT: signature does not verify",
        ),
        (
            "an unknown kid",
            sign(
                Algorithm::RS256,
                "rsa-2",
                &keys.other_rsa,
                &claims("acme", "alice", |_| {}),
            ),
            "invalid JWT: signed by an unknown key",
        ),
        (
            "HS256 with the public modulus as secret",
            sign(
                Algorithm::HS256,
                "rsa-1",
                &EncodingKey::from_secret(keys.jwks["keys"][0]["n"].as_str().unwrap().as_bytes())
                    .unwrap(),
                &claims("acme", "alice", |_| {}),
            ),
            "invalid JWT: algorithm not accepted (RS256 or ES256)",
        ),
        (
            "garbage",
            "a.b.c".into(),
            "invalid JWT: not a well-formed JWT",
        ),
    ];
    for (what, token, message) in cases {
        let err = client
            .list_tools(with_token(&token, pb::ListToolsRequest::default()))
            .await
            .expect_err(what);
        assert_eq!(err.code(), tonic::Code::Unauthenticated, "{what}");
        assert_eq!(err.message(), message, "{what}");
    }
}

/// The binary reads `[jwt]` from its config file; a JWT works, refused ones
/// are refused, and no log line (at debug) holds a token.
#[test]
fn the_binary_verifies_jwts_from_its_config_and_never_logs_one() {
    let workspace = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let keys = keys(dir.path());
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, keys.jwks.to_string()).unwrap();
    let config = dir.path().join("toolsched.toml");
    std::fs::write(
        &config,
        format!(
            "[jwt]\njwks_file = \"{}\"\nissuer = \"{ISSUER}\"\naudience = \"{AUDIENCE}\"\nprincipal_claim = \"email\"\n",
            jwks.display()
        ),
    )
    .unwrap();
    let mut binary = Binary::start_with_env(
        workspace.path(),
        &["--config", config.to_str().unwrap()],
        &[("RUST_LOG", "debug")],
    );
    let lines = std::mem::replace(&mut binary.stderr_lines, std::sync::mpsc::channel().1);
    let addr = binary.addr;
    let good = sign(
        Algorithm::ES256,
        "ec-1",
        &keys.ec,
        &claims("acme", "ignored-sub", |c| {
            c["email"] = json!("alice@acme.test")
        }),
    );
    let expired = sign(
        Algorithm::ES256,
        "ec-1",
        &keys.ec,
        &claims("acme", "x", |c| {
            c["email"] = json!("alice@acme.test");
            c["exp"] = json!(now() - 3600);
        }),
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (ok, refused) = runtime.block_on(async {
        let mut client =
            pb::tool_scheduler_client::ToolSchedulerClient::connect(format!("http://{addr}"))
                .await
                .unwrap();
        let ok = client
            .schedule_calls(with_token(
                &good,
                request(
                    "main",
                    vec![call("r", "list_directory", json!({"dir_path": "."}))],
                ),
            ))
            .await
            .map(|r| r.into_inner());
        let refused = client
            .list_tools(with_token(&expired, pb::ListToolsRequest::default()))
            .await
            .unwrap_err();
        (ok, refused)
    });
    let events = runtime.block_on(collect(ok.expect("the JWT is accepted")));
    assert_eq!(state_name(&terminal(&events, "r")), "success");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    assert_eq!(refused.message(), "invalid JWT: expired");
    assert!(binary.terminate().success());
    let logged: Vec<String> = lines.iter().collect();
    assert!(
        logged.iter().any(|l| l.contains("\"tenant\":\"acme\"")
            && l.contains("\"principal\":\"alice@acme.test\"")),
        "the batch's log line names tenant and the configured principal claim"
    );
    // Any of the three parts would give a token away (the payload is
    // readable, the signature makes it usable).
    for token in [&good, &expired] {
        for part in token.split('.') {
            for line in &logged {
                assert!(!line.contains(part), "a token part in a log line: {line}");
            }
        }
    }
}
