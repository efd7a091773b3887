//! QUIC address validation: what the HTTP/3 listener sends to an address
//! that has not shown it receives what is sent there (a forged one, say).
//!
//! A relay the test owns stands between a quinn client and order-service
//! and forwards only as many of the client's datagrams as the case allows;
//! it counts every byte the service sends back and reads each datagram's
//! QUIC packet type from its first byte (RFC 9000 §17.2), an oracle that
//! does not go through quinn's server.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::UdpSocket;

use crate::helpers::{Backend, spawn_with};

/// A long-header packet's type (RFC 9000 §17.2, QUIC version 1), or
/// `None` for a short header.
fn long_type(datagram: &[u8]) -> Option<&'static str> {
    let first = *datagram.first()?;
    if first & 0x80 == 0 {
        return None;
    }
    Some(match (first >> 4) & 0x3 {
        0 => "Initial",
        1 => "0-RTT",
        2 => "Handshake",
        _ => "Retry",
    })
}

/// What went through the relay.
#[derive(Debug, Default)]
struct Seen {
    /// Bytes of the client's datagrams forwarded to the service.
    forwarded: usize,
    /// The client's datagrams not forwarded.
    held_back: usize,
    /// Every datagram the service sent back.
    back: Vec<Vec<u8>>,
}

impl Seen {
    fn bytes_back(&self) -> usize {
        self.back.iter().map(Vec::len).sum()
    }
}

/// A relay on a port of its own: the client's first `forward` datagrams
/// go to `service` (every one with `None`), everything the service sends
/// goes back to the client.
async fn relay(service: SocketAddr, forward: Option<usize>) -> (SocketAddr, Arc<Mutex<Seen>>) {
    let front = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let back = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    back.connect(service).await.unwrap();
    let addr = front.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let client: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
    let (to_service, from_client) = (back.clone(), front.clone());
    let (seen_in, client_in) = (seen.clone(), client.clone());
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        let mut n_forwarded = 0;
        while let Ok((n, from)) = from_client.recv_from(&mut buf).await {
            *client_in.lock().unwrap() = Some(from);
            if forward.is_some_and(|f| n_forwarded >= f) {
                seen_in.lock().unwrap().held_back += 1;
                continue;
            }
            n_forwarded += 1;
            seen_in.lock().unwrap().forwarded += n;
            let _ = to_service.send(&buf[..n]).await;
        }
    });
    let seen_out = seen.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = back.recv(&mut buf).await {
            seen_out.lock().unwrap().back.push(buf[..n].to_vec());
            let to = *client.lock().unwrap();
            if let Some(to) = to {
                let _ = front.send_to(&buf[..n], to).await;
            }
        }
    });
    (addr, seen)
}

/// A client endpoint that takes the service's self-signed certificate
/// (its token store, quinn's default, keeps what a server's NEW_TOKEN
/// frames give it).
fn client(relay: SocketAddr) -> quinn::Endpoint {
    let tls = tls::ClientTls::unverified().unwrap();
    service_kit::h3_client::endpoint(&tls, relay).unwrap()
}

/// A connection through `relay` on `ep`, its handshake given `wait`.
async fn connect(
    ep: &quinn::Endpoint,
    relay: SocketAddr,
    wait: Duration,
) -> Result<quinn::Connection, String> {
    let connecting = ep.connect(relay, "localhost").unwrap();
    match tokio::time::timeout(wait, connecting).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no handshake within {wait:?}")),
    }
}

/// One GET over `conn`: its status.
async fn get(conn: quinn::Connection, relay: SocketAddr) -> u16 {
    let (mut driver, mut send): (_, h3::client::SendRequest<_, bytes::Bytes>) =
        h3::client::new(h3_quinn::Connection::new(conn))
            .await
            .unwrap();
    tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
    let user = dataset::fixed_user_id(3);
    let mut req = send
        .send_request(
            http::Request::get(format!("https://{relay}/v2/orders?user_id={user}&limit=1"))
                .body(())
                .unwrap(),
        )
        .await
        .unwrap();
    req.finish().await.unwrap();
    req.recv_response().await.unwrap().status().as_u16()
}

fn retries(seen: &Seen) -> usize {
    seen.back
        .iter()
        .filter(|d| long_type(d) == Some("Retry"))
        .count()
}

/// One Initial from an address that never answers (the relay forwards the
/// client's first datagram and nothing after it), watched for 3 s, long
/// enough for the resends a handshake makes when its flight is not
/// acknowledged (quinn's first probe comes after about a second).
async fn one_initial(retry: bool) -> Seen {
    let app = spawn_with(Backend::Memory, |s| s.quic_retry = retry).await;
    let (relay, seen) = relay(app.h3.unwrap(), Some(1)).await;
    let ep = client(relay);
    let watch = tokio::time::Instant::now() + Duration::from_secs(3);
    let got = connect(&ep, relay, Duration::from_secs(3)).await;
    // With a Retry the client's second Initial never reaches the service,
    // so no handshake; without, the client ends its side of the handshake
    // on the service's flight alone, while the service, never hearing
    // back, resends.
    assert_eq!(got.is_err(), retry, "{got:?}");
    tokio::time::sleep_until(watch).await;
    app.stop().await;
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    assert!(seen.held_back > 0, "the client never sent again: {seen:?}");
    // A client's Initial is padded to at least 1,200 bytes (RFC 9000 §14.1).
    assert!(seen.forwarded >= 1200, "{seen:?}");
    eprintln!(
        "validation {}: {} bytes back in {} datagrams for {} received",
        if retry { "on" } else { "off" },
        seen.bytes_back(),
        seen.back.len(),
        seen.forwarded
    );
    seen
}

#[tokio::test]
async fn an_address_not_validated_gets_a_retry_and_nothing_more() {
    let seen = one_initial(true).await;
    let types: Vec<_> = seen.back.iter().map(|d| long_type(d)).collect();
    assert!(
        !types.is_empty() && types.iter().all(|t| *t == Some("Retry")),
        "the service's datagrams: {types:?}"
    );
    // RFC 9000 §8.1: at most three times what came from the address.
    assert!(
        seen.bytes_back() <= 3 * seen.forwarded,
        "{} bytes back for {} received",
        seen.bytes_back(),
        seen.forwarded
    );
    // A Retry holds two connection IDs, a token and a 16-byte tag: far
    // less than a handshake flight.
    assert!(seen.bytes_back() < 400, "{} bytes back", seen.bytes_back());
}

#[tokio::test]
async fn without_validation_the_handshake_answers_at_once() {
    // The other setting, through the same relay: the service's first
    // answer is its Initial (the handshake's start), and it sends far more
    // than a Retry to an address that never showed it receives anything.
    let seen = one_initial(false).await;
    assert_eq!(
        long_type(&seen.back[0]),
        Some("Initial"),
        "{:?}",
        seen.back.len()
    );
    assert!(
        !seen.back.iter().any(|d| long_type(d) == Some("Retry")),
        "a Retry with validation off"
    );
    assert!(
        seen.bytes_back() >= 1200,
        "{} bytes back",
        seen.bytes_back()
    );
}

#[tokio::test]
async fn a_client_that_answers_its_retry_is_served_and_skips_it_next_time() {
    // Every datagram forwarded: the Retry, then the handshake with its
    // token, then a request answered.
    let app = spawn_with(Backend::Memory, |_| {}).await;
    let (relay, seen) = relay(app.h3.unwrap(), None).await;
    let ep = client(relay);
    let wait = Duration::from_secs(10);
    let first = connect(&ep, relay, wait)
        .await
        .expect("a handshake after the Retry");
    assert_eq!(get(first.clone(), relay).await, 200);
    assert_eq!(
        retries(&seen.lock().unwrap()),
        1,
        "Retries for the first connection"
    );
    // The service gave the client NEW_TOKEN frames with the handshake
    // (sent once it is confirmed; a moment for them to arrive): a new
    // connection from the same client presents one and is served without
    // a Retry, so only a client's first connection pays the round trip.
    tokio::time::sleep(Duration::from_millis(200)).await;
    first.close(0u32.into(), b"done");
    let second = connect(&ep, relay, wait).await.expect("a second handshake");
    assert_eq!(get(second, relay).await, 200);
    app.stop().await;
    let seen = seen.lock().unwrap();
    assert_eq!(retries(&seen), 1, "Retries over two connections");
    assert_eq!(seen.held_back, 0);
}
