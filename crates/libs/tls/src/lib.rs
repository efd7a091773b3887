//! TLS for both services, switched on by their settings.
//!
//! Everything is rustls with the ring provider, TLS 1.2 and 1.3. A server
//! loads its certificate chain and key (and, for mutual TLS, the CA its
//! clients must be signed by) into a [`ServerTls`]; each listener then takes
//! an [`Acceptor`] with its own ALPN list and its own [`HandshakeCounters`].
//! A client loads the CA it trusts (and optionally its own certificate and
//! key) into a [`ClientTls`] and makes a [`Connector`] per transport.
//!
//! Session resumption works both ways: the server issues stateless session
//! tickets (and keeps a session cache for TLS 1.2 ids), and every connector
//! made from one [`ClientTls`] shares rustls' client session cache. Each
//! completed handshake is counted as full or resumed
//! (`handshake_kind()`), each failed one as a failure.
//!
//! # Layout
//! - [`load_certs`], [`load_key`], [`load_roots`]: PEM files, with errors that
//!   name the file and what was wrong with it.
//! - [`ServerTls`] / [`Acceptor`]: the server side.
//! - [`ClientTls`] / [`Connector`]: the client side.
//! - [`HandshakeCounters`] and [`HandshakeCollector`]: the counts, and their
//!   series on `/metrics`.
//! - `incoming` (feature `tonic`): a TLS listener as a tonic server's
//!   incoming connections.
//! - `generate` (feature `generate`): a throwaway CA with server and client
//!   certificates, written as PEM files, for tests and the lab.

#[cfg(feature = "generate")]
pub mod generate;
#[cfg(feature = "tonic")]
pub mod incoming;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, HandshakeKind, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite};

pub use rustls;
pub use tokio_rustls::{client::TlsStream as ClientStream, server::TlsStream as ServerStream};

/// ALPN for a listener or client that speaks HTTP/2 only (gRPC, h2 transports).
pub const ALPN_H2: &[&[u8]] = &[b"h2"];
/// ALPN for a client that speaks HTTP/1.1 only.
pub const ALPN_HTTP1: &[&[u8]] = &[b"http/1.1"];
/// ALPN of HTTP/3 (QUIC listeners and clients).
pub const ALPN_H3: &[&[u8]] = &[b"h3"];
/// ALPN for a listener that serves both (HTTP/2 preferred).
pub const ALPN_H2_HTTP1: &[&[u8]] = &[b"h2", b"http/1.1"];

/// How long a server waits for a client to finish its handshake. A client
/// that connects and says nothing must not hold a connection (or a drain at
/// shutdown) for ever.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why TLS could not be set up. Every variant names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the {what} file {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("the {what} file {} is not usable: {problem}", path.display())]
    Pem {
        what: &'static str,
        path: PathBuf,
        problem: String,
    },
    #[error("{what}: {source}")]
    Rustls { what: String, source: rustls::Error },
    #[error("the client CA file {}: {problem}", path.display())]
    ClientCa { path: PathBuf, problem: String },
    #[error(
        "a client certificate needs its key too (and the other way round): set both or neither"
    )]
    HalfIdentity,
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

/// Every certificate of a PEM file, in order (a chain: leaf first).
pub fn load_certs(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            what,
            path: path.to_owned(),
            problem: format!("malformed PEM: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            what,
            path: path.to_owned(),
            problem: "no `-----BEGIN CERTIFICATE-----` block in it".to_owned(),
        });
    }
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) of a PEM file.
pub fn load_key(what: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(what, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Pem {
        what,
        path: path.to_owned(),
        problem: match e {
            rustls::pki_types::pem::Error::NoItemsFound => {
                "no `-----BEGIN PRIVATE KEY-----` (or RSA / EC PRIVATE KEY) block in it".to_owned()
            }
            e => format!("malformed PEM: {e}"),
        },
    })
}

/// A root store holding every certificate of a PEM file.
pub fn load_roots(what: &'static str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(what, path)? {
        roots.add(cert).map_err(|e| TlsError::Pem {
            what,
            path: path.to_owned(),
            problem: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn rustls_error(what: impl Into<String>) -> impl FnOnce(rustls::Error) -> TlsError {
    let what = what.into();
    move |source| TlsError::Rustls { what, source }
}

/// Where a server's certificate, key and (for mutual TLS) client CA are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key of the leaf.
    pub key: PathBuf,
    /// When set, every client must present a certificate signed by this CA.
    pub client_ca: Option<PathBuf>,
}

/// A loaded server configuration, shared by every listener of a service.
#[derive(Debug, Clone)]
pub struct ServerTls {
    config: Arc<ServerConfig>,
    mutual: bool,
}

impl ServerTls {
    /// Loads the files and builds the configuration, with session tickets
    /// on so that clients can resume.
    pub fn load(files: &ServerFiles) -> Result<Self, TlsError> {
        let certs = load_certs("server certificate", &files.cert)?;
        let key = load_key("server key", &files.key)?;
        let client_roots = match &files.client_ca {
            None => None,
            Some(path) => Some((path.clone(), load_roots("client CA", path)?)),
        };
        let mismatch = format!(
            "the server key {} does not go with the certificate {}",
            files.key.display(),
            files.cert.display()
        );
        Self::from_parts(certs, key, client_roots, mismatch)
    }

    /// A certificate made for this process alone, signed by nobody: for a
    /// listener that must encrypt (QUIC always does) on a service whose TLS
    /// is off. Its clients cannot verify it, and say so (see
    /// [`ClientTls::unverified`]).
    #[cfg(feature = "generate")]
    pub fn self_signed() -> Result<Self, TlsError> {
        let (cert, key) = generate::self_signed_server().map_err(|e| TlsError::Rustls {
            what: format!("making a self-signed certificate: {e}"),
            source: rustls::Error::General(e.to_string()),
        })?;
        Self::from_parts(vec![cert], key, None, "the self-signed key".into())
    }

    fn from_parts(
        certs: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        client_roots: Option<(PathBuf, RootCertStore)>,
        mismatch: String,
    ) -> Result<Self, TlsError> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(rustls_error("choosing TLS versions"))?;
        let mutual = client_roots.is_some();
        let builder = match client_roots {
            None => builder.with_no_client_auth(),
            Some((path, roots)) => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                        .build()
                        .map_err(|e| TlsError::ClientCa {
                            path,
                            problem: e.to_string(),
                        })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(rustls_error(mismatch))?;
        // Stateless tickets for TLS 1.3 (and 1.2) resumption; the default
        // in-memory session cache stays for TLS 1.2 session ids.
        config.ticketer = rustls::crypto::ring::Ticketer::new()
            .map_err(rustls_error("making the session ticketer"))?;
        Ok(ServerTls {
            config: Arc::new(config),
            mutual,
        })
    }

    /// The rustls configuration advertising `alpn`: an acceptor's, or a
    /// QUIC listener's (which runs its handshake itself).
    pub fn rustls_config(&self, alpn: &[&[u8]]) -> Arc<ServerConfig> {
        let mut config = (*self.config).clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }

    /// Whether clients must present a certificate.
    pub fn requires_client_cert(&self) -> bool {
        self.mutual
    }

    /// An acceptor advertising `alpn`, counting into `counters`.
    pub fn acceptor(&self, alpn: &[&[u8]], counters: Arc<HandshakeCounters>) -> Acceptor {
        Acceptor {
            inner: tokio_rustls::TlsAcceptor::from(self.rustls_config(alpn)),
            counters,
        }
    }
}

/// Accepts TLS on a listener's connections, counting every handshake.
#[derive(Clone)]
pub struct Acceptor {
    inner: tokio_rustls::TlsAcceptor,
    counters: Arc<HandshakeCounters>,
}

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acceptor")
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl Acceptor {
    /// Runs the server side of the handshake on `io`, within
    /// [`HANDSHAKE_TIMEOUT`]. A failure is counted, and its error says it was
    /// the TLS handshake.
    pub async fn accept<IO>(&self, io: IO) -> io::Result<ServerStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let handshake = self.inner.accept(io).into_fallible();
        let e = match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
            Ok(Ok(stream)) => {
                self.counters.record(stream.get_ref().1.handshake_kind());
                return Ok(stream);
            }
            Ok(Err((e, io))) => {
                linger(io).await;
                e
            }
            Err(_) => io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no TLS handshake within {} s", HANDSHAKE_TIMEOUT.as_secs()),
            ),
        };
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
        Err(io::Error::new(
            e.kind(),
            format!("TLS handshake failed: {e}"),
        ))
    }

    /// The counters this acceptor records into.
    pub fn counters(&self) -> &Arc<HandshakeCounters> {
        &self.counters
    }
}

/// After a failed handshake, closes the connection so that the client
/// reads the alert saying why. Dropping the socket at once would reset the
/// connection if the client had already sent more (in TLS 1.3 a client
/// sends its request right behind its certificate, before the server has
/// judged it), and a reset can destroy the alert before the client reads it.
/// So: send FIN, then read and discard until the client closes, for at most
/// a second.
async fn linger<IO: AsyncRead + AsyncWrite + Unpin>(mut io: IO) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = io.shutdown().await;
        let mut buf = [0u8; 4096];
        while matches!(io.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// Where a client's trusted CA and (for mutual TLS) its own identity are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFiles {
    /// PEM CA certificate(s) the server's certificate must chain to.
    pub ca: PathBuf,
    /// PEM client certificate chain, presented when the server asks.
    pub cert: Option<PathBuf>,
    /// Its private key.
    pub key: Option<PathBuf>,
}

/// A loaded client configuration. Connectors made from one share a session
/// cache, so a second connection to the same server can resume.
#[derive(Debug, Clone)]
pub struct ClientTls {
    config: Arc<ClientConfig>,
}

impl ClientTls {
    /// Loads the files and builds the configuration.
    pub fn load(files: &ClientFiles) -> Result<Self, TlsError> {
        let roots = load_roots("CA", &files.ca)?;
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(rustls_error("choosing TLS versions"))?
            .with_root_certificates(roots);
        let config = match (&files.cert, &files.key) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let certs = load_certs("client certificate", cert)?;
                let k = load_key("client key", key)?;
                builder
                    .with_client_auth_cert(certs, k)
                    .map_err(rustls_error(format!(
                        "the client key {} does not go with the certificate {}",
                        key.display(),
                        cert.display()
                    )))?
            }
            _ => return Err(TlsError::HalfIdentity),
        };
        Ok(ClientTls {
            config: Arc::new(config),
        })
    }

    /// A connector offering `alpn`, counting into `counters`.
    pub fn connector(&self, alpn: &[&[u8]], counters: Arc<HandshakeCounters>) -> Connector {
        Connector {
            inner: tokio_rustls::TlsConnector::from(self.rustls_config(alpn)),
            alpn_required: alpn.first().map(|p| p.to_vec()),
            counters,
        }
    }

    /// A configuration that accepts any server certificate: for a QUIC
    /// transport (always encrypted) to a service whose TLS is off, which
    /// has only a self-signed certificate ([`ServerTls::self_signed`]). It
    /// encrypts, and proves nothing of who answers.
    pub fn unverified() -> Result<Self, TlsError> {
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(rustls_error("choosing TLS versions"))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
            .with_no_client_auth();
        Ok(ClientTls {
            config: Arc::new(config),
        })
    }

    /// The rustls configuration offering `alpn`: a connector's, or a QUIC
    /// client's.
    pub fn rustls_config(&self, alpn: &[&[u8]]) -> Arc<ClientConfig> {
        let mut config = (*self.config).clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }
}

/// Accepts every server certificate, checking only that the handshake's
/// signatures are made with the certificate's key (see
/// [`ClientTls::unverified`]).
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Dials TLS over an open connection, counting every handshake.
#[derive(Clone)]
pub struct Connector {
    inner: tokio_rustls::TlsConnector,
    /// The protocol the server must agree to, when ALPN was offered: an h2
    /// client cannot talk to a server that only does HTTP/1.1.
    alpn_required: Option<Vec<u8>>,
    counters: Arc<HandshakeCounters>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl Connector {
    /// The client side of the handshake on `io`, checking the server's
    /// certificate against `server_name`. Errors say that TLS failed and why.
    pub async fn connect<IO>(&self, server_name: &str, io: IO) -> io::Result<ClientStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let name = ServerName::try_from(server_name.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{server_name:?} is not a valid TLS server name: {e}"),
            )
        })?;
        let fail = |e: io::Error| {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
            io::Error::new(
                e.kind(),
                format!("TLS handshake with {server_name} failed: {e}"),
            )
        };
        let stream = self.inner.connect(name, io).await.map_err(fail)?;
        let conn = stream.get_ref().1;
        if let Some(wanted) = &self.alpn_required
            && conn.alpn_protocol() != Some(wanted.as_slice())
        {
            return Err(fail(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the server did not agree to ALPN {:?}",
                    String::from_utf8_lossy(wanted)
                ),
            )));
        }
        self.counters.record(conn.handshake_kind());
        Ok(stream)
    }

    /// The counters this connector records into.
    pub fn counters(&self) -> &Arc<HandshakeCounters> {
        &self.counters
    }
}

/// Handshakes of one listener or one client, by outcome.
#[derive(Debug, Default)]
pub struct HandshakeCounters {
    full: AtomicU64,
    resumed: AtomicU64,
    failed: AtomicU64,
}

/// A reading of [`HandshakeCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandshakeCounts {
    /// Completed with a full key exchange and certificate check.
    pub full: u64,
    /// Completed by resuming an earlier session (ticket or session id).
    pub resumed: u64,
    /// Did not complete: refused certificate, timeout, broken connection.
    pub failed: u64,
}

impl HandshakeCounters {
    fn record(&self, kind: Option<HandshakeKind>) {
        let c = match kind {
            Some(HandshakeKind::Resumed) => &self.resumed,
            _ => &self.full,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn snapshot(&self) -> HandshakeCounts {
        HandshakeCounts {
            full: self.full.load(Ordering::Relaxed),
            resumed: self.resumed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

/// Marks a request that came over TLS (an extension the servers insert),
/// so that its metrics can say `h2` rather than `h2c`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverTls;

/// The handshake counters of several listeners or transports, as
/// `{prefix}_tls_handshakes_total{<labels>,kind="full"|"resumed"}` and
/// `{prefix}_tls_handshake_failures_total{<labels>}`, read at each scrape.
/// A row's labels name whose counters they are (`listener="rest"`, or
/// `via="grpc",store="memory"`).
#[derive(Debug, Clone)]
pub struct HandshakeCollector {
    prefix: &'static str,
    rows: Vec<HandshakeRow>,
}

/// The labels of one listener's or transport's counters, and the counters.
pub type HandshakeRow = (Vec<(&'static str, String)>, Arc<HandshakeCounters>);

impl HandshakeCollector {
    /// The counters of `rows` under `prefix`.
    pub fn new(prefix: &'static str, rows: Vec<HandshakeRow>) -> Self {
        HandshakeCollector { prefix, rows }
    }
}

impl prometheus_client::collector::Collector for HandshakeCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric as _;
        use prometheus_client::metrics::MetricType;
        use prometheus_client::metrics::counter::ConstCounter;
        if self.rows.is_empty() {
            return Ok(());
        }
        let counts: Vec<_> = self.rows.iter().map(|(l, c)| (l, c.snapshot())).collect();
        let name = format!("{}_tls_handshakes", self.prefix);
        let mut family = encoder.encode_descriptor(
            &name,
            "TLS handshakes completed, full or resumed (session ticket or id)",
            None,
            MetricType::Counter,
        )?;
        for (labels, c) in &counts {
            for (kind, n) in [("full", c.full), ("resumed", c.resumed)] {
                let mut l: Vec<(&str, String)> = (*labels).clone();
                l.push(("kind", kind.to_owned()));
                ConstCounter::new(n).encode(family.encode_family(&l)?)?;
            }
        }
        let name = format!("{}_tls_handshake_failures", self.prefix);
        let mut family = encoder.encode_descriptor(
            &name,
            "TLS handshakes that did not complete",
            None,
            MetricType::Counter,
        )?;
        for (labels, c) in &counts {
            ConstCounter::new(c.failed).encode(family.encode_family(*labels)?)?;
        }
        Ok(())
    }
}

/// One acceptor per listener of a service, each offering its ALPN and
/// counting its own handshakes, and the collector of those counts as
/// `{prefix}_tls_handshakes_total{listener=…}` (see [`HandshakeCollector`])
/// for the service's `/metrics`. All `None`, and no collector, when TLS is
/// off. Both services build their listeners' TLS this way.
pub fn listener_acceptors<const N: usize>(
    tls: Option<&ServerTls>,
    listeners: [(&'static str, &'static [&'static [u8]]); N],
    prefix: &'static str,
) -> ([Option<Acceptor>; N], Option<HandshakeCollector>) {
    let Some(tls) = tls else {
        return (std::array::from_fn(|_| None), None);
    };
    let acceptors = listeners.map(|(name, alpn)| (name, tls.acceptor(alpn, Arc::default())));
    let rows = acceptors
        .iter()
        .map(|(name, a)| (vec![("listener", (*name).to_owned())], a.counters().clone()))
        .collect();
    let collector = HandshakeCollector::new(prefix, rows);
    (acceptors.map(|(_, a)| Some(a)), Some(collector))
}
