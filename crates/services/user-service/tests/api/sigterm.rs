//! SIGTERM under load: the real user-service binary, with a real
//! order-service behind it, serves a steady stream of fan-out requests from
//! callers on keep-alive connections (HTTP/1.1, h2c and gRPC, over several
//! upstream transports) and is sent SIGTERM. Every request that was sent gets
//! its answer; each caller ends on a request that was never sent (refused at
//! connect, or, on gRPC, handed back unsent or refused by the server's
//! GOAWAY); the process exits 0.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use proto::user::v1 as pbu;
use testkit::sigterm::{Tally, load_gets_going, nothing_lost, rest_caller};

use crate::helpers::{OrderService, start_binary, users_database};

/// A user with 1,000 orders: each answer takes a few milliseconds to build
/// on both services, so at any moment several are in service.
const ORDERS: u32 = 1_000;

/// Whether `e` says the server never took the request up: a refused TCP
/// connect; hyper handing the request back unsent because its connection
/// closed first (hyper's "canceled" is only ever that); or h2 failing a
/// stream with the server's own graceful GOAWAY (reason NO_ERROR, from the
/// remote). h2 gives that error only to a stream above the GOAWAY's last
/// stream id or to one opened after the GOAWAY arrived, and RFC 9113 §6.8
/// says such a stream was not processed; a stream cut mid-answer gets a
/// broken pipe instead, which counts as lost.
fn never_sent(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        if e.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return true;
        }
        if let Some(h2) = e.downcast_ref::<h2::Error>()
            && h2.is_go_away()
            && h2.is_remote()
            && h2.reason() == Some(h2::Reason::NO_ERROR)
        {
            return true;
        }
        cur = e.source();
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_answers_every_request_sent_on_rest_and_grpc_and_exits_zero() {
    let orders = OrderService::start().await;
    let users_db = users_database().await;
    let env = [
        ("USER_REST_ADDR", "127.0.0.1:0".to_owned()),
        ("USER_GRPC_ADDR", "127.0.0.1:0".to_owned()),
        ("USER_DATABASE_URL", users_db.url.clone()),
        ("USER_ORDER_REST_URL", format!("http://{}", orders.rest)),
        ("USER_ORDER_GRPC_URL", format!("http://{}", orders.grpc)),
        ("USER_ORDER_TCP_ADDR", orders.tcp.to_string()),
        // Callers never idle on purpose; a grace no scheduling hiccup of a
        // loaded CI machine outlasts (see order-service's sigterm test).
        ("USER_SHUTDOWN_GRACE_MS", "10000".to_owned()),
    ];
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_user-service"));
    let users = start_binary(&bin, &env, "user-service listening").await;
    let (rest, grpc) = (users.addr("rest"), users.addr("grpc"));
    let id = dataset::fixed_user_id(ORDERS);
    // Answers so far, per caller.
    let mut counters: Vec<Arc<AtomicUsize>> = Vec::new();
    let mut callers = Vec::new();
    // HTTP/1.1 callers over several upstream transports, and h2c ones.
    let rest_callers = [
        ("h1", "h1-json"),
        ("h1", "h2c-proto"),
        ("h1", "grpc"),
        ("h1", "grpc-bidi"),
        ("h1", "tcp-proto"),
        ("h2c", "grpc"),
        ("h2c", "h1-proto"),
    ];
    for (wire, via) in rest_callers {
        let b = reqwest::Client::builder();
        let client = if wire == "h1" {
            b.http1_only()
        } else {
            b.http2_prior_knowledge()
        }
        .build()
        .unwrap();
        let url = format!("http://{rest}/v1/users/{id}/orders?limit={ORDERS}&via={via}");
        let answered = Arc::new(AtomicUsize::new(0));
        counters.push(answered.clone());
        let label = format!("REST {wire} via {via}");
        callers.push(rest_caller(label, client, url, 100_000, answered));
    }
    // gRPC callers: a channel each (one HTTP/2 connection each).
    for via in ["grpc", "grpc-bidi", "tcp-proto"] {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = pbu::user_service_client::UserServiceClient::new(channel)
            .max_decoding_message_size(64 << 20);
        let answered = Arc::new(AtomicUsize::new(0));
        counters.push(answered.clone());
        let label = format!("gRPC via {via}");
        let req = pbu::GetUserWithOrdersRequest {
            id: id.to_string(),
            via: via.into(),
            limit: ORDERS as i32,
            ..Default::default()
        };
        callers.push(tokio::spawn(async move {
            let mut t = Tally::default();
            loop {
                match client.get_user_with_orders(req.clone()).await {
                    Ok(res) if res.get_ref().orders.len() == ORDERS as usize => {
                        t.answered += 1;
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(res) => {
                        let n = res.get_ref().orders.len();
                        t.dropped.push(format!("{label}: {n} orders"));
                        return (label, t);
                    }
                    Err(s) if never_sent(&s) => {
                        t.refused += 1;
                        return (label, t);
                    }
                    Err(s) => {
                        t.dropped.push(format!("{label}: {s:?}"));
                        return (label, t);
                    }
                }
            }
        }));
    }
    // Let the load settle: every caller connected and answered a few times.
    load_gets_going(&counters, 3).await;

    let exit = users.sigterm().await;

    nothing_lost(callers, 3).await;
    assert!(exit.success(), "user-service exited with {exit}");
    orders.stop().await;
    users_db.drop_database().await.unwrap();
}

/// SIGTERM with bad clients connected: a trickling REST head, an idle
/// keep-alive connection and a silent gRPC connection, under a header-read
/// timeout of a minute so that none is cut before the signal. The binary
/// still exits within its grace plus 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_binary_in_time_whatever_its_clients_do() {
    let orders = OrderService::start().await;
    let env = [
        ("USER_REST_ADDR", "127.0.0.1:0".to_owned()),
        ("USER_GRPC_ADDR", "127.0.0.1:0".to_owned()),
        ("USER_ORDER_REST_URL", format!("http://{}", orders.rest)),
        ("USER_ORDER_GRPC_URL", format!("http://{}", orders.grpc)),
        ("USER_ORDER_TCP_ADDR", orders.tcp.to_string()),
        ("USER_SHUTDOWN_GRACE_MS", "500".to_owned()),
        ("USER_HEADER_READ_TIMEOUT_MS", "60000".to_owned()),
        ("USER_IDLE_TIMEOUT_MS", "60000".to_owned()),
    ];
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_user-service"));
    let users = start_binary(&bin, &env, "user-service listening").await;
    let _bad = testkit::flood::BadClients::connect(&users.addr("rest"), &users.addr("grpc")).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    let status = users.sigterm().await;
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "exited after {:?} (grace 0.5 s + 1 s)",
        started.elapsed()
    );
    orders.stop().await;
}
