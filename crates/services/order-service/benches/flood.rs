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
//! The floods of held bodies (h2c, gRPC and QUIC connections of 100 streams
//! each, announcing large bodies and sending none or 64 KiB of them) are
//! measured from 1.5 s after they open: past the second a waiting body
//! holds its slot, new work is served (the flood tests check that good
//! requests are answered all along).
//!
//! `cargo bench -p order-service --bench flood`; `FLOOD_CONNS` (connections
//! per flood, default 500), `FLOOD_BODY_CONNS` (connections per flood of
//! partial bodies and per QUIC flood, default 40: 4,000 streams) and `FLOOD_REQUESTS` (good
//! requests per block, default 400) shape it, and `FLOOD_OUT=FILE` writes
//! the table as JSON too. Under `cargo test` it runs once with 20
//! connections (4 for held bodies) and 20 requests, which proves it runs.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use testkit::flood::{self, Kind};

const USER: &str = "00000000-0000-0000-0000-000000000010";

/// How a shape's flood is made.
#[derive(Clone, Copy)]
enum Flood {
    /// TCP connections of one [`Kind`] (trickled on while held where the
    /// kind trickles).
    Tcp(Kind),
    /// h2c connections of 100 streams each, the head of a large body
    /// (1 MB REST, or a gRPC message announcing 1,000,000 bytes) and
    /// `send` bytes of it.
    H2 { grpc: bool, send: usize },
    /// QUIC connections of 100 streams each, announcing 1 MiB bodies and
    /// sending `send` bytes of them.
    Quic { send: usize },
}

impl Flood {
    /// Its connections: `FLOOD_CONNS`, or `FLOOD_BODY_CONNS` for the floods
    /// that send part of their bodies and for QUIC (h2c streams that send
    /// nothing keep the wider count, against the open-stream budget).
    fn connections(self, conns: usize, body_conns: usize) -> usize {
        match self {
            Flood::Tcp(_) | Flood::H2 { send: 0, .. } => conns,
            Flood::H2 { .. } | Flood::Quic { .. } => body_conns,
        }
    }
}

/// One shape of flood, on one listener.
struct Shape {
    name: &'static str,
    listener: &'static str,
    flood: Flood,
}

const SHAPES: &[Shape] = &[
    Shape {
        name: "idle connections",
        listener: "rest",
        flood: Flood::Tcp(Kind::Idle),
    },
    Shape {
        name: "HTTP/1.1 heads trickled",
        listener: "rest",
        flood: Flood::Tcp(Kind::Trickle {
            first: b"GET /v2/orders HTTP/1.1\r\nx-trickle: ",
        }),
    },
    Shape {
        name: "HTTP/2 heads trickled after the preface",
        listener: "rest",
        flood: Flood::Tcp(Kind::H2HeadTrickle),
    },
    Shape {
        name: "HTTP/2 pinging with no call",
        listener: "grpc",
        flood: Flood::Tcp(Kind::H2Pinging),
    },
    Shape {
        name: "raw-TCP frames announced large, 1 byte sent",
        listener: "tcp",
        flood: Flood::Tcp(Kind::LargeFrame { bytes: 1 << 20 }),
    },
    Shape {
        name: "raw-TCP frames sent almost whole (1 MiB)",
        listener: "tcp",
        flood: Flood::Tcp(Kind::AlmostWholeFrame { bytes: 1 << 20 }),
    },
    Shape {
        name: "h2c streams declaring bodies, sending none (×100 each)",
        listener: "rest",
        flood: Flood::H2 {
            grpc: false,
            send: 0,
        },
    },
    Shape {
        name: "h2c streams sending 64 KiB of 1 MB bodies (×100 each)",
        listener: "rest",
        flood: Flood::H2 {
            grpc: false,
            send: 64 << 10,
        },
    },
    Shape {
        name: "gRPC calls sending 64 KiB of 1 MB messages (×100 each)",
        listener: "grpc",
        flood: Flood::H2 {
            grpc: true,
            send: 64 << 10,
        },
    },
    Shape {
        name: "QUIC streams declaring bodies, sending none (×100 each)",
        listener: "h3",
        flood: Flood::Quic { send: 0 },
    },
    Shape {
        name: "QUIC streams sending 64 KiB of 1 MiB bodies (×100 each)",
        listener: "h3",
        flood: Flood::Quic { send: 64 << 10 },
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

/// The median of `n` good requests once a flood of held bodies has
/// settled. Past the second a waiting body holds its slot, good requests
/// are answered again (the flood tests check that they are answered all
/// along); this measures them from then.
async fn after_settling(client: &reqwest::Client, url: &str, n: usize) -> f64 {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    good_median(client, url, n).await
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
    let body_conns = if bench {
        env_or("FLOOD_BODY_CONNS", 40)
    } else {
        4
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
            "{:<58} {:>6} {:>10} {:>10} {:>7}",
            "flood", "conns", "quiet µs", "during µs", "ratio"
        );
        let mut rows = Vec::new();
        for shape in SHAPES {
            let quiet = good_median(&client, &url, n).await;
            let to = addr(shape.listener);
            let connections = shape.flood.connections(conns, body_conns);
            let during = match shape.flood {
                Flood::Tcp(
                    kind @ (Kind::Trickle { .. } | Kind::H2HeadTrickle | Kind::H2Pinging),
                ) => {
                    let held = keep_trickling(flood::open(to, conns, kind).await, kind);
                    let m = good_median(&client, &url, n).await;
                    held.abort();
                    m
                }
                Flood::Tcp(kind) => {
                    let held = flood::open(to, conns, kind).await;
                    let m = good_median(&client, &url, n).await;
                    drop(held);
                    m
                }
                Flood::H2 { grpc, send } => {
                    let partial = if grpc {
                        flood::Partial::grpc("/order.v2.OrderService/ListOrders", send)
                    } else {
                        flood::Partial::rest("/v2/orders", send)
                    };
                    let held = flood::h2_partial_bodies(to, partial, connections, 100).await;
                    let m = after_settling(&client, &url, n).await;
                    drop(held);
                    m
                }
                Flood::Quic { send } => {
                    let tls = tls::ClientTls::unverified().expect("client TLS");
                    let sockets: Vec<quinn::Endpoint> = (0..4)
                        .map(|_| service_kit::h3_client::endpoint(&tls, to).expect("a socket"))
                        .collect();
                    let (held, _) = flood::quic::partial_bodies(
                        &sockets,
                        to,
                        (connections, 100),
                        "/v2/orders",
                        (1 << 20, send),
                        Duration::from_secs(5),
                    )
                    .await;
                    let m = after_settling(&client, &url, n).await;
                    drop(held);
                    m
                }
            };
            let ratio = during / quiet;
            println!(
                "{:<58} {connections:>6} {quiet:>10.0} {during:>10.0} {ratio:>6.2}x",
                shape.name
            );
            rows.push(serde_json::json!({
                "flood": shape.name, "listener": shape.listener, "connections": connections,
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
