//! The hop alone: user-service's adapter for each transport calling a real
//! order-service, in memory, on loopback, and nothing else. There is no k6,
//! no front-end request to user-service and no re-encoding for a client:
//! each adapter (`OrderSource`) is driven directly, as user-service drives it
//! inside a request.
//!
//! order-service runs in this process on a runtime of its own (2 worker
//! threads); the callers run on another (2 worker threads), each caller a
//! task of its own, as user-service makes a call inside a request's task.
//! Each transport gets user-service's default budget of connections (its
//! pool). Two loads: one caller, one call after another; and 8 callers at
//! once (an iteration is then 8 calls, counted as 8 elements).
//!
//! Benchmarks are named `hop/CALLERS/TRANSPORT/ORDERS`.
//! `cargo bench -p user-service --bench hop` (add a filter such as
//! `-- '^hop/1/'` to run some). Under `cargo test` each benchmark runs once,
//! which proves it runs; the lab's `hop` experiment runs it once per round.
//!
//! With `HOP_PAIRS=FILE` set, the binary runs the paired measurement instead
//! of criterion (see [`pairs`]) and writes it to FILE as JSON: each transport
//! timed in short blocks that alternate with blocks of the floor
//! (`tcp-proto`), so that both see the same machine. `HOP_PAIRS_VIAS`
//! (comma-separated; default every transport), `HOP_PAIRS_SIZES` (default
//! `1,1000`), `HOP_PAIRS_BLOCKS` (pairs of blocks per transport and size;
//! default 30) and `HOP_PAIRS_BLOCK_MS` (the aimed length of a block;
//! default 15) shape it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use model::FieldSet;
use user_service::upstream::{OrderQuery, OrderSource, Transport};

#[path = "shared/in_process.rs"]
mod in_process;
use in_process::{order_service, upstreams};

fn query(orders: u32) -> OrderQuery {
    OrderQuery {
        user_id: dataset::fixed_user_id(orders),
        limit: orders,
        fields: FieldSet::ALL,
    }
}

/// One call, checked: a wrong answer is not a figure.
async fn call(source: &dyn OrderSource, q: &OrderQuery) {
    let got = source.list_orders(q).await.expect("the call succeeds");
    assert_eq!(got.len(), q.limit as usize, "every order asked for");
}

fn hop(c: &mut Criterion) {
    let order = order_service();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the callers' runtime");
    let up = rt.block_on(async { upstreams(&order) });
    for callers in [1usize, 8] {
        let mut g = c.benchmark_group(format!("hop/{callers}"));
        g.throughput(Throughput::Elements(callers as u64));
        for orders in [1u32, 1_000] {
            for via in Transport::ALL {
                let source = up.source(via);
                let q = query(orders);
                // Connections opened before the clock starts.
                rt.block_on(call(source.as_ref(), &q));
                g.bench_function(BenchmarkId::new(via.name(), orders), |b| {
                    b.iter_custom(|iters| {
                        rt.block_on(async {
                            let start = Instant::now();
                            let each = |source: Arc<dyn OrderSource>| async move {
                                for _ in 0..iters {
                                    call(source.as_ref(), &q).await;
                                }
                            };
                            // Each caller is a task, as user-service makes a
                            // call inside a request's task: not the thread
                            // blocked on the runtime, which every wake-up
                            // would have to reach from another thread.
                            let tasks: Vec<_> = (0..callers)
                                .map(|_| tokio::spawn(each(source.clone())))
                                .collect();
                            for t in tasks {
                                t.await.expect("a caller");
                            }
                            start.elapsed()
                        })
                    });
                });
            }
        }
        g.finish();
    }
}

/// The paired measurement: one caller (a task), each transport against the
/// floor in alternating blocks of the same number of calls.
///
/// On a shared machine the time of a call drifts by tens of percent over
/// seconds, as other work comes and goes; criterion measures one transport
/// after another, seconds apart, so a ratio of two of its figures carries
/// that drift. Here a block of the floor's calls and a block of the
/// transport's calls are a few milliseconds apart, in the order ABBA (the
/// floor first in even pairs, last in odd ones), so a drift that is slow
/// against a block cancels out of their ratio. A block is as many calls as
/// take about `HOP_PAIRS_BLOCK_MS` on the floor, measured after warm-up.
mod pairs {
    use std::time::{Duration, Instant};

    use serde_json::json;
    use user_service::upstream::{OrderSource, Transport};

    use super::{call, in_process, query};

    fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
        match std::env::var(name) {
            Ok(v) => v
                .parse()
                .unwrap_or_else(|_| panic!("{name}={v} is not a valid value")),
            Err(_) => default,
        }
    }

    fn list(name: &str) -> Option<Vec<String>> {
        let v = std::env::var(name).ok()?;
        Some(v.split(',').map(|s| s.trim().to_owned()).collect())
    }

    async fn block(source: &dyn OrderSource, q: &super::OrderQuery, calls: u32) -> Duration {
        let start = Instant::now();
        for _ in 0..calls {
            call(source, q).await;
        }
        start.elapsed()
    }

    pub fn run(out: &str) {
        let floor = Transport::ALL
            .iter()
            .copied()
            .find(|t| t.name() == transports::TCP_PROTO)
            .expect("the floor is a transport");
        let vias: Vec<Transport> = match list("HOP_PAIRS_VIAS") {
            Some(names) => names
                .iter()
                .map(|n| n.parse().unwrap_or_else(|e| panic!("HOP_PAIRS_VIAS: {e}")))
                .collect(),
            None => Transport::ALL.to_vec(),
        };
        let sizes: Vec<u32> = list("HOP_PAIRS_SIZES")
            .unwrap_or_else(|| vec!["1".into(), "1000".into()])
            .iter()
            .map(|n| n.parse().expect("HOP_PAIRS_SIZES: a number of orders"))
            .collect();
        let blocks: u32 = env("HOP_PAIRS_BLOCKS", 30);
        let block_ms: f64 = env("HOP_PAIRS_BLOCK_MS", 15.0);
        assert!(
            blocks > 0 && block_ms > 0.0,
            "blocks and their length above 0"
        );
        let order = in_process::order_service();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("the callers' runtime");
        let up = rt.block_on(async { in_process::upstreams(&order) });
        let base = up.source(floor);
        let mut results = Vec::new();
        for &orders in &sizes {
            let q = query(orders);
            for &via in vias.iter().filter(|v| **v != floor) {
                let source = up.source(via);
                let base = base.clone();
                // The caller is a task, as in the benchmark.
                let one = rt
                    .block_on(rt.spawn(async move {
                        // Warm-up: connections open, caches filled, and the
                        // floor's time per call, which sets the block.
                        block(source.as_ref(), &q, 20).await;
                        let warm = block(base.as_ref(), &q, 20).await;
                        let per_call = warm.as_secs_f64() / 20.0;
                        let calls = ((block_ms / 1e3 / per_call).round() as u32).clamp(1, 500);
                        let (mut ratios, mut floor_us, mut via_us) = (vec![], vec![], vec![]);
                        for k in 0..blocks {
                            let (f, v) = if k % 2 == 0 {
                                let f = block(base.as_ref(), &q, calls).await;
                                (f, block(source.as_ref(), &q, calls).await)
                            } else {
                                let v = block(source.as_ref(), &q, calls).await;
                                (block(base.as_ref(), &q, calls).await, v)
                            };
                            let us = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(calls);
                            floor_us.push(us(f));
                            via_us.push(us(v));
                            ratios.push(v.as_secs_f64() / f.as_secs_f64());
                        }
                        json!({
                            "via": via.name(),
                            "orders": orders,
                            "calls": calls,
                            "ratios": ratios,
                            "floor_us": floor_us,
                            "via_us": via_us,
                        })
                    }))
                    .expect("a caller");
                eprintln!("pairs: {} at {orders}: {} blocks", via.name(), blocks);
                results.push(one);
            }
        }
        let doc = json!({ "floor": floor.name(), "blocks": blocks, "block_ms": block_ms, "pairs": results });
        std::fs::write(out, serde_json::to_vec_pretty(&doc).expect("JSON"))
            .unwrap_or_else(|e| panic!("writing {out}: {e}"));
        // order-service's thread never ends by itself.
        std::process::exit(0);
    }
}

criterion_group! {
    name = benches;
    // The command line (`--warm-up-time`, `--measurement-time`) overrides
    // these.
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = hop
}
fn main() {
    if let Ok(out) = std::env::var("HOP_PAIRS") {
        pairs::run(&out);
    }
    // What `criterion_main!(benches)` expands to.
    benches();
    Criterion::default().configure_from_args().final_summary();
}
