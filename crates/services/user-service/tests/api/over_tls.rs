//! TLS end to end: user-service calling order-service over TLS on every
//! transport gets exactly the orders it gets in cleartext; the bytes it
//! counts are the bytes on the wire (TLS records, so more than cleartext);
//! handshakes and resumptions are counted on both sides; mutual TLS refuses
//! a user-service without a client certificate, and the answer says TLS
//! failed. Certificates are made here (rcgen) for each test.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tls::generate::{LabCerts, write_lab_certs};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use user_service::upstream::Transport;

use crate::helpers::{OrderService, spawn_users, spawn_users_on, spawn_users_with};

fn lab_certs(name: &str) -> LabCerts {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "user-service-tls-{}-{name}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    write_lab_certs(&dir).expect("lab certificates")
}

/// order-service with TLS on every listener (and mutual TLS when `mutual`).
async fn tls_order_service(certs: &LabCerts, mutual: bool) -> OrderService {
    let files = certs.server_files(mutual);
    OrderService::start_with(|s| {
        s.tls_cert = Some(files.cert);
        s.tls_key = Some(files.key);
        s.tls_client_ca = files.client_ca;
    })
    .await
}

/// Points user-service at `orders` over TLS, presenting the client
/// certificate when `identity`. The URLs say https://, which is accepted
/// once TLS is configured.
fn dial_over_tls(
    s: &mut user_service::Settings,
    orders: &OrderService,
    certs: &LabCerts,
    identity: bool,
) {
    s.order_rest_url = format!("https://{}", orders.rest).parse().unwrap();
    s.order_grpc_url = format!("https://{}", orders.grpc).parse().unwrap();
    let files = certs.client_files(identity);
    s.order_tls_ca = Some(files.ca);
    s.order_tls_cert = files.cert;
    s.order_tls_key = files.key;
}

/// `GET path` over HTTPS/1.1 with a raw request, trusting the lab CA (and
/// presenting its client certificate, for mutual TLS): the whole answer.
async fn https_get(addr: SocketAddr, path: &str, certs: &LabCerts) -> String {
    let client = tls::ClientTls::load(&certs.client_files(true)).unwrap();
    let connector = client.connector(tls::ALPN_HTTP1, Arc::default());
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut s = connector.connect("localhost", tcp).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).await.unwrap();
    answer
}

/// The value of the sample of `name` whose labels include every one of `labels`.
fn sample(text: &str, name: &str, labels: &[&str]) -> u64 {
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|x| l.contains(x)))
        .unwrap_or_else(|| panic!("no {name} with {labels:?} in:\n{text}"))
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn every_transport_gives_over_tls_the_orders_it_gives_in_cleartext() {
    let certs = lab_certs("same-orders");
    let plain_orders = OrderService::start().await;
    let plain = spawn_users(&plain_orders).await;
    let tls_orders = tls_order_service(&certs, false).await;
    let tls = spawn_users_with(&tls_orders, |s| {
        dial_over_tls(s, &tls_orders, &certs, false)
    })
    .await;

    for via in Transport::ALL {
        for (count, query) in [
            (100u32, "&limit=1000"),
            (1_000, "&limit=1000&fields=status,total_minor"),
        ] {
            let id = dataset::fixed_user_id(count);
            let (_, want) = plain.orders_ok(id, via, query).await;
            let (_, got) = tls.orders_ok(id, via, query).await;
            assert!(!want.is_empty());
            assert_eq!(got, want, "over {via} with TLS, user {count}{query}");
        }
        let (p, t) = (plain.snapshot(via), tls.snapshot(via));
        if via.is_quic() {
            // QUIC encrypts either way (without TLS settings, with the
            // server's self-signed certificate, unverified): no cleartext
            // to compare, and quinn does not say whether a handshake
            // resumed, so none is counted by kind.
            assert!(
                t.connections_opened >= 1 && p.connections_opened >= 1,
                "{via}"
            );
            assert_eq!(t.tls, tls::HandshakeCounts::default(), "{via}");
            continue;
        }
        // Two calls went each way: the TLS ones moved more bytes, counted
        // on the socket under TLS (records, handshake and certificates).
        assert!(
            t.bytes_read > p.bytes_read && t.bytes_written > p.bytes_written,
            "over {via}: TLS read {} / wrote {}, cleartext {} / {}",
            t.bytes_read,
            t.bytes_written,
            p.bytes_read,
            p.bytes_written
        );
        // Every transport's connector shares one session cache, so a
        // transport may resume a session another one began.
        assert!(t.tls.full + t.tls.resumed >= 1, "over {via}: {:?}", t.tls);
        assert_eq!(t.tls.failed, 0, "over {via}");
        assert_eq!(p.tls, tls::HandshakeCounts::default(), "cleartext {via}");
    }

    // A connection per call: the second and later resume the first session.
    let via = Transport::H1JsonClose;
    let before = tls.snapshot(via).tls;
    for _ in 0..3 {
        tls.orders_ok(dataset::fixed_user_id(1), via, "").await;
    }
    let after = tls.snapshot(via).tls;
    assert_eq!(after.resumed - before.resumed, 3, "{before:?} -> {after:?}");
    assert_eq!(after.full, before.full, "{before:?} -> {after:?}");

    // Both sides put the counts on /metrics.
    let text = tls.metrics_text().await;
    let resumed = sample(
        &text,
        "user_upstream_tls_handshakes_total",
        &["via=\"h1-json-close\"", "kind=\"resumed\""],
    );
    assert_eq!(resumed, after.resumed);
    let text = https_get(tls_orders.rest, "/metrics", &certs).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    for listener in ["rest", "grpc", "tcp"] {
        let l = format!("listener=\"{listener}\"");
        let done = sample(&text, "order_tls_handshakes_total", &[&l, "kind=\"full\""])
            + sample(
                &text,
                "order_tls_handshakes_total",
                &[&l, "kind=\"resumed\""],
            );
        assert!(done >= 1, "{listener}: {done}");
        let failed = sample(&text, "order_tls_handshake_failures_total", &[&l]);
        assert_eq!(failed, 0, "{listener}");
    }
    let resumed = sample(
        &text,
        "order_tls_handshakes_total",
        &["listener=\"rest\"", "kind=\"resumed\""],
    );
    assert!(resumed >= 3, "order-service counted {resumed} resumptions");
    // HTTP/2 over TLS is `h2` on order-service's books, never `h2c`: the
    // h2c-* transports made two calls each over it above.
    let h2 = sample(
        &text,
        "order_requests_total",
        &["protocol=\"h2\"", "route=\"/v2/orders\"", "code=\"200\""],
    );
    assert!(h2 >= 4, "order-service counted {h2} HTTP/2 calls over TLS");
    assert!(!text.contains("protocol=\"h2c\""), "{text}");

    tls.stop().await;
    plain.stop().await;
    tls_orders.stop().await;
    plain_orders.stop().await;
}

#[tokio::test]
async fn mutual_tls_refuses_a_caller_without_a_client_certificate_and_the_answer_says_tls() {
    let certs = lab_certs("mutual");
    let strangers = lab_certs("mutual-strangers");
    let orders = tls_order_service(&certs, true).await;
    let trusted = spawn_users_with(&orders, |s| dial_over_tls(s, &orders, &certs, true)).await;
    let anonymous = spawn_users_with(&orders, |s| dial_over_tls(s, &orders, &certs, false)).await;
    // A certificate from another CA, presented to this order-service.
    let stranger = spawn_users_with(&orders, |s| {
        dial_over_tls(s, &orders, &certs, false);
        let theirs = strangers.client_files(true);
        s.order_tls_cert = theirs.cert;
        s.order_tls_key = theirs.key;
    })
    .await;

    let id = dataset::fixed_user_id(10);
    for via in Transport::ALL {
        let (_, got) = trusted.orders_ok(id, via, "").await;
        assert_eq!(got.len(), 10, "over {via} with a client certificate");
        for (who, users) in [("anonymous", &anonymous), ("stranger", &stranger)] {
            let res = users.orders(id, via, "").await;
            let status = res.status();
            let body = res.text().await.unwrap();
            assert_eq!(status, 503, "{who} over {via}: {body}");
            assert!(
                body.contains("TLS") && body.contains("alert"),
                "{who} over {via}: the answer should name the TLS failure: {body}"
            );
        }
    }
    let text = https_get(orders.rest, "/metrics", &certs).await;
    let failed: u64 = ["rest", "grpc", "tcp"]
        .iter()
        .map(|l| {
            sample(
                &text,
                "order_tls_handshake_failures_total",
                &[&format!("listener=\"{l}\"")],
            )
        })
        .sum();
    assert!(
        failed >= 20,
        "order-service counted {failed} failed handshakes"
    );

    stranger.stop().await;
    anonymous.stop().await;
    trusted.stop().await;
    orders.stop().await;
}

#[tokio::test]
async fn user_service_serves_its_own_rest_over_tls_and_counts_the_handshakes() {
    let certs = lab_certs("own-listeners");
    let files = certs.server_files(false);
    let settings = user_service::Settings {
        tls_cert: Some(files.cert),
        tls_key: Some(files.key),
        ..Default::default()
    };
    let users = spawn_users_on(settings, None).await;
    let health = https_get(users.rest, "/healthz", &certs).await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let text = https_get(users.rest, "/metrics", &certs).await;
    let handshakes = sample(
        &text,
        "user_tls_handshakes_total",
        &["listener=\"rest\"", "kind=\"full\""],
    ) + sample(
        &text,
        "user_tls_handshakes_total",
        &["listener=\"rest\"", "kind=\"resumed\""],
    );
    assert_eq!(handshakes, 2, "{text}");
    // Cleartext is refused on a TLS listener.
    let plain = users.http.get(users.url("/healthz")).send().await;
    assert!(plain.is_err(), "{plain:?}");
    users.stop().await;
}
