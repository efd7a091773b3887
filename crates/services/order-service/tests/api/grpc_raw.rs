//! gRPC over raw h2, with exactly the bytes a test gives: a call's request
//! and framed message, its `grpc-status`, and bad bytes for a unary call.
//! Shared by both services' client-fault tests and order-service's tests
//! of slow and unread calls.

use bytes::Bytes;
use tokio::net::TcpStream;

/// A gRPC POST to `path` on `addr`, its message to follow.
pub fn request(addr: std::net::SocketAddr, path: &str) -> http::Request<()> {
    http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

/// `message` in gRPC's framing: no compression, its length, its bytes.
pub fn framed(message: &[u8]) -> Bytes {
    let mut frame = vec![0u8];
    frame.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(message);
    Bytes::from(frame)
}

/// A call's `grpc-status`, from its head (trailers only) or its trailers.
pub async fn status(answer: h2::client::ResponseFuture) -> String {
    let res = answer.await.unwrap();
    if let Some(s) = res.headers().get("grpc-status") {
        return s.to_str().unwrap().to_owned();
    }
    let mut body = res.into_body();
    while let Some(chunk) = body.data().await {
        let _ = chunk.unwrap();
    }
    let trailers = body.trailers().await.unwrap().expect("trailers");
    trailers["grpc-status"].to_str().unwrap().to_owned()
}

/// The `grpc-status` of a unary call to `path` carrying `message` framed.
pub async fn status_of(addr: std::net::SocketAddr, path: &str, message: &[u8]) -> String {
    let io = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = h2::client::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let (answer, mut body) = send.send_request(request(addr, path), false).unwrap();
    body.send_data(framed(message), true).unwrap();
    status(answer).await
}

/// Field 1 (a string) holding bytes that are not UTF-8, and bytes that are
/// no protobuf message at all.
pub const BAD: [(&str, &[u8]); 2] = [
    ("a string that is not UTF-8", &[0x0a, 0x02, 0xff, 0xfe]),
    ("garbage", &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
];
