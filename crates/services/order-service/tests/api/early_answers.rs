//! Answers given before the request's body is read, over HTTP/1.1: the
//! client must see the answer, and its connection must stay usable (the
//! body read and thrown away) or be closed with `Connection: close`, never
//! cut under a client still writing. The client is raw TCP, so what is
//! checked is what the server wrote and whether the socket took the body.

use crate::helpers::{Backend, TestApp, spawn};
use testkit::http::{PostThenGet, RawAnswer, post_then_get};

/// [`post_then_get`] of a Connect call.
async fn connect_then_get(
    app: &TestApp,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (std::io::Result<()>, RawAnswer, std::io::Result<RawAnswer>) {
    let PostThenGet {
        wrote,
        first,
        second,
    } = post_then_get(
        app.rest,
        path,
        &[
            ("content-type", content_type),
            ("connect-protocol-version", "1"),
        ],
        body,
    )
    .await;
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
    let (wrote, first, second) = connect_then_get(
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
    let (wrote, first, second) = connect_then_get(
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

/// gRPC-web over HTTP/1.1, on the gRPC port: a call to a method that does
/// not exist is answered (`grpc-status: 12`) before its 256 KiB body is
/// read; the body is read off, and the connection takes the next request.
#[tokio::test]
async fn a_grpc_web_call_answered_early_leaves_the_connection_usable() {
    let app = spawn(Backend::Memory).await;
    let p = post_then_get(
        app.grpc,
        "/order.v2.OrderService/NoSuchMethod",
        &[("content-type", "application/grpc-web+proto")],
        vec![0u8; 256 * 1024],
    )
    .await;
    assert_eq!(p.first.header("grpc-status"), Some("12"), "{:?}", p.first);
    p.wrote.expect("the whole body was taken");
    let second = p.second.unwrap_or_else(|e| {
        panic!(
            "the connection was closed after the early answer ({e}); its `connection` header: {:?}",
            p.first.header("connection")
        )
    });
    // Whatever the gRPC port answers a GET, it answered on the same
    // connection.
    assert!(second.status >= 200, "{second:?}");
    app.stop().await;
}
