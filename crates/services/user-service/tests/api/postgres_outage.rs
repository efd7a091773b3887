//! Postgres restarted under a running user-service: its own users database,
//! then order-service's orders database while user-service fans out to it.
//! Each is reached through a proxy the test cuts (every connection through it
//! ends, pooled ones included, and new ones are closed at once) and then
//! restores, while both services keep running. While the database is gone,
//! every transport answers 503 / UNAVAILABLE quickly, naming what is down;
//! the moment it is back, the first request on every transport is served
//! again, on connections that replaced the dead ones.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proto::user::v1 as pbu;
use testkit::health::{self, ServingStatus};
use testkit::proxy::Proxy;
use user_service::settings::DatabaseUrl;
use user_service::upstream::Transport;

use crate::helpers::{OrderService, UserService, problem_of, spawn_users_with};

/// Where the test Postgres listens (the proxy checks that the URLs name it).
const POSTGRES: &str = "127.0.0.1:5432";

/// "Quickly": far under the 5 s upstream timeout, and no more than the 1 s
/// wait for a pooled connection the tests set plus a margin a loaded CI
/// machine does not come near.
const FAST: Duration = Duration::from_secs(2);

/// Several fan-outs at once on every transport, so that each pool (the
/// database's and each transport's) holds several connections.
async fn load_every_transport(users: &UserService, id: uuid::Uuid) {
    for via in Transport::ALL {
        let calls = (0..4).map(|_| users.orders(id, via, "&limit=10"));
        for res in futures::future::join_all(calls).await {
            assert_eq!(res.status(), 200, "{via} before the cut");
        }
    }
}

/// Every transport, and gRPC, answers 503 / UNAVAILABLE of `kind` quickly,
/// with a message that contains `says`.
async fn every_transport_says_unavailable(
    users: &UserService,
    id: uuid::Uuid,
    kind: &str,
    says: &str,
) {
    for via in Transport::ALL {
        let started = Instant::now();
        let res = users.orders(id, via, "&limit=10").await;
        let took = started.elapsed();
        assert_eq!(res.status(), 503, "{via}");
        let e = problem_of(res).await;
        assert_eq!(e.error, kind, "{via}: {e:?}");
        assert!(e.detail.contains(says), "{via}: {e:?}");
        assert!(took < FAST, "{via} took {took:?} to answer 503");
    }
    let mut grpc = users.grpc_client().await;
    for via in ["grpc", "grpc-bidi", "tcp-proto"] {
        let started = Instant::now();
        let s = grpc
            .get_user_with_orders(pbu::GetUserWithOrdersRequest {
                id: id.to_string(),
                via: via.into(),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(s.code(), tonic::Code::Unavailable, "gRPC via {via}: {s:?}");
        assert!(s.message().contains(says), "gRPC via {via}: {s:?}");
        assert!(started.elapsed() < FAST, "gRPC via {via}");
    }
}

/// The first request on every transport, and on gRPC, is served: no retry,
/// no waiting for the service to notice the database is back.
async fn every_transport_serves_at_once(users: &UserService, id: uuid::Uuid) {
    for via in Transport::ALL {
        let res = users.orders(id, via, "&limit=10").await;
        let status = res.status();
        assert_eq!(
            status,
            200,
            "{via} right after the database came back: {}",
            res.text().await.unwrap()
        );
    }
    let mut grpc = users.grpc_client().await;
    for via in ["grpc", "grpc-bidi", "tcp-proto"] {
        let r = grpc
            .get_user_with_orders(pbu::GetUserWithOrdersRequest {
                id: id.to_string(),
                via: via.into(),
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|s| panic!("gRPC via {via} after the database came back: {s:?}"));
        assert_eq!(r.into_inner().orders.len(), 10);
    }
}

/// Callers read users and fan out while the server terminates every
/// backend of `db` again and again: each answer is 200, or 503 naming the
/// database, never another error.
async fn terminated_mid_query_is_503_never_500(users: &Arc<UserService>, id: uuid::Uuid, db: &str) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let callers: Vec<_> = (0..4)
        .map(|c| {
            let (users, stop) = (users.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut ok, mut unavailable) = (0, 0);
                let via = Transport::ALL[c % Transport::ALL.len()];
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let res = if c % 2 == 0 {
                        users
                            .http
                            .get(users.url(&format!("/v1/users/{id}")))
                            .send()
                            .await
                            .unwrap()
                    } else {
                        users.orders(id, via, "&limit=10").await
                    };
                    match res.status().as_u16() {
                        200 => ok += 1,
                        503 => {
                            let e = problem_of(res).await;
                            assert_eq!(e.error, "unavailable", "{e:?}");
                            unavailable += 1;
                        }
                        s => panic!("{s}: {}", res.text().await.unwrap()),
                    }
                }
                (ok, unavailable)
            })
        })
        .collect();
    let admin = sqlx::PgPool::connect(&testkit::postgres::server_url())
        .await
        .unwrap();
    let mut terminated = 0;
    for _ in 0..30 {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid()",
        )
        .bind(db)
        .fetch_one(&admin)
        .await
        .unwrap();
        terminated += n;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    admin.close().await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (mut ok, mut unavailable) = (0, 0);
    for c in callers {
        let (o, u) = c.await.unwrap();
        ok += o;
        unavailable += u;
    }
    eprintln!("{terminated} backends terminated; {ok} answers 200, {unavailable} 503");
    assert!(terminated > 0, "no backend was terminated");
    assert!(ok > 0);
}

/// user-service's gRPC health names: the server's and its API's.
const HEALTH_NAMES: &[&str] = &["", "user.v1.UserService"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_users_database_restarts_user_service_answers_503_fast_then_serves_at_once() {
    let orders = OrderService::start().await;
    let proxy = Proxy::start(POSTGRES.parse().unwrap()).await.unwrap();
    let db_name = Arc::new(Mutex::new(String::new()));
    let users = spawn_users_with(&orders, |s| {
        let url = s.database_url.take().unwrap();
        *db_name.lock().unwrap() = url.0.rsplit('/').next().unwrap().to_owned();
        s.database_url = Some(DatabaseUrl(proxy.url_through(&url.0)));
        s.database_max_connections = 4;
        s.database_acquire_timeout_ms = 1_000;
    })
    .await;
    let id = dataset::fixed_user_id(10);
    load_every_transport(&users, id).await;

    proxy.cut();
    every_transport_says_unavailable(&users, id, "unavailable", "users database").await;
    let ready = users.http.get(users.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503, "not ready without its database");
    let live = users.http.get(users.url("/healthz")).send().await.unwrap();
    assert_eq!(live.status(), 200, "alive all the same");
    // gRPC health says what /readyz says, within its check interval.
    health::becomes(users.grpc, HEALTH_NAMES, ServingStatus::NotServing).await;
    // A registration fails the same way, and is not half done.
    let res = users
        .http
        .post(users.url("/v1/users"))
        .json(&crate::users::form("outage.user"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 503, "{}", res.text().await.unwrap());

    let connections_before = proxy.accepted();
    proxy.restore();
    every_transport_serves_at_once(&users, id).await;
    assert!(
        proxy.accepted() > connections_before,
        "no new database connection replaced the dead ones"
    );
    let ready = users.http.get(users.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    health::becomes(users.grpc, HEALTH_NAMES, ServingStatus::Serving).await;
    load_every_transport(&users, id).await;

    // A blip nobody asked during: every pooled connection is dead when the
    // next requests come, and each is replaced on the spot.
    proxy.cut();
    proxy.restore();
    every_transport_serves_at_once(&users, id).await;

    // Postgres ending its own backends, as a restart does (FATAL 57P01 on a
    // query in flight), under load: an answer is 200 or 503, never a 500.
    let (users, db_name) = (Arc::new(users), db_name.lock().unwrap().clone());
    terminated_mid_query_is_503_never_500(&users, id, &db_name).await;
    every_transport_serves_at_once(&users, id).await;
    let users = Arc::into_inner(users).unwrap();

    users.stop().await;
    orders.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_orders_database_restarts_every_transport_answers_503_fast_then_serves_at_once() {
    let proxy = Proxy::start(POSTGRES.parse().unwrap()).await.unwrap();
    let orders = OrderService::start_with(|s| {
        let url = s.database_url.take().unwrap();
        s.database_url = Some(DatabaseUrl(proxy.url_through(&url.0)));
        s.database_max_connections = 4;
        s.database_acquire_timeout_ms = 1_000;
    })
    .await;
    let users = spawn_users_with(&orders, |s| s.pool_size = 2).await;
    let id = dataset::fixed_user_id(10);
    load_every_transport(&users, id).await;

    proxy.cut();
    every_transport_says_unavailable(&users, id, "upstream_unavailable", "unavailable").await;

    let connections_before = proxy.accepted();
    proxy.restore();
    every_transport_serves_at_once(&users, id).await;
    assert!(
        proxy.accepted() > connections_before,
        "no new database connection replaced the dead ones"
    );
    load_every_transport(&users, id).await;
    proxy.cut();
    proxy.restore();
    every_transport_serves_at_once(&users, id).await;

    users.stop().await;
    orders.stop().await;
}
