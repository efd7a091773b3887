//! Postgres going away: 503 / UNAVAILABLE fast while it is gone, and service
//! again by itself when it returns. Postgres is reached through a proxy that
//! the test can cut, so the real server keeps running for other tests.

// Helpers outside #[test] functions unwrap too: a panic is how a test fails.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Backend, orders_database, spawn_with};
use proto::order::v2 as pb2;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinSet;

/// A TCP proxy to Postgres that can be cut (every connection dropped, new
/// ones closed at once) and restored.
struct CuttableProxy {
    addr: SocketAddr,
    up: Arc<AtomicBool>,
    links: Arc<Mutex<JoinSet<()>>>,
}

impl CuttableProxy {
    async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let links = Arc::new(Mutex::new(JoinSet::new()));
        let (u, l) = (up.clone(), links.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !u.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                l.lock().await.spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        CuttableProxy { addr, up, links }
    }

    async fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.links.lock().await.abort_all();
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_is_503_fast_and_service_returns_by_itself() {
    let db = orders_database().await;
    let proxy = CuttableProxy::start("127.0.0.1:5432".parse().unwrap()).await;
    let via_proxy = db
        .url
        .replacen("127.0.0.1:5432", &proxy.addr.to_string(), 1);
    assert_ne!(
        via_proxy, db.url,
        "the test server URL names 127.0.0.1:5432"
    );
    let app = spawn_with(Backend::Memory, |s| {
        s.database_url = Some(via_proxy);
        s.db_acquire_timeout_ms = 500;
    })
    .await;
    let list = app.url("/v2/orders?user_id=00000000-0000-0000-0000-000000000010");
    let c = app.h1();
    assert_eq!(c.get(&list).send().await.unwrap().status(), 200);

    proxy.cut().await;
    for _ in 0..3 {
        let started = Instant::now();
        let res = c.get(&list).send().await.unwrap();
        assert_eq!(res.status(), 503);
        let e: model::json::ErrorJson = res.json().await.unwrap();
        assert_eq!(e.error, "unavailable");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        c.get(app.url("/readyz")).send().await.unwrap().status(),
        503
    );
    let s = app
        .grpc_v2()
        .await
        .list_orders(pb2::ListOrdersRequest {
            user_id: "00000000-0000-0000-0000-000000000010".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::Unavailable);
    // Liveness is not readiness: the process is fine.
    assert_eq!(
        c.get(app.url("/healthz")).send().await.unwrap().status(),
        200
    );

    proxy.restore();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let status = c.get(&list).send().await.unwrap().status();
        if status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {status} after Postgres returned"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        c.get(app.url("/readyz")).send().await.unwrap().status(),
        200
    );
    app.stop().await;
    db.drop_database().await.unwrap();
}
