//! HTTP/2 past the preface, on the h2c REST port and the gRPC port: a head
//! trickled after the preface is cut at the header-read timeout (it lasted
//! until the idle timeout on h2c, 80 s on gRPC), a gRPC connection with no
//! call in flight is closed at the idle timeout even while it keeps sending
//! pings (it was kept for ever), gRPC-web's HTTP/1.1 heads are under the
//! setting (they had hyper's 30 s), and a call in flight is never cut as
//! idle.
//! Bounds are functional: a cutoff set at a fraction of a second must have
//! cut within seconds.

use std::time::{Duration, Instant};

use proto::order::v2 as pb2;
use testkit::flood::closed_within;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

use crate::helpers::{Backend, spawn_with};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// An HTTP/2 frame.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The preface and an empty SETTINGS frame.
fn opening() -> Vec<u8> {
    [PREFACE, &frame(0x4, 0, 0, &[])].concat()
}

/// Writes `bytes` one at a time, `every` apart, until the server closes the
/// connection or `for_at_most` passes; returns how long it stayed open.
async fn trickle(
    c: &mut TcpStream,
    bytes: &[u8],
    every: Duration,
    for_at_most: Duration,
) -> Duration {
    let started = Instant::now();
    for b in bytes.iter().cycle() {
        if started.elapsed() > for_at_most || c.write_all(&[*b]).await.is_err() {
            break;
        }
        tokio::time::sleep(every).await;
    }
    closed_within(c, Duration::from_secs(5)).await;
    started.elapsed()
}

/// Trickles `byte` every 50 ms on `c`, whose server cuts a head at a
/// fraction of a second: the connection must be closed within 5 s (the
/// trickle goes on for 10 s at most).
async fn cut_while_trickled(c: &mut TcpStream, byte: u8, what: &str) {
    let lasted = trickle(
        c,
        &[byte],
        Duration::from_millis(50),
        Duration::from_secs(10),
    )
    .await;
    assert!(lasted < Duration::from_secs(5), "{what} lasted {lasted:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_trickled_after_the_preface_is_cut_at_the_header_read_timeout() {
    let app = spawn_with(Backend::Memory, |s| {
        s.header_read_timeout_ms = 300;
        s.idle_timeout_ms = 60_000;
    })
    .await;
    for (name, addr) in [("h2c REST", app.rest), ("gRPC", app.grpc)] {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(&opening()).await.unwrap();
        // A HEADERS frame announcing 200 bytes of header block, then one
        // byte of it every 50 ms.
        c.write_all(&[0, 0, 200, 0x1, 0x4, 0, 0, 0, 1])
            .await
            .unwrap();
        cut_while_trickled(&mut c, 0x40, &format!("{name}: the trickled head")).await;
    }
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_web_s_http1_head_is_under_the_header_read_timeout() {
    let app = spawn_with(Backend::Memory, |s| s.header_read_timeout_ms = 300).await;
    let mut c = TcpStream::connect(app.grpc).await.unwrap();
    c.write_all(b"POST /order.v2.OrderService/ListOrders HTTP/1.1\r\nx-slow: ")
        .await
        .unwrap();
    cut_while_trickled(&mut c, b'a', "the trickled head").await;
    app.stop().await;
}

/// A keep-alive gRPC-web connection's next head is under the setting too
/// (it had hyper's 30 s): one whole request is answered, then the next
/// head, trickled, is cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_web_s_later_heads_are_under_the_header_read_timeout_too() {
    use tokio::io::AsyncReadExt as _;
    let app = spawn_with(Backend::Memory, |s| {
        s.header_read_timeout_ms = 300;
        s.idle_timeout_ms = 60_000;
    })
    .await;
    let mut c = TcpStream::connect(app.grpc).await.unwrap();
    // An empty HealthCheckRequest: a 5-byte gRPC frame of length 0.
    c.write_all(
        b"POST /grpc.health.v1.Health/Check HTTP/1.1\r\nhost: t\r\n\
          content-type: application/grpc-web+proto\r\nx-grpc-web: 1\r\n\
          content-length: 5\r\n\r\n\0\0\0\0\0",
    )
    .await
    .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    // The answer's last chunk ends the chunked body.
    while !answer.ends_with(b"0\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
            .await
            .expect("answered in time")
            .unwrap();
        assert!(n > 0, "closed before the answer: {answer:?}");
        answer.extend_from_slice(&buf[..n]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    // Longer than the setting: an idle keep-alive connection is not a head.
    tokio::time::sleep(Duration::from_millis(600)).await;
    c.write_all(b"POST /grpc.health.v1.Health/Check HTTP/1.1\r\nx-slow: ")
        .await
        .unwrap();
    cut_while_trickled(&mut c, b'a', "the second head, trickled,").await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_connection_with_no_call_in_flight_is_closed_at_the_idle_timeout_whatever_it_sends()
{
    let app = spawn_with(Backend::Memory, |s| {
        s.idle_timeout_ms = 400;
        s.header_read_timeout_ms = 60_000;
    })
    .await;
    let mut c = TcpStream::connect(app.grpc).await.unwrap();
    c.write_all(&opening()).await.unwrap();
    c.write_all(&frame(0x4, 0x1, 0, &[])).await.unwrap(); // SETTINGS ack
    // A PING every 50 ms: the connection is alive, and has no call.
    let ping = frame(0x6, 0, 0, &[7; 8]);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        if c.write_all(&ping).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    closed_within(&mut c, Duration::from_secs(5)).await;
    let lasted = started.elapsed();
    assert!(
        lasted < Duration::from_secs(5),
        "a pinging connection lasted {lasted:?}"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_is_not_idle_and_a_channel_closed_as_idle_calls_again() {
    let app = spawn_with(Backend::Memory, |s| s.idle_timeout_ms = 300).await;
    let user = "00000000-0000-0000-0000-000000000010";
    let lookup = |id| pb2::LookupOrdersRequest {
        request_id: id,
        user_id: user.into(),
        page_size: 1,
        ..Default::default()
    };
    // A bidi stream left quiet for four idle timeouts still answers.
    let mut g = app.grpc_v2().await;
    let (tx, mut answers) = crate::helpers::lookups(&mut g, [lookup(1)]).await;
    assert!(answers.message().await.unwrap().unwrap().error.is_none());
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    tx.send(lookup(2)).await.unwrap();
    let second = answers.message().await.unwrap().unwrap();
    assert_eq!((second.request_id, second.error), (2, None));
    drop(tx);
    while answers.message().await.unwrap().is_some() {}

    // A unary client idle past the timeout: its connection is closed, and
    // the channel's next call is answered on a new one.
    let list = pb2::ListOrdersRequest {
        user_id: user.into(),
        page_size: 1,
        ..Default::default()
    };
    g.list_orders(list.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let page = g.list_orders(list).await.unwrap().into_inner();
    assert_eq!(page.orders.len(), 1);
    app.stop().await;
}
