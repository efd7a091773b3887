//! SIGTERM under load: the real binary, under a steady stream of REST requests
//! on keep-alive connections, is sent SIGTERM. Every request that was sent
//! gets its answer; a caller that comes after the listener closed is refused
//! before it sends anything; the process exits 0.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A user with 1,000 orders: each answer takes a few milliseconds to build,
/// so at any moment several are in service.
const USER: &str = "00000000-0000-0000-0000-000000001000";
const CALLERS: usize = 8;

/// What happened to one caller's requests.
#[derive(Debug, Default)]
struct Tally {
    answered: usize,
    /// Refused at connect: the listener had closed, nothing was sent.
    refused: usize,
    /// Sent, and no answer came: what must never happen.
    dropped: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_answers_every_request_sent_and_exits_zero() {
    // A connection idle at the signal gets the grace period to send one more
    // request. HTTP/1.1 cannot stop a request that leaves the client just as
    // an idle connection is closed, so the test gives its callers, which
    // never idle on purpose, a grace no scheduling hiccup of a loaded CI
    // machine can outlast.
    let proc = common::start_binary(&[("ORDER_SHUTDOWN_GRACE_MS", "10000")]).await;
    let rest = proc.addr("rest");

    let url = format!("http://{rest}/v2/orders?user_id={USER}&limit=1000");
    let answered = Arc::new(AtomicUsize::new(0));
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            // One client each, so each caller keeps one keep-alive connection.
            let client = reqwest::Client::builder().http1_only().build().unwrap();
            let url = url.clone();
            let answered = answered.clone();
            tokio::spawn(async move {
                let mut t = Tally::default();
                loop {
                    match client.get(&url).send().await {
                        Ok(res) => {
                            let status = res.status();
                            match res.bytes().await {
                                Ok(body) if status == 200 && body.len() > 100_000 => {
                                    t.answered += 1;
                                    answered.fetch_add(1, Ordering::Relaxed);
                                }
                                Ok(body) => {
                                    t.dropped.push(format!("{status}: {} bytes", body.len()));
                                    return t;
                                }
                                Err(e) => {
                                    t.dropped.push(format!("body cut: {e:?}"));
                                    return t;
                                }
                            }
                        }
                        Err(e) if e.is_connect() => {
                            t.refused += 1;
                            return t;
                        }
                        Err(e) => {
                            t.dropped.push(format!("{e:?}"));
                            return t;
                        }
                    }
                }
            })
        })
        .collect();

    // Let the load settle: every caller connected and answered a few times.
    tokio::time::timeout(Duration::from_secs(30), async {
        while answered.load(Ordering::Relaxed) < CALLERS * 5 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the load gets going");

    let exit = proc.sigterm().await;

    let mut total = Tally::default();
    for c in callers {
        let t = tokio::time::timeout(Duration::from_secs(30), c)
            .await
            .expect("every caller stops once the service is gone")
            .unwrap();
        total.answered += t.answered;
        total.refused += t.refused;
        total.dropped.extend(t.dropped);
    }
    eprintln!(
        "{} answered, {} refused before sending, {} dropped",
        total.answered,
        total.refused,
        total.dropped.len()
    );
    assert!(
        total.dropped.is_empty(),
        "requests lost: {:#?}",
        total.dropped
    );
    assert_eq!(total.refused, CALLERS, "each caller ends on a refusal");
    assert!(exit.success(), "order-service exited with {exit}");
}
