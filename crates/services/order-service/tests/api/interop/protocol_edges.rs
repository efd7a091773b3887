//! What the protocols specify at their edges, which these clients rely on
//! and the services did not all give when the suite was written: each check
//! is a test of its own, so that a run shows which hold. The letters are
//! the ones their fixes were tracked by.
//!
//! - (a) a health Watch of an unknown service says SERVICE_UNKNOWN and stays
//!   open;
//! - (b) reflection lists only the services the port serves, over v1 and
//!   v1alpha;
//! - (c) the server itself ends a call past its deadline (`grpc-timeout`,
//!   `Connect-Timeout-Ms`) with DEADLINE_EXCEEDED, not an answer, and not a
//!   closed connection when the body was still arriving;
//! - (d) over Connect, an unknown method and a request over the cap reach
//!   connect-node as Unimplemented and ResourceExhausted, every time;
//! - (e) a Connect request in an encoding the server does not read (gzip,
//!   when these tests were written) is refused with the encodings it reads
//!   listed; GET on a unary route gets a code other than unknown.

use model::FieldSet;
use serde_json::{Value, json};

use super::connect_node::connect_node;
use super::grpcio::SERVED;
use super::kit::node_client;
use super::oracle::{assert_orders, orders_of};
use super::standard_services::{self as std_services, Client};
use crate::helpers::{Backend, spawn};

#[tokio::test]
async fn a_health_watch_of_an_unknown_service_says_service_unknown_and_stays_open() {
    let app = spawn(Backend::Memory).await;
    for client in [Client::Grpcio, Client::GrpcJs] {
        std_services::assert_watch_of_unknown_says_service_unknown(client, app.grpc).await;
    }
    app.stop().await;
}

#[tokio::test]
async fn reflection_v1_lists_only_the_services_the_port_serves() {
    let app = spawn(Backend::Memory).await;
    for client in [Client::Grpcio, Client::GrpcJs] {
        let got = std_services::reflect(client, app.grpc, "v1").await;
        std_services::assert_lists_only(&got, &SERVED);
    }
    app.stop().await;
}

#[tokio::test]
async fn reflection_v1alpha_is_answered_and_lists_only_the_services_the_port_serves() {
    let app = spawn(Backend::Memory).await;
    for client in [Client::Grpcio, Client::GrpcJs] {
        let got = std_services::reflect(client, app.grpc, "v1alpha").await;
        assert!(got.get("error").is_none(), "{client:?}'s v1alpha: {got}");
        std_services::assert_describes(&got, &SERVED);
        std_services::assert_lists_only(&got, &SERVED);
    }
    app.stop().await;
}

/// The server's own answer to a call whose deadline the client sent but does
/// not keep itself: a status other than DEADLINE_EXCEEDED (or an answer)
/// means the server let the deadline pass.
fn assert_server_says_deadline_exceeded(got: &Value, code: &str, what: &str) {
    assert!(
        got.get("ok").is_none(),
        "{what}: the server answered {} orders in {} ms, past a 1 ms deadline",
        got["ok"],
        got["took_ms"]
    );
    assert_eq!(
        got["error"]["code"], code,
        "{what} (Aborted: the server closed the connection without an answer): {got}"
    );
}

#[tokio::test]
async fn a_grpc_timeout_of_1ms_on_10000_orders_is_answered_deadline_exceeded_by_the_server() {
    let app = spawn(Backend::Memory).await;
    // grpc-js sends `grpc-timeout: 1m` as metadata and keeps no timer: the
    // status it reports is the server's, from its trailers.
    let got = node_client("grpc_js.mjs", &["server-deadline", &app.grpc.to_string()]).await;
    assert_server_says_deadline_exceeded(&got, "DEADLINE_EXCEEDED", "gRPC ListOrders");
    app.stop().await;
}

#[tokio::test]
async fn a_connect_timeout_ms_of_1_on_10000_orders_is_answered_deadline_exceeded_by_the_server() {
    let app = spawn(Backend::Memory).await;
    // connect-node sends `Connect-Timeout-Ms: 1` as a header and keeps no
    // timer: the code it reports is the server's.
    let got = connect_node(&app, "server-deadline").await;
    for t in ["h1-binary", "h2c-binary"] {
        assert_server_says_deadline_exceeded(&got[t], "DeadlineExceeded", &format!("Connect {t}"));
    }
    app.stop().await;
}

#[tokio::test]
async fn a_connect_deadline_that_passes_while_the_body_arrives_is_answered_deadline_exceeded() {
    let app = spawn(Backend::Memory).await;
    // connect-node's own check above races its body's arrival against the
    // 1 ms deadline; Node's HTTP clients, by hand, send the body 50 ms after
    // the head, every time.
    let base = format!("http://{}", app.rest);
    let got = node_client(
        "connect_by_hand.mjs",
        &["deadline-while-body-arrives", &base],
    )
    .await;
    for t in ["h1", "h2c"] {
        let a = &got[t];
        assert_eq!(
            (&a["status"], &a["code"]),
            (&json!(504), &json!("deadline_exceeded")),
            "{t}: a Connect error answers a deadline that passed before the body came, not \
             a closed connection or stream: {a}"
        );
    }
    app.stop().await;
}

/// Ten codes, every one `want`.
fn assert_ten_times(got: &Value, want: &str, what: &str) {
    let codes = got["codes"].as_array().unwrap();
    let right = codes.iter().filter(|c| *c == want).count();
    assert!(
        codes.len() == 10 && right == 10,
        "{what}: {right} of 10 were {want}; connect-node saw {codes:?} (DeadlineExceeded: the \
         call hung until connect-node's own 5 s timeout, and the rest were not tried)"
    );
}

#[tokio::test]
async fn a_connect_call_to_an_unknown_method_over_http1_is_unimplemented_ten_times_out_of_ten() {
    let app = spawn(Backend::Memory).await;
    let got = connect_node(&app, "unknown-method-h1").await;
    assert_ten_times(&got, "Unimplemented", "an unknown method over HTTP/1.1");
    app.stop().await;
}

#[tokio::test]
async fn a_5mb_connect_request_over_http1_is_resource_exhausted_ten_times_out_of_ten() {
    let app = spawn(Backend::Memory).await;
    let got = connect_node(&app, "oversized-h1").await;
    assert_ten_times(&got, "ResourceExhausted", "5 MB over HTTP/1.1");
    app.stop().await;
}

#[tokio::test]
async fn a_5mb_connect_request_over_h2c_is_resource_exhausted_ten_times_out_of_ten() {
    let app = spawn(Backend::Memory).await;
    let got = connect_node(&app, "oversized-h2c").await;
    assert_ten_times(&got, "ResourceExhausted", "5 MB over h2c, one connection");
    app.stop().await;
}

#[tokio::test]
async fn a_connect_request_in_an_encoding_not_read_is_refused_with_the_accepted_ones_listed() {
    let app = spawn(Backend::Memory).await;
    let got = connect_node(&app, "encodings").await;
    for t in ["h1-binary", "h2c-binary"] {
        // gzip is read (the orders come back) or refused as any encoding not read is.
        let gzip = &got[t]["gzip"];
        let mut accepted = None;
        match gzip.get("ok") {
            Some(orders) => {
                assert_orders(orders, &orders_of(10), FieldSet::ALL, &format!("{t} gzip"));
                accepted = Some("gzip");
            }
            None => {
                assert_refused(&gzip["error"], &format!("{t} gzip"));
            }
        }
        let listed = assert_refused(&got[t]["br"]["error"], &format!("{t} br"));
        if let Some(gzip) = accepted {
            assert!(
                listed.contains(gzip),
                "{t}: gzip is read but not listed: {listed:?}"
            );
        }
    }
    app.stop().await;
}

/// A refusal of a request's encoding: `unimplemented`, with the encodings
/// that are read listed in Accept-Encoding (the Connect protocol); the list.
fn assert_refused<'a>(e: &'a Value, what: &str) -> &'a str {
    assert_eq!(e["code"], "Unimplemented", "{what}: {e}");
    e["accept_encoding"].as_str().unwrap_or_else(|| {
        panic!("{what}: the refusal lists what is accepted in Accept-Encoding: {e}")
    })
}

#[tokio::test]
async fn a_connect_get_on_a_unary_route_gets_a_code_other_than_unknown() {
    let app = spawn(Backend::Memory).await;
    let got = connect_node(&app, "get").await;
    for t in ["h1-json", "h2c-binary"] {
        let code = &got[t]["error"]["code"];
        assert!(
            code.is_string() && code != "Unknown",
            "{t}: GET on ListOrders (not side-effect free): {}",
            got[t]
        );
    }
    app.stop().await;
}
