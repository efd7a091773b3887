//! A unary gRPC call over raw h2 with exactly the bytes a test gives, and
//! bad bytes for it: shared by both services' client-fault tests.

use bytes::Bytes;
use tokio::net::TcpStream;

/// The `grpc-status` of a unary call to `path` carrying `message` framed.
pub async fn status_of(addr: std::net::SocketAddr, path: &str, message: &[u8]) -> String {
    let io = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = h2::client::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let mut frame = vec![0u8];
    frame.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(message);
    let req = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (res, mut body) = send.send_request(req, false).unwrap();
    body.send_data(Bytes::from(frame), true).unwrap();
    let res = res.await.unwrap();
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

/// Field 1 (a string) holding bytes that are not UTF-8, and bytes that are
/// no protobuf message at all.
pub const BAD: [(&str, &[u8]); 2] = [
    ("a string that is not UTF-8", &[0x0a, 0x02, 0xff, 0xfe]),
    ("garbage", &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
];
