//! [`serve`](super::serve): the backlog taken at shutdown, each bound of
//! [`ConnLimits`] on real connections, and the drain's end.

use testkit::flood::closed_within;

use super::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Connections the kernel completed but the server never accepted, each
/// with its request already written, when the shutdown comes: closing
/// the listener would reset every one. All are answered instead.
#[tokio::test]
async fn requests_waiting_in_the_accept_backlog_are_answered_at_shutdown() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let addr = listener.local_addr().expect("address");
    let mut clients = Vec::new();
    for _ in 0..6 {
        let mut c = TcpStream::connect(addr)
            .await
            .expect("connects into the backlog");
        c.write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
            .await
            .expect("writes");
        clients.push(c);
    }
    let router = Router::new().route("/", axum::routing::get(|| async { "served" }));
    // The shutdown has already come when serve starts: before the fix,
    // the accept loop stopped at once and the listener's close reset
    // every waiting connection.
    let server = tokio::spawn(serve(
        listener,
        router,
        std::future::ready(()),
        ConnLimits::new(Duration::from_secs(5), 256),
        ConnCap::new("rest", 64),
    ));
    for mut c in clients {
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(10), c.read_to_string(&mut answer))
            .await
            .expect("the answer comes")
            .expect("no reset");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{answer}"
        );
        assert!(answer.ends_with("served"), "{answer}");
    }
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("serve returns once every connection ended")
        .expect("no panic")
        .expect("no error");
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the listener is closed"
    );
}

/// A server on port 0 with these bounds: `/` answers at once, `/echo`
/// reads its body with [`crate::negotiate::read_body`], `/slow` takes a minute.
async fn bounded(
    limits: ConnLimits,
) -> (
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let addr = listener.local_addr().expect("address");
    let router = Router::new()
        .route("/", axum::routing::get(|| async { "served" }))
        .route(
            "/echo",
            axum::routing::post(
                |headers: axum::http::HeaderMap, body: axum::body::Body| async move {
                    match crate::negotiate::read_body(&headers, body, 1 << 20).await {
                        Ok(b) => axum::response::IntoResponse::into_response(b),
                        Err(e) => axum::response::IntoResponse::into_response(e),
                    }
                },
            ),
        )
        .route(
            "/slow",
            axum::routing::get(|| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                "late"
            }),
        );
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        router,
        async move {
            let _ = rx.await;
        },
        limits,
        ConnCap::new("rest", 64),
    ));
    (addr, tx, server)
}

fn limits(header_read: u64, body_read: u64, idle: u64) -> ConnLimits {
    ConnLimits {
        grace: Duration::from_millis(200),
        max_streams: 16,
        header_read: Duration::from_millis(header_read),
        body_read: Duration::from_millis(body_read),
        idle: Duration::from_millis(idle),
        write: Duration::from_secs(10),
        max_age: None,
        max_age_grace: Duration::ZERO,
    }
}

#[tokio::test]
async fn a_client_that_sends_nothing_or_trickles_its_head_is_cut_at_the_header_read_timeout() {
    let (addr, _stop, _server) = bounded(limits(300, 60_000, 60_000)).await;
    // Silent: never a byte.
    let mut silent = TcpStream::connect(addr).await.expect("connects");
    closed_within(&mut silent, Duration::from_secs(5)).await;
    // A byte every 50 ms of a head that never ends.
    let mut trickle = TcpStream::connect(addr).await.expect("connects");
    let started = std::time::Instant::now();
    let mut cut = false;
    for b in b"GET / HTTP/1.1\r\nx-padding: "
        .iter()
        .chain([b'a'; 200].iter())
    {
        if trickle.write_all(&[*b]).await.is_err() {
            cut = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        if started.elapsed() > Duration::from_secs(5) {
            break;
        }
    }
    if !cut {
        closed_within(&mut trickle, Duration::from_secs(1)).await;
    }
    assert!(started.elapsed() < Duration::from_secs(5), "cut by 5 s");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_but_a_busy_one_is_not() {
    let (addr, _stop, _server) = bounded(limits(60_000, 60_000, 400)).await;
    let mut c = TcpStream::connect(addr).await.expect("connects");
    // Busy for three idle periods: a request every 100 ms is answered.
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(1200) {
        c.write_all(b"GET / HTTP/1.1\r\nhost: t\r\n\r\n")
            .await
            .expect("still open");
        let mut buf = [0u8; 512];
        let n = c.read(&mut buf).await.expect("answered");
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Then quiet: closed soon after the idle timeout.
    closed_within(&mut c, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn an_idle_h2c_connection_with_no_stream_is_closed() {
    let (addr, _stop, _server) = bounded(limits(60_000, 60_000, 400)).await;
    let mut c = TcpStream::connect(addr).await.expect("connects");
    // The preface and an empty SETTINGS frame, then nothing.
    c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .expect("writes");
    closed_within(&mut c, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_a_408() {
    let (addr, _stop, _server) = bounded(limits(60_000, 300, 60_000)).await;
    let mut c = TcpStream::connect(addr).await.expect("connects");
    c.write_all(b"POST /echo HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n0123456789")
        .await
        .expect("writes");
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
        .await
        .expect("an answer by 5 s")
        .expect("reads");
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
}

#[tokio::test]
async fn the_drain_ends_a_second_after_the_grace_whatever_clients_do() {
    let (addr, stop, server) = bounded(limits(60_000, 60_000, 60_000)).await;
    // A request whose answer takes a minute, and a head trickled so
    // slowly that its own timeout is far off.
    let mut slow = TcpStream::connect(addr).await.expect("connects");
    slow.write_all(b"GET /slow HTTP/1.1\r\nhost: t\r\n\r\n")
        .await
        .expect("writes");
    let mut trickle = TcpStream::connect(addr).await.expect("connects");
    trickle
        .write_all(b"GET / HTTP/1.1\r\n")
        .await
        .expect("writes");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the drain ends by 10 s (grace 0.2 s + 1 s)")
        .expect("no panic")
        .expect("no error");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn at_shutdown_http2_gets_goaway_at_once_and_idle_http1_its_grace() {
    let mut l = limits(60_000, 60_000, 60_000);
    l.grace = Duration::from_secs(3);
    let (addr, stop, _server) = bounded(l).await;
    let mut h2 = TcpStream::connect(addr).await.expect("connects");
    h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .expect("writes");
    let mut h1 = TcpStream::connect(addr).await.expect("connects");
    h1.write_all(b"GET / HTTP/1.1\r\nhost: t\r\n\r\n")
        .await
        .expect("writes");
    let mut buf = [0u8; 512];
    let n = h1.read(&mut buf).await.expect("answered");
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    let _ = stop.send(());
    // A GOAWAY frame (length 8, type 7) arrives at once, not after the grace.
    let mut got = Vec::new();
    let goaway = tokio::time::timeout(Duration::from_millis(1500), async {
        let mut chunk = [0u8; 1024];
        loop {
            let n = h2.read(&mut chunk).await.expect("reads");
            assert!(n > 0, "closed before a GOAWAY: {got:?}");
            got.extend_from_slice(&chunk[..n]);
            if got.windows(4).any(|w| w == [0, 0, 8, 7]) {
                break;
            }
        }
    })
    .await;
    assert!(goaway.is_ok(), "no GOAWAY within 1.5 s");
    assert!(started.elapsed() < Duration::from_millis(1500));
    // The idle HTTP/1.1 connection is still open within its grace.
    let still = tokio::time::timeout(Duration::from_millis(500), h1.read(&mut buf)).await;
    assert!(still.is_err(), "closed before its grace: {still:?}");
}
