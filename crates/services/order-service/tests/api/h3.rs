//! HTTP/3: the QUIC listener answers REST, Connect and gRPC with the same
//! bytes as the TCP listeners (the data set is the oracle for gRPC's
//! orders), and holds to the same bounds: its cap refuses a connection past
//! it, an idle connection is closed, a request in service at the signal is
//! answered.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use model::{FieldSet, Order};
use prost::Message as _;
use proto::order::v2 as pb2;

use crate::helpers::{Backend, TestApp, expected_orders, list_request, spawn, spawn_with};

/// A client endpoint that takes the service's self-signed certificate.
fn endpoint(to: SocketAddr) -> quinn::Endpoint {
    let tls = tls::ClientTls::unverified().unwrap();
    service_kit::h3_client::endpoint(&tls, to).unwrap()
}

/// tonic's `order.v2` client over tonic-h3's channel on `ep`.
fn grpc_h3(
    ep: &quinn::Endpoint,
    h3: SocketAddr,
) -> pb2::order_service_client::OrderServiceClient<
    tonic_h3::H3Channel<service_kit::h3_client::Connector>,
> {
    let channel = tonic_h3::H3Channel::new(
        service_kit::h3_client::connector(ep, h3, "localhost"),
        format!("https://{h3}").parse().unwrap(),
        None,
    );
    pb2::order_service_client::OrderServiceClient::new(channel).max_decoding_message_size(64 << 20)
}

/// One request over HTTP/3; the status, content type and body.
async fn h3_send(
    conn: &mut service_kit::h3_client::Connection<Full<Bytes>>,
    request: http::Request<Full<Bytes>>,
) -> (u16, String, Bytes) {
    let answer = tower::ServiceExt::oneshot(&mut *conn, request)
        .await
        .expect("an HTTP/3 answer");
    let status = answer.status().as_u16();
    let ct = answer
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = answer.into_body().collect().await.unwrap().to_bytes();
    (status, ct, body)
}

fn h3_get(h3: SocketAddr, path: &str, accept: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(format!("https://{h3}{path}"))
        .header("accept", accept)
        .body(Full::default())
        .unwrap()
}

async fn h1_bytes(app: &TestApp, path: &str, accept: &str) -> Bytes {
    let res = app
        .h1()
        .get(app.url(path))
        .header("accept", accept)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    res.bytes().await.unwrap()
}

fn stream_request(user: &str, n: i32) -> pb2::StreamOrdersRequest {
    let l = list_request(user, n, FieldSet::ALL);
    pb2::StreamOrdersRequest {
        user_id: l.user_id,
        page_size: l.page_size,
        page_token: l.page_token,
        read_mask: l.read_mask,
    }
}

fn orders_of(page: pb2::ListOrdersResponse) -> Vec<Order> {
    page.orders
        .into_iter()
        .map(|o| Order::try_from(o).unwrap())
        .collect()
}

async fn same_answers_over_h3(backend: Backend) {
    let app = spawn(backend).await;
    let h3 = app.h3.expect("an HTTP/3 listener");
    let ep = endpoint(h3);
    let mut conn = service_kit::h3_client::connection(&ep, h3, "localhost");
    let want = expected_orders(100);
    let user = dataset::fixed_user_id(100).to_string();

    // REST, JSON and protobuf: the bytes HTTP/1.1 gets.
    let path = format!("/v2/orders?user_id={user}&limit=100");
    for accept in ["application/json", "application/x-protobuf"] {
        let (status, ct, body) = h3_send(&mut conn, h3_get(h3, &path, accept)).await;
        assert_eq!(status, 200, "{accept}");
        assert_eq!(ct, accept);
        assert_eq!(body, h1_bytes(&app, &path, accept).await, "{accept}");
    }
    let (_, _, body) = h3_send(&mut conn, h3_get(h3, &path, "application/x-protobuf")).await;
    assert_eq!(
        orders_of(pb2::ListOrdersResponse::decode(body).unwrap()),
        want
    );

    // Connect unary, binary: the same path as gRPC's method, told apart by
    // its content type.
    let connect = http::Request::post(format!("https://{h3}/order.v2.OrderService/ListOrders"))
        .header("content-type", "application/proto")
        .body(Full::new(Bytes::from(
            list_request(&user, 100, FieldSet::ALL).encode_to_vec(),
        )))
        .unwrap();
    let (status, ct, body) = h3_send(&mut conn, connect).await;
    assert_eq!((status, ct.as_str()), (200, "application/proto"));
    assert_eq!(
        orders_of(pb2::ListOrdersResponse::decode(body).unwrap()),
        want
    );

    // gRPC: unary and server streaming, tonic's client over tonic-h3.
    let mut grpc = grpc_h3(&ep, h3);
    let unary = grpc
        .list_orders(list_request(&user, 100, FieldSet::ALL))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(orders_of(unary), want);
    let mut stream = grpc
        .stream_orders(stream_request(&user, 100))
        .await
        .unwrap()
        .into_inner();
    let mut streamed = Vec::new();
    while let Some(o) = stream.message().await.unwrap() {
        streamed.push(Order::try_from(o.order.unwrap()).unwrap());
    }
    assert_eq!(streamed, want);
    // A gRPC error is a gRPC status, not an HTTP one.
    let bad = grpc
        .list_orders(list_request("not-a-uuid", 10, FieldSet::ALL))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");
    app.stop().await;
}

#[tokio::test]
async fn http3_answers_rest_connect_and_grpc_as_the_tcp_listeners_do_in_memory() {
    same_answers_over_h3(Backend::Memory).await;
}

#[tokio::test]
async fn http3_answers_rest_connect_and_grpc_as_the_tcp_listeners_do_on_postgres() {
    same_answers_over_h3(Backend::Postgres).await;
}

/// Opens a QUIC connection and asks for a page; the error if it fails.
async fn one_get(ep: &quinn::Endpoint, h3: SocketAddr, user: &str) -> Result<u16, String> {
    gets_on_one_connection(ep, h3, user, 1).await.remove(0).0
}

#[tokio::test]
async fn the_cap_refuses_a_quic_connection_past_it_and_an_idle_one_is_closed() {
    let app = spawn_with(Backend::Memory, |s| {
        s.max_connections = 2;
        s.idle_timeout_ms = 600;
    })
    .await;
    let h3 = app.h3.unwrap();
    let user = dataset::fixed_user_id(10).to_string();
    // Two connections held open (each endpoint is a connection of its own).
    let held: Vec<quinn::Connection> = {
        let mut v = Vec::new();
        for _ in 0..2 {
            let ep = endpoint(h3);
            let c = ep.connect(h3, "localhost").unwrap().await.unwrap();
            v.push(c);
        }
        v
    };
    let third = one_get(&endpoint(h3), h3, &user).await;
    assert!(third.is_err(), "a third connection was served: {third:?}");
    // What the refused client sees: QUIC's CONNECTION_REFUSED, at once,
    // before any handshake (after its Retry: the cap is checked on an
    // address shown to be real).
    let refused = tokio::time::timeout(
        Duration::from_secs(5),
        endpoint(h3).connect(h3, "localhost").unwrap(),
    )
    .await
    .expect("the refusal comes at once, not at a timeout");
    match refused {
        Err(quinn::ConnectionError::ConnectionClosed(close)) => assert_eq!(
            close.error_code,
            quinn::TransportErrorCode::CONNECTION_REFUSED,
            "{close:?}"
        ),
        other => panic!("a refusal, not {other:?}"),
    }
    // Counted where the TCP listeners' refusals are.
    assert!(
        app.metrics_text()
            .await
            .contains("order_connections_refused_total{listener=\"h3\"} 2"),
        "the refusal on /metrics"
    );
    // With no request in service, the two close at the idle timeout (the
    // client's keep-alive pings do not keep them), and a slot is free again.
    for c in &held {
        let why = tokio::time::timeout(Duration::from_secs(5), c.closed())
            .await
            .expect("an idle connection is closed by the service");
        assert!(
            matches!(
                why,
                quinn::ConnectionError::ApplicationClosed(_) | quinn::ConnectionError::TimedOut
            ),
            "{why:?}"
        );
    }
    assert_eq!(one_get(&endpoint(h3), h3, &user).await, Ok(200));
    app.stop().await;
}

#[tokio::test]
async fn a_call_in_service_at_the_signal_is_answered_and_a_new_connection_is_refused() {
    let app = spawn(Backend::Memory).await;
    let h3 = app.h3.unwrap();
    let ep = endpoint(h3);
    let mut grpc = grpc_h3(&ep, h3);
    let user = dataset::fixed_user_id(10_000).to_string();
    // A 10,000-order stream begun, its first message read; then the signal.
    let mut stream = grpc
        .stream_orders(stream_request(&user, 10_000))
        .await
        .unwrap()
        .into_inner();
    let mut n = usize::from(stream.message().await.unwrap().is_some());
    let stopping = tokio::spawn(app.serving.stop());
    tokio::time::sleep(Duration::from_millis(100)).await;
    while stream.message().await.unwrap().is_some() {
        n += 1;
    }
    assert_eq!(
        n, 10_000,
        "every order of the stream begun before the signal"
    );
    let late = one_get(&endpoint(h3), h3, &user).await;
    let late = late.expect_err("a connection after the signal was served");
    assert!(
        late.contains("refused"),
        "refused, not left to time out: {late}"
    );
    stopping.await.unwrap();
}

/// A raw HTTP/3 client on a connection of its own: what a slow client
/// does is up to the test.
async fn raw_client(h3: SocketAddr) -> h3::client::SendRequest<h3_quinn::OpenStreams, Bytes> {
    let quic = endpoint(h3)
        .connect(h3, "localhost")
        .unwrap()
        .await
        .unwrap();
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(quic))
        .await
        .unwrap();
    tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
    send
}

#[tokio::test]
async fn a_body_that_stops_coming_is_answered_408_at_the_body_read_timeout() {
    let app = spawn_with(Backend::Memory, |s| s.body_read_timeout_ms = 500).await;
    let h3 = app.h3.unwrap();
    let mut send = raw_client(h3).await;
    let request = http::Request::post(format!("https://{h3}/v2/orders"))
        .header("content-type", "application/json")
        .header("content-length", "1000")
        .body(())
        .unwrap();
    let mut stream = send.send_request(request).await.unwrap();
    stream
        .send_data(Bytes::from_static(b"{\"user_id\":"))
        .await
        .unwrap();
    let begun = std::time::Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(5), stream.recv_response())
        .await
        .expect("answered within 5 s")
        .unwrap();
    assert_eq!(answer.status(), 408);
    assert!(
        begun.elapsed() >= Duration::from_millis(400),
        "{:?}",
        begun.elapsed()
    );
    app.stop().await;
}

#[tokio::test]
async fn an_answer_its_client_does_not_read_is_reset_at_the_write_timeout() {
    let app = spawn_with(Backend::Memory, |s| s.write_timeout_ms = 500).await;
    let h3 = app.h3.unwrap();
    let mut send = raw_client(h3).await;
    let user = dataset::fixed_user_id(10_000).to_string();
    let request = http::Request::get(format!("https://{h3}/v2/orders?user_id={user}&limit=10000"))
        .body(())
        .unwrap();
    let mut stream = send.send_request(request).await.unwrap();
    stream.finish().await.unwrap();
    let answer = stream.recv_response().await.unwrap();
    assert_eq!(answer.status(), 200);
    // Several MB of JSON, more than QUIC lets the server send unread: the
    // answer stalls, and past the write timeout it is reset.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut read = 0usize;
    let ended = loop {
        match stream.recv_data().await {
            Ok(Some(d)) => read += bytes::Buf::remaining(&d),
            Ok(None) => break Ok(()),
            Err(e) => break Err(e.to_string()),
        }
    };
    assert!(ended.is_err(), "the whole answer came ({read} bytes)");
    // The connection serves on.
    let request = http::Request::get(format!("https://{h3}/healthz"))
        .body(())
        .unwrap();
    let mut again = send.send_request(request).await.unwrap();
    again.finish().await.unwrap();
    assert_eq!(again.recv_response().await.unwrap().status(), 200);
    app.stop().await;
}

/// 300 QUIC connections against the real binary, each with 20 streams that
/// announce a 1 MiB body and send none, as the HTTP/2 flood does: past the
/// service's limit a stream is refused at once, a stalled request gives
/// back its slot of the limit after a second of silence, and the process
/// grows by under 64 MiB while good clients are answered over HTTP/3
/// during the flood. Bounded in count
/// (6,000 streams) and time (15 s to connect, 10 s to be answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quic_flood_of_stalled_bodies_costs_little_and_blocks_no_one() {
    let proc = crate::helpers::start_binary(&[]).await;
    let h3: SocketAddr = proc.addr("h3").parse().unwrap();
    let before = proc.rss_kib();
    let user = dataset::fixed_user_id(10).to_string();
    let good = endpoint(h3);
    assert_eq!(one_get(&good, h3, &user).await, Ok(200));
    const CONNECTIONS: usize = 300;
    const STREAMS: usize = 20;
    let mut held = Vec::new();
    let mut flooders = tokio::task::JoinSet::new();
    // A few client sockets, each carrying many connections.
    let sockets: Vec<quinn::Endpoint> = (0..4).map(|_| endpoint(h3)).collect();
    for i in 0..CONNECTIONS {
        let ep = sockets[i % sockets.len()].clone();
        flooders.spawn(async move {
            let quic = ep.connect(h3, "localhost").ok()?.await.ok()?;
            let (mut driver, mut send) = h3::client::new(h3_quinn::Connection::new(quic.clone()))
                .await
                .ok()?;
            tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
            let mut streams = Vec::new();
            for _ in 0..STREAMS {
                let request = http::Request::post(format!("https://{h3}/v2/orders"))
                    .header("content-type", "application/json")
                    .header("content-length", (1u32 << 20).to_string())
                    .body(())
                    .ok()?;
                let Ok(s) = send.send_request(request).await else {
                    break;
                };
                streams.push(s);
            }
            Some((quic, send, streams))
        });
    }
    let mut peak = before;
    let flooded = tokio::time::timeout(Duration::from_secs(15), async {
        while let Some(done) = flooders.join_next().await {
            if let Ok(Some(h)) = done {
                held.push(h);
            }
            peak = peak.max(proc.rss_kib());
        }
    })
    .await;
    assert!(flooded.is_ok(), "the flood did not get through within 15 s");
    // During the flood (the stalled bodies still held open by the client):
    // each stalled request gives its slot of the service's limit back
    // after a second of silence, as on the TCP listeners, so within
    // seconds, not the body-read timeout, twenty good answers in a row.
    let t = std::time::Instant::now();
    let mut in_a_row = 0;
    while in_a_row < 20 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no 20 good answers in a row within 10 s of the flood"
        );
        if one_get(&good, h3, &user).await == Ok(200) {
            in_a_row += 1;
        } else {
            in_a_row = 0;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        peak = peak.max(proc.rss_kib());
    }
    eprintln!("20 good answers in a row {:?} after the flood", t.elapsed());
    let opened: usize = held.iter().map(|h| h.2.len()).sum();
    assert!(
        opened > service_kit::serve::stream_budget::OPEN_STREAMS,
        "only {opened} streams opened"
    );
    // Past the service's limit of work (512) a stream is answered 503 at
    // once and ends, so the open-stream budget (4,096, HTTP/2's and
    // HTTP/3's together) is not reached by this flood: the limit ends the
    // surplus first.
    let closed = held.iter().filter(|h| h.0.close_reason().is_some()).count();
    let grown_mib = peak.saturating_sub(before) / 1024;
    eprintln!(
        "{} connections, {opened} streams, {closed} connections closed by the service; RSS {} MiB before, grew {grown_mib} MiB at most",
        held.len(),
        before / 1024
    );

    assert!(grown_mib < 64, "the process grew by {grown_mib} MiB");
    drop(held);
    let exit = proc.sigterm().await;
    assert!(exit.success(), "{exit}");
}

/// Many small GETs on one connection through h3-util's client, each
/// answered: the answer goes out before the client has finished its
/// request stream, and the service reads that end rather than tell the
/// client to stop (which h3-util's client takes as the call failing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_gets_in_a_row_are_each_answered() {
    let app = spawn(Backend::Memory).await;
    let h3 = app.h3.unwrap();
    let ep = endpoint(h3);
    let mut conn = service_kit::h3_client::connection(&ep, h3, "localhost");
    let user = dataset::fixed_user_id(1).to_string();
    let path = format!("/v2/orders?user_id={user}&limit=1");
    for i in 0..500 {
        let answer =
            tower::ServiceExt::oneshot(&mut conn, h3_get(h3, &path, "application/x-protobuf"))
                .await;
        let answer = answer.unwrap_or_else(|e| panic!("call {i}: {e}"));
        assert_eq!(answer.status(), 200, "call {i}");
        answer
            .into_body()
            .collect()
            .await
            .unwrap_or_else(|e| panic!("call {i}: {e}"));
    }
    app.stop().await;
}

/// `n` GETs of 10 orders, one after another on one new QUIC connection:
/// each one's status (or error) and time.
async fn gets_on_one_connection(
    ep: &quinn::Endpoint,
    h3: SocketAddr,
    user: &str,
    n: usize,
) -> Vec<(Result<u16, String>, Duration)> {
    let mut conn = service_kit::h3_client::connection::<Full<Bytes>>(ep, h3, "localhost");
    let path = format!("/v2/orders?user_id={user}&limit=10");
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = std::time::Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            tower::ServiceExt::oneshot(&mut conn, h3_get(h3, &path, "application/json")),
        )
        .await;
        let status = match answer {
            Err(_) => Err("no answer within 5 s".to_owned()),
            Ok(Err(e)) => Err(e.to_string()),
            Ok(Ok(a)) => {
                let status = a.status().as_u16();
                match a.into_body().collect().await {
                    Ok(_) => Ok(status),
                    Err(e) => Err(e.to_string()),
                }
            }
        };
        out.push((status, t.elapsed()));
    }
    out
}

/// 40 QUIC connections × 100 streams, each announcing a 1 MiB body,
/// sending 64 KiB of it and stopping, the streams left open, against the
/// real binary: 30 good GETs on a new connection right after are all
/// answered 200 (15 of 30 got 503 when the waiting bodies held their
/// slots), the process never grows by 64 MiB, neither at the flood's peak
/// (the calls waiting with their slots are held to a budget: 66-129 MiB
/// before it and before bodies were coalesced into frames of their size)
/// nor once it settles (the calls waiting without a slot are held to
/// theirs, the rest shed), and at the body-read timeout the waiting calls'
/// memory is given back while every connection and stream stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_streams_that_send_part_of_their_bodies_hold_no_slot_and_little_memory() {
    let proc = crate::helpers::start_binary(&[("ORDER_BODY_READ_TIMEOUT_MS", "5000")]).await;
    let h3: SocketAddr = proc.addr("h3").parse().unwrap();
    let user = dataset::fixed_user_id(10).to_string();
    let good = endpoint(h3);
    let quiet = gets_on_one_connection(&good, h3, &user, 30).await;
    assert!(quiet.iter().all(|(s, _)| *s == Ok(200)), "{quiet:?}");
    let before = proc.rss_kib();
    proc.reset_peak_rss();
    let sockets: Vec<quinn::Endpoint> = (0..4).map(|_| endpoint(h3)).collect();
    let (held, tally) = testkit::flood::quic::partial_bodies(
        &sockets,
        h3,
        (40, 100),
        "/v2/orders",
        (1 << 20, 64 << 10),
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(tally.connections, 40, "{tally:?}");
    assert!(tally.bytes > 100 << 20, "the flood sent little: {tally:?}");
    let during = gets_on_one_connection(&good, h3, &user, 30).await;
    let bad: Vec<_> = during.iter().filter(|(s, _)| *s != Ok(200)).collect();
    assert!(
        bad.is_empty(),
        "{} of 30 good GETs failed: {bad:?}",
        bad.len()
    );
    // What the service holds once the flood has settled (a second of
    // silence gives every slot back, the calls past the budget shed, and
    // jemalloc returns freed pages within a second): the calls waiting
    // within their budget. The peak is the most it held while the flood
    // came in.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held_mib = proc.rss_kib().saturating_sub(before) / 1024;
    let peak_mib = proc.peak_rss_kib().saturating_sub(before) / 1024;
    eprintln!(
        "{tally:?}: RSS {} MiB before, {peak_mib} MiB more at the flood's peak, {held_mib} MiB more once it settled",
        before / 1024,
    );
    assert!(
        peak_mib < testkit::flood::MAX_GROWTH_MIB,
        "the flood took the process {peak_mib} MiB over its start"
    );
    assert!(
        held_mib < testkit::flood::MAX_GROWTH_MIB,
        "the flood holds {held_mib} MiB"
    );
    // Past the body-read timeout (5 s here) the waiting calls are answered
    // 408 and what they held is freed, though the client keeps every
    // connection and stream open.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after_mib = proc.rss_kib().saturating_sub(before) / 1024;
    let open = held
        .iter()
        .filter(|c| c.quic.close_reason().is_none())
        .count();
    eprintln!("{open} connections open, RSS {after_mib} MiB over the start");
    assert_eq!(open, 40, "the flood's connections stay open");
    assert!(
        after_mib <= 24,
        "{after_mib} MiB still held past the body-read timeout"
    );
    drop(held);
    let exit = proc.sigterm().await;
    assert!(exit.success(), "{exit}");
}
