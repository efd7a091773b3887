//! The admin listener: with the REST listener full (every connection of its
//! cap held by a client that sends nothing), a liveness probe on the REST
//! port is refused, and the same probe on the admin port answers, as do
//! readiness and /metrics. The admin port serves nothing else.

use crate::helpers::{Backend, spawn, spawn_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_on_the_admin_listener_while_the_rest_listener_is_full() {
    let app = spawn_with(Backend::Memory, |s| {
        s.admin_addr = Some("127.0.0.1:0".parse().unwrap());
        s.max_connections = 4;
    })
    .await;
    let admin = app.admin.expect("an admin listener");
    let user = "00000000-0000-0000-0000-000000000010";
    let api = format!("/v2/orders?user_id={user}&limit=1");
    testkit::flood::admin_answers_while_rest_is_full((app.rest, admin), "order", 4, &api).await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn there_is_no_admin_listener_unless_one_is_asked_for() {
    let app = spawn(Backend::Memory).await;
    assert_eq!(app.admin, None);
    app.stop().await;
}
