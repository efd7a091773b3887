//! Nothing lost, nothing doubled: orders are created by many concurrent
//! clients through a proxy that kills a share of the connections mid-request
//! or mid-response, or stalls them past the clients' timeout. Each client
//! retries a create with the same idempotency key until it is acknowledged;
//! some keys are tried once only and given up on a failure. At the end the
//! test counts in Postgres: every acknowledged order is stored exactly once
//! under its key, and no order exists without its key, so none that went
//! unacknowledged was stored twice. Over REST and over gRPC.

use std::collections::HashMap;
use std::time::Duration;

use model::json::CreatedOrderJson;
use proto::order::v2 as pb2;
use testkit::proxy::{Faults, Proxy};
use uuid::Uuid;

use crate::helpers::{Backend, new_order_json, spawn};

const CLIENTS: usize = 6;
/// Keys each client retries until acknowledged.
const RETRIED_KEYS: usize = 10;
/// Keys each client tries once.
const ONE_SHOT_KEYS: usize = 4;
/// A client gives up an attempt after this long and retries.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// A retried key that needs more attempts than this fails the test.
const MAX_ATTEMPTS: usize = 60;

fn faults(seed: u64) -> Faults {
    Faults {
        one_in: 3,
        // A create is about 500 bytes up and 800 down: offsets up to this
        // land in the first request or answer, or in a later one on a
        // keep-alive connection.
        max_bytes: 1_500,
        // Longer than the attempt timeout: the client retries while the
        // first attempt may still reach the server.
        stall: ATTEMPT_TIMEOUT + Duration::from_secs(1),
        seed,
    }
}

/// What one client saw.
#[derive(Debug, Default)]
struct Outcome {
    /// Key → the order id every acknowledgement of it named.
    acked: HashMap<String, Uuid>,
    /// One-shot keys whose only attempt failed.
    unacked: Vec<String>,
    attempts: usize,
    failures: Vec<String>,
}

impl Outcome {
    fn ack(&mut self, key: &str, id: Uuid) {
        let first = *self.acked.entry(key.to_owned()).or_insert(id);
        assert_eq!(first, id, "two acknowledgements of {key} name two orders");
    }

    fn merge(&mut self, o: Outcome) {
        for (k, id) in o.acked {
            self.ack(&k, id);
        }
        self.unacked.extend(o.unacked);
        self.attempts += o.attempts;
        self.failures.extend(o.failures);
    }
}

/// The stored orders of `user`, each with its key (None: an order without
/// one, which must not exist).
async fn stored(url: &str, user: Uuid) -> Vec<(Uuid, Option<String>)> {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let rows: Vec<(Uuid, Option<String>)> = sqlx::query_as(
        "SELECT o.id, k.key FROM orders o LEFT JOIN idempotency_keys k ON k.order_id = o.id
         WHERE o.user_id = $1",
    )
    .bind(user)
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    rows
}

/// Waits for every client, makes sure the faults really happened, then
/// checks Postgres against what the clients were told.
async fn settle(
    label: &str,
    clients: impl IntoIterator<Item = tokio::task::JoinHandle<Outcome>>,
    proxy: &testkit::proxy::Proxy,
    db_url: &str,
    user: Uuid,
) {
    let mut all = Outcome::default();
    for o in futures::future::join_all(clients).await {
        all.merge(o.unwrap());
    }
    let killed = proxy.killed();
    assert!(killed > 0, "the proxy killed no connection");
    assert!(
        !all.failures.is_empty(),
        "no attempt failed: nothing was tested"
    );
    let rows = stored(db_url, user).await;
    check(label, &rows, &all, CLIENTS * RETRIED_KEYS);
    eprintln!("{label}: {killed} connections killed");
}

/// Checks what Postgres holds against what the clients were told.
fn check(label: &str, rows: &[(Uuid, Option<String>)], all: &Outcome, retried_keys: usize) {
    let mut by_key: HashMap<&str, Vec<Uuid>> = HashMap::new();
    for (id, key) in rows {
        let key = key
            .as_deref()
            .unwrap_or_else(|| panic!("{label}: order {id} is stored without its key"));
        by_key.entry(key).or_default().push(*id);
    }
    for (key, id) in &all.acked {
        assert_eq!(
            by_key.get(key.as_str()),
            Some(&vec![*id]),
            "{label}: acknowledged {key} is not stored exactly once as {id}"
        );
    }
    for key in &all.unacked {
        assert!(
            by_key.get(key.as_str()).is_none_or(|ids| ids.len() == 1),
            "{label}: unacknowledged {key} stored twice"
        );
    }
    let retried_acked = all.acked.keys().filter(|k| k.contains("-retry-")).count();
    assert_eq!(
        retried_acked, retried_keys,
        "{label}: every retried key ends acknowledged"
    );
    let stored_unacked = all
        .unacked
        .iter()
        .filter(|k| by_key.contains_key(k.as_str()))
        .count();
    assert_eq!(
        rows.len(),
        all.acked.len() + stored_unacked,
        "{label}: orders stored = acknowledged + unacknowledged that reached Postgres"
    );
    eprintln!(
        "{label}: {} keys acknowledged in {} attempts; {} one-shot keys unacknowledged ({} of them stored); failures seen: {}",
        all.acked.len(),
        all.attempts,
        all.unacked.len(),
        stored_unacked,
        all.failures.len()
    );
}

/// The keys of client `c`: retried ones first, then one-shot ones.
fn keys(proto: &str, c: usize) -> impl Iterator<Item = (String, bool)> {
    let retried = (0..RETRIED_KEYS).map(move |i| (format!("{proto}-retry-{c}-{i}"), true));
    let once = (0..ONE_SHOT_KEYS).map(move |i| (format!("{proto}-once-{c}-{i}"), false));
    retried.chain(once)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_creates_retried_across_killed_connections_are_stored_exactly_once() {
    let app = spawn(Backend::Postgres).await;
    let proxy = Proxy::start(app.rest).await.unwrap();
    proxy.set_faults(Some(faults(1)));
    let url = format!("http://{}/v2/orders", proxy.addr());
    let user = Uuid::new_v4();
    let body = new_order_json(user, None);

    let clients = (0..CLIENTS).map(|c| {
        let mut b = reqwest::Client::builder()
            .http1_only()
            .timeout(ATTEMPT_TIMEOUT);
        if c % 2 == 1 {
            // A connection per attempt: every attempt meets a new fault draw.
            b = b.pool_max_idle_per_host(0);
        }
        let client = b.build().unwrap();
        let (url, body) = (url.clone(), body.clone());
        tokio::spawn(async move {
            let mut out = Outcome::default();
            for (key, retry) in keys("rest", c) {
                for attempt in 1.. {
                    assert!(
                        attempt <= MAX_ATTEMPTS,
                        "{key}: no ack in {MAX_ATTEMPTS} attempts"
                    );
                    out.attempts += 1;
                    let res = client
                        .post(&url)
                        .header("idempotency-key", &key)
                        .json(&body)
                        .send()
                        .await;
                    let failure = match res {
                        Ok(res) => {
                            let status = res.status().as_u16();
                            match res.bytes().await {
                                Ok(b) if status == 201 || status == 200 => {
                                    let c: CreatedOrderJson = serde_json::from_slice(&b).unwrap();
                                    assert_eq!(c.replayed, status == 200, "{key}");
                                    out.ack(&key, c.order.id);
                                    break;
                                }
                                Ok(b) => {
                                    // Only the store being unavailable is a
                                    // failure a retry may fix; anything else
                                    // (a 422 above all) is a bug.
                                    assert_eq!(
                                        status,
                                        503,
                                        "{key}: {}",
                                        String::from_utf8_lossy(&b)
                                    );
                                    format!("{status}")
                                }
                                Err(e) => format!("body: {e}"),
                            }
                        }
                        Err(e) => format!("{e}"),
                    };
                    out.failures.push(failure);
                    if !retry {
                        out.unacked.push(key.clone());
                        break;
                    }
                }
            }
            out
        })
    });
    settle("REST", clients, &proxy, &app.db.as_ref().unwrap().url, user).await;
    drop(proxy);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_creates_retried_across_killed_connections_are_stored_exactly_once() {
    let app = spawn(Backend::Postgres).await;
    let proxy = Proxy::start(app.grpc).await.unwrap();
    proxy.set_faults(Some(Faults {
        // HTTP/2 carries every call of a client on one connection, with
        // compressed headers: every connection dies, within its first few
        // creates.
        one_in: 1,
        max_bytes: 4_000,
        ..faults(2)
    }));
    let user = Uuid::new_v4();
    let new: model::NewOrder =
        serde_json::from_value::<model::json::CreateOrderJson>(new_order_json(user, None))
            .unwrap()
            .try_into()
            .unwrap();

    let clients = (0..CLIENTS).map(|c| {
        // A channel each: one HTTP/2 connection each, reconnected after a kill.
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", proxy.addr()))
            .unwrap()
            .connect_timeout(ATTEMPT_TIMEOUT)
            .timeout(ATTEMPT_TIMEOUT)
            .connect_lazy();
        let mut client = pb2::order_service_client::OrderServiceClient::new(channel);
        let new = new.clone();
        tokio::spawn(async move {
            let mut out = Outcome::default();
            for (key, retry) in keys("grpc", c) {
                let req = model::v2::create_request(&new, &key);
                for attempt in 1.. {
                    assert!(
                        attempt <= MAX_ATTEMPTS,
                        "{key}: no ack in {MAX_ATTEMPTS} attempts"
                    );
                    out.attempts += 1;
                    // The client's own bound too, in case a stalled
                    // connection holds even the deadline's reset back.
                    let res = tokio::time::timeout(
                        ATTEMPT_TIMEOUT + Duration::from_secs(1),
                        client.create_order(req.clone()),
                    )
                    .await;
                    let failure = match res {
                        Ok(Ok(r)) => {
                            let r = r.into_inner();
                            let id = r.order.unwrap().id.parse().unwrap();
                            out.ack(&key, id);
                            break;
                        }
                        Ok(Err(s)) => {
                            assert!(
                                !matches!(
                                    s.code(),
                                    tonic::Code::FailedPrecondition | tonic::Code::InvalidArgument
                                ),
                                "{key}: {s:?}"
                            );
                            format!("{:?}: {}", s.code(), s.message())
                        }
                        Err(_) => "client timeout".to_owned(),
                    };
                    out.failures.push(failure);
                    if !retry {
                        out.unacked.push(key.clone());
                        break;
                    }
                }
            }
            out
        })
    });
    settle("gRPC", clients, &proxy, &app.db.as_ref().unwrap().url, user).await;
    drop(proxy);
    app.stop().await;
}
