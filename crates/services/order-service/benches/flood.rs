//! What a flood of bad clients does to good ones: the median time of a good
//! request (`GET /v2/orders`, 10 orders, over one HTTP/1.1 keep-alive
//! connection, one request after another) with the service quiet, and again
//! while each shape of flood the flood tests use is held open against it.
//! The hardening bound is a median within ×3 of the quiet one; the flood
//! tests check that good requests are answered and memory stays bounded,
//! and this measures the latency, which a timed test on a shared machine
//! cannot.
//!
//! The service is the real binary (in memory, its defaults), a process of
//! its own; the floods and the good client run in this process on one
//! runtime (2 worker threads). Each shape is measured between two quiet
//! blocks, and its ratio is to the quiet block before it, so a machine that
//! drifts moves both.
//!
//! `cargo bench -p order-service --bench flood`; `FLOOD_CONNS` (default 500)
//! and `FLOOD_REQUESTS` (good requests per block, default 400) shape it, and
//! `FLOOD_OUT=FILE` writes the table as JSON too. Under `cargo test` it runs
//! once with 20 connections and 20 requests, which proves it runs.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use testkit::flood::{self, Kind};

const USER: &str = "00000000-0000-0000-0000-000000000010";

/// One shape of flood, on one listener.
struct Shape {
    name: &'static str,
    listener: &'static str,
    kind: Option<Kind>,
}

const SHAPES: &[Shape] = &[
    Shape {
        name: "idle connections",
        listener: "rest",
        kind: Some(Kind::Idle),
    },
    Shape {
        name: "HTTP/1.1 heads trickled",
        listener: "rest",
        kind: Some(Kind::Trickle {
            first: b"GET /v2/orders HTTP/1.1\r\nx-trickle: ",
        }),
    },
    Shape {
        name: "HTTP/2 heads trickled after the preface",
        listener: "rest",
        kind: Some(Kind::H2HeadTrickle),
    },
    Shape {
        name: "HTTP/2 pinging with no call",
        listener: "grpc",
        kind: Some(Kind::H2Pinging),
    },
    Shape {
        name: "raw-TCP frames announced large, 1 byte sent",
        listener: "tcp",
        kind: Some(Kind::LargeFrame { bytes: 1 << 20 }),
    },
    Shape {
        name: "raw-TCP frames sent almost whole (1 MiB)",
        listener: "tcp",
        kind: Some(Kind::AlmostWholeFrame { bytes: 1 << 20 }),
    },
    Shape {
        name: "h2c streams declaring bodies, sending none (×100 each)",
        listener: "rest",
        kind: None,
    },
];

fn env_or(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median of `n` good requests, each checked (a wrong answer is not a
/// figure), in microseconds.
async fn good_median(client: &reqwest::Client, url: &str, n: usize) -> f64 {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let res = client.get(url).send().await.expect("an answer");
        assert_eq!(res.status(), 200, "a good request is answered");
        let body = res.bytes().await.expect("a body");
        assert!(body.len() > 100, "ten orders");
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    times[n / 2]
}

/// Keeps a trickling flood trickling until dropped.
fn keep_trickling(
    mut conns: Vec<tokio::net::TcpStream>,
    kind: Kind,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            flood::trickle(&mut conns, kind, 1, Duration::from_millis(200)).await;
        }
    })
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let conns = if bench {
        env_or("FLOOD_CONNS", 500)
    } else {
        20
    };
    let n = if bench {
        env_or("FLOOD_REQUESTS", 400)
    } else {
        20
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let proc = testkit::process::start_binary(
            std::path::Path::new(env!("CARGO_BIN_EXE_order-service")),
            &[
                "ORDER_REST_ADDR",
                "ORDER_GRPC_ADDR",
                "ORDER_TCP_ADDR",
                "ORDER_H3_ADDR",
            ]
            .map(|k| (k, "127.0.0.1:0".to_owned())),
            "order-service ready to serve",
        )
        .await;
        let addr = |l: &str| -> SocketAddr { proc.addr(l).parse().expect("an address") };
        let client = reqwest::Client::builder()
            .http1_only()
            .pool_max_idle_per_host(1)
            .build()
            .expect("a client");
        let url = format!("http://{}/v2/orders?user_id={USER}&limit=10", addr("rest"));
        // Warm: the connection, the allocator, the caches.
        good_median(&client, &url, n).await;
        println!(
            "{:<55} {:>10} {:>10} {:>7}",
            format!("flood ({conns} connections)"),
            "quiet µs",
            "during µs",
            "ratio"
        );
        let mut rows = Vec::new();
        for shape in SHAPES {
            let quiet = good_median(&client, &url, n).await;
            let to = addr(shape.listener);
            let during = match shape.kind {
                Some(kind @ (Kind::Trickle { .. } | Kind::H2HeadTrickle | Kind::H2Pinging)) => {
                    let held = keep_trickling(flood::open(to, conns, kind).await, kind);
                    let m = good_median(&client, &url, n).await;
                    held.abort();
                    m
                }
                Some(kind) => {
                    let held = flood::open(to, conns, kind).await;
                    let m = good_median(&client, &url, n).await;
                    drop(held);
                    m
                }
                None => {
                    let held = flood::h2_streams_without_bodies(to, "/v2/orders", conns, 100).await;
                    // Past the second a waiting body holds its slot, good
                    // requests are answered again (the flood test checks
                    // that); this measures them from then.
                    tokio::time::sleep(Duration::from_millis(1500)).await;
                    let m = good_median(&client, &url, n).await;
                    drop(held);
                    m
                }
            };
            let ratio = during / quiet;
            println!(
                "{:<55} {quiet:>10.0} {during:>10.0} {ratio:>6.2}x",
                shape.name
            );
            rows.push(serde_json::json!({
                "flood": shape.name, "listener": shape.listener, "connections": conns,
                "quiet_p50_us": quiet, "during_p50_us": during, "ratio": ratio,
            }));
            // Let the server see the flood go before the next quiet block.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        if let Ok(path) = std::env::var("FLOOD_OUT") {
            std::fs::write(&path, serde_json::to_vec_pretty(&rows).expect("JSON"))
                .unwrap_or_else(|e| panic!("{path}: {e}"));
        }
        assert!(
            proc.sigterm().await.success(),
            "order-service stops cleanly"
        );
    });
}
