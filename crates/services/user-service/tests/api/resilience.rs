//! Dead and slow dependencies: an order-service that is down answers 503
//! quickly on every TCP transport (504 at the timeout over QUIC, which
//! hears nothing from a dead port) and every transport recovers when it
//! returns;
//! one that never answers is a 504 within the timeout; a connection that
//! breaks with lookups pending fails them at once; the timeout travels as the
//! gRPC deadline; a raw-TCP lookup refused by a connection going away is
//! sent again on a new one.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt as _;
use tokio::net::TcpListener;
use user_service::upstream::Transport;

use crate::helpers::{OrderService, point_at, problem_of, spawn_users_on, spawn_users_with};

#[tokio::test]
async fn when_order_service_is_down_every_transport_answers_503_quickly_and_recovers_when_it_returns()
 {
    let mut orders = OrderService::start().await;
    let users = spawn_users_with(&orders, |s| {
        s.pool_size = 2;
        s.upstream_timeout_ms = 5_000;
    })
    .await;
    let id = dataset::fixed_user_id(10);
    for via in Transport::ALL {
        assert_eq!(
            users.orders(id, via, "").await.status(),
            200,
            "{via} before"
        );
    }

    orders.kill().await;
    for via in Transport::ALL {
        let started = Instant::now();
        let res = users.orders(id, via, "").await;
        let took = started.elapsed();
        if via.is_quic() {
            // QUIC cannot tell a dead port from a silent path: no reset
            // comes back (quinn reads no ICMP), so the call runs to the
            // upstream timeout.
            assert_eq!(res.status(), 504, "{via} with order-service down");
            let e = problem_of(res).await;
            assert_eq!(e.error, "upstream_timeout", "{via}: {e:?}");
            assert!(took < Duration::from_secs(6), "{via} took {took:?}");
            continue;
        }
        assert_eq!(res.status(), 503, "{via} with order-service down");
        assert!(res.headers().contains_key("x-upstream-micros"));
        let e = problem_of(res).await;
        assert_eq!(e.error, "upstream_unavailable", "{via}: {e:?}");
        assert!(
            took < Duration::from_secs(4),
            "{via} took {took:?} to say it is down"
        );
    }
    // The plain user read needs no order-service.
    let res = users
        .http
        .get(users.url(&format!("/v1/users/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);

    orders.restart().await;
    for via in Transport::ALL {
        if via.is_quic() {
            // The old QUIC connection still looks alive to the client (the
            // new process cannot reset it: it has not its keys) until QUIC's
            // idle timeout passes with nothing heard; then a new one.
            // Each of the pool's two connections gives up in its turn.
            let began = Instant::now();
            let mut good_in_a_row = 0;
            while good_in_a_row < 2 {
                good_in_a_row = match users.orders(id, via, "").await.status() {
                    s if s == 200 => good_in_a_row + 1,
                    _ => 0,
                };
                assert!(
                    began.elapsed() < service_kit::h3_client::IDLE + Duration::from_secs(6),
                    "{via} did not come back"
                );
            }
        }
        let res = users.orders(id, via, "").await;
        let status = res.status();
        assert_eq!(
            status,
            200,
            "{via} after order-service came back: {}",
            res.text().await.unwrap()
        );
        let s = users.snapshot(via);
        assert!(s.connections_opened >= 2, "{via} did not reconnect: {s:?}");
    }
    users.stop().await;
    orders.stop().await;
}

/// A listener that accepts connections and then does nothing with them.
async fn black_hole() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    addr
}

/// A listener that reads what a client sends first, then hangs up.
async fn hang_up_after_reading() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                let _ = s.read(&mut buf).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                drop(s);
            });
        }
    });
    addr
}

#[tokio::test]
async fn an_order_service_that_never_answers_is_a_504_within_the_timeout() {
    let hole = black_hole().await;
    let mut settings = user_service::Settings {
        upstream_timeout_ms: 500,
        ..Default::default()
    };
    point_at(&mut settings, hole, hole, hole, hole);
    let users = spawn_users_on(settings, None).await;
    let id = dataset::fixed_user_id(1);
    for via in Transport::ALL {
        let started = Instant::now();
        let res = users.orders(id, via, "").await;
        let took = started.elapsed();
        assert_eq!(res.status(), 504, "{via}");
        let micros: u64 = res.headers()["x-upstream-micros"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(micros >= 500_000, "{via}: {micros} µs");
        assert!(took < Duration::from_secs(3), "{via} took {took:?}");
        let e = problem_of(res).await;
        assert_eq!(e.error, "upstream_timeout");
    }
    // gRPC callers get DEADLINE_EXCEEDED.
    let mut client = users.grpc_client().await;
    let status = client
        .get_user_with_orders(proto::user::v1::GetUserWithOrdersRequest {
            id: id.to_string(),
            via: "grpc-bidi".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    users.stop().await;
}

#[tokio::test]
async fn a_connection_that_breaks_with_lookups_pending_fails_them_promptly_instead_of_hanging() {
    let rude = hang_up_after_reading().await;
    let mut settings = user_service::Settings {
        // Far longer than the test allows: a hang would be caught.
        upstream_timeout_ms: 30_000,
        pool_size: 1,
        ..Default::default()
    };
    point_at(&mut settings, rude, rude, rude, rude);
    let users = spawn_users_on(settings, None).await;
    let id = dataset::fixed_user_id(100);
    // A TCP server that hangs up: QUIC's transports find no UDP listener
    // there, only silence, which the never-answers test covers.
    for via in Transport::ALL.into_iter().filter(|t| !t.is_quic()) {
        let started = Instant::now();
        let calls = (0..4).map(|_| users.orders(id, via, ""));
        for res in futures::future::join_all(calls).await {
            assert_eq!(res.status(), 503, "{via}");
            let e = problem_of(res).await;
            assert_eq!(e.error, "upstream_unavailable", "{via}: {e:?}");
            if matches!(via, Transport::GrpcBidi | Transport::TcpProto) {
                assert!(
                    ["stream", "connection", "closed", "reset", "broke"]
                        .iter()
                        .any(|w| e.detail.contains(w)),
                    "{via}: the message does not say the connection broke: {}",
                    e.detail
                );
            }
        }
        let took = started.elapsed();
        assert!(took < Duration::from_secs(10), "{via} took {took:?}");
    }
    users.stop().await;
}

#[tokio::test]
async fn the_upstream_timeout_travels_as_the_grpc_and_the_rest_deadline() {
    // A fake gRPC server that records the request headers and never answers.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
        let record = record.clone();
        async move {
            // gRPC's deadline, or REST's (`x-request-timeout-ms`).
            let t = headers
                .get("grpc-timeout")
                .or_else(|| headers.get("x-request-timeout-ms"))
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default();
            record.lock().unwrap().push(t);
            std::future::pending::<()>().await;
        }
    });
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await });

    let mut settings = user_service::Settings {
        upstream_timeout_ms: 700,
        ..Default::default()
    };
    point_at(&mut settings, addr, addr, addr, addr);
    let users = spawn_users_on(settings, None).await;
    let id = dataset::fixed_user_id(1);
    let deadlined = [
        Transport::Grpc,
        Transport::GrpcTuned,
        Transport::GrpcStream,
        Transport::GrpcStreamTuned,
        Transport::GrpcV1,
    ];
    for via in deadlined {
        let res = users.orders(id, via, "").await;
        let status = res.status();
        assert_eq!(status, 504, "{via}: {}", res.text().await.unwrap());
    }
    let grpc_seen = seen.lock().unwrap().clone();
    assert_eq!(grpc_seen.len(), deadlined.len(), "{grpc_seen:?}");
    for t in grpc_seen {
        // 700 ms, in the most precise unit that fits gRPC's 8 digits.
        assert_eq!(t, "700000u", "grpc-timeout header");
    }
    // The REST transports on TCP send theirs in milliseconds.
    seen.lock().unwrap().clear();
    let rest = [
        Transport::H1Json,
        Transport::H1JsonClose,
        Transport::H2cJson,
        Transport::H1Proto,
        Transport::H2cProto,
        Transport::H2cProtoTuned,
    ];
    for via in rest {
        let res = users.orders(id, via, "").await;
        assert_eq!(res.status(), 504, "{via}");
    }
    let rest_seen = seen.lock().unwrap().clone();
    assert_eq!(
        rest_seen,
        vec!["700".to_owned(); rest.len()],
        "x-request-timeout-ms"
    );
    users.stop().await;
}

/// A raw-TCP order-service stand-in: on its first connection it reads one
/// lookup, says the connection is going away (request id 0) and refuses
/// that lookup as not processed, as order-service does at its signal, then
/// waits for the client to close; on every later connection it answers
/// each lookup with `ORDERS` orders. Returns its address, the connections
/// it accepted and whether the first was closed by the client.
async fn going_away_once() -> (
    SocketAddr,
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<std::sync::atomic::AtomicBool>,
    Arc<Mutex<Vec<u32>>>,
) {
    use order_service::tcp::{encode_frame, read_frame, refused_at_shutdown};
    use std::sync::atomic::Ordering;
    use tokio::io::AsyncWriteExt as _;
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (count, first_closed) = (accepted.clone(), closed.clone());
    // Each lookup's deadline, as sent.
    let deadlines: Arc<Mutex<Vec<u32>>> = Arc::default();
    let seen = deadlines.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let n = count.fetch_add(1, Ordering::SeqCst);
            let first_closed = first_closed.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                while let Ok(Some(frame)) = read_frame(&mut s, 1 << 20).await {
                    let req =
                        <proto::order::v2::LookupOrdersRequest as prost::Message>::decode(frame)
                            .unwrap();
                    seen.lock().unwrap().push(req.deadline_ms);
                    let answer = if n == 0 {
                        let bye = proto::order::v2::LookupOrdersResponse {
                            error: Some(proto::order::v2::LookupError {
                                code: tonic::Code::Unavailable as i32,
                                message: order_service::tcp::GOING_AWAY.into(),
                            }),
                            ..Default::default()
                        };
                        s.write_all(&encode_frame(&bye)).await.unwrap();
                        refused_at_shutdown(req.request_id)
                    } else {
                        proto::order::v2::LookupOrdersResponse {
                            request_id: req.request_id,
                            orders: dataset::all_orders()
                                .take(ORDERS)
                                .map(|o| model::v2::order_to_pb(&o, model::FieldSet::ALL))
                                .collect(),
                            ..Default::default()
                        }
                    };
                    s.write_all(&encode_frame(&answer)).await.unwrap();
                }
                if n == 0 {
                    first_closed.store(true, Ordering::SeqCst);
                }
            });
        }
    });
    (addr, accepted, closed, deadlines)
}

const ORDERS: usize = 3;

#[tokio::test]
async fn a_raw_tcp_lookup_refused_by_a_connection_going_away_is_sent_again_on_a_new_one() {
    use std::sync::atomic::Ordering;
    let (addr, accepted, closed, deadlines) = going_away_once().await;
    let mut settings = user_service::Settings {
        pool_size: 1,
        ..Default::default()
    };
    point_at(&mut settings, addr, addr, addr, addr);
    let users = spawn_users_on(settings, None).await;
    let id = dataset::fixed_user_id(1);
    let res = users.orders(id, Transport::TcpProto, "").await;
    let status = res.status();
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["orders"].as_array().map(Vec::len),
        Some(ORDERS),
        "{body}"
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "one retry, on a new connection"
    );
    // The next call uses the new connection.
    assert_eq!(
        users.orders(id, Transport::TcpProto, "").await.status(),
        200
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    // Each lookup carried the upstream timeout as its deadline.
    let timeout = u32::try_from(user_service::Settings::default().upstream_timeout_ms).unwrap();
    assert_eq!(*deadlines.lock().unwrap(), vec![timeout; 3], "deadline_ms");
    // Once nothing waits on it, the client closes the connection that went away.
    let started = Instant::now();
    while !closed.load(Ordering::SeqCst) {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the old connection is still open"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    users.stop().await;
}
