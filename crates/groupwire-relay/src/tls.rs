//! TLS for the relay and its client (rustls with the `ring` provider).
//!
//! - **Relay**: [`ServerTls`] from a PEM certificate chain and private key
//!   (`groupwire relay serve --tls-cert FILE --tls-key FILE`). With it,
//!   *every* listener speaks TLS: the TCP listener carries frames inside
//!   TLS, the WebSocket listener is `wss`. There is no plaintext listener
//!   beside a TLS one, so a token sent to a relay that has TLS configured
//!   never crosses the network in clear (a plaintext `Hello` fails the TLS
//!   handshake).
//! - **Client**: [`ClientTls`] with the roots to trust: Mozilla's set
//!   compiled in ([`ClientTls::webpki_roots`], the default), or a custom CA
//!   for self-signed deployments and tests ([`ClientTls::from_ca_file`]).
//!   `tls://host:port` and `wss://host:port/` in
//!   [`RelayClient::connect_url`](crate::RelayClient::connect_url) use it.
//!
//! Only TLS 1.2 and 1.3 with rustls' safe default cipher suites. The
//! provider is `ring` (chosen over `aws-lc-rs` because it builds with a C
//! compiler alone; `aws-lc-rs` may need cmake). Every config is built with
//! the provider named explicitly, so no process-wide default is needed.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector, client, server};

/// The longest a TLS handshake may take before the connection is dropped
/// (a silent peer must not hold a connection slot forever).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    #[error("reading {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        error: io::Error,
    },
    /// A PEM file held no usable certificate or key.
    #[error("{what}: {reason}")]
    Pem {
        /// Which input (a file name, or "certificate"/"key").
        what: String,
        /// Why it was refused.
        reason: String,
    },
    /// rustls refused the configuration (e.g. the key does not match the
    /// certificate).
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The relay's TLS identity: a certificate chain and its private key.
/// Cheap to clone.
#[derive(Clone)]
pub struct ServerTls {
    acceptor: TlsAcceptor,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerTls")
    }
}

impl ServerTls {
    /// Reads a PEM certificate chain (leaf first) and a PEM private key
    /// (PKCS#8, PKCS#1 or SEC1).
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let cert_pem = read(cert)?;
        let key_pem = read(key)?;
        Self::from_pem_named(
            &cert_pem,
            &cert.display().to_string(),
            &key_pem,
            &key.display().to_string(),
        )
    }

    /// As [`from_pem_files`](Self::from_pem_files), from PEM text.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, TlsError> {
        Self::from_pem_named(cert_pem, "certificate", key_pem, "key")
    }

    fn from_pem_named(
        cert_pem: &[u8],
        cert_name: &str,
        key_pem: &[u8],
        key_name: &str,
    ) -> Result<Self, TlsError> {
        let certs = certs(cert_pem, cert_name)?;
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::Pem {
            what: key_name.to_owned(),
            reason: format!("no PEM private key ({e})"),
        })?;
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// Runs the server side of the handshake on an accepted connection,
    /// within [`HANDSHAKE_TIMEOUT`].
    pub(crate) async fn accept(
        &self,
        stream: TcpStream,
    ) -> io::Result<server::TlsStream<TcpStream>> {
        tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(stream))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))?
    }
}

/// The roots a client trusts when it connects with `tls://` or `wss://`.
/// Cheap to clone.
#[derive(Clone)]
pub struct ClientTls {
    connector: TlsConnector,
    /// Where the roots came from, for error messages.
    roots: String,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("roots", &self.roots)
            .finish()
    }
}

impl ClientTls {
    /// Trusts Mozilla's root certificates as compiled into `webpki-roots`
    /// (the same set on every host, no system store needed; a relay with a
    /// certificate from a public CA needs nothing more).
    pub fn webpki_roots() -> Self {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        Self::with_roots(roots, "the webpki-roots set".into())
            .expect("the built-in provider supports its default protocol versions")
    }

    /// Trusts only the CA certificates in `pem` (one or more).
    pub fn from_ca_pem(pem: &[u8]) -> Result<Self, TlsError> {
        Self::from_ca_named(pem, "CA certificate")
    }

    /// Trusts only the CA certificates in the PEM file at `path` (e.g. the
    /// CA that signed a self-signed deployment's certificate).
    pub fn from_ca_file(path: &Path) -> Result<Self, TlsError> {
        Self::from_ca_named(&read(path)?, &path.display().to_string())
    }

    fn from_ca_named(pem: &[u8], name: &str) -> Result<Self, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in certs(pem, name)? {
            roots.add(cert).map_err(|e| TlsError::Pem {
                what: name.to_owned(),
                reason: format!("not a usable CA certificate ({e})"),
            })?;
        }
        Self::with_roots(roots, name.to_owned())
    }

    fn with_roots(roots: rustls::RootCertStore, name: String) -> Result<Self, TlsError> {
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self {
            connector: TlsConnector::from(Arc::new(config)),
            roots: name,
        })
    }

    /// Runs the client side of the handshake, checking that the relay's
    /// certificate chains to a trusted root and names `host` (a DNS name
    /// or an IP address, IPv6 with or without brackets).
    pub(crate) async fn connect(
        &self,
        host: &str,
        stream: TcpStream,
    ) -> Result<client::TlsStream<TcpStream>, String> {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let name = ServerName::try_from(bare.to_owned())
            .map_err(|e| format!("{host:?} is not a TLS server name ({e})"))?;
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.connector.connect(name, stream)).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(format!(
                "TLS handshake with {host} failed: {e} (trusting {})",
                self.roots
            )),
            Err(_) => Err(format!("TLS handshake with {host} timed out")),
        }
    }
}

/// The crypto provider of every config here.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        path: path.to_owned(),
        error,
    })
}

/// Every certificate in `pem`; none is an error.
fn certs(pem: &[u8], name: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            what: name.to_owned(),
            reason: format!("bad PEM ({e})"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            what: name.to_owned(),
            reason: "no PEM certificate".into(),
        });
    }
    Ok(certs)
}
