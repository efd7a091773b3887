//! The TLS building blocks on their own, over in-process pipes: certificates
//! load or fail with a message naming the file, handshakes are counted full
//! then resumed, ALPN is negotiated, and mutual TLS refuses a client without
//! a certificate from the configured CA.

use std::path::PathBuf;
use std::sync::Arc;

use tls::generate::{LabCerts, write_lab_certs};
use tls::{ALPN_H2, ALPN_H2_HTTP1, ClientTls, HandshakeCounters, HandshakeCounts, ServerTls};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

fn temp_dir(name: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    std::env::temp_dir().join(format!(
        "tls-test-{}-{name}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ))
}

fn certs(name: &str) -> LabCerts {
    write_lab_certs(&temp_dir(name)).expect("lab certificates")
}

/// One connection: the client writes "ping", the server answers "pong".
/// Returns the client's and the server's error, if any.
async fn exchange(
    server: &tls::Acceptor,
    client: &tls::Connector,
) -> (Result<(), String>, Result<(), String>) {
    let (c, s) = tokio::io::duplex(64 * 1024);
    let srv = {
        let server = server.clone();
        tokio::spawn(async move {
            let mut s = server.accept(s).await.map_err(|e| e.to_string())?;
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
            s.write_all(b"pong").await.map_err(|e| e.to_string())?;
            s.shutdown().await.map_err(|e| e.to_string())
        })
    };
    let cli = async {
        let mut c = client
            .connect("localhost", c)
            .await
            .map_err(|e| e.to_string())?;
        c.write_all(b"ping").await.map_err(|e| e.to_string())?;
        c.flush().await.map_err(|e| e.to_string())?;
        let mut got = Vec::new();
        c.read_to_end(&mut got).await.map_err(|e| e.to_string())?;
        assert_eq!(got, b"pong");
        Ok(())
    }
    .await;
    (cli, srv.await.expect("server task"))
}

#[tokio::test]
async fn a_second_connection_resumes_the_first_session_and_both_sides_count_it() {
    let certs = certs("resume");
    let server_counts = Arc::new(HandshakeCounters::default());
    let client_counts = Arc::new(HandshakeCounters::default());
    let server = ServerTls::load(&certs.server_files(false))
        .unwrap()
        .acceptor(ALPN_H2_HTTP1, server_counts.clone());
    let client = ClientTls::load(&certs.client_files(false))
        .unwrap()
        .connector(ALPN_H2, client_counts.clone());
    for _ in 0..3 {
        let (c, s) = exchange(&server, &client).await;
        c.unwrap();
        s.unwrap();
    }
    let want = HandshakeCounts {
        full: 1,
        resumed: 2,
        failed: 0,
    };
    assert_eq!(client_counts.snapshot(), want);
    assert_eq!(server_counts.snapshot(), want);
}

#[tokio::test]
async fn mutual_tls_accepts_the_cas_client_and_refuses_the_others() {
    let certs = certs("mutual");
    let strangers = self::certs("strangers");
    let server_counts = Arc::new(HandshakeCounters::default());
    let server_tls = ServerTls::load(&certs.server_files(true)).unwrap();
    assert!(server_tls.requires_client_cert());
    let server = server_tls.acceptor(ALPN_H2_HTTP1, server_counts.clone());
    let counters = || Arc::new(HandshakeCounters::default());

    let good = ClientTls::load(&certs.client_files(true)).unwrap();
    let (c, s) = exchange(&server, &good.connector(ALPN_H2, counters())).await;
    c.unwrap();
    s.unwrap();

    let anonymous = ClientTls::load(&certs.client_files(false)).unwrap();
    let (c, s) = exchange(&server, &anonymous.connector(ALPN_H2, counters())).await;
    let (c, s) = (c.unwrap_err(), s.unwrap_err());
    assert!(s.contains("TLS handshake failed"), "{s}");
    assert!(c.to_lowercase().contains("certificate"), "{c}");

    // A client certificate from another CA, presented to this server.
    let mut wrong = strangers.client_files(true);
    wrong.ca = certs.ca.clone();
    let wrong = ClientTls::load(&wrong).unwrap();
    let (c, s) = exchange(&server, &wrong.connector(ALPN_H2, counters())).await;
    assert!(c.is_err() && s.is_err(), "{c:?} {s:?}");
    assert_eq!(server_counts.snapshot().failed, 2);
}

#[tokio::test]
async fn a_server_from_another_ca_is_refused_by_the_client() {
    let certs = certs("trust");
    let strangers = self::certs("trust-other");
    let server = ServerTls::load(&strangers.server_files(false))
        .unwrap()
        .acceptor(ALPN_H2_HTTP1, Arc::new(HandshakeCounters::default()));
    let counts = Arc::new(HandshakeCounters::default());
    let client = ClientTls::load(&certs.client_files(false))
        .unwrap()
        .connector(ALPN_H2, counts.clone());
    let (c, _) = exchange(&server, &client).await;
    let c = c.unwrap_err();
    assert!(c.contains("TLS handshake with localhost failed"), "{c}");
    // Both throwaway CAs have the same name: the signature is what fails.
    assert!(c.contains("invalid peer certificate"), "{c}");
    assert_eq!(counts.snapshot().failed, 1);
}

#[test]
fn unusable_files_are_named_with_what_is_wrong() {
    let certs = certs("files");
    let missing = certs.ca.with_file_name("nope.pem");
    let e = tls::load_certs("CA", &missing).unwrap_err().to_string();
    assert!(
        e.contains("cannot read the CA file") && e.contains("nope.pem"),
        "{e}"
    );

    // A key where a certificate should be, and the other way round.
    let e = tls::load_certs("server certificate", &certs.server_key)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("server.key") && e.contains("BEGIN CERTIFICATE"),
        "{e}"
    );
    let e = tls::load_key("server key", &certs.server_cert)
        .unwrap_err()
        .to_string();
    assert!(e.contains("server.pem") && e.contains("PRIVATE KEY"), "{e}");

    // A key that belongs to another certificate.
    let mut files = certs.server_files(false);
    files.key = certs.client_key.clone();
    let e = ServerTls::load(&files).unwrap_err().to_string();
    assert!(
        e.contains("client.key") && e.contains("does not go with"),
        "{e}"
    );

    let mut half = certs.client_files(true);
    half.key = None;
    assert!(matches!(
        ClientTls::load(&half),
        Err(tls::TlsError::HalfIdentity)
    ));
}
