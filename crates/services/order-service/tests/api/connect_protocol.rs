//! The Connect protocol's details as its specification writes them, on the
//! REST port: an unknown method is `unimplemented` (a Connect error, or
//! `grpc-status: 12` for a gRPC call), GET of a method not free of side
//! effects is 405 `unimplemented`, a compressed request is read when its
//! encoding is one the server lists and refused with the list otherwise.
//! The client is reqwest speaking the protocol; the oracle for answers is
//! the data set.

use std::io::Write as _;

use crate::helpers::{Backend, expected_orders, spawn};

fn code(v: &serde_json::Value) -> &str {
    v["code"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn an_unknown_method_is_unimplemented_in_connects_words_or_grpcs() {
    let app = spawn(Backend::Memory).await;
    for client in [app.h1(), app.h2c()] {
        for path in [
            "/order.v2.OrderService/NoSuchMethod",
            "/other.v1.Elsewhere/Call",
        ] {
            let res = client
                .post(app.url(path))
                .header("content-type", "application/json")
                .header("connect-protocol-version", "1")
                .body("{}")
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 404);
            assert_eq!(res.headers()["content-type"], "application/json");
            let e: serde_json::Value = res.json().await.unwrap();
            assert_eq!(code(&e), "unimplemented", "{e}");
        }
    }
    // gRPC on this port (connect-rust answers it too): trailers-only 12.
    let res = app
        .h2c()
        .post(app.url("/order.v2.OrderService/NoSuchMethod"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(vec![0u8, 0, 0, 0, 0])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["grpc-status"], "12");
    // Not an RPC's shape: still the REST problem.
    let res = app
        .h1()
        .get(app.url("/no/such/route"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    assert_eq!(res.headers()["content-type"], "application/problem+json");
    app.stop().await;
}

#[tokio::test]
async fn get_of_a_unary_method_is_405_unimplemented_with_allow_post() {
    let app = spawn(Backend::Memory).await;
    let res = app
        .h1()
        .get(app.url("/order.v2.OrderService/GetOrder?encoding=json&message=%7B%7D"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 405);
    assert_eq!(res.headers()["allow"], "POST");
    let e: serde_json::Value = res.json().await.unwrap();
    assert_eq!(code(&e), "unimplemented", "{e}");
    app.stop().await;
}

#[tokio::test]
async fn a_gzip_request_is_read_and_an_unknown_encoding_is_refused_with_the_list() {
    let app = spawn(Backend::Memory).await;
    let want = expected_orders(10);
    let user = dataset::fixed_user_id(10).to_string();
    let json = serde_json::json!({ "userId": user }).to_string();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(json.as_bytes()).unwrap();
    let gz = gz.finish().unwrap();
    for client in [app.h1(), app.h2c()] {
        let res = client
            .post(app.url("/order.v2.OrderService/ListOrders"))
            .header("content-type", "application/json")
            .header("content-encoding", "gzip")
            .body(gz.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        // The answer is never compressed.
        assert!(res.headers().get("content-encoding").is_none());
        let page: serde_json::Value = res.json().await.unwrap();
        let ids: Vec<&str> = page["orders"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["id"].as_str().unwrap())
            .collect();
        let mut want_ids: Vec<String> = want.iter().map(|o| o.id.to_string()).collect();
        want_ids.sort();
        let mut got: Vec<String> = ids.iter().map(|s| (*s).to_owned()).collect();
        got.sort();
        assert_eq!(got, want_ids);

        let res = client
            .post(app.url("/order.v2.OrderService/ListOrders"))
            .header("content-type", "application/json")
            .header("content-encoding", "br")
            .body(json.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 501);
        let listed = res
            .headers()
            .get("accept-encoding")
            .map(|v| v.to_str().unwrap().to_owned());
        let e: serde_json::Value = res.json().await.unwrap();
        assert_eq!(code(&e), "unimplemented", "{e}");
        let listed = listed.expect("the encodings read, in accept-encoding");
        assert!(
            listed.contains("gzip") && listed.contains("zstd"),
            "{listed}"
        );
    }
    app.stop().await;
}

/// `Connect-Protocol-Version` is not required (the book says why): a plain
/// POST of a unary call without it, as `curl` sends, gets the orders.
#[tokio::test]
async fn a_unary_call_without_connect_protocol_version_is_answered() {
    let app = spawn(Backend::Memory).await;
    let want = expected_orders(10);
    let res = app
        .h1()
        .post(app.url("/order.v2.OrderService/ListOrders"))
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"userId":"{}","pageSize":10}}"#,
            dataset::fixed_user_id(10)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let page: serde_json::Value = res.json().await.unwrap();
    let mut got: Vec<&str> = page["orders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    let mut ids: Vec<String> = want.iter().map(|o| o.id.to_string()).collect();
    got.sort_unstable();
    ids.sort();
    assert_eq!(got, ids);
    app.stop().await;
}
