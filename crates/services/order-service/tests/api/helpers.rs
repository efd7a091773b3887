//! Test harness: the real order-service on port 0, on a Postgres database of
//! its own (cloned from a seeded template) or on the in-memory store, and
//! clients for every transport.

use std::net::SocketAddr;

use order_service::{Application, Settings};
use proto::order::{v1 as pb1, v2 as pb2};

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
    /// The HTTP/3 listener (UDP), unless the settings turned it off.
    pub h3: Option<SocketAddr>,
    /// The admin listener, when the settings asked for one.
    pub admin: Option<SocketAddr>,
    pub db: Option<testkit::postgres::TestDb>,
    pub serving: InProcess,
}

pub use testkit::process::{InProcess, Proc, init_test_log};

pub use crate::orders_db::orders_database;

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
    TestApp {
        rest: app.rest_addr(),
        grpc: app.grpc_addr(),
        tcp: app.tcp_addr(),
        h3: app.h3_addr(),
        admin: app.admin_addr(),
        db,
        serving: InProcess::spawn(|stop| app.run_until_stopped(stop)),
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

    /// The text of its /metrics.
    pub async fn metrics_text(&self) -> String {
        testkit::http::get_text(&self.h1(), &self.url("/metrics")).await
    }

    /// Stops the service, waits for it to drain, and drops its database.
    pub async fn stop(self) {
        self.serving.stop().await;
        if let Some(db) = self.db {
            db.drop_database().await.unwrap();
        }
    }
}

/// The first page of `n` orders of `user` with `fields`, as a protobuf
/// `ListOrdersRequest` (gRPC, and Connect's binary body).
pub fn list_request(user: &str, n: i32, fields: model::FieldSet) -> pb2::ListOrdersRequest {
    pb2::ListOrdersRequest {
        user_id: user.into(),
        page_size: n,
        page_token: String::new(),
        read_mask: model::v2::field_mask(fields),
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

/// The real order-service binary, listening on port 0 with `env` set (and
/// no database unless `env` names one), ready to serve: its addresses are
/// `rest`, `grpc` and `tcp`.
pub async fn start_binary(env: &[(&str, &str)]) -> Proc {
    let mut all: Vec<(&str, String)> = [
        "ORDER_REST_ADDR",
        "ORDER_GRPC_ADDR",
        "ORDER_TCP_ADDR",
        "ORDER_H3_ADDR",
    ]
    .into_iter()
    .map(|k| (k, "127.0.0.1:0".to_owned()))
    .collect();
    all.extend(env.iter().map(|(k, v)| (*k, (*v).to_owned())));
    testkit::process::start_binary(
        std::path::Path::new(env!("CARGO_BIN_EXE_order-service")),
        &all,
        "order-service ready to serve",
    )
    .await
}

/// Sends one raw-TCP lookup (`page_size` orders of `user`) on `c` and reads
/// the next answer frame.
pub async fn tcp_lookup(
    c: &mut tokio::net::TcpStream,
    request_id: u64,
    user: &str,
    page_size: i32,
) -> pb2::LookupOrdersResponse {
    let req = pb2::LookupOrdersRequest {
        request_id,
        user_id: user.to_owned(),
        page_size,
        ..Default::default()
    };
    tcp_send(c, &req).await
}

/// Sends `req` as one raw-TCP frame on `c` and reads the next answer frame.
pub async fn tcp_send(
    c: &mut tokio::net::TcpStream,
    req: &pb2::LookupOrdersRequest,
) -> pb2::LookupOrdersResponse {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    c.write_all(&order_service::tcp::encode_frame(req))
        .await
        .unwrap();
    let len = c.read_u32().await.unwrap() as usize;
    let mut buf = vec![0; len];
    c.read_exact(&mut buf).await.unwrap();
    <pb2::LookupOrdersResponse as prost::Message>::decode(&buf[..]).unwrap()
}

/// For a test that reads this process's resident memory (or holds a
/// thousand of its sockets): `cargo test` runs every test of this binary in
/// one process, where another test's allocations would count as this one's,
/// so the test is run again, alone, in a process of its own.
///
/// `test` is the test's path in this binary (`overload::past_the_limit_…`).
/// Returns `true` where the test's body is to run: in that process, or in
/// any process of cargo-nextest, which runs each test in its own. Returns
/// `false` in the caller once the test passed there, having printed its
/// output; panics, with that output, if it failed or did not run.
pub async fn alone(test: &str) -> bool {
    const ALONE: &str = "ORDER_SERVICE_TEST_ALONE";
    let nextest = std::env::var("NEXTEST_EXECUTION_MODE").is_ok_and(|m| m == "process-per-test");
    if nextest || std::env::var_os(ALONE).is_some() {
        return true;
    }
    let out = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ALONE, "1")
        .output()
        .await
        .expect("this test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{test}, run alone: {}",
        out.status
    );
    false
}

/// One slot of the service's limit held by work in service, until
/// [`SlotHeld::abort`]: a REST list waiting on the orders table, which a
/// transaction of the test's holds locked. (A request whose body is still
/// coming holds no slot against new work: it lends it.)
pub struct SlotHeld {
    release: Option<tokio::sync::oneshot::Sender<()>>,
}

impl SlotHeld {
    /// The lock released: the list is answered and its slot freed.
    pub fn abort(mut self) {
        if let Some(r) = self.release.take() {
            let _ = r.send(());
        }
    }
}

/// Takes one slot of `app`'s limit (on Postgres) for as long as the
/// [`SlotHeld`] lives.
pub async fn hold_a_slot(app: &TestApp) -> SlotHeld {
    hold_slots(app, 1).await
}

/// Takes `n` slots of `app`'s limit (on Postgres), `n` lists waiting on
/// one lock, for as long as the [`SlotHeld`] lives.
pub async fn hold_slots(app: &TestApp, n: usize) -> SlotHeld {
    use sqlx::Connection as _;
    let url = app
        .db
        .as_ref()
        .expect("a slot is held on Postgres")
        .url
        .clone();
    let (locked, is_locked) = tokio::sync::oneshot::channel();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        let mut tx = conn.begin().await.unwrap();
        sqlx::query("LOCK TABLE orders IN ACCESS EXCLUSIVE MODE")
            .execute(&mut *tx)
            .await
            .unwrap();
        let _ = locked.send(());
        let _ = released.await;
        let _ = tx.rollback().await;
    });
    is_locked.await.expect("the orders table locked");
    let url = app.url("/v2/orders?user_id=00000000-0000-0000-0000-000000000010&limit=1");
    for _ in 0..n {
        let url = url.clone();
        tokio::spawn(async move {
            let _ = reqwest::get(url).await;
        });
    }
    // In service, waiting on the lock.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    SlotHeld {
        release: Some(release),
    }
}

/// A bidi `LookupOrders` stream on `g`, opened with `first` already sent:
/// the sender for more lookups, and the answers.
pub async fn lookups(
    g: &mut pb2::order_service_client::OrderServiceClient<tonic::transport::Channel>,
    first: impl IntoIterator<Item = pb2::LookupOrdersRequest>,
) -> (
    tokio::sync::mpsc::Sender<pb2::LookupOrdersRequest>,
    tonic::Streaming<pb2::LookupOrdersResponse>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    for req in first {
        tx.send(req).await.unwrap();
    }
    let answers = g
        .lookup_orders(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    (tx, answers)
}
