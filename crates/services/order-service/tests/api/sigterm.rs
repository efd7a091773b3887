//! SIGTERM under load: the real binary, under a steady stream of REST requests
//! on keep-alive connections, is sent SIGTERM. Every request that was sent
//! gets its answer; a caller that comes after the listener closed is refused
//! before it sends anything; the process exits 0.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use testkit::sigterm::{load_gets_going, nothing_lost, rest_caller};

use crate::helpers;

/// A user with 1,000 orders: each answer takes a few milliseconds to build,
/// so at any moment several are in service.
const USER: &str = "00000000-0000-0000-0000-000000001000";
const CALLERS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_answers_every_request_sent_and_exits_zero() {
    // A connection idle at the signal gets the grace period to send one more
    // request. HTTP/1.1 cannot stop a request that leaves the client just as
    // an idle connection is closed, so the test gives its callers, which
    // never idle on purpose, a grace no scheduling hiccup of a loaded CI
    // machine can outlast.
    let proc = helpers::start_binary(&[("ORDER_SHUTDOWN_GRACE_MS", "10000")]).await;
    let rest = proc.addr("rest");

    let url = format!("http://{rest}/v2/orders?user_id={USER}&limit=1000");
    let mut counters = Vec::new();
    let callers: Vec<_> = (0..CALLERS)
        .map(|i| {
            let answered = Arc::new(AtomicUsize::new(0));
            counters.push(answered.clone());
            // One client each, so each caller keeps one keep-alive connection.
            let client = reqwest::Client::builder().http1_only().build().unwrap();
            rest_caller(
                format!("caller {i}"),
                client,
                url.clone(),
                100_000,
                answered,
            )
        })
        .collect();

    // Let the load settle: every caller connected and answered a few times.
    load_gets_going(&counters, 5).await;

    let exit = proc.sigterm().await;

    nothing_lost(callers, 5).await;
    assert!(exit.success(), "order-service exited with {exit}");
}
