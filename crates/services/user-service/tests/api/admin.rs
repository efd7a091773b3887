//! The admin listener, as order-service's: probes and /metrics answer on it
//! while the REST listener is full, and the API is not on it.

use crate::helpers::spawn_users_on;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_on_the_admin_listener_while_the_rest_listener_is_full() {
    let settings = user_service::Settings {
        admin_addr: Some("127.0.0.1:0".parse().unwrap()),
        max_connections: 4,
        ..Default::default()
    };
    let users = spawn_users_on(settings, None).await;
    let admin = users.admin.expect("an admin listener");
    let api = format!("/v1/users/{}", dataset::fixed_user_id(1));
    testkit::flood::admin_answers_while_rest_is_full((users.rest, admin), "user", 4, &api).await;
    users.stop().await;
}
