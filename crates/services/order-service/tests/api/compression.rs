//! gRPC and REST answers are compressed only when order-service is told to:
//! a client that accepts gzip (k6's does) gets plain answers by default, so
//! that compression never enters a comparison unannounced.

use proto::order::v2 as pb2;
use tonic::codec::CompressionEncoding;

use crate::helpers::{Backend, TestApp, spawn, spawn_with};

/// The `grpc-encoding` of a 100-order answer to a client that accepts gzip.
async fn encoding_of_an_answer(app: &TestApp) -> Option<String> {
    let mut client = app
        .grpc_v2()
        .await
        .accept_compressed(CompressionEncoding::Gzip);
    let res = client
        .list_orders(pb2::ListOrdersRequest {
            user_id: "00000000-0000-0000-0000-000000000100".into(),
            page_size: 100,
            ..Default::default()
        })
        .await
        .expect("an answer");
    assert_eq!(res.get_ref().orders.len(), 100);
    res.metadata()
        .get("grpc-encoding")
        .map(|v| v.to_str().expect("ascii").to_owned())
}

#[tokio::test]
async fn answers_are_plain_unless_gzip_is_configured_even_for_a_client_that_accepts_it() {
    let app = spawn(Backend::Memory).await;
    assert_eq!(encoding_of_an_answer(&app).await, None);
    app.stop().await;

    let app = spawn_with(Backend::Memory, |s| s.grpc_gzip = true).await;
    assert_eq!(encoding_of_an_answer(&app).await.as_deref(), Some("gzip"));
    app.stop().await;
}

/// A 100-order answer from the REST API with and without
/// `Accept-Encoding: gzip`: its `Content-Encoding` and its body.
async fn rest_answer(app: &TestApp, path: &str, gzip: bool) -> (Option<String>, Vec<u8>) {
    let mut req = reqwest::Client::new().get(app.url(path));
    if gzip {
        req = req.header("accept-encoding", "gzip");
    }
    let res = req.send().await.expect("an answer");
    assert_eq!(res.status(), 200, "{path}");
    let enc = res
        .headers()
        .get("content-encoding")
        .map(|v| v.to_str().expect("ascii").to_owned());
    (enc, res.bytes().await.expect("a body").to_vec())
}

fn inflate(gz: &[u8]) -> Vec<u8> {
    use std::io::Read as _;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut out)
        .expect("gzip");
    out
}

#[tokio::test]
async fn rest_answers_are_gzipped_only_when_configured_and_asked_for() {
    const ORDERS: &str = "/v2/orders?user_id=00000000-0000-0000-0000-000000000100&limit=100";
    let app = spawn(Backend::Memory).await;
    let (enc, plain) = rest_answer(&app, ORDERS, true).await;
    assert_eq!(enc, None, "not configured: plain even when asked");
    app.stop().await;

    let app = spawn_with(Backend::Memory, |s| s.rest_gzip = true).await;
    let (enc, body) = rest_answer(&app, ORDERS, false).await;
    assert_eq!(enc, None, "not asked: plain");
    assert_eq!(body, plain);
    let (enc, gz) = rest_answer(&app, ORDERS, true).await;
    assert_eq!(enc.as_deref(), Some("gzip"));
    assert!(
        gz.len() * 3 < plain.len(),
        "{} B gzipped, {} B plain",
        gz.len(),
        plain.len()
    );
    assert_eq!(inflate(&gz), plain, "the same answer once inflated");
    // /metrics and the health checks are never compressed.
    for path in ["/metrics", "/healthz"] {
        assert_eq!(rest_answer(&app, path, true).await.0, None, "{path}");
    }
    app.stop().await;
}
