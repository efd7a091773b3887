//! user-service's gRPC port: a request whose bytes are not its message is
//! INVALID_ARGUMENT, never INTERNAL (the client and its bad bytes are
//! order-service's test's).

#[path = "../../../order-service/tests/api/grpc_raw.rs"]
mod shared;

use crate::helpers::{OrderService, spawn_users};

#[tokio::test]
async fn bad_request_bytes_are_invalid_argument_not_internal() {
    let orders = OrderService::start().await;
    let users = spawn_users(&orders).await;
    for (what, bytes) in shared::BAD {
        let s = shared::status_of(users.grpc, "/user.v1.UserService/GetUser", bytes).await;
        assert_eq!(s, "3", "{what}: grpc-status {s}");
    }
}
