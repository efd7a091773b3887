//! A gRPC request whose bytes are not its message (garbage, a string that
//! is not UTF-8) is the client's fault: INVALID_ARGUMENT, never INTERNAL,
//! which every dashboard counts as the server failing. The client is raw
//! h2, so the bytes are exactly the bad ones.

use crate::helpers::{Backend, spawn};

use crate::grpc_raw::{BAD, status_of};

#[tokio::test]
async fn bad_request_bytes_are_invalid_argument_not_internal() {
    let app = spawn(Backend::Memory).await;
    for (what, bytes) in BAD {
        let s = status_of(app.grpc, "/order.v2.OrderService/ListOrders", bytes).await;
        assert_eq!(s, "3", "{what}: grpc-status {s}");
    }
    app.stop().await;
}
