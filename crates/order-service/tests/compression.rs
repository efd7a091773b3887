//! gRPC answers are compressed only when order-service is told to: a client
//! that accepts gzip (k6's does) gets plain answers by default, so that
//! compression never enters a comparison unannounced.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Backend, TestApp, spawn, spawn_with};
use proto::order::v2 as pb2;
use tonic::codec::CompressionEncoding;

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
