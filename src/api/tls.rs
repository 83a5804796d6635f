//! TLS on the listener (DESIGN §8, §11): rustls on the ring provider, with
//! our own acceptor rather than tonic's `ServerTlsConfig` for two reasons:
//! the certificate and key are re-read when their files change (cert-manager
//! rotates them in place; a handshake after the change gets the new pair),
//! and with `--tls-client-ca` a client certificate is required and mapped to
//! the [`Principal`] it stands for (by its subject CN or a DNS SAN, as
//! configured), which the interceptor finds in the request's [`TlsConnectInfo`].
//!
//! Not here: bearer tokens (`super::auth`), which work over TLS unchanged.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;

use crate::tenant::{InvalidName, Principal, TenantId};

/// Longest a TLS handshake may take: a client that connects and stalls
/// must not hold a handshake slot.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once: each holds a task and buffers, and a
/// flood of stalled ones must not grow the server's memory (further
/// connections wait in the kernel's accept queue).
pub const MAX_PENDING_HANDSHAKES: usize = 256;

/// Which part of a client certificate names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum ClientIdentity {
    /// The subject's common name.
    #[default]
    Cn,
    /// Any DNS subject alternative name.
    SanDns,
}

/// `[[tls_clients]]`: the certificate name `name` is `principal` of
/// `tenant`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsClient {
    pub name: String,
    pub tenant: String,
    pub principal: String,
}

/// The listener's TLS settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM CA certificates: when set, a client certificate signed by one
    /// of them is required.
    pub client_ca: Option<PathBuf>,
    pub client_identity: ClientIdentity,
    pub clients: Vec<TlsClient>,
}

/// Why TLS cannot be set up (at start-up).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {path}: {reason}")]
    Read {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("{what} {path} holds no PEM {expected}")]
    Empty {
        what: &'static str,
        path: PathBuf,
        expected: &'static str,
    },
    #[error("tls: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("tls client CA: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("tls_clients: {0}")]
    Client(#[from] InvalidName),
    #[error("tls_clients: the certificate name {0:?} is mapped twice")]
    DuplicateClient(String),
}

/// What the interceptor learns of a TLS connection.
#[derive(Debug, Clone)]
pub struct TlsConnectInfo {
    pub remote_addr: Option<SocketAddr>,
    /// The client certificate's principal: `None` without mTLS; `Some(Err)`
    /// for a certificate the CA signed whose name no `[[tls_clients]]`
    /// maps.
    pub client: Option<Result<Principal, UnmappedCert>>,
}

/// A client certificate no `[[tls_clients]]` entry maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnmappedCert;

/// A built acceptor: the rustls config and the client mapping.
#[derive(Clone)]
pub struct TlsAcceptor {
    acceptor: tokio_rustls::TlsAcceptor,
    identity: ClientIdentity,
    clients: Arc<std::collections::HashMap<String, Principal>>,
}

impl TlsAcceptor {
    /// Reads the certificate, key and client CA once (a failure stops
    /// start-up); later changes of the certificate and key are picked up by
    /// the next handshake.
    pub fn new(settings: &TlsSettings) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let resolver = ReloadingCert::new(&settings.cert, &settings.key, provider.clone())?;
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let builder = match &settings.client_ca {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in read_certs("tls_client_ca", ca)? {
                    roots.add(cert)?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(Arc::new(resolver));
        config.alpn_protocols = vec![b"h2".to_vec()];
        let mut clients = std::collections::HashMap::new();
        for c in &settings.clients {
            let principal = Principal::new(TenantId::new(&c.tenant)?, &c.principal)?;
            if clients.insert(c.name.clone(), principal).is_some() {
                return Err(TlsError::DuplicateClient(c.name.clone()));
            }
        }
        Ok(Self {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            identity: settings.client_identity,
            clients: Arc::new(clients),
        })
    }

    /// The principal of the client certificate of `stream`, if it sent one.
    fn client_of(&self, stream: &TlsStream<TcpStream>) -> Option<Result<Principal, UnmappedCert>> {
        let leaf = stream.get_ref().1.peer_certificates()?.first()?;
        let names = cert_names(leaf, self.identity);
        Some(
            names
                .iter()
                .find_map(|n| self.clients.get(n).cloned())
                .ok_or(UnmappedCert),
        )
    }

    /// The accepted, handshaken connections of `listener`, for tonic's
    /// `serve_with_incoming_shutdown`. A failed or stalled handshake is
    /// logged (without what the client sent) and dropped.
    pub fn incoming(
        self,
        listener: TcpListener,
    ) -> tokio_stream::wrappers::ReceiverStream<Result<TlsConn, std::io::Error>> {
        // Bounded: the server takes connections as it serves them; the
        // accept loop waits meanwhile.
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_HANDSHAKES));
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = tx.closed() => return,
                    accepted = listener.accept() => accepted,
                };
                let (tcp, remote) = match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        continue;
                    }
                };
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                // Without TCP_NODELAY, Nagle's algorithm and delayed ACKs
                // hold each small event back ~40 ms.
                let _ = tcp.set_nodelay(true);
                let this = self.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let handshake =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, this.acceptor.accept(tcp)).await;
                    drop(slot);
                    let stream = match handshake {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            tracing::debug!(%remote, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%remote, "TLS handshake timed out");
                            return;
                        }
                    };
                    let info = TlsConnectInfo {
                        remote_addr: Some(remote),
                        client: this.client_of(&stream),
                    };
                    let _ = tx.send(Ok(TlsConn { stream, info })).await;
                });
            }
        });
        tokio_stream::wrappers::ReceiverStream::new(rx)
    }
}

/// The names `identity` picks from a DER certificate (empty when it does not
/// parse: the verifier accepted it, so that does not happen in practice).
pub fn cert_names(der: &CertificateDer<'_>, identity: ClientIdentity) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der.as_ref()) else {
        return Vec::new();
    };
    match identity {
        ClientIdentity::Cn => cert
            .subject()
            .iter_common_name()
            .filter_map(|cn| cn.as_str().ok().map(String::from))
            .collect(),
        ClientIdentity::SanDns => cert
            .subject_alternative_name()
            .ok()
            .flatten()
            .map(|san| {
                san.value
                    .general_names
                    .iter()
                    .filter_map(|n| match n {
                        x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

// === impl TlsConn ===

/// A handshaken connection.
pub struct TlsConn {
    stream: TlsStream<TcpStream>,
    info: TlsConnectInfo,
}

impl tonic::transport::server::Connected for TlsConn {
    type ConnectInfo = TlsConnectInfo;
    fn connect_info(&self) -> TlsConnectInfo {
        self.info.clone()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

// === impl ReloadingCert ===

/// The server certificate, re-read when the certificate or key file
/// changes (checked at each handshake: two `stat`s). A pair that does not
/// load (a half-written rotation: the new certificate, the old key) keeps
/// the previous one, and is retried at the next handshake.
struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    // Only handshakes touch it, each for a stat-and-compare.
    current: Mutex<(Stamp, Arc<CertifiedKey>)>,
}

/// What says a file changed: its modification time and length.
type Stamp = [(Option<SystemTime>, u64); 2];

impl std::fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl ReloadingCert {
    fn new(cert: &Path, key: &Path, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let stamp = stamp(cert, key);
        let loaded = load_pair(cert, key, &provider)?;
        Ok(Self {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            provider,
            current: Mutex::new((stamp, loaded)),
        })
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let now = stamp(&self.cert, &self.key);
        let mut current = self.current.lock().ok()?;
        if current.0 != now {
            match load_pair(&self.cert, &self.key, &self.provider) {
                Ok(loaded) => {
                    tracing::info!(cert = %self.cert.display(), "TLS certificate reloaded");
                    *current = (now, loaded);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "TLS certificate not reloaded; keeping the previous one");
                }
            }
        }
        Some(current.1.clone())
    }
}

fn stamp(cert: &Path, key: &Path) -> Stamp {
    let one = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| (m.modified().ok(), m.len()))
            .unwrap_or((None, 0))
    };
    [one(cert), one(key)]
}

fn load_pair(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = read_certs("tls_cert", cert)?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::Read {
        what: "tls_key",
        path: key.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(Arc::new(CertifiedKey::from_der(chain, key_der, provider)?))
}

fn read_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let read_err = |e: rustls::pki_types::pem::Error| TlsError::Read {
        what,
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(read_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read_err)?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            what,
            path: path.to_path_buf(),
            expected: "CERTIFICATE",
        });
    }
    Ok(certs)
}
