//! Throwaway certificates for tests and the lab: a CA, a server certificate
//! valid for the names a local run dials, and a client certificate for
//! mutual TLS, all written as PEM files into a directory.

use std::path::{Path, PathBuf};

use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// The names the server certificate is valid for: loopback by name and by
/// address, and the compose file's service names.
pub const SERVER_NAMES: &[&str] = &[
    "localhost",
    "127.0.0.1",
    "::1",
    "order-service",
    "user-service",
];

/// Where [`write_lab_certs`] put each file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabCerts {
    /// The CA certificate both sides trust (`ca.pem`).
    pub ca: PathBuf,
    /// The server certificate, signed by the CA (`server.pem`).
    pub server_cert: PathBuf,
    /// Its key (`server.key`).
    pub server_key: PathBuf,
    /// A client certificate for mutual TLS, signed by the CA (`client.pem`).
    pub client_cert: PathBuf,
    /// Its key (`client.key`).
    pub client_key: PathBuf,
}

impl LabCerts {
    /// The server's files, with the CA as client CA when `mutual`.
    pub fn server_files(&self, mutual: bool) -> crate::ServerFiles {
        crate::ServerFiles {
            cert: self.server_cert.clone(),
            key: self.server_key.clone(),
            client_ca: mutual.then(|| self.ca.clone()),
        }
    }

    /// A client's files, presenting the client certificate when `identity`.
    pub fn client_files(&self, identity: bool) -> crate::ClientFiles {
        crate::ClientFiles {
            ca: self.ca.clone(),
            cert: identity.then(|| self.client_cert.clone()),
            key: identity.then(|| self.client_key.clone()),
        }
    }
}

/// Why certificates could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("generating a certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("writing {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Makes a new CA and a server and a client certificate signed by it, and
/// writes them into `dir` (created if missing). Every call makes a new CA, so
/// two calls give certificates that do not trust each other.
pub fn write_lab_certs(dir: &Path) -> Result<LabCerts, GenerateError> {
    let write = |name: &str, text: &str| -> Result<PathBuf, GenerateError> {
        let path = dir.join(name);
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&path, text))
            .map_err(|source| GenerateError::Write {
                path: path.clone(),
                source,
            })?;
        Ok(path)
    };

    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "msa-transport-lab throwaway CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

    let leaf = |names: Vec<String>, cn: &str, usage: ExtendedKeyUsagePurpose| {
        let mut params = CertificateParams::new(names)?;
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca)?;
        Ok::<_, rcgen::Error>((cert.pem(), key.serialize_pem()))
    };
    let (server_pem, server_key) = leaf(
        SERVER_NAMES.iter().map(|s| (*s).to_owned()).collect(),
        "order-service",
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    let (client_pem, client_key) = leaf(
        vec!["user-service".to_owned()],
        "user-service",
        ExtendedKeyUsagePurpose::ClientAuth,
    )?;
    Ok(LabCerts {
        ca: write("ca.pem", &ca.pem())?,
        server_cert: write("server.pem", &server_pem)?,
        server_key: write("server.key", &server_key)?,
        client_cert: write("client.pem", &client_pem)?,
        client_key: write("client.key", &client_key)?,
    })
}

/// A self-signed server certificate for [`SERVER_NAMES`], and its key, in
/// memory (see `ServerTls::self_signed`).
pub fn self_signed_server()
-> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), GenerateError> {
    let mut params = CertificateParams::new(
        SERVER_NAMES
            .iter()
            .map(|s| (*s).to_owned())
            .collect::<Vec<_>>(),
    )?;
    params
        .distinguished_name
        .push(DnType::CommonName, "order-service (self-signed)");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    let der = PrivateKeyDer::Pkcs8(key.serialize_der().into());
    Ok((cert.der().clone(), der))
}
