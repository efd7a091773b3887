//! Answers given before the request's body is read, over HTTP/1.1, on
//! user-service's REST listener: the client sees the answer, and its
//! connection stays usable (the body read and thrown away) or is closed
//! with `Connection: close`, never cut under a client still writing. The
//! client is raw TCP, so what is checked is what the server wrote and
//! whether the socket took the body.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;

use crate::helpers::{OrderService, spawn_users};
use testkit::http::{PostThenGet, post_then_get, read_h1};

fn json() -> [(&'static str, &'static str); 1] {
    [("content-type", "application/json")]
}

/// The answer to a GET of `/readyz` after an early answer: the connection
/// was kept, and it works.
fn assert_usable(p: &PostThenGet) {
    match &p.second {
        Ok(a) => assert_eq!((a.status, &a.body[..]), (200, &b"ready"[..]), "{a:?}"),
        Err(e) => panic!(
            "the connection was closed after the early answer ({e}); its `connection` header: {:?}",
            p.first.header("connection")
        ),
    }
}

#[tokio::test]
async fn a_post_to_no_route_answered_early_leaves_the_connection_usable() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    // 256 KiB, none of which the 404 reads.
    let p = post_then_get(
        users.rest,
        "/v1/no-such-route",
        &json(),
        vec![b' '; 256 * 1024],
    )
    .await;
    assert_eq!(p.first.status, 404, "{:?}", p.first);
    p.wrote.as_ref().expect("the whole body was taken");
    assert_usable(&p);
    users.stop().await;
    orders.stop().await;
}

#[tokio::test]
async fn an_oversized_registration_gets_its_413_and_the_connection_stays_usable() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    // 5 MB against the 64 KiB cap: refused on its announced length, then
    // read off and thrown away (under the 8 MiB drain bound).
    let p = post_then_get(users.rest, "/v1/users", &json(), vec![b' '; 5_000_000]).await;
    assert_eq!(p.first.status, 413, "{:?}", p.first);
    p.wrote.as_ref().expect("the whole 5 MB was taken");
    assert_usable(&p);
    users.stop().await;
    orders.stop().await;
}

/// A body that stops coming: the early answer waits for it no longer than
/// the drain's 2 s, then goes out saying `Connection: close`, and the
/// connection ends cleanly after it (nothing unread, so no reset).
#[tokio::test]
async fn an_early_answer_whose_body_stops_coming_says_connection_close() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    let s = TcpStream::connect(users.rest).await.unwrap();
    let (r, mut w) = s.into_split();
    w.write_all(
        b"POST /v1/users HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000000\r\n\r\n",
    )
    .await
    .unwrap();
    w.write_all(&[b' '; 1024]).await.unwrap();
    w.flush().await.unwrap();
    let sent = Instant::now();
    let mut r = BufReader::new(r);
    let first = tokio::time::timeout(Duration::from_secs(10), read_h1(&mut r))
        .await
        .expect("an answer within 10 s")
        .expect("the answer");
    let waited = sent.elapsed();
    assert_eq!(first.status, 413, "{first:?}");
    assert_eq!(first.header("connection"), Some("close"), "{first:?}");
    // It waited for the body (up to the drain's bound) before giving up.
    assert!(waited >= Duration::from_millis(1500), "{waited:?}");
    // Then the end of the connection, not a reset.
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(10), r.read_to_end(&mut rest))
        .await
        .expect("the connection ends within 10 s")
        .expect("a clean end, not a reset");
    assert_eq!(n, 0, "{:?}", String::from_utf8_lossy(&rest));
    drop(w);
    users.stop().await;
    orders.stop().await;
}
