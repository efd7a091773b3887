//! Hostile input at scale: schemathesis generates requests from user-service's
//! served OpenAPI document, valid and invalid, and checks every answer: no
//! 5xx, only documented statuses and content types, and every body matching
//! its schema. The fan-out route calls the real order-service, over whichever
//! transport the generated `via` names.
//!
//! Needs schemathesis in the Python that `PYTHON` names, or in
//! `.tools/venv` (`./scripts/test` installs it from requirements-dev.txt).
//! `SCHEMATHESIS_SEED` replays another seed; `SCHEMATHESIS_EXAMPLES` changes
//! the examples per operation. The runner is `testkit::schemathesis`, shared
//! with order-service's test.

use crate::helpers::{OrderService, spawn_users};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_and_no_answer_off_the_openapi_document() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    testkit::schemathesis::run(&users.url("/openapi.json")).await;
    users.stop().await;
    orders.stop().await;
}
