//! The harness: the real order-service and the real user-service, both on
//! port 0, each on a Postgres database of its own (cloned from a migrated and
//! seeded template by `testkit`).
//!
//! order-service runs on a runtime and thread of its own so that a test can
//! kill it outright (every socket closes, as when a process dies) and start
//! it again on the same ports. `TEST_LOG=1` shows the logs of both.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use model::Order;
use tokio::sync::oneshot;
use user_service::domain::UserWithOrdersJson;
use user_service::metrics::{Metrics, TransportSnapshot};
use user_service::upstream::Transport;
use uuid::Uuid;

pub use testkit::process::{init_test_log, start_binary};

#[path = "../../../order-service/tests/api/orders_db.rs"]
mod orders_db;
pub use orders_db::orders_database;

/// user-service's database: migrated and seeded with the data set's users.
pub async fn users_database() -> testkit::postgres::TestDb {
    use user_service::store::postgres::{MIGRATOR, PgStore};
    testkit::postgres::fresh_database("users", &MIGRATOR, &dataset::version(), |pool| async move {
        PgStore::from_pool(pool).seed().await
    })
    .await
}

/// A running order-service that can be killed and brought back.
pub struct OrderService {
    pub rest: SocketAddr,
    pub grpc: SocketAddr,
    pub tcp: SocketAddr,
    /// The HTTP/3 listener (UDP).
    pub h3: SocketAddr,
    settings: order_service::Settings,
    db: Option<testkit::postgres::TestDb>,
    kill: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl OrderService {
    /// order-service on Postgres, every listener on port 0.
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// The same, with its settings (database URL included) changed by `tweak`.
    pub async fn start_with(tweak: impl FnOnce(&mut order_service::Settings)) -> Self {
        init_test_log();
        let db = orders_database().await;
        let mut settings = order_service::Settings::for_tests(Some(db.url.clone()));
        tweak(&mut settings);
        let mut s = Self::launch(settings).await;
        s.db = Some(db);
        s
    }

    /// order-service in memory, its listeners on `ip` at `ports` (REST,
    /// gRPC, raw TCP, HTTP/3; 0 for any), its settings changed by `tweak`: one
    /// replica of several, which serve on the same ports at different
    /// addresses as pods do.
    pub async fn replica_with(
        ip: std::net::IpAddr,
        ports: [u16; 4],
        tweak: impl FnOnce(&mut order_service::Settings),
    ) -> Self {
        init_test_log();
        let mut settings = order_service::Settings::for_tests(None);
        tweak(&mut settings);
        settings.rest_addr = SocketAddr::new(ip, ports[0]);
        settings.grpc_addr = SocketAddr::new(ip, ports[1]);
        settings.tcp_addr = SocketAddr::new(ip, ports[2]);
        settings.h3_addr = order_service::settings::H3Addr(Some(SocketAddr::new(ip, ports[3])));
        Self::launch(settings).await
    }

    /// Points every transport of user-service's `settings` at this one.
    pub fn dialled_by(&self, settings: &mut user_service::Settings) {
        point_at(settings, self.rest, self.grpc, self.tcp, self.h3);
    }

    /// The text of its /metrics.
    pub async fn metrics_text(&self) -> String {
        testkit::http::get_text(
            &reqwest::Client::new(),
            &format!("http://{}/metrics", self.rest),
        )
        .await
    }

    async fn launch(settings: order_service::Settings) -> Self {
        let (ready_tx, ready_rx) = oneshot::channel();
        let (kill_tx, kill_rx) = oneshot::channel::<()>();
        let for_thread = settings.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let app = match order_service::Application::build(for_thread).await {
                    Ok(app) => app,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let h3 = app.h3_addr().expect("an HTTP/3 listener");
                let _ = ready_tx.send(Ok((app.rest_addr(), app.grpc_addr(), app.tcp_addr(), h3)));
                // The kill does not drain: run_until_stopped is simply
                // abandoned, and dropping the runtime below closes every
                // socket at once, as a crash would.
                tokio::select! {
                    r = app.run_until_stopped(std::future::pending()) => { r.unwrap() }
                    _ = kill_rx => {}
                }
            });
            rt.shutdown_timeout(Duration::from_secs(5));
        });
        let (rest, grpc, tcp, h3) = ready_rx
            .await
            .expect("the order-service thread started")
            .expect("order-service builds");
        OrderService {
            rest,
            grpc,
            tcp,
            h3,
            settings,
            db: None,
            kill: Some(kill_tx),
            thread: Some(thread),
        }
    }

    /// Kills order-service: its sockets close without a goodbye.
    pub async fn kill(&mut self) {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
        if let Some(t) = self.thread.take() {
            tokio::task::spawn_blocking(move || t.join().unwrap())
                .await
                .unwrap();
        }
    }

    /// Starts order-service again on the ports it had.
    pub async fn restart(&mut self) {
        let mut settings = self.settings.clone();
        settings.rest_addr = self.rest;
        settings.grpc_addr = self.grpc;
        settings.tcp_addr = self.tcp;
        settings.h3_addr = order_service::settings::H3Addr(Some(self.h3));
        let again = Self::launch(settings).await;
        self.kill = again.kill;
        self.thread = again.thread;
    }

    /// Stops it and drops its database.
    pub async fn stop(mut self) {
        self.kill().await;
        if let Some(db) = self.db.take() {
            db.drop_database().await.unwrap();
        }
    }
}

/// A running user-service.
pub struct UserService {
    pub rest: SocketAddr,
    pub grpc: SocketAddr,
    /// The admin listener, when the settings asked for one.
    pub admin: Option<SocketAddr>,
    pub metrics: Arc<Metrics>,
    pub http: reqwest::Client,
    db: Option<testkit::postgres::TestDb>,
    serving: testkit::process::InProcess,
}

/// Settings pointing at `orders`, on Postgres, changed by `tweak`.
pub async fn spawn_users_with(
    orders: &OrderService,
    tweak: impl FnOnce(&mut user_service::Settings),
) -> UserService {
    let db = users_database().await;
    let mut settings = user_service::Settings {
        database_url: Some(user_service::settings::DatabaseUrl(db.url.clone())),
        database_max_connections: 4,
        ..Default::default()
    };
    orders.dialled_by(&mut settings);
    tweak(&mut settings);
    spawn_users_on(settings, Some(db)).await
}

/// user-service on Postgres with the default settings, calling `orders`.
pub async fn spawn_users(orders: &OrderService) -> UserService {
    spawn_users_with(orders, |_| {}).await
}

/// Points every transport of `settings` at these addresses.
pub fn point_at(
    settings: &mut user_service::Settings,
    rest: SocketAddr,
    grpc: SocketAddr,
    tcp: SocketAddr,
    h3: SocketAddr,
) {
    settings.order_rest_url = format!("http://{rest}").parse().unwrap();
    settings.order_grpc_url = format!("http://{grpc}").parse().unwrap();
    settings.order_tcp_addr = tcp.to_string();
    settings.order_h3_addr = h3.to_string();
}

/// user-service with exactly these settings.
pub async fn spawn_users_on(
    settings: user_service::Settings,
    db: Option<testkit::postgres::TestDb>,
) -> UserService {
    spawn_users_resolving(settings, db, Arc::new(user_service::upstream::balance::Dns)).await
}

/// The same, with order-service's replica names resolved by `resolver`.
pub async fn spawn_users_resolving(
    settings: user_service::Settings,
    db: Option<testkit::postgres::TestDb>,
    resolver: Arc<dyn user_service::upstream::balance::Resolve>,
) -> UserService {
    init_test_log();
    let app = user_service::Application::build_with_resolver(settings, resolver)
        .await
        .expect("user-service builds");
    UserService {
        rest: app.rest_addr(),
        grpc: app.grpc_addr(),
        admin: app.admin_addr(),
        metrics: app.metrics(),
        http: reqwest::Client::builder().http1_only().build().unwrap(),
        db,
        serving: testkit::process::InProcess::spawn(|stop| app.run_until_stopped(stop)),
    }
}

impl UserService {
    /// The text of its /metrics.
    pub async fn metrics_text(&self) -> String {
        testkit::http::get_text(&self.http, &self.url("/metrics")).await
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.rest)
    }

    /// `GET /v1/users/{id}/orders` over `via`.
    pub async fn orders(&self, id: Uuid, via: Transport, query: &str) -> reqwest::Response {
        self.http
            .get(self.url(&format!("/v1/users/{id}/orders?via={via}{query}")))
            .send()
            .await
            .unwrap()
    }

    /// The same, expecting a 200, parsed to domain orders.
    pub async fn orders_ok(
        &self,
        id: Uuid,
        via: Transport,
        query: &str,
    ) -> (UserWithOrdersJson, Vec<Order>) {
        let res = self.orders(id, via, query).await;
        let status = res.status();
        assert_eq!(res.headers()["x-via"], via.name());
        let micros: u64 = res.headers()["x-upstream-micros"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(micros > 0, "x-upstream-micros is 0 over {via}");
        let body = res.bytes().await.unwrap();
        assert_eq!(
            status,
            200,
            "over {via}: {}",
            String::from_utf8_lossy(&body)
        );
        let page: UserWithOrdersJson = serde_json::from_slice(&body).unwrap();
        let orders = page
            .orders
            .iter()
            .cloned()
            .map(|o| Order::try_from(o).unwrap())
            .collect();
        (page, orders)
    }

    pub fn snapshot(&self, t: Transport) -> TransportSnapshot {
        self.metrics.snapshot(t)
    }

    pub async fn grpc_client(
        &self,
    ) -> proto::user::v1::user_service_client::UserServiceClient<tonic::transport::Channel> {
        proto::user::v1::user_service_client::UserServiceClient::connect(format!(
            "http://{}",
            self.grpc
        ))
        .await
        .unwrap()
        .max_decoding_message_size(64 << 20)
    }

    /// Stops it (draining) and drops its database.
    pub async fn stop(self) {
        self.serving.stop().await;
        if let Some(db) = self.db {
            db.drop_database().await.unwrap();
        }
    }
}

/// The data set's user with `count` orders.
pub fn fixed_user(count: u32) -> dataset::DatasetUser {
    let id = dataset::fixed_user_id(count);
    dataset::users().into_iter().find(|u| u.id == id).unwrap()
}

/// Waits (up to a generous bound) until `check` holds.
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub use testkit::problem::problem_of;
