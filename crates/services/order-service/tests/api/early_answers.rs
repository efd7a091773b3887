//! Answers given before the request's body is read, over HTTP/1.1: the
//! client must see the answer, and its connection must stay usable (the
//! body read and thrown away) or be closed with `Connection: close`, never
//! cut under a client still writing. The client is raw TCP, so what is
//! checked is what the server wrote and whether the socket took the body.

use std::time::Duration;

use tokio::io::{AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;

use crate::helpers::{Backend, TestApp, spawn};
use testkit::http::{RawAnswer, read_h1};

/// Sends a POST of `body` to `path` and, on the same connection, a GET of
/// `/readyz`, writing while the answers are read (as a client streaming its
/// upload does); the write's outcome and both answers.
async fn post_then_get(
    app: &TestApp,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (std::io::Result<()>, RawAnswer, std::io::Result<RawAnswer>) {
    let s = TcpStream::connect(app.rest).await.unwrap();
    let (r, mut w) = s.into_split();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: {content_type}\r\nconnect-protocol-version: 1\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let writer = tokio::spawn(async move {
        w.write_all(head.as_bytes()).await?;
        w.write_all(&body).await?;
        w.write_all(b"GET /readyz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await?;
        w.flush().await?;
        // Returned, so that the write half stays open until the answers
        // are read.
        Ok::<_, std::io::Error>(w)
    });
    let mut r = BufReader::new(r);
    let first = tokio::time::timeout(Duration::from_secs(10), read_h1(&mut r))
        .await
        .expect("an answer within 10 s")
        .expect("the first answer");
    let second = tokio::time::timeout(Duration::from_secs(10), read_h1(&mut r))
        .await
        .expect("the second answer or the end within 10 s");
    let wrote = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the write ends within 10 s")
        .unwrap()
        .map(drop);
    (wrote, first, second)
}

/// The Connect error code of a JSON error body.
fn code(a: &RawAnswer) -> String {
    let v: serde_json::Value = serde_json::from_slice(&a.body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&a.body)));
    v["code"].as_str().unwrap_or_default().to_owned()
}

/// 256 KiB: more than the server reads before it answers a route that
/// does not exist (nothing).
#[tokio::test]
async fn an_unknown_connect_method_answered_early_leaves_the_connection_usable() {
    let app = spawn(Backend::Memory).await;
    let (wrote, first, second) = post_then_get(
        &app,
        "/order.v2.OrderService/NoSuchMethod",
        "application/json",
        vec![b' '; 256 * 1024],
    )
    .await;
    assert_eq!(first.status, 404, "{first:?}");
    wrote.expect("the whole body was taken");
    match second {
        Ok(a) => assert_eq!((a.status, &a.body[..]), (200, &b"ready"[..]), "{a:?}"),
        Err(e) => panic!(
            "the connection was closed after the early answer ({e}); its `connection` header: {:?}",
            first.header("connection")
        ),
    }
    app.stop().await;
}

/// A 5 MB Connect request, over the 1 MiB cap: refused as
/// `resource_exhausted`, with the body taken and the connection usable.
#[tokio::test]
async fn an_oversized_connect_request_gets_its_refusal_not_a_broken_pipe() {
    let app = spawn(Backend::Memory).await;
    let (wrote, first, second) = post_then_get(
        &app,
        "/order.v2.OrderService/ListOrders",
        "application/proto",
        vec![0u8; 5_000_000],
    )
    .await;
    assert_eq!(code(&first), "resource_exhausted", "{first:?}");
    wrote.expect("the whole 5 MB was taken");
    let second = second.expect("the connection stays usable");
    assert_eq!(second.status, 200, "{second:?}");
    app.stop().await;
}
