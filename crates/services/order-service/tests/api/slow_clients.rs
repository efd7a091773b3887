//! Slow, silent and greedy clients against every listener: each is cut off
//! by its configured bound, costs little memory while it waits, and cannot
//! hold the process past its shutdown grace. Bounds here are functional (a
//! cutoff set at a fraction of a second must have cut within seconds), not
//! performance figures.

use std::time::{Duration, Instant};

use prost::Message as _;
use proto::order::v2 as pb2;
use testkit::flood::closed_within;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

use crate::helpers::{self, Backend, spawn_with, start_binary};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_listener_cuts_a_silent_client_at_the_header_read_timeout() {
    let app = spawn_with(Backend::Memory, |s| s.header_read_timeout_ms = 300).await;
    for (name, addr) in [("REST", app.rest), ("gRPC", app.grpc)] {
        let mut c = TcpStream::connect(addr).await.unwrap();
        let started = Instant::now();
        closed_within(&mut c, Duration::from_secs(5)).await;
        assert!(started.elapsed() < Duration::from_secs(5), "{name}");
    }
    // Raw TCP: a frame begun (its length and 3 bytes of 100) and never
    // finished is refused with DEADLINE_EXCEEDED, then closed.
    let mut c = TcpStream::connect(app.tcp).await.unwrap();
    c.write_all(&[0, 0, 0, 100, 1, 2, 3]).await.unwrap();
    let got = closed_within(&mut c, Duration::from_secs(5)).await;
    assert!(got.len() > 4, "an error frame: {got:?}");
    let answer = pb2::LookupOrdersResponse::decode(&got[4..]).unwrap();
    let e = answer.error.unwrap();
    assert_eq!(e.code, tonic::Code::DeadlineExceeded as i32, "{e:?}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_raw_tcp_connection_is_closed_after_the_idle_timeout() {
    let app = spawn_with(Backend::Memory, |s| s.idle_timeout_ms = 400).await;
    let mut c = TcpStream::connect(app.tcp).await.unwrap();
    // One lookup answered, then nothing.
    let one = helpers::tcp_lookup(&mut c, 9, &dataset::fixed_user_id(1).to_string(), 1).await;
    assert_eq!(one.request_id, 9);
    let got = closed_within(&mut c, Duration::from_secs(5)).await;
    assert!(got.is_empty(), "closed without a frame: {got:?}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_tcp_frames_that_announce_a_mebibyte_and_send_nothing_cost_little_memory() {
    // It reads this process's memory.
    if !helpers::alone(
        "slow_clients::raw_tcp_frames_that_announce_a_mebibyte_and_send_nothing_cost_little_memory",
    )
    .await
    {
        return;
    }
    let app = spawn_with(Backend::Memory, |s| {
        s.header_read_timeout_ms = 60_000;
        s.max_request_bytes = 1 << 20;
    })
    .await;
    let before = testkit::flood::rss_kib();
    let mut held = Vec::new();
    for _ in 0..300 {
        let mut c = TcpStream::connect(app.tcp).await.unwrap();
        // 1 MiB announced, one byte of it sent.
        c.write_all(&[0, 0x10, 0, 0, 7]).await.unwrap();
        held.push(c);
    }
    // Let the server read every length.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let grown_mib = testkit::flood::rss_kib().saturating_sub(before) / 1024;
    // Zero-filling each announced length would take 300 MiB.
    assert!(grown_mib < 64, "RSS grew by {grown_mib} MiB");
    // A well-behaved client is still answered meanwhile.
    let mut c = TcpStream::connect(app.tcp).await.unwrap();
    let ten = helpers::tcp_lookup(&mut c, 1, &dataset::fixed_user_id(10).to_string(), 10).await;
    assert_eq!(ten.orders.len(), 10);
    drop(held);
    app.stop().await;
}

/// SIGTERM with bad clients connected on every listener: a trickling REST
/// head, an idle keep-alive connection, a silent gRPC connection, a raw-TCP
/// frame begun; the header-read timeout is a minute, so none of them is cut
/// before the signal. The process still exits within its grace plus 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_process_in_time_whatever_its_clients_do() {
    let proc = start_binary(&[
        ("ORDER_SHUTDOWN_GRACE_MS", "500"),
        ("ORDER_HEADER_READ_TIMEOUT_MS", "60000"),
        ("ORDER_IDLE_TIMEOUT_MS", "60000"),
    ])
    .await;
    let _bad = testkit::flood::BadClients::connect(&proc.addr("rest"), &proc.addr("grpc")).await;
    // And a raw-TCP frame begun, never finished.
    let mut frame = TcpStream::connect(proc.addr("tcp")).await.unwrap();
    frame.write_all(&[0, 0, 1, 0, 1]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let status = proc.sigterm().await;
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "exited after {:?} (grace 0.5 s + 1 s)",
        started.elapsed()
    );
}

/// Past `ORDER_MAX_CONNECTIONS`, a new REST or gRPC connection is closed at
/// once and counted; one freed slot serves the next caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_a_connection_is_closed_at_once_and_counted() {
    let app = spawn_with(Backend::Memory, |s| {
        s.max_connections = 3;
        s.header_read_timeout_ms = 60_000;
    })
    .await;
    for (name, addr) in [("rest", app.rest), ("grpc", app.grpc)] {
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(TcpStream::connect(addr).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut over = TcpStream::connect(addr).await.unwrap();
        let got = closed_within(&mut over, Duration::from_secs(2)).await;
        assert!(got.is_empty(), "{name}: {got:?}");
        drop(held);
    }
    // Slots free again: /metrics is answered, and counts one refusal each.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let text = app.metrics_text().await;
    for name in ["rest", "grpc"] {
        let line = format!("order_connections_refused_total{{listener=\"{name}\"}} 1");
        assert!(text.contains(&line), "{line} in\n{text}");
    }
    app.stop().await;
}
