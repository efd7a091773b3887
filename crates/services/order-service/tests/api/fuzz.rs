//! Hostile input: arbitrary bytes into every decoder. JSON bodies (the
//! `model::json` types, then the parse into domain types), protobuf bodies
//! (every `order.v2` / `order.v1` message, then the parse), the raw-TCP frame
//! reader, and gRPC frames sent to a running server over a raw HTTP/2
//! connection. Nothing panics, the frame reader never allocates past its
//! limit, and the server answers every frame with a gRPC status.

use bytes::{BufMut as _, Bytes, BytesMut};
use http_body_util::{BodyExt as _, Full};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use proto::order::{v1 as pb1, v2 as pb2};

use crate::helpers;

/// Enough cases to find the obvious, few enough to keep the suite fast.
fn config() -> Config {
    Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Bytes that are sometimes valid JSON of the right shape, mostly not.
fn json_ish() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..256),
        "\\{\"user_id\":\"[0-9a-f-]{0,40}\",\"quantity\":-?[0-9]{0,12},\"currency\":\"[A-Z]{0,4}\",\"shipping_address\":\\{\\}\\}"
            .prop_map(String::into_bytes),
        any::<String>().prop_map(|s| format!("{{\"orders\":[{{\"id\":{s:?}}}]}}").into_bytes()),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_json_bodies_are_refused_or_parsed_without_panicking(bytes in json_ish()) {
        if let Ok(j) = serde_json::from_slice::<model::json::CreateOrderJson>(&bytes) {
            let _ = model::NewOrder::try_from(j);
        }
        if let Ok(j) = serde_json::from_slice::<model::json::OrderJson>(&bytes) {
            let _ = model::Order::try_from(j);
        }
        let _ = serde_json::from_slice::<model::json::OrderPageJson>(&bytes);
        let _ = serde_json::from_slice::<model::json::CreatedOrderJson>(&bytes);
        let _ = serde_json::from_slice::<model::json::Problem>(&bytes);
    }

    #[test]
    fn arbitrary_protobuf_bodies_are_refused_or_parsed_without_panicking(
        bytes in vec(any::<u8>(), 0..512),
    ) {
        use prost::Message as _;
        let b = &bytes[..];
        if let Ok(r) = pb2::CreateOrderRequest::decode(b) {
            let _ = model::NewOrder::try_from(r);
        }
        if let Ok(o) = pb2::Order::decode(b) {
            let _ = model::Order::try_from(o);
        }
        if let Ok(o) = pb1::Order::decode(b) {
            let _ = model::Order::try_from(o);
        }
        let _ = pb2::GetOrderRequest::decode(b);
        let _ = pb2::ListOrdersRequest::decode(b);
        let _ = pb2::LookupOrdersRequest::decode(b);
        let _ = pb2::ListOrdersResponse::decode(b);
        let _ = pb2::LookupOrdersResponse::decode(b);
        let _ = pb1::ListOrdersRequest::decode(b);
        let _ = pb1::ListOrdersResponse::decode(b);
    }
}

#[test]
fn the_frame_reader_never_allocates_past_its_limit_whatever_the_bytes() {
    const MAX: usize = 1024;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // Half the cases start with a length prefix near or far over the limit.
    let input = (
        prop_oneof![Just(None), any::<u32>().prop_map(Some)],
        vec(any::<u8>(), 0..2048),
    );
    TestRunner::new(config())
        .run(&input, |(prefix, rest)| {
            let mut bytes = prefix.map(|p| p.to_be_bytes().to_vec()).unwrap_or_default();
            bytes.extend(rest);
            rt.block_on(async {
                let mut r = &bytes[..];
                loop {
                    match order_service::tcp::read_frame(&mut r, MAX).await {
                        Ok(Some(frame)) => prop_assert!(frame.len() <= MAX),
                        Ok(None) => break,
                        Err(order_service::tcp::FrameError::TooLarge { announced, max }) => {
                            prop_assert!(announced > max);
                            break;
                        }
                        // A frame cut short by the end of input.
                        Err(order_service::tcp::FrameError::Io(_)) => break,
                        // read_frame itself has no clock and no budget:
                        // only the connection's read fails these ways.
                        Err(
                            e @ (order_service::tcp::FrameError::Slow(_)
                            | order_service::tcp::FrameError::OverBudget { .. }),
                        ) => {
                            prop_assert!(false, "{e}");
                        }
                    }
                }
                Ok(())
            })
        })
        .unwrap();

    // A 4 GiB announcement is refused from the 4 bytes alone.
    let mut r = &u32::MAX.to_be_bytes()[..];
    let e = rt
        .block_on(order_service::tcp::read_frame(&mut r, MAX))
        .unwrap_err();
    assert!(matches!(
        e,
        order_service::tcp::FrameError::TooLarge { announced, .. } if announced == u32::MAX as usize
    ));
}

/// One gRPC frame: flag, 4-byte length, payload (the length may lie).
fn grpc_frame(compressed: u8, announced: Option<u32>, payload: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u8(compressed);
    b.put_u32(announced.unwrap_or(payload.len() as u32));
    b.put_slice(payload);
    b.freeze()
}

#[test]
fn arbitrary_grpc_frames_get_a_grpc_status_and_the_server_keeps_serving() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let app = rt.block_on(helpers::spawn(helpers::Backend::Memory));
    let send = rt.block_on(async {
        let io = tokio::net::TcpStream::connect(app.grpc).await.unwrap();
        let (send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(io),
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        send
    });
    let methods = [
        "/order.v2.OrderService/ListOrders",
        "/order.v2.OrderService/GetOrder",
        "/order.v2.OrderService/CreateOrder",
        "/order.v2.OrderService/StreamOrders",
        "/order.v2.OrderService/LookupOrders",
        "/order.v1.OrderService/ListOrders",
    ];
    let input =
        (
            0..methods.len(),
            prop_oneof![
                // A well-formed frame around arbitrary bytes...
                vec(any::<u8>(), 0..256).prop_map(|p| grpc_frame(0, None, &p)),
                // ...one that says it is compressed, or lies about its length...
                (any::<u8>(), any::<u32>(), vec(any::<u8>(), 0..64))
                    .prop_map(|(f, n, p)| grpc_frame(f, Some(n), &p)),
                // ...or no framing at all.
                vec(any::<u8>(), 0..256).prop_map(Bytes::from),
            ],
        );
    TestRunner::new(config())
        .run(&input, |(m, body)| {
            // HTTP/2 senders are handles onto one connection: a clone per call.
            let mut send = send.clone();
            rt.block_on(async {
                send.ready().await.unwrap();
                let req = http::Request::post(format!("http://{}{}", app.grpc, methods[m]))
                    .header("content-type", "application/grpc")
                    .header("te", "trailers")
                    .body(Full::new(body))
                    .unwrap();
                let res = send.send_request(req).await.unwrap();
                let headers = res.headers().clone();
                let collected = res.into_body().collect().await.unwrap();
                let status = headers
                    .get("grpc-status")
                    .or_else(|| collected.trailers().and_then(|t| t.get("grpc-status")))
                    .map(|v| v.to_str().unwrap().to_owned());
                prop_assert!(status.is_some(), "no grpc-status for {:?}", methods[m]);
                Ok(())
            })
        })
        .unwrap();

    // And the server still answers a good call on a fresh connection.
    rt.block_on(async {
        let mut c = app.grpc_v2().await;
        let page = c
            .list_orders(pb2::ListOrdersRequest {
                user_id: "00000000-0000-0000-0000-000000000010".into(),
                page_size: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(page.into_inner().orders.len(), 10);
        app.stop().await;
    });
}
