//! Hostile input at scale: schemathesis (a property-based API tester nobody
//! here wrote) generates requests from the served OpenAPI document, valid and
//! invalid, and checks every answer: no 5xx, only documented statuses and
//! content types, and every body matching its schema.
//!
//! Needs schemathesis in the Python that `PYTHON` names, or in
//! `.tools/venv` (`./scripts/test` installs it from requirements-dev.txt).
//! `SCHEMATHESIS_SEED` replays another seed; `SCHEMATHESIS_EXAMPLES` changes
//! the examples per operation.

use crate::helpers::{Backend, spawn};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_and_no_answer_off_the_openapi_document() {
    let app = spawn(Backend::Postgres).await;
    testkit::schemathesis::run(&app.url("/openapi.json")).await;
    app.stop().await;
}
