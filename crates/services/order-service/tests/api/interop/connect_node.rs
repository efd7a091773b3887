//! @connectrpc/connect-node (with @bufbuild/protobuf v2 and descriptors
//! from `buf build`) against order-service's Connect routes on the REST
//! port: HTTP/1.1 and h2c, binary and JSON; errors with their Connect codes
//! and `google.rpc.BadRequest`; a deadline; a request over the cap.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use model::FieldSet;
use serde_json::{Value, json};

use super::grpcio::mask;
use super::kit::{node_client, python, root};
use super::oracle::{assert_orders, error_of, ok_of, orders_of};
use crate::helpers::{Backend, TestApp, spawn};

/// The four ways connect-node is configured: HTTP version and codec.
pub const TRANSPORTS: [&str; 4] = ["h1-binary", "h1-json", "h2c-binary", "h2c-json"];

/// `buf build proto -o FILE`: the FileDescriptorSet connect-node reads its
/// services from, made once per test process with the buf of
/// requirements-dev.txt (beside the Python), or buf on the PATH.
pub fn descriptor_set() -> &'static Path {
    static SET: OnceLock<PathBuf> = OnceLock::new();
    SET.get_or_init(|| {
        let beside = python().parent().map(|d| d.join("buf"));
        let buf = beside
            .filter(|b| b.exists())
            .unwrap_or_else(|| "buf".into());
        let file = std::env::temp_dir().join(format!(
            "interop-descriptors-{}.binpb",
            uuid::Uuid::new_v4().simple()
        ));
        let out = std::process::Command::new(&buf)
            .arg("build")
            .arg(root().join("proto"))
            .arg("-o")
            .arg(&file)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "{} could not be run ({e}): run scripts/setup, which installs buf \
                     (requirements-dev.txt's buf-bin) into .tools/venv",
                    buf.display()
                )
            });
        assert!(
            out.status.success(),
            "buf build proto: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        file
    })
}

/// Runs connect_node.mjs `scenario` against `app`'s REST port.
pub async fn connect_node(app: &TestApp, scenario: &str) -> Value {
    let base = format!("http://{}", app.rest);
    let set = descriptor_set().to_string_lossy().into_owned();
    node_client("connect_node.mjs", &[scenario, &base, &set]).await
}

async fn gets_the_data_sets_orders(backend: Backend) {
    let app = spawn(backend).await;
    let got = connect_node(&app, "data").await;
    for t in TRANSPORTS {
        let got = &got[t];
        assert_orders(
            &got["unary"],
            &orders_of(100),
            FieldSet::ALL,
            &format!("{t} ListOrders"),
        );
        assert_orders(
            &got["masked"],
            &orders_of(100)[..20],
            mask(),
            &format!("{t} masked"),
        );
        assert_orders(
            &json!([got["get"]]),
            &orders_of(10)[3..4],
            FieldSet::ALL,
            &format!("{t} GetOrder"),
        );
        assert_orders(
            &got["stream"],
            &orders_of(1000),
            FieldSet::ALL,
            &format!("{t} StreamOrders"),
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn connect_node_gets_the_data_sets_orders_over_http1_and_h2c_binary_and_json_in_memory() {
    gets_the_data_sets_orders(Backend::Memory).await;
}

#[tokio::test]
async fn connect_node_gets_the_data_sets_orders_over_http1_and_h2c_binary_and_json_on_postgres() {
    gets_the_data_sets_orders(Backend::Postgres).await;
}

#[tokio::test]
async fn connect_node_gets_connect_codes_for_errors_a_deadline_and_the_request_cap() {
    let app = spawn(Backend::Memory).await;
    let got = connect_node(&app, "errors").await;
    for t in TRANSPORTS {
        let got = &got[t];
        for what in ["bad_user_id", "stream_bad_user_id"] {
            let e = error_of(&got[what], what);
            assert_eq!(e["code"], "InvalidArgument", "{t} {what}: {e}");
            assert_eq!(
                e["message"], "user_id: \"nope\" is not a UUID",
                "{t} {what}"
            );
            assert_eq!(
                e["bad_request"],
                json!([["user_id", "\"nope\" is not a UUID"]]),
                "{t} {what}: the google.rpc.BadRequest connect-node decodes"
            );
        }
        assert_eq!(
            error_of(&got["unknown_order"], "unknown_order")["code"],
            "NotFound",
            "{t}"
        );
        let elsewhere = error_of(&got["elsewhere"], "elsewhere");
        assert_eq!(elsewhere["code"], "Unimplemented", "{t}");
        assert!(
            elsewhere["message"].as_str().unwrap().contains("gRPC"),
            "{t}: says where CreateOrder is served: {elsewhere}"
        );
        assert_eq!(
            error_of(&got["unary_1ms"], "unary_1ms")["code"],
            "DeadlineExceeded",
            "{t}"
        );
        assert_eq!(
            ok_of(&got["after"], "after"),
            10,
            "{t}: the transport still answers"
        );
    }
    let over = error_of(&got["over_request_cap_h2c"], "over_request_cap_h2c");
    assert_eq!(over["code"], "ResourceExhausted", "5 MB over h2c: {over}");
    app.stop().await;
}
