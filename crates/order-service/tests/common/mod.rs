//! Test harness: the real order-service on port 0, on a Postgres database of
//! its own (cloned from a seeded template) or on the in-memory store, and
//! clients for every transport.

#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::Path;

use order_service::store::postgres::PgStore;
use order_service::{Application, Settings};
use proto::order::{v1 as pb1, v2 as pb2};
use tokio_util::sync::CancellationToken;

/// Which store a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    Postgres,
}

/// A running order-service.
pub struct TestApp {
    pub rest: SocketAddr,
    pub grpc: SocketAddr,
    pub tcp: SocketAddr,
    pub db: Option<pgtest::TestDb>,
    pub stop: CancellationToken,
    pub handle: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// Logs go to the test output when TEST_LOG is set.
pub fn init_test_log() {
    if std::env::var_os("TEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// A database of this test's own, holding the migrated schema and the data set.
pub async fn orders_database() -> pgtest::TestDb {
    let migrations = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations/orders");
    pgtest::fresh_database(
        "orders",
        &migrations,
        &dataset::version(),
        |url| async move {
            let pool = sqlx::PgPool::connect(&url).await?;
            order_service::store::postgres::MIGRATOR.run(&pool).await?;
            PgStore::from_pool(pool.clone()).seed().await?;
            pool.close().await;
            Ok(())
        },
    )
    .await
    .expect("a test database (is Postgres running on 127.0.0.1:5432?)")
}

/// Starts order-service on `backend` with settings changed by `tweak`.
pub async fn spawn_with(backend: Backend, tweak: impl FnOnce(&mut Settings)) -> TestApp {
    init_test_log();
    let db = match backend {
        Backend::Memory => None,
        Backend::Postgres => Some(orders_database().await),
    };
    let mut settings = Settings::for_tests(db.as_ref().map(|d| d.url.clone()));
    tweak(&mut settings);
    let app = Application::build(settings)
        .await
        .expect("order-service builds");
    let (rest, grpc, tcp) = (app.rest_addr(), app.grpc_addr(), app.tcp_addr());
    let stop = CancellationToken::new();
    let handle = tokio::spawn(app.run_until_stopped(stop.clone().cancelled_owned()));
    TestApp {
        rest,
        grpc,
        tcp,
        db,
        stop,
        handle,
    }
}

/// Starts order-service on `backend` with the default settings.
pub async fn spawn(backend: Backend) -> TestApp {
    spawn_with(backend, |_| {}).await
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.rest, path)
    }

    /// An HTTP/1.1-only client.
    pub fn h1(&self) -> reqwest::Client {
        reqwest::Client::builder().http1_only().build().unwrap()
    }

    /// An h2c client (HTTP/2 with prior knowledge, no TLS).
    pub fn h2c(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .http2_prior_knowledge()
            .build()
            .unwrap()
    }

    pub async fn grpc_v2(
        &self,
    ) -> pb2::order_service_client::OrderServiceClient<tonic::transport::Channel> {
        pb2::order_service_client::OrderServiceClient::connect(format!("http://{}", self.grpc))
            .await
            .unwrap()
            .max_decoding_message_size(64 << 20)
    }

    pub async fn grpc_v1(
        &self,
    ) -> pb1::order_service_client::OrderServiceClient<tonic::transport::Channel> {
        pb1::order_service_client::OrderServiceClient::connect(format!("http://{}", self.grpc))
            .await
            .unwrap()
            .max_decoding_message_size(64 << 20)
    }

    /// Stops the service, waits for it to drain, and drops its database.
    pub async fn stop(self) {
        self.stop.cancel();
        self.handle.await.unwrap().unwrap();
        if let Some(db) = self.db {
            db.drop_database().await.unwrap();
        }
    }
}

/// A `POST /v2/orders` body for `user`, with `note` if given.
pub fn new_order_json(user: uuid::Uuid, note: Option<&str>) -> serde_json::Value {
    let mut v = serde_json::json!({
        "user_id": user,
        "product_id": "6d1b4a60-2f7e-4d8e-9a5e-3c2f1b0a9d8c",
        "product_name": "Oak Tray",
        "quantity": 3,
        "unit_price_minor": 1250,
        "discount_minor": 250,
        "currency": "EUR",
        "shipping_address": {"line1": "1 Mill Street", "city": "Lyon", "postal_code": "69001", "country_code": "FR"}
    });
    if let Some(n) = note {
        v["note"] = n.into();
    }
    v
}

/// The data set's user with `count` orders, and its orders by id.
pub fn expected_orders(count: u32) -> Vec<model::Order> {
    let id = dataset::fixed_user_id(count);
    let u = dataset::users().into_iter().find(|u| u.id == id).unwrap();
    dataset::orders_of(&u)
}

/// The real order-service binary, listening on port 0 with `env` set (and no
/// database unless `env` names one). Returns the process and the fields of
/// its "ready to serve" log line: `rest`, `grpc` and `tcp` addresses.
pub async fn start_binary(env: &[(&str, &str)]) -> (tokio::process::Child, serde_json::Value) {
    use tokio::io::AsyncBufReadExt as _;
    let mut proc = tokio::process::Command::new(env!("CARGO_BIN_EXE_order-service"))
        .env("ORDER_REST_ADDR", "127.0.0.1:0")
        .env("ORDER_GRPC_ADDR", "127.0.0.1:0")
        .env("ORDER_TCP_ADDR", "127.0.0.1:0")
        .env_remove("ORDER_DATABASE_URL")
        .env("LOG_FORMAT", "json")
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(proc.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            if v["fields"]["message"] == "order-service ready to serve" {
                return v["fields"].clone();
            }
        }
        panic!("order-service exited before it was ready");
    })
    .await
    .unwrap();
    // Keep draining the log so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (proc, ready)
}

/// Sends SIGTERM, so that the service drains and flushes its spans, and
/// waits for it to exit (30 s at most).
pub async fn sigterm(proc: &mut tokio::process::Child) -> std::process::ExitStatus {
    let pid = proc.id().unwrap().to_string();
    let kill = tokio::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(kill.success());
    tokio::time::timeout(std::time::Duration::from_secs(30), proc.wait())
        .await
        .expect("order-service exits within 30 s of SIGTERM")
        .unwrap()
}
